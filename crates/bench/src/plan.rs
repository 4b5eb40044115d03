//! An experiment as a plan of runs: every job it will start, known before the first one
//! starts, so that the progress bar's length and the time estimate come from the plan,
//! and the report from what the runs returned.
//!
//! A [`Run`] is one [`Job`], or an alternating check (see [`crate::rounds`]) of baseline
//! and candidate jobs; each carries a tag of the experiment's own type that tells its
//! report what the run was for. [`execute`] runs a plan through a [`Runner`] (the real one
//! is [`crate::suite::Suite`]), announcing each job as it starts and ends.

use std::any::Any;
use std::fmt;
use std::sync::Arc;

use crate::bspk::{BspResult, BspSpec};
use crate::coll::{CollResult, CollSpec};
use crate::errors::{ErrorCurve, ErrorRateConfig};
use crate::group::{GroupResult, GroupSpec, Schedule};
use crate::mpi::{MpiJob, MpiPoint};
use crate::pair::{Measure, PairResult, PairSpec, window_for};
use crate::rounds::{self, Side};
use crate::simexp::SimRounds;
use crate::stack::{Protocol, Transport};
use crate::suite::Suite;

/// One measurement.
#[derive(Clone, Debug)]
pub enum Job {
    /// Two processes of `bwbench` (see [`crate::pair`]).
    Pair(PairSpec),
    /// `p` processes exchanging messages (see [`crate::group`]).
    Group { p: u32, spec: GroupSpec },
    /// BSPlib's parameters over `over` at `p` processes (see [`crate::bspk`]).
    Bsp {
        p: u32,
        over: Transport,
        spec: BspSpec,
    },
    /// Collective latency at `p` processes (see [`crate::coll`]).
    Coll { p: u32, spec: CollSpec },
    /// The user's MPI (see [`crate::mpi`]).
    Mpi(MpiJob),
    /// All-to-all on the simulated switch (see [`crate::simexp`]).
    SimAlltoall {
        protocol: Protocol,
        p: u32,
        size: usize,
        schedule: Schedule,
        rounds: usize,
        seed: u64,
    },
    /// The error-rate experiment on the simulated network (see [`crate::errors`]).
    SimErrors {
        protocol: Protocol,
        cfg: ErrorRateConfig,
    },
    /// The error-rate experiment over kernel TCP (see [`crate::netns`]).
    TcpErrors(ErrorRateConfig),
    /// A measurement an experiment carries out itself.
    Own(OwnJob),
}

/// What an [`OwnJob`] returns: a value of the experiment's own type, which its report takes
/// back with [`Done::own`].
#[derive(Clone)]
pub struct Own(pub Arc<dyn Any + Send + Sync>);

impl fmt::Debug for Own {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Own(..)")
    }
}

type OwnFn = dyn Fn(&Suite) -> Result<Own, String> + Send + Sync;

/// A measurement an experiment carries out itself (a simulation, a program of its own):
/// the kinds of job above need no code outside the experiment's module this way.
#[derive(Clone)]
pub struct OwnJob {
    /// Seconds it takes here, roughly (for the progress bar).
    pub estimate: f64,
    run: Arc<OwnFn>,
}

impl OwnJob {
    /// A job that calls `f` with the suite (its executable, level and MPI).
    pub fn new<T: Any + Send + Sync>(
        estimate: f64,
        f: impl Fn(&Suite) -> Result<T, String> + Send + Sync + 'static,
    ) -> OwnJob {
        OwnJob {
            estimate,
            run: Arc::new(move |s| f(s).map(|v| Own(Arc::new(v)))),
        }
    }

    pub fn run(&self, s: &Suite) -> Result<Own, String> {
        (self.run)(s)
    }
}

impl fmt::Debug for OwnJob {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "OwnJob {{ estimate: {} }}", self.estimate)
    }
}

/// What a [`Job`] returned.
#[derive(Clone, Debug)]
pub enum Outcome {
    Pair(PairResult),
    Group(GroupResult),
    Bsp(BspResult),
    Coll(CollResult),
    Mpi(Vec<MpiPoint>),
    Sim(SimRounds),
    Curve(ErrorCurve),
    Own(Own),
}

/// What the estimates take a job to cost here (two cores, loopback): a message's fixed
/// part and the bytes per second moved, starting a job of `bwbench` workers and starting
/// `mpirun`, all in seconds. Starting a job is what a busy machine slows most: these are
/// the figures of `bwbench all --quick` with half of the two CPUs taken by other work
/// (a job of two workers took 0.1-0.3 s more than its work).
const PER_MESSAGE: f64 = 2e-6;
const COPY_RATE: f64 = 6e9;
const JOB_START: f64 = 0.12;
const MPI_START: f64 = 0.2;

impl Job {
    /// Roughly how long the job takes here, in seconds: for the progress bar's estimate,
    /// never for a result.
    pub fn estimate(&self) -> f64 {
        match self {
            Job::Pair(spec) => JOB_START + measure_cost(&spec.measure),
            Job::Group { p, spec } => {
                let per_round = f64::from(p - 1) * spec.size as f64 / COPY_RATE * 4.0;
                JOB_START * f64::from(*p) + (spec.warmup + spec.reps) as f64 * (per_round + 1e-4)
            }
            Job::Bsp { p, spec, .. } => {
                let steps = (spec.hmax / spec.hstep.max(1) + 1) * spec.batches * spec.iters;
                // l grows faster than p here (p = 4 shares two cores); g is small.
                let per_step = 5e-6 * f64::from(*p).powf(1.5) + spec.hmax as f64 * 2.5e-8;
                JOB_START * f64::from(*p) + (steps + spec.warmup) as f64 * per_step
            }
            Job::Coll { p, spec } => {
                let calls = (spec.kinds.len() * (spec.warmup + spec.iters)) as f64;
                let bytes: usize = spec.sizes.iter().sum::<usize>() * *p as usize;
                let per_call = 3.0 * PER_MESSAGE * f64::from(*p) * spec.sizes.len() as f64;
                JOB_START * f64::from(*p) + calls * (per_call + bytes as f64 / COPY_RATE)
            }
            Job::Mpi(m) => MPI_START + mpi_cost(m),
            Job::SimAlltoall {
                p, size, rounds, ..
            } => (f64::from(p * p) * *size as f64 * *rounds as f64) * 2e-10,
            Job::SimErrors { cfg, .. } => cfg.bers.len() as f64 * cfg.requests as f64 * 1e-4,
            Job::TcpErrors(cfg) => 0.5 + cfg.bers.len() as f64 * cfg.requests as f64 * 5e-4,
            Job::Own(j) => j.estimate,
        }
    }
}

/// The estimated seconds of a two-process measurement.
fn measure_cost(m: &Measure) -> f64 {
    match m {
        Measure::Latency {
            sizes,
            warmup,
            iters,
        } => sizes
            .iter()
            .map(|&n| (warmup + iters) as f64 * 2.0 * (PER_MESSAGE + n as f64 / COPY_RATE))
            .sum(),
        Measure::Bandwidth {
            sizes,
            warmup,
            reps,
        } => sizes
            .iter()
            .map(|&n| {
                let w = window_for(n) as f64;
                (warmup + reps) as f64 * w * (PER_MESSAGE + n as f64 / COPY_RATE) + 0.01
            })
            .sum(),
        Measure::Overlap {
            sizes,
            compute_ms,
            reps,
        } => sizes.len() as f64 * *reps as f64 * (*compute_ms as f64 / 1e3 + 0.005),
    }
}

/// The estimated seconds of an MPI harness run, past `mpirun`'s start.
fn mpi_cost(m: &MpiJob) -> f64 {
    let n = (m.warmup + m.iters) as f64;
    let p = f64::from(m.np);
    m.sizes
        .iter()
        .map(|&size| match m.kind.as_str() {
            "latency" => n * 2.0 * (PER_MESSAGE + size as f64 / COPY_RATE),
            "bandwidth" | "bandwidth-own" => n * m.extra * (PER_MESSAGE + size as f64 / COPY_RATE),
            "overlap" => n * (m.extra + 0.005),
            // Batches of supersteps of `size` words each way; the exchange of `size` bytes.
            "superstep" => {
                (m.warmup + m.iters * m.extra as usize) as f64
                    * (3.0 * PER_MESSAGE + size as f64 * 2e-8)
            }
            "alltoall-loop" => {
                (m.warmup + m.iters * m.extra as usize) as f64
                    * p
                    * (PER_MESSAGE + size as f64 / COPY_RATE)
            }
            _ => n * p * (3.0 * PER_MESSAGE + size as f64 * p / COPY_RATE),
        })
        .sum()
}

/// What a run does: one job, or alternating rounds of a baseline's and a candidate's jobs
/// (each side's jobs run back to back, see [`crate::rounds`]).
#[derive(Clone, Debug)]
pub enum Work {
    One(Job),
    Rounds {
        rounds: usize,
        base: Vec<Job>,
        cand: Vec<Job>,
    },
}

/// One entry of a plan.
#[derive(Clone, Debug)]
pub struct Run<T> {
    /// What the progress bar shows and a failure is reported under.
    pub label: String,
    /// What the run is for, in the experiment's own terms.
    pub tag: T,
    pub work: Work,
}

/// Every run an experiment will make, in order, and what it leaves out, with why.
#[derive(Clone, Debug)]
pub struct Plan<T> {
    pub runs: Vec<Run<T>>,
    pub skipped: Vec<String>,
}

impl<T> Default for Plan<T> {
    fn default() -> Plan<T> {
        Plan {
            runs: Vec::new(),
            skipped: Vec::new(),
        }
    }
}

/// One job execution of a plan, as the progress bar sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct Step {
    pub label: String,
    /// Seconds, from [`Job::estimate`].
    pub estimate: f64,
}

impl<T> Plan<T> {
    /// Adds `job` under `label`.
    pub fn add(&mut self, label: impl Into<String>, tag: T, job: Job) {
        self.runs.push(Run {
            label: label.into(),
            tag,
            work: Work::One(job),
        });
    }

    /// Adds a check of `rounds` alternating rounds of `base` against `cand`.
    pub fn alternate(
        &mut self,
        label: impl Into<String>,
        tag: T,
        rounds: usize,
        base: Vec<Job>,
        cand: Vec<Job>,
    ) {
        self.runs.push(Run {
            label: label.into(),
            tag,
            work: Work::Rounds { rounds, base, cand },
        });
    }

    /// Records that something is left out, and why.
    pub fn skip(&mut self, why: impl Into<String>) {
        self.skipped.push(why.into());
    }

    /// Every job the plan will start, in the order [`execute`] starts them.
    pub fn steps(&self) -> Vec<Step> {
        let mut v = Vec::new();
        for r in &self.runs {
            walk(r, &mut |label, job| {
                v.push(Step {
                    label,
                    estimate: job.estimate(),
                })
            });
        }
        v
    }
}

/// Calls `f` with each job of `r` and its progress label, in execution order.
fn walk(r: &Run<impl Sized>, f: &mut dyn FnMut(String, &Job)) {
    match &r.work {
        Work::One(job) => f(r.label.clone(), job),
        Work::Rounds { rounds, base, cand } => {
            for i in 0..*rounds {
                for side in rounds::order(i) {
                    let (jobs, who) = match side {
                        Side::Base => (base, "baseline"),
                        Side::Cand => (cand, "candidate"),
                    };
                    for job in jobs {
                        f(
                            format!("{} (round {} of {rounds}, {who})", r.label, i + 1),
                            job,
                        );
                    }
                }
            }
        }
    }
}

/// One round of an alternating run: the outcomes of the baseline's jobs, then of the
/// candidate's.
pub type Round = (Vec<Outcome>, Vec<Outcome>);

/// What a run returned: its job's outcome, or every round's.
#[derive(Clone, Debug)]
pub enum Output {
    One(Box<Outcome>),
    Rounds(Vec<Round>),
}

/// A run of a plan, done.
#[derive(Clone, Debug)]
pub struct Done<T> {
    pub label: String,
    pub tag: T,
    /// A failed job ends its run with its error.
    pub result: Result<Output, String>,
    pub seconds: f64,
    pub estimate: f64,
    /// Jobs started (all of the run's, unless one failed).
    pub jobs: usize,
}

impl<T> Done<T> {
    /// The outcome of a one-job run that worked.
    pub fn outcome(&self) -> Option<&Outcome> {
        match &self.result {
            Ok(Output::One(o)) => Some(o),
            _ => None,
        }
    }

    pub fn pair(&self) -> Option<&PairResult> {
        match self.outcome()? {
            Outcome::Pair(r) => Some(r),
            _ => None,
        }
    }

    pub fn mpi(&self) -> Option<&[MpiPoint]> {
        match self.outcome()? {
            Outcome::Mpi(v) => Some(v),
            _ => None,
        }
    }

    pub fn group(&self) -> Option<&GroupResult> {
        match self.outcome()? {
            Outcome::Group(r) => Some(r),
            _ => None,
        }
    }

    pub fn bsp(&self) -> Option<&BspResult> {
        match self.outcome()? {
            Outcome::Bsp(r) => Some(r),
            _ => None,
        }
    }

    pub fn coll(&self) -> Option<&CollResult> {
        match self.outcome()? {
            Outcome::Coll(r) => Some(r),
            _ => None,
        }
    }

    pub fn sim(&self) -> Option<&SimRounds> {
        match self.outcome()? {
            Outcome::Sim(r) => Some(r),
            _ => None,
        }
    }

    pub fn curve(&self) -> Option<&ErrorCurve> {
        match self.outcome()? {
            Outcome::Curve(c) => Some(c),
            _ => None,
        }
    }

    /// What an [`OwnJob`] returned, as the type it returned.
    pub fn own<R: Any>(&self) -> Option<&R> {
        match self.outcome()? {
            Outcome::Own(o) => o.0.downcast_ref(),
            _ => None,
        }
    }

    /// The rounds of an alternating run: `Err` with why it was not measured.
    pub fn rounds(&self) -> Result<&[Round], String> {
        match &self.result {
            Ok(Output::Rounds(r)) => Ok(r),
            Ok(Output::One(_)) => Err("not an alternating run".into()),
            Err(e) => Err(e.clone()),
        }
    }
}

/// Runs jobs.
pub trait Runner {
    fn run(&self, job: &Job) -> Result<Outcome, String>;
}

/// What [`execute`] announces.
#[derive(Clone, Copy, Debug)]
pub enum Event<'a> {
    /// A job starts.
    Start(&'a Step),
    /// The job ended after `seconds`.
    End(&'a Step, f64),
}

/// Runs every run of `plan` in order through `runner`, announcing each job.
pub fn execute<T>(plan: Plan<T>, runner: &dyn Runner, progress: &dyn Fn(Event)) -> Vec<Done<T>> {
    plan.runs
        .into_iter()
        .map(|r| {
            let t0 = std::time::Instant::now();
            let (mut estimate, mut jobs) = (0.0, 0);
            let mut each = |label: String, job: &Job| {
                let step = Step {
                    label,
                    estimate: job.estimate(),
                };
                estimate += step.estimate;
                jobs += 1;
                progress(Event::Start(&step));
                let t = std::time::Instant::now();
                let out = runner.run(job);
                progress(Event::End(&step, t.elapsed().as_secs_f64()));
                out
            };
            let result = run_one(&r, &mut each);
            Done {
                label: r.label,
                tag: r.tag,
                result,
                seconds: t0.elapsed().as_secs_f64(),
                estimate,
                jobs,
            }
        })
        .collect()
}

type Each<'a> = dyn FnMut(String, &Job) -> Result<Outcome, String> + 'a;

/// Runs `r`'s jobs through `each` in the order [`Plan::steps`] lists them; a failed job
/// ends the run.
fn run_one<T>(r: &Run<T>, each: &mut Each<'_>) -> Result<Output, String> {
    match &r.work {
        Work::One(job) => each(r.label.clone(), job).map(|o| Output::One(Box::new(o))),
        Work::Rounds { rounds, base, cand } => {
            let mut out = Vec::with_capacity(*rounds);
            for i in 0..*rounds {
                let (mut b, mut c) = (Vec::new(), Vec::new());
                for side in rounds::order(i) {
                    let (jobs, into, who) = match side {
                        Side::Base => (base, &mut b, "baseline"),
                        Side::Cand => (cand, &mut c, "candidate"),
                    };
                    for job in jobs {
                        let label = format!("{} (round {} of {rounds}, {who})", r.label, i + 1);
                        into.push(each(label, job)?);
                    }
                }
                out.push((b, c));
            }
            Ok(Output::Rounds(out))
        }
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;

    use super::*;
    use crate::stack::{Faults, RawLink, Stack};

    /// Answers every job with an empty result of its kind, or fails the `fail`-th job.
    struct Fake {
        calls: RefCell<Vec<String>>,
        fail: Option<usize>,
    }

    impl Runner for Fake {
        fn run(&self, job: &Job) -> Result<Outcome, String> {
            let mut calls = self.calls.borrow_mut();
            calls.push(format!("{job:?}").chars().take(12).collect());
            if Some(calls.len()) == self.fail {
                return Err("no such thing".into());
            }
            Ok(Outcome::Mpi(Vec::new()))
        }
    }

    fn pair(iters: usize) -> Job {
        Job::Pair(PairSpec {
            stack: Stack::Raw { link: RawLink::Udp },
            measure: Measure::Latency {
                sizes: vec![8],
                warmup: 1,
                iters,
            },
            faults: Faults::none(),
        })
    }

    fn mpi() -> Job {
        Job::Mpi(MpiJob {
            kind: "latency".into(),
            np: 2,
            net: crate::mpi::MpiNet::Shm,
            warmup: 1,
            iters: 10,
            extra: 0.0,
            sizes: vec![8],
        })
    }

    #[test]
    fn the_steps_are_the_jobs_execute_starts_in_order() {
        let mut plan = Plan::default();
        plan.add("one", 1, pair(10));
        plan.alternate("check", 2, 3, vec![pair(20)], vec![mpi(), pair(30)]);
        plan.add("two", 3, mpi());
        let steps = plan.steps();
        // 1 + 3 rounds of (1 + 2) + 1.
        assert_eq!(steps.len(), 11);
        let seen = RefCell::new(Vec::new());
        let fake = Fake {
            calls: RefCell::new(Vec::new()),
            fail: None,
        };
        let done = execute(plan, &fake, &|e| {
            if let Event::Start(s) = e {
                seen.borrow_mut().push(s.clone());
            }
        });
        assert_eq!(*seen.borrow(), steps);
        assert_eq!(fake.calls.borrow().len(), steps.len());
        // ABBA: the baseline first in round 1 and 3, the candidate first in round 2.
        let labels: Vec<&str> = steps.iter().map(|s| s.label.as_str()).collect();
        assert_eq!(labels[1], "check (round 1 of 3, baseline)");
        assert_eq!(labels[4], "check (round 2 of 3, candidate)");
        assert_eq!(labels[6], "check (round 2 of 3, baseline)");
        assert_eq!(labels[7], "check (round 3 of 3, baseline)");
        assert_eq!(done.len(), 3);
        let rounds = done[1].rounds().unwrap();
        assert_eq!(rounds.len(), 3);
        assert!(rounds.iter().all(|(b, c)| b.len() == 1 && c.len() == 2));
        assert_eq!(done.iter().map(|d| d.tag).collect::<Vec<_>>(), [1, 2, 3]);
        let total: f64 = steps.iter().map(|s| s.estimate).sum();
        let planned: f64 = done.iter().map(|d| d.estimate).sum();
        assert!((total - planned).abs() < 1e-9 && total > 0.0);
    }

    #[test]
    fn a_failed_job_ends_its_run_only() {
        let mut plan = Plan::default();
        plan.alternate("check", (), 2, vec![pair(1)], vec![pair(1)]);
        plan.add("after", (), pair(1));
        let fake = Fake {
            calls: RefCell::new(Vec::new()),
            fail: Some(2),
        };
        let done = execute(plan, &fake, &|_| {});
        assert_eq!(done[0].rounds().unwrap_err(), "no such thing");
        assert!(done[1].outcome().is_some());
        // The check stopped at its second job; the next run still ran.
        assert_eq!(fake.calls.borrow().len(), 3);
    }

    #[test]
    fn an_experiments_own_job_returns_its_own_type() {
        #[derive(Debug, PartialEq)]
        struct Mine(u32);
        let s = Suite::new(
            "/nonexistent".into(),
            crate::suite::Level::Smoke,
            "/tmp".into(),
        );
        let mut plan = Plan::default();
        plan.add(
            "mine",
            (),
            Job::Own(OwnJob::new(0.5, |s| Ok(Mine(s.target_rounds() as u32)))),
        );
        plan.add(
            "fails",
            (),
            Job::Own(OwnJob::new(0.5, |_| Err::<Mine, _>("no".into()))),
        );
        assert_eq!(plan.steps()[0].estimate, 0.5);
        let done = execute(plan, &s, &|_| {});
        assert_eq!(done[0].own::<Mine>(), Some(&Mine(1)));
        assert_eq!(done[0].own::<u32>(), None);
        assert_eq!(done[1].result.as_ref().unwrap_err(), "no");
        assert_eq!((done[0].jobs, done[1].jobs), (1, 1));
    }

    #[test]
    fn estimates_grow_with_the_work() {
        assert!(pair(100_000).estimate() > 10.0 * pair(100).estimate() - 1.0);
        assert!(pair(100_000).estimate() > pair(100).estimate());
        assert!(mpi().estimate() > 0.0);
    }
}
