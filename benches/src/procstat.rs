//! Counters read from `/proc`: CPU time, context switches and memory of a set of processes, and
//! the TCP sockets towards a port. Sampled at window edges; the harness takes deltas.

use std::collections::HashSet;
use std::fs;

use anyhow::{Context, Result};

/// One reading of a set of processes, summed over the processes and all their threads.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sample {
    /// utime + stime of the processes (all threads, including those that already exited).
    pub cpu_ticks: u64,
    /// voluntary + nonvoluntary context switches of the live threads.
    pub ctx_switches: u64,
    pub rss_kib: u64,
    pub hwm_kib: u64,
}

/// Reads `/proc/<pid>/stat`, `/proc/<pid>/status` and every `/proc/<pid>/task/*/status`.
pub fn sample(pids: &[u32]) -> Result<Sample> {
    let mut total = Sample::default();
    for &pid in pids {
        let stat = fs::read_to_string(format!("/proc/{pid}/stat"))
            .with_context(|| format!("cannot read /proc/{pid}/stat (did the process exit?)"))?;
        total.cpu_ticks += parse_stat_cpu_ticks(&stat)
            .with_context(|| format!("unexpected /proc/{pid}/stat: {stat}"))?;
        let status = fs::read_to_string(format!("/proc/{pid}/status"))
            .with_context(|| format!("cannot read /proc/{pid}/status"))?;
        total.rss_kib += status_field(&status, "VmRSS:").unwrap_or(0);
        total.hwm_kib += status_field(&status, "VmHWM:").unwrap_or(0);
        if let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) {
            for task in tasks.flatten() {
                // A thread may exit between the listing and the read.
                if let Ok(status) = fs::read_to_string(task.path().join("status")) {
                    total.ctx_switches += status_field(&status, "voluntary_ctxt_switches:")
                        .unwrap_or(0)
                        + status_field(&status, "nonvoluntary_ctxt_switches:").unwrap_or(0);
                }
            }
        }
    }
    Ok(total)
}

/// utime + stime (fields 14 and 15) of a `/proc/<pid>/stat` line. The command name in field 2
/// may contain spaces and parentheses, so fields are counted from the last `)`.
pub fn parse_stat_cpu_ticks(stat: &str) -> Option<u64> {
    let after_comm = &stat[stat.rfind(')')? + 1..];
    let mut fields = after_comm.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(utime + stime)
}

/// The parent pid (field 4) of a `/proc/<pid>/stat` line.
fn parse_stat_ppid(stat: &str) -> Option<u32> {
    let after_comm = &stat[stat.rfind(')')? + 1..];
    after_comm.split_whitespace().nth(1)?.parse().ok()
}

fn status_field(status: &str, name: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with(name))?;
    line[name.len()..].split_whitespace().next()?.parse().ok()
}

/// The processes whose parent is `pid` (nginx workers under their master).
pub fn children_of(pid: u32) -> Vec<u32> {
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut children: Vec<u32> = entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&child| {
            fs::read_to_string(format!("/proc/{child}/stat"))
                .ok()
                .and_then(|s| parse_stat_ppid(&s))
                == Some(pid)
        })
        .collect();
    children.sort_unstable();
    children
}

/// Microseconds per clock tick (`sysconf(_SC_CLK_TCK)`).
pub fn us_per_tick() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    1e6 / if hz > 0 { hz as f64 } else { 100.0 }
}

/// TCP sockets with one end on a port.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TcpSockets {
    pub established: usize,
    /// Sockets in TIME_WAIT, each named by its `local remote` address pair, so that two readings
    /// tell which appeared in between (a TIME_WAIT socket lasts 60 s, longer than a window).
    pub time_wait: HashSet<String>,
}

/// The sockets in `/proc/net/tcp` and `/proc/net/tcp6` with `port` on either end.
pub fn tcp_towards(port: u16) -> TcpSockets {
    let mut sockets = TcpSockets::default();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        if let Ok(text) = fs::read_to_string(table) {
            let found = parse_tcp_table(&text, port);
            sockets.established += found.established;
            sockets.time_wait.extend(found.time_wait);
        }
    }
    sockets
}

/// Parses a `/proc/net/tcp` table (the header line first; `local rem st` as `ADDR:PORT` in hex
/// and the state in hex: 01 established, 06 time-wait).
pub fn parse_tcp_table(text: &str, port: u16) -> TcpSockets {
    let mut sockets = TcpSockets::default();
    for line in text.lines().skip(1) {
        let mut fields = line.split_whitespace().skip(1);
        let (Some(local), Some(remote), Some(state)) =
            (fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        let port_of = |addr: &str| {
            addr.rsplit_once(':')
                .and_then(|(_, p)| u16::from_str_radix(p, 16).ok())
        };
        if port_of(local) != Some(port) && port_of(remote) != Some(port) {
            continue;
        }
        match state {
            "01" => sockets.established += 1,
            "06" => {
                sockets.time_wait.insert(format!("{local} {remote}"));
            }
            _ => {}
        }
    }
    sockets
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_cpu_is_utime_plus_stime_even_with_odd_command_names() {
        let stat = "4242 (tpc-0 (x) y) S 1 4242 4242 0 -1 4194560 1234 0 0 0 250 75 0 0 20 0 3 0 \
                    100 2000000 500 18446744073709551615 1 1 0 0 0 0 0 4096 0 0 0 0 17 0 0 0 0 0 0";
        assert_eq!(parse_stat_cpu_ticks(stat), Some(325));
        assert_eq!(parse_stat_ppid(stat), Some(1));
    }

    #[test]
    fn status_fields_are_read_in_kib() {
        let status = "Name:\taisix\nVmHWM:\t   20480 kB\nVmRSS:\t   10240 kB\nvoluntary_ctxt_switches:\t7\nnonvoluntary_ctxt_switches:\t3\n";
        assert_eq!(status_field(status, "VmRSS:"), Some(10240));
        assert_eq!(status_field(status, "VmHWM:"), Some(20480));
        assert_eq!(status_field(status, "voluntary_ctxt_switches:"), Some(7));
        assert_eq!(status_field(status, "nonvoluntary_ctxt_switches:"), Some(3));
    }

    #[test]
    fn tcp_table_counts_time_wait_and_established_towards_a_port_on_either_end() {
        // Port 0x1F90 = 8080; 0x0BB8 = 3000.
        let table = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1 0 100 0 0 10 0\n\
   1: 0100007F:C350 0100007F:1F90 06 00000000:00000000 03:00000F9E 00000000     0        0 0 3 0\n\
   2: 0100007F:C351 0100007F:1F90 06 00000000:00000000 03:00000F9E 00000000     0        0 0 3 0\n\
   3: 0100007F:1F90 0100007F:C352 01 00000000:00000000 00:00000000 00000000     0        0 2 1 0 20 4 30 10 -1\n\
   4: 0100007F:C353 0100007F:0BB8 06 00000000:00000000 03:00000F9E 00000000     0        0 0 3 0\n";
        let mock = parse_tcp_table(table, 8080);
        assert_eq!(mock.established, 1);
        assert_eq!(mock.time_wait.len(), 2);
        assert!(mock.time_wait.contains("0100007F:C351 0100007F:1F90"));
        let other = parse_tcp_table(table, 3000);
        assert_eq!(other.established, 0);
        assert_eq!(other.time_wait.len(), 1);
    }

    #[test]
    fn tcp6_addresses_parse_the_port_after_the_last_colon() {
        let table = "  sl  local_address                         remote_address                        st\n\
   0: 00000000000000000000000001000000:D431 00000000000000000000000001000000:1F90 06 0\n";
        assert_eq!(parse_tcp_table(table, 8080).time_wait.len(), 1);
    }

    #[test]
    fn sampling_this_process_sees_threads_and_memory() {
        let sample = sample(&[std::process::id()]).unwrap();
        assert!(sample.rss_kib > 0);
        assert!(sample.hwm_kib >= sample.rss_kib);
        assert!(sample.ctx_switches > 0);
    }
}
