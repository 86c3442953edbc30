//! CPU affinity for `proxy.pin_workers`: which CPU each `tpc-N` thread is pinned to (the N-th
//! of the CPUs the process may run on), and pinning the calling thread. Linux only.

use std::io;

/// The CPU for each of `workers` workers: worker N gets the N-th allowed CPU, wrapping around
/// when there are more workers than CPUs.
pub(crate) fn worker_cpus(workers: usize) -> io::Result<Vec<usize>> {
    let allowed = allowed_cpus()?;
    if allowed.is_empty() {
        return Err(io::Error::other("the process may run on no CPU"));
    }
    Ok((0..workers).map(|n| allowed[n % allowed.len()]).collect())
}

/// `tpc-0→cpu 2, tpc-1→cpu 3`, for the startup log.
pub(crate) fn describe(names: &[String], cpus: &[usize]) -> String {
    names
        .iter()
        .zip(cpus)
        .map(|(name, cpu)| format!("{name}→cpu {cpu}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The CPUs in the calling thread's affinity mask (the process's, before any pinning).
#[cfg(target_os = "linux")]
fn allowed_cpus() -> io::Result<Vec<usize>> {
    // SAFETY: cpu_set_t is a plain bit array; all zeroes is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a valid, writable cpu_set_t of the size passed; pid 0 is this thread.
    let rc = unsafe { libc::sched_getaffinity(0, size_of::<libc::cpu_set_t>(), &mut set) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    let max = usize::try_from(libc::CPU_SETSIZE).unwrap_or(0);
    // SAFETY: every index is below CPU_SETSIZE, the size of `set`.
    Ok((0..max)
        .filter(|&cpu| unsafe { libc::CPU_ISSET(cpu, &set) })
        .collect())
}

#[cfg(not(target_os = "linux"))]
fn allowed_cpus() -> io::Result<Vec<usize>> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "pinning threads to CPUs is supported on Linux only",
    ))
}

/// Pins the calling thread to `cpu`.
#[cfg(target_os = "linux")]
pub(crate) fn pin_current_thread(cpu: usize) -> io::Result<()> {
    if cpu >= usize::try_from(libc::CPU_SETSIZE).unwrap_or(0) {
        return Err(io::Error::other(format!("CPU {cpu} is out of range")));
    }
    // SAFETY: as in `allowed_cpus`.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `cpu` was checked against CPU_SETSIZE above.
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: `set` is a valid cpu_set_t of the size passed; pid 0 is this thread.
    let rc = unsafe { libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn pin_current_thread(_cpu: usize) -> io::Result<()> {
    allowed_cpus().map(drop)
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    #[test]
    fn workers_take_the_allowed_cpus_in_order_and_wrap_around() {
        let allowed = allowed_cpus().unwrap();
        assert!(!allowed.is_empty());
        let cpus = worker_cpus(allowed.len() + 1).unwrap();
        assert_eq!(cpus[..allowed.len()], allowed[..]);
        assert_eq!(cpus[allowed.len()], allowed[0]);
    }

    #[test]
    fn a_pinned_thread_runs_on_its_cpu_only() {
        let cpu = *allowed_cpus().unwrap().last().unwrap();
        let seen = std::thread::spawn(move || {
            pin_current_thread(cpu).unwrap();
            allowed_cpus().unwrap()
        })
        .join()
        .unwrap();
        assert_eq!(seen, [cpu]);
    }

    #[test]
    fn the_mapping_is_described_per_worker() {
        let names = ["tpc-0".to_owned(), "tpc-1".to_owned()];
        assert_eq!(describe(&names, &[2, 3]), "tpc-0→cpu 2, tpc-1→cpu 3");
    }
}
