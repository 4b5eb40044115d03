//! Congestion control, written once for every protocol: a per-peer window of packets in
//! flight that grows while packets get through and shrinks when the network drops them
//! (slow start, then additive increase; multiplicative decrease at most once per round
//! trip; a small window again after a timeout; undone when the loss proves spurious),
//! and pacing at the window's rate for a protocol that has no acknowledgement to clock
//! its sending (rmpp streams a message without one). gbn's window is on by default (rmpp
//! has receiver grants instead, in `rmpp.rs`); holefill's window and rmpp's pacing only
//! with `BULKWIRE_CC=all` ([`crate::Common::cc_all`]): on the simulated switch they made
//! things worse (docs/protocols.md has the figures).
//!
//! Why this shape (figures in docs/protocols.md):
//!
//! - A switch port of 64 KiB holds 43 packets of 1500 bytes. Seven senders into one port
//!   (a total exchange of 8) may each keep about six there; the protocols' own windows
//!   (gbn 8, holefill 256, rmpp a whole message) assume the receiver is the only limit,
//!   and a go-back-N sender that resends a whole window into a full buffer loses most of
//!   it again. A window that halves on a loss converges to the port's share whatever the
//!   number of senders; UCX's UD transport does the same with a window of 2..1025 packets,
//!   TCP Reno/NewReno with bytes.
//! - Only a loss through a queue ([`Rtt::queued`]) is congestion: a link that loses at
//!   random keeps its round trip at the floor, and a smaller window would only slow it.
//! - At most one decrease per round trip: the losses of one overflow reach the sender as
//!   several signals (one NACK, hole report or resend request per lost packet), and they
//!   are one congestion event (NewReno's recovery).
//! - Slow start from [`INITIAL_WINDOW`] packets up to the last window that lost, then one
//!   packet per window of acknowledgements: a path that never loses reaches the
//!   protocol's own window within a few round trips (loopback and shared memory lose
//!   nothing, so there the controller only counts).
//! - After a timeout a quarter of the window, at least two packets (TCP's loss window of
//!   one made every loss of a lone packet wait out a timeout, 45x the lossless time at
//!   20 % random loss).
//! - Incast (p - 1 senders into one port): a window of gbn or holefill cannot go below one
//!   packet, and p - 1 packets may not fit the port (63 against 43 at p = 64): the first
//!   flight of a burst overflows, and the window only keeps the recovery from flooding
//!   the port again. Below one packet per round trip the window is a rate
//!   ([`Window::pace_gap`]), for a paced sender; Homa's receiver grants of about one
//!   round trip of data to one sender at a time would avoid the first overflow, and are
//!   not built.
//!
//! The round-trip estimate ([`crate::common::Rtt::following_queue`]) takes samples only
//! from packets sent once (Karn's rule) or answers that name their transmission, and
//! keeps the timeout above the longest recent sample, so it follows the queueing delay a
//! full buffer adds (about 5 ms for 64 KiB at 100 Mb/s) instead of firing below it.

use crate::Time;
use crate::common::Rtt;

/// Window of a new peer, packets: TCP's initial window (RFC 6928), small enough that the
/// first burst of seven senders into one 64 KiB port (70 packets) loses little of it.
pub const INITIAL_WINDOW: u32 = 10;

/// Largest congestion window, packets (UCX's UD transport allows 1025). The protocols'
/// own windows are usually below.
pub const MAX_WINDOW: u32 = 1024;

/// Fixed-point scale of the window: 1/16 packet, so that the window can fall below one
/// packet (a rate of less than one packet per round trip) under incast.
const ONE: u32 = 16;

/// Smallest window: two packets, as UCX's UD transport's. One packet made every loss of
/// the window's only packet wait out a timeout: at 20 % random loss (which no window
/// relieves) gbn's BSP supersteps took 45x their lossless time, against 20x allowed.
const MIN_FRAC: u32 = 2 * ONE;

/// One peer's congestion window.
#[derive(Clone, Debug)]
pub struct Window {
    on: bool,
    /// Window in 1/16 packets.
    cwnd: u32,
    /// Slow start threshold, 1/16 packets.
    ssthresh: u32,
    /// Acknowledged packets toward the next additive increase.
    acked: u32,
    /// No further decrease before this time (one per round trip).
    hold_until: Time,
    /// Earliest time for the next packet when pacing.
    next_send: Time,
    /// Window and threshold before the last decrease, for [`Window::undo`].
    before: (u32, u32),
    /// Decreases so far (statistics).
    pub decreases: u64,
}

impl Window {
    /// A window starting at [`INITIAL_WINDOW`]; when `on` is false it never limits
    /// anything (the papers' protocols).
    pub fn new(on: bool) -> Window {
        Window {
            on,
            cwnd: INITIAL_WINDOW * ONE,
            ssthresh: MAX_WINDOW * ONE,
            acked: 0,
            hold_until: 0,
            next_send: 0,
            before: (INITIAL_WINDOW * ONE, MAX_WINDOW * ONE),
            decreases: 0,
        }
    }

    /// Whether the controller is in use.
    pub fn on(&self) -> bool {
        self.on
    }

    /// The window in whole packets, at least 1 (`u32::MAX` when off).
    pub fn packets(&self) -> u32 {
        if self.on {
            (self.cwnd / ONE).max(1)
        } else {
            u32::MAX
        }
    }

    /// Whether one more packet may leave with `in_flight` unacknowledged.
    #[inline]
    pub fn allows(&self, in_flight: usize) -> bool {
        !self.on || (in_flight as u64) < self.packets() as u64
    }

    /// `n` packets were acknowledged (explicitly or implicitly): the path carried them.
    pub fn on_ack(&mut self, n: u32) {
        if !self.on || n == 0 {
            return;
        }
        if self.cwnd < self.ssthresh {
            // Slow start: one packet more per packet acknowledged.
            self.cwnd = (self.cwnd + n * ONE).min(self.ssthresh.max(ONE));
        } else {
            // Congestion avoidance: one packet more per window acknowledged.
            self.acked += n;
            let w = (self.cwnd / ONE).max(1);
            while self.acked >= w {
                self.acked -= w;
                self.cwnd += ONE;
            }
        }
        self.cwnd = self.cwnd.min(MAX_WINDOW * ONE);
    }

    /// A loss was reported (NACK, hole, resend request) at `now` on the path `rtt`
    /// measures: halve the window, once per round trip, if the path shows a queue
    /// ([`Rtt::queued`]). Returns whether it was halved.
    pub fn on_loss(&mut self, now: Time, rtt: &Rtt) -> bool {
        if !self.on || now < self.hold_until || !rtt.queued() {
            return false;
        }
        let rtt = rtt.estimate();
        self.before = (self.cwnd, self.ssthresh);
        self.cwnd = (self.cwnd / 2).max(MIN_FRAC);
        self.ssthresh = self.cwnd.max(2 * ONE);
        self.acked = 0;
        self.hold_until = now + rtt;
        self.decreases += 1;
        true
    }

    /// A loss reported for a burst of which only `delivered` of `sent` units arrived (rmpp:
    /// the bytes a pass carried and those its receiver still asks for): halved as by
    /// [`Window::on_loss`], and scaled by the share delivered. A paced sender learns of
    /// losses once per pass, not once per packet, so halving alone would need many passes
    /// to come down from a rate several times what the port drains.
    pub fn on_loss_share(&mut self, now: Time, rtt: &Rtt, delivered: u64, sent: u64) -> bool {
        if !self.on_loss(now, rtt) {
            return false;
        }
        let scaled = self.cwnd as u64 * delivered.min(sent) / sent.max(1);
        self.cwnd = (scaled as u32).max(MIN_FRAC);
        self.ssthresh = self.cwnd.max(2 * ONE);
        true
    }

    /// A retransmission timer fired at `now`: whatever was in flight is presumed lost.
    /// The window drops to a quarter (at least [`MIN_FRAC`]), the slow start threshold to
    /// half. Not to one packet, as TCP's: a timeout here is as often a random loss of a
    /// tail as an empty path, and the window then came back too slowly (see
    /// [`MIN_FRAC`]).
    pub fn on_timeout(&mut self, now: Time, rtt: &Rtt) {
        if !self.on || !rtt.queued() {
            return;
        }
        let rtt = rtt.estimate();
        if now >= self.hold_until {
            self.before = (self.cwnd, self.ssthresh);
            self.ssthresh = (self.cwnd / 2).max(MIN_FRAC);
            self.cwnd = (self.cwnd / 4).max(MIN_FRAC);
            self.decreases += 1;
        }
        self.acked = 0;
        self.hold_until = now + rtt;
    }

    /// The last decrease was a mistake (a packet thought lost was only delayed, as an
    /// echo of its first transmission shows): the window and threshold go back to what
    /// they were before it (the Eifel response, RFC 4015).
    pub fn undo(&mut self) {
        if self.on {
            self.cwnd = self.cwnd.max(self.before.0);
            self.ssthresh = self.ssthresh.max(self.before.1);
        }
    }

    /// Time between packets when pacing over round trip `rtt`: the round trip over the
    /// window (0 when off, before any round trip is measured, or when the window is at
    /// least `above` packets).
    pub fn pace_gap(&self, rtt: Time, above: u32) -> Time {
        if !self.on || rtt == 0 || self.cwnd >= above.saturating_mul(ONE) {
            return 0;
        }
        rtt * ONE as Time / self.cwnd.max(MIN_FRAC) as Time
    }

    /// Whether pacing lets a packet leave at `now`.
    #[inline]
    pub fn may_send(&self, now: Time) -> bool {
        !self.on || now >= self.next_send
    }

    /// When pacing lets the next packet leave.
    pub fn next_send(&self) -> Time {
        self.next_send
    }

    /// A packet left at `now`, and the next waits `gap` ([`Window::pace_gap`]), except
    /// that a sender idle for a while may send up to `burst` packets back to back (a
    /// token bucket as a single time: the sending schedule may lag `now` by `burst`
    /// gaps at most).
    #[inline]
    pub fn sent(&mut self, now: Time, gap: Time, burst: u32) {
        if self.on && gap > 0 {
            let lag = gap.saturating_mul(burst.saturating_sub(1) as Time);
            self.next_send = self.next_send.max(now.saturating_sub(lag)) + gap;
        }
    }

    /// The window in 1/16 packets (tests, statistics).
    pub fn raw(&self) -> u32 {
        self.cwnd
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{MS, SEC, US};

    /// A path not measured yet (so any loss counts as congestion), whose estimate is 1 ms.
    fn path() -> Rtt {
        Rtt::new(MS, MS, SEC)
    }

    /// A loss on a path whose round trip stays at its floor is the link's, not the
    /// queue's: the window stays; once a queue shows, it halves.
    #[test]
    fn a_loss_without_a_queue_leaves_the_window() {
        let mut w = Window::new(true);
        let mut r = path();
        for _ in 0..10 {
            r.sample(100 * US);
        }
        assert!(!w.on_loss(0, &r));
        w.on_timeout(0, &r);
        assert_eq!(w.packets(), INITIAL_WINDOW);
        for _ in 0..10 {
            r.sample(2 * MS);
        }
        assert!(w.on_loss(0, &r));
        assert_eq!(w.packets(), INITIAL_WINDOW / 2);
    }

    #[test]
    fn off_never_limits() {
        let mut w = Window::new(false);
        assert!(w.allows(1 << 30));
        assert!(!w.on_loss(0, &path()));
        w.on_timeout(0, &path());
        assert!(w.may_send(0));
        assert_eq!(w.pace_gap(MS, 1), 0);
    }

    #[test]
    fn slow_start_then_additive_increase() {
        let mut w = Window::new(true);
        assert_eq!(w.packets(), INITIAL_WINDOW);
        assert!(w.allows(9) && !w.allows(10));
        w.on_ack(10);
        assert_eq!(w.packets(), 20, "slow start doubles per window");
        assert!(w.on_loss(0, &path()));
        assert_eq!(w.packets(), 10);
        // Avoidance: a whole window of acks for one packet more.
        w.on_ack(9);
        assert_eq!(w.packets(), 10);
        w.on_ack(1);
        assert_eq!(w.packets(), 11);
    }

    #[test]
    fn one_decrease_per_round_trip() {
        let mut w = Window::new(true);
        assert!(w.on_loss(0, &path()));
        assert!(!w.on_loss(500 * US, &path()), "same congestion event");
        assert_eq!(w.packets(), 5);
        assert!(w.on_loss(MS, &path()));
        assert_eq!(w.packets(), 2);
        assert!(w.on_loss(2 * MS, &path()));
        assert_eq!(w.packets(), 2, "the floor");
        assert_eq!(w.decreases, 3);
    }

    #[test]
    fn timeout_quarters_the_window_and_pacing_spaces_packets() {
        let mut w = Window::new(true);
        w.on_ack(6);
        w.on_timeout(0, &path());
        assert_eq!(w.packets(), 4);
        assert!(w.allows(3) && !w.allows(4));
        // Repeated losses stop at two packets.
        for k in 1..=4 {
            w.on_loss(k * MS, &path());
        }
        assert_eq!(w.packets(), 2);
        let gap = w.pace_gap(MS, 4);
        assert_eq!(gap, MS / 2);
        assert!(w.may_send(10 * MS));
        w.sent(10 * MS, gap, 1);
        assert!(!w.may_send(10 * MS) && w.may_send(10 * MS + MS / 2));
        // A burst of two after idling: the second may leave at once, the third waits.
        w.sent(100 * MS, gap, 2);
        assert!(w.may_send(100 * MS));
        w.sent(100 * MS, gap, 2);
        assert!(!w.may_send(100 * MS) && w.may_send(101 * MS));
        // Success brings it back.
        w.on_ack(2);
        assert_eq!(w.packets(), 3);
    }

    #[test]
    fn a_pass_that_lost_most_of_its_packets_cuts_the_rate_by_more() {
        let mut w = Window::new(true);
        w.on_ack(6);
        assert!(w.on_loss_share(0, &path(), 1, 4));
        assert_eq!(w.packets(), 2, "16 packets, halved, a quarter delivered");
        assert!(
            !w.on_loss_share(MS / 2, &path(), 1, 4),
            "once per round trip"
        );
    }

    #[test]
    fn a_spurious_timeout_is_undone() {
        let mut w = Window::new(true);
        w.on_ack(6);
        w.on_timeout(0, &path());
        assert_eq!(w.packets(), 4);
        w.undo();
        assert_eq!(w.packets(), 16);
        w.undo();
        assert_eq!(w.packets(), 16, "undoing twice is undoing once");
    }

    #[test]
    fn window_is_bounded() {
        let mut w = Window::new(true);
        for _ in 0..100 {
            w.on_ack(1000);
        }
        assert_eq!(w.packets(), MAX_WINDOW);
    }
}
