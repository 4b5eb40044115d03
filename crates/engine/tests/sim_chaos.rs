//! The chaos campaign on the simulated network: seeded random fault schedules (loss,
//! corruption, duplication, reordering, delay, changed during the run; ranks paused for
//! a while; a rank killed) over every reliable protocol, p in {2, 3, 4}, and the
//! point-to-point, BSP and collective programs, which check every message. Each run must
//! end, within its deadline, either with every program done and correct, or with a live
//! rank told that a killed rank is dead; anything else (a wrong delivery, a live rank
//! declared dead, or no end by the deadline: a hang) fails the test and prints the seed
//! and the schedule.
//!
//! A short campaign runs with `cargo test`; the long one (3,000 schedules) with
//! `cargo test -p bulkwire-engine --test sim_chaos -- --ignored`.

mod common;

use bulkwire_engine::EndpointConfig;
use bulkwire_engine::sim::SimCluster;
use bulkwire_link::sim::SimConfig;
use bulkwire_protocol::{MS, Rank, SEC, Time};
use common::workload::{self, Action, End, Faults, WORKLOADS, Workload};
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

const RELIABLE: [&str; 3] = ["gbn", "holefill", "rmpp"];

/// The dead-peer deadline of the runs: pauses stay under half of it.
const DEAD_AFTER: Time = 2 * SEC;

/// One run of the campaign.
#[derive(Debug)]
struct Chaos {
    protocol: &'static str,
    workload: Workload,
    p: u32,
    faults: Faults,
    schedule: Vec<(Time, Action)>,
    killed: Option<Rank>,
}

fn faults(rng: &mut ChaCha8Rng) -> Faults {
    let mut f = || {
        if rng.random_bool(0.3) {
            0.0
        } else {
            rng.random_range(0.0..0.05)
        }
    };
    Faults {
        loss: f() * 4.0,
        corrupt: f(),
        dup: f(),
        reorder: f(),
        delay: f() / 2.0,
    }
}

/// The schedule of seed `seed` for a program whose clean run takes `clean`.
fn chaos(seed: u64, clean: Time) -> Chaos {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let protocol = RELIABLE[rng.random_range(0..RELIABLE.len())];
    let workload = WORKLOADS[rng.random_range(0..WORKLOADS.len())];
    let p = rng.random_range(2..=4);
    let span = clean.max(MS);
    let mut schedule = Vec::new();
    for _ in 0..rng.random_range(0..=3) {
        schedule.push((rng.random_range(0..span), Action::Faults(faults(&mut rng))));
    }
    for _ in 0..rng.random_range(0..=2) {
        let r = rng.random_range(0..p);
        let d = rng.random_range(MS..DEAD_AFTER / 2);
        schedule.push((rng.random_range(0..span), Action::Pause(r, d)));
    }
    let killed = rng.random_bool(0.25).then(|| rng.random_range(0..p));
    if let Some(r) = killed {
        schedule.push((rng.random_range(0..span), Action::Kill(r)));
    }
    schedule.sort_by_key(|(t, _)| *t);
    Chaos {
        protocol,
        workload,
        p,
        faults: faults(&mut rng),
        schedule,
        killed,
    }
}

fn sim(protocol: &str, p: u32, f: Faults, seed: u64) -> SimCluster {
    let mut cfg = SimConfig::new(p);
    cfg.seed = seed;
    cfg.delay_time = 2 * MS;
    // The schedule may turn corruption on midway.
    cfg.may_corrupt = true;
    f.apply(&mut cfg);
    SimCluster::with_protocol(cfg, EndpointConfig::with_deadline(11, DEAD_AFTER), protocol)
}

/// Runs one schedule; `Err` says what went wrong, with everything to replay it.
fn play(seed: u64) -> Result<End, String> {
    // The program and cluster of this seed, clean, for its lossless time.
    let c = chaos(seed, 0);
    let mut clean = sim(c.protocol, c.p, Faults::default(), seed);
    let mut prog = workload::program(c.workload, c.p, seed, 1, false);
    let t0 = match workload::run(&mut clean, &mut *prog, &[], 60 * SEC) {
        Ok(End::Done(t)) => t,
        other => return Err(format!("seed {seed}: clean run: {other:?}")),
    };
    let c = chaos(seed, t0);
    let paused: Time = c
        .schedule
        .iter()
        .map(|(_, a)| match a {
            Action::Pause(_, d) => *d,
            _ => 0,
        })
        .sum();
    // Generous for recovery (the targets are 20x at 20 % loss), plus every pause, plus
    // two deadlines to notice a killed rank.
    let deadline = 60 * t0 + paused + 2 * DEAD_AFTER + SEC;
    let mut s = sim(c.protocol, c.p, c.faults, seed);
    let mut prog = workload::program(c.workload, c.p, seed, 1, false);
    let end = workload::run(&mut s, &mut *prog, &c.schedule, deadline)
        .map_err(|e| format!("seed {seed}: {e}\n  {c:?}, deadline {deadline} ns"))?;
    match end {
        End::Death { peer, .. } if Some(peer) != c.killed => Err(format!(
            "seed {seed}: a live rank was declared dead: {end:?}\n  {c:?}"
        )),
        e => Ok(e),
    }
}

/// Runs `n` schedules from seed `first` and fails with every bad one.
fn campaign(first: u64, n: u64) {
    let mut bad = Vec::new();
    let (mut done, mut deaths) = (0, 0);
    for seed in first..first + n {
        match play(seed) {
            Ok(End::Done(_)) => done += 1,
            Ok(End::Death { .. }) => deaths += 1,
            Err(e) => bad.push(e),
        }
    }
    eprintln!(
        "{n} schedules: {done} done, {deaths} ended by a killed rank, {} bad",
        bad.len()
    );
    assert!(bad.is_empty(), "{}", bad.join("\n"));
    assert!(done > 0 && deaths > 0, "the campaign covers both endings");
}

#[test]
fn short_chaos_campaign() {
    campaign(1, 60);
}

#[test]
#[ignore]
fn long_chaos_campaign() {
    campaign(1_000, 3_000);
}

/// Replays one schedule: `BULKWIRE_CHAOS_SEED=N cargo test -p bulkwire-engine --test
/// sim_chaos replay -- --ignored --nocapture`.
#[test]
#[ignore]
fn replay() {
    let seed = std::env::var("BULKWIRE_CHAOS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .expect("BULKWIRE_CHAOS_SEED=<seed>");
    let c = chaos(seed, 0);
    eprintln!("{c:?}");
    match play(seed) {
        Ok(end) => eprintln!("seed {seed}: {end:?}"),
        Err(e) => panic!("{e}"),
    }
}
