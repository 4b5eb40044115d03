//! The "network cache" of the network-cache paper (docs/collectives.md): a segment shared by the job's
//! processes on this host, partitioned equally among them, for collectives.
//!
//! Each process owns one *part*: a data area only it writes, and words that say what is in it.
//! The protocol is write-once / many-readers / completion-before-reuse, counted in
//! *generations* (1, 2, ... per writer):
//!
//! 1. the writer waits until the readers of its previous generation are done with it
//!    ([`NetCache::wait_complete`]), writes its data ([`NetCache::write`]) and publishes it
//!    ([`NetCache::publish`]: the length, then the generation number, with release order);
//! 2. a reader waits for the generation ([`NetCache::wait_published`]), copies straight out
//!    of the writer's part ([`NetCache::read`]) and says it is done
//!    ([`NetCache::complete`]).
//!
//! Broadcast: the root publishes, everyone reads and completes. Allgather: everyone publishes,
//! everyone reads every part. Scatter: the root publishes all pieces; reader `j` reads its
//! own. Gather: everyone publishes; the root reads and completes each part. Alltoall: part
//! `i` holds `n` pieces, reader `j` takes piece `j` of every part. The readers a writer waits
//! for are named per call, so gather-like patterns do not make non-readers acknowledge.
//!
//! [`NetCache::barrier`] is a small barrier among the host's processes on the same segment.
//!
//! # Layout (per process `i`, a block of `stride` bytes; `LINE` = 128)
//!
//! ```text
//! +0              published generation   (written by i)
//! +LINE           published length       (written by i)
//! +2 LINE         barrier arrivals       (written by i)
//! +3 LINE         done[j], j = 0..n      (done[j] written by reader j, one LINE each)
//! +(3 + n) LINE   data, part_bytes rounded up to LINE
//! ```
//!
//! Every word sits on its own 128-byte block, so no two writers share a cache line.
//!
//! # Waiting and trust
//!
//! Waits spin, then yield, then nap briefly (no doorbell: collectives wait on peers that are
//! computing the same collective), call the caller's `check` on every idle round (so a job
//! failure ends them), and give up after a timeout. Lengths read from a peer's part are
//! bounded by the part size before any copy; every copy is bounds-checked; a lying peer can
//! make us read its garbage or wait until the timeout, never touch memory outside the
//! segment.

use std::io;
use std::ptr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::segment::{HostGroup, LINE, Rendezvous, Segment};

const SEGMENT_NAME: &str = "netcache";
const OFF_GEN: usize = 0;
const OFF_LEN: usize = LINE;
const OFF_ARRIVE: usize = 2 * LINE;
const OFF_DONE: usize = 3 * LINE;

/// How long waits spin, yield and give up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WaitSpec {
    /// Busy-spin this long before yielding.
    pub spin: Duration,
    /// Yield this long (after spinning) before napping.
    pub yield_for: Duration,
    /// Nap length once yielding has not helped.
    pub nap: Duration,
    /// Give up after this long (`None`: never).
    pub timeout: Option<Duration>,
}

impl Default for WaitSpec {
    /// Spin 50 us, yield up to 1 ms, then nap 50 us at a time; give up after 60 s.
    fn default() -> WaitSpec {
        WaitSpec {
            spin: Duration::from_micros(50),
            yield_for: Duration::from_millis(1),
            nap: Duration::from_micros(50),
            timeout: Some(Duration::from_secs(60)),
        }
    }
}

/// A segment partitioned among the processes of a host. See the module documentation.
pub struct NetCache {
    seg: Segment,
    n: usize,
    me: usize,
    part_bytes: usize,
    stride: usize,
    /// The generation this process published last.
    published: u64,
    /// Barriers passed.
    epoch: u64,
    pub wait: WaitSpec,
}

impl std::fmt::Debug for NetCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NetCache")
            .field("group", &self.seg.group().ranks)
            .field("part_bytes", &self.part_bytes)
            .field("published", &self.published)
            .finish()
    }
}

fn oob(m: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, m)
}

impl NetCache {
    /// Creates the host's network cache with parts of `part_bytes` each. Collective over the
    /// whole job, like [`Segment::create`] (two rendezvous rounds); every process of a host
    /// must pass the same `part_bytes`.
    pub fn create(
        group: &HostGroup,
        part_bytes: usize,
        rv: &mut dyn Rendezvous,
    ) -> io::Result<NetCache> {
        let n = group.len();
        let stride = (OFF_DONE + n * LINE)
            .checked_add(part_bytes.next_multiple_of(LINE))
            .ok_or_else(|| oob(format!("parts of {part_bytes} bytes are too large")))?;
        let total = stride
            .checked_mul(n)
            .ok_or_else(|| oob(format!("parts of {part_bytes} bytes are too large")))?;
        let (seg, _) = Segment::create(group, SEGMENT_NAME, total, &[], rv)?;
        Ok(NetCache {
            seg,
            n,
            me: group.me,
            part_bytes,
            stride,
            published: 0,
            epoch: 0,
            wait: WaitSpec::default(),
        })
    }

    /// Number of processes (parts).
    pub fn len(&self) -> usize {
        self.n
    }

    /// Never true.
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// This process's part index (its index in the host group).
    pub fn me(&self) -> usize {
        self.me
    }

    /// The host group (part `i` belongs to job rank `group().ranks[i]`).
    pub fn group(&self) -> &HostGroup {
        self.seg.group()
    }

    /// Bytes of each part's data area.
    pub fn part_bytes(&self) -> usize {
        self.part_bytes
    }

    /// The generation this process published last (0: none yet).
    pub fn generation(&self) -> u64 {
        self.published
    }

    fn word(&self, part: usize, off: usize) -> &AtomicU64 {
        debug_assert!(part < self.n);
        self.seg
            .u64_at(part * self.stride + off)
            .expect("layout offsets are in bounds")
    }

    fn data(&self, part: usize) -> *mut u8 {
        let off = part * self.stride + OFF_DONE + self.n * LINE;
        debug_assert!(off + self.part_bytes <= self.seg.data_len());
        // SAFETY: `off` is within the region (the layout's total is the region's length).
        unsafe { self.seg.data().add(off) }
    }

    /// Copies `bytes` into this process's part at `offset`. Only between
    /// [`NetCache::wait_complete`] of the previous generation and the next
    /// [`NetCache::publish`] is this safe from readers (the protocol's duty, not memory
    /// safety: out-of-range writes are refused).
    pub fn write(&mut self, offset: usize, bytes: &[u8]) -> io::Result<()> {
        if offset
            .checked_add(bytes.len())
            .is_none_or(|e| e > self.part_bytes)
        {
            return Err(oob(format!(
                "write of {} bytes at {offset} beyond a part of {}",
                bytes.len(),
                self.part_bytes
            )));
        }
        // SAFETY: in bounds of our own part (checked); only this process writes it.
        unsafe {
            ptr::copy_nonoverlapping(bytes.as_ptr(), self.data(self.me).add(offset), bytes.len())
        };
        Ok(())
    }

    /// Publishes the first `len` bytes of this process's part as the next generation and
    /// returns its number.
    pub fn publish(&mut self, len: usize) -> io::Result<u64> {
        if len > self.part_bytes {
            return Err(oob(format!(
                "publishing {len} bytes of a part of {}",
                self.part_bytes
            )));
        }
        self.published += 1;
        self.word(self.me, OFF_LEN)
            .store(len as u64, Ordering::Relaxed);
        // Release: data and length are visible before the generation that announces them.
        self.word(self.me, OFF_GEN)
            .store(self.published, Ordering::Release);
        Ok(self.published)
    }

    /// Waits until part `writer` has published generation `generation` (or a later one) and
    /// returns the published length (at most the part size, whatever the writer wrote).
    pub fn wait_published(
        &self,
        writer: usize,
        generation: u64,
        check: &mut dyn FnMut() -> io::Result<()>,
    ) -> io::Result<usize> {
        self.part_index(writer)?;
        let w = self.word(writer, OFF_GEN);
        self.wait_for(
            || w.load(Ordering::Acquire) >= generation,
            check,
            || format!("part {writer} to publish generation {generation}"),
        )?;
        let len = self.word(writer, OFF_LEN).load(Ordering::Relaxed);
        Ok((len as usize).min(self.part_bytes))
    }

    /// Copies `out.len()` bytes of part `writer` from `offset` into `out`.
    pub fn read(&self, writer: usize, offset: usize, out: &mut [u8]) -> io::Result<()> {
        self.part_index(writer)?;
        if offset
            .checked_add(out.len())
            .is_none_or(|e| e > self.part_bytes)
        {
            return Err(oob(format!(
                "read of {} bytes at {offset} beyond a part of {}",
                out.len(),
                self.part_bytes
            )));
        }
        // SAFETY: in bounds of part `writer` (checked). The writer may (if it breaks the
        // protocol) write concurrently: that changes only the bytes we copy.
        unsafe {
            ptr::copy_nonoverlapping(self.data(writer).add(offset), out.as_mut_ptr(), out.len())
        };
        Ok(())
    }

    /// The generation part `writer` has published last, without waiting (an acquire load:
    /// the data it announces is visible). A peer's word: any value is possible.
    pub fn published(&self, writer: usize) -> io::Result<u64> {
        self.part_index(writer)?;
        Ok(self.word(writer, OFF_GEN).load(Ordering::Acquire))
    }

    /// The generation of this process's part that `reader` has completed last, without
    /// waiting (acquire: its reads of the part are over). A peer's word: any value.
    pub fn completed(&self, reader: usize) -> io::Result<u64> {
        self.part_index(reader)?;
        Ok(self
            .word(self.me, OFF_DONE + reader * LINE)
            .load(Ordering::Acquire))
    }

    /// Tells `writer` that this process is done with its generation `generation`.
    pub fn complete(&self, writer: usize, generation: u64) -> io::Result<()> {
        self.part_index(writer)?;
        // Release: our reads of the part happen before the writer may reuse it.
        self.word(writer, OFF_DONE + self.me * LINE)
            .store(generation, Ordering::Release);
        Ok(())
    }

    /// Waits until every part index in `readers` has completed this process's generation
    /// `generation` (normally [`NetCache::generation`], before writing the next one). This
    /// process itself may be listed (it is skipped).
    pub fn wait_complete(
        &self,
        readers: &[usize],
        generation: u64,
        check: &mut dyn FnMut() -> io::Result<()>,
    ) -> io::Result<()> {
        for &r in readers {
            self.part_index(r)?;
            if r == self.me {
                continue;
            }
            let w = self.word(self.me, OFF_DONE + r * LINE);
            self.wait_for(
                || w.load(Ordering::Acquire) >= generation,
                check,
                || format!("part {r} to complete generation {generation}"),
            )?;
        }
        Ok(())
    }

    /// Waits until every process of the host has entered the same barrier.
    pub fn barrier(&mut self, check: &mut dyn FnMut() -> io::Result<()>) -> io::Result<()> {
        self.epoch += 1;
        let epoch = self.epoch;
        // Release: what this process wrote before the barrier is visible to those who see
        // the arrival; their Acquire loads below pair with the others' stores.
        self.word(self.me, OFF_ARRIVE)
            .store(epoch, Ordering::Release);
        for j in 0..self.n {
            let w = self.word(j, OFF_ARRIVE);
            self.wait_for(
                || w.load(Ordering::Acquire) >= epoch,
                check,
                || format!("part {j} to reach barrier {epoch}"),
            )?;
        }
        Ok(())
    }

    fn part_index(&self, i: usize) -> io::Result<()> {
        if i < self.n {
            Ok(())
        } else {
            Err(oob(format!("part {i} of {}", self.n)))
        }
    }

    /// Waits until `cond` holds, as [`WaitSpec`] says: polls and spins, then polls once
    /// per yield, then naps; calls `check` between rounds (an error from it ends the wait,
    /// with `what` the wait was for).
    pub fn wait_for(
        &self,
        mut cond: impl FnMut() -> bool,
        check: &mut dyn FnMut() -> io::Result<()>,
        what: impl Fn() -> String,
    ) -> io::Result<()> {
        if cond() {
            return Ok(());
        }
        let start = Instant::now();
        let spec = self.wait;
        // Without a spin budget (more processes than cores) every poll is followed by a
        // yield: the process we wait for may need this core. 64 polls (~1.5 us) before
        // each yield made an oversubscribed barrier twice as slow as one poll (8-11 us
        // against 4-5 us at 4 processes on 2 cores), and a thousand four times slower.
        let polls = if spec.spin.is_zero() { 1 } else { 64 };
        let mut k = 0u32;
        loop {
            for _ in 0..polls {
                if cond() {
                    return Ok(());
                }
                std::hint::spin_loop();
            }
            k = k.wrapping_add(1);
            // While spinning, check the clock and the job only every so often: both cost
            // more than a load. Once yielding, every round: a yield costs more than they do.
            if !k.is_multiple_of(16) && !spec.spin.is_zero() {
                continue;
            }
            check()
                .map_err(|e| io::Error::new(e.kind(), format!("{e} (waiting for {})", what())))?;
            let t = start.elapsed();
            if spec.timeout.is_some_and(|l| t >= l) {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("timed out after {t:?} waiting for {}", what()),
                ));
            }
            if t >= spec.spin + spec.yield_for {
                std::thread::sleep(spec.nap);
            } else if t >= spec.spin {
                std::thread::yield_now();
            }
        }
    }

    /// The raw segment (tests play hostile peers through it).
    #[doc(hidden)]
    pub fn segment(&self) -> &Segment {
        &self.seg
    }

    /// Byte offset of part `i`'s published-length word in the segment's region (tests).
    #[doc(hidden)]
    pub fn len_word_offset(&self, i: usize) -> usize {
        i * self.stride + OFF_LEN
    }
}
