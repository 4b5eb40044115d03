//! The experiments of `bwbench`, each producing a [`Section`] of the report: tables in the
//! seeds' layouts, every figure beside its baseline measured in the same run, and the raw
//! results kept for the JSON file.

use std::path::PathBuf;
use std::time::Duration;

use serde::Serialize;

use crate::pair::{self, Measure, PairResult, PairSpec, Stack};
use crate::stats::{Summary, hockney};

/// A table: a header row and rows of cells, already formatted.
#[derive(Clone, Debug, Serialize)]
pub struct Table {
    pub title: String,
    pub header: Vec<String>,
    pub rows: Vec<Vec<String>>,
    /// What the reader needs to know to read it (baseline, method).
    pub note: String,
}

impl Table {
    pub fn markdown(&self) -> String {
        let mut s = format!("#### {}\n\n", self.title);
        s += &format!("| {} |\n", self.header.join(" | "));
        s += &format!("|{}\n", "---|".repeat(self.header.len()));
        for r in &self.rows {
            s += &format!("| {} |\n", r.join(" | "));
        }
        if !self.note.is_empty() {
            s += &format!("\n{}\n", self.note);
        }
        s
    }
}

/// One experiment's part of the report.
#[derive(Clone, Debug, Serialize)]
pub struct Section {
    pub name: String,
    pub title: String,
    pub tables: Vec<Table>,
    /// Everything measured, for the JSON file.
    pub results: Vec<PairResult>,
    /// Stacks that could not be measured, and why.
    pub skipped: Vec<String>,
}

impl Section {
    pub fn markdown(&self) -> String {
        let mut s = format!("### {}\n\n", self.title);
        for t in &self.tables {
            s += &t.markdown();
            s += "\n";
        }
        for k in &self.skipped {
            s += &format!("- not measured: {k}\n");
        }
        s
    }
}

/// Runs experiments by launching worker processes of `exe` (the `bwbench` binary).
pub struct Suite {
    exe: PathBuf,
    quick: bool,
}

/// Formats seconds as microseconds.
fn us(x: f64) -> String {
    format!("{:.2}", x * 1e6)
}

/// Formats bytes per second as GB/s.
fn gbs(x: f64) -> String {
    format!("{:.3}", x / 1e9)
}

/// Formats a byte count the way the tables label sizes.
pub fn size_label(n: usize) -> String {
    if n >= 1 << 20 && n.is_multiple_of(1 << 20) {
        format!("{} MiB", n >> 20)
    } else if n >= 1 << 10 && n.is_multiple_of(1 << 10) {
        format!("{} KiB", n >> 10)
    } else {
        format!("{n} B")
    }
}

fn ratio(x: f64, base: f64) -> String {
    if base > 0.0 && x.is_finite() {
        format!("{:.2}x", x / base)
    } else {
        "-".into()
    }
}

fn median(xs: &[f64]) -> f64 {
    if xs.is_empty() {
        f64::NAN
    } else {
        Summary::of(xs).median
    }
}

impl Suite {
    pub fn new(exe: PathBuf, quick: bool) -> Suite {
        Suite { exe, quick }
    }

    /// The stacks every two-process table compares: the raw baseline first.
    fn stacks(&self) -> Vec<Stack> {
        let mut v = vec![Stack::Raw { link: "udp".into() }];
        for p in bulkwire_protocol::PROTOCOLS {
            v.push(Stack::Proto {
                protocol: p.to_string(),
                link: "udp".into(),
            });
        }
        v
    }

    fn run_all(&self, measure: &Measure) -> (Vec<PairResult>, Vec<String>) {
        let mut ok = Vec::new();
        let mut skipped = Vec::new();
        for stack in self.stacks() {
            let spec = PairSpec {
                stack: stack.clone(),
                measure: measure.clone(),
                faults: String::new(),
            };
            match pair::run(&self.exe, &spec, Duration::from_secs(600)) {
                Ok(r) => ok.push(r),
                Err(e) => skipped.push(format!("{}: {e}", stack.label())),
            }
        }
        (ok, skipped)
    }

    /// Ping-pong latency, 8 B to 64 KiB (seed 000 Table 1 at 8 B, then per size).
    pub fn latency(&self) -> Result<Section, String> {
        let sizes: Vec<usize> = if self.quick {
            vec![8, 1024, 65536]
        } else {
            (3..=16).map(|k| 1usize << k).collect()
        };
        let (warmup, iters) = if self.quick {
            (200, 2000)
        } else {
            (1000, 10000)
        };
        let measure = Measure::Latency {
            sizes: sizes.clone(),
            warmup,
            iters,
        };
        let (results, skipped) = self.run_all(&measure);
        let base = results
            .iter()
            .find(|r| matches!(r.spec.stack, Stack::Raw { .. }));
        let base_at = |i: usize| base.map_or(f64::NAN, |b| median(&b.points[i].samples));

        let mut t1 = Table {
            title: format!(
                "Half round trip at {} (us), seed 000 Table 1 layout",
                size_label(sizes[0])
            ),
            header: [
                "stack",
                "min",
                "avg",
                "max",
                "std dev",
                "median",
                "median vs raw UDP",
            ]
            .map(String::from)
            .to_vec(),
            rows: Vec::new(),
            note: format!(
                "{iters} timed exchanges after {warmup} warm-up; two processes on this host over \
                 loopback; the ratio is against raw UDP measured by the same harness in the same run."
            ),
        };
        for r in &results {
            let s = Summary::of(&r.points[0].samples);
            t1.rows.push(vec![
                r.spec.stack.label(),
                us(s.min),
                us(s.mean),
                us(s.max),
                us(s.std_dev),
                us(s.median),
                ratio(s.median, base_at(0)),
            ]);
        }
        let mut header = vec!["stack".to_string()];
        header.extend(sizes.iter().map(|&n| size_label(n)));
        let mut t2 = Table {
            title: "Median half round trip per size (us), and ratio to raw UDP".into(),
            header,
            rows: Vec::new(),
            note: String::new(),
        };
        for r in &results {
            let mut row = vec![r.spec.stack.label()];
            for (i, p) in r.points.iter().enumerate() {
                let m = median(&p.samples);
                row.push(if matches!(r.spec.stack, Stack::Raw { .. }) {
                    us(m)
                } else {
                    format!("{} ({})", us(m), ratio(m, base_at(i)))
                });
            }
            t2.rows.push(row);
        }
        Ok(Section {
            name: "latency".into(),
            title: "Latency".into(),
            tables: vec![t1, t2],
            results,
            skipped,
        })
    }

    /// Streaming bandwidth, 1 KiB to 16 MiB, and the Hockney fit (seed 002 Table 1).
    pub fn bandwidth(&self) -> Result<Section, String> {
        let sizes: Vec<usize> = if self.quick {
            vec![1 << 10, 64 << 10, 1 << 20, 16 << 20]
        } else {
            (10..=24).map(|k| 1usize << k).collect()
        };
        let (warmup, reps) = if self.quick { (1, 3) } else { (2, 7) };
        let measure = Measure::Bandwidth {
            sizes: sizes.clone(),
            warmup,
            reps,
        };
        let (results, skipped) = self.run_all(&measure);
        let base = results
            .iter()
            .find(|r| matches!(r.spec.stack, Stack::Raw { .. }));
        let base_at = |i: usize| base.map_or(f64::NAN, |b| median(&b.points[i].samples));
        let mut header = vec!["stack".to_string()];
        header.extend(sizes.iter().map(|&n| size_label(n)));
        let mut t1 = Table {
            title: "Streaming bandwidth per message size (GB/s, median), and ratio to raw UDP"
                .into(),
            header,
            rows: Vec::new(),
            note: format!(
                "OSU method: a window of 64 messages (fewer above 1 MiB, ~64 MiB per repetition), \
                 then a short acknowledgement; {reps} repetitions after {warmup} warm-up. \
                 Bandwidth counts bytes delivered: raw UDP and utopia lose what the kernel drops."
            ),
        };
        let mut t2 = Table {
            title: "Hockney fit t(n) = t0 + n / r_inf (seed 002 Table 1 layout)".into(),
            header: ["stack", "t0 (us)", "r_inf (GB/s)", "n_1/2", "delivered"]
                .map(String::from)
                .to_vec(),
            rows: Vec::new(),
            note: "Least squares of per-message time (size / bandwidth) against size over all \
                   sizes; n_1/2 = t0 * r_inf."
                .into(),
        };
        for r in &results {
            let mut row = vec![r.spec.stack.label()];
            let mut pts = Vec::new();
            let mut delivered = 1.0f64;
            for (i, p) in r.points.iter().enumerate() {
                let m = median(&p.samples);
                pts.push((p.size as f64, p.size as f64 / m));
                delivered = delivered.min(p.delivered.unwrap_or(1.0));
                row.push(if matches!(r.spec.stack, Stack::Raw { .. }) {
                    gbs(m)
                } else {
                    format!("{} ({})", gbs(m), ratio(m, base_at(i)))
                });
            }
            t1.rows.push(row);
            let h = hockney(&pts);
            t2.rows.push(vec![
                r.spec.stack.label(),
                h.map_or("-".into(), |h| us(h.t0)),
                h.map_or("-".into(), |h| gbs(h.r_inf)),
                h.map_or("-".into(), |h| size_label(h.n_half.round() as usize)),
                format!("{:.1} %", delivered * 100.0),
            ]);
        }
        Ok(Section {
            name: "bandwidth".into(),
            title: "Bandwidth".into(),
            tables: vec![t1, t2],
            results,
            skipped,
        })
    }
}
