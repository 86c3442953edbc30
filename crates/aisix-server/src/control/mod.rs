//! The control thread's duties besides supervision: stop signals, reloads (SIGHUP and the
//! resources watch), and systemd's notify protocol with its watchdog. Workers run none of it.

pub(crate) mod reload;
pub(crate) mod signals;
pub(crate) mod systemd;
pub(crate) mod watch;
