//! One-sided communication (`MPI_Win_*`, `MPI_Put`, `MPI_Get`, `MPI_Accumulate`, ...), built
//! as BSP's DRMA is (`bsp_put`/`bsp_get` into registered memory, delivered by the target):
//! an origin's operations travel as point-to-point messages in the window's own context
//! (a duplicate of the window's communicator), and the target applies them.
//!
//! **Who applies them**: each window has a service thread at its target, blocked in a
//! receive of the window's request tag (the p2p layer's progress thread moves the bytes;
//! the service thread copies them into the window). The target therefore progresses
//! without calling MPI, which passive target (`MPI_Win_lock`) needs, and every
//! accumulate to one target goes through one thread: accumulates are atomic per element
//! with respect to each other, as MPI asks. The memory model is `MPI_WIN_UNIFIED`.
//!
//! **Completion**: messages of one origin to one target arrive in order, so a marker sent
//! after an origin's operations means they have all been applied when the target sees it:
//! - `MPI_Win_fence`: every process sends a fence marker to every process and waits for
//!   the markers of all (its window is then complete) and for the replies to its own gets,
//!   then says so to all and waits until all have: when a fence returns, every window
//!   is complete, as after a barrier (2(p-1) small messages per process);
//! - `MPI_Win_flush`/`MPI_Win_unlock`: the origin sends a flush (unlock) message and waits
//!   for the target's acknowledgement, which follows the replies to its gets;
//! - `MPI_Win_lock`: the target's service thread grants locks in request order (shared
//!   ones together); the origin waits for the grant;
//! - `MPI_Win_post`/`start`/`complete`/`wait`: a post is a message to each origin, which
//!   `MPI_Win_start` waits for; `MPI_Win_complete` sends a marker after the operations,
//!   which `MPI_Win_wait` waits for.
//!
//! **Kinds of window**: dynamic windows (`MPI_Win_create_dynamic`) check each operation
//! against the regions attached at the target when it arrives (the origin cannot know
//! them; the target's next synchronisation call reports a miss). Shared-memory windows
//! (`MPI_Win_allocate_shared`) are one file in `/dev/shm` that every process maps; loads
//! and stores reach the peers' segments directly, and the RMA calls work on them as on
//! any window.
//!
//! **Requests**: `MPI_Rput`, `MPI_Rget`, `MPI_Raccumulate` and `MPI_Rget_accumulate` are
//! requests of core's table: a put is complete at once (its data is in the message), a
//! get once its reply has arrived (polled by `MPI_Test`).
//!
//! **Errors** go through the window's communicator's handler (`MPI_ERRORS_ARE_FATAL`
//! unless `MPI_Win_set_errhandler` says otherwise); a handler made by
//! `MPI_Win_create_errhandler` is called with that communicator's handle.
//!
//! Limits: one thread per window; an operation is one message (its target type's runs
//! and its data); accumulate takes the predefined operations only, as the standard says.

use std::collections::{HashMap, VecDeque};
use std::ffi::{CStr, c_char};
use std::os::raw::c_int;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

use bulkwire_p2p::{Comm, Source, Tag};

use crate::datatype::{self, Datatype};
use crate::error::*;
use crate::handle::{Kind, Raw, Table};

mod capi;
#[cfg(test)]
mod tests;

pub use capi::*;

pub const MPI_WIN_NULL: Raw = 0x110;
pub const MPI_LOCK_EXCLUSIVE: c_int = 301;
pub const MPI_LOCK_SHARED: c_int = 302;
pub const MPI_WIN_FLAVOR_CREATE: c_int = 311;
pub const MPI_WIN_FLAVOR_ALLOCATE: c_int = 312;
pub const MPI_WIN_FLAVOR_DYNAMIC: c_int = 313;
pub const MPI_WIN_FLAVOR_SHARED: c_int = 314;
pub const MPI_WIN_UNIFIED: c_int = 321;
pub const MPI_MODE_NOSUCCEED: c_int = 16384;
pub const MPI_PROC_NULL: c_int = -3;
pub const MPI_REPLACE: Raw = 0x3c;
pub const MPI_NO_OP: Raw = 0x3d;

/// Message kinds. Requests go to the target's service thread, replies to the origin.
mod msg {
    pub const PUT: u8 = 1;
    pub const ACC: u8 = 2;
    pub const GET: u8 = 3;
    pub const GET_ACC: u8 = 4;
    pub const CAS: u8 = 5;
    pub const LOCK: u8 = 6;
    pub const UNLOCK: u8 = 7;
    pub const FLUSH: u8 = 8;
    pub const FENCE: u8 = 9;
    pub const FREE: u8 = 10;
    pub const STOP: u8 = 11;
    pub const COMPLETE: u8 = 12;

    pub const DATA: u8 = 20;
    pub const LOCKED: u8 = 21;
    pub const UNLOCKED: u8 = 22;
    pub const FLUSHED: u8 = 23;
    pub const INFO: u8 = 24;
    pub const POSTED: u8 = 25;
}

/// A message: a kind byte, then 8-byte words, then bytes.
struct Writer(Vec<u8>);

impl Writer {
    fn new(kind: u8) -> Writer {
        Writer(vec![kind])
    }
    fn u64(mut self, v: u64) -> Writer {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn runs(mut self, runs: &[(u64, u64)]) -> Writer {
        self = self.u64(runs.len() as u64);
        for &(o, n) in runs {
            self = self.u64(o).u64(n);
        }
        self
    }
    fn bytes(mut self, b: &[u8]) -> Writer {
        self.0.extend_from_slice(b);
        self
    }
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn u64(&mut self) -> Option<u64> {
        let (w, rest) = self.0.split_first_chunk::<8>()?;
        self.0 = rest;
        Some(u64::from_le_bytes(*w))
    }
    fn runs(&mut self) -> Option<Vec<(u64, u64)>> {
        let n = self.u64()? as usize;
        if n > self.0.len() / 16 {
            return None;
        }
        (0..n).map(|_| Some((self.u64()?, self.u64()?))).collect()
    }
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let (a, b) = self.0.split_at_checked(n)?;
        self.0 = b;
        Some(a)
    }
    fn rest(self) -> &'a [u8] {
        self.0
    }
}

/// Where the window's messages go: the job's p2p communicator, the window's processes
/// (world ranks in window order) and its two tags.
pub struct Channel {
    pub p2p: &'static Comm,
    pub ranks: Vec<u32>,
    pub me: u32,
    /// The context of the window's own communicator: requests go with user tag 0 in it,
    /// replies with user tag 1.
    pub ctx: u16,
}

impl Channel {
    fn req_tag(&self) -> i32 {
        (self.ctx as i32) << 16
    }
    fn rep_tag(&self) -> i32 {
        ((self.ctx as i32) << 16) | 1
    }
    fn size(&self) -> u32 {
        self.ranks.len() as u32
    }
    fn send(&self, to: u32, tag: i32, m: Writer) -> Result<(), c_int> {
        // The request finishes in the background; a failure of the job shows in the
        // next wait.
        self.p2p
            .isend(self.ranks[to as usize], tag, m.0)
            .map(drop)
            .map_err(|_| MPI_ERR_OTHER)
    }
}

/// The target's side: the window's memory and what its service thread has seen.
struct Target {
    ch: Channel,
    window_rank: HashMap<u32, u32>,
    base: usize,
    size: usize,
    /// A dynamic window: displacements are addresses, valid inside attached regions.
    dynamic: bool,
    regions: Mutex<Vec<(usize, usize)>>,
    st: Mutex<TargetState>,
    cv: Condvar,
}

#[derive(Default)]
struct TargetState {
    /// Fence markers received, by 2 * fence number + phase.
    fences: HashMap<u64, u32>,
    frees: u32,
    /// Ends of access epochs (`MPI_Win_complete`) received, by origin.
    completes: HashMap<u32, u32>,
    exclusive: Option<u32>,
    shared: u32,
    waiting: VecDeque<(u32, bool)>,
    /// Fence markers received from each origin: the fence epoch its next request is in.
    marks: HashMap<u32, u64>,
    /// Requests the service thread could not apply (outside a dynamic window's attached
    /// memory, a bad op), with the origin's fence epoch: reported by the target's
    /// synchronisation call that ends that epoch (or by any other).
    errors: Vec<(u64, c_int, String)>,
    /// The service thread's receive failed (the job failed).
    dead: bool,
}

impl Target {
    /// The window's bytes at `runs`, checked against its size.
    fn check(&self, runs: &[(u64, u64)]) -> bool {
        if self.dynamic {
            // Adjacent attachments make one stretch of memory: an operation may span them
            // (MPICH's win_dynamic_rma_flush_get writes across two).
            let mut spans: Vec<(u64, u64)> = self
                .regions
                .lock()
                .unwrap()
                .iter()
                .map(|&(a, len)| (a as u64, (a + len) as u64))
                .collect();
            spans.sort_unstable();
            let mut merged: Vec<(u64, u64)> = Vec::with_capacity(spans.len());
            for (a, e) in spans {
                match merged.last_mut() {
                    Some(last) if a <= last.1 => last.1 = last.1.max(e),
                    _ => merged.push((a, e)),
                }
            }
            return runs.iter().all(|&(o, n)| {
                o.checked_add(n)
                    .is_some_and(|end| merged.iter().any(|&(a, e)| o >= a && end <= e))
            });
        }
        runs.iter()
            .all(|&(o, n)| o.checked_add(n).is_some_and(|e| e <= self.size as u64))
    }

    fn gather(&self, runs: &[(u64, u64)]) -> Vec<u8> {
        let mut v = Vec::with_capacity(runs.iter().map(|r| r.1 as usize).sum());
        for &(o, n) in runs {
            // SAFETY: checked inside the window, whose memory lives until its service
            // thread is stopped; concurrent access by the target's own code is the
            // program's to synchronise (MPI's rules for the unified model).
            v.extend_from_slice(unsafe {
                std::slice::from_raw_parts((self.base + o as usize) as *const u8, n as usize)
            });
        }
        v
    }

    fn scatter(&self, runs: &[(u64, u64)], mut data: &[u8]) {
        for &(o, n) in runs {
            let n = (n as usize).min(data.len());
            // SAFETY: as in `gather`.
            unsafe {
                std::ptr::copy_nonoverlapping(data.as_ptr(), (self.base + o as usize) as *mut u8, n)
            };
            data = &data[n..];
        }
    }

    fn fail(&self, from: u32, code: c_int, what: String) {
        let mut st = self.st.lock().unwrap();
        let e = st.marks.get(&from).copied().unwrap_or(0);
        st.errors.push((e, code, what));
    }

    fn reply(&self, to: u32, m: Writer) {
        let _ = self.ch.send(to, self.ch.rep_tag(), m);
    }

    fn grant(&self, st: &mut TargetState) {
        while let Some(&(from, excl)) = st.waiting.front() {
            let free = st.exclusive.is_none() && (!excl || st.shared == 0);
            if !free {
                break;
            }
            st.waiting.pop_front();
            if excl {
                st.exclusive = Some(from);
            } else {
                st.shared += 1;
            }
            self.reply(from, Writer::new(msg::LOCKED));
        }
    }

    /// Applies one request; false to stop.
    fn serve(&self, from: u32, m: &[u8]) -> bool {
        let Some((&kind, body)) = m.split_first() else {
            return true;
        };
        let mut r = Reader(body);
        match kind {
            msg::PUT => {
                let Some(runs) = r.runs() else { return true };
                if !self.check(&runs) {
                    self.fail(
                        from,
                        MPI_ERR_RMA_RANGE,
                        format!(
                            "MPI_Put: rank {from} wrote outside the window of {} bytes",
                            self.size
                        ),
                    );
                    return true;
                }
                self.scatter(&runs, r.rest());
            }
            msg::GET => {
                let (Some(id), Some(runs)) = (r.u64(), r.runs()) else {
                    return true;
                };
                let data = if self.check(&runs) {
                    self.gather(&runs)
                } else {
                    Vec::new()
                };
                self.reply(from, Writer::new(msg::DATA).u64(id).bytes(&data));
            }
            msg::ACC | msg::GET_ACC => {
                let id = if kind == msg::GET_ACC {
                    r.u64()
                } else {
                    Some(0)
                };
                let (Some(id), Some(op), Some(ty), Some(runs)) = (id, r.u64(), r.u64(), r.runs())
                else {
                    return true;
                };
                let mut old = Vec::new();
                if self.check(&runs) {
                    let mut cur = self.gather(&runs);
                    if kind == msg::GET_ACC {
                        old = cur.clone();
                    }
                    match datatype::lookup(ty as Raw)
                        .and_then(|t| ops::apply(op as Raw, &t, r.rest(), &mut cur))
                    {
                        Ok(()) => self.scatter(&runs, &cur),
                        Err(code) => self.fail(
                            from,
                            code,
                            format!("MPI_Accumulate: the operation {op:#x} does not apply to the type {ty:#x}"),
                        ),
                    }
                } else {
                    self.fail(
                        from,
                        MPI_ERR_RMA_RANGE,
                        format!(
                            "MPI_Accumulate: rank {from} reached outside the window of {} bytes",
                            self.size
                        ),
                    );
                }
                if kind == msg::GET_ACC {
                    self.reply(from, Writer::new(msg::DATA).u64(id).bytes(&old));
                }
            }
            msg::CAS => {
                let (Some(id), Some(off), Some(n)) = (r.u64(), r.u64(), r.u64()) else {
                    return true;
                };
                let (Some(cmp), Some(new)) = (r.take(n as usize), r.take(n as usize)) else {
                    return true;
                };
                let runs = [(off, n)];
                let old = if self.check(&runs) {
                    let old = self.gather(&runs);
                    if old == cmp {
                        self.scatter(&runs, new);
                    }
                    old
                } else {
                    Vec::new()
                };
                self.reply(from, Writer::new(msg::DATA).u64(id).bytes(&old));
            }
            msg::LOCK => {
                let excl = r.u64() == Some(1);
                let mut st = self.st.lock().unwrap();
                st.waiting.push_back((from, excl));
                self.grant(&mut st);
            }
            msg::UNLOCK => {
                let mut st = self.st.lock().unwrap();
                if st.exclusive == Some(from) {
                    st.exclusive = None;
                } else {
                    st.shared = st.shared.saturating_sub(1);
                }
                // Everything this origin sent before has been applied: acknowledge, then
                // let the next in line in.
                self.reply(from, Writer::new(msg::UNLOCKED));
                self.grant(&mut st);
            }
            msg::FLUSH => self.reply(from, Writer::new(msg::FLUSHED)),
            msg::FENCE => {
                // Word: 2 * fence number + phase (1: that process's window is complete).
                let Some(e) = r.u64() else { return true };
                let mut st = self.st.lock().unwrap();
                *st.fences.entry(e).or_default() += 1;
                if e % 2 == 0 {
                    *st.marks.entry(from).or_default() += 1;
                }
                drop(st);
                self.cv.notify_all();
            }
            msg::FREE => {
                self.st.lock().unwrap().frees += 1;
                self.cv.notify_all();
            }
            msg::COMPLETE => {
                *self.st.lock().unwrap().completes.entry(from).or_default() += 1;
                self.cv.notify_all();
            }
            msg::STOP => return false,
            _ => {}
        }
        true
    }

    fn run(self: Arc<Target>) {
        loop {
            let got = self
                .ch
                .p2p
                .recv_vec(Source::Any, Tag::Is(self.ch.req_tag()), usize::MAX);
            let Ok((m, st)) = got else {
                self.st.lock().unwrap().dead = true;
                self.cv.notify_all();
                return;
            };
            let Some(&from) = self.window_rank.get(&st.source) else {
                continue;
            };
            if !self.serve(from, &m) {
                return;
            }
        }
    }

    /// Waits until `done` holds of the service thread's state.
    fn wait(&self, mut done: impl FnMut(&mut TargetState) -> bool) -> Result<(), c_int> {
        let mut st = self.st.lock().unwrap();
        loop {
            if done(&mut st) {
                return Ok(());
            }
            if st.dead {
                return Err(MPI_ERR_OTHER);
            }
            st = self.cv.wait(st).unwrap();
        }
    }
}

/// A get (or a fetching operation) whose data has not come back.
struct Pending {
    ptr: usize,
    count: usize,
    dt: Arc<Datatype>,
}

/// The origin's side: what it waits for.
struct Origin {
    next_id: u64,
    pending: HashMap<u64, Pending>,
    granted: Vec<bool>,
    /// Acknowledgements owed by each target (flushes and unlocks sent, not yet answered).
    owed: Vec<u32>,
    info: Vec<Option<(u64, i64)>>,
    fence: u64,
    /// An access epoch of fences is open (a fence was called, not with NOSUCCEED).
    fenced: bool,
    /// An operation was issued in the open fence epoch. A fence epoch without any
    /// may be followed by `MPI_Win_lock` (MPI-3.1 11.5: a fence starts an epoch only
    /// if RMA calls follow it), which ends it.
    fence_ops: bool,
    /// Exposure epochs opened by each target for this process (`MPI_Win_post`), not yet
    /// started.
    posted: Vec<u32>,
    /// The targets of the open access epoch of `MPI_Win_start`.
    started: Option<Vec<u32>>,
    /// The origins of the open exposure epoch of `MPI_Win_post`.
    exposed: Option<Vec<u32>>,
    /// The lock held at each target (true: exclusive).
    locked: Vec<Option<bool>>,
    lock_all: bool,
}

/// An MPI window.
pub struct Window {
    target: Arc<Target>,
    origin: Mutex<Origin>,
    /// (size, disp_unit) of every process's window.
    remote: Vec<(u64, i64)>,
    service: Mutex<Option<JoinHandle<()>>>,
    /// Memory the window allocated, freed with it.
    owned: Option<Memory>,
    /// The window's communicator (a duplicate), freed with it.
    pub comm: Raw,
    // The values the predefined attributes point to.
    attr_size: isize,
    attr_disp: c_int,
    attr_flavor: c_int,
    attr_model: c_int,
    name: Mutex<String>,
}

/// Memory a window allocated.
pub enum Memory {
    /// `MPI_Win_allocate`: from the allocator.
    Heap(usize, std::alloc::Layout),
    /// `MPI_Win_allocate_shared`: a mapping of a file in `/dev/shm` shared by the
    /// window's processes, of `len` bytes at `addr` here; every process's segment as
    /// (offset, size, displacement unit).
    Map {
        addr: usize,
        len: usize,
        segs: Vec<(usize, usize, c_int)>,
    },
}

impl Drop for Window {
    fn drop(&mut self) {
        // The service thread that wrote into the memory has been joined (`free`) or
        // never started.
        match self.owned.take() {
            // SAFETY: allocated with this layout by `MPI_Win_allocate`.
            Some(Memory::Heap(p, l)) => unsafe { std::alloc::dealloc(p as *mut u8, l) },
            Some(Memory::Map { addr, len, .. }) => {
                // SAFETY: mapped by `allocate_shared` with this length.
                unsafe { libc::munmap(addr as *mut libc::c_void, len) };
            }
            None => {}
        }
    }
}

fn rma_err(what: impl Into<String>) -> (c_int, String) {
    (MPI_ERR_RMA_SYNC, what.into())
}

/// An error code and the line that explains it.
pub type Failure = (c_int, String);

impl Window {
    /// Collective over the channel's processes: a window of `size` bytes at `base`.
    /// `owned`: memory the window frees. `comm`: the window's communicator handle.
    pub fn create(
        ch: Channel,
        base: usize,
        size: usize,
        disp_unit: c_int,
        flavor: c_int,
        owned: Option<Memory>,
        comm: Raw,
    ) -> Result<Arc<Window>, Failure> {
        let p = ch.size();
        let window_rank = ch
            .ranks
            .iter()
            .enumerate()
            .map(|(i, &w)| (w, i as u32))
            .collect();
        let dynamic = flavor == MPI_WIN_FLAVOR_DYNAMIC;
        let target = Arc::new(Target {
            ch,
            window_rank,
            base,
            size,
            dynamic,
            regions: Mutex::new(Vec::new()),
            st: Mutex::new(TargetState::default()),
            cv: Condvar::new(),
        });
        let mut w = Window {
            target: target.clone(),
            origin: Mutex::new(Origin {
                next_id: 1,
                pending: HashMap::new(),
                granted: vec![false; p as usize],
                owed: vec![0; p as usize],
                info: vec![None; p as usize],
                fence: 0,
                fenced: false,
                fence_ops: false,
                posted: vec![0; p as usize],
                started: None,
                exposed: None,
                locked: vec![None; p as usize],
                lock_all: false,
            }),
            remote: Vec::new(),
            service: Mutex::new(None),
            owned,
            comm,
            attr_size: if dynamic { 0 } else { size as isize },
            attr_disp: disp_unit,
            attr_flavor: flavor,
            attr_model: MPI_WIN_UNIFIED,
            name: Mutex::new(String::new()),
        };
        // Everyone learns everyone's size and displacement unit (an origin scales by the
        // target's unit and checks the target's bounds). Replies travel on the reply tag,
        // which nothing else uses before this process sends a request.
        let ch = &target.ch;
        for r in 0..p {
            ch.send(
                r,
                ch.rep_tag(),
                Writer::new(msg::INFO)
                    .u64(size as u64)
                    .u64(disp_unit as i64 as u64),
            )
            .map_err(|c| {
                (
                    c,
                    "MPI_Win_create: sending the window's size failed".to_string(),
                )
            })?;
        }
        w.wait_replies(|o| o.info.iter().all(Option::is_some))?;
        w.remote = w
            .origin
            .get_mut()
            .unwrap()
            .info
            .iter()
            .map(|i| i.unwrap())
            .collect();
        let t = target.clone();
        let h = std::thread::Builder::new()
            .name("bulkwire-rma".into())
            .spawn(move || t.run())
            .map_err(|e| {
                (
                    MPI_ERR_NO_MEM,
                    format!("MPI_Win_create: no service thread: {e}"),
                )
            })?;
        *w.service.get_mut().unwrap() = Some(h);
        Ok(Arc::new(w))
    }

    /// `MPI_Win_shared_query`: the segment of window rank `rank` (`None`: the first
    /// non-empty one) as (address here, size, displacement unit).
    pub fn shared_segment(&self, rank: Option<u32>) -> Result<(usize, usize, c_int), Failure> {
        let Some(Memory::Map { addr, segs, .. }) = &self.owned else {
            // No process's memory of another flavor is mapped here: no segment, as MPI-4.0
            // answers for such windows (MPI-3.1 left the call to shared windows).
            return Ok((0, 0, 1));
        };
        let seg = match rank {
            Some(r) => segs.get(r as usize).copied().ok_or((
                MPI_ERR_RANK,
                format!("MPI_Win_shared_query: rank {r} is outside the window's group"),
            ))?,
            None => segs.iter().copied().find(|s| s.1 > 0).unwrap_or((
                0,
                0,
                segs.first().map_or(1, |s| s.2),
            )),
        };
        // An empty segment has no address (NULL), as MPICH's tests expect.
        let base = if seg.1 == 0 { 0 } else { addr + seg.0 };
        Ok((base, seg.1, seg.2))
    }

    pub fn base(&self) -> usize {
        self.target.base
    }
    pub fn size(&self) -> usize {
        self.target.size
    }
    pub fn ranks(&self) -> &[u32] {
        &self.target.ch.ranks
    }
    fn ch(&self) -> &Channel {
        &self.target.ch
    }
    pub fn set_name(&self, s: &str) {
        *self.name.lock().unwrap() = s.to_string();
    }
    pub fn name(&self) -> String {
        self.name.lock().unwrap().clone()
    }

    /// Receives replies until `done` holds of the origin's state.
    fn wait_replies(&self, mut done: impl FnMut(&mut Origin) -> bool) -> Result<(), Failure> {
        let ch = self.ch();
        loop {
            {
                let mut o = self.origin.lock().unwrap();
                if done(&mut o) {
                    return Ok(());
                }
            }
            let (m, st) = ch
                .p2p
                .recv_vec(Source::Any, Tag::Is(ch.rep_tag()), usize::MAX)
                .map_err(|e| {
                    (
                        MPI_ERR_OTHER,
                        format!("waiting for a window's replies: {e}"),
                    )
                })?;
            let Some(&from) = self.target.window_rank.get(&st.source) else {
                continue;
            };
            self.on_reply(from, &m);
        }
    }

    fn on_reply(&self, from: u32, m: &[u8]) {
        let Some((&kind, body)) = m.split_first() else {
            return;
        };
        let mut r = Reader(body);
        let mut o = self.origin.lock().unwrap();
        match kind {
            msg::DATA => {
                let Some(id) = r.u64() else { return };
                if let Some(p) = o.pending.remove(&id) {
                    // SAFETY: the origin buffer of a get stays valid and untouched until
                    // the call that completes it (this one) returns, as MPI requires.
                    unsafe { p.dt.unpack(r.rest(), p.ptr as *mut u8, p.count) };
                }
            }
            msg::LOCKED => o.granted[from as usize] = true,
            msg::UNLOCKED | msg::FLUSHED => {
                o.owed[from as usize] = o.owed[from as usize].saturating_sub(1);
            }
            msg::POSTED => o.posted[from as usize] += 1,
            msg::INFO => {
                let (Some(s), Some(d)) = (r.u64(), r.u64()) else {
                    return;
                };
                o.info[from as usize] = Some((s, d as i64));
            }
            _ => {}
        }
    }

    /// A request the service thread could not apply, once: of the fence epochs up to
    /// `epoch` (`u64::MAX`: any).
    fn take_error_upto(&self, epoch: u64) -> Result<(), Failure> {
        let mut st = self.target.st.lock().unwrap();
        match st.errors.iter().position(|e| e.0 <= epoch) {
            Some(i) => {
                let (_, c, w) = st.errors.remove(i);
                st.errors.retain(|e| e.0 > epoch);
                Err((c, w))
            }
            None => Ok(()),
        }
    }

    fn take_error(&self) -> Result<(), Failure> {
        self.take_error_upto(u64::MAX)
    }

    /// The target's bytes for `count` elements of `dt` at displacement `disp`: absolute
    /// runs in its window, checked against its size.
    fn target_runs(
        &self,
        call: &str,
        target: u32,
        disp: isize,
        count: usize,
        dt: &Datatype,
    ) -> Result<Vec<(u64, u64)>, Failure> {
        let (tsize, unit) = self.remote[target as usize];
        let at = (disp as i128) * (unit as i128);
        let mut runs = Vec::new();
        let mut bad = false;
        dt.for_each_run(count, |off, len| {
            let o = at + off as i128;
            if o < 0 || o + len as i128 > tsize as i128 {
                bad = true;
            }
            runs.push((o as u64, len as u64));
        });
        if bad {
            return Err((
                MPI_ERR_RMA_RANGE,
                format!(
                    "{call}: the target data (displacement {disp}, unit {unit}, {count} elements) lies outside rank {target}'s window of {tsize} bytes"
                ),
            ));
        }
        Ok(runs)
    }

    fn check_epoch(&self, call: &str, target: u32) -> Result<(), Failure> {
        let mut o = self.origin.lock().unwrap();
        let started = o.started.as_ref().is_some_and(|g| g.contains(&target));
        if started || o.lock_all || o.locked[target as usize].is_some() {
            Ok(())
        } else if o.fenced {
            o.fence_ops = true;
            Ok(())
        } else {
            Err(rma_err(format!(
                "{call}: no access epoch to rank {target} is open (call MPI_Win_fence or MPI_Win_lock first)"
            )))
        }
    }

    fn check_rank(&self, call: &str, target: c_int) -> Result<Option<u32>, Failure> {
        if target == MPI_PROC_NULL {
            return Ok(None);
        }
        let p = self.ch().size();
        if target < 0 || target as u32 >= p {
            return Err((
                MPI_ERR_RANK,
                format!("{call}: target rank {target} is outside the window's group (size {p})"),
            ));
        }
        Ok(Some(target as u32))
    }

    /// `MPI_Put` (and `MPI_Accumulate` with `op`, a predefined value type `basic`).
    ///
    /// # Safety
    /// `origin` holds `ocount` elements of `odt`.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn put(
        &self,
        call: &str,
        origin: *const u8,
        ocount: usize,
        odt: &Datatype,
        target: c_int,
        disp: isize,
        tcount: usize,
        tdt: &Datatype,
        acc: Option<(Raw, Raw)>,
    ) -> Result<(), Failure> {
        let Some(t) = self.check_rank(call, target)? else {
            return Ok(());
        };
        self.check_epoch(call, t)?;
        if ocount * odt.size() != tcount * tdt.size() {
            return Err((
                MPI_ERR_TYPE,
                format!(
                    "{call}: the origin has {} bytes of data, the target {}",
                    ocount * odt.size(),
                    tcount * tdt.size()
                ),
            ));
        }
        let runs = self.target_runs(call, t, disp, tcount, tdt)?;
        let mut m = match acc {
            None => Writer::new(msg::PUT),
            Some((op, ty)) => Writer::new(msg::ACC).u64(op as u64).u64(ty as u64),
        }
        .runs(&runs);
        // SAFETY: forwarded from the caller.
        unsafe { odt.pack(origin, ocount, &mut m.0) };
        let ch = self.ch();
        ch.send(t, ch.req_tag(), m)
            .map_err(|c| (c, format!("{call}: sending to rank {t} failed")))
    }

    /// `MPI_Get`, and the fetching operations: `MPI_Get_accumulate` (`acc`: op, type and
    /// the origin's packed data) and `MPI_Compare_and_swap` (`cas`: compare and new bytes).
    ///
    /// # Safety
    /// `result` is writable for `rcount` elements of `rdt` until the operation completes.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn get(
        &self,
        call: &str,
        result: *mut u8,
        rcount: usize,
        rdt: &Arc<Datatype>,
        target: c_int,
        disp: isize,
        tcount: usize,
        tdt: &Datatype,
        acc: Option<(Raw, Raw, Vec<u8>)>,
        cas: Option<(Vec<u8>, Vec<u8>)>,
    ) -> Result<u64, Failure> {
        let Some(t) = self.check_rank(call, target)? else {
            return Ok(0);
        };
        self.check_epoch(call, t)?;
        if rcount * rdt.size() != tcount * tdt.size() {
            return Err((
                MPI_ERR_TYPE,
                format!(
                    "{call}: the result buffer has {} bytes, the target data {}",
                    rcount * rdt.size(),
                    tcount * tdt.size()
                ),
            ));
        }
        let runs = self.target_runs(call, t, disp, tcount, tdt)?;
        let id = {
            let mut o = self.origin.lock().unwrap();
            let id = o.next_id;
            o.next_id += 1;
            o.pending.insert(
                id,
                Pending {
                    ptr: result as usize,
                    count: rcount,
                    dt: rdt.clone(),
                },
            );
            id
        };
        let m = match (acc, cas) {
            (Some((op, ty, data)), _) => Writer::new(msg::GET_ACC)
                .u64(id)
                .u64(op as u64)
                .u64(ty as u64)
                .runs(&runs)
                .bytes(&data),
            (None, Some((cmp, new))) => Writer::new(msg::CAS)
                .u64(id)
                .u64(runs[0].0)
                .u64(cmp.len() as u64)
                .bytes(&cmp)
                .bytes(&new),
            (None, None) => Writer::new(msg::GET).u64(id).runs(&runs),
        };
        let ch = self.ch();
        match ch.send(t, ch.req_tag(), m) {
            Ok(()) => Ok(id),
            Err(c) => {
                self.origin.lock().unwrap().pending.remove(&id);
                Err((c, format!("{call}: sending to rank {t} failed")))
            }
        }
    }

    /// Takes the replies that have arrived, without waiting.
    pub fn poll_replies(&self) -> Result<(), Failure> {
        let ch = self.ch();
        loop {
            let st = ch
                .p2p
                .iprobe(Source::Any, Tag::Is(ch.rep_tag()))
                .map_err(|e| (MPI_ERR_OTHER, format!("polling a window's replies: {e}")))?;
            let Some(st) = st else { return Ok(()) };
            let (m, st) = ch
                .p2p
                .recv_vec(Source::Rank(st.source), Tag::Is(ch.rep_tag()), usize::MAX)
                .map_err(|e| (MPI_ERR_OTHER, format!("receiving a window's reply: {e}")))?;
            if let Some(&from) = self.target.window_rank.get(&st.source) {
                self.on_reply(from, &m);
            }
        }
    }

    /// Whether the get (or fetching operation) `id` has its data.
    pub fn arrived(&self, id: u64) -> bool {
        !self.origin.lock().unwrap().pending.contains_key(&id)
    }

    /// Request-based operations need a passive-target epoch at their target.
    pub fn check_passive(&self, call: &str, target: c_int) -> Result<(), Failure> {
        let o = self.origin.lock().unwrap();
        let t = target as usize;
        if target == MPI_PROC_NULL || o.lock_all || o.locked.get(t).is_some_and(Option::is_some) {
            Ok(())
        } else {
            Err(rma_err(format!(
                "{call}: request-based operations need a passive-target epoch (MPI_Win_lock or MPI_Win_lock_all) at rank {target}"
            )))
        }
    }

    /// `MPI_Win_fence`.
    pub fn fence(&self, assert: c_int) -> Result<(), Failure> {
        let ch = self.ch();
        let (e, p) = {
            let o = self.origin.lock().unwrap();
            if o.lock_all || o.locked.iter().any(Option::is_some) {
                return Err(rma_err(
                    "MPI_Win_fence: a passive-target epoch (MPI_Win_lock) is open",
                ));
            }
            (o.fence, ch.size())
        };
        // Two rounds: the first marker follows this process's operations, so once all
        // first markers are in, this window is complete; the second says so. A fence
        // returns once every window is complete, as a barrier after the operations
        // would: a load from a shared window, or a get of the next epoch from another
        // process's window, sees what any process put before the fence.
        for phase in 0..2 {
            let word = 2 * e + phase;
            for r in 0..p {
                ch.send(r, ch.req_tag(), Writer::new(msg::FENCE).u64(word))
                    .map_err(|c| (c, format!("MPI_Win_fence: sending to rank {r} failed")))?;
            }
            if phase == 0 {
                self.wait_replies(|o| o.pending.is_empty())?;
            }
            self.target
                .wait(|st| {
                    if st.fences.get(&word) == Some(&p) {
                        st.fences.remove(&word);
                        true
                    } else {
                        false
                    }
                })
                .map_err(|c| (c, "MPI_Win_fence: the job failed".to_string()))?;
        }
        let mut o = self.origin.lock().unwrap();
        o.fence += 1;
        o.fenced = assert & MPI_MODE_NOSUCCEED == 0;
        o.fence_ops = false;
        drop(o);
        self.take_error_upto(e)
    }

    /// Sends `kind` to each of `targets` and waits for their acknowledgements (and so for
    /// the replies to every get sent to them before).
    fn handshake(
        &self,
        call: &str,
        targets: &[u32],
        kind: u8,
        word: Option<u64>,
    ) -> Result<(), Failure> {
        let ch = self.ch();
        for &t in targets {
            let mut m = Writer::new(kind);
            if let Some(w) = word {
                m = m.u64(w);
            }
            if kind != msg::LOCK {
                self.origin.lock().unwrap().owed[t as usize] += 1;
            }
            ch.send(t, ch.req_tag(), m)
                .map_err(|c| (c, format!("{call}: sending to rank {t} failed")))?;
        }
        if kind == msg::LOCK {
            self.wait_replies(|o| targets.iter().all(|&t| o.granted[t as usize]))?;
            let mut o = self.origin.lock().unwrap();
            for &t in targets {
                o.granted[t as usize] = false;
            }
        } else {
            self.wait_replies(|o| targets.iter().all(|&t| o.owed[t as usize] == 0))?;
        }
        self.take_error()
    }

    /// `MPI_Win_lock`.
    pub fn lock(&self, lock_type: c_int, target: c_int) -> Result<(), Failure> {
        let call = "MPI_Win_lock";
        let excl = match lock_type {
            MPI_LOCK_EXCLUSIVE => true,
            MPI_LOCK_SHARED => false,
            _ => {
                return Err((
                    MPI_ERR_LOCKTYPE,
                    format!(
                        "{call}: lock type {lock_type} is neither MPI_LOCK_EXCLUSIVE nor MPI_LOCK_SHARED"
                    ),
                ));
            }
        };
        let Some(t) = self.check_rank(call, target)? else {
            return Ok(());
        };
        {
            let mut o = self.origin.lock().unwrap();
            if o.locked[t as usize].is_some() || o.lock_all {
                return Err(rma_err(format!("{call}: rank {t} is locked already")));
            }
            if o.fenced && o.fence_ops {
                return Err(rma_err(format!(
                    "{call}: a fence epoch with operations is open (end it with a fence, MPI_MODE_NOSUCCEED)"
                )));
            }
            o.fenced = false;
        }
        self.handshake(call, &[t], msg::LOCK, Some(excl as u64))?;
        self.origin.lock().unwrap().locked[t as usize] = Some(excl);
        Ok(())
    }

    /// `MPI_Win_unlock`.
    pub fn unlock(&self, target: c_int) -> Result<(), Failure> {
        let call = "MPI_Win_unlock";
        let Some(t) = self.check_rank(call, target)? else {
            return Ok(());
        };
        if self.origin.lock().unwrap().locked[t as usize].is_none() {
            return Err(rma_err(format!("{call}: rank {t} is not locked")));
        }
        let r = self.handshake(call, &[t], msg::UNLOCK, None);
        self.origin.lock().unwrap().locked[t as usize] = None;
        r
    }

    /// `MPI_Win_lock_all`: a shared lock at every process.
    pub fn lock_all(&self) -> Result<(), Failure> {
        let call = "MPI_Win_lock_all";
        {
            let mut o = self.origin.lock().unwrap();
            if o.lock_all || o.locked.iter().any(Option::is_some) || (o.fenced && o.fence_ops) {
                return Err(rma_err(format!("{call}: another epoch is open")));
            }
            o.fenced = false;
        }
        let all: Vec<u32> = (0..self.ch().size()).collect();
        self.handshake(call, &all, msg::LOCK, Some(0))?;
        self.origin.lock().unwrap().lock_all = true;
        Ok(())
    }

    /// `MPI_Win_unlock_all`.
    pub fn unlock_all(&self) -> Result<(), Failure> {
        let call = "MPI_Win_unlock_all";
        if !self.origin.lock().unwrap().lock_all {
            return Err(rma_err(format!("{call}: MPI_Win_lock_all was not called")));
        }
        let all: Vec<u32> = (0..self.ch().size()).collect();
        let r = self.handshake(call, &all, msg::UNLOCK, None);
        self.origin.lock().unwrap().lock_all = false;
        r
    }

    /// `MPI_Win_flush` (`None`: every target, `MPI_Win_flush_all`). The local variants
    /// are the same: completing at the target also completes at the origin.
    pub fn flush(&self, target: Option<c_int>) -> Result<(), Failure> {
        let call = "MPI_Win_flush";
        let targets: Vec<u32> = match target {
            Some(r) => match self.check_rank(call, r)? {
                None => return Ok(()),
                Some(t) => vec![t],
            },
            None => {
                // Flush_all: every target of an open passive-target epoch (none open:
                // nothing to complete).
                let o = self.origin.lock().unwrap();
                (0..self.ch().size())
                    .filter(|&t| o.lock_all || o.locked[t as usize].is_some())
                    .collect()
            }
        };
        {
            let o = self.origin.lock().unwrap();
            if !o.lock_all && targets.iter().any(|&t| o.locked[t as usize].is_none()) {
                return Err(rma_err(format!(
                    "{call}: no passive-target epoch is open at the target"
                )));
            }
        }
        if targets.is_empty() {
            return Ok(());
        }
        self.handshake(call, &targets, msg::FLUSH, None)
    }

    /// The window ranks of the world ranks `group` (a group's members).
    pub fn window_ranks(&self, call: &str, group: &[u32]) -> Result<Vec<u32>, Failure> {
        group
            .iter()
            .map(|w| {
                self.target.window_rank.get(w).copied().ok_or((
                    MPI_ERR_GROUP,
                    format!("{call}: process {w} of the group is not in the window"),
                ))
            })
            .collect()
    }

    /// `MPI_Win_post`: opens an exposure epoch for the origins `group` (window ranks).
    pub fn post(&self, group: &[u32]) -> Result<(), Failure> {
        let call = "MPI_Win_post";
        {
            let mut o = self.origin.lock().unwrap();
            if o.exposed.is_some() {
                return Err(rma_err(format!(
                    "{call}: an exposure epoch is open already (MPI_Win_wait)"
                )));
            }
            o.exposed = Some(group.to_vec());
        }
        let ch = self.ch();
        for &r in group {
            ch.send(r, ch.rep_tag(), Writer::new(msg::POSTED))
                .map_err(|c| (c, format!("{call}: sending to rank {r} failed")))?;
        }
        Ok(())
    }

    /// `MPI_Win_start`: waits until every target of `group` has posted.
    pub fn start(&self, group: &[u32]) -> Result<(), Failure> {
        let call = "MPI_Win_start";
        if self.origin.lock().unwrap().started.is_some() {
            return Err(rma_err(format!(
                "{call}: an access epoch is open already (MPI_Win_complete)"
            )));
        }
        self.wait_replies(|o| group.iter().all(|&t| o.posted[t as usize] > 0))?;
        let mut o = self.origin.lock().unwrap();
        for &t in group {
            o.posted[t as usize] -= 1;
        }
        o.started = Some(group.to_vec());
        Ok(())
    }

    /// `MPI_Win_complete`: ends the access epoch; each target learns it after the
    /// operations (they travel in order).
    pub fn complete(&self) -> Result<(), Failure> {
        let call = "MPI_Win_complete";
        let Some(group) = self.origin.lock().unwrap().started.take() else {
            return Err(rma_err(format!(
                "{call}: no access epoch is open (MPI_Win_start)"
            )));
        };
        self.wait_replies(|o| o.pending.is_empty())?;
        let ch = self.ch();
        for &t in &group {
            ch.send(t, ch.req_tag(), Writer::new(msg::COMPLETE))
                .map_err(|c| (c, format!("{call}: sending to rank {t} failed")))?;
        }
        self.take_error()
    }

    /// `MPI_Win_wait` (`block`) and `MPI_Win_test`: whether every origin of the exposure
    /// epoch has completed; the epoch is closed then.
    pub fn wait_exposure(&self, block: bool) -> Result<bool, Failure> {
        let call = if block {
            "MPI_Win_wait"
        } else {
            "MPI_Win_test"
        };
        let Some(group) = self.origin.lock().unwrap().exposed.clone() else {
            return Err(rma_err(format!(
                "{call}: no exposure epoch is open (MPI_Win_post)"
            )));
        };
        let mut done = false;
        self.target
            .wait(|st| {
                done = group
                    .iter()
                    .all(|o| st.completes.get(o).copied().unwrap_or(0) > 0);
                if done {
                    for o in &group {
                        if let Some(n) = st.completes.get_mut(o) {
                            *n -= 1;
                        }
                    }
                }
                done || !block
            })
            .map_err(|c| (c, format!("{call}: the job failed")))?;
        if done {
            self.origin.lock().unwrap().exposed = None;
            self.take_error()?;
        }
        Ok(done)
    }

    /// `MPI_Win_attach` on a dynamic window.
    pub fn attach(&self, base: usize, size: usize) -> Result<(), Failure> {
        if !self.target.dynamic {
            return Err((
                MPI_ERR_RMA_FLAVOR,
                "MPI_Win_attach: the window is not dynamic (MPI_Win_create_dynamic)".to_string(),
            ));
        }
        self.target.regions.lock().unwrap().push((base, size));
        Ok(())
    }

    /// `MPI_Win_detach`.
    pub fn detach(&self, base: usize) -> Result<(), Failure> {
        if !self.target.dynamic {
            return Err((
                MPI_ERR_RMA_FLAVOR,
                "MPI_Win_detach: the window is not dynamic (MPI_Win_create_dynamic)".to_string(),
            ));
        }
        let mut r = self.target.regions.lock().unwrap();
        match r.iter().position(|&(a, _)| a == base) {
            Some(i) => {
                r.remove(i);
                Ok(())
            }
            None => Err((
                MPI_ERR_RMA_ATTACH,
                format!("MPI_Win_detach: nothing is attached at {base:#x}"),
            )),
        }
    }

    /// `MPI_Win_free`, collective: returns once no process will send this window
    /// anything more; the service thread is stopped then.
    pub fn free(&self) -> Result<(), Failure> {
        {
            let o = self.origin.lock().unwrap();
            if o.lock_all || o.locked.iter().any(Option::is_some) {
                return Err(rma_err(
                    "MPI_Win_free: a passive-target epoch is still open (MPI_Win_unlock)",
                ));
            }
            if o.started.is_some() || o.exposed.is_some() {
                return Err(rma_err(
                    "MPI_Win_free: an epoch of MPI_Win_start or MPI_Win_post is still open",
                ));
            }
        }
        self.wait_replies(|o| o.pending.is_empty())?;
        let ch = self.ch();
        let p = ch.size();
        for r in 0..p {
            ch.send(r, ch.req_tag(), Writer::new(msg::FREE))
                .map_err(|c| (c, format!("MPI_Win_free: sending to rank {r} failed")))?;
        }
        let res = self
            .target
            .wait(|st| st.frees == p)
            .map_err(|c| (c, "MPI_Win_free: the job failed".to_string()));
        if res.is_ok() {
            let _ = ch.send(ch.me, ch.req_tag(), Writer::new(msg::STOP));
            if let Some(h) = self.service.lock().unwrap().take() {
                let _ = h.join();
            }
        }
        res?;
        self.take_error()
    }
}

/// `MPI_Win_allocate_shared`, collective: one file in `/dev/shm` mapped by every process
/// (`same_host`: all of them share this host), holding their segments one after the
/// other in rank order.
pub fn allocate_shared(
    ch: Channel,
    size: usize,
    disp_unit: c_int,
    comm: Raw,
    same_host: bool,
) -> Result<Arc<Window>, Failure> {
    let call = "MPI_Win_allocate_shared";
    if !same_host {
        return Err((
            MPI_ERR_RMA_SHARED,
            format!(
                "{call}: the processes of the communicator do not all share this host (split it with MPI_COMM_TYPE_SHARED)"
            ),
        ));
    }
    let p = ch.size();
    let rep = ch.rep_tag();
    let io = |e: std::io::Error| {
        (
            MPI_ERR_NO_MEM,
            format!("{call}: the shared memory file: {e}"),
        )
    };
    let lost = |e| (MPI_ERR_OTHER, format!("{call}: {e}"));
    // Sizes to rank 0, which lays the segments out and names the file; replies on the
    // reply tag from one known process at a time, before the window exists.
    ch.send(
        0,
        rep,
        Writer::new(msg::INFO)
            .u64(size as u64)
            .u64(disp_unit as i64 as u64),
    )
    .map_err(|c| (c, format!("{call}: sending the size failed")))?;
    let (path, len, segs) = if ch.me == 0 {
        let mut segs = Vec::with_capacity(p as usize);
        let mut at = 0usize;
        for r in 0..p {
            let (m, _) = ch
                .p2p
                .recv_vec(Source::Rank(ch.ranks[r as usize]), Tag::Is(rep), 64)
                .map_err(lost)?;
            let mut rd = Reader(&m[1..]);
            let (Some(s), Some(d)) = (rd.u64(), rd.u64()) else {
                return Err((MPI_ERR_INTERN, format!("{call}: a bad size message")));
            };
            segs.push((at, s as usize, d as i64 as c_int));
            // Segments start on cache lines.
            at += (s as usize).div_ceil(64) * 64;
        }
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path = format!(
            "/dev/shm/bulkwire-win-{}-{}-{n}",
            std::process::id(),
            ch.ctx
        );
        let f = std::fs::File::create_new(&path).map_err(io)?;
        let len = at.max(1);
        f.set_len(len as u64).map_err(io)?;
        let mut m = Writer::new(msg::INFO).u64(len as u64).u64(p as u64);
        for &(o, s, d) in &segs {
            m = m.u64(o as u64).u64(s as u64).u64(d as i64 as u64);
        }
        m = m.bytes(path.as_bytes());
        for r in 1..p {
            ch.send(r, rep, Writer(m.0.clone()))
                .map_err(|c| (c, format!("{call}: sending the layout failed")))?;
        }
        (path, len, segs)
    } else {
        let (m, _) = ch
            .p2p
            .recv_vec(Source::Rank(ch.ranks[0]), Tag::Is(rep), usize::MAX)
            .map_err(lost)?;
        let mut rd = Reader(&m[1..]);
        let bad = || (MPI_ERR_INTERN, format!("{call}: a bad layout message"));
        let (len, n) = (rd.u64().ok_or_else(bad)?, rd.u64().ok_or_else(bad)?);
        let mut segs = Vec::new();
        for _ in 0..n {
            let (o, s, d) = (
                rd.u64().ok_or_else(bad)?,
                rd.u64().ok_or_else(bad)?,
                rd.u64().ok_or_else(bad)?,
            );
            segs.push((o as usize, s as usize, d as i64 as c_int));
        }
        let path = String::from_utf8_lossy(rd.rest()).into_owned();
        (path, len as usize, segs)
    };
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .map_err(io)?;
    use std::os::fd::AsRawFd;
    // SAFETY: a shared read-write mapping of the whole file, which is `len` bytes long.
    let addr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            f.as_raw_fd(),
            0,
        )
    };
    if addr == libc::MAP_FAILED {
        return Err(io(std::io::Error::last_os_error()));
    }
    let addr = addr as usize;
    let (off, mine, _) = segs[ch.me as usize];
    let me = ch.me;
    let owned = Memory::Map { addr, len, segs };
    let w = Window::create(
        ch,
        addr + off,
        mine,
        disp_unit,
        MPI_WIN_FLAVOR_SHARED,
        Some(owned),
        comm,
    );
    // Every process has mapped the file once the window exists (each sent its window
    // information after mapping, and creation waits for all of them): the name can go.
    if me == 0 {
        let _ = std::fs::remove_file(&path);
    }
    w
}

/// Accumulate's operations: the predefined ones of `crate::op`, on packed values.
pub mod ops {
    use super::*;

    /// Whether `op` is one accumulate takes (a predefined operation, `MPI_REPLACE` and
    /// `MPI_NO_OP` included).
    pub fn valid(op: Raw) -> bool {
        crate::op::Predef::from_handle(op).is_some()
    }

    /// Whether `op` is defined on the values of `t` (`MPI_ERR_OP` if not).
    pub fn check(op: Raw, t: &Datatype) -> Result<(), c_int> {
        let p = crate::op::Predef::from_handle(op).ok_or(MPI_ERR_OP)?;
        match t.basic() {
            Some((b, _)) => crate::op::check(p, b),
            None => Err(MPI_ERR_TYPE),
        }
    }

    /// `inout[i] = input[i] op inout[i]` over packed values of `t`'s value type.
    pub fn apply(op: Raw, t: &Datatype, input: &[u8], inout: &mut [u8]) -> Result<(), c_int> {
        crate::op::apply_packed_values(op, t, input, inout)
    }
}

static WINDOWS: Mutex<Table<Arc<Window>>> = Mutex::new(Table::new(Kind::Win));

/// The window behind a handle; `MPI_ERR_WIN` for anything else.
pub fn lookup(h: Raw) -> Result<Arc<Window>, c_int> {
    WINDOWS.lock().unwrap().get(h).cloned().ok_or(MPI_ERR_WIN)
}

pub(crate) fn register(w: Arc<Window>) -> Raw {
    WINDOWS.lock().unwrap().insert(w)
}

pub(crate) fn release(h: Raw) -> Option<Arc<Window>> {
    WINDOWS.lock().unwrap().remove(h)
}

/// The name argument of `MPI_Win_set_name`, cut to `MPI_MAX_OBJECT_NAME - 1` bytes.
///
/// # Safety
/// `p` is a NUL-terminated string.
unsafe fn c_name(p: *const c_char) -> String {
    // SAFETY: forwarded.
    let s = unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned();
    let mut end = s.len().min(127);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_string()
}

/// Windows live in a global table: they must be shareable between threads.
#[allow(dead_code)]
fn assert_send_sync() {
    fn ok<T: Send + Sync>() {}
    ok::<Window>();
}
