//! System calls per request: `strace -f -c` attached to every thread of the processes under test
//! for one window, then detached (SIGTERM makes strace detach and write its summary).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use crate::process::Child;

/// Calls per system call name, most frequent first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SyscallCounts {
    pub total: u64,
    pub by_name: Vec<(String, u64)>,
}

/// A running `strace -c`.
pub struct Trace {
    child: Child,
    summary: PathBuf,
}

impl Trace {
    /// Attaches to `pids` (all their threads) and returns once strace reports every process
    /// attached, so that the caller's window starts with the tracing.
    pub fn attach(strace: &Path, pids: &[u32], summary: &Path) -> Result<Trace> {
        let log = summary.with_extension("log");
        let mut command = Command::new(strace);
        command.args(["-f", "-c", "-o"]).arg(summary);
        for pid in pids {
            command.arg("-p").arg(pid.to_string());
        }
        command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log)?);
        let mut child = Child::spawn("strace", command, None)?;
        // strace writes "Process N attached [with M threads]" once per -p.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            if let Some(status) = child.try_exit() {
                bail!("strace exited at once ({status}): {}", text.trim());
            }
            if text.matches(" attached").count() >= pids.len() {
                break;
            }
            if Instant::now() > deadline {
                bail!("strace did not attach within 10 s: {}", text.trim());
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        Ok(Trace {
            child,
            summary: summary.to_path_buf(),
        })
    }

    /// Detaches and reads the summary.
    pub fn finish(mut self) -> Result<SyscallCounts> {
        self.child.stop(Duration::from_secs(20));
        let text = std::fs::read_to_string(&self.summary)
            .with_context(|| format!("read the strace summary {}", self.summary.display()))?;
        parse_summary(&text)
    }
}

/// Parses the table `strace -c` writes: after the dashed line, one row per system call ending in
/// its name, with `% time, seconds, usecs/call, calls[, errors], syscall`; the `total` row is
/// recomputed rather than trusted.
pub fn parse_summary(text: &str) -> Result<SyscallCounts> {
    let mut rows = Vec::new();
    let mut in_table = false;
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with("------") {
            in_table = true;
            continue;
        }
        if !in_table || line.is_empty() {
            continue;
        }
        let fields: Vec<&str> = line.split_whitespace().collect();
        let Some(&name) = fields.last() else { continue };
        if name == "total" || fields.len() < 5 {
            continue;
        }
        let calls: u64 = fields[3]
            .parse()
            .with_context(|| format!("unexpected strace summary row: {line}"))?;
        rows.push((name.to_owned(), calls));
    }
    rows.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    Ok(SyscallCounts {
        total: rows.iter().map(|(_, n)| n).sum(),
        by_name: rows,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_rows_are_counted_with_or_without_an_errors_column() {
        let text = "\
strace: Process 123 attached with 3 threads
% time     seconds  usecs/call     calls    errors syscall
------ ----------- ----------- --------- --------- ----------------
 52.10    0.010000           2      4000           sendto
 30.00    0.006000           1      4000      1200 recvfrom
 10.00    0.002000           1      1500           epoll_wait
  0.10    0.000010          10         1           getrandom
------ ----------- ----------- --------- --------- ----------------
100.00    0.018010           2      9501      1200 total
";
        let counts = parse_summary(text).unwrap();
        assert_eq!(counts.total, 9501);
        assert_eq!(
            counts.by_name[..2],
            [("recvfrom".to_owned(), 4000), ("sendto".to_owned(), 4000)]
        );
        assert_eq!(counts.by_name[3], ("getrandom".to_owned(), 1));
    }

    #[test]
    fn an_empty_summary_is_zero_calls() {
        let text = "% time     seconds  usecs/call     calls    errors syscall\n------ ----------- ----------- --------- --------- ----------------\n------ ----------- ----------- --------- --------- ----------------\n100.00    0.000000           0         0           total\n";
        assert_eq!(parse_summary(text).unwrap(), SyscallCounts::default());
    }
}
