//! The client's wait against the bit-error rate (Riesen & Maccabe's Fig. 5 and 6): rmpp,
//! gbn and holefill on the simulated network, kernel TCP between two network namespaces.

use super::Experiment;
use crate::errors::{ErrorCurve, ErrorRateConfig};
use crate::plan::{Done, Job, Plan};
use crate::section::{
    Axis, Chart, Group, SPREAD_NOTE, Scale, Section, Series, Stat, Table, spread_cell, us,
};
use crate::stack::Protocol;
use crate::stats::Spread;
use crate::suite::{Level, Suite};

pub struct Loss;

pub enum Tag {
    Sim,
    Tcp,
}

const PROTOCOLS: [Protocol; 3] = [Protocol::Rmpp, Protocol::Gbn, Protocol::Holefill];

struct Params {
    cfg: ErrorRateConfig,
    /// Kernel TCP's: fewer requests, and only up to where its threshold shows.
    tcp: ErrorRateConfig,
    /// The rates left out for kernel TCP.
    tcp_left_out: Vec<f64>,
}

fn params(s: &Suite) -> Params {
    let mut cfg = ErrorRateConfig::default();
    match s.level {
        Level::Smoke => {
            cfg.bers = vec![0.0, 1e-6];
            cfg.requests = 5;
        }
        Level::Quick => {
            cfg.bers = vec![0.0, 1e-7, 1e-6, 1e-5, 3e-5];
            cfg.requests = 40;
            cfg.limit = 30 * bulkwire_protocol::SEC;
        }
        Level::Full => {}
    }
    let mut tcp = cfg.clone();
    tcp.requests = tcp.requests.min(30);
    // Real time, unlike the simulation: at 1e-5 a request waits seconds for TCP's
    // retransmission timer, so the quick run stops where TCP's threshold shows.
    let top = if s.level == Level::Full { 1e-5 } else { 1e-6 };
    let tcp_left_out = tcp.bers.iter().copied().filter(|&b| b > top).collect();
    tcp.bers.retain(|&b| b <= top);
    Params {
        cfg,
        tcp,
        tcp_left_out,
    }
}

impl Experiment for Loss {
    type Tag = Tag;

    fn name(&self) -> &'static str {
        "loss"
    }

    fn about(&self) -> &'static str {
        "Client/server wait against bit-error rate per protocol (Riesen & Maccabe, Fig. 5 and 6)"
    }

    fn plan(&self, s: &Suite) -> Plan<Tag> {
        let p = params(s);
        let mut plan = Plan::default();
        for protocol in PROTOCOLS {
            let job = Job::SimErrors {
                protocol,
                cfg: p.cfg.clone(),
            };
            plan.add(protocol.name(), Tag::Sim, job);
        }
        plan.add("kernel TCP", Tag::Tcp, Job::TcpErrors(p.tcp.clone()));
        if !p.tcp_left_out.is_empty() {
            let rates: Vec<String> = p.tcp_left_out.iter().map(|b| format!("{b:.0e}")).collect();
            plan.skip(format!(
                "kernel TCP at bit-error rates {}: left out at this level, since each request \
                 there waits seconds in real time for TCP's retransmission timer{}",
                rates.join(", "),
                if s.level == Level::Full {
                    ""
                } else {
                    " (the full run measures up to 1e-5)"
                }
            ));
        }
        plan
    }

    fn report(&self, s: &Suite, done: &[Done<Tag>]) -> Section {
        let p = params(s);
        let mut sec = Section::new(
            "loss",
            "Client/server wait against bit-error rate (Riesen & Maccabe's Fig. 5 and 6)",
        );
        for d in done {
            if let Some(c) = d.curve() {
                sec.curves.push(c.clone());
                if matches!(d.tag, Tag::Tcp) && c.points.len() < p.tcp.bers.len() {
                    let from = p.tcp.bers[c.points.len()];
                    sec.skipped.push(format!(
                        "kernel TCP from bit-error rate {from:.0e}: a request at the rate \
                         before went unanswered within the limit, and the connection is stuck \
                         behind it"
                    ));
                }
            }
        }
        sec.tables = vec![
            wait_table(&sec.curves, &p.cfg),
            spread_table(&sec.curves, &p.cfg),
            threshold_table(&sec.curves),
        ];
        // Charts plot x = bit-error rate scaled to an integer axis: errors per 10^12 bits.
        sec.series = sec.curves.iter().map(series).collect();
        sec.charts.push(Chart {
            file: "loss.svg".into(),
            title: "Mean client wait against bit-error rate".into(),
            x: Axis::log("bit-error rate", Scale::BitErrorRate),
            y: Axis::log("mean wait", Scale::Seconds),
            series: sec.series.clone(),
        });
        sec
    }
}

fn wait_table(curves: &[ErrorCurve], cfg: &ErrorRateConfig) -> Table {
    let mut header = vec!["bit-error rate".to_string()];
    header.extend(curves.iter().map(|c| format!("{} wait (us)", c.stack)));
    let mut t = Table {
        title: "Mean client wait (us) per request against bit-error rate".into(),
        header,
        rows: Vec::new(),
        note: format!(
            "A {} B request answered by a {} B reply, {} requests per rate. Datagram \
             protocols: simulated network (10 Gb/s, 9000-byte frames; exact bit errors, \
             caught by the CRC). Kernel TCP: two network namespaces joined through bwbench, \
             which drops each frame with the probability that a frame of its length holds a \
             bit error. `none` = no request answered within the limit; `-` = not measured.",
            cfg.request_size, cfg.reply_size, cfg.requests
        ),
    };
    for ber in &cfg.bers {
        let mut row = vec![format!("{ber:.0e}")];
        for c in curves {
            row.push(match c.points.iter().find(|p| p.ber == *ber) {
                Some(p) => p
                    .wait
                    .map_or("none".into(), |w| format!("{:.1}", w.mean * 1e6)),
                None => "-".into(),
            });
        }
        t.rows.push(row);
    }
    t
}

/// The single waits of [`wait_table`]: best / median / p90 per rate.
fn spread_table(curves: &[ErrorCurve], cfg: &ErrorRateConfig) -> Table {
    let mut header = vec!["bit-error rate".to_string()];
    header.extend(curves.iter().map(|c| c.stack.clone()));
    let mut t = Table {
        title: "Single client waits per request: best / median / p90 (us)".into(),
        header,
        rows: Vec::new(),
        note: format!(
            "{SPREAD_NOTE} The requests of the table above: the mean counts each resent \
             request's timeout, the median and p90 say how many requests met one."
        ),
    };
    for ber in &cfg.bers {
        let mut row = vec![format!("{ber:.0e}")];
        for c in curves {
            let w = c.points.iter().find(|p| p.ber == *ber).and_then(|p| p.wait);
            row.push(spread_cell(w.map(Spread::from), us));
        }
        t.rows.push(row);
    }
    t
}

fn threshold_table(curves: &[ErrorCurve]) -> Table {
    let mut t = Table::new(
        "Where each stack degrades (mean wait over twice its error-free wait)",
        &["stack", "threshold bit-error rate"],
        "",
    );
    for c in curves {
        t.rows.push(vec![
            c.stack.clone(),
            c.threshold(2.0)
                .map_or("not within the rates measured".into(), |b| {
                    format!("{b:.0e}")
                }),
        ]);
    }
    t
}

fn series(c: &ErrorCurve) -> Series {
    Series {
        label: c.stack.clone(),
        group: if c.stack == "tcp" {
            Group::Baseline
        } else {
            Group::Bulkwire
        },
        points: c
            .points
            .iter()
            .filter(|p| p.ber > 0.0)
            .filter_map(|p| {
                let w = p.wait?;
                Some(Stat {
                    size: (p.ber * 1e12).round() as usize,
                    n: w.n,
                    min: w.min,
                    mean: w.mean,
                    max: w.max,
                    std_dev: w.std_dev,
                    median: w.mean,
                    delivered: None,
                    spread: Some(w.into()),
                })
            })
            .collect(),
    }
}
