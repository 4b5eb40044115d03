//! The engine on the real clock: an [`Endpoint`] plus the wait policy of DESIGN.md
//! section 6. Waking a blocked process costs about 25 us on the machines we target and a
//! non-blocking receive about 2.5 us, so a waiting caller spins first and blocks only after
//! a budget; when processes outnumber cores it yields the CPU while spinning, so the peer
//! it waits for can run.

use std::time::{Duration, Instant};

use bulkwire_link::Rank;
use bulkwire_protocol::{MsgId, Time};
use bytes::Bytes;

use crate::Error;
use crate::endpoint::{Endpoint, Event, Progress};

/// How a waiting caller spends its time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WaitPolicy {
    /// Spin this long without progress before blocking.
    pub spin: Duration,
    /// Yield the CPU on each idle spin (processes outnumber cores).
    pub yield_cpu: bool,
}

impl WaitPolicy {
    /// The policy for `local_procs` processes of the job on this host: spin 1 ms (or
    /// `BULKWIRE_SPIN_US`), yielding when they outnumber the cores.
    pub fn for_host(local_procs: usize) -> WaitPolicy {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let spin_us = std::env::var("BULKWIRE_SPIN_US")
            .ok()
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(1000);
        WaitPolicy {
            spin: Duration::from_micros(spin_us),
            yield_cpu: local_procs > cores,
        }
    }
}

impl Default for WaitPolicy {
    fn default() -> Self {
        WaitPolicy {
            spin: Duration::from_millis(1),
            yield_cpu: false,
        }
    }
}

/// An [`Endpoint`] driven on the monotonic clock.
pub struct Engine {
    ep: Endpoint,
    epoch: Instant,
    policy: WaitPolicy,
}

impl Engine {
    pub fn new(ep: Endpoint, policy: WaitPolicy) -> Engine {
        Engine {
            ep,
            epoch: Instant::now(),
            policy,
        }
    }

    /// Nanoseconds since the engine started.
    #[inline]
    pub fn now(&self) -> Time {
        self.epoch.elapsed().as_nanos() as Time
    }

    pub fn rank(&self) -> Rank {
        self.ep.rank()
    }

    pub fn nprocs(&self) -> u32 {
        self.ep.nprocs()
    }

    pub fn policy(&self) -> WaitPolicy {
        self.policy
    }

    /// The endpoint, for statistics and protocol hooks.
    pub fn endpoint(&mut self) -> &mut Endpoint {
        &mut self.ep
    }

    /// Queues a message and pushes out what the link takes now.
    pub fn send(&mut self, to: Rank, data: Bytes, notify: bool) -> Result<MsgId, Error> {
        let now = self.now();
        let id = self.ep.send(now, to, data, notify)?;
        self.ep.step(now)?;
        Ok(id)
    }

    /// One step of progress without waiting.
    pub fn progress(&mut self) -> Result<Progress, Error> {
        let now = self.now();
        self.ep.step(now)
    }

    /// Drives the endpoint until `f` returns `Some`, spinning then blocking, for at most
    /// `timeout` (`None`: no limit; dead peers still end the wait through `f` seeing
    /// [`Event::PeerDead`]).
    pub fn wait_for<T>(
        &mut self,
        timeout: Option<Duration>,
        mut f: impl FnMut(&mut Endpoint) -> Option<T>,
    ) -> Result<T, Error> {
        let start = self.now();
        let limit = timeout.map(|t| start + t.as_nanos() as Time);
        let spin = self.policy.spin.as_nanos() as Time;
        let mut idle_since = start;
        loop {
            if let Some(x) = f(&mut self.ep) {
                return Ok(x);
            }
            let now = self.now();
            let prog = self.ep.step(now)?;
            if let Some(x) = f(&mut self.ep) {
                return Ok(x);
            }
            if let Some(l) = limit
                && now >= l
            {
                return Err(Error::Timeout(timeout.unwrap()));
            }
            if prog.any() {
                idle_since = now;
                continue;
            }
            if now - idle_since < spin || self.ep.has_unsent() {
                if self.policy.yield_cpu {
                    std::thread::yield_now();
                } else {
                    std::hint::spin_loop();
                }
                continue;
            }
            let until = match (self.ep.next_deadline(), limit) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            let wait = until.map(|t| Duration::from_nanos(t.saturating_sub(now)));
            self.ep.link().wait(wait)?;
            idle_since = self.now();
        }
    }

    /// The next event, waiting for it.
    pub fn next_event(&mut self, timeout: Option<Duration>) -> Result<Event, Error> {
        self.wait_for(timeout, |ep| ep.poll_event())
    }

    /// The next message from `from`, waiting for it; other events are returned in order
    /// before it. A death of `from` ends the wait with an error.
    pub fn recv_from(&mut self, from: Rank, timeout: Option<Duration>) -> Result<Event, Error> {
        let now = self.now();
        self.ep.expect(now, from, true);
        let r = self.next_event(timeout);
        let now = self.now();
        self.ep.expect(now, from, false);
        match r? {
            Event::PeerDead { peer, silent_for } => Err(Error::PeerDead { peer, silent_for }),
            e => Ok(e),
        }
    }

    /// Waits until everything sent has been acknowledged (or its peer declared dead).
    pub fn flush(&mut self, timeout: Option<Duration>) -> Result<(), Error> {
        self.wait_for(timeout, |ep| (!ep.busy()).then_some(()))
    }
}
