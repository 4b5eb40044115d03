//! The report `bwbench all` writes: `report.md` (tables in the papers' layouts, every figure
//! beside its baseline), `results.json` (every measurement with the machine and
//! parameters) and SVG charts.

use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use bulkwire_launch::files::write_private;
use serde::Serialize;

use crate::section::{Baseline, Finding, Section};
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
        s += &self.summary();
        let targets: Vec<_> = self.sections.iter().flat_map(|x| &x.targets).collect();
        if !targets.is_empty() {
            s += "## Targets\n\n| figure | measured | target | met |\n|---|---|---|---|\n";
            for t in targets {
                let met = match t.met {
                    Some(true) => "yes",
                    Some(false) => "**no**",
                    None => "-",
                };
                s += &format!("| {} | {} | {} | {met} |\n", t.what, t.measured, t.target);
            }
            s += "\n";
        }
        for sec in &self.sections {
            s += &sec.markdown();
        }
        s
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
        let targets: Vec<_> = self.sections.iter().flat_map(|x| &x.targets).collect();
        let met = targets.iter().filter(|t| t.met == Some(true)).count();
        let missed: Vec<&str> = targets
            .iter()
            .filter(|t| t.met != Some(true))
            .map(|t| t.what.as_str())
            .collect();
        if !targets.is_empty() {
            s += &format!("**Targets: {met} of {} met.**", targets.len());
            if !missed.is_empty() {
                s += &format!(" Not met: {}.", missed.join("; "));
            }
            s += " (Table below.)\n\n";
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
            return "Everything planned was measured.\n\n".into();
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

    #[test]
    fn date_format() {
        let d = utc_now();
        assert_eq!(d.len(), 20);
        assert!(d.starts_with("20") && d.ends_with('Z'));
    }
}
