//! The experiments of `bwbench`, one module each, and the [`REGISTRY`] that `bwbench`
//! takes its subcommands from. An experiment makes a [`Plan`] of the runs it needs for a
//! [`Suite`]'s level, then writes its [`Section`] of the report from what they returned.
//!
//! Adding an experiment is adding a module and its line in [`REGISTRY`]: the module
//! implements [`Experiment`], with a tag type saying what each run is for. Its plan adds
//! jobs of the kinds in [`Job`] (two-process and p-process jobs of `bwbench`'s workers over
//! a typed [`Stack`], the user's MPI, the simulated network), or jobs of its own
//! ([`crate::plan::OwnJob`]: any function of the suite, whose result its report takes back
//! with [`Done::own`]); alternating checks of a target go in with [`Plan::alternate`], and
//! what it leaves out with [`Plan::skip`], with the reason. Its report reads the runs in
//! order; failed runs are already listed as not measured. The progress bar, the time
//! estimate and `bwbench --plan` follow from the plan, and `bwbench all` runs it.

use std::time::Instant;

use crate::mpi::{MpiJob, MpiNet};
use crate::pair::{Measure, PairSpec};
use crate::plan::{Done, Event, Job, Plan, Runner, Step, execute};
use crate::section::{RunTime, Section, named_once, short_mpi};
use crate::stack::{Faults, Stack};
use crate::suite::Suite;

pub mod alltoall;
pub mod apps;
pub mod bandwidth;
pub mod bsp;
pub mod cluster;
pub mod collectives;
pub mod exchange;
pub mod fabric;
pub mod latency;
pub mod layers;
pub mod loss;
pub mod osu;
pub mod overlap;
pub mod scale;

/// Every experiment, in the order `bwbench all` runs them (those [`Entry::in_all`]; the
/// others by their own name, and the cluster experiment with `all --hosts`).
pub static REGISTRY: &[&dyn Entry] = &[
    &latency::Latency,
    &bandwidth::Bandwidth,
    &layers::Layers,
    &bsp::Bsp,
    &collectives::Collectives,
    &alltoall::Alltoall,
    &overlap::Overlap,
    &exchange::Exchange,
    &loss::Loss,
    &scale::ScaleExperiment,
    &apps::Apps,
    &cluster::Cluster,
    &fabric::FabricExperiment,
    &osu::Osu,
];

/// The experiment named `name`.
pub fn find(name: &str) -> Option<&'static dyn Entry> {
    REGISTRY.iter().copied().find(|e| e.name() == name)
}

/// One experiment.
pub trait Experiment: Sync {
    /// What a run of the plan is for, in the experiment's own terms.
    type Tag: 'static;

    /// The subcommand and the section's name in `results.json`.
    fn name(&self) -> &'static str;

    /// One line for `bwbench --help`.
    fn about(&self) -> &'static str;

    /// Whether `bwbench all` runs it (an experiment that builds programs and runs for
    /// minutes even with `--quick`, or one that needs more than this host, runs only when
    /// asked for).
    fn in_all(&self) -> bool {
        true
    }

    /// Every run the experiment makes at `s`'s level, in order.
    fn plan(&self, s: &Suite) -> Plan<Self::Tag>;

    /// The section from the runs of the plan. Failed runs are already listed as not
    /// measured (with their label and error); the report leaves them out.
    fn report(&self, s: &Suite, done: &[Done<Self::Tag>]) -> Section;
}

/// An experiment as the registry holds it.
pub trait Entry: Sync {
    fn name(&self) -> &'static str;
    fn about(&self) -> &'static str;
    fn in_all(&self) -> bool;
    /// Its plan for `s`, ready to run.
    fn prepare<'a>(&'a self, s: &'a Suite) -> Box<dyn Prepared + 'a>;
}

/// An experiment with its plan made.
pub trait Prepared {
    fn name(&self) -> &'static str;
    /// Every job the plan will start.
    fn steps(&self) -> Vec<Step>;
    /// What the plan leaves out, and why.
    fn skipped(&self) -> &[String];
    /// Runs the plan through `runner` and writes the section.
    fn run(self: Box<Self>, runner: &dyn Runner, progress: &dyn Fn(Event)) -> Section;
}

impl<E: Experiment> Entry for E {
    fn name(&self) -> &'static str {
        Experiment::name(self)
    }

    fn about(&self) -> &'static str {
        Experiment::about(self)
    }

    fn in_all(&self) -> bool {
        Experiment::in_all(self)
    }

    fn prepare<'a>(&'a self, s: &'a Suite) -> Box<dyn Prepared + 'a> {
        Box::new(Ready {
            exp: self,
            suite: s,
            plan: self.plan(s),
        })
    }
}

struct Ready<'a, E: Experiment> {
    exp: &'a E,
    suite: &'a Suite,
    plan: Plan<E::Tag>,
}

impl<E: Experiment> Prepared for Ready<'_, E> {
    fn name(&self) -> &'static str {
        Experiment::name(self.exp)
    }

    fn steps(&self) -> Vec<Step> {
        self.plan.steps()
    }

    fn skipped(&self) -> &[String] {
        &self.plan.skipped
    }

    fn run(self: Box<Self>, runner: &dyn Runner, progress: &dyn Fn(Event)) -> Section {
        let t0 = Instant::now();
        let Ready { exp, suite, plan } = *self;
        let mut skipped = plan.skipped.clone();
        let done = execute(plan, runner, progress);
        let mut sec = exp.report(suite, &done);
        let failed: Vec<String> = done
            .iter()
            .filter_map(|d| Some(named_once(&d.label, d.result.as_ref().err()?)))
            .collect();
        // What the report added is kept unless it repeats a failed run's error.
        skipped.extend(sec.skipped.drain(..).filter(|k| {
            !failed
                .iter()
                .any(|f| f.ends_with(k.as_str()) || k.ends_with(f.as_str()))
        }));
        sec.skipped = skipped;
        sec.failed = failed;
        sec.runs = done
            .iter()
            .map(|d| RunTime {
                label: d.label.clone(),
                seconds: d.seconds,
                estimate: d.estimate,
                jobs: d.jobs,
            })
            .collect();
        sec.seconds = t0.elapsed().as_secs_f64();
        sec
    }
}

/// A two-process run of `stack` without injected faults.
pub fn pair(stack: Stack, measure: Measure) -> Job {
    Job::Pair(PairSpec {
        stack,
        measure,
        faults: Faults::none(),
    })
}

/// Adds a run of the user's MPI over shared memory and one over TCP, each `job(net)`,
/// tagged `tag(net)` and labelled like "Open MPI 4.1.4 shm"; or, without MPI, records why
/// it is left out. Returns MPI's short name when it is there.
pub fn add_mpi<T>(
    plan: &mut Plan<T>,
    s: &Suite,
    tag: impl Fn(MpiNet) -> T,
    job: impl Fn(MpiNet) -> MpiJob,
) -> Option<String> {
    match s.mpi() {
        Ok(mpi) => {
            let name = short_mpi(&mpi.version);
            for net in [MpiNet::Shm, MpiNet::Tcp] {
                plan.add(
                    format!("{name} {}", net.label()),
                    tag(net),
                    Job::Mpi(job(net)),
                );
            }
            Some(name)
        }
        Err(e) => {
            plan.skip(format!("MPI: {e}"));
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::bspk::BspResult;
    use crate::coll::{CollPoint, CollResult};
    use crate::errors::{ErrorCurve, ErrorPoint};
    use crate::group::GroupResult;
    use crate::pair::{PairResult, Point};
    use crate::plan::Outcome;
    use crate::simexp::SimRounds;
    use crate::stats::Summary;
    use crate::suite::Level;

    fn suite(level: Level) -> Suite {
        Suite::new(PathBuf::from("/nonexistent"), level, std::env::temp_dir()).without_mpi()
    }

    /// Answers every job with a plausible result of its kind, or refuses them all.
    struct Fake {
        refuse: bool,
    }

    impl Runner for Fake {
        fn run(&self, job: &Job) -> Result<Outcome, String> {
            if self.refuse {
                return Err("refused".into());
            }
            Ok(match job {
                Job::Pair(spec) => {
                    let sizes = match &spec.measure {
                        Measure::Latency { sizes, .. }
                        | Measure::Bandwidth { sizes, .. }
                        | Measure::Overlap { sizes, .. } => sizes.clone(),
                    };
                    let bw = matches!(spec.measure, Measure::Bandwidth { .. });
                    let points = sizes
                        .iter()
                        .map(|&size| Point {
                            size,
                            samples: if bw { vec![1e9, 2e9] } else { vec![2e-6, 3e-6] },
                            delivered: bw.then_some(1.0),
                            complete: if bw { vec![true, true] } else { vec![] },
                        })
                        .collect();
                    Outcome::Pair(PairResult {
                        spec: spec.clone(),
                        points,
                        counters: None,
                    })
                }
                Job::Group { p, spec } => Outcome::Group(GroupResult {
                    spec: spec.clone(),
                    nprocs: *p,
                    seconds: vec![1e-4, 2e-4],
                    data_packets: 10,
                    control_packets: 5,
                    retransmits: 0,
                    drops: 0,
                }),
                Job::Bsp { p, .. } => Outcome::Bsp(BspResult {
                    nprocs: *p,
                    g_us: 0.05,
                    l_us: 10.0,
                    empty_us: 3.0,
                    exchange_us: 40.0,
                    samples: vec![(0, 3.0), (8, 10.4)],
                    empty_steps: Some(crate::stats::Spread {
                        best: 2.5e-6,
                        median: 3.0e-6,
                        p90: 4.0e-6,
                    }),
                    exchange_steps: Some(crate::stats::Spread {
                        best: 30e-6,
                        median: 40e-6,
                        p90: 90e-6,
                    }),
                }),
                Job::Coll { p, spec } => Outcome::Coll(CollResult {
                    spec: spec.clone(),
                    nprocs: *p,
                    netcache: false,
                    protocol: "holefill".into(),
                    points: spec
                        .kinds
                        .iter()
                        .flat_map(|k| spec.sizes.iter().map(move |&size| (k, size)))
                        .map(|(k, size)| CollPoint {
                            kind: k.clone(),
                            size,
                            seconds: vec![5e-6],
                            algorithm: String::new(),
                        })
                        .collect(),
                    mcast: None,
                    mcast_off: None,
                }),
                Job::Mpi(_) => return Err("no MPI in this test".into()),
                Job::SimAlltoall {
                    protocol,
                    p,
                    size,
                    schedule,
                    ..
                } => Outcome::Sim(SimRounds {
                    protocol: protocol.name().into(),
                    nprocs: *p,
                    size: *size,
                    schedule: *schedule,
                    seconds: vec![1e-3],
                    data_packets: 1,
                    control_packets: 1,
                    retransmits: 0,
                    drops: 0,
                }),
                Job::SimErrors { protocol, cfg } => curve(protocol.name(), &cfg.bers),
                Job::TcpErrors(cfg) => curve("tcp", &cfg.bers),
                Job::Own(_) => return Err("not run in this test".into()),
            })
        }
    }

    fn curve(stack: &str, bers: &[f64]) -> Outcome {
        Outcome::Curve(ErrorCurve {
            stack: stack.into(),
            points: bers
                .iter()
                .enumerate()
                .map(|(i, &ber)| ErrorPoint {
                    ber,
                    wait: Some(Summary::of(&[1e-4 * (i + 1) as f64])),
                    answered: 1,
                    unanswered: 0,
                    retransmits: 0,
                    timeouts: 0,
                    damaged: 0,
                })
                .collect(),
        })
    }

    #[test]
    fn names_are_unique_and_found() {
        for (i, e) in REGISTRY.iter().enumerate() {
            assert!(!e.about().is_empty());
            assert!(REGISTRY[..i].iter().all(|o| o.name() != e.name()));
            assert_eq!(find(e.name()).map(|f| f.name()), Some(e.name()));
        }
        assert!(find("all").is_none());
    }

    #[test]
    fn every_plan_makes_runs_and_estimates_them() {
        for level in [Level::Smoke, Level::Quick, Level::Full] {
            let s = suite(level);
            let mut total = 0.0;
            for e in REGISTRY {
                let p = e.prepare(&s);
                let steps = p.steps();
                // An experiment that cannot run here at all (the cluster's test bed needs
                // netns-rsh beside the executable) says why.
                assert!(
                    !steps.is_empty() || !p.skipped().is_empty(),
                    "{}: no run",
                    e.name()
                );
                for st in &steps {
                    assert!(
                        st.estimate.is_finite() && st.estimate > 0.0,
                        "{}: {st:?}",
                        e.name()
                    );
                }
                if e.in_all() {
                    total += steps.iter().map(|s| s.estimate).sum::<f64>();
                }
            }
            // The README promises about a minute for `all --quick` (MPI adds to it).
            if level == Level::Quick {
                assert!((15.0..120.0).contains(&total), "quick: {total:.0} s");
            }
        }
    }

    #[test]
    fn every_experiment_reports_what_its_runs_returned() {
        for level in [Level::Smoke, Level::Quick] {
            let s = suite(level);
            for e in REGISTRY {
                let p = e.prepare(&s);
                let steps = p.steps().len();
                if steps == 0 {
                    // Left out here, saying why (tested above); its module tests its report.
                    continue;
                }
                let started = std::cell::Cell::new(0);
                let sec = p.run(&Fake { refuse: false }, &|ev| {
                    if let Event::Start(_) = ev {
                        started.set(started.get() + 1);
                    }
                });
                let name = e.name();
                assert_eq!(
                    started.get(),
                    steps,
                    "{name}: jobs started against the plan"
                );
                assert_eq!(sec.name, name);
                assert!(!sec.tables.is_empty(), "{name}: no table");
                for t in &sec.tables {
                    assert!(!t.rows.is_empty(), "{name}: empty table {}", t.title);
                    for r in &t.rows {
                        assert_eq!(r.len(), t.header.len(), "{name}: {}: {r:?}", t.title);
                    }
                }
                // Without MPI, that is the only thing left out (and, at the quick level,
                // kernel TCP's highest bit-error rates; the fake runner runs no job of an
                // experiment's own).
                for k in &sec.skipped {
                    assert!(
                        k.starts_with("MPI")
                            || k.starts_with("kernel TCP at")
                            || k.ends_with(": not run in this test"),
                        "{name}: {k}"
                    );
                }
                assert_eq!(
                    sec.runs.len(),
                    sec.runs.iter().filter(|r| r.estimate > 0.0).count()
                );
            }
        }
    }

    #[test]
    fn every_failed_run_is_reported_with_its_reason() {
        let s = suite(Level::Quick);
        for e in REGISTRY {
            let p = e.prepare(&s);
            let sec = p.run(&Fake { refuse: true }, &|_| {});
            for r in &sec.runs {
                let want = format!("{}: refused", r.label);
                assert_eq!(
                    sec.failed.iter().filter(|f| **f == want).count(),
                    1,
                    "{}: {want} not once in {:?}",
                    e.name(),
                    sec.failed
                );
                assert!(
                    !sec.skipped.iter().any(|k| k.contains("refused")),
                    "{}: a failure repeated among the skips: {:?}",
                    e.name(),
                    sec.skipped
                );
            }
            // Targets of failed runs stay in the table, undecided, never met or missed.
            assert!(
                sec.targets
                    .iter()
                    .all(|t| t.met.is_none() && t.why.is_some()),
                "{}: a target decided without a measurement: {:?}",
                e.name(),
                sec.targets
            );
        }
    }
}
