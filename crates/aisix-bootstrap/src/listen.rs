//! Listening sockets, all bound before any worker accepts. Thread-per-core binds one
//! `SO_REUSEPORT` socket per worker after a plain probe bind, so an address another process holds
//! is a loud failure instead of a silent split of its traffic; the shared runtime binds one.

use std::io;
use std::net::{SocketAddr, TcpListener};

use socket2::{Domain, Protocol, Socket, Type};

use crate::plan::{Mode, ServingPlan};

/// Listeners ready to hand to workers: one per worker (thread-per-core) or one (shared).
#[derive(Debug)]
pub struct BoundListeners {
    /// The bound address (the real port when `proxy.addr` asked for port 0).
    pub addr: SocketAddr,
    pub(crate) listeners: Vec<TcpListener>,
}

#[derive(Debug, thiserror::Error)]
pub enum BindError {
    #[error(
        "address {addr} is already in use (another aisix or another program is listening there)"
    )]
    InUse { addr: SocketAddr },
    #[error("cannot listen on {addr}: {source}")]
    Io {
        addr: SocketAddr,
        #[source]
        source: io::Error,
    },
}

impl BindError {
    fn from_io(addr: SocketAddr, source: io::Error) -> Self {
        if source.kind() == io::ErrorKind::AddrInUse {
            BindError::InUse { addr }
        } else {
            BindError::Io { addr, source }
        }
    }
}

/// Binds every listener the plan needs.
pub fn bind(plan: &ServingPlan) -> Result<BoundListeners, BindError> {
    let addr = plan.addr;
    match plan.mode {
        Mode::Shared => {
            let listener =
                listen(addr, false, plan.backlog).map_err(|e| BindError::from_io(addr, e))?;
            let addr = listener
                .local_addr()
                .map_err(|e| BindError::from_io(addr, e))?;
            Ok(BoundListeners {
                addr,
                listeners: vec![listener],
            })
        }
        Mode::ThreadPerCore => {
            let mut listeners = Vec::with_capacity(plan.workers.get());
            let bound = if addr.port() == 0 {
                // The kernel picks a free port for the first socket; the rest join it.
                let first =
                    listen(addr, true, plan.backlog).map_err(|e| BindError::from_io(addr, e))?;
                let bound = first
                    .local_addr()
                    .map_err(|e| BindError::from_io(addr, e))?;
                listeners.push(first);
                bound
            } else {
                probe(addr).map_err(|e| BindError::from_io(addr, e))?;
                addr
            };
            while listeners.len() < plan.workers.get() {
                listeners.push(
                    listen(bound, true, plan.backlog).map_err(|e| BindError::from_io(bound, e))?,
                );
            }
            Ok(BoundListeners {
                addr: bound,
                listeners,
            })
        }
    }
}

/// A bind without `SO_REUSEPORT` fails if any socket listens on `addr`, including another
/// process's reuseport group, which would otherwise silently share our traffic.
fn probe(addr: SocketAddr) -> io::Result<()> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    socket.bind(&addr.into())
}

fn listen(addr: SocketAddr, reuse_port: bool, backlog: u32) -> io::Result<TcpListener> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    // Only Linux spreads connections across a reuseport group; elsewhere the shared runtime is
    // the default and thread-per-core is best effort.
    #[cfg(unix)]
    if reuse_port {
        socket.set_reuse_port(true)?;
    }
    #[cfg(not(unix))]
    let _ = reuse_port;
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    socket.listen(i32::try_from(backlog).unwrap_or(i32::MAX))?;
    Ok(socket.into())
}

#[cfg(test)]
mod tests {
    use std::num::NonZeroUsize;

    use super::*;
    use crate::plan::WorkersSource;

    fn plan(mode: Mode, workers: usize, addr: SocketAddr) -> ServingPlan {
        ServingPlan {
            mode,
            workers: NonZeroUsize::new(workers).unwrap(),
            workers_source: WorkersSource::Configured,
            addr,
            backlog: 16,
            pin_workers: false,
            balance: aisix_config::Balance::ReusePort,
        }
    }

    #[test]
    fn port_zero_binds_every_worker_on_one_port() {
        let bound = bind(&plan(
            Mode::ThreadPerCore,
            3,
            "127.0.0.1:0".parse().unwrap(),
        ))
        .unwrap();
        assert_ne!(bound.addr.port(), 0);
        assert_eq!(bound.listeners.len(), 3);
        for listener in &bound.listeners {
            assert_eq!(listener.local_addr().unwrap(), bound.addr);
        }
    }

    #[test]
    fn probe_refuses_an_address_held_by_another_listener() {
        let holder = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = holder.local_addr().unwrap();
        let err = bind(&plan(Mode::ThreadPerCore, 2, addr)).unwrap_err();
        assert!(
            matches!(err, BindError::InUse { addr: a } if a == addr),
            "{err}"
        );
        assert!(err.to_string().contains(&addr.to_string()));
    }

    #[test]
    fn probe_refuses_another_reuseport_group() {
        let first = bind(&plan(
            Mode::ThreadPerCore,
            2,
            "127.0.0.1:0".parse().unwrap(),
        ))
        .unwrap();
        let err = bind(&plan(Mode::ThreadPerCore, 2, first.addr)).unwrap_err();
        assert!(matches!(err, BindError::InUse { .. }), "{err}");
    }

    #[test]
    fn shared_mode_binds_one_listener() {
        let bound = bind(&plan(Mode::Shared, 4, "127.0.0.1:0".parse().unwrap())).unwrap();
        assert_eq!(bound.listeners.len(), 1);
    }
}
