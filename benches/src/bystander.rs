//! A bystander on the gateway's CPU, for `grid --poll-probe`: a thread at the lowest priority
//! (`SCHED_IDLE`) that does nothing but read its own CPU clock twice in a row, and notes the
//! largest step between two reads. Its own work between them is about 100 ns, so a step of
//! milliseconds is CPU time the machine charged to whatever thread was running: interrupts and
//! their soft halves, or a hypervisor's. The gateway's longest poll (in its CPU time) is read
//! beside it: a poll no longer than the bystander's step in the same window is not one the
//! gateway's code can be shown to have made.
//!
//! Being `SCHED_IDLE`, it runs only when the CPU has nothing else to run, and gives way to the
//! gateway at once when the gateway wakes.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{Context, Result, bail};

use crate::process::CpuList;

/// The running bystander; stopped and joined on drop.
pub(crate) struct Bystander {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

#[derive(Default)]
struct Shared {
    longest_ns: AtomicU64,
    stop: AtomicBool,
}

impl Bystander {
    /// Starts the bystander on `cpu` (the gateway's first CPU).
    pub(crate) fn start(cpu: &CpuList) -> Result<Self> {
        let shared = Arc::new(Shared::default());
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let thread = {
            let (shared, cpu) = (shared.clone(), cpu.clone());
            std::thread::Builder::new()
                .name("bystander".into())
                .spawn(move || {
                    let ready = cpu.pin_current_thread().and_then(|()| idle_priority());
                    let ok = ready.is_ok();
                    let _ = ready_tx.send(ready);
                    if ok {
                        watch(&shared, thread_cpu_ns);
                    }
                })
                .context("start the bystander thread")?
        };
        let bystander = Self {
            shared,
            thread: Some(thread),
        };
        ready_rx
            .recv()
            .context("the bystander thread ended before it started")??;
        Ok(bystander)
    }

    /// The largest step noted since the previous call, and a fresh start.
    pub(crate) fn take_longest(&self) -> Duration {
        Duration::from_nanos(self.shared.longest_ns.swap(0, Ordering::Relaxed))
    }
}

impl Drop for Bystander {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn idle_priority() -> Result<()> {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: `param` is a valid sched_param; pid 0 is the calling thread.
    if unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) } != 0 {
        bail!(
            "cannot give the bystander SCHED_IDLE: {}",
            std::io::Error::last_os_error()
        );
    }
    Ok(())
}

/// Reads `clock` until told to stop, noting the largest step between two reads.
fn watch(shared: &Shared, clock: impl Fn() -> u64) {
    let mut previous = clock();
    // The largest step as last seen in `shared`: only a step above it is written there.
    let mut longest = 0;
    let mut reads: u32 = 0;
    while !shared.stop.load(Ordering::Relaxed) {
        let now = clock();
        let step = now.saturating_sub(previous);
        previous = now;
        if step > longest {
            longest = step;
            shared.longest_ns.fetch_max(step, Ordering::Relaxed);
        }
        reads = reads.wrapping_add(1);
        // A reader's reset is seen within 256 reads (tens of microseconds).
        if reads.is_multiple_of(256) {
            longest = shared.longest_ns.load(Ordering::Relaxed);
        }
    }
}

fn thread_cpu_ns() -> u64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid, writable timespec for the call.
    if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) } != 0 {
        return 0;
    }
    u64::try_from(now.tv_sec)
        .unwrap_or(0)
        .saturating_mul(1_000_000_000)
        .saturating_add(u64::try_from(now.tv_nsec).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    /// A clock that steps by `steps` in turn and stops the watch after the last; at read
    /// `reset_at` it takes the noted step as a reader would.
    fn scripted<'a>(
        shared: &'a Shared,
        steps: &'a [u64],
        reset_at: Option<usize>,
    ) -> impl Fn() -> u64 + 'a {
        let (at, read) = (Cell::new(0u64), Cell::new(0usize));
        move || {
            let i = read.get();
            read.set(i + 1);
            if let Some(step) = i.checked_sub(1).and_then(|i| steps.get(i)) {
                at.set(at.get() + step);
            }
            if Some(i) == reset_at {
                shared.longest_ns.store(0, Ordering::Relaxed);
            }
            if i >= steps.len() {
                shared.stop.store(true, Ordering::Relaxed);
            }
            at.get()
        }
    }

    #[test]
    fn the_largest_step_between_two_reads_is_noted() {
        let shared = Shared::default();
        watch(
            &shared,
            scripted(&shared, &[80, 120, 9_650_000, 90, 110], None),
        );
        assert_eq!(shared.longest_ns.load(Ordering::Relaxed), 9_650_000);
    }

    #[test]
    fn after_a_reader_takes_the_step_a_smaller_one_is_noted_again() {
        let shared = Shared::default();
        let mut steps = vec![9_650_000];
        steps.extend([100; 300]);
        steps.push(1_450_000);
        steps.extend([100; 10]);
        watch(&shared, scripted(&shared, &steps, Some(5)));
        assert_eq!(shared.longest_ns.load(Ordering::Relaxed), 1_450_000);
    }

    /// The first CPU this test may run on (a container's CPU set need not hold CPU 0).
    fn a_cpu_of_ours() -> CpuList {
        // SAFETY: cpu_set_t is a plain bit array; all zeroes is the empty set.
        let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        // SAFETY: `set` is a valid, writable cpu_set_t of the size passed; pid 0 is this thread.
        let rc = unsafe { libc::sched_getaffinity(0, size_of::<libc::cpu_set_t>(), &mut set) };
        assert_eq!(rc, 0, "{}", std::io::Error::last_os_error());
        let setsize = usize::try_from(libc::CPU_SETSIZE).unwrap();
        // SAFETY: every index is below CPU_SETSIZE.
        let cpu = (0..setsize).find(|&cpu| unsafe { libc::CPU_ISSET(cpu, &set) });
        cpu.unwrap().to_string().parse().unwrap()
    }

    #[test]
    fn a_bystander_starts_on_a_cpu_and_stops_when_dropped() {
        let bystander = Bystander::start(&a_cpu_of_ours()).unwrap();
        let _ = bystander.take_longest();
        drop(bystander);
    }
}
