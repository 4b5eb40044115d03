//! The experiments of `bwbench`, each producing a [`Section`] of the report: tables in the
//! seeds' layouts, every figure beside its baseline measured in the same run, charts, and
//! the raw results kept for the JSON file.

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use serde::Serialize;

use crate::mpi::{Mpi, MpiNet, MpiPoint};
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

/// Summary of one stack at one size (seconds, or bytes per second for bandwidth).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Stat {
    pub size: usize,
    pub n: usize,
    pub min: f64,
    pub mean: f64,
    pub max: f64,
    pub std_dev: f64,
    pub median: f64,
    /// Bandwidth: fraction of the bytes sent that arrived.
    pub delivered: Option<f64>,
}

impl Stat {
    fn of(size: usize, xs: &[f64], delivered: Option<f64>) -> Stat {
        let s = Summary::of(xs);
        Stat {
            size,
            n: s.n,
            min: s.min,
            mean: s.mean,
            max: s.max,
            std_dev: s.std_dev,
            median: s.median,
            delivered,
        }
    }
}

impl From<&MpiPoint> for Stat {
    fn from(p: &MpiPoint) -> Stat {
        Stat {
            size: p.size,
            n: p.n,
            min: p.min,
            mean: p.mean,
            max: p.max,
            std_dev: p.std_dev,
            median: p.median,
            delivered: None,
        }
    }
}

/// Who a series belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Group {
    /// Raw UDP, kernel TCP: the floor to compare with.
    Baseline,
    Bulkwire,
    Mpi,
}

/// One stack's measurements across sizes (or process counts).
#[derive(Clone, Debug, Serialize)]
pub struct Series {
    pub label: String,
    pub group: Group,
    pub points: Vec<Stat>,
}

impl Series {
    fn from_pair(r: &PairResult) -> Series {
        Series {
            label: r.spec.stack.label(),
            group: match r.spec.stack {
                Stack::Raw { .. } => Group::Baseline,
                Stack::Proto { .. } => Group::Bulkwire,
            },
            points: r
                .points
                .iter()
                .map(|p| Stat::of(p.size, &p.samples, p.delivered))
                .collect(),
        }
    }

    /// The median at `size`, if measured.
    pub fn at(&self, size: usize) -> Option<f64> {
        self.points
            .iter()
            .find(|p| p.size == size)
            .map(|p| p.median)
    }
}

/// A chart of some of a section's series.
#[derive(Clone, Debug, Serialize)]
pub struct Chart {
    /// File name in the report directory (`.svg`).
    pub file: String,
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    /// Multiplies the series' x and y values for display (e.g. 1e6 for microseconds).
    pub y_scale: f64,
    pub log_x: bool,
    pub log_y: bool,
    pub series: Vec<Series>,
}

/// A figure with its target, checked.
#[derive(Clone, Debug, Serialize)]
pub struct Target {
    pub what: String,
    pub measured: String,
    pub target: String,
    pub met: Option<bool>,
}

/// One experiment's part of the report.
#[derive(Clone, Debug, Serialize)]
pub struct Section {
    pub name: String,
    pub title: String,
    pub tables: Vec<Table>,
    pub charts: Vec<Chart>,
    pub series: Vec<Series>,
    pub targets: Vec<Target>,
    /// Every sample measured by bulkwire's harness.
    pub results: Vec<PairResult>,
    /// What the MPI harness reported.
    pub mpi: Vec<MpiPoint>,
    /// Stacks that could not be measured, and why.
    pub skipped: Vec<String>,
}

impl Section {
    fn new(name: &str, title: &str) -> Section {
        Section {
            name: name.into(),
            title: title.into(),
            tables: Vec::new(),
            charts: Vec::new(),
            series: Vec::new(),
            targets: Vec::new(),
            results: Vec::new(),
            mpi: Vec::new(),
            skipped: Vec::new(),
        }
    }

    pub fn markdown(&self) -> String {
        let mut s = format!("## {}\n\n", self.title);
        for t in &self.tables {
            s += &t.markdown();
            s += "\n";
        }
        for c in &self.charts {
            s += &format!("![{}]({})\n\n", c.title, c.file);
        }
        for k in &self.skipped {
            s += &format!("- not measured: {k}\n");
        }
        if !self.skipped.is_empty() {
            s += "\n";
        }
        s
    }
}

/// Formats seconds as microseconds.
pub fn us(x: f64) -> String {
    format!("{:.2}", x * 1e6)
}

/// Formats bytes per second as GB/s.
pub fn gbs(x: f64) -> String {
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

/// `x / base` as "1.23x", or "-" when either is missing.
pub fn ratio(x: f64, base: f64) -> String {
    if base > 0.0 && x.is_finite() && base.is_finite() {
        format!("{:.2}x", x / base)
    } else {
        "-".into()
    }
}

/// Runs experiments by launching worker processes of `exe` (the `bwbench` binary).
pub struct Suite {
    exe: PathBuf,
    pub quick: bool,
    work: PathBuf,
    mpi: OnceLock<Result<Mpi, String>>,
    progress: Box<dyn Fn(&str) + Send + Sync>,
}

impl Suite {
    /// A suite running `exe` for its workers, keeping build products under `work`.
    pub fn new(exe: PathBuf, quick: bool, work: PathBuf) -> Suite {
        Suite {
            exe,
            quick,
            work,
            mpi: OnceLock::new(),
            progress: Box::new(|_| {}),
        }
    }

    /// Calls `f` with a label as each run starts.
    pub fn on_progress(mut self, f: impl Fn(&str) + Send + Sync + 'static) -> Suite {
        self.progress = Box::new(f);
        self
    }

    /// The user's MPI, built once.
    pub fn mpi(&self) -> Result<&Mpi, &str> {
        self.mpi
            .get_or_init(|| Mpi::find(&self.work.join("mpi")))
            .as_ref()
            .map_err(|e| e.as_str())
    }

    /// Number of runs [`Suite::latency`] or [`Suite::bandwidth`] makes (for progress bars).
    pub fn pair_runs(&self) -> usize {
        self.stacks().len() + 2
    }

    /// The stacks every two-process table compares: the baselines first.
    fn stacks(&self) -> Vec<Stack> {
        let mut v = vec![
            Stack::Raw { link: "udp".into() },
            Stack::Raw { link: "tcp".into() },
        ];
        for p in bulkwire_protocol::PROTOCOLS {
            v.push(Stack::Proto {
                protocol: p.to_string(),
                link: "udp".into(),
            });
        }
        v
    }

    fn run_pairs(&self, measure: &Measure, sec: &mut Section) {
        for stack in self.stacks() {
            (self.progress)(&format!("{}: {}", sec.name, stack.label()));
            let spec = PairSpec {
                stack: stack.clone(),
                measure: measure.clone(),
                faults: String::new(),
            };
            match pair::run(&self.exe, &spec, Duration::from_secs(900)) {
                Ok(r) => {
                    sec.series.push(Series::from_pair(&r));
                    sec.results.push(r);
                }
                Err(e) => sec.skipped.push(format!("{}: {e}", stack.label())),
            }
        }
    }

    /// Runs `kind` under MPI over shared memory and over TCP, adding a series for each.
    #[allow(clippy::too_many_arguments)]
    fn run_mpi(
        &self,
        kind: &str,
        np: u32,
        warmup: usize,
        iters: usize,
        extra: f64,
        sizes: &[usize],
        sec: &mut Section,
    ) {
        for net in [MpiNet::Shm, MpiNet::Tcp] {
            (self.progress)(&format!("{}: MPI {}", sec.name, net.label()));
            let mpi = match self.mpi() {
                Ok(m) => m,
                Err(e) => {
                    sec.skipped.push(format!("MPI: {e}"));
                    return;
                }
            };
            let label = format!("{} {}", short_mpi(&mpi.version), net.label());
            match mpi.run(
                kind,
                np,
                net,
                warmup,
                iters,
                extra,
                sizes,
                Duration::from_secs(900),
            ) {
                Ok(points) => {
                    sec.series.push(Series {
                        label,
                        group: Group::Mpi,
                        points: points.iter().map(Stat::from).collect(),
                    });
                    sec.mpi.extend(points);
                }
                Err(e) => sec.skipped.push(format!("{label}: {e}")),
            }
        }
    }

    /// Ping-pong latency, 8 B to 64 KiB (seed 000 Table 1 at 8 B, then per size).
    pub fn latency(&self) -> Section {
        let sizes: Vec<usize> = if self.quick {
            vec![8, 1024, 65536]
        } else {
            (3..=16).map(|k| 1usize << k).collect()
        };
        let (warmup, iters) = if self.quick {
            (500, 3000)
        } else {
            (2000, 20000)
        };
        let mut sec = Section::new("latency", "Latency: ping-pong half round trip");
        self.run_pairs(
            &Measure::Latency {
                sizes: sizes.clone(),
                warmup,
                iters,
            },
            &mut sec,
        );
        self.run_mpi("latency", 2, warmup, iters, 0.0, &sizes, &mut sec);
        let base = sec.series.iter().find(|s| s.label == "raw UDP").cloned();
        let base_at = |n: usize| base.as_ref().and_then(|b| b.at(n)).unwrap_or(f64::NAN);

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
                "{iters} timed exchanges after {warmup} warm-up; two processes on this host \
                 (loopback). Raw UDP and raw TCP are measured by bulkwire's own harness with \
                 the same wait policy; MPI by the same experiment in C."
            ),
        };
        for s in &sec.series {
            let p = &s.points[0];
            t1.rows.push(vec![
                s.label.clone(),
                us(p.min),
                us(p.mean),
                us(p.max),
                us(p.std_dev),
                us(p.median),
                ratio(p.median, base_at(p.size)),
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
        for s in &sec.series {
            let mut row = vec![s.label.clone()];
            for p in &s.points {
                row.push(if s.label == "raw UDP" {
                    us(p.median)
                } else {
                    format!("{} ({})", us(p.median), ratio(p.median, base_at(p.size)))
                });
            }
            t2.rows.push(row);
        }
        sec.tables = vec![t1, t2];
        sec.charts.push(Chart {
            file: "latency.svg".into(),
            title: "Half round trip against message size".into(),
            x_label: "message size (bytes)".into(),
            y_label: "half round trip (us)".into(),
            y_scale: 1e6,
            log_x: true,
            log_y: true,
            series: sec.series.clone(),
        });
        if let Some(h) = sec.series.iter().find(|s| s.label == "holefill/udp") {
            let r = h.points[0].median / base_at(h.points[0].size);
            sec.targets.push(Target {
                what: format!(
                    "holefill {} half round trip vs raw UDP",
                    size_label(sizes[0])
                ),
                measured: format!("{r:.2}x"),
                target: "<= 1.20x".into(),
                met: r.is_finite().then_some(r <= 1.2),
            });
        }
        sec
    }

    /// Streaming bandwidth, 1 KiB to 16 MiB, and the Hockney fit (seed 002 Table 1).
    pub fn bandwidth(&self) -> Section {
        let sizes: Vec<usize> = if self.quick {
            vec![1 << 10, 64 << 10, 1 << 20, 16 << 20]
        } else {
            (10..=24).map(|k| 1usize << k).collect()
        };
        let (warmup, reps) = if self.quick { (1, 3) } else { (2, 9) };
        let mut sec = Section::new("bandwidth", "Bandwidth: streaming, and the Hockney fit");
        self.run_pairs(
            &Measure::Bandwidth {
                sizes: sizes.clone(),
                warmup,
                reps,
            },
            &mut sec,
        );
        // The MPI harness uses the OSU window of 64 at every size.
        self.run_mpi("bandwidth", 2, warmup, reps, 64.0, &sizes, &mut sec);
        let base = sec.series.iter().find(|s| s.label == "raw UDP").cloned();
        let base_at = |n: usize| base.as_ref().and_then(|b| b.at(n)).unwrap_or(f64::NAN);
        let mut header = vec!["stack".to_string()];
        header.extend(sizes.iter().map(|&n| size_label(n)));
        let mut t1 = Table {
            title: "Streaming bandwidth per message size (GB/s, median), and ratio to raw UDP"
                .into(),
            header,
            rows: Vec::new(),
            note: format!(
                "OSU method: a window of 64 messages (bulkwire: fewer above 1 MiB, ~64 MiB per \
                 repetition), then a short acknowledgement; {reps} repetitions after {warmup} \
                 warm-up. Bandwidth counts bytes delivered: raw UDP and utopia lose what the \
                 kernel drops, shown in the fit table's last column."
            ),
        };
        let mut t2 = Table {
            title: "Hockney fit t(n) = t0 + n / r_inf (seed 002 Table 1 layout)".into(),
            header: [
                "stack",
                "t0 (us)",
                "r_inf (GB/s)",
                "n_1/2",
                "delivered (worst size)",
            ]
            .map(String::from)
            .to_vec(),
            rows: Vec::new(),
            note: "Least squares of per-message time (size / bandwidth) against size over all \
                   sizes; n_1/2 = t0 * r_inf."
                .into(),
        };
        for s in &sec.series {
            let mut row = vec![s.label.clone()];
            let mut pts = Vec::new();
            let mut delivered = 1.0f64;
            for p in &s.points {
                pts.push((p.size as f64, p.size as f64 / p.median));
                delivered = delivered.min(p.delivered.unwrap_or(1.0));
                row.push(if s.label == "raw UDP" {
                    gbs(p.median)
                } else {
                    format!("{} ({})", gbs(p.median), ratio(p.median, base_at(p.size)))
                });
            }
            t1.rows.push(row);
            let h = hockney(&pts);
            t2.rows.push(vec![
                s.label.clone(),
                h.map_or("-".into(), |h| us(h.t0)),
                h.map_or("-".into(), |h| gbs(h.r_inf)),
                h.map_or("-".into(), |h| size_label(h.n_half.round() as usize)),
                format!("{:.1} %", delivered * 100.0),
            ]);
        }
        sec.tables = vec![t1, t2];
        sec.charts.push(Chart {
            file: "bandwidth.svg".into(),
            title: "Streaming bandwidth against message size".into(),
            x_label: "message size (bytes)".into(),
            y_label: "bandwidth (GB/s)".into(),
            y_scale: 1e-9,
            log_x: true,
            log_y: true,
            series: sec.series.clone(),
        });
        let mib = 1 << 20;
        if let Some(h) = sec.series.iter().find(|s| s.label == "holefill/udp")
            && let Some(x) = h.at(mib)
        {
            let r = x / base_at(mib);
            sec.targets.push(Target {
                what: "holefill 1 MiB streaming bandwidth vs raw UDP".into(),
                measured: format!("{:.0} %", r * 100.0),
                target: ">= 90 %".into(),
                met: r.is_finite().then_some(r >= 0.9),
            });
        }
        sec
    }
}

/// "Open MPI 4.1.4" out of `mpirun --version`'s first line.
fn short_mpi(v: &str) -> String {
    let v = v.trim_start_matches("mpirun (").replace(')', "");
    if v.contains("Open MPI") {
        let ver = v.split_whitespace().last().unwrap_or("");
        format!("Open MPI {ver}")
    } else {
        v.chars().take(24).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_and_ratios() {
        assert_eq!(size_label(8), "8 B");
        assert_eq!(size_label(65536), "64 KiB");
        assert_eq!(size_label(16 << 20), "16 MiB");
        assert_eq!(size_label(1500), "1500 B");
        assert_eq!(ratio(3.0, 2.0), "1.50x");
        assert_eq!(ratio(3.0, f64::NAN), "-");
        assert_eq!(short_mpi("mpirun (Open MPI) 4.1.4"), "Open MPI 4.1.4");
    }
}
