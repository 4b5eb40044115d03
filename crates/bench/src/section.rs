//! What an experiment hands to the report: a [`Section`] of tables in the papers' layouts,
//! charts, targets checked, findings for the summary, and the raw results kept for the
//! JSON file; and the formatting every table shares.

use serde::Serialize;

use crate::bspk::BspResult;
use crate::coll::CollResult;
use crate::errors::ErrorCurve;
use crate::group::GroupResult;
use crate::mpi::MpiPoint;
use crate::pair::{Measure, PairResult, Stack};
use crate::rounds::Rounds;
use crate::simexp::SimRounds;
use crate::stats::{Spread, Summary, hockney};

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
    /// An empty table with `header`.
    pub fn new(title: impl Into<String>, header: &[&str], note: impl Into<String>) -> Table {
        Table {
            title: title.into(),
            header: header.iter().map(|h| h.to_string()).collect(),
            rows: Vec::new(),
            note: note.into(),
        }
    }

    /// A table whose columns after the first are `sizes`.
    pub fn by_size(title: impl Into<String>, first: &str, sizes: &[usize]) -> Table {
        let mut header = vec![first.to_string()];
        header.extend(sizes.iter().map(|&n| size_label(n)));
        Table {
            title: title.into(),
            header,
            rows: Vec::new(),
            note: String::new(),
        }
    }

    /// A table of `series`' single operations per size, each cell "best / median / p90"
    /// ([`spread_cell`]) in the unit `unit` formats; a series with no spread at any size
    /// (one aggregate per run) is left out.
    pub fn spreads_by_size(
        title: impl Into<String>,
        series: &[Series],
        sizes: &[usize],
        unit: fn(f64) -> String,
        note: impl Into<String>,
    ) -> Table {
        let mut t = Table::by_size(title, "stack", sizes);
        t.note = note.into();
        for s in series {
            if sizes.iter().all(|&n| s.spread_at(n).is_none()) {
                continue;
            }
            let mut row = vec![s.label.clone()];
            row.extend(sizes.iter().map(|&n| spread_cell(s.spread_at(n), unit)));
            t.rows.push(row);
        }
        t
    }

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
        if self.rows.is_empty() {
            s += "\n_No row: nothing this table shows was measured in this run._\n";
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
    /// The single operations' best, median and 90th percentile (of rates: the highest,
    /// the median and the slow tail), where the harness times each; none for a figure
    /// that is one aggregate (a simulation's, a derived one).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spread: Option<Spread>,
}

impl Stat {
    /// The summary of `xs`, single operations' times in seconds, at `size`; `None` for no
    /// sample.
    pub fn of(size: usize, xs: &[f64], delivered: Option<f64>) -> Option<Stat> {
        Stat::summarise(size, xs, delivered, Spread::of(xs))
    }

    /// [`Stat::of`] for rates (bytes per second), whose best is the highest.
    pub fn of_rates(size: usize, xs: &[f64], delivered: Option<f64>) -> Option<Stat> {
        Stat::summarise(size, xs, delivered, Spread::of_rates(xs))
    }

    fn summarise(
        size: usize,
        xs: &[f64],
        delivered: Option<f64>,
        spread: Option<Spread>,
    ) -> Option<Stat> {
        if xs.is_empty() {
            return None;
        }
        let s = Summary::of(xs);
        Some(Stat {
            size,
            n: s.n,
            min: s.min,
            mean: s.mean,
            max: s.max,
            std_dev: s.std_dev,
            median: s.median,
            delivered,
            spread,
        })
    }

    /// One figure at `x` (a simulation's, or a derived one) with no spread.
    pub fn single(x: usize, n: usize, v: f64) -> Stat {
        Stat {
            size: x,
            n,
            min: v,
            mean: v,
            max: v,
            std_dev: 0.0,
            median: v,
            delivered: None,
            spread: None,
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
            spread: p.steps,
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
    pub fn from_pair(r: &PairResult) -> Series {
        Series {
            label: r.spec.stack.label(),
            group: match r.spec.stack {
                Stack::Raw { .. } => Group::Baseline,
                _ => Group::Bulkwire,
            },
            points: r
                .points
                .iter()
                .filter_map(|p| match r.spec.measure {
                    Measure::Bandwidth { .. } => Stat::of_rates(p.size, &p.samples, p.delivered),
                    _ => Stat::of(p.size, &p.samples, p.delivered),
                })
                .collect(),
        }
    }

    /// An MPI harness's points as a series.
    pub fn from_mpi(label: String, points: &[MpiPoint]) -> Series {
        Series {
            label,
            group: Group::Mpi,
            points: points.iter().map(Stat::from).collect(),
        }
    }

    /// The median at `size`, if measured.
    pub fn at(&self, size: usize) -> Option<f64> {
        self.points
            .iter()
            .find(|p| p.size == size)
            .map(|p| p.median)
    }

    /// The single operations' spread at `size`, if the harness timed each.
    pub fn spread_at(&self, size: usize) -> Option<Spread> {
        self.points
            .iter()
            .find(|p| p.size == size)
            .and_then(|p| p.spread)
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

/// What an axis of a chart shows, which decides how its ticks read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Scale {
    /// Message sizes in bytes: ticks at powers of two, "8 B", "1 KiB", "16 MiB".
    Bytes,
    /// Process counts: ticks at the counts measured.
    Count,
    /// Bit-error rates, stored as errors per 10^12 bits: ticks "1e-7".
    BitErrorRate,
    /// Seconds: ticks "10 us", "1 ms", "1 s".
    Seconds,
    /// Bytes per second: ticks "100 MB/s", "10 GB/s".
    BytesPerSecond,
}

/// An axis: its name (without unit: the ticks carry it), what it shows, and whether it is
/// logarithmic.
#[derive(Clone, Debug, Serialize)]
pub struct Axis {
    pub label: String,
    pub scale: Scale,
    pub log: bool,
}

impl Axis {
    pub fn log(label: &str, scale: Scale) -> Axis {
        Axis {
            label: label.into(),
            scale,
            log: true,
        }
    }

    pub fn linear(label: &str, scale: Scale) -> Axis {
        Axis {
            label: label.into(),
            scale,
            log: false,
        }
    }
}

/// A chart of some of a section's series: x is each point's `size`, y its median.
#[derive(Clone, Debug, Serialize)]
pub struct Chart {
    /// File name in the report directory (`.svg`).
    pub file: String,
    pub title: String,
    pub x: Axis,
    pub y: Axis,
    pub series: Vec<Series>,
}

/// A figure with its target, checked.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Target {
    pub what: String,
    pub measured: String,
    pub target: String,
    /// `None`: not decided; [`Target::why`] says why.
    pub met: Option<bool>,
    /// Why a target was not decided: "no baseline" (the baseline lost data or did not
    /// run), "no fit" (bulkwire's figure came out negative or zero), or "failed" (the
    /// target's own run failed: the report is partial).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
    /// The rounds disagree: some meet the target and some do not, so the median decided
    /// it, and a busier or quieter machine may flip it.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub split: bool,
}

impl Target {
    /// A target on the median ratio of `r`: met when `ok(ratio)`. `unit` formats each
    /// side's median figure.
    pub fn of_rounds(
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
        let ratios = r.ratios();
        Target {
            what: what.into(),
            measured,
            target: target.into(),
            met: q.filter(|q| q.is_finite()).map(&ok),
            why: r.missing().map(String::from),
            split: ratios.iter().any(|&x| ok(x)) && ratios.iter().any(|&x| !ok(x)),
        }
    }

    /// The target `judge` would check, not decided because its run failed with `error`.
    pub fn failed(what: &str, error: &str, judge: impl FnOnce(&str, &Rounds) -> Target) -> Target {
        Target {
            measured: format!("its run failed: {error}"),
            met: None,
            why: Some("failed".into()),
            split: false,
            ..judge(what, &Rounds::default())
        }
    }

    /// The targets table's verdict: "yes", "**no**", or why it was not decided.
    pub fn verdict(&self) -> String {
        let split = if self.split { " (rounds split)" } else { "" };
        match (self.met, &self.why) {
            (Some(true), _) => format!("yes{split}"),
            (Some(false), _) => format!("**no**{split}"),
            (None, Some(w)) if w == "failed" => "**failed**".into(),
            (None, Some(w)) => w.clone(),
            (None, None) => "-".into(),
        }
    }

    /// Whether the target's own run failed.
    pub fn is_failed(&self) -> bool {
        self.met.is_none() && self.why.as_deref() == Some("failed")
    }
}

/// The baselines the summary compares bulkwire with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum Baseline {
    RawUdp,
    KernelTcp,
    MpiShm,
    MpiTcp,
}

impl Baseline {
    pub const ALL: [Baseline; 4] = [
        Baseline::RawUdp,
        Baseline::KernelTcp,
        Baseline::MpiShm,
        Baseline::MpiTcp,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Baseline::RawUdp => "raw UDP",
            Baseline::KernelTcp => "kernel TCP",
            Baseline::MpiShm => "MPI over shared memory",
            Baseline::MpiTcp => "MPI over TCP",
        }
    }
}

/// Which way a figure is better.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Better {
    /// A time: lower is better.
    Lower,
    /// A rate: higher is better.
    Higher,
}

/// One line of the report's summary: a bulkwire figure beside a baseline's, both from this
/// run.
#[derive(Clone, Debug, Serialize)]
pub struct Finding {
    pub against: Baseline,
    /// What was compared, naming both sides' stacks.
    pub what: String,
    pub ours: f64,
    pub theirs: f64,
    /// How both figures are printed.
    pub unit: Unit,
    pub better: Better,
}

/// How a finding's figures are printed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub enum Unit {
    #[default]
    Seconds,
    BytesPerSecond,
}

impl Unit {
    pub fn format(self, x: f64) -> String {
        match self {
            Unit::Seconds => time_label(x),
            Unit::BytesPerSecond => rate_label(x),
        }
    }
}

impl Finding {
    /// A time (lower is better) `ours` against `theirs`, or `None` if either is missing.
    pub fn time(
        against: Baseline,
        what: String,
        ours: Option<f64>,
        theirs: Option<f64>,
    ) -> Option<Finding> {
        Finding::of(against, what, ours?, theirs?, Unit::Seconds, Better::Lower)
    }

    /// A rate (higher is better) `ours` against `theirs`, or `None` if either is missing.
    pub fn rate(
        against: Baseline,
        what: String,
        ours: Option<f64>,
        theirs: Option<f64>,
    ) -> Option<Finding> {
        Finding::of(
            against,
            what,
            ours?,
            theirs?,
            Unit::BytesPerSecond,
            Better::Higher,
        )
    }

    fn of(
        against: Baseline,
        what: String,
        ours: f64,
        theirs: f64,
        unit: Unit,
        better: Better,
    ) -> Option<Finding> {
        (ours.is_finite() && theirs.is_finite() && ours > 0.0 && theirs > 0.0).then_some(Finding {
            against,
            what,
            ours,
            theirs,
            unit,
            better,
        })
    }

    /// "1.10x slower", "2.0x faster", "level" (within 5 %).
    pub fn verdict(&self) -> String {
        let speedup = match self.better {
            Better::Lower => self.theirs / self.ours,
            Better::Higher => self.ours / self.theirs,
        };
        let times = |x: f64| {
            if x >= 10.0 {
                format!("{x:.0}x")
            } else {
                format!("{x:.2}x")
            }
        };
        if (speedup - 1.0).abs() < 0.05 {
            "level".into()
        } else if speedup > 1.0 {
            format!("**{} faster**", times(speedup))
        } else {
            format!("{} slower", times(1.0 / speedup))
        }
    }
}

/// How long one run of an experiment's plan took, against its estimate.
#[derive(Clone, Debug, Serialize)]
pub struct RunTime {
    pub label: String,
    pub seconds: f64,
    pub estimate: f64,
    /// Jobs it started (an alternating run starts several).
    pub jobs: usize,
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
    /// What the summary at the top of the report says of this section.
    pub findings: Vec<Finding>,
    /// Every sample measured by bulkwire's harness.
    pub results: Vec<PairResult>,
    /// What the MPI harness reported.
    pub mpi: Vec<MpiPoint>,
    /// Multi-process runs on this host.
    pub groups: Vec<GroupResult>,
    /// Runs on the simulated network.
    pub simulated: Vec<SimRounds>,
    /// Error-rate curves (the RMPP paper's Fig. 6).
    pub curves: Vec<ErrorCurve>,
    /// BSP parameter fits.
    pub bsp: Vec<(String, BspResult)>,
    /// Collective-latency jobs, with every sample.
    pub colls: Vec<(String, CollResult)>,
    /// Target checks measured in alternating rounds, with every round's figures.
    pub rounds: Vec<(String, Rounds)>,
    /// Stacks that could not be measured, and why.
    pub skipped: Vec<String>,
    /// Runs of the plan that failed, each with its error, named once.
    pub failed: Vec<String>,
    /// Every run of the experiment's plan, timed.
    pub runs: Vec<RunTime>,
    /// The BSP layer at scale on the simulated cluster (`bwbench scale`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub scale: Vec<crate::scale::Point>,
    /// The NAS kernels' runs (`bwbench apps`), with their profiles' figures.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub apps: Vec<crate::npb::NpbRun>,
    /// Wall-clock time the experiment took.
    pub seconds: f64,
}

impl Section {
    pub fn new(name: &str, title: &str) -> Section {
        Section {
            name: name.into(),
            title: title.into(),
            tables: Vec::new(),
            charts: Vec::new(),
            series: Vec::new(),
            targets: Vec::new(),
            findings: Vec::new(),
            results: Vec::new(),
            mpi: Vec::new(),
            groups: Vec::new(),
            simulated: Vec::new(),
            curves: Vec::new(),
            bsp: Vec::new(),
            colls: Vec::new(),
            rounds: Vec::new(),
            skipped: Vec::new(),
            failed: Vec::new(),
            runs: Vec::new(),
            scale: Vec::new(),
            apps: Vec::new(),
            seconds: 0.0,
        }
    }

    /// Records an alternating target check: its target as `judge` checks it, and its
    /// rounds; or, when its run failed, the target as failed (the run's error is listed
    /// once, with the failed runs).
    pub fn check(
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
            Err(e) => self.targets.push(Target::failed(&what, &e, judge)),
        }
    }

    /// The medians (baseline, bulkwire) of the target check whose name contains `key`,
    /// for the summary: `Some(None)` when that target was not decided (its run failed, or
    /// no round was valid), so that the summary says nothing the targets table does not;
    /// `None` when no target checks it (the summary may take the tables' figures).
    pub fn decided(&self, key: &str) -> Option<Option<(f64, f64)>> {
        if let Some((_, r)) = self.rounds.iter().find(|(w, _)| w.contains(key)) {
            return Some(r.medians());
        }
        self.targets
            .iter()
            .any(|t| t.what.contains(key))
            .then_some(None)
    }

    /// Adds `f` to the findings if both its figures were measured.
    pub fn find(&mut self, f: Option<Finding>) {
        self.findings.extend(f);
    }

    /// The series labelled `label`.
    pub fn series(&self, label: &str) -> Option<&Series> {
        self.series.iter().find(|s| s.label == label)
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
        for k in &self.failed {
            s += &format!("- **failed**: {k}\n");
        }
        for k in &self.skipped {
            s += &format!("- not measured: {k}\n");
        }
        if !self.skipped.is_empty() || !self.failed.is_empty() {
            s += "\n";
        }
        if self.seconds > 0.0 {
            s += &format!("_This experiment took {:.0} s._\n\n", self.seconds);
        }
        s
    }
}

/// "`label`: `error`", with the label once: errors that pass through several layers (the
/// worker, the job, the run) may each have put it in front already, and a job's error
/// joins its processes' errors with "; ", which often say the same thing.
pub fn named_once(label: &str, error: &str) -> String {
    let prefix = format!("{label}: ");
    let mut parts: Vec<&str> = Vec::new();
    for part in error.split("; ") {
        let mut e = part.trim();
        while let Some(rest) = e.strip_prefix(&prefix) {
            e = rest.trim_start();
        }
        if !e.is_empty() && !parts.contains(&e) {
            parts.push(e);
        }
    }
    format!("{prefix}{}", parts.join("; "))
}

/// A spread's cell: "best / median / p90" in the unit `unit` formats (of rates: the
/// highest, the median and the slow tail), or "-" when the operations were not timed
/// one by one.
pub fn spread_cell(s: Option<Spread>, unit: fn(f64) -> String) -> String {
    match s.filter(Spread::is_measured) {
        Some(s) => format!("{} / {} / {}", unit(s.best), unit(s.median), unit(s.p90)),
        None => "-".into(),
    }
}

/// The note every table of spreads carries: how to read its cells.
pub const SPREAD_NOTE: &str = "Each cell: the best, the median and the 90th percentile of \
     the single operations, the slowest process's where there are several (of rates: the \
     highest, the median and the rate 90 % of the operations reach; of fewer than ten \
     operations, the p90 is the worst). A median far from the best says most operations \
     are slow, a p90 far from the median that a few are; the other tables and the targets \
     take the medians.";

/// Formats seconds as microseconds.
pub fn us(x: f64) -> String {
    format!("{:.2}", x * 1e6)
}

/// Formats bytes per second as GB/s.
pub fn gbs(x: f64) -> String {
    format!("{:.3}", x / 1e9)
}

/// A time in seconds as microseconds, with the unit.
pub fn in_us(x: f64) -> String {
    format!("{} us", us(x))
}

/// A rate in bytes per second as GB/s, with the unit.
pub fn in_gbs(x: f64) -> String {
    format!("{} GB/s", gbs(x))
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

/// Three significant figures at most, without trailing zeros: 0.5, 12, 1.25, 250.
fn short(x: f64) -> String {
    let digits = if x >= 100.0 {
        0
    } else if x >= 10.0 {
        1
    } else {
        2
    };
    let s = format!("{x:.digits$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// A time in seconds with the unit that reads best: "350 ns", "2.5 us", "12 ms", "3 s".
pub fn time_label(x: f64) -> String {
    let (v, unit) = if x < 1e-6 {
        (x * 1e9, "ns")
    } else if x < 1e-3 {
        (x * 1e6, "us")
    } else if x < 1.0 {
        (x * 1e3, "ms")
    } else {
        (x, "s")
    };
    format!("{} {unit}", short(v))
}

/// A rate in bytes per second: "500 MB/s", "12.5 GB/s".
pub fn rate_label(x: f64) -> String {
    if x == 0.0 {
        "0".into()
    } else if x < 1e6 {
        format!("{} kB/s", short(x / 1e3))
    } else if x < 1e9 {
        format!("{} MB/s", short(x / 1e6))
    } else {
        format!("{} GB/s", short(x / 1e9))
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

/// "Open MPI 4.1.4" out of `mpirun --version`'s first line.
pub fn short_mpi(v: &str) -> String {
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
    fn an_error_names_its_run_once() {
        let e = "utopia/udp: utopia/udp: 262144 B stream: lost; utopia/udp: 262144 B \
                 stream: rank 1 exited; rank 1 exited";
        assert_eq!(
            named_once("utopia/udp", e),
            "utopia/udp: 262144 B stream: lost; 262144 B stream: rank 1 exited; rank 1 exited"
        );
        assert_eq!(named_once("raw UDP", "refused"), "raw UDP: refused");
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
        assert_eq!(time_label(2.5e-6), "2.5 us");
        assert_eq!(time_label(3.5e-7), "350 ns");
        assert_eq!(time_label(0.012), "12 ms");
        assert_eq!(time_label(3.0), "3 s");
        assert_eq!(time_label(1e-4), "100 us");
        assert_eq!(rate_label(1.25e10), "12.5 GB/s");
        assert_eq!(rate_label(5e8), "500 MB/s");
        let sp = Spread {
            best: 1e-6,
            median: 1.5e-6,
            p90: 4e-6,
        };
        assert_eq!(spread_cell(Some(sp), us), "1.00 / 1.50 / 4.00");
        assert_eq!(spread_cell(None, us), "-");
        assert_eq!(spread_cell(Some(Spread::default()), us), "-");
    }

    #[test]
    fn a_spread_table_shows_only_series_timed_one_by_one() {
        let timed = Series {
            label: "timed".into(),
            group: Group::Bulkwire,
            points: vec![Stat::of(8, &[3e-6, 1e-6, 2e-6], None).unwrap()],
        };
        let once = Series {
            label: "one figure".into(),
            group: Group::Bulkwire,
            points: vec![Stat::single(8, 1, 1e-6)],
        };
        let rates = Series {
            label: "rates".into(),
            group: Group::Bulkwire,
            points: vec![Stat::of_rates(8, &[3e9, 1e9, 2e9], None).unwrap()],
        };
        let t = Table::spreads_by_size("t", &[timed, once], &[8, 16], us, SPREAD_NOTE);
        assert_eq!(
            t.rows,
            vec![vec![
                "timed".to_string(),
                "1.00 / 2.00 / 3.00".into(),
                "-".into()
            ]]
        );
        let r = Table::spreads_by_size("r", &[rates], &[8], gbs, "");
        assert_eq!(r.rows[0][1], "3.000 / 2.000 / 1.000");
    }

    #[test]
    fn findings_say_which_side_is_faster() {
        let t = |ours, theirs| {
            Finding::time(Baseline::RawUdp, "x".into(), Some(ours), Some(theirs))
                .unwrap()
                .verdict()
        };
        assert_eq!(t(2.0, 1.0), "2.00x slower");
        assert_eq!(t(1.0, 2.0), "**2.00x faster**");
        assert_eq!(t(1.02, 1.0), "level");
        let r = Finding::rate(Baseline::MpiShm, "y".into(), Some(3.0), Some(2.0)).unwrap();
        assert_eq!(r.verdict(), "**1.50x faster**");
        assert!(Finding::time(Baseline::MpiTcp, "z".into(), None, Some(1.0)).is_none());
        assert!(Finding::time(Baseline::MpiTcp, "z".into(), Some(f64::NAN), Some(1.0)).is_none());
    }
}
