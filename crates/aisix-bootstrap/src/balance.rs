//! Balanced accept (`proxy.balance: handoff`): each thread-per-core worker's count of live
//! connections, and the rule that sends a socket its worker just accepted to the least-loaded
//! worker instead. The kernel's `SO_REUSEPORT` hash still picks the accepting worker; this only
//! corrects its choice. TLS and HTTP start on the worker that serves the connection.
//!
//! The rule: a worker serving `mine` connections hands a new one to the least-loaded worker,
//! serving `least`, when `mine >= least + 1 + least / 8`. Below eight connections per worker
//! (where the hash is most uneven) that evens the counts to within one; above, a skew of up to
//! an eighth is left alone, so a busy gateway does not pay a cross-thread wake-up for noise. A
//! handed-over connection is never handed on, so nothing ping-pongs. Cost: one load of each
//! worker's count per accepted connection, and for a handed one a channel send and a wake-up
//! of the receiving worker.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

use tokio::sync::mpsc;

/// How many accepted sockets may wait for one worker before its peers serve them themselves.
const INBOX: usize = 1024;

/// One worker's live-connection count, alone on its cache lines: its owner writes it on every
/// accept and close while its peers read it.
#[repr(align(128))]
#[derive(Debug, Default)]
struct Count(AtomicUsize);

/// Live connections per worker.
// shared: each worker reads every count to find the least-loaded one when it accepts.
#[derive(Debug, Clone)]
pub(crate) struct Loads(Arc<[Count]>);

impl Loads {
    pub(crate) fn new(workers: usize) -> Self {
        Self((0..workers).map(|_| Count::default()).collect())
    }

    /// Counts one connection on `worker` until the returned slot drops.
    pub(crate) fn hold(&self, worker: usize) -> Slot {
        if let Some(count) = self.0.get(worker) {
            count.0.fetch_add(1, Relaxed);
        }
        Slot {
            loads: self.clone(),
            worker,
        }
    }

    fn get(&self, worker: usize) -> usize {
        self.0.get(worker).map_or(0, |count| count.0.load(Relaxed))
    }

    /// The worker `me`'s new connection should go to, if not `me` itself.
    fn target(&self, me: usize) -> Option<usize> {
        let mine = self.get(me);
        let (least_worker, least) = (0..self.0.len())
            .filter(|&w| w != me)
            .map(|w| (w, self.get(w)))
            .min_by_key(|&(_, load)| load)?;
        should_hand_off(mine, least).then_some(least_worker)
    }
}

/// The rule in the module doc: hand off when `mine >= least + 1 + least / 8`.
fn should_hand_off(mine: usize, least: usize) -> bool {
    mine >= least + 1 + least / 8
}

/// One live connection in its worker's count.
#[derive(Debug)]
pub(crate) struct Slot {
    loads: Loads,
    worker: usize,
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Some(count) = self.loads.0.get(self.worker) {
            count.0.fetch_sub(1, Relaxed);
        }
    }
}

/// A socket handed to another worker, already counted there.
#[derive(Debug)]
pub(crate) struct Handed {
    pub stream: std::net::TcpStream,
    pub slot: Slot,
}

/// One worker's side of the handoff: the counts, its peers' inboxes and its own.
#[derive(Debug)]
pub(crate) struct Balancer {
    me: usize,
    loads: Loads,
    // shared: every worker may send to every other worker's inbox.
    peers: Arc<[mpsc::Sender<Handed>]>,
    inbox: mpsc::Receiver<Handed>,
}

/// Where an accepted connection is served.
pub(crate) enum Placed {
    /// Here, counted in this worker's load.
    Here(tokio::net::TcpStream, Slot),
    /// Another worker took it.
    Handed,
}

impl Balancer {
    /// One balancer per worker, `0..workers`.
    pub(crate) fn for_workers(workers: usize) -> Vec<Balancer> {
        let loads = Loads::new(workers);
        let (peers, inboxes): (Vec<_>, Vec<_>) = (0..workers).map(|_| mpsc::channel(INBOX)).unzip();
        let peers: Arc<[mpsc::Sender<Handed>]> = peers.into();
        inboxes
            .into_iter()
            .enumerate()
            .map(|(me, inbox)| Balancer {
                me,
                loads: loads.clone(),
                peers: peers.clone(),
                inbox,
            })
            .collect()
    }

    /// Places a connection this worker accepted: here, or with the least-loaded worker when
    /// this one is clearly busier. A socket that cannot be moved (it cannot leave this
    /// runtime, or the target's inbox is full or closed) is served here.
    pub(crate) fn place(&self, stream: tokio::net::TcpStream) -> Placed {
        let Some(target) = self.loads.target(self.me) else {
            return Placed::Here(stream, self.loads.hold(self.me));
        };
        let Some(peer) = self.peers.get(target) else {
            return Placed::Here(stream, self.loads.hold(self.me));
        };
        // Counted on the target before it is sent, so the next accept anywhere sees it.
        let slot = self.loads.hold(target);
        let stream = match stream.into_std() {
            Ok(stream) => stream,
            Err(error) => {
                tracing::debug!(%error, "cannot detach an accepted socket; dropping it");
                return Placed::Handed;
            }
        };
        match peer.try_send(Handed { stream, slot }) {
            Ok(()) => Placed::Handed,
            Err(refused) => {
                let Handed { stream, slot } = refused.into_inner();
                drop(slot);
                match tokio::net::TcpStream::from_std(stream) {
                    Ok(stream) => Placed::Here(stream, self.loads.hold(self.me)),
                    Err(error) => {
                        tracing::debug!(%error, "cannot take back an accepted socket; dropping it");
                        Placed::Handed
                    }
                }
            }
        }
    }

    /// The next socket another worker handed to this one; pending forever once the inbox is
    /// closed.
    pub(crate) async fn next_handed(&mut self) -> Handed {
        match self.inbox.recv().await {
            Some(handed) => handed,
            None => std::future::pending().await,
        }
    }

    /// Stops taking sockets (peers then serve theirs themselves) and returns those already
    /// sent, to be served here.
    pub(crate) fn close(&mut self) -> Vec<Handed> {
        self.inbox.close();
        let mut left = Vec::new();
        while let Ok(handed) = self.inbox.try_recv() {
            left.push(handed);
        }
        left
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn below_eight_connections_counts_are_evened_to_within_one() {
        assert!(!should_hand_off(0, 0));
        assert!(should_hand_off(1, 0));
        assert!(!should_hand_off(3, 3));
        assert!(should_hand_off(4, 3));
        assert!(should_hand_off(8, 7));
    }

    #[test]
    fn above_eight_connections_a_skew_under_an_eighth_is_left_alone() {
        assert!(!should_hand_off(8, 8));
        assert!(!should_hand_off(17, 16));
        assert!(should_hand_off(19, 16));
        assert!(!should_hand_off(112, 100));
        assert!(should_hand_off(113, 100));
    }

    #[test]
    fn the_target_is_the_least_loaded_other_worker() {
        let loads = Loads::new(3);
        let _held: Vec<Slot> = [0, 0, 2, 2, 1].iter().map(|&w| loads.hold(w)).collect();
        assert_eq!(loads.target(0), Some(1));
        assert_eq!(loads.target(1), None, "worker 1 is the least loaded");
        assert_eq!(loads.target(2), Some(1));
    }

    #[test]
    fn a_dropped_slot_leaves_the_count() {
        let loads = Loads::new(2);
        let first = loads.hold(0);
        let second = loads.hold(0);
        assert_eq!(loads.get(0), 2);
        drop(first);
        assert_eq!(loads.get(0), 1);
        drop(second);
        assert_eq!(loads.get(0), 0);
        assert_eq!(loads.target(0), None);
    }

    /// Connections accepted one after another, all by worker 0 (the worst case of the hash),
    /// end up spread evenly.
    #[tokio::test]
    async fn connections_all_accepted_by_one_worker_are_spread_evenly() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mut balancers = Balancer::for_workers(2);
        let mut kept = Vec::new();
        let mut clients = Vec::new();
        for _ in 0..8 {
            clients.push(tokio::net::TcpStream::connect(addr).await.unwrap());
            let (stream, _) = listener.accept().await.unwrap();
            match balancers[0].place(stream) {
                Placed::Here(stream, slot) => kept.push((stream, slot)),
                Placed::Handed => {}
            }
        }
        assert_eq!(kept.len(), 4);
        let handed = balancers[1].close();
        assert_eq!(handed.len(), 4);
        assert_eq!(
            (balancers[0].loads.get(0), balancers[0].loads.get(1)),
            (4, 4)
        );
        for handed in &handed {
            assert_eq!(handed.slot.worker, 1);
        }
    }

    #[tokio::test]
    async fn a_closed_inbox_leaves_the_connection_with_the_accepting_worker() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mut balancers = Balancer::for_workers(2);
        assert!(balancers[1].close().is_empty());
        let mut kept = Vec::new();
        let mut clients = Vec::new();
        for _ in 0..3 {
            clients.push(tokio::net::TcpStream::connect(addr).await.unwrap());
            let (stream, _) = listener.accept().await.unwrap();
            match balancers[0].place(stream) {
                Placed::Here(stream, slot) => kept.push((stream, slot)),
                Placed::Handed => panic!("worker 1 no longer takes connections"),
            }
        }
        assert_eq!(
            (balancers[0].loads.get(0), balancers[0].loads.get(1)),
            (3, 0)
        );
    }
}
