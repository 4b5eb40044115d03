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
//!   the markers of all (its window is then complete) and for the replies to its own gets;
//! - `MPI_Win_flush`/`MPI_Win_unlock`: the origin sends a flush (unlock) message and waits
//!   for the target's acknowledgement, which follows the replies to its gets;
//! - `MPI_Win_lock`: the target's service thread grants locks in request order (shared
//!   ones together); the origin waits for the grant.
//!
//! Left out (they return `MPI_ERR_UNSUPPORTED_OPERATION`): shared-memory windows
//! (`MPI_Win_allocate_shared`, `MPI_Win_shared_query`), dynamic windows
//! (`MPI_Win_create_dynamic`, `attach`, `detach`), general active target
//! synchronisation (`MPI_Win_post`/`start`/`complete`/`wait`/`test`) and the request-based
//! operations (`MPI_Rput`, `MPI_Rget`, `MPI_Raccumulate`, `MPI_Rget_accumulate`).
//! Limits: one thread per window; an operation is one message (its target type's runs
//! and its data).

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

    pub const DATA: u8 = 20;
    pub const LOCKED: u8 = 21;
    pub const UNLOCKED: u8 = 22;
    pub const FLUSHED: u8 = 23;
    pub const INFO: u8 = 24;
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
    st: Mutex<TargetState>,
    cv: Condvar,
}

#[derive(Default)]
struct TargetState {
    /// Fence markers received, by fence number.
    fences: HashMap<u64, u32>,
    frees: u32,
    exclusive: Option<u32>,
    shared: u32,
    waiting: VecDeque<(u32, bool)>,
    /// A request the service thread could not apply (outside the window, a bad op):
    /// reported by the next synchronisation call.
    error: Option<(c_int, String)>,
    /// The service thread's receive failed (the job failed).
    dead: bool,
}

impl Target {
    /// The window's bytes at `runs`, checked against its size.
    fn check(&self, runs: &[(u64, u64)]) -> bool {
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

    fn fail(&self, what: String) {
        let mut st = self.st.lock().unwrap();
        st.error.get_or_insert((MPI_ERR_RMA_RANGE, what));
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
                    self.fail(format!(
                        "MPI_Put: rank {from} wrote outside the window of {} bytes",
                        self.size
                    ));
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
                        Err(code) => {
                            self.st.lock().unwrap().error.get_or_insert((
                                code,
                                format!("MPI_Accumulate: the operation {op:#x} does not apply to the type {ty:#x}"),
                            ));
                        }
                    }
                } else {
                    self.fail(format!(
                        "MPI_Accumulate: rank {from} reached outside the window of {} bytes",
                        self.size
                    ));
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
                let Some(e) = r.u64() else { return true };
                *self.st.lock().unwrap().fences.entry(e).or_default() += 1;
                self.cv.notify_all();
            }
            msg::FREE => {
                self.st.lock().unwrap().frees += 1;
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
    /// Memory `MPI_Win_allocate` allocated, freed with the window.
    owned: Option<(usize, std::alloc::Layout)>,
    /// The window's communicator (a duplicate), freed with it.
    pub comm: Raw,
    // The values the predefined attributes point to.
    attr_size: isize,
    attr_disp: c_int,
    attr_flavor: c_int,
    attr_model: c_int,
    name: Mutex<String>,
}

impl Drop for Window {
    fn drop(&mut self) {
        if let Some((p, l)) = self.owned.take() {
            // SAFETY: allocated in `allocate` with this layout; the service thread that
            // wrote into it has been joined (`free`) or never started.
            unsafe { std::alloc::dealloc(p as *mut u8, l) };
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
        owned: Option<(usize, std::alloc::Layout)>,
        comm: Raw,
    ) -> Result<Arc<Window>, Failure> {
        let p = ch.size();
        let window_rank = ch
            .ranks
            .iter()
            .enumerate()
            .map(|(i, &w)| (w, i as u32))
            .collect();
        let target = Arc::new(Target {
            ch,
            window_rank,
            base,
            size,
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
                locked: vec![None; p as usize],
                lock_all: false,
            }),
            remote: Vec::new(),
            service: Mutex::new(None),
            owned,
            comm,
            attr_size: size as isize,
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
            msg::INFO => {
                let (Some(s), Some(d)) = (r.u64(), r.u64()) else {
                    return;
                };
                o.info[from as usize] = Some((s, d as i64));
            }
            _ => {}
        }
    }

    /// A request the service thread could not apply, once.
    fn take_error(&self) -> Result<(), Failure> {
        match self.target.st.lock().unwrap().error.take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
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
        let o = self.origin.lock().unwrap();
        if o.fenced || o.lock_all || o.locked[target as usize].is_some() {
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
    ) -> Result<(), Failure> {
        let Some(t) = self.check_rank(call, target)? else {
            return Ok(());
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
        ch.send(t, ch.req_tag(), m)
            .map_err(|c| (c, format!("{call}: sending to rank {t} failed")))
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
        for r in 0..p {
            ch.send(r, ch.req_tag(), Writer::new(msg::FENCE).u64(e))
                .map_err(|c| (c, format!("MPI_Win_fence: sending to rank {r} failed")))?;
        }
        self.wait_replies(|o| o.pending.is_empty())?;
        self.target
            .wait(|st| {
                if st.fences.get(&e) == Some(&p) {
                    st.fences.remove(&e);
                    true
                } else {
                    false
                }
            })
            .map_err(|c| (c, "MPI_Win_fence: the job failed".to_string()))?;
        let mut o = self.origin.lock().unwrap();
        o.fence += 1;
        o.fenced = assert & MPI_MODE_NOSUCCEED == 0;
        drop(o);
        self.take_error()
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
            let o = self.origin.lock().unwrap();
            if o.locked[t as usize].is_some() || o.lock_all {
                return Err(rma_err(format!("{call}: rank {t} is locked already")));
            }
            if o.fenced {
                return Err(rma_err(format!(
                    "{call}: a fence epoch is open (end it with MPI_MODE_NOSUCCEED)"
                )));
            }
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
            let o = self.origin.lock().unwrap();
            if o.lock_all || o.locked.iter().any(Option::is_some) || o.fenced {
                return Err(rma_err(format!("{call}: another epoch is open")));
            }
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
            None => (0..self.ch().size()).collect(),
        };
        {
            let o = self.origin.lock().unwrap();
            if !o.lock_all && targets.iter().any(|&t| o.locked[t as usize].is_none()) {
                return Err(rma_err(format!(
                    "{call}: no passive-target epoch is open at the target"
                )));
            }
        }
        self.handshake(call, &targets, msg::FLUSH, None)
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

/// Accumulate's operations.
///
/// REPLACE with coll's `crate::op::lookup(op)?.apply(..)` once `mpicoll` is merged: this
/// stand-in knows `MPI_SUM`, `MPI_PROD`, `MPI_MIN`, `MPI_MAX`, the logical and bitwise
/// operations on integers, `MPI_REPLACE` and `MPI_NO_OP`, on the integer and floating
/// types whose packed form is their array form (not the pair types).
pub mod ops {
    use super::*;
    use crate::datatype::Basic;

    const SUM: Raw = 0x21;
    const MIN: Raw = 0x22;
    const MAX: Raw = 0x23;
    const PROD: Raw = 0x24;
    const BAND: Raw = 0x28;
    const BOR: Raw = 0x29;
    const BXOR: Raw = 0x2a;
    const LAND: Raw = 0x30;
    const LOR: Raw = 0x31;
    const LXOR: Raw = 0x32;

    macro_rules! ints {
        ($op:expr, $t:ty, $inp:expr, $io:expr) => {{
            const W: usize = std::mem::size_of::<$t>();
            for (a, b) in $inp.chunks_exact(W).zip($io.chunks_exact_mut(W)) {
                let x = <$t>::from_ne_bytes(a.try_into().unwrap());
                let y = <$t>::from_ne_bytes((&*b).try_into().unwrap());
                let r: $t = match $op {
                    SUM => x.wrapping_add(y),
                    PROD => x.wrapping_mul(y),
                    MIN => x.min(y),
                    MAX => x.max(y),
                    BAND => x & y,
                    BOR => x | y,
                    BXOR => x ^ y,
                    LAND => ((x != 0) && (y != 0)) as $t,
                    LOR => ((x != 0) || (y != 0)) as $t,
                    LXOR => ((x != 0) != (y != 0)) as $t,
                    _ => return Err(MPI_ERR_OP),
                };
                b.copy_from_slice(&r.to_ne_bytes());
            }
            Ok(())
        }};
    }

    macro_rules! floats {
        ($op:expr, $t:ty, $inp:expr, $io:expr) => {{
            const W: usize = std::mem::size_of::<$t>();
            for (a, b) in $inp.chunks_exact(W).zip($io.chunks_exact_mut(W)) {
                let x = <$t>::from_ne_bytes(a.try_into().unwrap());
                let y = <$t>::from_ne_bytes((&*b).try_into().unwrap());
                let r: $t = match $op {
                    SUM => x + y,
                    PROD => x * y,
                    MIN => x.min(y),
                    MAX => x.max(y),
                    _ => return Err(MPI_ERR_OP),
                };
                b.copy_from_slice(&r.to_ne_bytes());
            }
            Ok(())
        }};
    }

    /// Whether `op` is one accumulate takes (the predefined operations).
    pub fn valid(op: Raw) -> bool {
        matches!(op, 0x21..=0x24 | 0x28..=0x2a | 0x30..=0x32 | 0x38 | 0x39 | MPI_REPLACE | MPI_NO_OP)
    }

    /// `inout[i] = input[i] op inout[i]` over packed values of `t`'s value type.
    pub fn apply(op: Raw, t: &Datatype, input: &[u8], inout: &mut [u8]) -> Result<(), c_int> {
        if op == MPI_NO_OP {
            return Ok(());
        }
        if op == MPI_REPLACE {
            let n = input.len().min(inout.len());
            inout[..n].copy_from_slice(&input[..n]);
            return Ok(());
        }
        use Basic::*;
        let Some((b, _)) = t.basic() else {
            return Err(MPI_ERR_TYPE);
        };
        match b {
            Char | SignedChar | Int8 => ints!(op, i8, input, inout),
            UnsignedChar | Byte | UInt8 | CBool => ints!(op, u8, input, inout),
            Short | Int16 => ints!(op, i16, input, inout),
            UnsignedShort | UInt16 => ints!(op, u16, input, inout),
            Int | Int32 => ints!(op, i32, input, inout),
            Unsigned | UInt32 | WChar => ints!(op, u32, input, inout),
            Long | LongLong | Int64 | Aint | Offset | Count => ints!(op, i64, input, inout),
            UnsignedLong | UnsignedLongLong | UInt64 => ints!(op, u64, input, inout),
            Float => floats!(op, f32, input, inout),
            Double => floats!(op, f64, input, inout),
            _ => Err(MPI_ERR_OP),
        }
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
