//! Where the engine meets the layers above: reliable, per-pair ordered messages between
//! the ranks of a job. A protocol over a link ([`crate::Engine`]) is one implementation;
//! kernel TCP is another. Point-to-point messaging, BSP and collectives see only this.

use std::time::Duration;

use bulkwire_link::Rank;
use bulkwire_protocol::wire::DropCounts;
use bulkwire_protocol::{Coloured, MsgId, PeerStats, Time};
use bytes::Bytes;

use crate::endpoint::{Event, Progress};
use crate::{Error, WaitPolicy};

/// Reliable messages between the ranks of a job.
pub trait Transport: Send {
    fn rank(&self) -> Rank;
    fn nprocs(&self) -> u32;

    /// Name of the protocol (for reports).
    fn protocol_name(&self) -> &'static str;

    /// Nanoseconds on the transport's clock.
    fn now(&self) -> Time;

    /// The clock as of the last [`Transport::step`] (or later): what a wait loop needs to
    /// pace itself, without another clock read per spin (one costs ~40 ns in a VM).
    fn recent_now(&self) -> Time {
        self.now()
    }

    /// The clock, read at the start of a wait that steps at once: a transport may let
    /// that first [`Transport::step`] use this reading instead of taking another.
    fn begin_wait(&mut self) -> Time {
        self.now()
    }

    /// Queues `data` for `to`; with `notify`, an [`Event::Sent`] follows its acknowledgement.
    fn send(&mut self, to: Rank, data: Bytes, notify: bool) -> Result<MsgId, Error>;

    /// As [`Transport::send`], but the message may wait for the next `send` or `step`,
    /// which then hands it to the link together with what that one sends (one system call
    /// where the link batches). For a caller that sends again at once.
    fn send_later(&mut self, to: Rank, data: Bytes, notify: bool) -> Result<MsgId, Error> {
        self.send(to, data, notify)
    }

    /// Does what can be done now without waiting.
    fn step(&mut self) -> Result<Progress, Error>;

    /// The next event, if one is ready.
    fn poll_event(&mut self) -> Option<Event>;

    /// Sleeps until input may be ready, a timer is due, or `timeout` passes; returns early
    /// when [`Transport::waker`]'s function is called from another thread.
    fn block(&mut self, timeout: Option<Duration>) -> Result<(), Error>;

    /// A function any thread may call to end a concurrent [`Transport::block`] early.
    fn waker(&self) -> Waker;

    /// How another thread may wait for this transport without holding it: a descriptor
    /// that becomes readable when input arrives, and how long until the next timer is due
    /// (`None`: no timer; zero: input is already waiting). `None` if the transport cannot
    /// be waited on that way; callers then use [`Transport::block`]. The caller must
    /// [`Transport::step`] before it calls this again (the sleep may stay announced to
    /// the link until then).
    fn wait_handle(&mut self) -> Option<WaitHandle> {
        None
    }

    /// How often this transport must be stepped, at the least, for its peers to keep
    /// hearing from it (answers to their liveness pings) when nothing else drives it: the
    /// keep-alive thread's period (see [`crate::progress`]). `None`: no such need (kernel
    /// TCP answers for itself).
    fn liveness_interval(&self) -> Option<Duration> {
        None
    }

    /// Whether packets wait for room in the network (then blocking would stall them).
    fn has_unsent(&self) -> bool;

    /// Whether anything sent is still unacknowledged or unsent.
    fn busy(&self) -> bool;

    /// The caller waits (or stops waiting) for data from `peer`.
    fn expect(&mut self, peer: Rank, waiting: bool);

    /// BSP's colours and phase ends, when the protocol underneath implements them
    /// (holefill: [`bulkwire_protocol::Protocol::coloured`]); `None` otherwise.
    fn coloured(&mut self) -> Option<&mut dyn Coloured> {
        None
    }

    /// RMPP: accept an announced message ([`Event::Announce`]): a matching receive is
    /// posted, so its data may flow. An upper layer must accept every announced message
    /// eventually (buffering it if nothing matches yet): rmpp delivers in per-pair order,
    /// so one message never accepted holds back every later one from that peer.
    /// Transports that never announce ignore it.
    fn accept(&mut self, _from: Rank, _id: MsgId) {}

    /// Bytes for `peer` not handed to the network yet (0 when unknown): BSP pacing feeds
    /// one destination at a time.
    fn queued_bytes(&self, _peer: Rank) -> u64 {
        0
    }

    /// Statistics for `peer`.
    fn peer_stats(&self, peer: Rank) -> PeerStats;

    /// Datagrams dropped before reaching the protocol (corrupt, foreign...).
    fn drops(&self) -> DropCounts {
        DropCounts::default()
    }

    /// How waiting callers spend their time.
    fn policy(&self) -> WaitPolicy;

    /// An error if the job has failed (another process aborted or died): every wait ends
    /// with it. One atomic load.
    fn check(&self) -> Result<(), Error> {
        Ok(())
    }

    /// Drives the transport until `f` returns `Some`, spinning then blocking (see
    /// [`WaitPolicy`]), for at most `timeout`.
    fn wait_for<T>(
        &mut self,
        timeout: Option<Duration>,
        mut f: impl FnMut(&mut Self) -> Option<T>,
    ) -> Result<T, Error>
    where
        Self: Sized,
    {
        let policy = self.policy();
        let start = self.begin_wait();
        let limit = timeout.map(|t| start + t.as_nanos() as Time);
        let spin = policy.spin.as_nanos() as Time;
        let mut idle_since = start;
        loop {
            if let Some(x) = f(self) {
                return Ok(x);
            }
            self.check()?;
            let prog = self.step()?;
            if let Some(x) = f(self) {
                return Ok(x);
            }
            let now = self.recent_now();
            if let Some(l) = limit
                && now >= l
            {
                return Err(Error::Timeout(timeout.unwrap_or_default()));
            }
            if prog.any() {
                idle_since = now;
                continue;
            }
            let idle = now.saturating_sub(idle_since);
            if idle < spin || self.has_unsent() {
                if policy.yields(Duration::from_nanos(idle)) {
                    std::thread::yield_now();
                } else {
                    std::hint::spin_loop();
                }
                continue;
            }
            let wait = limit.map(|l| Duration::from_nanos(l.saturating_sub(now)));
            self.block(wait)?;
            idle_since = self.now();
        }
    }

    /// The next event, waiting for it.
    fn next_event(&mut self, timeout: Option<Duration>) -> Result<Event, Error>
    where
        Self: Sized,
    {
        self.wait_for(timeout, |t| t.poll_event())
    }

    /// Waits until everything sent has been acknowledged.
    fn flush(&mut self, timeout: Option<Duration>) -> Result<(), Error>
    where
        Self: Sized,
    {
        self.wait_for(timeout, |t| (!t.busy()).then_some(()))
    }
}

/// Ends a concurrent [`Transport::block`]; cheap to clone and call from any thread.
pub type Waker = std::sync::Arc<dyn Fn() + Send + Sync>;

/// See [`Transport::wait_handle`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WaitHandle {
    pub fd: std::os::fd::RawFd,
    pub timeout: Option<Duration>,
}

impl<T: Transport + ?Sized> Transport for Box<T> {
    fn rank(&self) -> Rank {
        (**self).rank()
    }
    fn nprocs(&self) -> u32 {
        (**self).nprocs()
    }
    fn protocol_name(&self) -> &'static str {
        (**self).protocol_name()
    }
    fn now(&self) -> Time {
        (**self).now()
    }
    fn recent_now(&self) -> Time {
        (**self).recent_now()
    }
    fn begin_wait(&mut self) -> Time {
        (**self).begin_wait()
    }
    fn send(&mut self, to: Rank, data: Bytes, notify: bool) -> Result<MsgId, Error> {
        (**self).send(to, data, notify)
    }
    fn send_later(&mut self, to: Rank, data: Bytes, notify: bool) -> Result<MsgId, Error> {
        (**self).send_later(to, data, notify)
    }
    fn step(&mut self) -> Result<Progress, Error> {
        (**self).step()
    }
    fn poll_event(&mut self) -> Option<Event> {
        (**self).poll_event()
    }
    fn block(&mut self, timeout: Option<Duration>) -> Result<(), Error> {
        (**self).block(timeout)
    }
    fn waker(&self) -> Waker {
        (**self).waker()
    }
    fn wait_handle(&mut self) -> Option<WaitHandle> {
        (**self).wait_handle()
    }
    fn liveness_interval(&self) -> Option<Duration> {
        (**self).liveness_interval()
    }
    fn has_unsent(&self) -> bool {
        (**self).has_unsent()
    }
    fn busy(&self) -> bool {
        (**self).busy()
    }
    fn expect(&mut self, peer: Rank, waiting: bool) {
        (**self).expect(peer, waiting)
    }
    fn coloured(&mut self) -> Option<&mut dyn Coloured> {
        (**self).coloured()
    }
    fn accept(&mut self, from: Rank, id: MsgId) {
        (**self).accept(from, id)
    }
    fn queued_bytes(&self, peer: Rank) -> u64 {
        (**self).queued_bytes(peer)
    }
    fn peer_stats(&self, peer: Rank) -> PeerStats {
        (**self).peer_stats(peer)
    }
    fn drops(&self) -> DropCounts {
        (**self).drops()
    }
    fn policy(&self) -> WaitPolicy {
        (**self).policy()
    }
    fn check(&self) -> Result<(), Error> {
        (**self).check()
    }
}
