//! Total exchange with destinations in latin-square order against pid order (Donaldson,
//! Hill & Skillicorn's Table 1), holefill over UDP on this host and on the simulated
//! switch.

use super::Experiment;
use crate::group::{GroupSpec, Schedule};
use crate::plan::{Done, Job, Plan};
use crate::section::{SPREAD_NOTE, Section, Table, ratio, spread_cell, us};
use crate::stack::{Protocol, Transport};
use crate::stats::{Spread, Summary};
use crate::suite::Suite;

pub struct Exchange;

pub enum Tag {
    Host { message: usize, schedule: Schedule },
    Sim { message: usize, schedule: Schedule },
}

/// The paper's two messages: 16 K and 32 K words per pair.
const MESSAGES: [(&str, usize); 2] = [("small", 64 << 10), ("big", 128 << 10)];
const SCHEDULES: [Schedule; 2] = [Schedule::Latin, Schedule::PidOrder];

struct Params {
    warmup: usize,
    reps: usize,
    p: u32,
    sim_p: u32,
}

fn params(s: &Suite) -> Params {
    let (warmup, reps) = s.pick((1, 2), (1, 5), (3, 20));
    Params {
        warmup,
        reps,
        p: s.pick(2, 4, 8),
        sim_p: s.pick(8, 16, 32),
    }
}

impl Experiment for Exchange {
    type Tag = Tag;

    fn name(&self) -> &'static str {
        "exchange"
    }

    fn about(&self) -> &'static str {
        "Total exchange in latin-square against pid order (Donaldson, Hill & Skillicorn, Table 1)"
    }

    fn plan(&self, s: &Suite) -> Plan<Tag> {
        let p = params(s);
        let mut plan = Plan::default();
        for (i, (name, size)) in MESSAGES.into_iter().enumerate() {
            for schedule in SCHEDULES {
                let spec = GroupSpec {
                    over: Transport::udp(Protocol::Holefill),
                    size,
                    schedule,
                    warmup: p.warmup,
                    reps: p.reps,
                };
                let tag = Tag::Host {
                    message: i,
                    schedule,
                };
                plan.add(
                    format!("{name} {schedule:?}"),
                    tag,
                    Job::Group { p: p.p, spec },
                );
            }
        }
        for (i, (name, size)) in MESSAGES.into_iter().enumerate() {
            for schedule in SCHEDULES {
                let job = Job::SimAlltoall {
                    protocol: Protocol::Holefill,
                    p: p.sim_p,
                    size,
                    schedule,
                    rounds: 3,
                    seed: 2,
                };
                let tag = Tag::Sim {
                    message: i,
                    schedule,
                };
                plan.add(format!("simulated {name} {schedule:?}"), tag, job);
            }
        }
        plan
    }

    fn report(&self, s: &Suite, done: &[Done<Tag>]) -> Section {
        let p = params(s);
        let mut sec = Section::new(
            "exchange",
            "Total exchange: latin-square against pid-order destinations (Donaldson, Hill & \
             Skillicorn's Table 1)",
        );
        let mut t = Table::new(
            format!(
                "Time for a {}-process total exchange (us), holefill/udp",
                p.p
            ),
            &["where", "message", "latin square", "pid order", "factor"],
            "small = 16 K words (64 KiB) per pair, big = 32 K words (128 KiB), as in the \
             paper. On one host there is no switch to congest, so the factor is small; the \
             simulated network has one (virtual time).",
        );
        let mut spreads = Table::new(
            "Single total exchanges: best / median / p90 (us)",
            &["where", "message", "latin square", "pid order"],
            format!(
                "{SPREAD_NOTE} The exchanges of the table above; on the simulated switch, \
                 in virtual time."
            ),
        );
        let mut add =
            |place: String, name: &str, latin: Option<Vec<f64>>, pid: Option<Vec<f64>>| {
                let median = |xs: &Option<Vec<f64>>| {
                    xs.as_ref()
                        .filter(|v| !v.is_empty())
                        .map(|v| Summary::of(v).median)
                };
                t.rows
                    .push(row(place.clone(), name, median(&latin), median(&pid)));
                let cell =
                    |xs: &Option<Vec<f64>>| spread_cell(xs.as_deref().and_then(Spread::of), us);
                spreads
                    .rows
                    .push(vec![place, name.into(), cell(&latin), cell(&pid)]);
            };
        for (i, (name, _)) in MESSAGES.iter().enumerate() {
            let time = |schedule| {
                let d = done.iter().find(|d| {
                    matches!(d.tag, Tag::Host { message, schedule: s } if message == i && s == schedule)
                })?;
                d.group()
            };
            let (latin, pid) = (time(Schedule::Latin), time(Schedule::PidOrder));
            sec.groups
                .extend([latin, pid].into_iter().flatten().cloned());
            add(
                format!("this host, p={}", p.p),
                name,
                latin.map(|r| r.seconds.clone()),
                pid.map(|r| r.seconds.clone()),
            );
        }
        for (i, (name, _)) in MESSAGES.iter().enumerate() {
            let time = |schedule| {
                let d = done.iter().find(|d| {
                    matches!(d.tag, Tag::Sim { message, schedule: s } if message == i && s == schedule)
                })?;
                d.sim()
            };
            let (latin, pid) = (time(Schedule::Latin), time(Schedule::PidOrder));
            sec.simulated
                .extend([latin, pid].into_iter().flatten().cloned());
            add(
                format!("simulated switch, p={}", p.sim_p),
                name,
                latin.map(|r| r.seconds.clone()),
                pid.map(|r| r.seconds.clone()),
            );
        }
        sec.tables = vec![t, spreads];
        sec
    }
}

fn row(place: String, message: &str, latin: Option<f64>, pid: Option<f64>) -> Vec<String> {
    let (latin, pid) = (latin.unwrap_or(f64::NAN), pid.unwrap_or(f64::NAN));
    vec![place, message.into(), us(latin), us(pid), ratio(pid, latin)]
}
