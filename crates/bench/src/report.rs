//! The report `bwbench all` writes: `report.md` (tables in the papers' layouts, every figure
//! beside its baseline), `results.json` (every measurement with the machine and
//! parameters) and SVG charts.

use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use bulkwire_launch::files::write_private;
use serde::Serialize;

use crate::section::{Baseline, Finding, Section, Target};
use crate::suite::Level;

/// What the measurements were taken on.
#[derive(Clone, Debug, Serialize)]
pub struct Machine {
    pub hostname: String,
    pub kernel: String,
    pub cpu: String,
    pub cores: usize,
    pub memory_gib: f64,
    pub bulkwire: String,
    pub mpi: String,
    /// UTC, ISO 8601.
    pub date: String,
    /// How the processes were connected.
    pub network: String,
    /// How busy the machine was around and during the run.
    pub load: Load,
}

/// The CPU counters of `/proc/stat`'s first line, in clock ticks.
#[derive(Clone, Copy, Debug, Default)]
struct CpuTicks {
    busy: u64,
    steal: u64,
    total: u64,
}

impl CpuTicks {
    fn read() -> Option<CpuTicks> {
        let stat = read("/proc/stat");
        let v: Vec<u64> = stat
            .lines()
            .next()?
            .strip_prefix("cpu ")?
            .split_whitespace()
            .filter_map(|x| x.parse().ok())
            .collect();
        // user nice system idle iowait irq softirq steal (guest time is inside user).
        let at = |i: usize| v.get(i).copied().unwrap_or(0);
        let busy = at(0) + at(1) + at(2) + at(5) + at(6);
        Some(CpuTicks {
            busy,
            steal: at(7),
            total: busy + at(3) + at(4) + at(7),
        })
    }
}

/// The 1-minute load average.
fn loadavg() -> Option<f64> {
    read("/proc/loadavg")
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// CPU seconds used by this process and the children it has waited for.
fn own_cpu_seconds() -> f64 {
    let mut sum = 0.0;
    for who in [libc::RUSAGE_SELF, libc::RUSAGE_CHILDREN] {
        // SAFETY: getrusage fills the rusage it is given; all zeros is a valid rusage.
        let mut r: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: `r` is a valid, writable rusage.
        if unsafe { libc::getrusage(who, &mut r) } == 0 {
            for t in [r.ru_utime, r.ru_stime] {
                sum += t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
            }
        }
    }
    sum
}

/// How busy the machine was: the load average before and after the run, the share of
/// the CPUs that other processes used during it, and the share the hypervisor took
/// (steal), so that a reader can tell a slow machine from a slow stack.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Load {
    pub before: Option<f64>,
    pub after: Option<f64>,
    /// CPU time of processes other than bwbench and its jobs, as a share of all CPUs'
    /// time during the run.
    pub others: Option<f64>,
    /// Time the hypervisor ran something else on this machine's CPUs, as a share.
    pub steal: Option<f64>,
}

/// What [`Load`] is measured from: readings taken as the run starts.
#[derive(Clone, Debug)]
pub struct LoadProbe {
    before: Option<f64>,
    ticks: Option<CpuTicks>,
    own: f64,
    t0: std::time::Instant,
}

/// Above this share of the CPUs taken by others (or by the hypervisor), the report calls
/// the machine busy.
const BUSY: f64 = 0.10;

impl LoadProbe {
    pub fn start() -> LoadProbe {
        LoadProbe {
            before: loadavg(),
            ticks: CpuTicks::read(),
            own: own_cpu_seconds(),
            t0: std::time::Instant::now(),
        }
    }

    /// The load from the start to now, on `cores` CPUs.
    pub fn finish(&self, cores: usize) -> Load {
        let wall = self.t0.elapsed().as_secs_f64();
        let own = own_cpu_seconds() - self.own;
        let (mut others, mut steal) = (None, None);
        if let (Some(a), Some(b)) = (self.ticks, CpuTicks::read()) {
            let total = b.total.saturating_sub(a.total);
            if total > 0 {
                // Ticks are 1/100 s on Linux (USER_HZ); the shares are of all CPUs' time.
                let capacity = wall * cores.max(1) as f64;
                let busy = b.busy.saturating_sub(a.busy) as f64 / 100.0;
                others = Some(((busy - own) / capacity).clamp(0.0, 1.0));
                steal = Some(b.steal.saturating_sub(a.steal) as f64 / total as f64);
            }
        }
        Load {
            before: self.before,
            after: loadavg(),
            others,
            steal,
        }
    }
}

impl Load {
    /// Whether others or the hypervisor took enough of the CPUs to move the figures.
    pub fn busy(&self) -> bool {
        self.others.is_some_and(|x| x > BUSY) || self.steal.is_some_and(|x| x > BUSY)
    }

    /// The report's sentence on the load.
    fn describe(&self, cores: usize) -> String {
        let la = |x: Option<f64>| x.map_or("unknown".into(), |x| format!("{x:.2}"));
        let mut s = format!(
            "Load: 1-minute load average {} before the run, {} after (on {cores} cores)",
            la(self.before),
            la(self.after)
        );
        if let Some(o) = self.others {
            s += &format!(
                "; other processes used {:.0} % of the CPUs' time during it",
                o * 100.0
            );
        }
        if let Some(st) = self.steal {
            s += &format!("; the hypervisor took {:.1} % (steal)", st * 100.0);
        }
        s + "."
    }
}

fn read(path: &str) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

impl Machine {
    /// Reads this machine's description.
    pub fn here(mpi: &str) -> Machine {
        let cpu = read("/proc/cpuinfo")
            .lines()
            .find(|l| l.starts_with("model name"))
            .and_then(|l| l.split(':').nth(1))
            .unwrap_or("unknown")
            .trim()
            .to_string();
        let mem_kb: f64 = read("/proc/meminfo")
            .lines()
            .find(|l| l.starts_with("MemTotal:"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0);
        Machine {
            hostname: read("/proc/sys/kernel/hostname").trim().to_string(),
            kernel: read("/proc/sys/kernel/osrelease").trim().to_string(),
            cpu,
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
            memory_gib: mem_kb / (1024.0 * 1024.0),
            bulkwire: env!("CARGO_PKG_VERSION").to_string(),
            mpi: mpi.to_string(),
            date: utc_now(),
            load: Load::default(),
            network: "all processes on this host: bulkwire over UDP on loopback or over shared \
                      memory (as each row says), MPI over shared memory and TCP on loopback"
                .into(),
        }
    }
}

/// The summary's table: per baseline, bulkwire's figure beside the baseline's.
fn findings_table<'a>(findings: impl Iterator<Item = &'a Finding>) -> String {
    let mut all: Vec<&Finding> = findings.collect();
    if all.is_empty() {
        return String::new();
    }
    all.sort_by_key(|f| f.against);
    let mut s = String::from(
        "Where bulkwire stands against each baseline, both measured in this run:\n\n\
         | against | figure | bulkwire | baseline | bulkwire is |\n|---|---|---|---|---|\n",
    );
    for f in all {
        s += &format!(
            "| {} | {} | {} | {} | {} |\n",
            f.against.label(),
            f.what,
            f.unit.format(f.ours),
            f.unit.format(f.theirs),
            f.verdict()
        );
    }
    let missing: Vec<&str> = Baseline::ALL
        .iter()
        .filter(|b| !s.contains(&format!("| {} |", b.label())))
        .map(|b| b.label())
        .collect();
    if !missing.is_empty() {
        s += &format!(
            "\nNo figure against {} (see Not measured).\n",
            missing.join(", ")
        );
    }
    s + "\n"
}

/// The current time as `YYYY-MM-DDTHH:MM:SSZ` (civil-from-days, no calendar crate).
fn utc_now() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs()) as i64;
    let (days, rem) = (secs.div_euclid(86400), secs.rem_euclid(86400));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// What [`Report::status`] finds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    Whole,
    /// An experiment measured nothing at all.
    Empty,
    /// `runs` runs failed; `undecided` targets were not decided because of it.
    Partial {
        runs: usize,
        undecided: usize,
    },
}

/// Everything one `bwbench` run measured.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub machine: Machine,
    pub level: Level,
    pub command: String,
    pub seconds: f64,
    pub sections: Vec<Section>,
}

impl Report {
    /// The Markdown report: what was measured and on what, the summary, the targets, then
    /// each experiment's section.
    pub fn markdown(&self) -> String {
        let m = &self.machine;
        let mut s = String::from("# bulkwire benchmark report\n\n");
        s += &format!(
            "Measured {} on `{}`: {} ({} cores, {:.0} GiB), Linux {}. bulkwire {}; MPI: {}.\n\n",
            m.date, m.hostname, m.cpu, m.cores, m.memory_gib, m.kernel, m.bulkwire, m.mpi
        );
        s += &format!(
            "Network: {}. Command: `{}` ({}, {:.0} s). Every ratio is against a baseline \
             measured in this same run; nothing is taken from the papers.\n\n",
            m.network,
            self.command,
            match self.level {
                Level::Smoke => "smoke test: too few iterations to quote",
                Level::Quick => "quick mode",
                Level::Full => "full mode",
            },
            self.seconds
        );
        s += &self.load_paragraph();
        s += &self.summary();
        let targets = self.targets();
        if !targets.is_empty() {
            s += "## Targets\n\n| figure | measured | target | met |\n|---|---|---|---|\n";
            for t in targets {
                s += &format!(
                    "| {} | {} | {} | {} |\n",
                    t.what,
                    t.measured,
                    t.target,
                    t.verdict()
                );
            }
            s += "\n";
        }
        for sec in &self.sections {
            s += &sec.markdown();
        }
        s
    }

    /// Every target of every section, in order: what the summary counts and the targets
    /// table lists (one source for both).
    pub fn targets(&self) -> Vec<&Target> {
        self.sections.iter().flat_map(|x| &x.targets).collect()
    }

    /// Whether the report is whole: every experiment measured something and no run failed.
    pub fn status(&self) -> Status {
        if self
            .sections
            .iter()
            .any(|s| s.series.is_empty() && s.tables.is_empty())
        {
            return Status::Empty;
        }
        let runs = self.failed().len();
        if runs > 0 {
            let undecided = self.targets().iter().filter(|t| t.is_failed()).count();
            return Status::Partial { runs, undecided };
        }
        Status::Whole
    }

    /// Every failed run, "label: error", each once.
    pub fn failed(&self) -> Vec<&str> {
        self.sections
            .iter()
            .flat_map(|x| &x.failed)
            .map(String::as_str)
            .collect()
    }

    /// The machine's load, and which verdicts it makes unreliable.
    fn load_paragraph(&self) -> String {
        let m = &self.machine;
        let mut s = m.load.describe(m.cores);
        let split: Vec<&str> = self
            .targets()
            .into_iter()
            .filter(|t| t.split)
            .map(|t| t.what.as_str())
            .collect();
        if m.load.busy() {
            s += " **The machine was busy**: every time measured here shared the CPUs with \
                  other work, so the figures are lower bounds of this machine's.";
            if !split.is_empty() {
                s += &format!(
                    " The verdicts whose rounds split (some rounds met the target, some did \
                     not) are the ones the load can flip: {}.",
                    split.join("; ")
                );
            }
        } else if !split.is_empty() {
            s += &format!(
                " The machine was quiet; {} verdict{} rested on split rounds (marked in the \
                 targets table).",
                split.len(),
                if split.len() == 1 { "" } else { "s" }
            );
        }
        s + "\n\n"
    }

    /// What was measured, the targets met, where bulkwire stands against each baseline,
    /// and everything that was not measured, with why.
    pub fn summary(&self) -> String {
        let runs: usize = self
            .sections
            .iter()
            .flat_map(|x| &x.runs)
            .map(|r| r.jobs)
            .sum();
        let names: Vec<&str> = self.sections.iter().map(|x| x.name.as_str()).collect();
        let mut s = format!(
            "## Summary\n\nMeasured: {} ({runs} runs, {:.0} s). Two processes on this host \
             unless a table says otherwise.\n\n",
            names.join(", "),
            self.seconds
        );
        let targets = self.targets();
        let count = |f: &dyn Fn(&Target) -> bool| targets.iter().filter(|t| f(t)).count();
        let met = count(&|t| t.met == Some(true));
        let missed: Vec<&str> = targets
            .iter()
            .filter(|t| t.met == Some(false))
            .map(|t| t.what.as_str())
            .collect();
        if !targets.is_empty() {
            s += &format!("**Targets: {met} of {} met", targets.len());
            let undecided = count(&|t| t.met.is_none());
            if undecided > 0 {
                let failed = count(&|t| t.is_failed());
                s += &format!(", {undecided} not decided");
                if failed > 0 {
                    s += &format!(" ({failed} because their runs failed)");
                }
            }
            s += ".**";
            if !missed.is_empty() {
                s += &format!(" Not met: {}.", missed.join("; "));
            }
            s += " (Table below.)\n\n";
        }
        let failed = self.failed();
        if !failed.is_empty() {
            s += &format!(
                "**{} run{} failed**; the report is partial (bwbench exits with status 3 \
                 unless given --accept-partial):\n\n",
                failed.len(),
                if failed.len() == 1 { "" } else { "s" }
            );
            for f in failed {
                s += &format!("- {f}\n");
            }
            s += "\n";
        }
        s += &findings_table(self.sections.iter().flat_map(|x| &x.findings));
        s += &self.not_measured();
        s
    }

    /// Every skip of every section, each reason once with the sections it applies to.
    fn not_measured(&self) -> String {
        let mut why: Vec<(&str, Vec<&str>)> = Vec::new();
        for sec in &self.sections {
            for k in &sec.skipped {
                match why.iter_mut().find(|(w, _)| w == k) {
                    Some((_, secs)) => secs.push(&sec.name),
                    None => why.push((k, vec![&sec.name])),
                }
            }
        }
        if why.is_empty() {
            return if self.failed().is_empty() {
                "Everything planned was measured.\n\n".into()
            } else {
                String::new()
            };
        }
        let mut s = format!("**Not measured** ({}):\n\n", why.len());
        for (w, secs) in why {
            s += &format!("- {w} ({})\n", secs.join(", "));
        }
        s + "\n"
    }

    /// Writes `report.md`, `results.json` and the charts into `dir`.
    pub fn write(&self, dir: &Path) -> std::io::Result<()> {
        std::fs::create_dir_all(dir)?;
        // Through no link another user planted at a file's name (see
        // `bulkwire_launch::files`).
        write_private(&dir.join("report.md"), self.markdown())?;
        let json = serde_json::to_vec_pretty(self).map_err(std::io::Error::other)?;
        write_private(&dir.join("results.json"), json)?;
        for sec in &self.sections {
            for c in &sec.charts {
                write_private(&dir.join(&c.file), crate::chart::svg(c))?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::rounds::Rounds;

    fn report(sections: Vec<Section>) -> Report {
        Report {
            machine: Machine::here("none"),
            level: Level::Quick,
            command: "bwbench all --quick".into(),
            seconds: 1.0,
            sections,
        }
    }

    fn measured(name: &str) -> Section {
        let mut s = Section::new(name, name);
        s.tables.push(crate::section::Table::new("t", &["a"], ""));
        s
    }

    fn judge(w: &str, r: &Rounds) -> Target {
        Target::of_rounds(w, r, "<= 1x", crate::section::in_us, |q| q <= 1.0)
    }

    #[test]
    fn a_failed_run_is_named_once_and_makes_the_report_partial() {
        let mut sec = measured("latency");
        sec.failed.push(crate::section::named_once(
            "utopia/udp",
            "utopia/udp: utopia/udp: 262144 B stream: packets lost",
        ));
        sec.check("8 B vs raw UDP".into(), Err("packets lost".into()), judge);
        let r = report(vec![sec]);
        assert_eq!(
            r.status(),
            Status::Partial {
                runs: 1,
                undecided: 1
            }
        );
        let md = r.markdown();
        assert_eq!(md.matches("utopia/udp: 262144 B stream").count(), 2, "{md}");
        assert!(
            md.contains("- utopia/udp: 262144 B stream: packets lost"),
            "{md}"
        );
        assert!(
            md.contains("**Targets: 0 of 1 met, 1 not decided (1 because their runs failed).**"),
            "{md}"
        );
        assert!(md.contains("| **failed** |"), "{md}");
        assert!(!md.contains("Everything planned was measured"), "{md}");
    }

    #[test]
    fn negative_fits_and_missing_baselines_decide_nothing() {
        let mut sec = measured("bsp");
        // g fitted at -1.9 ns against MPI's 249.5 ns: no fit, never "met".
        let r = Rounds::collect([(Some(249.5e-9), Some(-1.9e-9))]);
        sec.check("g vs MPI".into(), Ok(r), judge);
        let r = Rounds::collect([(None, Some(1e-6))]);
        sec.check("l vs MPI".into(), Ok(r), judge);
        let split = Rounds::collect([
            (Some(1.0), Some(0.9)),
            (Some(1.0), Some(1.2)),
            (Some(1.0), Some(0.8)),
        ]);
        sec.check("split".into(), Ok(split), judge);
        let r = report(vec![sec]);
        assert_eq!(r.status(), Status::Whole);
        let v: Vec<String> = r.targets().iter().map(|t| t.verdict()).collect();
        assert_eq!(v, ["no fit", "no baseline", "yes (rounds split)"]);
        assert!(
            r.markdown()
                .contains("**Targets: 1 of 3 met, 2 not decided.**")
        );
    }

    #[test]
    fn the_summary_takes_a_target_comparison_from_its_rounds_only() {
        let mut sec = measured("bandwidth");
        sec.check("1 MiB vs raw UDP".into(), Err("lost its ack".into()), judge);
        assert_eq!(sec.decided("vs raw UDP"), Some(None));
        assert_eq!(sec.decided("vs MPI"), None);
        sec.check(
            "1 MiB vs MPI".into(),
            Ok(Rounds::collect([(Some(2.0), Some(1.0))])),
            judge,
        );
        assert_eq!(sec.decided("vs MPI"), Some(Some((2.0, 1.0))));
    }

    #[test]
    fn an_experiment_that_measured_nothing_is_an_empty_report() {
        let r = report(vec![measured("a"), Section::new("b", "b")]);
        assert_eq!(r.status(), Status::Empty);
    }

    #[test]
    fn date_format() {
        let d = utc_now();
        assert_eq!(d.len(), 20);
        assert!(d.starts_with("20") && d.ends_with('Z'));
    }
}
