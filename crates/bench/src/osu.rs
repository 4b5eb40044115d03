//! The OSU micro-benchmarks as `scripts/mpi-suites.sh` builds them, once per MPI: their
//! binaries under `WORK/osu/MPI/bin` and each MPI's launcher `WORK/mpis/MPI/bin/mpiexec`
//! (bulkwire: `bsprun`; Open MPI: `mpirun` over shared memory; MPICH: `mpiexec.mpich`).
//! A run starts one benchmark under one MPI and reads OSU's own output: a figure per
//! message size (microseconds for latencies, MB/s for bandwidths).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// The MPIs the script builds with, in the order the tables list them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Impl {
    Bulkwire,
    OpenMpi,
    Mpich,
}

impl Impl {
    pub const ALL: [Impl; 3] = [Impl::Bulkwire, Impl::OpenMpi, Impl::Mpich];

    /// The script's name for it (its directories).
    pub fn dir(self) -> &'static str {
        match self {
            Impl::Bulkwire => "bulkwire",
            Impl::OpenMpi => "openmpi",
            Impl::Mpich => "mpich",
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Impl::Bulkwire => "bulkwire",
            Impl::OpenMpi => "Open MPI",
            Impl::Mpich => "MPICH",
        }
    }
}

/// One MPI's build of the benchmarks.
#[derive(Clone, Debug)]
pub struct Build {
    pub imp: Impl,
    /// `WORK/osu/MPI/bin`: a link per benchmark.
    pub bin: PathBuf,
    /// `WORK/mpis/MPI/bin/mpiexec`.
    pub mpiexec: PathBuf,
}

/// The builds found under `work` (the script's work directory), and for each MPI left
/// out, why.
pub fn find(work: &Path) -> (Vec<Build>, Vec<String>) {
    let mut found = Vec::new();
    let mut missing = Vec::new();
    for imp in Impl::ALL {
        let bin = work.join("osu").join(imp.dir()).join("bin");
        let mpiexec = work.join("mpis").join(imp.dir()).join("bin/mpiexec");
        if !bin.is_dir() || !mpiexec.exists() {
            missing.push(format!(
                "{}: no OSU build in {} (scripts/mpi-suites.sh --only osu builds it)",
                imp.label(),
                bin.display()
            ));
            continue;
        }
        found.push(Build { imp, bin, mpiexec });
    }
    (found, missing)
}

impl Build {
    /// Whether this build has `bench`.
    pub fn has(&self, bench: &str) -> bool {
        self.bin.join(bench).exists()
    }

    /// Runs `bench` on `np` processes with OSU's options `args`, stopped after `timeout`:
    /// OSU's figure per size.
    pub fn run(
        &self,
        bench: &str,
        np: u32,
        args: &[String],
        timeout: Duration,
    ) -> Result<Vec<(usize, f64)>, String> {
        let out = Command::new("timeout")
            .args(["-k", "5"])
            .arg(timeout.as_secs().max(1).to_string())
            .arg(&self.mpiexec)
            .arg("-n")
            .arg(np.to_string())
            .arg(self.bin.join(bench))
            .args(args)
            .output()
            .map_err(|e| format!("{}: {e}", self.mpiexec.display()))?;
        let text = String::from_utf8_lossy(&out.stdout);
        let points = parse(&text);
        if !out.status.success() || points.is_empty() {
            let err = String::from_utf8_lossy(&out.stderr);
            let first: Vec<&str> = err
                .lines()
                .filter(|l| !l.trim().is_empty())
                .take(3)
                .collect();
            return Err(format!(
                "{bench} under {} ({}): {}",
                self.imp.label(),
                out.status,
                if first.is_empty() {
                    "no figure printed".to_string()
                } else {
                    first.join(" / ")
                }
            ));
        }
        Ok(points)
    }
}

/// OSU's table: every line that starts with a size, its first figure (latency in us,
/// bandwidth in MB/s; the non-blocking collectives' "Overall" time), and a benchmark
/// without sizes (`osu_barrier`) its one figure, at size 0. Comments (`#`) and anything
/// else are skipped.
pub fn parse(text: &str) -> Vec<(usize, f64)> {
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let (size, v) = match f.as_slice() {
                [v] if v.contains('.') => (0, v.parse::<f64>().ok()?),
                [size, v, ..] => (size.parse::<usize>().ok()?, v.parse::<f64>().ok()?),
                _ => return None,
            };
            v.is_finite().then_some((size, v))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_osus_tables() {
        let latency = "# OSU MPI Latency Test v7.4\n# Datatype: MPI_CHAR.\n\
                       # Size       Latency (us)\n1                       0.21\n\
                       8                       0.25\n";
        assert_eq!(parse(latency), [(1, 0.21), (8, 0.25)]);
        let iallreduce = "# Overall = Coll. Init + Compute + MPI_Test + MPI_Wait\n\n\
                          # Size           Overall(us)       Compute(us)    Pure Comm.(us)        Overlap(%)\n\
                          4                       3.10              1.60              1.45              0.00\n";
        assert_eq!(parse(iallreduce), [(4, 3.10)]);
        assert!(parse("# Size Bandwidth (MB/s)\nwarning: x 1\n").is_empty());
        let barrier = "# OSU MPI Barrier Latency Test v7.4\n# Avg Latency(us)\n             1.17\n";
        assert_eq!(parse(barrier), [(0, 1.17)]);
    }
}
