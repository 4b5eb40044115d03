//! What the protocols' unit tests share: settings, handing packets from one instance to
//! another as the engine would, payload patterns, and [`Duo`], two endpoints joined by a
//! virtual wire. Each protocol's test module keeps what is its own (its event checks, its
//! fault model, its step).

use bytes::Bytes;
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::{Common, Event, MS, MsgId, Protocol, Rank, Time, Transmit, US};

/// Settings of `rank` in a job of two, with `mp` bytes per packet and retransmission
/// timeouts short enough for tests (10 ms first, 1 to 80 ms).
pub(crate) fn common(rank: Rank, mp: usize) -> Common {
    let mut c = Common::new(rank, 2, mp);
    c.rto_initial = 10 * MS;
    c.rto_min = MS;
    c.rto_max = 80 * MS;
    c
}

/// Everything `g` transmits now.
pub(crate) fn tx(g: &mut impl Protocol, now: Time) -> Vec<Transmit> {
    let mut v = Vec::new();
    g.poll_transmit(now, &mut v, usize::MAX);
    v
}

/// Hands `t` to `g` as the engine would: source filled in (the other of two ranks),
/// length from the payload.
pub(crate) fn rx(g: &mut impl Protocol, now: Time, t: &Transmit) {
    let mut h = t.hdr;
    h.src = 1 - h.dst;
    h.len = t.payload.len() as u32;
    g.handle(now, &h, &t.payload);
}

pub(crate) fn rx_all(g: &mut impl Protocol, now: Time, ts: &[Transmit]) {
    for t in ts {
        rx(g, now, t);
    }
}

/// Every event `g` has now.
pub(crate) fn events(g: &mut impl Protocol) -> Vec<Event> {
    std::iter::from_fn(|| g.poll_event()).collect()
}

/// One round of traffic both ways between `a` (rank 0) and `b` (rank 1): what each
/// transmits now is handed to the other; the events are dropped.
pub(crate) fn exchange<P: Protocol>(a: &mut P, b: &mut P, now: Time) {
    let (da, db) = (tx(a, now), tx(b, now));
    rx_all(b, now, &da);
    rx_all(a, now, &db);
    events(a);
    events(b);
}

/// `n` bytes of a pattern that `salt` varies.
pub(crate) fn pattern(n: usize, salt: u32) -> Bytes {
    (0..n)
        .map(|i| (i as u32).wrapping_mul(31).wrapping_add(salt) as u8)
        .collect::<Vec<_>>()
        .into()
}

/// Two endpoints of one protocol, nodes 0 and 1, in virtual time, joined by a wire that
/// delays each packet by `latency` plus up to `jitter`; with what each node queued for the
/// other and what it received, to check delivery. A protocol's test network embeds one
/// (see [`deref_duo`]) and adds its fault model, its event checks and its step, built from the
/// pieces here.
pub(crate) struct Duo<P> {
    pub g: [P; 2],
    pub now: Time,
    /// Packets in flight: (arrival, order put on the wire, to, packet).
    wire: Vec<(Time, u64, usize, Transmit)>,
    n: u64,
    pub rng: ChaCha8Rng,
    pub latency: Time,
    pub jitter: Time,
    /// Messages received by each node, and the Sent notifications each got.
    pub got: [Vec<(MsgId, Vec<u8>)>; 2],
    pub sent: [Vec<MsgId>; 2],
    /// What each node queued for the other, and whether it asked to be notified.
    pub want: [Vec<Bytes>; 2],
    pub notify: [Vec<bool>; 2],
}

impl<P: Protocol> Duo<P> {
    /// Nodes `g` with a 10 us wire, no jitter, and randomness from `seed`.
    pub fn new(g: [P; 2], seed: u64) -> Duo<P> {
        Duo {
            g,
            now: 0,
            wire: Vec::new(),
            n: 0,
            rng: ChaCha8Rng::seed_from_u64(seed),
            latency: 10 * US,
            jitter: 0,
            got: [Vec::new(), Vec::new()],
            sent: [Vec::new(), Vec::new()],
            want: [Vec::new(), Vec::new()],
            notify: [Vec::new(), Vec::new()],
        }
    }

    /// Node `from` queues `data` for the other, and we remember it.
    pub fn send(&mut self, from: usize, data: Bytes, notify: bool) {
        let id = self.g[from]
            .send(self.now, 1 - from as Rank, data.clone(), notify)
            .unwrap();
        assert_eq!(id as usize, self.want[from].len());
        self.want[from].push(data);
        self.notify[from].push(notify);
    }

    /// Node `i` queues a message of each size in `sizes[i]` (a pattern salted by its
    /// position; every third, from the second, asks for a notify).
    pub fn send_sizes(&mut self, sizes: &[Vec<usize>; 2]) {
        for (i, sizes) in sizes.iter().enumerate() {
            for (k, &n) in sizes.iter().enumerate() {
                self.send(i, pattern(n, (k * 7 + i) as u32), k % 3 == 1);
            }
        }
    }

    /// Everything queued has been received and acknowledged, both ways.
    pub fn done(&self) -> bool {
        (0..2).all(|i| {
            self.got[1 - i].len() == self.want[i].len() && !self.g[i].outstanding(1 - i as Rank)
        })
    }

    /// Panics, saying how far delivery got, once more than `limit` has passed since
    /// `start`.
    pub fn assert_within(&self, start: Time, limit: Time) {
        assert!(
            self.now - start <= limit,
            "not done after {} ms: got {}/{} and {}/{}; {:?} {:?}",
            (self.now - start) / MS,
            self.got[1].len(),
            self.want[0].len(),
            self.got[0].len(),
            self.want[1].len(),
            self.g[0].peer_stats(1),
            self.g[1].peer_stats(0),
        );
    }

    /// Puts `copies` of `t`, sent by node `from`, on the wire to the other node, each
    /// delayed by the latency plus its own random jitter.
    pub fn put(&mut self, from: usize, t: &Transmit, copies: usize) {
        for _ in 0..copies {
            let at = self.now + self.latency + self.rng.random_range(0..=self.jitter);
            self.wire.push((at, self.n, 1 - from, t.clone()));
            self.n += 1;
        }
    }

    /// When something happens next: the first packet arrives, `also` (what the caller
    /// schedules), or a node's timer; `None` when nothing will.
    pub fn next(&mut self, also: impl IntoIterator<Item = Time>) -> Option<Time> {
        self.wire
            .iter()
            .map(|w| w.0)
            .chain(also)
            .chain(self.g[0].poll_timeout())
            .chain(self.g[1].poll_timeout())
            .min()
    }

    /// Moves the clock to `t` (never back) and hands every packet that has arrived by
    /// then to its node, in arrival order.
    pub fn advance(&mut self, t: Time) {
        self.now = self.now.max(t);
        self.wire.sort_by_key(|w| (w.0, w.1));
        let k = self.wire.partition_point(|w| w.0 <= self.now);
        for (_, _, to, t) in self.wire.drain(..k).collect::<Vec<_>>() {
            rx(&mut self.g[to], self.now, &t);
        }
    }

    /// Runs each node's timers if they are due.
    pub fn fire_timers(&mut self) {
        let now = self.now;
        for g in &mut self.g {
            if g.poll_timeout().is_some_and(|t| t <= now) {
                g.handle_timeout(now);
            }
        }
    }

    /// Everything arrived exactly once, intact, in order; each notify was reported once
    /// (in order with `sent_in_order`, else in any order).
    pub fn check(&self, sent_in_order: bool) {
        for i in 0..2 {
            let got = &self.got[1 - i];
            assert_eq!(got.len(), self.want[i].len());
            for (k, (id, data)) in got.iter().enumerate() {
                assert_eq!(*id as usize, k);
                assert!(data[..] == self.want[i][k][..], "message {k} corrupted");
            }
            let mut sent = self.sent[i].clone();
            if !sent_in_order {
                sent.sort_unstable();
            }
            let notified: Vec<MsgId> = (0..self.want[i].len() as MsgId)
                .filter(|&k| self.notify[i][k as usize])
                .collect();
            assert_eq!(sent, notified);
        }
    }
}

/// Lets a protocol's test network, a struct whose field `d` is a [`Duo`], be used as
/// that `Duo` (`net.g[0]`, `net.jitter`, `net.send(..)`) beside its own fields.
macro_rules! deref_duo {
    ($net:ty => $p:ty) => {
        impl std::ops::Deref for $net {
            type Target = $crate::testkit::Duo<$p>;
            fn deref(&self) -> &Self::Target {
                &self.d
            }
        }

        impl std::ops::DerefMut for $net {
            fn deref_mut(&mut self) -> &mut Self::Target {
                &mut self.d
            }
        }
    };
}
pub(crate) use deref_duo;
