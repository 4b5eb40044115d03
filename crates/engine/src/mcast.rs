//! Broadcasts over the job's multicast group: the reliable multicast state machine
//! (`bulkwire_protocol::mcast`) driven over the group's socket (`bulkwire_link::mcast`),
//! its datagrams checked like every other (the job's MAC, or cookie and CRC).
//!
//! Calls block until the transfer is done, and every member must make them in the same
//! order (the collectives' rule): each broadcast of a root is that root's next transfer,
//! numbered alike everywhere. Between calls nothing serves the group, so a receiver
//! lingers after its data has come until the root says every receiver has it (its Fin),
//! at most [`McastGroup::LINGER`]: a root waiting for a lost last acknowledgement is then
//! answered.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bulkwire_link::McastLink;
use bulkwire_link::faults::{FaultConfig, Faulty};
use bulkwire_link::{Link, RxBatch, Tx};
use bulkwire_protocol::mcast::{Mcast, McastConfig, McastEvent, McastStats};
use bulkwire_protocol::wire::{DropCounts, Filter, HEADER_LEN, Integrity};
use bulkwire_protocol::{PeerDead, Rank, Time, Transmit};

use crate::Error;

/// One process's side of the job's multicast group, for broadcasts.
pub struct McastGroup {
    link: Box<dyn Link>,
    proto: Mcast,
    integrity: Integrity,
    filter: Filter,
    epoch: Instant,
    rx: RxBatch,
    out: Vec<Transmit>,
    /// Packets the socket refused for now, sent first next time.
    pending: VecDeque<(Vec<u8>, Transmit)>,
    /// The next transfer number of each root.
    next_id: Vec<u32>,
    /// Events of transfers no call waits for yet.
    held: Vec<McastEvent>,
    /// Receivers of our transfer declared dead, named when it ends.
    dead: Vec<PeerDead>,
    drops: DropCounts,
}

impl std::fmt::Debug for McastGroup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McastGroup")
            .field("rank", &self.filter.me)
            .finish()
    }
}

impl McastGroup {
    /// Longest a receiver waits, after its data, for the root's word that all have it.
    pub const LINGER: Duration = Duration::from_millis(20);

    /// Longest a call sleeps on the group between turns (and between calls of the
    /// caller's `serve`, see [`McastGroup::broadcast_serving`]).
    pub const SERVE_EVERY: Duration = Duration::from_millis(1);

    /// The group of `link`, checked with `integrity` and the job's `cookie`, with faults
    /// injected on receive when `faults` is active (tests, experiments), and the state
    /// machine's settings `cfg` (its `frag` is set from the link's datagram size).
    pub fn new(
        link: Arc<Mutex<McastLink>>,
        integrity: Integrity,
        cookie: u32,
        faults: &FaultConfig,
        mut cfg: McastConfig,
    ) -> Result<McastGroup, Error> {
        let (rank, nprocs, max) = {
            let l = link.lock().unwrap_or_else(|e| e.into_inner());
            (l.rank(), l.nprocs(), l.max_datagram())
        };
        cfg.frag = max.saturating_sub(HEADER_LEN).max(1);
        let proto = Mcast::new(cfg, rank, nprocs).map_err(Error::Config)?;
        let shared: Box<dyn Link> = Box::new(Shared(link));
        let link: Box<dyn Link> = if faults.is_active() {
            Box::new(Faulty::new(shared, faults.clone()))
        } else {
            shared
        };
        Ok(McastGroup {
            link,
            proto,
            integrity,
            filter: Filter {
                cookie,
                me: rank,
                nprocs,
            },
            epoch: Instant::now(),
            rx: RxBatch::new(64, max.max(HEADER_LEN)),
            out: Vec::new(),
            pending: VecDeque::new(),
            next_id: vec![1; nprocs as usize],
            held: Vec::new(),
            dead: Vec::new(),
            drops: DropCounts::default(),
        })
    }

    pub fn stats(&self) -> McastStats {
        self.proto.stats()
    }

    /// Datagrams dropped before the protocol (failed checks), by reason.
    pub fn drops(&self) -> DropCounts {
        self.drops
    }

    fn now(&self) -> Time {
        self.epoch.elapsed().as_nanos() as Time
    }

    /// Broadcasts `buf` from `root` to every member: the root's `buf` is sent, every other
    /// member's is overwritten (it must be as long). Fails naming a member silent past
    /// the deadline: the root once every other receiver has the data, a receiver when
    /// the root falls silent.
    pub fn broadcast(&mut self, root: Rank, buf: &mut [u8]) -> Result<(), Error> {
        self.broadcast_serving(root, buf, &mut || Ok(()))
    }

    /// [`McastGroup::broadcast`] that calls `serve` between turns, at least every
    /// [`McastGroup::SERVE_EVERY`]: a caller that holds its point-to-point transport
    /// meanwhile (the BSP layer's sync) keeps it answering peers, which may be waiting
    /// on it to reach this broadcast. An error of `serve` ends the call with it.
    pub fn broadcast_serving(
        &mut self,
        root: Rank,
        buf: &mut [u8],
        serve: &mut dyn FnMut() -> Result<(), Error>,
    ) -> Result<(), Error> {
        let Some(slot) = self.next_id.get_mut(root as usize) else {
            return Err(Error::Config(format!("no rank {root} in the group")));
        };
        let id = *slot;
        *slot = slot.wrapping_add(1);
        let now = self.now();
        if root == self.filter.me {
            self.proto
                .send(now, id, bytes::Bytes::copy_from_slice(buf))
                .map_err(|e| Error::Config(e.to_string()))?;
            let dead = match self.run(
                serve,
                |e| matches!(e, McastEvent::Delivered { id: d, .. } if *d == id),
            )? {
                McastEvent::Delivered { dead, .. } => dead,
                _ => Vec::new(),
            };
            let named = std::mem::take(&mut self.dead);
            if let Some(&peer) = dead.first() {
                let d = named.into_iter().find(|d| d.peer == peer);
                return Err(Error::PeerDead(d.unwrap_or(PeerDead {
                    peer,
                    silent_for: self.proto.config().dead_after,
                })));
            }
            return Ok(());
        }
        self.proto.expect(now, root, id);
        let len = buf.len();
        let got = match self.run(serve, |e| match e {
            McastEvent::Received { root: r, id: d, .. }
            | McastEvent::Abandoned { root: r, id: d } => *r == root && *d == id,
            _ => false,
        })? {
            McastEvent::Received { data, .. } => data,
            _ => {
                return Err(Error::JobFailed(format!(
                    "rank {root} gave up on multicast transfer {id} to this process"
                )));
            }
        };
        if got.len() != len {
            return Err(Error::Config(format!(
                "rank {root} broadcast {} bytes where this process expected {len}",
                got.len()
            )));
        }
        buf.copy_from_slice(&got);
        let until = Instant::now() + Self::LINGER;
        let _ = self.run_until(
            until,
            serve,
            |e| matches!(e, McastEvent::Finished { root: r, id: d } if *r == root && *d == id),
        );
        Ok(())
    }

    /// Serves the group until `want` picks an event, and returns it; fails on a death
    /// that concerns us.
    fn run(
        &mut self,
        serve: &mut dyn FnMut() -> Result<(), Error>,
        want: impl Fn(&McastEvent) -> bool,
    ) -> Result<McastEvent, Error> {
        match self.run_until(Instant::now() + Duration::from_secs(1 << 20), serve, want)? {
            Some(e) => Ok(e),
            None => Err(Error::Timeout(Duration::from_secs(1 << 20))),
        }
    }

    /// [`McastGroup::run`] until `until` at the latest (`None` then).
    fn run_until(
        &mut self,
        until: Instant,
        serve: &mut dyn FnMut() -> Result<(), Error>,
        want: impl Fn(&McastEvent) -> bool,
    ) -> Result<Option<McastEvent>, Error> {
        if let Some(i) = self.held.iter().position(&want) {
            return Ok(Some(self.held.remove(i)));
        }
        loop {
            self.pump()?;
            serve()?;
            while let Some(e) = self.proto.poll_event() {
                if want(&e) {
                    return Ok(Some(e));
                }
                match e {
                    // A receiver of ours: the transfer goes on to the others, and the
                    // call names it once they have everything.
                    McastEvent::PeerDead { root, dead, .. } if root == self.filter.me => {
                        self.dead.push(dead);
                    }
                    // A root we wait on.
                    McastEvent::PeerDead { dead, .. } => return Err(Error::PeerDead(dead)),
                    McastEvent::Finished { .. } => {}
                    e => self.held.push(e),
                }
            }
            let now = Instant::now();
            if now >= until {
                return Ok(None);
            }
            let next = self
                .proto
                .poll_timeout()
                .map(|t| t.saturating_sub(self.now()))
                .map_or(Duration::from_millis(10), Duration::from_nanos);
            let wait = next.min(until - now).min(Self::SERVE_EVERY);
            if self.pending.is_empty() {
                self.link.wait(Some(wait))?;
            }
        }
    }

    /// Receives what has come, runs the timers, sends what is due.
    fn pump(&mut self) -> Result<(), Error> {
        loop {
            let n = self.link.recv(&mut self.rx)?;
            let now = self.now();
            for i in 0..n {
                match self.integrity.decode_group(self.rx.get(i), &self.filter) {
                    Ok((h, p)) => self.proto.handle(now, &h, p),
                    Err(r) => self.drops.count(r),
                }
            }
            if n < self.rx.slots() {
                break;
            }
        }
        let now = self.now();
        if self.proto.poll_timeout().is_some_and(|t| t <= now) {
            self.proto.handle_timeout(now);
        }
        self.out.clear();
        self.proto.poll_transmit(now, &mut self.out, 256);
        for mut t in self.out.drain(..) {
            t.hdr.cookie = self.filter.cookie;
            let head = self.integrity.encode(&t.hdr, &t.payload).to_vec();
            self.pending.push_back((head, t));
        }
        while let Some((head, t)) = self.pending.front() {
            let tx = Tx {
                dst: t.hdr.dst,
                head,
                body: &t.payload,
            };
            if self.link.send(&[tx])? == 0 {
                break;
            }
            self.pending.pop_front();
        }
        Ok(())
    }
}

/// The group's socket, shared with [`crate::job::JobInfo`], as a [`Link`].
struct Shared(Arc<Mutex<McastLink>>);

impl Shared {
    fn get(&self) -> std::sync::MutexGuard<'_, McastLink> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Link for Shared {
    fn rank(&self) -> Rank {
        self.get().rank()
    }
    fn nprocs(&self) -> u32 {
        self.get().nprocs()
    }
    fn capabilities(&self) -> bulkwire_link::LinkCaps {
        self.get().capabilities()
    }
    fn send(&mut self, batch: &[Tx<'_>]) -> std::io::Result<usize> {
        self.get().send(batch)
    }
    fn recv(&mut self, batch: &mut RxBatch) -> std::io::Result<usize> {
        self.get().recv(batch)
    }
    fn wait(&mut self, timeout: Option<Duration>) -> std::io::Result<()> {
        let fd = self.get().poll_fd();
        match fd {
            Some(fd) => bulkwire_link::poll_readable(fd, timeout),
            None => Ok(()),
        }
    }
    fn poll_fd(&self) -> Option<std::os::fd::RawFd> {
        self.get().poll_fd()
    }
}
