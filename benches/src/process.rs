//! The processes the harness starts and the CPUs things run on: every child gets its own process
//! group, an optional CPU list, `PR_SET_PDEATHSIG` and is stopped by PID on drop. Ctrl-C only
//! raises a flag that the harness's waits poll, so cleanup runs through ordinary drops.

use std::fmt;
use std::io;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

/// A CPU list in `taskset -c` syntax: `1`, `0-3,8`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpuList(Vec<usize>);

impl CpuList {
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// The list's first CPU alone.
    pub fn first(&self) -> Option<CpuList> {
        self.0.first().map(|&cpu| CpuList(vec![cpu]))
    }

    fn cpu_set(&self) -> libc::cpu_set_t {
        // SAFETY: cpu_set_t is a plain bit array; all zeroes is the empty set.
        let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        for &cpu in &self.0 {
            // SAFETY: `cpu` was checked against CPU_SETSIZE when the list was parsed.
            unsafe { libc::CPU_SET(cpu, &mut set) };
        }
        set
    }

    /// Pins the thread `tid` (of any process; a process's main thread has its pid as its id)
    /// to these CPUs, leaving its other threads where they are.
    pub fn pin_thread(&self, tid: u32) -> Result<()> {
        let set = self.cpu_set();
        let Ok(tid) = libc::pid_t::try_from(tid) else {
            bail!("thread id {tid} out of range");
        };
        // SAFETY: `set` is a valid cpu_set_t of the size passed.
        let rc = unsafe { libc::sched_setaffinity(tid, size_of::<libc::cpu_set_t>(), &set) };
        if rc != 0 {
            bail!(
                "cannot pin thread {tid} to CPUs {self}: {}",
                io::Error::last_os_error()
            );
        }
        Ok(())
    }

    /// Pins the calling thread to these CPUs.
    pub fn pin_current_thread(&self) -> Result<()> {
        let set = self.cpu_set();
        // SAFETY: `set` is a valid cpu_set_t of the size passed; pid 0 is the calling thread.
        let rc = unsafe { libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set) };
        if rc != 0 {
            bail!("cannot pin to CPUs {self}: {}", io::Error::last_os_error());
        }
        Ok(())
    }
}

impl FromStr for CpuList {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let max = usize::try_from(libc::CPU_SETSIZE).unwrap_or(1024);
        let mut cpus = Vec::new();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (first, last) = match part.split_once('-') {
                Some((a, b)) => (a.trim(), b.trim()),
                None => (part, part),
            };
            let parse = |v: &str| {
                v.parse::<usize>()
                    .map_err(|_| format!("{part:?} is not a CPU number or range"))
            };
            let (first, last) = (parse(first)?, parse(last)?);
            if first > last || last >= max {
                return Err(format!("{part:?} is not a valid CPU range"));
            }
            cpus.extend(first..=last);
        }
        cpus.sort_unstable();
        cpus.dedup();
        if cpus.is_empty() {
            return Err("an empty CPU list".into());
        }
        Ok(CpuList(cpus))
    }
}

impl fmt::Display for CpuList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut i = 0;
        let mut first = true;
        while i < self.0.len() {
            let start = self.0[i];
            let mut end = start;
            while i + 1 < self.0.len() && self.0[i + 1] == end + 1 {
                i += 1;
                end = self.0[i];
            }
            if !first {
                f.write_str(",")?;
            }
            first = false;
            if start == end {
                write!(f, "{start}")?;
            } else {
                write!(f, "{start}-{end}")?;
            }
            i += 1;
        }
        Ok(())
    }
}

/// shared: written by the signal handler, read by every wait in the harness.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_interrupt(_signal: libc::c_int) {
    if INTERRUPTED.swap(true, Ordering::SeqCst) {
        // A second Ctrl-C: leave now; the children die with us through PR_SET_PDEATHSIG.
        // SAFETY: _exit is async-signal-safe.
        unsafe { libc::_exit(130) };
    }
}

/// Turns SIGINT, SIGTERM and SIGHUP into the flag [`check_interrupted`] reads.
pub fn install_interrupt_handler() {
    for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: the handler only touches an atomic (and _exit), both async-signal-safe.
        unsafe { libc::signal(signal, on_interrupt as *const () as libc::sighandler_t) };
    }
}

pub fn check_interrupted() -> Result<()> {
    if INTERRUPTED.load(Ordering::SeqCst) {
        bail!("interrupted");
    }
    Ok(())
}

/// Sleeps, waking every 50 ms to notice Ctrl-C.
pub fn sleep(duration: Duration) -> Result<()> {
    let deadline = Instant::now() + duration;
    loop {
        check_interrupted()?;
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(());
        }
        std::thread::sleep(left.min(Duration::from_millis(50)));
    }
}

/// Raises the soft open-files limit to the hard one (children inherit it).
pub fn raise_nofile_limit() {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a valid rlimit struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 && limit.rlim_cur < limit.rlim_max
        {
            limit.rlim_cur = limit.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
        }
    }
}

/// `which`: the first executable named `name` on PATH (or in the sbin folders).
pub fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin", "/usr/local/sbin"].map(PathBuf::from))
        .map(|dir| dir.join(name))
        .find(|candidate| is_executable(candidate))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    path.metadata()
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// `command` run under `wrap` (a tool and its options, e.g. `valgrind --tool=cachegrind`): the
/// wrapper's program with its arguments, then the command's program and arguments. Environment
/// and working folder are to be set on the result. An empty `wrap` returns `command` as it is.
pub fn wrapped(command: Command, wrap: &[std::ffi::OsString]) -> Command {
    let Some((tool, options)) = wrap.split_first() else {
        return command;
    };
    let mut outer = Command::new(tool);
    outer
        .args(options)
        .arg(command.get_program())
        .args(command.get_args());
    outer
}

/// A child process the harness owns: stopped (SIGTERM, then SIGKILL) when dropped.
pub struct Child {
    name: String,
    inner: std::process::Child,
    exited: Option<ExitStatus>,
}

impl Child {
    /// Spawns `command` in its own process group (so Ctrl-C reaches only the harness), pinned to
    /// `cpus`, and killed by the kernel if the harness dies.
    pub fn spawn(name: &str, mut command: Command, cpus: Option<&CpuList>) -> Result<Child> {
        let set = cpus.map(CpuList::cpu_set);
        // SAFETY: the closure runs between fork and exec and makes only async-signal-safe calls.
        unsafe {
            command.pre_exec(move || {
                if libc::setpgid(0, 0) != 0
                    || libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0
                {
                    return Err(io::Error::last_os_error());
                }
                if let Some(set) = &set
                    && libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), set) != 0
                {
                    return Err(io::Error::last_os_error());
                }
                Ok(())
            })
        };
        let inner = command
            .spawn()
            .with_context(|| format!("cannot start {name} ({:?})", command.get_program()))?;
        Ok(Child {
            name: name.to_owned(),
            inner,
            exited: None,
        })
    }

    pub fn pid(&self) -> u32 {
        self.inner.id()
    }

    pub fn inner_mut(&mut self) -> &mut std::process::Child {
        &mut self.inner
    }

    /// The exit status, if the process has exited.
    pub fn try_exit(&mut self) -> Option<ExitStatus> {
        if self.exited.is_none() {
            self.exited = self.inner.try_wait().ok().flatten();
        }
        self.exited
    }

    /// An error naming the child if it is no longer running.
    pub fn ensure_running(&mut self) -> Result<()> {
        match self.try_exit() {
            Some(status) => bail!("{} exited unexpectedly ({status})", self.name),
            None => Ok(()),
        }
    }

    pub fn signal(&self, signal: libc::c_int) {
        if let Ok(pid) = libc::pid_t::try_from(self.inner.id()) {
            // SAFETY: kill(2) on our own child's pid.
            unsafe { libc::kill(pid, signal) };
        }
    }

    /// Waits up to `timeout` for the child to exit on its own.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.try_exit() {
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// SIGTERM, up to `grace` to exit, then SIGKILL.
    pub fn stop(&mut self, grace: Duration) -> Option<ExitStatus> {
        if self.try_exit().is_some() {
            return self.exited;
        }
        self.signal(libc::SIGTERM);
        if let Some(status) = self.wait_exit(grace) {
            return Some(status);
        }
        eprintln!("[bench] {} did not stop on SIGTERM; killing it", self.name);
        let _ = self.inner.kill();
        self.exited = self.inner.wait().ok();
        self.exited
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        self.stop(Duration::from_secs(5));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_parse_like_taskset_and_print_as_ranges() {
        let list: CpuList = "3,0-1, 8".parse().unwrap();
        assert_eq!(list.0, vec![0, 1, 3, 8]);
        assert_eq!(list.to_string(), "0-1,3,8");
        assert!("2-1".parse::<CpuList>().is_err());
        assert!("x".parse::<CpuList>().is_err());
        assert!("".parse::<CpuList>().is_err());
    }
}
