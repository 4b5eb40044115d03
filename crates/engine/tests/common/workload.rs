//! Programs that drive a simulated cluster the way the upper layers drive the engine, each
//! checking every message it receives: point-to-point traffic (random pairs and sizes),
//! BSP supersteps (data, per-peer counts, a dissemination barrier, colours held and set as
//! the BSP layer does), and collectives (a dissemination allreduce and a binomial
//! broadcast per iteration, a chain of dependencies). [`run`] plays one against a
//! schedule of faults, pauses and kills and says how it ended.

use std::collections::{HashMap, HashSet};

use bulkwire_engine::Event;
use bulkwire_engine::sim::{SimCluster, SimError};
use bulkwire_link::sim::SimConfig;
use bulkwire_protocol::{Rank, Time};
use bytes::Bytes;
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::{Checker, Msg, bytes_of, payload, plan};

/// The three kinds of workload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Workload {
    P2p,
    Bsp,
    Coll,
}

pub const WORKLOADS: [Workload; 3] = [Workload::P2p, Workload::Bsp, Workload::Coll];

/// What a program does, called by [`run`].
pub trait Program {
    /// Sends what is due at the current time (and sets an alarm for the next such time).
    fn tick(&mut self, sim: &mut SimCluster) -> Result<(), String>;
    /// A message `data` from `from` arrived at `rank`; an error if it is not what `from`
    /// must have sent next.
    fn deliver(
        &mut self,
        sim: &mut SimCluster,
        rank: Rank,
        from: Rank,
        data: Vec<u8>,
    ) -> Result<(), String>;
    /// Whether `rank` has done all its work.
    fn finished(&self, rank: Rank) -> bool;
    /// Where each rank is, for failure messages.
    fn status(&self) -> String;
}

/// A program of `w` for `p` ranks, sized by `scale` (1: a few milliseconds of traffic).
/// With `compute`, the BSP and collective programs compute between their communication
/// phases as real ones do (50-150 us per superstep, 20-80 us between collectives, the
/// same on every rank); without, they only communicate.
pub fn program(w: Workload, p: u32, seed: u64, scale: usize, compute: bool) -> Box<dyn Program> {
    match w {
        Workload::P2p => Box::new(P2p::new(p, seed, scale)),
        Workload::Bsp => Box::new(Bsp::new(p, seed, scale, compute)),
        Workload::Coll => Box::new(Coll::new(p, seed, scale, compute)),
    }
}

/// Ranks computing until a time, then calling `resume`.
#[derive(Default)]
struct Computing {
    until: Vec<Option<Time>>,
}

impl Computing {
    fn new(p: u32) -> Computing {
        Computing {
            until: vec![None; p as usize],
        }
    }

    /// `r` computes for `d` (none: carries on at once, `true`).
    fn start(&mut self, sim: &mut SimCluster, r: Rank, d: Time) -> bool {
        if d == 0 {
            return true;
        }
        let t = sim.now() + d;
        self.until[r as usize] = Some(t);
        sim.alarm(t);
        false
    }

    fn busy(&self, r: Rank) -> bool {
        self.until[r as usize].is_some()
    }

    /// The ranks whose computation is over.
    fn done(&mut self, now: Time) -> Vec<Rank> {
        let mut out = Vec::new();
        for (r, u) in self.until.iter_mut().enumerate() {
            if u.is_some_and(|t| t <= now) {
                *u = None;
                out.push(r as Rank);
            }
        }
        out
    }
}

/// Point-to-point: a random plan of messages of 0 B to 256 KiB between random pairs, sent
/// at their times over the first 2 ms; a receiver waits on a sender from its first
/// message to it until the last has arrived.
pub struct P2p {
    msgs: Vec<Msg>,
    next: usize,
    chk: Checker,
    owed: Vec<Vec<usize>>,
}

impl P2p {
    pub fn new(p: u32, seed: u64, scale: usize) -> P2p {
        let msgs = plan(
            seed,
            p,
            150 * scale,
            256 << 10,
            (6 << 20) * scale,
            2_000_000,
        );
        let mut owed = vec![vec![0; p as usize]; p as usize];
        for m in &msgs {
            owed[m.dst as usize][m.src as usize] += 1;
        }
        P2p {
            chk: Checker::new(p, &msgs),
            msgs,
            next: 0,
            owed,
        }
    }
}

impl Program for P2p {
    fn tick(&mut self, sim: &mut SimCluster) -> Result<(), String> {
        let now = sim.now();
        while let Some(m) = self.msgs.get(self.next).filter(|m| m.at <= now) {
            sim.send(m.src, m.dst, bytes_of(m))
                .map_err(|e| format!("rank {} send: {e}", m.src))?;
            sim.expect(m.dst, m.src, true);
            self.next += 1;
        }
        if let Some(m) = self.msgs.get(self.next) {
            sim.alarm(m.at);
        }
        Ok(())
    }

    fn deliver(
        &mut self,
        sim: &mut SimCluster,
        rank: Rank,
        from: Rank,
        data: Vec<u8>,
    ) -> Result<(), String> {
        // The checker panics on a wrong delivery, with what was wrong; the test fails
        // either way, this way with the program's state in the message.
        let ev = Event::Message { from, id: 0, data };
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.chk.check(rank, &ev)))
            .map_err(|e| {
                e.downcast_ref::<String>()
                    .cloned()
                    .unwrap_or_else(|| "wrong delivery".into())
            })?;
        let o = &mut self.owed[rank as usize][from as usize];
        *o -= 1;
        if *o == 0 {
            sim.expect(rank, from, false);
        }
        Ok(())
    }

    fn finished(&self, rank: Rank) -> bool {
        self.owed[rank as usize].iter().all(|&o| o == 0)
    }

    fn status(&self) -> String {
        format!(
            "p2p: {}/{} delivered, missing {}",
            self.chk.delivered,
            self.chk.total(),
            self.chk.missing()
        )
    }
}

/// Message kinds of the BSP and collective programs (first byte of every message).
const DATA: u8 = 1;
const COUNT: u8 = 2;
const TOKEN: u8 = 3;
const REDUCE: u8 = 4;
const BCAST: u8 = 5;

/// A checked message: kind, three numbers naming it, then `len` bytes fixed by all that.
fn tagged(kind: u8, a: u32, b: u32, c: u32, len: usize) -> Vec<u8> {
    let key = (kind as u64) << 56 ^ (a as u64) << 36 ^ (b as u64) << 16 ^ c as u64;
    let mut v = vec![kind];
    for x in [a, b, c] {
        v.extend_from_slice(&x.to_le_bytes());
    }
    v.extend_from_slice(&payload(key, len));
    v
}

/// The kind and numbers of a message made by [`tagged`], if its body matches them.
fn untag(data: &[u8]) -> Option<(u8, u32, u32, u32)> {
    if data.len() < 13 {
        return None;
    }
    let n = |i: usize| u32::from_le_bytes(data[1 + 4 * i..5 + 4 * i].try_into().unwrap());
    let (k, a, b, c) = (data[0], n(0), n(1), n(2));
    (tagged(k, a, b, c, data.len() - 13) == data).then_some((k, a, b, c))
}

fn rounds(p: u32) -> u32 {
    32 - (p - 1).leading_zeros()
}

fn send(sim: &mut SimCluster, from: Rank, to: Rank, data: Vec<u8>) -> Result<(), String> {
    sim.send(from, to, Bytes::from(data))
        .map(|_| ())
        .map_err(|e| format!("rank {from} send to {to}: {e}"))
}

/// BSP: `steps` supersteps. In each, every rank sends its data messages (0 to 8 of up to
/// 16 KiB, to random peers), then a count to every peer (the last message of the phase:
/// `end_phase`); once it has every count and the data counted it enters a dissemination
/// barrier under `hold_colour(step + 1)`, and `set_colour(step + 1)` once through, as
/// the BSP layer does.
pub struct Bsp {
    p: u32,
    steps: u32,
    /// plan[step][rank]: (destination, length) of its data messages in sending order.
    plan: Vec<Vec<Vec<(Rank, usize)>>>,
    ranks: Vec<BspRank>,
    started: bool,
    /// compute[step]: how long every rank computes before that superstep's data phase.
    compute: Vec<Time>,
    computing: Computing,
}

#[derive(Default)]
struct BspRank {
    step: u32,
    /// None: in the data phase; Some(k): waiting for the barrier's round k token.
    round: Option<u32>,
    done: bool,
    /// Per (step, from): data messages received, and the count once it came.
    data: HashMap<(u32, Rank), u32>,
    counts: HashMap<(u32, Rank), u32>,
    tokens: HashSet<(u32, u32)>,
}

impl Bsp {
    pub fn new(p: u32, seed: u64, scale: usize, compute: bool) -> Bsp {
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0xB5B);
        let steps = 12 * scale as u32;
        let compute = (0..steps)
            .map(|_| {
                let c = rng.random_range(50_000..=150_000);
                if compute { c } else { 0 }
            })
            .collect();
        let plan = (0..steps)
            .map(|s| {
                (0..p)
                    .map(|r| {
                        let h = if s % 4 == 3 {
                            0
                        } else {
                            rng.random_range(0..=8)
                        };
                        (0..h)
                            .map(|_| {
                                let to = (r + rng.random_range(1..p)) % p;
                                (to, rng.random_range(0..=16usize << 10))
                            })
                            .collect()
                    })
                    .collect()
            })
            .collect();
        Bsp {
            p,
            steps,
            plan,
            ranks: (0..p).map(|_| BspRank::default()).collect(),
            started: false,
            compute,
            computing: Computing::new(p),
        }
    }

    /// `r` computes, then begins its superstep.
    fn compute_then_begin(&mut self, sim: &mut SimCluster, r: Rank) -> Result<(), String> {
        let d = self.compute[self.ranks[r as usize].step as usize];
        if self.computing.start(sim, r, d) {
            self.begin_step(sim, r)
        } else {
            Ok(())
        }
    }

    fn begin_step(&mut self, sim: &mut SimCluster, r: Rank) -> Result<(), String> {
        let s = self.ranks[r as usize].step;
        let mut to_each = vec![0u32; self.p as usize];
        for (i, &(to, len)) in self.plan[s as usize][r as usize].iter().enumerate() {
            send(sim, r, to, tagged(DATA, s, r, i as u32, len))?;
            to_each[to as usize] += 1;
        }
        for q in (0..self.p).filter(|&q| q != r) {
            send(sim, r, q, tagged(COUNT, s, r, to_each[q as usize], 0))?;
            if let Some(c) = sim.endpoint(r).protocol().coloured() {
                c.end_phase(q);
            }
            sim.expect(r, q, true);
        }
        self.advance(sim, r)
    }

    /// Moves `r` on as far as what it has received allows.
    fn advance(&mut self, sim: &mut SimCluster, r: Rank) -> Result<(), String> {
        let p = self.p;
        if self.computing.busy(r) {
            return Ok(());
        }
        loop {
            let me = &mut self.ranks[r as usize];
            if me.done {
                return Ok(());
            }
            let s = me.step;
            match me.round {
                None => {
                    let all = (0..p).filter(|&q| q != r).all(|q| {
                        me.counts
                            .get(&(s, q))
                            .is_some_and(|&c| me.data.get(&(s, q)).copied().unwrap_or(0) == c)
                    });
                    if !all {
                        return Ok(());
                    }
                    me.round = Some(0);
                    if let Some(c) = sim.endpoint(r).protocol().coloured() {
                        c.hold_colour((s + 1) as u8);
                    }
                    send(sim, r, (r + 1) % p, tagged(TOKEN, s, 0, r, 0))?;
                }
                Some(k) => {
                    if !me.tokens.contains(&(s, k)) {
                        return Ok(());
                    }
                    if k + 1 < rounds(p) {
                        me.round = Some(k + 1);
                        let to = (r + (1 << (k + 1))) % p;
                        send(sim, r, to, tagged(TOKEN, s, k + 1, r, 0))?;
                        continue;
                    }
                    me.round = None;
                    me.step += 1;
                    if let Some(c) = sim.endpoint(r).protocol().coloured() {
                        c.set_colour((s + 1) as u8);
                    }
                    if me.step == self.steps {
                        me.done = true;
                        for q in (0..p).filter(|&q| q != r) {
                            sim.expect(r, q, false);
                        }
                        return Ok(());
                    }
                    return self.compute_then_begin(sim, r);
                }
            }
        }
    }
}

impl Program for Bsp {
    fn tick(&mut self, sim: &mut SimCluster) -> Result<(), String> {
        if !self.started {
            self.started = true;
            for r in 0..self.p {
                self.compute_then_begin(sim, r)?;
            }
        }
        for r in self.computing.done(sim.now()) {
            self.begin_step(sim, r)?;
        }
        Ok(())
    }

    fn deliver(
        &mut self,
        sim: &mut SimCluster,
        rank: Rank,
        from: Rank,
        data: Vec<u8>,
    ) -> Result<(), String> {
        let bad = |what: &str| Err(format!("bsp: rank {rank} got {what} from {from}"));
        let me = &mut self.ranks[rank as usize];
        match untag(&data) {
            Some((DATA, s, src, i)) if src == from && s < self.steps => {
                let n = me.data.entry((s, from)).or_default();
                let plan = &self.plan[s as usize][from as usize];
                let mine: Vec<usize> = plan
                    .iter()
                    .enumerate()
                    .filter(|(_, (to, _))| *to == rank)
                    .map(|(j, _)| j)
                    .collect();
                if mine.get(*n as usize) != Some(&(i as usize)) {
                    return bad(&format!("data message {i} of step {s} out of order"));
                }
                *n += 1;
            }
            Some((COUNT, s, src, c)) if src == from && s < self.steps => {
                if me.counts.insert((s, from), c).is_some() {
                    return bad(&format!("a second count for step {s}"));
                }
            }
            Some((TOKEN, s, k, src))
                if src == from && (rank + self.p - (1 << k) % self.p) % self.p == from =>
            {
                if !me.tokens.insert((s, k)) {
                    return bad(&format!("a second token for step {s} round {k}"));
                }
            }
            _ => return bad("a message that is not one of this program's (damaged?)"),
        }
        self.advance(sim, rank)
    }

    fn finished(&self, rank: Rank) -> bool {
        self.ranks[rank as usize].done
    }

    fn status(&self) -> String {
        let at: Vec<String> = self
            .ranks
            .iter()
            .map(|r| format!("{}{:?}", r.step, r.round))
            .collect();
        format!(
            "bsp: steps {} of {} (rank: step, barrier round)",
            at.join(" "),
            self.steps
        )
    }
}

/// Collectives: `iters` iterations of a dissemination allreduce (8 B to 2 KiB per round)
/// then a binomial broadcast of 0 B to 64 KiB from root `iter % p`.
pub struct Coll {
    p: u32,
    iters: u32,
    lens: Vec<(usize, usize)>,
    ranks: Vec<CollRank>,
    started: bool,
    /// compute[iter]: how long every rank computes before that iteration.
    compute: Vec<Time>,
    computing: Computing,
}

#[derive(Default)]
struct CollRank {
    iter: u32,
    /// Some(k): waiting for the allreduce's round k; None: in the broadcast.
    round: Option<u32>,
    done: bool,
    got: HashSet<(u8, u32, u32)>,
}

impl Coll {
    pub fn new(p: u32, seed: u64, scale: usize, compute: bool) -> Coll {
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0xC011);
        let iters = 40 * scale as u32;
        let lens = (0..iters)
            .map(|_| {
                let b = [0, 1 << 10, 16 << 10, 64 << 10][rng.random_range(0..4)];
                (rng.random_range(8..=2048), b)
            })
            .collect();
        let compute = (0..iters)
            .map(|_| {
                let c = rng.random_range(20_000..=80_000);
                if compute { c } else { 0 }
            })
            .collect();
        Coll {
            p,
            iters,
            lens,
            ranks: (0..p).map(|_| CollRank::default()).collect(),
            started: false,
            compute,
            computing: Computing::new(p),
        }
    }

    /// `r` computes, then begins its iteration.
    fn compute_then_begin(&mut self, sim: &mut SimCluster, r: Rank) -> Result<(), String> {
        let d = self.compute[self.ranks[r as usize].iter as usize];
        if self.computing.start(sim, r, d) {
            self.begin(sim, r)
        } else {
            Ok(())
        }
    }

    /// The broadcast's parent of `r` in iteration `i` (None for the root) and children.
    fn tree(&self, r: Rank, i: u32) -> (Option<Rank>, Vec<Rank>) {
        let p = self.p;
        let root = i % p;
        let v = (r + p - root) % p;
        let abs = |x: u32| (x + root) % p;
        let mut mask = 1;
        let mut parent = None;
        while mask < p {
            if v & mask != 0 {
                parent = Some(abs(v - mask));
                break;
            }
            mask <<= 1;
        }
        let mut kids = Vec::new();
        let mut m = mask >> 1;
        while m > 0 {
            if v + m < p {
                kids.push(abs(v + m));
            }
            m >>= 1;
        }
        (parent, kids)
    }

    fn begin(&mut self, sim: &mut SimCluster, r: Rank) -> Result<(), String> {
        let p = self.p;
        let me = &mut self.ranks[r as usize];
        let i = me.iter;
        me.round = Some(0);
        let from = (r + p - 1) % p;
        sim.expect(r, from, true);
        send(
            sim,
            r,
            (r + 1) % p,
            tagged(REDUCE, i, 0, r, self.lens[i as usize].0),
        )
    }

    fn advance(&mut self, sim: &mut SimCluster, r: Rank) -> Result<(), String> {
        let p = self.p;
        if self.computing.busy(r) {
            return Ok(());
        }
        loop {
            let i = self.ranks[r as usize].iter;
            if self.ranks[r as usize].done {
                return Ok(());
            }
            match self.ranks[r as usize].round {
                Some(k) => {
                    if !self.ranks[r as usize].got.contains(&(REDUCE, i, k)) {
                        return Ok(());
                    }
                    let from = (r + p - (1 << k) % p) % p;
                    sim.expect(r, from, false);
                    if k + 1 < rounds(p) {
                        self.ranks[r as usize].round = Some(k + 1);
                        let d = 1 << (k + 1);
                        sim.expect(r, (r + p - d % p) % p, true);
                        let len = self.lens[i as usize].0;
                        send(sim, r, (r + d) % p, tagged(REDUCE, i, k + 1, r, len))?;
                        continue;
                    }
                    self.ranks[r as usize].round = None;
                    let (parent, _) = self.tree(r, i);
                    if let Some(q) = parent {
                        sim.expect(r, q, true);
                    }
                }
                None => {
                    let (parent, kids) = self.tree(r, i);
                    if let Some(q) = parent {
                        if !self.ranks[r as usize].got.contains(&(BCAST, i, 0)) {
                            return Ok(());
                        }
                        sim.expect(r, q, false);
                    }
                    for k in kids {
                        send(
                            sim,
                            r,
                            k,
                            tagged(BCAST, i, 0, i % p, self.lens[i as usize].1),
                        )?;
                    }
                    let me = &mut self.ranks[r as usize];
                    me.iter += 1;
                    if me.iter == self.iters {
                        me.done = true;
                        return Ok(());
                    }
                    self.compute_then_begin(sim, r)?;
                    if self.ranks[r as usize].round.is_none() {
                        // Computing: nothing more until it is over.
                        return Ok(());
                    }
                }
            }
        }
    }
}

impl Program for Coll {
    fn tick(&mut self, sim: &mut SimCluster) -> Result<(), String> {
        if !self.started {
            self.started = true;
            for r in 0..self.p {
                self.compute_then_begin(sim, r)?;
            }
        }
        for r in self.computing.done(sim.now()) {
            self.begin(sim, r)?;
            self.advance(sim, r)?;
        }
        Ok(())
    }

    fn deliver(
        &mut self,
        sim: &mut SimCluster,
        rank: Rank,
        from: Rank,
        data: Vec<u8>,
    ) -> Result<(), String> {
        let p = self.p;
        let key = match untag(&data) {
            Some((REDUCE, i, k, src))
                if src == from
                    && i < self.iters
                    && k < rounds(p)
                    && (rank + p - (1 << k) % p) % p == from
                    && data.len() - 13 == self.lens[i as usize].0 =>
            {
                (REDUCE, i, k)
            }
            Some((BCAST, i, 0, root))
                if i < self.iters
                    && root == i % p
                    && self.tree(rank, i).0 == Some(from)
                    && data.len() - 13 == self.lens[i as usize].1 =>
            {
                (BCAST, i, 0)
            }
            _ => {
                return Err(format!(
                    "coll: rank {rank} got a message from {from} that is not one of this \
                     program's (damaged?)"
                ));
            }
        };
        if !self.ranks[rank as usize].got.insert(key) {
            return Err(format!("coll: rank {rank} got {key:?} twice from {from}"));
        }
        self.advance(sim, rank)
    }

    fn finished(&self, rank: Rank) -> bool {
        self.ranks[rank as usize].done
    }

    fn status(&self) -> String {
        let at: Vec<String> = self
            .ranks
            .iter()
            .map(|r| format!("{}{:?}", r.iter, r.round))
            .collect();
        format!(
            "coll: iterations {} of {} (rank: iteration, allreduce round)",
            at.join(" "),
            self.iters
        )
    }
}

/// Fault parameters of the simulated network.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Faults {
    pub loss: f64,
    pub corrupt: f64,
    pub dup: f64,
    pub reorder: f64,
    pub delay: f64,
}

impl Faults {
    /// Loss with corruption, duplication and reordering at the proportions the issue's
    /// runs used (`loss=0.2,corrupt=0.05,dup=0.05,reorder=0.05`, and a quarter of that).
    pub fn lossy(loss: f64) -> Faults {
        Faults {
            loss,
            corrupt: loss / 4.0,
            dup: loss / 4.0,
            reorder: loss / 4.0,
            delay: 0.0,
        }
    }

    pub fn apply(&self, c: &mut SimConfig) {
        c.loss = self.loss;
        c.corrupt = self.corrupt;
        c.dup = self.dup;
        c.reorder = self.reorder;
        c.delay = self.delay;
    }
}

/// Something a schedule does at a given time.
#[derive(Clone, Debug)]
pub enum Action {
    Faults(Faults),
    /// Pause a rank for this long.
    Pause(Rank, Time),
    Kill(Rank),
}

/// How a run ended.
#[derive(Debug, PartialEq, Eq)]
pub enum End {
    /// Every live rank finished its program, at this time.
    Done(Time),
    /// `rank` was told at `at` that `peer` is dead.
    Death { at: Time, rank: Rank, peer: Rank },
}

/// Runs `prog` on `sim` with `schedule` (actions at virtual times, in order) until every
/// live rank has finished or one was told of a death, or `limit` passes (an error: a
/// hang). Wrong deliveries are errors.
pub fn run(
    sim: &mut SimCluster,
    prog: &mut dyn Program,
    schedule: &[(Time, Action)],
    limit: Time,
) -> Result<End, String> {
    let p = sim.nodes();
    let mut next = 0;
    let mut killed = vec![false; p as usize];
    let mut err: Option<String> = None;
    let mut death = None;
    if let Some((t, _)) = schedule.first() {
        sim.alarm(*t);
    }
    let res = sim.run_until(limit, |c| {
        let now = c.now();
        while let Some((_, a)) = schedule.get(next).filter(|(t, _)| *t <= now) {
            match a {
                Action::Faults(f) => c.net().set_faults(|cfg| f.apply(cfg)),
                Action::Pause(r, d) => c.pause(*r, now + d),
                Action::Kill(r) => {
                    killed[*r as usize] = true;
                    c.kill(*r);
                }
            }
            next += 1;
            if let Some((t, _)) = schedule.get(next) {
                c.alarm(*t);
            }
        }
        if let Err(e) = prog.tick(c) {
            err.get_or_insert(e);
            return true;
        }
        for r in (0..p).filter(|&r| !killed[r as usize]) {
            for e in c.take_events(r) {
                let res = match e {
                    Event::Message { from, data, .. } => prog.deliver(c, r, from, data),
                    Event::PeerDead { peer, .. } => {
                        death.get_or_insert(End::Death {
                            at: now,
                            rank: r,
                            peer,
                        });
                        Ok(())
                    }
                    Event::Sent { .. } | Event::Announce { .. } => Ok(()),
                };
                if let Err(e) = res {
                    err.get_or_insert(e);
                    return true;
                }
            }
        }
        death.is_some() || (0..p).all(|r| killed[r as usize] || prog.finished(r))
    });
    if let Some(e) = err {
        return Err(e);
    }
    match (res, death) {
        (_, Some(d)) => Ok(d),
        (Ok(t), None) => Ok(End::Done(t)),
        (Err(SimError::TimeLimit { limit }), None) => Err(format!(
            "no end by the time limit of {:.3} s: {}",
            limit as f64 / 1e9,
            prog.status()
        )),
        (Err(e), None) => Err(format!("{e}: {}", prog.status())),
    }
}
