//! The experiments of `bwbench`, each producing a [`Section`] of the report: tables in the
//! seeds' layouts, every figure beside its baseline measured in the same run, charts, and
//! the raw results kept for the JSON file.

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use serde::Serialize;

use crate::bspk::{self, BspResult, BspSpec};
use crate::coll::{self, CollResult, CollSpec};
use crate::errors::{self, ErrorCurve, ErrorRateConfig};
use crate::group::{self, GroupResult, GroupSpec, Schedule};
use crate::mpi::{Mpi, MpiNet, MpiPoint};
use crate::pair::{self, Measure, PairResult, PairSpec, Stack};
use crate::rounds::{self, Rounds};
use crate::simexp::{self, SimRounds};
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
        debug_assert!(
            self.rows.iter().all(|r| r.len() == self.header.len()),
            "table {:?}: a row does not match the header",
            self.title
        );
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
                Stack::Proto { .. } | Stack::P2p { .. } => Group::Bulkwire,
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

    /// For a bandwidth series: the bandwidth at the largest size, and n_1/2 of the Hockney
    /// fit of per-message time against size.
    pub fn throughput_and_n_half(&self) -> (f64, f64) {
        let pts: Vec<(f64, f64)> = self
            .points
            .iter()
            .map(|p| (p.size as f64, p.size as f64 / p.median))
            .collect();
        let top = self.points.last().map_or(f64::NAN, |p| p.median);
        (top, hockney(&pts).map_or(f64::NAN, |h| h.n_half))
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

impl Target {
    /// A target on the median ratio of `r`: met when `ok(ratio)`. `unit` formats each
    /// side's median figure.
    fn of_rounds(
        what: &str,
        r: &Rounds,
        target: &str,
        unit: fn(f64) -> String,
        ok: impl Fn(f64) -> bool,
    ) -> Target {
        let q = r.ratio();
        let measured = match (q, r.medians()) {
            (Some(q), Some((b, c))) => {
                format!("{q:.2}x ({} vs {}; {})", unit(c), unit(b), r.describe())
            }
            _ => r.describe(),
        };
        Target {
            what: what.into(),
            measured,
            target: target.into(),
            met: q.filter(|q| q.is_finite()).map(ok),
        }
    }
}

/// A time in seconds as microseconds, with the unit.
fn in_us(x: f64) -> String {
    format!("{} us", us(x))
}

/// A rate in bytes per second as GB/s, with the unit.
fn in_gbs(x: f64) -> String {
    format!("{} GB/s", gbs(x))
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
    /// Multi-process runs on this host.
    pub groups: Vec<GroupResult>,
    /// Runs on the simulated network.
    pub simulated: Vec<SimRounds>,
    /// Error-rate curves (seed 000 Fig. 6).
    pub curves: Vec<ErrorCurve>,
    /// BSP parameter fits.
    pub bsp: Vec<(String, BspResult)>,
    /// Collective-latency jobs, with every sample.
    pub colls: Vec<(String, CollResult)>,
    /// Target checks measured in alternating rounds, with every round's figures.
    pub rounds: Vec<(String, Rounds)>,
    /// Stacks that could not be measured, and why.
    pub skipped: Vec<String>,
    /// Wall-clock time the experiment took (set by whoever runs it).
    pub seconds: f64,
}

impl Section {
    /// An empty section, for an experiment in a module of its own.
    pub fn named(name: &str, title: &str) -> Section {
        Section::new(name, title)
    }

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
            groups: Vec::new(),
            simulated: Vec::new(),
            curves: Vec::new(),
            bsp: Vec::new(),
            colls: Vec::new(),
            rounds: Vec::new(),
            skipped: Vec::new(),
            seconds: 0.0,
        }
    }

    /// Records an alternating target check: its target as `judge` checks it, and its
    /// rounds; or, when a run failed, why it was not measured.
    fn check(
        &mut self,
        what: String,
        rounds: Result<Rounds, String>,
        judge: impl FnOnce(&str, &Rounds) -> Target,
    ) {
        match rounds {
            Ok(r) => {
                self.targets.push(judge(&what, &r));
                self.rounds.push((what, r));
            }
            Err(e) => self.skipped.push(format!("{what}: {e}")),
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
        if self.seconds > 0.0 {
            s += &format!("_This experiment took {:.0} s._\n\n", self.seconds);
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

/// How long a suite runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Level {
    /// A few sizes and iterations: checks that everything runs (the test suite's smoke
    /// test), not a measurement to quote.
    Smoke,
    /// About a minute for every experiment.
    Quick,
    /// Every size, enough repetitions for stable medians.
    Full,
}

/// Runs experiments by launching worker processes of `exe` (the `bwbench` binary).
pub struct Suite {
    exe: PathBuf,
    pub level: Level,
    with_mpi: bool,
    work: PathBuf,
    mpi: OnceLock<Result<Mpi, String>>,
    progress: Box<dyn Fn(&str) + Send + Sync>,
}

impl Suite {
    /// A suite running `exe` for its workers, keeping build products under `work`.
    pub fn new(exe: PathBuf, level: Level, work: PathBuf) -> Suite {
        Suite {
            exe,
            level,
            with_mpi: true,
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

    /// Leaves MPI out even where it is installed.
    pub fn without_mpi(mut self) -> Suite {
        self.with_mpi = false;
        self
    }

    /// `smoke`, `quick` or `full` by level.
    fn pick<T>(&self, smoke: T, quick: T, full: T) -> T {
        match self.level {
            Level::Smoke => smoke,
            Level::Quick => quick,
            Level::Full => full,
        }
    }

    /// The user's MPI, built once.
    pub fn mpi(&self) -> Result<&Mpi, &str> {
        self.mpi
            .get_or_init(|| {
                if self.with_mpi {
                    Mpi::find(&self.work.join("mpi"))
                } else {
                    Err("left out (--no-mpi)".into())
                }
            })
            .as_ref()
            .map_err(|e| e.as_str())
    }

    /// Two hosts over veth beside Open MPI (see [`crate::cluster`]).
    pub fn cluster(&self) -> Section {
        crate::cluster::run(&self.exe, self.level, self.mpi(), &*self.progress)
    }

    pub fn cluster_runs(&self) -> usize {
        crate::cluster::runs(self.level)
    }

    /// Number of runs [`Suite::latency`] or [`Suite::bandwidth`] makes (for progress bars).
    pub fn pair_runs(&self) -> usize {
        // The stacks, MPI over shm and TCP, two alternating target checks.
        self.stacks().len() + 4
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
        v.push(Stack::Proto {
            protocol: bulkwire_engine::job::TCP.into(),
            link: "tcp".into(),
        });
        // What a job on one host gets by default: utopia over shared memory.
        v.push(Stack::Proto {
            protocol: "utopia".into(),
            link: "shm".into(),
        });
        v
    }

    /// Runs one two-process measurement of `stack`, without injected faults.
    fn pair(&self, stack: &Stack, measure: &Measure) -> Result<PairResult, String> {
        let spec = PairSpec {
            stack: stack.clone(),
            measure: measure.clone(),
            faults: String::new(),
        };
        pair::run(&self.exe, &spec, Duration::from_secs(900))
    }

    /// One side of an alternating latency check: the median half round trip of `stack`
    /// at `measure`'s first size.
    fn median_latency(&self, stack: &Stack, measure: &Measure) -> Result<Option<f64>, String> {
        let r = self.pair(stack, measure)?;
        Ok(r.points.first().map(|p| Summary::of(&p.samples).median))
    }

    fn run_pairs(&self, measure: &Measure, sec: &mut Section) {
        for stack in self.stacks() {
            (self.progress)(&format!("{}: {}", sec.name, stack.label()));
            match self.pair(&stack, measure) {
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
        let sizes: Vec<usize> = self.pick(
            vec![8, 1024],
            vec![8, 1024, 65536],
            (3..=16).map(|k| 1usize << k).collect(),
        );
        let (warmup, iters) = self.pick((20, 100), (500, 3000), (2000, 20000));
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
                "packets per message",
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
        let sent = (sizes.len() * (warmup + iters)) as f64;
        for s in &sec.series {
            let p = &s.points[0];
            // Packets rank 0 sent per message it sent, over the whole run (seed 000:
            // "RMPP received three times as many packets as TCP").
            let per_msg = sec
                .results
                .iter()
                .find(|r| r.spec.stack.label() == s.label)
                .and_then(|r| r.counters.as_ref())
                .map_or("-".into(), |c| {
                    format!("{:.2}", (c.data_sent + c.control_sent) as f64 / sent)
                });
            t1.rows.push(vec![
                s.label.clone(),
                us(p.min),
                us(p.mean),
                us(p.max),
                us(p.std_dev),
                us(p.median),
                ratio(p.median, base_at(p.size)),
                per_msg,
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
        // The targets, in alternating rounds at the first size (see `rounds`).
        let n = sizes[0];
        let t_iters = self.pick(100, 10_000, 20_000);
        let measure = Measure::Latency {
            sizes: vec![n],
            warmup,
            iters: t_iters,
        };
        let ours = |stack: Stack| {
            let measure = &measure;
            move || self.median_latency(&stack, measure)
        };
        let holefill = Stack::Proto {
            protocol: "holefill".into(),
            link: "udp".into(),
        };
        (self.progress)("latency: holefill/udp and raw UDP, alternating");
        let what = format!("holefill {} half round trip vs raw UDP", size_label(n));
        let r = Rounds::run(
            self.target_rounds(),
            &mut ours(Stack::Raw { link: "udp".into() }),
            &mut ours(holefill),
        );
        sec.check(what, r, |w, r| {
            Target::of_rounds(w, r, "<= 1.20x", in_us, |q| q <= 1.2)
        });
        if let Ok(mpi) = self.mpi() {
            (self.progress)("latency: utopia/shm and MPI shm, alternating");
            let what = format!(
                "shared memory {} half round trip: utopia/shm vs {} shm",
                size_label(n),
                short_mpi(&mpi.version)
            );
            let mut vader = mpi_shm_side(mpi, "latency", (warmup, t_iters, 0.0), n, |p| p.median);
            let shm = Stack::Proto {
                protocol: "utopia".into(),
                link: "shm".into(),
            };
            let r = Rounds::run(self.target_rounds(), &mut vader, &mut ours(shm));
            sec.check(what, r, |w, r| {
                Target::of_rounds(w, r, "< 1x", in_us, |q| q < 1.0)
            });
        }
        sec
    }

    /// Rounds of each alternating target check (see [`crate::rounds`]).
    pub fn target_rounds(&self) -> usize {
        self.pick(1, 3, 5)
    }

    /// Streaming bandwidth, 1 KiB to 16 MiB, and the Hockney fit (seed 002 Table 1).
    pub fn bandwidth(&self) -> Section {
        let sizes: Vec<usize> = self.pick(
            vec![1 << 10, 64 << 10],
            vec![1 << 10, 64 << 10, 1 << 20, 16 << 20],
            (10..=24).map(|k| 1usize << k).collect(),
        );
        let (warmup, reps) = self.pick((1, 2), (1, 3), (2, 9));
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
                   sizes, each point weighted by its relative error so that small and large \
                   sizes count alike; n_1/2 = t0 * r_inf. In a stream, t0 is the cost per \
                   message that overlapping does not hide, not the latency."
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
        let utopia = sec.series.iter().find(|s| s.label == "utopia/udp").cloned();
        let mut header = vec!["stack".to_string()];
        header.extend(sizes.iter().map(|&n| size_label(n)));
        let mut t3 = Table {
            title: "Bandwidth as a fraction of utopia's (seed 000 Fig. 2)".into(),
            header,
            rows: Vec::new(),
            note: "Utopia sends and trusts: the ceiling for every protocol over the same link."
                .into(),
        };
        if let Some(u) = &utopia {
            for s in sec.series.iter().filter(|s| s.group == Group::Bulkwire) {
                let mut row = vec![s.label.clone()];
                for p in &s.points {
                    row.push(
                        // Utopia may deliver nothing at a size (the kernel drops it all).
                        u.at(p.size)
                            .filter(|&b| b > 0.0)
                            .map_or("-".into(), |b| format!("{:.0} %", 100.0 * p.median / b)),
                    );
                }
                t3.rows.push(row);
            }
        }
        sec.tables = vec![t1, t2, t3];
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
        // The targets, in alternating rounds at 1 MiB (see `rounds`).
        let mib = 1 << 20;
        let (t_warmup, t_reps) = self.pick((1, 2), (3, 5), (5, 9));
        // The best complete repetition at 1 MiB over UDP with `faults` (see
        // `Point::best_complete_rate`): raw UDP counts what arrives, and a repetition in
        // which the kernel dropped datagrams says nothing about the link.
        let rate = |stack: Stack, faults: &'static str| {
            move || -> Result<Option<f64>, String> {
                let spec = PairSpec {
                    stack: stack.clone(),
                    measure: Measure::Bandwidth {
                        sizes: vec![mib],
                        warmup: t_warmup,
                        reps: t_reps,
                    },
                    faults: faults.into(),
                };
                let r = pair::run(&self.exe, &spec, Duration::from_secs(900))?;
                Ok(r.points.first().and_then(|p| p.best_complete_rate()))
            }
        };
        let holefill = Stack::Proto {
            protocol: "holefill".into(),
            link: "udp".into(),
        };
        (self.progress)("bandwidth: holefill/udp and raw UDP, alternating");
        let what = "holefill 1 MiB streaming bandwidth vs raw UDP".to_string();
        let r = Rounds::run(
            self.target_rounds(),
            &mut rate(Stack::Raw { link: "udp".into() }, ""),
            &mut rate(holefill.clone(), ""),
        );
        sec.check(what, r, |w, r| {
            Target::of_rounds(w, r, ">= 0.90x (90 %)", in_gbs, |q| q >= 0.9)
        });
        // The same stream with 1 % of the datagrams dropped on receive (the fault wrapper,
        // seeded), against holefill's own lossless figure.
        (self.progress)("bandwidth: holefill/udp with and without 1% loss, alternating");
        let what = "holefill 1 MiB streaming bandwidth with 1% loss vs its lossless".to_string();
        let r = Rounds::run(
            self.target_rounds(),
            &mut rate(holefill.clone(), ""),
            &mut rate(holefill, "loss=0.01,seed=11"),
        );
        sec.check(what, r, |w, r| {
            Target::of_rounds(w, r, ">= 0.80x (80 %)", in_gbs, |q| q >= 0.8)
        });
        sec
    }

    /// The protocols that recover losses (utopia cannot take part in all-to-all traffic
    /// that overflows buffers).
    fn reliable_protocols() -> Vec<String> {
        bulkwire_protocol::PROTOCOLS
            .iter()
            .filter(|p| **p != "utopia")
            .map(|p| p.to_string())
            .collect()
    }

    /// The reliable stacks of all-to-all runs on this host: the protocols, and kernel TCP.
    fn group_stacks() -> Vec<String> {
        let mut v = Self::reliable_protocols();
        v.push(bulkwire_engine::job::TCP.into());
        v
    }

    fn procs(&self) -> Vec<u32> {
        self.pick(vec![2, 3], vec![2, 4], vec![2, 4, 8])
    }

    fn sim_procs(&self) -> Vec<u32> {
        self.pick(vec![8], vec![8, 32], vec![8, 16, 32, 64])
    }

    /// Number of runs [`Suite::alltoall`] makes.
    pub fn alltoall_runs(&self) -> usize {
        let r = Self::reliable_protocols().len();
        Self::group_stacks().len() * self.procs().len() + 2 + r
    }

    /// Seed 000 Fig. 3: all-to-all with 60 KiB messages, per-process bandwidth, packets
    /// sent and drops against p; on this host and on the simulated switch.
    pub fn alltoall(&self) -> Section {
        let size = 60 << 10;
        let (warmup, reps) = self.pick((1, 2), (1, 5), (3, 20));
        let mut sec = Section::new("alltoall", "All-to-all, 60 KiB messages (seed 000 Fig. 3)");
        let procs = self.procs();
        for proto in Self::group_stacks() {
            let mut pts = Vec::new();
            for &p in &procs {
                (self.progress)(&format!("alltoall: {proto} p={p}"));
                let spec = GroupSpec {
                    protocol: proto.clone(),
                    size,
                    schedule: Schedule::Latin,
                    warmup,
                    reps,
                };
                match group::run(&self.exe, p, &spec, Duration::from_secs(600)) {
                    Ok(r) => {
                        pts.push(group_stat(p, &r));
                        sec.groups.push(r);
                    }
                    Err(e) => sec
                        .skipped
                        .push(format!("{} p={p}: {e}", group_label(&proto))),
                }
            }
            sec.series.push(Series {
                label: group_label(&proto),
                group: Group::Bulkwire,
                points: pts,
            });
        }
        for net in [MpiNet::Shm, MpiNet::Tcp] {
            (self.progress)(&format!("alltoall: MPI {}", net.label()));
            let mpi = match self.mpi() {
                Ok(m) => m,
                Err(e) => {
                    sec.skipped.push(format!("MPI: {e}"));
                    break;
                }
            };
            let mut pts = Vec::new();
            for &p in &procs {
                match mpi.run(
                    "alltoall",
                    p,
                    net,
                    warmup,
                    reps,
                    0.0,
                    &[size],
                    Duration::from_secs(600),
                ) {
                    Ok(v) => {
                        // Per-process bandwidth: bytes each process sends / time.
                        let m = &v[0];
                        let bw = |t: f64| (size * (p as usize - 1)) as f64 / t;
                        pts.push(Stat {
                            size: p as usize,
                            n: m.n,
                            min: bw(m.max),
                            mean: bw(m.mean),
                            max: bw(m.min),
                            std_dev: 0.0,
                            median: bw(m.median),
                            delivered: None,
                        });
                        sec.mpi.extend(v);
                    }
                    Err(e) => sec.skipped.push(format!("MPI {} p={p}: {e}", net.label())),
                }
            }
            sec.series.push(Series {
                label: format!("{} {}", short_mpi(&mpi.version), net.label()),
                group: Group::Mpi,
                points: pts,
            });
        }
        let mut header = vec!["stack".to_string()];
        for &p in &procs {
            header.push(format!("p={p} MB/s per process"));
            header.push(format!("p={p} packets (drops)"));
        }
        let mut t = Table {
            title: "All-to-all on this host: per-process bandwidth, packets sent (and drops)"
                .into(),
            header,
            rows: Vec::new(),
            note: format!(
                "Each process sends 60 KiB to every other (latin-square order) per round; \
                 {reps} rounds after {warmup} warm-up, the slowest process timed; median round. \
                 Packets: data and control packets sent by all processes over the whole run. \
                 p above the core count is oversubscribed."
            ),
        };
        for s in &sec.series {
            let mut row = vec![s.label.clone()];
            for &p in &procs {
                let pt = s.points.iter().find(|x| x.size == p as usize);
                row.push(pt.map_or("-".into(), |x| format!("{:.0}", x.median / 1e6)));
                let g = sec
                    .groups
                    .iter()
                    .find(|g| g.nprocs == p && group_label(&g.spec.protocol) == s.label);
                row.push(g.map_or("-".into(), |g| {
                    format!("{} ({})", g.data_packets + g.control_packets, g.drops)
                }));
            }
            t.rows.push(row);
        }
        let mut sim_series = Vec::new();
        for proto in Self::reliable_protocols() {
            (self.progress)(&format!("alltoall: simulated {proto}"));
            let mut pts = Vec::new();
            for &p in &self.sim_procs() {
                match simexp::alltoall(&proto, p, size, Schedule::Latin, 3, 1) {
                    Ok(r) => {
                        let bw = r.per_process_bandwidth();
                        pts.push(Stat {
                            size: p as usize,
                            n: r.seconds.len(),
                            min: bw,
                            mean: bw,
                            max: bw,
                            std_dev: 0.0,
                            median: bw,
                            delivered: None,
                        });
                        sec.simulated.push(r);
                    }
                    Err(e) => sec.skipped.push(format!("simulated {proto} p={p}: {e}")),
                }
            }
            sim_series.push(Series {
                label: format!("{proto} (simulated 10 Gb/s switch)"),
                group: Group::Bulkwire,
                points: pts,
            });
        }
        let mut header = vec!["stack".to_string()];
        for &p in &self.sim_procs() {
            header.push(format!("p={p} MB/s"));
            header.push(format!("p={p} packets (drops)"));
        }
        let mut ts = Table {
            title: "All-to-all on the simulated network (virtual time, deterministic)".into(),
            header,
            rows: Vec::new(),
            note: "Star network: 10 Gb/s links, 2 us per hop, 256 KiB per switch port, 1 MiB \
                   receive buffers, 9000-byte frames; 3 rounds, median. Shows what one host \
                   cannot: contention at a real switch."
                .into(),
        };
        for s in &sim_series {
            let mut row = vec![s.label.clone()];
            for &p in &self.sim_procs() {
                let r = sec
                    .simulated
                    .iter()
                    .find(|r| r.nprocs == p && s.label.starts_with(&r.protocol));
                row.push(r.map_or("-".into(), |r| {
                    format!("{:.0}", r.per_process_bandwidth() / 1e6)
                }));
                row.push(r.map_or("-".into(), |r| {
                    format!("{} ({})", r.data_packets + r.control_packets, r.drops)
                }));
            }
            ts.rows.push(row);
        }
        sec.tables = vec![t, ts];
        sec.charts.push(Chart {
            file: "alltoall.svg".into(),
            title: "All-to-all: per-process bandwidth against p (60 KiB messages)".into(),
            x_label: "processes".into(),
            y_label: "MB/s per process".into(),
            y_scale: 1e-6,
            log_x: false,
            log_y: false,
            series: sec.series.clone(),
        });
        sec.series.extend(sim_series);
        sec
    }

    /// Number of runs [`Suite::loss`] makes.
    pub fn loss_runs(&self) -> usize {
        4
    }

    /// Seed 000 Fig. 5 and 6: the client's wait against the bit-error rate, for rmpp, gbn
    /// and holefill on the simulated network and kernel TCP between two network
    /// namespaces (where root, `ip` and `iptables` exist).
    pub fn loss(&self) -> Section {
        let mut sec = Section::new(
            "loss",
            "Client/server wait against bit-error rate (seed 000 Fig. 5 and 6)",
        );
        let mut cfg = ErrorRateConfig::default();
        match self.level {
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
        for proto in ["rmpp", "gbn", "holefill"] {
            (self.progress)(&format!("loss: {proto} (simulated)"));
            match errors::sim_error_rate(proto, &cfg) {
                Ok(c) => sec.curves.push(c),
                Err(e) => sec.skipped.push(format!("{proto}: {e}")),
            }
        }
        (self.progress)("loss: kernel TCP (network namespaces)");
        let mut tcfg = cfg.clone();
        tcfg.requests = tcfg.requests.min(30);
        // Real time, unlike the simulation: at 1e-5 a request waits seconds for TCP's
        // retransmission timer, so the quick run stops where TCP's threshold shows.
        let top = if self.level == Level::Full {
            1e-5
        } else {
            1e-6
        };
        tcfg.bers.retain(|&b| b <= top);
        match crate::netns::tcp_error_rate(&tcfg) {
            Ok(c) => sec.curves.push(c),
            Err(e) => sec.skipped.push(format!("kernel TCP: {e}")),
        }
        let mut header = vec!["bit-error rate".to_string()];
        header.extend(sec.curves.iter().map(|c| format!("{} wait (us)", c.stack)));
        let mut t = Table {
            title: "Mean client wait (us) per request against bit-error rate".into(),
            header,
            rows: Vec::new(),
            note: format!(
                "A {} B request answered by a {} B reply, {} requests per rate. Datagram \
                 protocols: simulated network (10 Gb/s, 9000-byte frames; exact bit errors, \
                 caught by the CRC). Kernel TCP: two network namespaces over veth, frames \
                 dropped with the probability that they hold a bit error. `none` = no \
                 request answered within the limit.",
                cfg.request_size, cfg.reply_size, cfg.requests
            ),
        };
        for (i, ber) in cfg.bers.iter().enumerate() {
            let mut row = vec![format!("{ber:.0e}")];
            for c in &sec.curves {
                row.push(match c.points.get(i) {
                    Some(p) if p.ber == *ber => p
                        .wait
                        .map_or("none".into(), |w| format!("{:.1}", w.mean * 1e6)),
                    _ => "-".into(),
                });
            }
            t.rows.push(row);
        }
        let mut th = Table {
            title: "Where each stack degrades (mean wait over twice its error-free wait)".into(),
            header: vec!["stack".into(), "threshold bit-error rate".into()],
            rows: Vec::new(),
            note: String::new(),
        };
        for c in &sec.curves {
            th.rows.push(vec![
                c.stack.clone(),
                c.threshold(2.0)
                    .map_or("not within the rates measured".into(), |b| {
                        format!("{b:.0e}")
                    }),
            ]);
        }
        sec.tables = vec![t, th];
        // Charts plot x = bit-error rate scaled to an integer axis: errors per 10^12 bits.
        sec.series = sec
            .curves
            .iter()
            .map(|c| Series {
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
                        })
                    })
                    .collect(),
            })
            .collect();
        sec.charts.push(Chart {
            file: "loss.svg".into(),
            title: "Mean client wait against bit-error rate".into(),
            x_label: "bit errors per 10^12 bits".into(),
            y_label: "mean wait (us)".into(),
            y_scale: 1e6,
            log_x: true,
            log_y: true,
            series: sec.series.clone(),
        });
        sec
    }

    /// The point-to-point stacks of the overlap benchmark.
    fn p2p_stacks(&self) -> Vec<Stack> {
        let mut v: Vec<Stack> = bulkwire_protocol::PROTOCOLS
            .iter()
            .map(|p| Stack::P2p {
                protocol: p.to_string(),
                link: "udp".into(),
                progress: true,
            })
            .collect();
        v.push(Stack::P2p {
            protocol: bulkwire_engine::job::TCP.into(),
            link: "tcp".into(),
            progress: true,
        });
        v.push(Stack::P2p {
            protocol: "utopia".into(),
            link: "shm".into(),
            progress: true,
        });
        v.push(Stack::P2p {
            protocol: "holefill".into(),
            link: "udp".into(),
            progress: false,
        });
        v
    }

    /// Number of runs [`Suite::overlap`] makes.
    pub fn overlap_runs(&self) -> usize {
        self.p2p_stacks().len() + 2
    }

    /// Seed 000 Fig. 4: pre-post a receive, compute, then wait; the wait against message
    /// size, for every stack under the point-to-point layer, with and without its
    /// progress thread, beside MPI.
    pub fn overlap(&self) -> Section {
        let sizes: Vec<usize> = self.pick(
            vec![8, 64 << 10],
            vec![8, 64 << 10, 1 << 20, 16 << 20],
            vec![
                8,
                1 << 10,
                16 << 10,
                64 << 10,
                256 << 10,
                1 << 20,
                4 << 20,
                16 << 20,
            ],
        );
        let compute_ms: u64 = self.pick(10, 100, 200);
        let reps = self.pick(2, 5, 9);
        let mut sec = Section::new(
            "overlap",
            "Overlap of computation and communication (seed 000 Fig. 4)",
        );
        let measure = Measure::Overlap {
            sizes: sizes.clone(),
            compute_ms,
            reps,
        };
        for stack in self.p2p_stacks() {
            (self.progress)(&format!("overlap: {}", stack.label()));
            match self.pair(&stack, &measure) {
                Ok(r) => {
                    sec.series.push(Series::from_pair(&r));
                    sec.results.push(r);
                }
                Err(e) => sec.skipped.push(format!("{}: {e}", stack.label())),
            }
        }
        self.run_mpi(
            "overlap",
            2,
            0,
            reps,
            compute_ms as f64 / 1e3,
            &sizes,
            &mut sec,
        );
        let mut header = vec!["stack".to_string()];
        header.extend(sizes.iter().map(|&n| size_label(n)));
        let mut t = Table {
            title: format!(
                "Wait after {compute_ms} ms of computation (us, median): pre-post, compute, wait"
            ),
            header,
            rows: Vec::new(),
            note: format!(
                "Rank 0 posts a receive, tells rank 1 to send, computes {compute_ms} ms without \
                 calling the library, then waits; {reps} repetitions. A wait near zero at every \
                 size means the message arrived during the computation (seed 000: Utopia and \
                 RMPP); a wait growing with the size means it did not (UDP and TCP there). \
                 bulkwire's progress thread is what makes the difference: the row without it \
                 is the same stack."
            ),
        };
        for s in &sec.series {
            let mut row = vec![s.label.clone()];
            for &n in &sizes {
                row.push(s.at(n).map_or("-".into(), us));
            }
            t.rows.push(row);
        }
        sec.tables = vec![t];
        sec.charts.push(Chart {
            file: "overlap.svg".into(),
            title: "Wait after a long computation against message size".into(),
            x_label: "message size (bytes)".into(),
            y_label: "wait (us)".into(),
            y_scale: 1e6,
            log_x: true,
            log_y: true,
            series: sec.series.clone(),
        });
        sec
    }

    /// The stacks of the layers table: the same path (UDP, or shared memory) measured at
    /// each level.
    fn layer_stacks(&self) -> Vec<(&'static str, Stack)> {
        vec![
            ("link (raw UDP)", Stack::Raw { link: "udp".into() }),
            (
                "protocol (holefill over UDP)",
                Stack::Proto {
                    protocol: "holefill".into(),
                    link: "udp".into(),
                },
            ),
            (
                "p2p (over holefill/UDP)",
                Stack::P2p {
                    protocol: "holefill".into(),
                    link: "udp".into(),
                    progress: true,
                },
            ),
            (
                "protocol (utopia over shared memory)",
                Stack::Proto {
                    protocol: "utopia".into(),
                    link: "shm".into(),
                },
            ),
            (
                "p2p (over utopia/shm)",
                Stack::P2p {
                    protocol: "utopia".into(),
                    link: "shm".into(),
                    progress: true,
                },
            ),
        ]
    }

    /// Number of runs [`Suite::layers`] makes.
    pub fn layers_runs(&self) -> usize {
        2 * self.layer_stacks().len() + 3 + 6
    }

    /// Seed 004 Table 3: latency, throughput and N/2 at each level of the stack.
    pub fn layers(&self) -> Section {
        let mut sec = Section::new(
            "layers",
            "Each level of the stack: latency, throughput, N/2 (seed 004 Table 3)",
        );
        let (warmup, iters) = self.pick((20, 100), (300, 3000), (2000, 20000));
        let sizes: Vec<usize> = self.pick(
            vec![1 << 10, 64 << 10],
            vec![1 << 10, 16 << 10, 256 << 10, 1 << 20],
            (10..=20).map(|k| 1usize << k).collect(),
        );
        let (bw_warmup, reps) = self.pick((1, 2), (1, 3), (2, 7));
        let mut t = Table {
            title: "Basic performance parameters at each level".into(),
            header: [
                "level",
                "latency, 8 B half round trip (us)",
                "throughput at the largest size (GB/s)",
                "N/2 (Hockney)",
            ]
            .map(String::from)
            .to_vec(),
            rows: Vec::new(),
            note: format!(
                "Two processes on this host. Latency: median of {iters} ping-pongs. Throughput \
                 and N/2: OSU streaming over {} to {}, Hockney fit. BSP: latency l + g of a \
                 superstep carrying one 8-byte put, throughput 8 B / g, N/2 = 8 l / g (bspbench \
                 fit). Collectives: an 8-byte broadcast from one process to the other (the \
                 slowest process's time), throughput and N/2 from broadcast times over the same \
                 sizes. MPI rows: Open MPI's own ping-pong and streaming, the top of its stack. \
                 It receives a window into one buffer (OSU's way) and, in the row so marked, \
                 each message into a buffer of its own, as bulkwire's p2p kernel does.",
                size_label(sizes[0]),
                size_label(*sizes.last().unwrap())
            ),
        };
        // Open MPI's throughput over shared memory at the largest size, receiving as OSU
        // does (one buffer), printed beside the target.
        let mut mpi_shm_top: Option<f64> = None;
        let top_size = *sizes.last().unwrap();
        let mut row_of = |name: String, lat: Option<f64>, bw: Option<(f64, f64)>| {
            t.rows.push(vec![
                name,
                lat.map_or("-".into(), us),
                bw.map_or("-".into(), |(r, _)| gbs(r)),
                bw.map_or("-".into(), |(_, n)| size_label(n.round().max(0.0) as usize)),
            ]);
        };
        for (name, stack) in self.layer_stacks() {
            (self.progress)(&format!("layers: {name} latency"));
            let lat = self.pair(
                &stack,
                &Measure::Latency {
                    sizes: vec![8],
                    warmup,
                    iters,
                },
            );
            (self.progress)(&format!("layers: {name} bandwidth"));
            let bw = self.pair(
                &stack,
                &Measure::Bandwidth {
                    sizes: sizes.clone(),
                    warmup: bw_warmup,
                    reps,
                },
            );
            for e in [&lat, &bw].into_iter().filter_map(|r| r.as_ref().err()) {
                sec.skipped.push(format!("{name}: {e}"));
            }
            let lat_v = lat
                .as_ref()
                .ok()
                .map(|r| Summary::of(&r.points[0].samples).median);
            let bw_v = bw
                .as_ref()
                .ok()
                .map(|r| Series::from_pair(r).throughput_and_n_half());
            for r in [lat, bw].into_iter().flatten() {
                sec.series.push(Series::from_pair(&r));
                sec.results.push(r);
            }
            row_of(name.to_string(), lat_v, bw_v);
        }
        // The two levels above p2p. BSP: t(h) = l + g h over h-relations of 8-byte puts,
        // so latency = l + g (one word), r_inf = 8 / g, N/2 = 8 l / g bytes.
        (self.progress)("layers: BSP");
        let spec = BspSpec {
            hmax: self.pick(32, 128, 256),
            hstep: self.pick(8, 8, 4),
            iters: self.pick(10, 30, 100),
            batches: self.pick(2, 3, 5),
            warmup: self.pick(2, 5, 10),
        };
        let env = [
            ("BULKWIRE_PROTOCOL", "holefill"),
            ("BULKWIRE_TRANSPORT", "udp"),
        ];
        match bspk::run(&self.exe, 2, &spec, &env, Duration::from_secs(600)) {
            Ok(r) => {
                let bw = (r.g_us > 0.0).then(|| (8e6 / r.g_us, 8.0 * r.l_us / r.g_us));
                row_of(
                    "BSP (holefill/UDP, p=2; one-word superstep)".into(),
                    Some((r.l_us + r.g_us) * 1e-6),
                    bw,
                );
                sec.bsp.push(("holefill/udp".into(), r));
            }
            Err(e) => sec.skipped.push(format!("BSP: {e}")),
        }
        // Collectives: a broadcast from one process to the other, t(n) fitted like p2p.
        for (name, env) in [
            (
                "collectives (broadcast, p=2, network cache)",
                vec![("BULKWIRE_TRANSPORT", "shm"), ("BULKWIRE_COLL", "netcache")],
            ),
            (
                "collectives (broadcast, p=2, p2p over holefill/UDP)",
                vec![
                    ("BULKWIRE_TRANSPORT", "udp"),
                    ("BULKWIRE_PROTOCOL", "holefill"),
                    ("BULKWIRE_COLL", "p2p"),
                ],
            ),
        ] {
            (self.progress)(&format!("layers: {name}"));
            let mut all = vec![8];
            all.extend(&sizes);
            let spec = CollSpec {
                kinds: vec!["bcast".into()],
                sizes: all,
                warmup: warmup.min(100),
                iters: (iters / 10).max(20),
                env: env
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            };
            match coll::run(&self.exe, 2, &spec, Duration::from_secs(600)) {
                Ok(r) => {
                    let med: Vec<(f64, f64)> = r
                        .points
                        .iter()
                        .map(|x| (x.size as f64, Summary::of(&x.seconds).median))
                        .collect();
                    let top = med.last().map(|&(n, t)| n / t);
                    let fit = hockney(&med[1..]);
                    row_of(
                        name.into(),
                        Some(med[0].1),
                        top.map(|t| (t, fit.map_or(f64::NAN, |h| h.n_half))),
                    );
                    sec.colls.push((name.into(), r));
                }
                Err(e) => sec.skipped.push(format!("{name}: {e}")),
            }
        }
        for net in [MpiNet::Shm, MpiNet::Tcp] {
            let mpi = match self.mpi() {
                Ok(m) => m,
                Err(e) => {
                    sec.skipped.push(format!("MPI: {e}"));
                    break;
                }
            };
            (self.progress)(&format!("layers: MPI {}", net.label()));
            let lat = mpi.run(
                "latency",
                2,
                net,
                warmup,
                iters,
                0.0,
                &[8],
                Duration::from_secs(600),
            );
            // OSU's window of 64; `kind` says how the receiver places a window.
            let stream = |kind: &str| {
                mpi.run(
                    kind,
                    2,
                    net,
                    bw_warmup,
                    reps,
                    64.0,
                    &sizes,
                    Duration::from_secs(600),
                )
            };
            (self.progress)(&format!("layers: MPI {} bandwidth", net.label()));
            let bw = stream("bandwidth");
            let name = format!("MPI ({} {})", short_mpi(&mpi.version), net.label());
            let lat_v = lat.as_ref().ok().map(|v| v[0].median);
            let bw_v = bw.as_ref().ok().map(|v| {
                Series {
                    label: name.clone(),
                    group: Group::Mpi,
                    points: v.iter().map(Stat::from).collect(),
                }
                .throughput_and_n_half()
            });
            for r in [lat, bw] {
                match r {
                    Ok(v) => sec.mpi.extend(v),
                    Err(e) => sec.skipped.push(format!("{name}: {e}")),
                }
            }
            row_of(name.clone(), lat_v, bw_v);
            if net != MpiNet::Shm {
                continue;
            }
            mpi_shm_top = bw_v.map(|(r, _)| r);
            (self.progress)("layers: MPI shm bandwidth, a buffer per message");
            let own = stream("bandwidth-own");
            let name = format!("{name}, a receive buffer per message");
            match own {
                Ok(v) => {
                    let s = Series {
                        label: name.clone(),
                        group: Group::Mpi,
                        points: v.iter().map(Stat::from).collect(),
                    };
                    row_of(name, None, Some(s.throughput_and_n_half()));
                    sec.mpi.extend(v);
                }
                Err(e) => sec.skipped.push(format!("{name}: {e}")),
            }
        }
        sec.tables = vec![t];
        // The target, in alternating rounds at the largest size (see `rounds`): p2p over
        // shared memory against Open MPI over shared memory, both with a receive buffer per
        // message; Open MPI's OSU figure (one buffer) from the table above beside it.
        if let Ok(mpi) = self.mpi() {
            let (t_warmup, t_reps) = self.pick((1, 2), (3, 5), (5, 9));
            (self.progress)("layers: p2p over shm and MPI shm, alternating");
            let what = format!(
                "p2p over shm, {} streaming vs {} over shm (both a receive buffer per message)",
                size_label(top_size),
                short_mpi(&mpi.version)
            );
            // OSU's window of 64; the best repetition, as for p2p below.
            let mut own = mpi_shm_side(
                mpi,
                "bandwidth-own",
                (t_warmup, t_reps, 64.0),
                top_size,
                |p| p.max,
            );
            // Both sides: the best repetition (see `Point::best_complete_rate`).
            let mut p2p = || -> Result<Option<f64>, String> {
                let stack = Stack::P2p {
                    protocol: "utopia".into(),
                    link: "shm".into(),
                    progress: true,
                };
                let measure = Measure::Bandwidth {
                    sizes: vec![top_size],
                    warmup: t_warmup,
                    reps: t_reps,
                };
                let r = self.pair(&stack, &measure)?;
                Ok(r.points.first().and_then(|p| p.best_complete_rate()))
            };
            let r = Rounds::run(self.target_rounds(), &mut own, &mut p2p);
            sec.check(what, r, |w, r| {
                let mut t = Target::of_rounds(w, r, ">= 1x", in_gbs, |q| q >= 1.0);
                if let (Some(osu), Some((_, p))) = (mpi_shm_top, r.medians()) {
                    t.measured += &format!(
                        "; {:.2}x against MPI receiving into one buffer, OSU's way",
                        p / osu
                    );
                }
                t
            });
        }
        sec
    }

    /// The BSP stacks: the seed's BSPlib over UDP, and what one host gets by default.
    fn bsp_stacks() -> [(&'static str, [(&'static str, &'static str); 2]); 2] {
        [
            (
                "holefill/udp",
                [
                    ("BULKWIRE_PROTOCOL", "holefill"),
                    ("BULKWIRE_TRANSPORT", "udp"),
                ],
            ),
            (
                "utopia/shm",
                [
                    ("BULKWIRE_PROTOCOL", "utopia"),
                    ("BULKWIRE_TRANSPORT", "shm"),
                ],
            ),
        ]
    }

    fn bsp_procs(&self) -> Vec<u32> {
        self.pick(vec![2], vec![2, 4], vec![2, 4])
    }

    /// Number of runs [`Suite::bsp`] makes.
    pub fn bsp_runs(&self) -> usize {
        Self::bsp_stacks().len() * self.bsp_procs().len() + 1 + 4 * self.bsp_procs().len()
    }

    /// bspbench's g and l by least squares over h-relations of 8-byte puts, and the time
    /// of an empty superstep, at p = 2 and 4, beside MPI's barrier and all-to-all.
    pub fn bsp(&self) -> Section {
        let mut sec = Section::new("bsp", "BSP parameters: g, l and the empty superstep");
        let spec = BspSpec {
            hmax: self.pick(32, 256, 256),
            hstep: self.pick(8, 4, 1),
            iters: self.pick(10, 50, 100),
            batches: self.pick(2, 3, 5),
            warmup: self.pick(2, 5, 10),
        };
        let procs = self.bsp_procs();
        for (label, env) in Self::bsp_stacks() {
            for &p in &procs {
                (self.progress)(&format!("bsp: {label} p={p}"));
                match bspk::run(&self.exe, p, &spec, &env, Duration::from_secs(900)) {
                    Ok(r) => sec.bsp.push((label.to_string(), r)),
                    Err(e) => sec.skipped.push(format!("BSP {label} p={p}: {e}")),
                }
            }
        }
        // The first target in alternating rounds (see `crate::rounds`): the empty superstep
        // alone, in a job of its own, against raw UDP's half round trip. One figure of
        // each, a minute apart, gave 1.1-3.3x in one afternoon.
        (self.progress)("bsp: empty superstep and raw UDP, alternating");
        let (warmup, iters) = self.pick((20, 100), (500, 3000), (2000, 20000));
        let raw_latency = Measure::Latency {
            sizes: vec![8],
            warmup,
            iters,
        };
        let mut raw = || self.median_latency(&Stack::Raw { link: "udp".into() }, &raw_latency);
        let empty_only = BspSpec {
            hmax: 0,
            hstep: 1,
            iters: self.pick(20, 200, 500),
            batches: 5,
            warmup: self.pick(5, 50, 100),
        };
        let holefill = Self::bsp_stacks()[0].1;
        let mut empty = || -> Result<Option<f64>, String> {
            let r = bspk::run(
                &self.exe,
                2,
                &empty_only,
                &holefill,
                Duration::from_secs(300),
            )?;
            Ok(Some(r.empty_us * 1e-6))
        };
        let rounds = Rounds::run(self.target_rounds(), &mut raw, &mut empty);
        sec.check(
            "BSP empty superstep at p=2 (holefill/udp) vs raw UDP half round trip".into(),
            rounds,
            |w, r| Target::of_rounds(w, r, "<= 2.5x", in_us, |q| q <= 2.5),
        );
        let mut t = Table {
            title: "BSP parameters (bspbench method), and MPI's counterparts".into(),
            header: [
                "stack",
                "p",
                "empty superstep / barrier (us)",
                "l (us)",
                "g (us per 8-byte word)",
            ]
            .map(String::from)
            .to_vec(),
            rows: Vec::new(),
            note: format!(
                "bulkwire: h-relations of 8-byte puts, h = 0..{} in steps of {}, each time the \
                 median of {} batch means of {} supersteps; t(h) = l + g h by least squares \
                 from h = p. MPI: MPI_Barrier for the empty superstep; l and g fitted the same \
                 way to MPI_Alltoall of h-relations (h words each process sends). p above \
                 the core count is oversubscribed.",
                spec.hmax, spec.hstep, spec.batches, spec.iters
            ),
        };
        for (label, r) in &sec.bsp {
            t.rows.push(vec![
                format!("bulkwire BSP, {label}"),
                r.nprocs.to_string(),
                format!("{:.2}", r.empty_us),
                format!("{:.2}", r.l_us),
                format!("{:.4}", r.g_us),
            ]);
        }
        // MPI_Barrier over TCP at p = 2: the second target's baseline.
        let mut barrier2 = None;
        for net in [MpiNet::Shm, MpiNet::Tcp] {
            let mpi = match self.mpi() {
                Ok(m) => m,
                Err(e) => {
                    sec.skipped.push(format!("MPI: {e}"));
                    break;
                }
            };
            let name = format!("{} {}", short_mpi(&mpi.version), net.label());
            for &p in &procs {
                (self.progress)(&format!("bsp: MPI {} barrier p={p}", net.label()));
                let barrier = mpi.run(
                    "barrier",
                    p,
                    net,
                    warmup,
                    iters / 10,
                    0.0,
                    &[0],
                    Duration::from_secs(600),
                );
                (self.progress)(&format!("bsp: MPI {} alltoall p={p}", net.label()));
                // Bytes per pair giving h-relations of up to ~256 words per process.
                let pair_bytes: Vec<usize> = [1usize, 8, 32, 64, 128, 256]
                    .iter()
                    .map(|h| (h * 8 / (p as usize - 1)).max(8) / 8 * 8)
                    .collect();
                let a2a = mpi.run(
                    "alltoall",
                    p,
                    net,
                    10,
                    self.pick(20, 200, 1000),
                    0.0,
                    &pair_bytes,
                    Duration::from_secs(600),
                );
                let empty = barrier.as_ref().ok().map(|v| v[0].median * 1e6);
                if net == MpiNet::Tcp && p == 2 {
                    barrier2 = empty.map(|us| us * 1e-6);
                }
                let fit = a2a.as_ref().ok().and_then(|v| {
                    let pts: Vec<(f64, f64)> = v
                        .iter()
                        .map(|m| ((m.size * (p as usize - 1) / 8) as f64, m.median * 1e6))
                        .collect();
                    crate::stats::fit_line(&pts)
                });
                for r in [barrier, a2a] {
                    match r {
                        Ok(v) => sec.mpi.extend(v),
                        Err(e) => sec.skipped.push(format!("{name} p={p}: {e}")),
                    }
                }
                t.rows.push(vec![
                    name.clone(),
                    p.to_string(),
                    empty.map_or("-".into(), |x| format!("{x:.2}")),
                    fit.map_or("-".into(), |f| format!("{:.2}", f.a)),
                    fit.map_or("-".into(), |f| format!("{:.4}", f.b)),
                ]);
            }
        }
        sec.tables = vec![t];
        let empty2 = sec
            .bsp
            .iter()
            .find(|(l, r)| l == "holefill/udp" && r.nprocs == 2)
            .map(|(_, r)| r.empty_us * 1e-6);
        if let (Some(e), Some(b)) = (empty2, barrier2) {
            sec.targets.push(Target {
                what: "BSP empty superstep at p=2 (holefill/udp) vs MPI_Barrier over TCP".into(),
                measured: format!("{:.2} us vs {:.2} us", e * 1e6, b * 1e6),
                target: "faster".into(),
                met: Some(e < b),
            });
        }
        sec
    }

    /// How bulkwire's collectives are carried in the collectives experiment: the default on
    /// one host (the network cache), and every byte through UDP with the point-to-point
    /// algorithms (what a job across hosts gets); the full run adds the point-to-point
    /// algorithms over shared memory.
    fn coll_stacks(&self) -> Vec<(&'static str, Vec<(&'static str, &'static str)>)> {
        let mut v = vec![
            (
                "netcache",
                vec![("BULKWIRE_TRANSPORT", "shm"), ("BULKWIRE_COLL", "netcache")],
            ),
            (
                "p2p over holefill/udp",
                vec![
                    ("BULKWIRE_TRANSPORT", "udp"),
                    ("BULKWIRE_PROTOCOL", "holefill"),
                    ("BULKWIRE_COLL", "p2p"),
                ],
            ),
        ];
        if self.level == Level::Full {
            v.push((
                "p2p over utopia/shm",
                vec![
                    ("BULKWIRE_TRANSPORT", "shm"),
                    ("BULKWIRE_PROTOCOL", "utopia"),
                    ("BULKWIRE_COLL", "p2p"),
                ],
            ));
        }
        v
    }

    fn coll_procs(&self) -> Vec<u32> {
        self.pick(vec![2], vec![2, 4], vec![2, 4])
    }

    fn coll_kinds(&self) -> Vec<&'static str> {
        self.pick(
            vec!["barrier", "bcast", "allgather", "alltoall", "allreduce"],
            coll::KINDS.to_vec(),
            coll::KINDS.to_vec(),
        )
    }

    /// Number of runs [`Suite::collectives`] makes.
    pub fn collectives_runs(&self) -> usize {
        let p = self.coll_procs().len();
        let rounds = if self.mpi().is_ok() {
            // Per pair of stacks and round: one bulkwire job, one MPI job per collective.
            2 * self.target_rounds() * 3
        } else {
            0
        };
        self.coll_stacks().len() * p + 2 * p * self.coll_kinds().len() + rounds
    }

    /// OSU-style latency of each collective per size and p, bulkwire beside MPI over
    /// shared memory and over TCP.
    pub fn collectives(&self) -> Section {
        let mut sec = Section::new("collectives", "Collectives: latency per size and p");
        let sizes: Vec<usize> = self.pick(
            vec![8, 4 << 10],
            vec![8, 1 << 10, 64 << 10],
            vec![8, 128, 1 << 10, 8 << 10, 64 << 10, 256 << 10, 1 << 20],
        );
        let (warmup, iters) = self.pick((5, 20), (20, 200), (50, 500));
        let kinds = self.coll_kinds();
        let procs = self.coll_procs();
        // (stack label, p, kind) -> series over sizes.
        let mut rows: Vec<(String, u32, String, Series)> = Vec::new();
        for (label, env) in self.coll_stacks() {
            for &p in &procs {
                (self.progress)(&format!("collectives: {label} p={p}"));
                let spec = CollSpec {
                    kinds: kinds.iter().map(|k| k.to_string()).collect(),
                    sizes: sizes.clone(),
                    warmup,
                    iters,
                    env: env
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                };
                match coll::run(&self.exe, p, &spec, Duration::from_secs(900)) {
                    Ok(r) => {
                        for &k in &kinds {
                            let points = r
                                .points
                                .iter()
                                .filter(|x| x.kind == k)
                                .map(|x| Stat::of(x.size, &x.seconds, None))
                                .collect();
                            let series = Series {
                                label: format!("bulkwire {label}, {k}, p={p}"),
                                group: Group::Bulkwire,
                                points,
                            };
                            rows.push((label.to_string(), p, k.to_string(), series));
                        }
                        sec.colls.push((label.to_string(), r));
                    }
                    Err(e) => sec.skipped.push(format!("{label} p={p}: {e}")),
                }
            }
        }
        let mut mpi_name = None;
        for net in [MpiNet::Shm, MpiNet::Tcp] {
            let mpi = match self.mpi() {
                Ok(m) => m,
                Err(e) => {
                    sec.skipped.push(format!("MPI: {e}"));
                    break;
                }
            };
            let label = format!("MPI {}", net.label());
            mpi_name = Some(short_mpi(&mpi.version));
            for &p in &procs {
                for &k in &kinds {
                    (self.progress)(&format!("collectives: {label} {k} p={p}"));
                    match mpi.run(
                        k,
                        p,
                        net,
                        warmup,
                        iters,
                        0.0,
                        &sizes,
                        Duration::from_secs(600),
                    ) {
                        Ok(v) => {
                            let series = Series {
                                label: format!("{label}, {k}, p={p}"),
                                group: Group::Mpi,
                                points: v.iter().map(Stat::from).collect(),
                            };
                            sec.mpi.extend(v);
                            rows.push((label.clone(), p, k.to_string(), series));
                        }
                        Err(e) => sec.skipped.push(format!("{label} {k} p={p}: {e}")),
                    }
                }
            }
        }
        let find = |stack: &str, p: u32, k: &str, size: usize| {
            rows.iter()
                .find(|r| r.0 == stack && r.1 == p && r.2 == k)
                .and_then(|r| r.3.at(size))
        };
        let mut columns: Vec<String> = self.coll_stacks().iter().map(|s| s.0.to_string()).collect();
        if mpi_name.is_some() {
            columns.extend(["MPI shm".to_string(), "MPI TCP".to_string()]);
        }
        for &p in &procs {
            let mut header = vec!["collective".to_string(), "size".to_string()];
            header.extend(columns.iter().map(|c| format!("{c} (us)")));
            if mpi_name.is_some() {
                header.push("netcache / MPI shm".into());
                header.push("p2p over UDP / MPI TCP".into());
            }
            let mut t = Table {
                title: format!("Collective latency at p = {p} (us)"),
                header,
                rows: Vec::new(),
                note: format!(
                    "OSU method: per call, a barrier, then the call timed on every process; the \
                     slowest process's time, median of {iters} calls after {warmup} warm-up \
                     calls, one job per stack running every collective. Sizes: bytes per \
                     process (per block for scatter, gather, allgather, alltoall); reduce and \
                     allreduce sum size/8 doubles. MPI: {}, the same loop in C, forced to \
                     the ob1 layer with vader (shm) or tcp. One host{}.",
                    mpi_name.clone().unwrap_or_else(|| "not measured".into()),
                    if p as usize > std::thread::available_parallelism().map_or(1, |n| n.get()) {
                        ", more processes than cores (oversubscribed)"
                    } else {
                        ""
                    }
                ),
            };
            for &k in &kinds {
                for &size in &sizes {
                    let mut row = vec![k.to_string(), size_label(size)];
                    for c in &columns {
                        row.push(find(c, p, k, size).map_or("-".into(), us));
                    }
                    if mpi_name.is_some() {
                        let pair =
                            |a: &str, b: &str| match (find(a, p, k, size), find(b, p, k, size)) {
                                (Some(x), Some(y)) => ratio(x, y),
                                _ => "-".into(),
                            };
                        row.push(pair("netcache", "MPI shm"));
                        row.push(pair("p2p over holefill/udp", "MPI TCP"));
                    }
                    t.rows.push(row);
                }
            }
            sec.tables.push(t);
        }
        // The targets: alltoall and allgather at p = 4 (p = 2 where 4 is not run),
        // in alternating rounds (see `rounds`): a p = 4 figure moves by up to 2x between
        // runs a minute apart, as much as the stacks differ.
        let tp = *procs.last().unwrap_or(&2);
        if let Ok(mpi) = self.mpi() {
            let stacks = self.coll_stacks();
            for (ours, net, factor, want) in [
                ("netcache", MpiNet::Shm, 1.0, "no slower than MPI over shm"),
                (
                    "p2p over holefill/udp",
                    MpiNet::Tcp,
                    0.5,
                    ">= 2x faster than MPI over TCP",
                ),
            ] {
                let Some((_, env)) = stacks.iter().find(|s| s.0 == ours) else {
                    continue;
                };
                (self.progress)(&format!(
                    "collectives: {ours} and MPI {}, alternating",
                    net.label()
                ));
                let env: Vec<(String, String)> = env
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect();
                // Rounds with the quick level's repetitions: five rounds of the full
                // level's 550 calls per size took over four minutes.
                let t = CollTargets {
                    kinds: &["alltoall", "allgather"],
                    sizes: &sizes,
                    p: tp,
                    warmup: warmup.min(20),
                    iters: iters.min(200),
                };
                match t.rounds(self, mpi, net, env) {
                    Ok(found) => {
                        for (k, by_size) in found {
                            let what =
                                format!("{k} at p={tp}: bulkwire {ours} / MPI {}", net.label());
                            sec.targets.push(t.judge(&what, &by_size, factor, want));
                            for (z, r) in by_size {
                                sec.rounds.push((format!("{what}, {}", size_label(z)), r));
                            }
                        }
                    }
                    Err(e) => sec
                        .skipped
                        .push(format!("{ours} against MPI {}: {e}", net.label())),
                }
            }
        }
        let chart_kind = if kinds.contains(&"alltoall") {
            "alltoall"
        } else {
            kinds[0]
        };
        sec.charts.push(Chart {
            file: "collectives.svg".into(),
            title: format!("{chart_kind} latency at p={tp} against size"),
            x_label: "bytes per process".into(),
            y_label: "latency (us)".into(),
            y_scale: 1e6,
            log_x: true,
            log_y: true,
            series: rows
                .iter()
                .filter(|r| r.1 == tp && r.2 == chart_kind)
                .map(|r| Series {
                    label: r.0.clone(),
                    ..r.3.clone()
                })
                .collect(),
        });
        sec.series = rows.into_iter().map(|r| r.3).collect();
        sec
    }

    /// Number of runs [`Suite::exchange`] makes.
    pub fn exchange_runs(&self) -> usize {
        2 + 2
    }

    /// Seed 003 Table 1: total exchange with destinations in latin-square order against
    /// pid order, on this host and on the simulated switch.
    pub fn exchange(&self) -> Section {
        let mut sec = Section::new(
            "exchange",
            "Total exchange: latin-square against pid-order destinations (seed 003 Table 1)",
        );
        let (warmup, reps) = self.pick((1, 2), (1, 5), (3, 20));
        let p = self.pick(2, 4, 8);
        let mut t = Table {
            title: format!("Time for a {p}-process total exchange (us), holefill"),
            header: ["where", "message", "latin square", "pid order", "factor"]
                .map(String::from)
                .to_vec(),
            rows: Vec::new(),
            note: "small = 16 K words (64 KiB) per pair, big = 32 K words (128 KiB), as in the \
                   seed. On one host there is no switch to congest, so the factor is small; \
                   the simulated network has one (virtual time)."
                .into(),
        };
        for (name, size) in [("small", 64usize << 10), ("big", 128 << 10)] {
            let mut times = Vec::new();
            for sched in [Schedule::Latin, Schedule::PidOrder] {
                (self.progress)(&format!("exchange: {name} {sched:?}"));
                let spec = GroupSpec {
                    protocol: "holefill".into(),
                    size,
                    schedule: sched,
                    warmup,
                    reps,
                };
                match group::run(&self.exe, p, &spec, Duration::from_secs(600)) {
                    Ok(r) => {
                        times.push(Summary::of(&r.seconds).median);
                        sec.groups.push(r);
                    }
                    Err(e) => {
                        sec.skipped.push(format!("{name} {sched:?}: {e}"));
                        times.push(f64::NAN);
                    }
                }
            }
            t.rows.push(vec![
                format!("this host, p={p}"),
                name.into(),
                us(times[0]),
                us(times[1]),
                ratio(times[1], times[0]),
            ]);
        }
        let sp = self.pick(8, 16, 32);
        for (name, size) in [("small", 64usize << 10), ("big", 128 << 10)] {
            let mut times = Vec::new();
            for sched in [Schedule::Latin, Schedule::PidOrder] {
                match simexp::alltoall("holefill", sp, size, sched, 3, 2) {
                    Ok(r) => {
                        times.push(Summary::of(&r.seconds).median);
                        sec.simulated.push(r);
                    }
                    Err(e) => {
                        sec.skipped.push(format!("simulated {name} {sched:?}: {e}"));
                        times.push(f64::NAN);
                    }
                }
            }
            t.rows.push(vec![
                format!("simulated switch, p={sp}"),
                name.into(),
                us(times[0]),
                us(times[1]),
                ratio(times[1], times[0]),
            ]);
        }
        sec.tables = vec![t];
        sec
    }
}

/// One side of alternating rounds (see [`Rounds`]): `kind` run by the MPI harness over
/// shared memory at `size` with (warm-up, iterations, extra), and the figure `pick` takes
/// from its result.
fn mpi_shm_side<'a>(
    mpi: &'a Mpi,
    kind: &'a str,
    (warmup, iters, extra): (usize, usize, f64),
    size: usize,
    pick: fn(&MpiPoint) -> f64,
) -> impl FnMut() -> Result<Option<f64>, String> + 'a {
    move || {
        let p = mpi.run(
            kind,
            2,
            MpiNet::Shm,
            warmup,
            iters,
            extra,
            &[size],
            Duration::from_secs(600),
        )?;
        Ok(p.first().map(pick))
    }
}

/// The collective targets' alternating rounds: per round, one bulkwire job that runs
/// every kind at every size, and one MPI job per kind.
struct CollTargets<'a> {
    kinds: &'a [&'a str],
    sizes: &'a [usize],
    p: u32,
    warmup: usize,
    iters: usize,
}

/// Median seconds per call by (collective, size).
type CollMedians = Vec<((String, usize), f64)>;

/// One collective's rounds, size by size.
type BySize = Vec<(usize, Rounds)>;

impl CollTargets<'_> {
    /// Per kind, per size, the rounds of MPI over `net` (baseline) and bulkwire with `env`.
    fn rounds(
        &self,
        suite: &Suite,
        mpi: &Mpi,
        net: MpiNet,
        env: Vec<(String, String)>,
    ) -> Result<Vec<(String, BySize)>, String> {
        let spec = CollSpec {
            kinds: self.kinds.iter().map(|k| k.to_string()).collect(),
            sizes: self.sizes.to_vec(),
            warmup: self.warmup,
            iters: self.iters,
            env,
        };
        let mut ours = || -> Result<CollMedians, String> {
            let r = coll::run(&suite.exe, self.p, &spec, Duration::from_secs(900))?;
            Ok(r.points
                .iter()
                .map(|x| ((x.kind.clone(), x.size), x.summary().median))
                .collect())
        };
        let mut theirs = || -> Result<CollMedians, String> {
            let mut v = Vec::new();
            for k in self.kinds {
                let pts = mpi.run(
                    k,
                    self.p,
                    net,
                    self.warmup,
                    self.iters,
                    0.0,
                    self.sizes,
                    Duration::from_secs(600),
                )?;
                v.extend(pts.iter().map(|x| ((k.to_string(), x.size), x.median)));
            }
            Ok(v)
        };
        let all = rounds::abba(suite.target_rounds(), &mut theirs, &mut ours)?;
        let at = |m: &CollMedians, k: &str, z: usize| {
            m.iter().find(|e| e.0.0 == k && e.0.1 == z).map(|e| e.1)
        };
        Ok(self
            .kinds
            .iter()
            .map(|&k| {
                let by_size = self
                    .sizes
                    .iter()
                    .map(|&z| {
                        let mut r = Rounds::default();
                        for (b, c) in &all {
                            match (at(b, k, z), at(c, k, z)) {
                                (Some(b), Some(c)) if b > 0.0 => {
                                    r.base.push(b);
                                    r.cand.push(c);
                                }
                                _ => r.invalid += 1,
                            }
                        }
                        (z, r)
                    })
                    .collect();
                (k.to_string(), by_size)
            })
            .collect())
    }

    /// The target on the worst size's median ratio.
    fn judge(&self, what: &str, by_size: &[(usize, Rounds)], factor: f64, want: &str) -> Target {
        let worst = by_size
            .iter()
            .filter_map(|(z, r)| Some((*z, r.ratio()?, r)))
            .max_by(|a, b| a.1.total_cmp(&b.1));
        let measured = match worst {
            Some((z, q, r)) => format!(
                "worst {q:.2}x at {} ({}); all sizes: {}",
                size_label(z),
                r.describe(),
                by_size
                    .iter()
                    .map(|(z, r)| match r.ratio() {
                        Some(q) => format!("{} {q:.2}x", size_label(*z)),
                        None => format!("{} -", size_label(*z)),
                    })
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            None => "no valid round".into(),
        };
        Target {
            what: what.into(),
            measured,
            target: format!("<= {factor}x ({want})"),
            met: worst.map(|w| w.1 <= factor),
        }
    }
}

/// How a group run's stack is labelled: like [`Stack::label`] for the same protocol.
fn group_label(protocol: &str) -> String {
    Stack::Proto {
        protocol: protocol.into(),
        link: "udp".into(),
    }
    .label()
}

/// Per-process bandwidth of a group run, as a point at x = p.
fn group_stat(p: u32, r: &GroupResult) -> Stat {
    let bw = r.per_process_bandwidth();
    let per = |t: f64| (r.spec.size * (p as usize - 1)) as f64 / t;
    let s = Summary::of(&r.seconds);
    Stat {
        size: p as usize,
        n: s.n,
        min: per(s.max),
        mean: per(s.mean),
        max: per(s.min),
        std_dev: 0.0,
        median: bw,
        delivered: None,
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
    fn collective_targets_take_the_worst_size_of_the_median_ratios() {
        let t = CollTargets {
            kinds: &["alltoall"],
            sizes: &[8, 1024],
            p: 4,
            warmup: 1,
            iters: 1,
        };
        let r = |base: &[f64], cand: &[f64]| Rounds {
            base: base.to_vec(),
            cand: cand.to_vec(),
            invalid: 0,
        };
        // 8 B: ratios 0.5, 2.0, 0.8 -> median 0.8; 1 KiB: 0.9, 0.95, 1.1 -> 0.95.
        let by_size = vec![
            (8, r(&[2.0, 1.0, 1.0], &[1.0, 2.0, 0.8])),
            (1024, r(&[1.0, 1.0, 1.0], &[0.9, 0.95, 1.1])),
        ];
        let got = t.judge("a", &by_size, 1.0, "no slower");
        assert_eq!(got.met, Some(true));
        assert!(
            got.measured
                .starts_with("worst 0.95x at 1 KiB (median of 3"),
            "{}",
            got.measured
        );
        assert!(
            got.measured.ends_with("all sizes: 8 B 0.80x, 1 KiB 0.95x"),
            "{}",
            got.measured
        );
        let got = t.judge("a", &by_size, 0.9, "faster");
        assert_eq!(got.met, Some(false));
        let none = vec![(8, Rounds::default())];
        assert_eq!(t.judge("a", &none, 1.0, "x").met, None);
    }

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
