//! A collective as a schedule: rounds of sends and receives, each followed by local steps
//! (copies and reductions) that run once every transfer of the round has completed.
//!
//! The algorithms (`algo`) only build schedules; one engine runs them, blocking
//! ([`Sched::run`]) or a step at a time without blocking ([`Sched::progress`], what the
//! request table calls for a non-blocking collective). So `MPI_Iallreduce` and
//! `MPI_Allreduce` run the same algorithm, and any number of non-blocking collectives can
//! be in flight at once: each is a schedule of its own with its own tag.
//!
//! All data in a schedule is packed bytes (`Datatype::pack`'s form): a buffer is either
//! the user's memory itself (a contiguous type: the packed bytes are the data bytes) or a
//! staging copy, packed when the schedule is built and unpacked into the user's memory
//! when it completes.

use std::os::raw::c_int;
use std::sync::Arc;

use crate::datatype::Datatype;
use crate::error::MPI_ERR_TRUNCATE;
use crate::handle::Raw;
use crate::net::{Net, ReqId};
use crate::op::Op;

/// A buffer of a schedule.
pub type BufId = usize;

/// `len` bytes at `off` in buffer `b`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slice {
    pub b: BufId,
    pub off: usize,
    pub len: usize,
}

impl Slice {
    /// The `len` bytes from `off` within this slice.
    pub fn sub(self, off: usize, len: usize) -> Slice {
        debug_assert!(off + len <= self.len, "{off}+{len} > {}", self.len);
        Slice {
            b: self.b,
            off: self.off + off,
            len,
        }
    }
}

/// The reduction of a reducing collective: operation and element type (and its handle,
/// which a user function is given).
#[derive(Clone)]
pub struct Reduction {
    pub op: Arc<Op>,
    pub dt: Arc<Datatype>,
    pub dth: Raw,
}

impl Reduction {
    /// Bytes of one packed element.
    pub fn esize(&self) -> usize {
        self.dt.size()
    }
}

struct Buf {
    ptr: *mut u8,
    len: usize,
    /// The memory of a staging or scratch buffer (empty for the user's memory). Its heap
    /// block never moves, so `ptr` stays valid while the schedule lives.
    _own: Vec<u8>,
}

enum Xfer {
    Send { peer: u32, s: Slice },
    Recv { peer: u32, s: Slice },
}

enum Local {
    Copy {
        from: Slice,
        to: Slice,
    },
    /// `dst = src op dst` if `src_lower`, else `dst = dst op src`; `count` elements.
    Reduce {
        src: Slice,
        dst: Slice,
        src_lower: bool,
    },
}

#[derive(Default)]
struct Round {
    xfers: Vec<Xfer>,
    after: Vec<Local>,
}

struct Unpack {
    b: BufId,
    ptr: *mut u8,
    count: usize,
    dt: Arc<Datatype>,
}

/// A collective call's schedule and where its execution stands.
pub struct Sched {
    tag: u16,
    bufs: Vec<Buf>,
    rounds: Vec<Round>,
    red: Option<Reduction>,
    unpacks: Vec<Unpack>,
    at: usize,
    posted: bool,
    /// Requests of the current round: id and, for receives, the bytes expected.
    pending: Vec<(ReqId, Option<usize>)>,
    err: Option<c_int>,
    done: bool,
    scratch: Vec<u8>,
}

// SAFETY: the raw pointers are the caller's buffers, which MPI requires to stay valid and
// untouched by the program until the collective completes, and staging memory the
// schedule owns; nothing in a schedule is tied to the thread that built it.
unsafe impl Send for Sched {}

impl Sched {
    /// An empty schedule whose messages carry `tag`.
    pub fn new(tag: u16) -> Sched {
        Sched {
            tag,
            bufs: Vec::new(),
            rounds: vec![Round::default()],
            red: None,
            unpacks: Vec::new(),
            at: 0,
            posted: false,
            pending: Vec::new(),
            err: None,
            done: false,
            scratch: Vec::new(),
        }
    }

    pub fn set_reduction(&mut self, r: Reduction) {
        self.red = Some(r);
    }

    pub fn reduction(&self) -> Option<&Reduction> {
        self.red.as_ref()
    }

    /// The user's memory: `len` bytes at `ptr` (read-only unless the schedule writes to it).
    pub fn user(&mut self, ptr: *mut u8, len: usize) -> Slice {
        self.bufs.push(Buf {
            ptr,
            len,
            _own: Vec::new(),
        });
        Slice {
            b: self.bufs.len() - 1,
            off: 0,
            len,
        }
    }

    /// Scratch memory of `len` bytes.
    pub fn tmp(&mut self, len: usize) -> Slice {
        self.own(vec![0u8; len])
    }

    /// A buffer holding `v`.
    pub fn own(&mut self, mut v: Vec<u8>) -> Slice {
        let len = v.len();
        self.bufs.push(Buf {
            ptr: v.as_mut_ptr(),
            len,
            _own: v,
        });
        Slice {
            b: self.bufs.len() - 1,
            off: 0,
            len,
        }
    }

    /// `count` elements of `dt` at `ptr` as packed bytes: the memory itself if the type
    /// is contiguous, else a staging copy (packed now if `input`, unpacked into `ptr` at
    /// completion if `output`).
    ///
    /// # Safety
    /// `ptr` must hold `count` elements of `dt`, valid until the schedule completes.
    pub unsafe fn region(
        &mut self,
        ptr: *mut u8,
        count: usize,
        dt: &Arc<Datatype>,
        input: bool,
        output: bool,
    ) -> Slice {
        let len = count * dt.size();
        if dt.contiguous() || len == 0 {
            return self.user(ptr.wrapping_offset(dt.true_lb()), len);
        }
        let mut v = Vec::with_capacity(len);
        if input {
            // SAFETY: forwarded contract.
            unsafe { dt.pack(ptr, count, &mut v) };
        } else {
            v.resize(len, 0);
        }
        let s = self.own(v);
        if output {
            self.unpacks.push(Unpack {
                b: s.b,
                ptr,
                count,
                dt: dt.clone(),
            });
        }
        s
    }

    fn cur(&mut self) -> &mut Round {
        self.rounds.last_mut().expect("a schedule has a round")
    }

    pub fn send(&mut self, peer: u32, s: Slice) {
        self.cur().xfers.push(Xfer::Send { peer, s });
    }

    pub fn recv(&mut self, peer: u32, s: Slice) {
        self.cur().xfers.push(Xfer::Recv { peer, s });
    }

    /// After this round's transfers: copies `from` to `to` (same length).
    pub fn copy(&mut self, from: Slice, to: Slice) {
        debug_assert_eq!(from.len, to.len);
        if from != to && from.len > 0 {
            self.cur().after.push(Local::Copy { from, to });
        }
    }

    /// After this round's transfers: `dst = src op dst` (`src_lower`: src holds the values
    /// of lower ranks) or `dst = dst op src`.
    pub fn reduce(&mut self, src: Slice, dst: Slice, src_lower: bool) {
        debug_assert_eq!(src.len, dst.len);
        if src.len > 0 {
            self.cur().after.push(Local::Reduce {
                src,
                dst,
                src_lower,
            });
        }
    }

    /// Ends the current round; what follows waits for its transfers and local steps.
    pub fn end_round(&mut self) {
        let r = self.cur();
        if !r.xfers.is_empty() || !r.after.is_empty() {
            self.rounds.push(Round::default());
        }
    }

    /// Rounds with transfers (for tests: the algorithm's step count).
    pub fn steps(&self) -> usize {
        self.rounds.iter().filter(|r| !r.xfers.is_empty()).count()
    }

    fn ptr(&self, s: Slice) -> *mut u8 {
        let b = &self.bufs[s.b];
        debug_assert!(s.off + s.len <= b.len, "{s:?} outside {} bytes", b.len);
        b.ptr.wrapping_add(s.off)
    }

    fn post<N: Net + ?Sized>(&mut self, net: &N) {
        let round = std::mem::take(&mut self.rounds[self.at].xfers);
        // Receives first, so data arriving meanwhile lands in place.
        for pass in 0..2 {
            for x in &round {
                let r = match (pass, x) {
                    // SAFETY: the slice lies in a buffer valid until the schedule
                    // completes, which waits for every posted request.
                    (0, Xfer::Recv { peer, s }) => unsafe {
                        net.irecv(*peer, self.tag, self.ptr(*s), s.len)
                            .map(|id| (id, Some(s.len)))
                    },
                    // SAFETY: as above; no local step writes a buffer while a round's
                    // transfers are in flight.
                    (1, Xfer::Send { peer, s }) => unsafe {
                        net.isend(*peer, self.tag, self.ptr(*s), s.len)
                            .map(|id| (id, None))
                    },
                    _ => continue,
                };
                match r {
                    Ok(p) => self.pending.push(p),
                    Err(e) => {
                        self.err.get_or_insert(e);
                        return;
                    }
                }
            }
        }
        self.rounds[self.at].xfers = round;
    }

    fn run_locals(&mut self) -> Result<(), c_int> {
        let after = std::mem::take(&mut self.rounds[self.at].after);
        for l in &after {
            match *l {
                Local::Copy { from, to } => {
                    // SAFETY: both slices lie in live buffers; `copy` (memmove) allows
                    // overlap.
                    unsafe { std::ptr::copy(self.ptr(from), self.ptr(to), from.len) };
                }
                Local::Reduce {
                    src,
                    dst,
                    src_lower,
                } => self.reduce_now(src, dst, src_lower)?,
            }
        }
        Ok(())
    }

    fn reduce_now(&mut self, src: Slice, dst: Slice, src_lower: bool) -> Result<(), c_int> {
        let Some(r) = self.red.clone() else {
            return Ok(());
        };
        let count = src.len / r.esize();
        let (s, d) = (self.ptr(src), self.ptr(dst));
        if src_lower || r.op.commutative() {
            // SAFETY: both slices hold `count` packed elements, in different buffers or
            // disjoint parts of one.
            return unsafe { r.op.apply_packed(s, d, count, &r.dt, r.dth) };
        }
        // dst = dst op src: the result forms in a copy of src (which may be the user's
        // input, never written), then replaces dst.
        self.scratch.clear();
        // SAFETY: src is valid for src.len bytes.
        self.scratch
            .extend_from_slice(unsafe { std::slice::from_raw_parts(s, src.len) });
        // SAFETY: as above; the scratch holds `count` packed elements.
        unsafe {
            r.op.apply_packed(d, self.scratch.as_mut_ptr(), count, &r.dt, r.dth)?;
            std::ptr::copy_nonoverlapping(self.scratch.as_ptr(), d, src.len);
        }
        Ok(())
    }

    fn finish(&mut self) {
        for u in &self.unpacks {
            let b = &self.bufs[u.b];
            // SAFETY: the staging buffer holds `count` packed elements; `ptr` is the
            // user's buffer of `count` elements.
            unsafe {
                u.dt.unpack(std::slice::from_raw_parts(b.ptr, b.len), u.ptr, u.count)
            };
        }
    }

    /// Moves the schedule on: with `block`, until it completes; without, as far as it
    /// can without waiting. `Some(result)` once complete.
    pub fn progress<N: Net + ?Sized>(&mut self, net: &N, block: bool) -> Option<Result<(), c_int>> {
        loop {
            if self.done {
                return Some(self.err.map_or(Ok(()), Err));
            }
            if self.at == self.rounds.len() {
                self.finish();
                self.done = true;
                continue;
            }
            if !self.posted {
                self.post(net);
                self.posted = true;
            }
            let mut i = 0;
            while i < self.pending.len() {
                let (id, want) = self.pending[i];
                let r = if block {
                    Some(net.wait(id))
                } else {
                    net.test(id)
                };
                let Some(r) = r else {
                    i += 1;
                    continue;
                };
                self.pending.swap_remove(i);
                let r = match (r, want) {
                    (Ok(n), Some(w)) if n != w => Err(MPI_ERR_TRUNCATE),
                    (r, _) => r.map(|_| ()),
                };
                if let Err(e) = r {
                    self.err.get_or_insert(e);
                }
            }
            if !self.pending.is_empty() {
                return None;
            }
            if self.err.is_some() {
                self.done = true;
                continue;
            }
            if let Err(e) = self.run_locals() {
                self.err = Some(e);
                self.done = true;
                continue;
            }
            self.at += 1;
            self.posted = false;
        }
    }

    /// Whether the schedule has completed (its outcome is final).
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// Runs the schedule to completion.
    pub fn run<N: Net + ?Sized>(&mut self, net: &N) -> Result<(), c_int> {
        loop {
            if let Some(r) = self.progress(net, true) {
                return r;
            }
        }
    }
}
