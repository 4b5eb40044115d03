//! Collectives through the network cache (the network-cache paper, section 4) when
//! every process of the communicator runs on this host.
//!
//! Each process owns one part of a shared segment ([`NetCache`]) and is its only writer.
//! A part's data area is used as two halves, alternately: generation g of a part lives in
//! half `g mod 2`. A collective call
//!
//! 1. waits until the readers of the generation that last used the half are done with it
//!    (completion before reuse), writes its data once into the half and publishes the
//!    next generation (a release store of the generation number);
//! 2. reads the other processes' data straight out of their parts (waiting for the
//!    generation it expects, an acquire load) and completes each generation it read.
//!
//! A writer does not wait for its readers before returning: its data is in the cache and
//! the user's buffer is free at once. The wait comes when the half is needed again, two
//! generations later, which usually has long happened. Data larger than a half goes in
//! chunks, one generation each, so writing chunk k+1 overlaps the reading of chunk k.
//!
//! When asked for (`direct`, off by default: the cache was faster on every size measured,
//! `docs/collectives.md`), scatter, gather and alltoall blocks from `direct` bytes go by
//! single copy: the generation holds only the address of the writer's own buffer
//! ([`Shm::lend`]), readers copy their blocks out of it with `process_vm_readv`, and the
//! writer returns once they have completed the generation. One copy instead of two, as vader's CMA path. Broadcast
//! and allgather do the same where each buffer has one reader (p = 2), and reductions
//! with slices of `4 * direct` bytes read their slices out of the lent buffers and lend
//! the reduced slices ([`Shm::reduce_lent`]).
//!
//! Every process knows the generation every part will publish next (a mirror, `gens`):
//! all processes run the same calls with the same sizes, and every call publishes a number
//! of generations that follows from its arguments. The one exception, alltoallv, where a
//! reader does not know the others' send counts, puts the number of rounds in a header.
//!
//! Waits end when the job fails (another process died or aborted: the launcher tells
//! every process within about a millisecond) or when a peer this process waits for has
//! been stopped, a zombie or gone from `/proc` for longer than the job's `dead_after`
//! (the p2p layer's rule for a silent peer). A peer that computes for a long time before
//! joining is not a failure. Nothing a peer writes into the segment is used as an offset:
//! lengths and positions are computed locally, and a round count read from a header is
//! only a number of generations to wait for.

use std::io;
use std::time::{Duration, Instant};

use bulkwire_link::netcache::{NetCache, WaitSpec};
use bulkwire_link::{HostGroup, Rendezvous};
use bulkwire_p2p::{Comm, vm};

use crate::Error;
use crate::algo::pieces;
use crate::net::{Net, X, fail_job};
use crate::op::{Datatype, Op};

/// Bytes at the start of a half that hold the alltoallv header (the round count).
const HEADER: usize = 64;
/// Slots are multiples of this (a cache line), so readers of different slots of one part
/// do not share lines.
const ALIGN: usize = 64;
/// Readers of one lent buffer at most for broadcast and allgather to go by single copy
/// (see [`Shm::lent_shared`]).
const SHARED_READERS: usize = 1;
/// A reduction goes by single copy from slices of this many times the single-copy
/// threshold (see [`Shm::lent_reduction`]).
const REDUCE_LENT: usize = 4;
/// How often waits look at the peers' processes.
const WATCH_EVERY: Duration = Duration::from_millis(100);
/// How often waits drive p2p (see [`Watch::check`]).
const POKE_EVERY: Duration = Duration::from_micros(200);

/// `errno` of a process that no longer exists (Linux's value on every architecture).
const ESRCH: i32 = 3;

/// One read of [`Shm::take_each`]: `out` from part `w`'s generation `g`, at `at` in its
/// half.
struct Take<'b> {
    w: usize,
    g: u64,
    at: usize,
    out: &'b mut [u8],
}

/// Where a reader finds a generation's data: in the writer's part of the cache, or in the
/// writer's own buffer, whose address the generation holds ([`Shm::lend`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Via {
    Cache,
    Lent,
}

/// Who reads a generation: every other part, or one.
#[derive(Clone, Copy, Debug)]
enum Who {
    All,
    One(usize),
}

/// The health of the peers as far as the waits are concerned.
struct Watch {
    pids: Vec<u32>,
    me: usize,
    dead_after: Duration,
    last: Option<Instant>,
    /// When the waits last drove p2p.
    poked: Option<Instant>,
    /// Since when each peer has looked stopped or dead.
    bad_since: Vec<Option<Instant>>,
    /// Why the last wait was ended.
    failure: Option<Error>,
}

/// The scheduling state of `/proc/<pid>/stat` ('R', 'S', 'T', 'Z'...), `None` if gone.
fn proc_state(pid: u32) -> Option<u8> {
    let s = std::fs::read(format!("/proc/{pid}/stat")).ok()?;
    // "pid (comm) S ...": the name may contain anything, so find the last ')'.
    let close = s.iter().rposition(|&b| b == b')')?;
    s.get(close + 2).copied()
}

impl Watch {
    fn check(&mut self, comm: &Comm) -> io::Result<()> {
        if let Some(e) = comm.job_failure() {
            self.failure = Some(e.into());
            return Err(io::Error::other("the job failed"));
        }
        let now = Instant::now();
        // A process waiting here is not in p2p: drive it now and then, so that what it
        // owes its peers (a queued eager message, acknowledgements, answers to pings)
        // goes out even without the progress thread (BULKWIRE_PROGRESS_US=0), where a
        // peer waiting in p2p for this process's last message would otherwise wait for
        // as long as this process waits here.
        if self.poked.is_none_or(|t| now - t >= POKE_EVERY) {
            self.poked = Some(now);
            comm.progress();
        }
        if self.last.is_some_and(|t| now - t < WATCH_EVERY) {
            return Ok(());
        }
        self.last = Some(now);
        for (j, &pid) in self.pids.iter().enumerate() {
            if j == self.me {
                continue;
            }
            let st = proc_state(pid);
            let bad = matches!(st, None | Some(b'T' | b't' | b'Z' | b'X' | b'x'));
            if !bad {
                self.bad_since[j] = None;
                continue;
            }
            let since = *self.bad_since[j].get_or_insert(now);
            if now - since >= self.dead_after {
                let what = match st {
                    None => "is gone",
                    Some(b'Z' | b'X' | b'x') => "has died",
                    _ => "is stopped",
                };
                self.failure = Some(Error::Peer {
                    rank: j as u32,
                    why: format!(
                        "process {pid} {what} (for {:.1} s) while a collective waits for it",
                        (now - since).as_secs_f64()
                    ),
                });
                return Err(io::Error::other("a peer failed"));
            }
        }
        Ok(())
    }
}

/// The job's rendezvous carried by p2p messages (segment creation needs two rounds).
struct P2pRendezvous<'a> {
    comm: &'a Comm,
    seq: &'a mut u32,
}

impl Rendezvous for P2pRendezvous<'_> {
    fn allgather(&mut self, blob: &[u8]) -> io::Result<Vec<Vec<u8>>> {
        *self.seq = self.seq.wrapping_add(1);
        let net = Net::new(self.comm, *self.seq);
        let (me, p) = (net.me, net.p);
        let io_err = |e: Error| io::Error::other(e.to_string());
        // Lengths, then the blobs themselves.
        let mine = (blob.len() as u64).to_le_bytes();
        let mut lens = vec![[0u8; 8]; p as usize];
        let mut ops: Vec<X> = Vec::new();
        for (j, l) in lens.iter_mut().enumerate() {
            if j as u32 != me {
                ops.push(X::Recv {
                    from: j as u32,
                    phase: 0,
                    buf: l,
                });
                ops.push(X::Send {
                    to: j as u32,
                    phase: 0,
                    data: &mine,
                });
            }
        }
        net.run(&mut ops).map_err(io_err)?;
        let mut out: Vec<Vec<u8>> = Vec::with_capacity(p as usize);
        for (j, l) in lens.iter().enumerate() {
            let n = u64::from_le_bytes(*l);
            // Segment blobs are a few dozen bytes; anything large is nonsense.
            if n > 1 << 20 {
                return Err(io::Error::other(format!(
                    "rank {j} announced a rendezvous blob of {n} bytes"
                )));
            }
            out.push(if j as u32 == me {
                blob.to_vec()
            } else {
                vec![0u8; n as usize]
            });
        }
        let mut ops: Vec<X> = Vec::new();
        for (j, b) in out.iter_mut().enumerate() {
            if j as u32 != me {
                ops.push(X::Recv {
                    from: j as u32,
                    phase: 1,
                    buf: b,
                });
                ops.push(X::Send {
                    to: j as u32,
                    phase: 1,
                    data: blob,
                });
            }
        }
        net.run(&mut ops).map_err(io_err)?;
        Ok(out)
    }
}

/// The network cache of a communicator whose processes all share this host.
pub struct Shm {
    nc: NetCache,
    n: usize,
    me: usize,
    /// Bytes of each half of a part's data area.
    half: usize,
    /// Every part but this process's.
    others: Vec<usize>,
    /// The generation each part published last (this process's own included).
    gens: Vec<u64>,
    /// The last generation written into each of this process's halves, and its readers.
    halves: [Option<(u64, Who)>; 2],
    watch: Watch,
    /// Blocks from this many bytes go by single copy (`usize::MAX`: never).
    direct: usize,
    /// Scratch for reductions (kept: a vector's zeroing costs as much as the reduction).
    scratch: [Vec<u8>; 2],
}

impl std::fmt::Debug for Shm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shm")
            .field("n", &self.n)
            .field("half", &self.half)
            .finish()
    }
}

/// The smallest part that still gives every reader an aligned slot in each half.
pub fn min_part(n: usize) -> usize {
    2 * (HEADER + ALIGN * n)
}

impl Shm {
    /// Creates the cache: collective over the communicator (two p2p rendezvous rounds
    /// using collective sequence numbers from `seq`, and a third to agree on single
    /// copy). `pids` are the processes' ids by rank; `part_bytes` is raised to
    /// [`min_part`] if smaller. Blocks of `direct` bytes and more go by single copy if
    /// every process can read every other's memory (`usize::MAX`: never).
    #[allow(clippy::too_many_arguments)]
    pub fn create(
        comm: &Comm,
        seq: &mut u32,
        part_bytes: usize,
        pids: Vec<u32>,
        dead_after: Duration,
        oversubscribed: bool,
        direct: usize,
    ) -> Result<Shm, Error> {
        let n = comm.size() as usize;
        let group = HostGroup::new(comm.rank(), comm.host_local())
            .map_err(|e| Error::Shm(e.to_string()))?;
        if group.len() != n {
            return Err(Error::Shm(format!(
                "{} of {n} processes share this host: the network cache needs all",
                group.len()
            )));
        }
        let part = part_bytes.max(min_part(n)).next_multiple_of(2 * ALIGN);
        let mut rv = P2pRendezvous { comm, seq };
        let mut nc = NetCache::create(&group, part, &mut rv).map_err(|e| {
            comm.job_failure()
                .map_or_else(|| Error::Shm(e.to_string()), Error::from)
        })?;
        nc.wait = WaitSpec {
            // With more processes than cores the writer we wait for may need our core.
            spin: if oversubscribed {
                Duration::ZERO
            } else {
                Duration::from_micros(50)
            },
            yield_for: Duration::from_millis(1),
            nap: Duration::from_micros(50),
            // Liveness is the watch's business: a peer may compute for long before it
            // joins a collective.
            timeout: None,
        };
        // Single copy only if every process can read every other (p2p verified each peer
        // when the communicator was made), so that all take the same path.
        let direct = if direct == usize::MAX {
            usize::MAX
        } else {
            let mine = u8::from(comm.single_copy_peers().len() + 1 == n);
            // Not an `Error::Shm`: that would let this process alone fall back to p2p.
            let all = rv.allgather(&[mine]).map_err(|e| {
                comm.job_failure().map_or_else(
                    || Error::Broken(format!("agreeing on single copy: {e}")),
                    Error::from,
                )
            })?;
            if all.iter().all(|b| b[..] == [1]) {
                direct
            } else {
                usize::MAX
            }
        };
        let me = group.me;
        Ok(Shm {
            nc,
            n,
            me,
            half: part / 2,
            others: (0..n).filter(|&j| j != me).collect(),
            gens: vec![0; n],
            halves: [None, None],
            watch: Watch {
                pids,
                me,
                dead_after,
                last: None,
                poked: None,
                bad_since: vec![None; n],
                failure: None,
            },
            direct,
            scratch: [Vec::new(), Vec::new()],
        })
    }

    /// Bytes per reader slot in a half, with `header` bytes reserved at its start.
    fn slot(&self, header: usize) -> usize {
        ((self.half - header) / self.n) / ALIGN * ALIGN
    }

    /// An error from the cache as the collective's error: the watch's reason if it ended
    /// the wait. The job is failed too, so that no process keeps waiting for this one.
    fn lost(&mut self, comm: &Comm, e: io::Error) -> Error {
        let err = self
            .watch
            .failure
            .take()
            .unwrap_or_else(|| Error::Shm(e.to_string()));
        fail_job(comm, &err);
        err
    }

    /// Step 1 of writing: the byte offset of the half the next generation goes to, once
    /// the readers of the generation that used it last are done.
    fn begin(&mut self, comm: &Comm) -> Result<usize, Error> {
        let h = ((self.nc.generation() + 1) % 2) as usize;
        self.wait_readers(comm, h)?;
        Ok(h * self.half)
    }

    /// Waits until the readers of the last generation written into half `h` are done
    /// with it.
    fn wait_readers(&mut self, comm: &Comm, h: usize) -> Result<(), Error> {
        let Some((pg, who)) = self.halves[h] else {
            return Ok(());
        };
        let one;
        let readers: &[usize] = match who {
            Who::All => &self.others,
            Who::One(r) => {
                one = [r];
                &one
            }
        };
        let done = |nc: &NetCache, r: usize| nc.completed(r).is_ok_and(|d| d >= pg);
        if !readers.iter().all(|&r| done(&self.nc, r)) {
            let readers = readers.to_vec();
            self.wait_until(
                comm,
                |nc| readers.iter().all(|&r| done(nc, r)),
                || format!("the readers of generation {pg} of this process's part"),
            )?;
        }
        self.halves[h] = None;
        Ok(())
    }

    /// Single copy, the writer's side: publishes the address of `buf` as the next
    /// generation, for `who` to read in place ([`Via::Lent`]). The caller must
    /// [`Shm::settle`] before `buf` is the user's again.
    fn lend(&mut self, comm: &Comm, buf: &[u8], who: Who) -> Result<(), Error> {
        let off = self.begin(comm)?;
        self.write(comm, off, &(buf.as_ptr() as u64).to_le_bytes())?;
        self.publish(comm, 8, who)
    }

    /// Waits until the readers of this process's last generation are done with it.
    fn settle(&mut self, comm: &Comm) -> Result<(), Error> {
        let h = (self.nc.generation() % 2) as usize;
        self.wait_readers(comm, h)
    }

    /// Single copy, the reader's side: `out.len()` bytes from offset `at` of the buffer
    /// part `w` lent in the generation at `off` of its part, read with
    /// `process_vm_readv`. The address is the peer's word, so it is only ever a place in
    /// that process's memory: the kernel checks it there, and a wrong one fails the read.
    fn read_lent(
        &mut self,
        comm: &Comm,
        w: usize,
        off: usize,
        at: usize,
        out: &mut [u8],
    ) -> Result<(), Error> {
        let mut a = [0u8; 8];
        self.read(comm, w, off, &mut a)?;
        let addr = u64::from_le_bytes(a).wrapping_add(at as u64);
        let pid = self.watch.pids.get(w).copied().unwrap_or(0);
        // SAFETY: `out` is a buffer of `out.len()` bytes that only this call writes.
        match unsafe { vm::read(pid as i32, addr, out.as_mut_ptr(), out.len()) } {
            Ok(()) => Ok(()),
            // ESRCH: the process has exited (a live one always has its memory), so the
            // peer is dead, and the failure names its rank.
            Err(e) if e.raw_os_error() == Some(ESRCH) => {
                let err = Error::Peer {
                    rank: w as u32,
                    why: format!(
                        "process {pid} has exited: its memory could not be read in a \
                         collective ({e})"
                    ),
                };
                fail_job(comm, &err);
                Err(err)
            }
            Err(e) => {
                let e = io::Error::new(
                    e.kind(),
                    format!(
                        "single-copy read of {} bytes from part {w} (pid {pid}): {e}",
                        out.len()
                    ),
                );
                Err(self.lost(comm, e))
            }
        }
    }

    /// Whether blocks of `b` bytes go by single copy where each reader reads its own
    /// pages (scatter, gather, alltoall, the slices of a reduction).
    fn lent(&self, b: usize) -> bool {
        b >= self.direct
    }

    /// Whether `b` bytes that every other process reads from one buffer (broadcast,
    /// allgather) go by single copy: only with a single reader. Readers of one buffer
    /// contend in the kernel for the writer's page tables, and at p = 4 the cache was
    /// faster (1 MiB: broadcast 272 against 356 us, allgather 1091 against 1167 us).
    fn lent_shared(&self, b: usize) -> bool {
        self.lent(b) && self.n - 1 <= SHARED_READERS
    }

    /// How scatter, gather and alltoall move blocks of `b` bytes.
    pub fn algorithm(&self, b: usize) -> crate::Algorithm {
        if self.lent(b) {
            crate::Algorithm::SingleCopy
        } else {
            crate::Algorithm::NetCache
        }
    }

    /// How broadcast and allgather move `b` bytes per process.
    pub fn shared_algorithm(&self, b: usize) -> crate::Algorithm {
        if self.lent_shared(b) {
            crate::Algorithm::SingleCopy
        } else {
            crate::Algorithm::NetCache
        }
    }

    /// Waits until `cond` holds ([`NetCache::wait_for`]), watching the job and the peers
    /// (see [`Watch`]).
    fn wait_until(
        &mut self,
        comm: &Comm,
        mut cond: impl FnMut(&NetCache) -> bool,
        what: impl Fn() -> String,
    ) -> Result<(), Error> {
        let Shm { nc, watch, .. } = self;
        match nc.wait_for(|| cond(nc), &mut || watch.check(comm), what) {
            Ok(()) => Ok(()),
            Err(e) => Err(self.lost(comm, e)),
        }
    }

    /// Reads each of `items` as soon as its writer has published its generation, in
    /// whatever order they come, and completes it.
    fn take_each(&mut self, comm: &Comm, mut items: Vec<Take<'_>>, via: Via) -> Result<(), Error> {
        loop {
            let mut i = 0;
            while i < items.len() {
                let t = &items[i];
                if self.nc.published(t.w).is_ok_and(|g| g >= t.g) {
                    let t = items.remove(i);
                    let off = (t.g % 2) as usize * self.half;
                    match via {
                        Via::Cache => self.read(comm, t.w, off + t.at, t.out)?,
                        Via::Lent => self.read_lent(comm, t.w, off, t.at, t.out)?,
                    }
                    self.complete(comm, t.w, t.g)?;
                } else {
                    i += 1;
                }
            }
            let Some(first) = items.first() else {
                return Ok(());
            };
            let (w, g) = (first.w, first.g);
            let want: Vec<(usize, u64)> = items.iter().map(|t| (t.w, t.g)).collect();
            self.wait_until(
                comm,
                |nc| {
                    want.iter()
                        .any(|&(w, g)| nc.published(w).is_ok_and(|x| x >= g))
                },
                || format!("part {w} to publish generation {g}"),
            )?;
        }
    }

    fn write(&mut self, comm: &Comm, off: usize, data: &[u8]) -> Result<(), Error> {
        match self.nc.write(off, data) {
            Ok(()) => Ok(()),
            Err(e) => Err(self.lost(comm, e)),
        }
    }

    /// Step 2 of writing: publishes `len` bytes of the half as the next generation.
    fn publish(&mut self, comm: &Comm, len: usize, who: Who) -> Result<(), Error> {
        match self.nc.publish(len) {
            Ok(g) => {
                // A generation only its writer needs (a reduction's root) has no reader
                // to wait for before its half is reused.
                let read = !matches!(who, Who::One(r) if r == self.me);
                self.halves[(g % 2) as usize] = read.then_some((g, who));
                self.gens[self.me] = g;
                Ok(())
            }
            Err(e) => Err(self.lost(comm, e)),
        }
    }

    /// Waits for part `w`'s generation `g`; the byte offset of its half.
    fn await_gen(&mut self, comm: &Comm, w: usize, g: u64) -> Result<usize, Error> {
        self.wait_until(
            comm,
            |nc| nc.published(w).is_ok_and(|x| x >= g),
            || format!("part {w} to publish generation {g}"),
        )?;
        Ok((g % 2) as usize * self.half)
    }

    fn read(&mut self, comm: &Comm, w: usize, off: usize, out: &mut [u8]) -> Result<(), Error> {
        match self.nc.read(w, off, out) {
            Ok(()) => Ok(()),
            Err(e) => Err(self.lost(comm, e)),
        }
    }

    fn complete(&mut self, comm: &Comm, w: usize, g: u64) -> Result<(), Error> {
        match self.nc.complete(w, g) {
            Ok(()) => Ok(()),
            Err(e) => Err(self.lost(comm, e)),
        }
    }

    /// Reads `out` from part `w`'s generation `g` at `at` within its half and completes
    /// the generation.
    fn take(
        &mut self,
        comm: &Comm,
        w: usize,
        g: u64,
        at: usize,
        out: &mut [u8],
    ) -> Result<(), Error> {
        let off = self.await_gen(comm, w, g)?;
        self.read(comm, w, off + at, out)?;
        self.complete(comm, w, g)
    }

    /// Reads of round `r` of every other part's block: bytes `range` of each `b`-byte
    /// block of `recv`, from offset `at` of the writer's half.
    fn blocks<'b>(
        &self,
        recv: &'b mut [u8],
        b: usize,
        range: std::ops::Range<usize>,
        r: usize,
        at: usize,
    ) -> Vec<Take<'b>> {
        let me = self.me;
        let mut v: Vec<Take<'b>> = recv
            .chunks_mut(b)
            .enumerate()
            .filter(|&(w, _)| w != me)
            .map(|(w, blk)| Take {
                w,
                g: self.gens[w] + r as u64 + 1,
                at,
                out: &mut blk[range.clone()],
            })
            .collect();
        // Ring order from this process (latin square over the readers): when all have
        // published, each writer has one reader at a time instead of all at once.
        let k = me.min(v.len());
        v.rotate_left(k);
        v
    }

    /// The mirror: every part in `writers` other than this process published `k` more.
    fn advance(&mut self, writers: impl Iterator<Item = usize>, k: u64) {
        for w in writers {
            if w != self.me {
                self.gens[w] += k;
            }
        }
    }

    /// Other parts, starting after this process's (so that readers spread over writers).
    fn ring(&self) -> impl Iterator<Item = usize> + use<> {
        let (me, n) = (self.me, self.n);
        (1..n).map(move |k| (me + k) % n)
    }

    pub fn barrier(&mut self, comm: &Comm) -> Result<(), Error> {
        let watch = &mut self.watch;
        match self.nc.barrier(&mut || watch.check(comm)) {
            Ok(()) => Ok(()),
            Err(e) => Err(self.lost(comm, e)),
        }
    }

    /// The root writes the message once, in chunks of a half; everyone else reads it.
    pub fn bcast(&mut self, comm: &Comm, buf: &mut [u8], root: usize) -> Result<(), Error> {
        let c = self.half;
        if self.lent_shared(buf.len()) {
            if self.me == root {
                self.lend(comm, buf, Who::All)?;
                return self.settle(comm);
            }
            let g = self.gens[root] + 1;
            let item = Take {
                w: root,
                g,
                at: 0,
                out: buf,
            };
            self.take_each(comm, vec![item], Via::Lent)?;
            self.gens[root] = g;
            return Ok(());
        }
        if self.me == root {
            for chunk in buf.chunks(c) {
                let off = self.begin(comm)?;
                self.write(comm, off, chunk)?;
                self.publish(comm, chunk.len(), Who::All)?;
            }
        } else {
            let base = self.gens[root];
            let mut k = 0;
            for chunk in buf.chunks_mut(c) {
                k += 1;
                self.take(comm, root, base + k, 0, chunk)?;
            }
            self.gens[root] = base + k;
        }
        Ok(())
    }

    /// The root writes every process's block into that process's slot; each reads its own.
    pub fn scatter(
        &mut self,
        comm: &Comm,
        send: &[u8],
        recv: &mut [u8],
        root: usize,
    ) -> Result<(), Error> {
        let (b, s, n) = (recv.len(), self.slot(0), self.n);
        if self.lent(b) {
            let me = self.me;
            if me == root {
                recv.copy_from_slice(&send[me * b..(me + 1) * b]);
                self.lend(comm, send, Who::All)?;
                return self.settle(comm);
            }
            let g = self.gens[root] + 1;
            let item = Take {
                w: root,
                g,
                at: me * b,
                out: recv,
            };
            self.take_each(comm, vec![item], Via::Lent)?;
            self.gens[root] = g;
            return Ok(());
        }
        let rounds = b.div_ceil(s);
        if self.me == root {
            for r in 0..rounds {
                let (lo, hi) = (r * s, (r * s + s).min(b));
                let off = self.begin(comm)?;
                for j in self.ring() {
                    self.write(comm, off + j * s, &send[j * b + lo..j * b + hi])?;
                }
                self.publish(comm, n * s, Who::All)?;
            }
            recv.copy_from_slice(&send[root * b..(root + 1) * b]);
        } else {
            let base = self.gens[root];
            for r in 0..rounds {
                let (lo, hi) = (r * s, (r * s + s).min(b));
                self.take(
                    comm,
                    root,
                    base + r as u64 + 1,
                    self.me * s,
                    &mut recv[lo..hi],
                )?;
            }
            self.gens[root] = base + rounds as u64;
        }
        Ok(())
    }

    /// Everyone but the root writes its block; the root reads them all.
    pub fn gather(
        &mut self,
        comm: &Comm,
        send: &[u8],
        recv: &mut [u8],
        root: usize,
    ) -> Result<(), Error> {
        let (b, c) = (send.len(), self.half);
        if self.lent(b) {
            if self.me != root {
                self.lend(comm, send, Who::One(root))?;
                self.settle(comm)?;
            } else {
                recv[root * b..(root + 1) * b].copy_from_slice(send);
                let items = self.blocks(recv, b, 0..b, 0, 0);
                self.take_each(comm, items, Via::Lent)?;
            }
            self.advance((0..self.n).filter(|&w| w != root), 1);
            return Ok(());
        }
        let rounds = b.div_ceil(c);
        if self.me != root {
            for chunk in send.chunks(c) {
                let off = self.begin(comm)?;
                self.write(comm, off, chunk)?;
                self.publish(comm, chunk.len(), Who::One(root))?;
            }
        } else {
            recv[root * b..(root + 1) * b].copy_from_slice(send);
            for r in 0..rounds {
                let (lo, hi) = (r * c, (r * c + c).min(b));
                let items = self.blocks(recv, b, lo..hi, r, 0);
                self.take_each(comm, items, Via::Cache)?;
            }
        }
        self.advance((0..self.n).filter(|&w| w != root), rounds as u64);
        Ok(())
    }

    /// Everyone writes its block; everyone reads every other block.
    pub fn allgather(&mut self, comm: &Comm, send: &[u8], recv: &mut [u8]) -> Result<(), Error> {
        let (b, c, me) = (send.len(), self.half, self.me);
        recv[me * b..(me + 1) * b].copy_from_slice(send);
        if self.lent_shared(b) {
            self.lend(comm, send, Who::All)?;
            let items = self.blocks(recv, b, 0..b, 0, 0);
            self.take_each(comm, items, Via::Lent)?;
            self.advance(0..self.n, 1);
            return self.settle(comm);
        }
        let rounds = b.div_ceil(c);
        for r in 0..rounds {
            let (lo, hi) = (r * c, (r * c + c).min(b));
            let off = self.begin(comm)?;
            self.write(comm, off, &send[lo..hi])?;
            self.publish(comm, hi - lo, Who::All)?;
            let items = self.blocks(recv, b, lo..hi, r, 0);
            self.take_each(comm, items, Via::Cache)?;
        }
        self.advance(0..self.n, rounds as u64);
        Ok(())
    }

    /// Everyone writes its block for reader j into slot j; reader j reads slot j of every
    /// part.
    pub fn alltoall(
        &mut self,
        comm: &Comm,
        send: &[u8],
        recv: &mut [u8],
        b: usize,
    ) -> Result<(), Error> {
        let (s, n, me) = (self.slot(0), self.n, self.me);
        recv[me * b..(me + 1) * b].copy_from_slice(&send[me * b..(me + 1) * b]);
        if self.lent(b) {
            // Single copy: every process lends `send`, reads its block of every other
            // process's buffer, and waits until the others have read theirs of its own.
            self.lend(comm, send, Who::All)?;
            let items = self.blocks(recv, b, 0..b, 0, me * b);
            self.take_each(comm, items, Via::Lent)?;
            self.advance(0..n, 1);
            return self.settle(comm);
        }
        let rounds = b.div_ceil(s);
        for r in 0..rounds {
            let (lo, hi) = (r * s, (r * s + s).min(b));
            let off = self.begin(comm)?;
            for j in self.ring() {
                self.write(comm, off + j * s, &send[j * b + lo..j * b + hi])?;
            }
            self.publish(comm, n * s, Who::All)?;
            let items = self.blocks(recv, b, lo..hi, r, me * s);
            self.take_each(comm, items, Via::Cache)?;
        }
        self.advance(0..n, rounds as u64);
        Ok(())
    }

    /// Alltoall with a block per pair of any length. A reader knows only what it receives,
    /// so each generation starts with a header holding the writer's number of rounds; a
    /// reader reads the rounds its own block needs and completes the rest at once.
    pub fn alltoallv(
        &mut self,
        comm: &Comm,
        send: &[&[u8]],
        recv: &mut [&mut [u8]],
    ) -> Result<(), Error> {
        let (s, n, me) = (self.slot(HEADER), self.n, self.me);
        recv[me].copy_from_slice(send[me]);
        let mine = self
            .others
            .iter()
            .map(|&j| send[j].len().div_ceil(s))
            .max()
            .unwrap_or(0)
            .max(1);
        let need: Vec<usize> = (0..n).map(|w| recv[w].len().div_ceil(s)).collect();
        let base: Vec<u64> = self.gens.clone();
        // Rounds each writer publishes (known after reading its first header).
        let mut theirs: Vec<Option<u64>> = vec![None; n];
        let mut r = 0;
        loop {
            let reading = (0..n).any(|w| w != me && theirs[w].is_none_or(|_| r < need[w]));
            if r >= mine && !reading {
                break;
            }
            if r < mine {
                let off = self.begin(comm)?;
                self.write(comm, off, &(mine as u64).to_le_bytes())?;
                for j in self.ring() {
                    let (lo, hi) = ((r * s).min(send[j].len()), (r * s + s).min(send[j].len()));
                    self.write(comm, off + HEADER + j * s, &send[j][lo..hi])?;
                }
                self.publish(comm, HEADER + n * s, Who::All)?;
            }
            for w in self.ring() {
                let first = theirs[w].is_none();
                if !first && r >= need[w] {
                    continue;
                }
                let g = base[w] + r as u64 + 1;
                let off = self.await_gen(comm, w, g)?;
                if first {
                    let mut h = [0u8; 8];
                    self.read(comm, w, off, &mut h)?;
                    let k = u64::from_le_bytes(h);
                    if k == 0 || k < need[w] as u64 || k > 1 << 40 {
                        let e = Error::Arg(format!(
                            "rank {w} sends in {k} rounds of {s} bytes, but {} bytes are \
                             expected from it: the processes passed inconsistent counts",
                            recv[w].len()
                        ));
                        fail_job(comm, &e);
                        return Err(e);
                    }
                    theirs[w] = Some(k);
                }
                if r < need[w] {
                    let (lo, hi) = (r * s, (r * s + s).min(recv[w].len()));
                    self.read(comm, w, off + HEADER + me * s, &mut recv[w][lo..hi])?;
                }
                if r + 1 >= need[w] {
                    // Done with this writer: complete all its rounds at once (the ones
                    // not read yet need nothing from us).
                    let last = base[w] + theirs[w].unwrap_or(1);
                    self.complete(comm, w, last)?;
                } else {
                    self.complete(comm, w, g)?;
                }
            }
            r += 1;
        }
        for w in self.ring() {
            self.gens[w] = base[w] + theirs[w].unwrap_or(0);
        }
        Ok(())
    }

    /// Whether a reduction of `len` bytes fits one generation of each part (then every
    /// process that needs the result reads every part and reduces it all itself).
    pub fn fits(&self, len: usize) -> bool {
        len <= self.half
    }

    /// A reduction through the cache, in rank order (any associative `op`). `buf` is this
    /// process's input and, where a result is due (everywhere for an allreduce, `root =
    /// None`; at the root for a reduce), the result.
    ///
    /// - `whole` (the vector fits a half): one generation. Each process writes its vector;
    ///   whoever needs the result reads every part and reduces, rank 0 first.
    /// - otherwise, per chunk of a half, two generations: each process writes its chunk;
    ///   process j reduces slice j of it over all parts (reduce-scatter, the work shared
    ///   by all) and writes that; whoever needs the result reads every slice (allgather).
    pub fn reduce(
        &mut self,
        comm: &Comm,
        buf: &mut [u8],
        dt: Datatype,
        op: &Op,
        root: Option<usize>,
        whole: bool,
    ) -> Result<(), Error> {
        let [mut acc, mut tmp] = std::mem::take(&mut self.scratch);
        let r = if self.lent_reduction(buf.len()) {
            self.reduce_lent(comm, buf, dt, op, root, &mut acc, &mut tmp)
        } else {
            self.reduce_with(comm, buf, dt, op, root, whole, &mut acc, &mut tmp)
        };
        self.scratch = [acc, tmp];
        r
    }

    /// Whether a reduction of `len` bytes goes by single copy ([`Shm::reduce_lent`]):
    /// when each process's slice is `REDUCE_LENT` single-copy blocks or more. Below that
    /// the cache's copies hit in the caches and beat the system calls: at p = 2 an
    /// allreduce of 64 KiB took 12.6 us through the cache and 17 us by single copy, one
    /// of 256 KiB 47 us and 40-42 us.
    fn lent_reduction(&self, len: usize) -> bool {
        len / self.n >= self.direct.saturating_mul(REDUCE_LENT)
    }

    /// How a reduction of `len` bytes through the cache moves its data.
    pub fn reduce_algorithm(&self, len: usize) -> crate::Algorithm {
        if self.lent_reduction(len) {
            crate::Algorithm::SingleCopy
        } else {
            crate::Algorithm::NetCache
        }
    }

    /// A reduction by single copy, two generations: every process lends `buf`; process j
    /// reads slice j of every other's buffer and reduces it in rank order
    /// (reduce-scatter), then lends its reduced slice, which whoever needs the result
    /// reads into its own `buf` (allgather). Each byte is copied once between processes
    /// where the cache copies it twice. Writing slice w of `buf` is safe once w's reduced
    /// slice is published: w read its slice of `buf` before publishing it, and no other
    /// process reads that slice.
    #[allow(clippy::too_many_arguments)]
    fn reduce_lent(
        &mut self,
        comm: &Comm,
        buf: &mut [u8],
        dt: Datatype,
        op: &Op,
        root: Option<usize>,
        acc: &mut Vec<u8>,
        tmp: &mut Vec<u8>,
    ) -> Result<(), Error> {
        let (n, me) = (self.n, self.me);
        let pc = pieces(buf.len(), dt.size(), n as u32);
        let mine = pc[me].clone();
        let sl = mine.len();
        for v in [&mut *acc, &mut *tmp] {
            if v.len() < sl {
                v.resize(sl, 0);
            }
        }
        let base = self.gens.clone();
        self.lend(comm, buf, Who::All)?;
        // The running value is in this process's own slice of `buf` (`own`) or in `acc`.
        let mut own = false;
        for (w, &bw) in base.iter().enumerate() {
            if w == me {
                if w > 0 {
                    op.apply(dt, &acc[..sl], &mut buf[mine.clone()]);
                }
                own = true;
                continue;
            }
            let item = Take {
                w,
                g: bw + 1,
                at: mine.start,
                out: &mut tmp[..sl],
            };
            self.take_each(comm, vec![item], Via::Lent)?;
            if w > 0 {
                let lo = if own { &buf[mine.clone()] } else { &acc[..sl] };
                op.apply(dt, lo, &mut tmp[..sl]);
            }
            std::mem::swap(acc, tmp);
            own = false;
        }
        let due = root.is_none_or(|r| r == me);
        let readers = root.map_or(Who::All, Who::One);
        let reduced: &[u8] = if own { &buf[mine.clone()] } else { &acc[..sl] };
        self.lend(comm, reduced, readers)?;
        if due {
            if !own {
                buf[mine.clone()].copy_from_slice(&acc[..sl]);
            }
            let mut items = Vec::with_capacity(n);
            let mut rest = &mut *buf;
            for (w, r) in pc.iter().enumerate() {
                let (now, later) = std::mem::take(&mut rest).split_at_mut(r.len());
                rest = later;
                if w != me {
                    let g = base[w] + 2;
                    items.push(Take {
                        w,
                        g,
                        at: 0,
                        out: now,
                    });
                }
            }
            let k = me.min(items.len());
            items.rotate_left(k);
            self.take_each(comm, items, Via::Lent)?;
        }
        self.advance(0..n, 2);
        // Both lent buffers are the caller's (or scratch) again only once read.
        self.wait_readers(comm, 0)?;
        self.wait_readers(comm, 1)
    }

    #[allow(clippy::too_many_arguments)]
    fn reduce_with(
        &mut self,
        comm: &Comm,
        buf: &mut [u8],
        dt: Datatype,
        op: &Op,
        root: Option<usize>,
        whole: bool,
        acc: &mut Vec<u8>,
        tmp: &mut Vec<u8>,
    ) -> Result<(), Error> {
        let (n, me, z) = (self.n, self.me, dt.size());
        let due = root.is_none_or(|r| r == me);
        let readers = root.map_or(Who::All, Who::One);
        let base = self.gens.clone();
        let fill = |v: &mut Vec<u8>, len: usize| {
            if v.len() < len {
                v.resize(len, 0);
            }
        };
        if whole {
            let len = buf.len();
            let off = self.begin(comm)?;
            self.write(comm, off, buf)?;
            self.publish(comm, len, readers)?;
            if due {
                fill(acc, len);
                fill(tmp, len);
                for (w, &bw) in base.iter().enumerate() {
                    let t = if w == 0 {
                        &mut acc[..len]
                    } else {
                        &mut tmp[..len]
                    };
                    if w == me {
                        t.copy_from_slice(buf);
                    } else {
                        self.take(comm, w, bw + 1, 0, t)?;
                    }
                    if w > 0 {
                        op.apply(dt, &acc[..len], &mut tmp[..len]);
                        std::mem::swap(acc, tmp);
                    }
                }
                buf.copy_from_slice(&acc[..len]);
            }
            self.advance(0..n, 1);
            return Ok(());
        }
        let c = (self.half / z).max(1) * z;
        let mut k = 0u64;
        for lo in (0..buf.len()).step_by(c) {
            let hi = (lo + c).min(buf.len());
            let pc = pieces(hi - lo, z, n as u32);
            let mine = pc[me].clone();
            // Generation A: the chunk.
            let off = self.begin(comm)?;
            self.write(comm, off, &buf[lo..hi])?;
            self.publish(comm, hi - lo, Who::All)?;
            // Slice `me` over all parts, in rank order.
            let sl = mine.len();
            fill(acc, sl);
            fill(tmp, sl);
            for (w, &bw) in base.iter().enumerate() {
                let t = if w == 0 {
                    &mut acc[..sl]
                } else {
                    &mut tmp[..sl]
                };
                if w == me {
                    t.copy_from_slice(&buf[lo + mine.start..lo + mine.end]);
                } else {
                    self.take(comm, w, bw + 2 * k + 1, mine.start, t)?;
                }
                if w > 0 {
                    op.apply(dt, &acc[..sl], &mut tmp[..sl]);
                    std::mem::swap(acc, tmp);
                }
            }
            // Generation B: this process's reduced slice.
            let off = self.begin(comm)?;
            self.write(comm, off, &acc[..sl])?;
            self.publish(comm, sl, readers)?;
            if due {
                buf[lo + mine.start..lo + mine.end].copy_from_slice(&acc[..sl]);
                let mut items = Vec::with_capacity(n);
                let mut rest = &mut buf[lo..hi];
                for (w, r) in pc.iter().enumerate() {
                    let (now, later) = std::mem::take(&mut rest).split_at_mut(r.len());
                    rest = later;
                    if w != me {
                        let g = base[w] + 2 * k + 2;
                        items.push(Take {
                            w,
                            g,
                            at: 0,
                            out: now,
                        });
                    }
                }
                self.take_each(comm, items, Via::Cache)?;
            }
            k += 1;
        }
        self.advance(0..n, 2 * k);
        Ok(())
    }
}
