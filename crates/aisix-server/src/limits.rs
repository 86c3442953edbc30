//! Process limits a gateway needs: enough file descriptors for every client connection plus its
//! upstream connection.

/// Raises the soft `RLIMIT_NOFILE` to the hard limit, as servers that hold one descriptor per
/// connection do; returns the limit now in force.
#[cfg(unix)]
pub(crate) fn raise_nofile() -> Option<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we own; no other precondition.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return None;
    }
    if limit.rlim_cur < limit.rlim_max {
        let raised = libc::rlimit {
            rlim_cur: limit.rlim_max,
            rlim_max: limit.rlim_max,
        };
        // SAFETY: setrlimit reads the struct we own; no other precondition.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            limit = raised;
        }
    }
    Some(limit.rlim_cur)
}

#[cfg(not(unix))]
pub(crate) fn raise_nofile() -> Option<u64> {
    None
}
