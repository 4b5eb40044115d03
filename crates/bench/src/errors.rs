//! Riesen & Maccabe's client/server error-rate experiment (their Figures 5 and 6): a
//! client sends a request, the server answers, and the client's wait (request sent ->
//! reply delivered) is measured against the bit-error rate of the network. RMPP was built
//! for very low error rates and may degrade sharply past a threshold; the curve shows
//! where.
//!
//! The protocols over datagrams run on the simulated network ([`sim_error_rate`]):
//! deterministic, and its bit errors are exact (each bit of each datagram flips with
//! probability `ber`; the CRC catches it, so a corrupted packet is a lost packet). Kernel
//! TCP cannot run there; [`crate::netns`] runs it between two network namespaces with
//! random drops that model corrupted frames, where namespaces can be made.

use bulkwire_engine::sim::{SimCluster, SimError};
use bulkwire_engine::{EndpointConfig, Event};
use bulkwire_link::sim::SimConfig;
use bulkwire_protocol::{SEC, Time};
use bytes::Bytes;

use crate::stats::Summary;

/// How the experiment runs.
#[derive(Clone, Debug)]
pub struct ErrorRateConfig {
    /// Bit-error rates to measure, in order.
    pub bers: Vec<f64>,
    /// Requests per rate (sequential: one outstanding at a time).
    pub requests: usize,
    pub request_size: usize,
    pub reply_size: usize,
    /// A request not answered within this (virtual) time ends the rate's run.
    pub limit: Time,
    /// Network of the simulated runs (its `ber` and `nodes` are set per run).
    pub net: SimConfig,
    pub seed: u64,
}

impl Default for ErrorRateConfig {
    fn default() -> Self {
        ErrorRateConfig {
            bers: vec![0.0, 1e-8, 1e-7, 3e-7, 1e-6, 3e-6, 1e-5, 3e-5, 1e-4, 3e-4],
            requests: 200,
            request_size: 64,
            reply_size: 64 << 10,
            limit: 60 * SEC,
            net: SimConfig::new(2),
            seed: 1,
        }
    }
}

/// The client's waits at one bit-error rate.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ErrorPoint {
    pub ber: f64,
    /// Waits of the answered requests, seconds (`None` if none was answered).
    pub wait: Option<Summary>,
    pub answered: usize,
    /// Requests not answered within the limit (the run at this rate stops at the first).
    pub unanswered: usize,
    /// Packets the stack retransmitted, and its timeouts, both sides.
    pub retransmits: u64,
    pub timeouts: u64,
    /// Packets the network corrupted or (tcp) dropped.
    pub damaged: u64,
}

/// One stack's curve.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ErrorCurve {
    pub stack: String,
    pub points: Vec<ErrorPoint>,
}

impl ErrorCurve {
    /// The lowest measured rate whose mean wait exceeds `factor` times the wait at the
    /// lowest rate (or where requests went unanswered): where the stack degrades.
    pub fn threshold(&self, factor: f64) -> Option<f64> {
        let base = self.points.first()?.wait?.mean;
        self.points
            .iter()
            .find(|p| p.unanswered > 0 || p.wait.is_none_or(|w| w.mean > factor * base))
            .map(|p| p.ber)
    }
}

/// Packets a stack's statistics say it retransmitted, and its timeouts, between `a`
/// and `b` of `sim`.
fn counts(sim: &mut SimCluster) -> (u64, u64) {
    let (a, b) = (sim.endpoint(0).peer_stats(1), sim.endpoint(1).peer_stats(0));
    (a.retransmits + b.retransmits, a.timeouts + b.timeouts)
}

fn got_message(c: &SimCluster, rank: u32) -> bool {
    c.events(rank)
        .iter()
        .any(|e| matches!(e, Event::Message { .. }))
}

/// The experiment for `protocol` (a reliable one: gbn, holefill, rmpp) on the simulated
/// network.
pub fn sim_error_rate(protocol: &str, cfg: &ErrorRateConfig) -> Result<ErrorCurve, String> {
    if !bulkwire_protocol::PROTOCOLS.contains(&protocol) || protocol == "utopia" {
        return Err(format!(
            "{protocol}: the error-rate experiment needs a reliable protocol over datagrams"
        ));
    }
    let req = Bytes::from(vec![0x11u8; cfg.request_size]);
    let rep = Bytes::from(vec![0x22u8; cfg.reply_size]);
    let mut points = Vec::new();
    for (i, &ber) in cfg.bers.iter().enumerate() {
        let mut net = cfg.net.clone();
        net.nodes = 2;
        net.ber = ber;
        net.seed = cfg.seed.wrapping_add(i as u64);
        let ep = EndpointConfig::with_deadline(0xE77, 3600 * SEC);
        let mut sim = SimCluster::with_protocol(net, ep, protocol);
        let mut waits = Vec::new();
        let mut unanswered = 0;
        for _ in 0..cfg.requests {
            let t0 = sim.now();
            let limit = t0 + cfg.limit;
            sim.send(0, 1, req.clone()).map_err(|e| e.to_string())?;
            let r = sim.run_until(limit, |c| got_message(c, 1));
            if r.is_ok() {
                sim.take_events(1);
                sim.send(1, 0, rep.clone()).map_err(|e| e.to_string())?;
            }
            let r = r.and_then(|_| sim.run_until(limit, |c| got_message(c, 0)));
            match r {
                Ok(t) => {
                    sim.take_events(0);
                    waits.push((t - t0) as f64 / 1e9);
                }
                Err(SimError::TimeLimit { .. } | SimError::Stalled { .. }) => {
                    unanswered += 1;
                    break;
                }
                Err(e) => return Err(e.to_string()),
            }
        }
        let (retransmits, timeouts) = counts(&mut sim);
        points.push(ErrorPoint {
            ber,
            wait: (!waits.is_empty()).then(|| Summary::of(&waits)),
            answered: waits.len(),
            unanswered,
            retransmits,
            timeouts,
            damaged: sim.net().total_stats().corrupted,
        });
    }
    Ok(ErrorCurve {
        stack: protocol.to_string(),
        points,
    })
}

/// Curves as text: one line per rate and stack.
pub fn to_text(curves: &[ErrorCurve]) -> String {
    let mut s = String::from(
        "stack           ber   answered  mean wait us   max wait us   retrans  timeouts  damaged\n",
    );
    for c in curves {
        for p in &c.points {
            let (mean, max) = p.wait.map_or((f64::NAN, f64::NAN), |w| (w.mean, w.max));
            s += &format!(
                "{:8} {:>12.1e} {:6}/{:<4} {:12.1} {:13.1} {:9} {:9} {:8}\n",
                c.stack,
                p.ber,
                p.answered,
                p.answered + p.unanswered,
                mean * 1e6,
                max * 1e6,
                p.retransmits,
                p.timeouts,
                p.damaged
            );
        }
        s += &format!(
            "{:8} degrades (mean wait > 2x) from ber {}\n",
            c.stack,
            c.threshold(2.0)
                .map_or("- (not within the rates measured)".into(), |b| format!(
                    "{b:.1e}"
                ))
        );
    }
    s
}
