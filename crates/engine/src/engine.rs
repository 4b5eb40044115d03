//! The engine on the real clock: an [`Endpoint`] plus its wait policy.
//! Waking a blocked process costs about 25 us on the machines we target and a
//! non-blocking receive about 2.5 us, so a waiting caller spins first and blocks only after
//! a budget; when processes outnumber cores it yields the CPU while spinning, so the peer
//! it waits for can run.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bulkwire_launch::JobState;
use bulkwire_link::Rank;
use bulkwire_protocol::wire::DropCounts;
use bulkwire_protocol::{Coloured, MsgId, PeerDead, PeerStats, Time};
use bytes::Bytes;

use crate::Error;
use crate::endpoint::{Endpoint, Event, Progress};
use crate::transport::{Transport, WaitHandle, Waker};

/// How a waiting caller spends its time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WaitPolicy {
    /// Spin this long without progress before blocking.
    pub spin: Duration,
    /// Yield the CPU on each idle spin (processes outnumber cores).
    pub yield_cpu: bool,
    /// A launcher bound this process to CPUs of its own, where no other process of the
    /// job runs: a long wait then never yields (see [`YIELD_AFTER`]).
    pub own_cpus: bool,
}

/// How long a wait spins before it sleeps, unless configured otherwise.
pub const DEFAULT_SPIN: Duration = Duration::from_millis(1);

impl WaitPolicy {
    /// Spin `spin` before sleeping, yielding on every idle turn when the job's
    /// `local_procs` processes on this host outnumber the `host_cpus` they share (not this
    /// process's own CPUs: a launcher may have bound it to its share).
    pub fn new(spin: Duration, local_procs: usize, host_cpus: usize) -> WaitPolicy {
        WaitPolicy::bound(
            spin,
            local_procs,
            host_cpus,
            bulkwire_launch::available_cpus(),
        )
    }

    /// [`WaitPolicy::new`] for a process that may run on `own` CPUs: fewer than the host's
    /// `host_cpus`, and no more than its share of them, is a launcher's binding (each
    /// process an equal share, the shares apart: `bulkwire_launch::bind`).
    pub fn bound(spin: Duration, local_procs: usize, host_cpus: usize, own: usize) -> WaitPolicy {
        WaitPolicy {
            spin,
            yield_cpu: local_procs > host_cpus,
            own_cpus: own < host_cpus && own.saturating_mul(local_procs) <= host_cpus,
        }
    }

    /// The default spin for `local_procs` processes sharing the CPUs this process may run
    /// on (threads of one program, tests, examples).
    pub fn for_host(local_procs: usize) -> WaitPolicy {
        WaitPolicy::new(DEFAULT_SPIN, local_procs, bulkwire_launch::available_cpus())
    }
}

/// How long an idle wait spins before it gives the core away on every turn, when the
/// processes do not outnumber the cores and were not bound to cores of their own. Each process having a core of its own is what the
/// scheduler usually does, not what it promises: after one of them slept (a computation
/// phase, a long wait), waking it often puts it on its waker's core (wake-affine), and the
/// two then spin in turn on one core while the other idles, each holding the core for
/// its whole spin budget (1-2 ms per 8-byte exchange between two processes of this 2-core
/// VM; ~110 us with this yield; 3 us on cores of their own, which the launchers now give
/// them, see `bulkwire_launch::bind`). Past a wait this long, a message of the process we
/// wait for is overdue anyway; a yield costs ~1 us when nobody else wants the core.
///
/// A process bound to cores of its own never yields: the peer it waits for cannot be
/// queued behind it, and a yield only hands the core to unrelated work for a whole time
/// slice (the kernel's EEVDF scheduler moves a yielding task's deadline a slice later),
/// in which the peer arrives and then waits for this process. With one busy process
/// sharing pid 0's core on a machine loaded by other builds (load average 12), a 64 KiB
/// total exchange at p = 2 over shared memory took 230-370 us per superstep on average
/// with the yield and 26-88 us without; on a quiet machine the two are level
/// (docs/performance.md, "Steadiness").
pub const YIELD_AFTER: Duration = Duration::from_micros(50);

impl WaitPolicy {
    /// Whether a wait idle for `idle` gives the core away on this turn (see
    /// [`YIELD_AFTER`]) rather than spinning.
    #[inline]
    pub fn yields(&self, idle: Duration) -> bool {
        self.yield_cpu || (!self.own_cpus && idle >= YIELD_AFTER)
    }
}

impl Default for WaitPolicy {
    fn default() -> Self {
        WaitPolicy {
            spin: DEFAULT_SPIN,
            yield_cpu: false,
            own_cpus: false,
        }
    }
}

/// An `eventfd` that another thread writes to end a `poll` early.
pub(crate) struct WakeFd(OwnedFd);

impl WakeFd {
    pub(crate) fn fd(&self) -> std::os::fd::RawFd {
        self.0.as_raw_fd()
    }

    pub(crate) fn new() -> std::io::Result<WakeFd> {
        // SAFETY: eventfd has no memory-safety preconditions; the result is checked.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: fd is a fresh descriptor we own.
        Ok(WakeFd(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    pub(crate) fn wake(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a valid u64 to our own eventfd. A full counter
        // (EAGAIN) already means "woken", so the result is irrelevant.
        unsafe { libc::write(self.0.as_raw_fd(), (&one as *const u64).cast(), 8) };
    }

    pub(crate) fn drain(&self) {
        let mut v: u64 = 0;
        // SAFETY: reads 8 bytes into a valid u64 from our own non-blocking eventfd.
        unsafe { libc::read(self.0.as_raw_fd(), (&mut v as *mut u64).cast(), 8) };
    }

    /// How a transport sleeps: in `poll` on its own descriptors `fds`, this waker and the
    /// job's failure notice (so a failure ends the sleep at once), at most `wait`, rounded
    /// up to whole milliseconds. Drains the waker if it rang.
    pub(crate) fn sleep(
        &self,
        mut fds: Vec<libc::pollfd>,
        job: Option<&JobState>,
        wait: Option<Duration>,
    ) -> Result<(), Error> {
        let pfd = |fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        fds.reserve(2);
        let wake_at = fds.len();
        fds.push(pfd(self.fd()));
        if let Some(f) = job.and_then(|j| j.wake_fd()) {
            fds.push(pfd(f));
        }
        let wait = wait.map(|w| {
            Duration::from_millis(w.as_micros().div_ceil(1000).min(i32::MAX as u128) as u64)
        });
        bulkwire_link::poll_fds(&mut fds, wait)?;
        if fds[wake_at].revents != 0 {
            self.drain();
        }
        Ok(())
    }
}

/// An [`Endpoint`] driven on the monotonic clock: the [`Transport`] of a protocol over a
/// link.
pub struct Engine {
    ep: Endpoint,
    epoch: Instant,
    policy: WaitPolicy,
    wake: Arc<WakeFd>,
    /// The job's failure notices, when launched as part of one.
    job: Option<Arc<JobState>>,
    /// The clock as of the last step.
    last_now: Time,
    /// Whether the protocol uses the time it is given when sending (see
    /// [`bulkwire_protocol::Protocol::clocked`]).
    clocked: bool,
    /// Steps since the last that moved anything (or slept): idle steps read the clock only
    /// every [`CLOCK_EVERY`] ([`CLOCK_EVERY_YIELDING`]), since timers are far coarser than
    /// one spin.
    idle_steps: u32,
    /// Peers a caller started waiting for ([`Transport::expect`]) that the endpoint has not
    /// been told of yet: it is, with the next reading of the clock, which the wait takes
    /// anyway (a reading costs ~40 ns in a VM, on every receive of a ping-pong). Liveness
    /// and prods run only within steps and sleeps, which read the clock first, so they
    /// see the wait from its start to within a step.
    expecting: Vec<Rank>,
    /// `expecting` by rank, for a constant-time check.
    expecting_mark: Vec<bool>,
    /// A sleep without the state ([`Transport::wait_handle`]) was announced to the link and
    /// not yet withdrawn: the next step or sleep withdraws it.
    announced: bool,
}

/// Idle steps between two reads of the clock (one read costs ~40 ns in a VM, a spin
/// ~50-100 ns, so 32 spins are a few microseconds; protocol timers are in the tens of
/// microseconds at least). 32 rather than 8 took ~0.05 us off a 0.8 us round trip over
/// shared memory.
const CLOCK_EVERY: u32 = 32;
/// The same when spinning yields the core: one spin may then last a time slice.
const CLOCK_EVERY_YIELDING: u32 = 2;

impl Engine {
    pub fn new(ep: Endpoint, policy: WaitPolicy) -> Engine {
        let n = ep.nprocs() as usize;
        Engine {
            clocked: ep.clocked(),
            ep,
            epoch: Instant::now(),
            policy,
            wake: Arc::new(WakeFd::new().expect("eventfd")),
            job: None,
            last_now: 0,
            idle_steps: 0,
            expecting: Vec::new(),
            expecting_mark: vec![false; n],
            announced: false,
        }
    }

    /// Reads the clock, telling the endpoint of the waits begun since the last reading.
    fn read_clock(&mut self) -> Time {
        let now = self.now();
        self.last_now = now;
        while let Some(p) = self.expecting.pop() {
            self.expecting_mark[p as usize] = false;
            self.ep.expect(now, p, true);
        }
        now
    }

    /// The time a send is stamped with: the clock for a protocol that reads it on sends,
    /// the last reading otherwise.
    fn send_clock(&self) -> Time {
        if self.clocked {
            self.now()
        } else {
            self.last_now
        }
    }

    /// Withdraws the announcement of a sleep without the state (see `announced`).
    #[inline]
    fn withdraw(&mut self) {
        if self.announced {
            self.announced = false;
            self.ep.link().end_sleep();
        }
    }

    /// Ends every wait with an error once `job` records a failure.
    pub fn set_job(&mut self, job: Arc<JobState>) {
        self.job = Some(job);
    }

    /// The endpoint, for statistics and protocol hooks.
    pub fn endpoint(&mut self) -> &mut Endpoint {
        &mut self.ep
    }

    /// The next message from `from`, waiting for it; other events that come first are
    /// returned first. A death of `from` ends the wait with an error.
    pub fn recv_from(&mut self, from: Rank, timeout: Option<Duration>) -> Result<Event, Error> {
        self.expect(from, true);
        let r = self.next_event(timeout);
        self.expect(from, false);
        match r? {
            Event::PeerDead { peer, silent_for } => Err(PeerDead { peer, silent_for }.into()),
            e => Ok(e),
        }
    }
}

impl Transport for Engine {
    fn rank(&self) -> Rank {
        self.ep.rank()
    }

    fn nprocs(&self) -> u32 {
        self.ep.nprocs()
    }

    fn protocol_name(&self) -> &'static str {
        self.ep.protocol_name()
    }

    #[inline]
    fn now(&self) -> Time {
        self.epoch.elapsed().as_nanos() as Time
    }

    fn send(&mut self, to: Rank, data: Bytes, notify: bool) -> Result<MsgId, Error> {
        let now = self.send_clock();
        // Push it out at once: the caller may compute for a long time before coming back.
        self.ep.send_push(now, to, data, notify)
    }

    fn send_later(&mut self, to: Rank, data: Bytes, notify: bool) -> Result<MsgId, Error> {
        let now = self.send_clock();
        // Queued in the protocol: the next push or step transmits it with the rest.
        self.ep.send(now, to, data, notify)
    }

    fn step(&mut self) -> Result<Progress, Error> {
        self.withdraw();
        let every = if self.policy.yield_cpu {
            CLOCK_EVERY_YIELDING
        } else {
            CLOCK_EVERY
        };
        if self.idle_steps.is_multiple_of(every) || !self.expecting.is_empty() {
            self.read_clock();
        }
        let p = self.ep.step(self.last_now)?;
        self.idle_steps = if p.any() {
            0
        } else {
            self.idle_steps.wrapping_add(1)
        };
        Ok(p)
    }

    fn recent_now(&self) -> Time {
        self.last_now
    }

    fn begin_wait(&mut self) -> Time {
        self.read_clock();
        // The wait's first step follows at once: it uses this reading (a clock read is a
        // noticeable part of a 1 us round trip over shared memory).
        self.idle_steps = 1;
        self.last_now
    }

    fn poll_event(&mut self) -> Option<Event> {
        self.ep.poll_event()
    }

    fn block(&mut self, timeout: Option<Duration>) -> Result<(), Error> {
        self.withdraw();
        // Whatever happens, the next step reads the clock afresh.
        self.idle_steps = 0;
        let now = self.read_clock();
        let mut until = self.ep.next_deadline();
        if let Some(t) = timeout {
            let l = now + t.as_nanos() as Time;
            until = Some(until.map_or(l, |u| u.min(l)));
        }
        let wait = until.map(|t| Duration::from_nanos(t.saturating_sub(now)));
        match self.ep.link().poll_fd() {
            Some(fd) => {
                // The link may need to advertise the sleep (shared memory) and may find
                // input that arrived meanwhile: then there is no sleep at all.
                let r = if self.ep.link().prepare_sleep() {
                    let link = libc::pollfd {
                        fd,
                        events: libc::POLLIN,
                        revents: 0,
                    };
                    self.wake.sleep(vec![link], self.job.as_deref(), wait)
                } else {
                    Ok(())
                };
                self.ep.link().end_sleep();
                r?;
            }
            // Links without a descriptor wait in short slices so a waker is noticed soon.
            None => {
                let slice = Duration::from_millis(1);
                self.ep
                    .link()
                    .wait(Some(wait.map_or(slice, |w| w.min(slice))))?;
            }
        }
        Ok(())
    }

    fn waker(&self) -> Waker {
        let w = self.wake.clone();
        Arc::new(move || w.wake())
    }

    fn wait_handle(&mut self) -> Option<WaitHandle> {
        let fd = self.ep.link().poll_fd()?;
        let now = self.read_clock();
        self.withdraw();
        // The sleep is announced, so that a shared-memory sender rings the doorbell (its
        // link makes the descriptor readable only for a receiver that said it sleeps);
        // the announcement outlives this call and is withdrawn by the next step, whoever
        // takes it. Input that came meanwhile means no sleep at all.
        if !self.ep.link().prepare_sleep() {
            self.ep.link().end_sleep();
            return Some(WaitHandle {
                fd,
                timeout: Some(Duration::ZERO),
            });
        }
        self.announced = true;
        let timeout = self
            .ep
            .next_deadline()
            .map(|t| Duration::from_nanos(t.saturating_sub(now)));
        Some(WaitHandle { fd, timeout })
    }

    /// Half the ping interval: a peer pings after that much silence and declares us dead
    /// after ten times as much (by default), so answering within half of it keeps the
    /// silence it sees under a sixth of its deadline.
    fn liveness_interval(&self) -> Option<Duration> {
        Some(Duration::from_nanos(self.ep.ping_interval() / 2))
    }

    fn has_unsent(&self) -> bool {
        self.ep.has_unsent()
    }

    fn busy(&self) -> bool {
        self.ep.busy()
    }

    fn expect(&mut self, peer: Rank, waiting: bool) {
        let i = peer as usize;
        if i >= self.expecting_mark.len() {
            return;
        }
        if waiting {
            // Timed from the next reading of the clock (see `expecting`).
            if !self.expecting_mark[i] {
                self.expecting_mark[i] = true;
                self.expecting.push(peer);
            }
        } else {
            if self.expecting_mark[i] {
                self.expecting_mark[i] = false;
                self.expecting.retain(|&p| p != peer);
            }
            // Ending a wait needs no clock.
            self.ep.expect(self.last_now, peer, false);
        }
    }

    fn coloured(&mut self) -> Option<&mut dyn Coloured> {
        self.ep.protocol().coloured()
    }

    fn accept(&mut self, from: Rank, id: MsgId) {
        let now = self.now();
        if let Some(a) = self.ep.protocol().announcing() {
            a.accept(now, from, id);
        }
        // The Cts (or, for a one-packet message, the Fin) goes out at once: the sender
        // waits on it, and the caller may compute for long before stepping again. An
        // error here reappears at the next step.
        let _ = self.ep.step(now);
    }

    fn queued_bytes(&self, peer: Rank) -> u64 {
        self.ep.queued_bytes(peer)
    }

    fn peer_stats(&self, peer: Rank) -> PeerStats {
        self.ep.peer_stats(peer)
    }

    fn drops(&self) -> DropCounts {
        self.ep.drops()
    }

    fn policy(&self) -> WaitPolicy {
        self.policy
    }

    fn check(&self) -> Result<(), Error> {
        match &self.job {
            Some(j) if j.is_failed() => Err(Error::JobFailed(
                j.failure()
                    .map_or_else(|| "the job failed".into(), |f| f.to_string()),
            )),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_spin_then_yield_unless_oversubscribed() {
        let own = WaitPolicy {
            spin: DEFAULT_SPIN,
            yield_cpu: false,
            own_cpus: false,
        };
        assert!(!own.yields(Duration::ZERO));
        assert!(!own.yields(YIELD_AFTER - Duration::from_nanos(1)));
        assert!(own.yields(YIELD_AFTER));
        let shared = WaitPolicy {
            yield_cpu: true,
            ..own
        };
        assert!(shared.yields(Duration::ZERO));
    }

    #[test]
    fn a_process_bound_to_cores_of_its_own_never_yields() {
        // 2 processes on 2 CPUs, each bound to one: spin, never yield.
        let bound = WaitPolicy::bound(DEFAULT_SPIN, 2, 2, 1);
        assert!(bound.own_cpus && !bound.yield_cpu);
        assert!(!bound.yields(YIELD_AFTER * 100));
        // Not bound (every CPU of the host), or bound to more than a share: yield late.
        for p in [
            WaitPolicy::bound(DEFAULT_SPIN, 2, 2, 2),
            WaitPolicy::bound(DEFAULT_SPIN, 3, 4, 2),
        ] {
            assert!(!p.own_cpus && p.yields(YIELD_AFTER), "{p:?}");
        }
        // Oversubscribed: every idle turn yields, bound or not.
        let over = WaitPolicy::bound(DEFAULT_SPIN, 4, 2, 1);
        assert!(over.yield_cpu && over.yields(Duration::ZERO));
    }
}
