//! What every experiment runs with: the `bwbench` executable its workers are started from,
//! how long the suite runs ([`Level`]), and the user's MPI; and the [`Runner`] that
//! carries out a plan's jobs.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use serde::Serialize;

use crate::mpi::Mpi;
use crate::plan::{Job, Outcome, Runner};
use crate::{bspk, coll, errors, group, netns, pair, simexp};

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

/// How long a job may run before it counts as hung (the launcher kills it).
const TIMEOUT: Duration = Duration::from_secs(900);

/// Runs experiments by launching worker processes of `exe` (the `bwbench` binary).
pub struct Suite {
    exe: PathBuf,
    pub level: Level,
    with_mpi: bool,
    work: PathBuf,
    mpi: OnceLock<Result<Mpi, String>>,
    osu: Option<PathBuf>,
    only: Option<Vec<String>>,
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
            osu: None,
            only: None,
        }
    }

    /// Where `scripts/mpi-suites.sh` built the OSU micro-benchmarks (its work directory),
    /// for `bwbench mpi`.
    pub fn with_osu(mut self, dir: PathBuf) -> Suite {
        self.osu = Some(dir);
        self
    }

    /// Runs only the named parts of an experiment that has parts (`bwbench fabric --only`).
    pub fn with_only(mut self, parts: Vec<String>) -> Suite {
        self.only = Some(parts);
        self
    }

    /// The parts given to [`Suite::with_only`]; `None`: every part.
    pub fn only(&self) -> Option<&[String]> {
        self.only.as_deref()
    }

    /// The directory given to [`Suite::with_osu`].
    pub fn osu_dir(&self) -> Option<&Path> {
        self.osu.as_deref()
    }

    /// The `bwbench` executable the workers are started from.
    pub fn exe(&self) -> &Path {
        &self.exe
    }

    /// A directory for build products, removed when the run ends.
    pub fn work_dir(&self) -> &Path {
        &self.work
    }

    /// Leaves MPI out even where it is installed.
    pub fn without_mpi(mut self) -> Suite {
        self.with_mpi = false;
        self
    }

    /// `smoke`, `quick` or `full` by level.
    pub fn pick<T>(&self, smoke: T, quick: T, full: T) -> T {
        match self.level {
            Level::Smoke => smoke,
            Level::Quick => quick,
            Level::Full => full,
        }
    }

    /// Rounds of each alternating target check (see [`crate::rounds`]).
    pub fn target_rounds(&self) -> usize {
        self.pick(1, 3, 5)
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
}

impl Runner for Suite {
    fn run(&self, job: &Job) -> Result<Outcome, String> {
        match job {
            Job::Pair(spec) => pair::run(&self.exe, spec, TIMEOUT).map(Outcome::Pair),
            Job::Group { p, spec } => group::run(&self.exe, *p, spec, TIMEOUT).map(Outcome::Group),
            Job::Bsp { p, over, spec } => {
                bspk::run(&self.exe, *p, spec, *over, TIMEOUT).map(Outcome::Bsp)
            }
            Job::Coll { p, spec } => coll::run(&self.exe, *p, spec, TIMEOUT).map(Outcome::Coll),
            Job::Mpi(m) => self
                .mpi()
                .map_err(|e| format!("MPI: {e}"))?
                .run(m, TIMEOUT)
                .map(Outcome::Mpi),
            Job::SimAlltoall {
                protocol,
                p,
                size,
                schedule,
                rounds,
                seed,
            } => simexp::alltoall(protocol.name(), *p, *size, *schedule, *rounds, *seed)
                .map(Outcome::Sim),
            Job::SimErrors { protocol, cfg } => {
                errors::sim_error_rate(protocol.name(), cfg).map(Outcome::Curve)
            }
            Job::TcpErrors(cfg) => netns::tcp_error_rate(cfg).map(Outcome::Curve),
            Job::Own(j) => j.run(self).map(Outcome::Own),
        }
    }
}
