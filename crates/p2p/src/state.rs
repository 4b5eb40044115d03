//! The p2p state machine: requests, matching, eager and rendezvous protocols, single copy.
//! It runs under the [`bulkwire_engine::progress::Shared`] mutex, driven either by a user
//! call or by the progress thread; it never waits itself.
//!
//! Buffers are raw pointers here. The API layer above guarantees (by borrowing, ownership
//! or the C contract) that a request's buffer stays valid until the request completes, and
//! this module guarantees that it touches a buffer only while its request is incomplete,
//! and that a send completes only once nothing (the transport included) refers to it.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bulkwire_engine::progress::Service;
use bulkwire_engine::{Event, Transport, Waker};
use bulkwire_launch::JobState;
use bulkwire_link::Rank;
use bulkwire_protocol::{MsgId, Time};
use bytes::Bytes;

use crate::envelope::{self as env, Envelope};
use crate::matching::{Arrived, Posted, Sel, Unexpected};
use crate::vm::{self, Published};
use crate::{Error, Status};

/// A request handle: slot index in the low 32 bits, the slot's generation (never 0) in the
/// high 32, so a stale or forged handle names no live request.
pub type ReqId = u64;

/// A pointer into a user buffer, valid while its request is incomplete (see module docs).
#[derive(Clone, Copy, Debug)]
pub struct Mem(pub *mut u8);

// SAFETY: the pointed-to buffer belongs to a request; it is accessed only under the state's
// mutex (or by the transport through a `Tracked` owner) and the API layer keeps it alive
// and untouched by the user until the request completes, whichever thread drives it.
unsafe impl Send for Mem {}

impl Mem {
    /// The first `len` bytes as a slice.
    ///
    /// # Safety
    /// The buffer must be valid for `len` bytes of reads (see module docs).
    unsafe fn slice<'a>(self, len: usize) -> &'a [u8] {
        if len == 0 {
            return &[];
        }
        // SAFETY: nonzero length, so the caller's buffer is a real allocation of len bytes.
        unsafe { std::slice::from_raw_parts(self.0, len) }
    }

    /// Copies `src` to the start of the buffer.
    ///
    /// # Safety
    /// The buffer must be valid for `src.len()` bytes of writes and not overlap `src`.
    unsafe fn fill(self, src: &[u8]) {
        if !src.is_empty() {
            // SAFETY: per the contract; lengths checked by the callers against capacity.
            unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), self.0, src.len()) };
        }
    }
}

/// Where a receive puts its message.
#[derive(Debug)]
pub enum RecvBuf {
    /// The caller's buffer of `cap` bytes.
    Ptr { ptr: Mem, cap: usize },
    /// A vector allocated for the message, up to `max` bytes (zero-copy from the transport
    /// where it hands over a whole vector).
    Alloc { max: usize },
}

impl RecvBuf {
    fn cap(&self) -> usize {
        match *self {
            RecvBuf::Ptr { cap, .. } => cap,
            RecvBuf::Alloc { max } => max,
        }
    }
}

/// What keeps an owned buffer alive, handed back when the request is collected.
#[derive(Debug, Default)]
pub enum Keep {
    #[default]
    None,
    /// An owned send's data.
    Bytes(Bytes),
    /// An owned receive's buffer, or the vector allocated for an `irecv_vec` receive.
    Vec(Vec<u8>),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SendPhase {
    /// RTS sent; waiting for CTS or FIN.
    Rts,
    /// Body handed to the transport; waiting for it to release the buffer.
    Data,
    /// A send to self of rendezvous size, waiting in the unexpected queue.
    Local,
    /// Split copy: this process wrote its part; the receiver reads the rest, then FIN.
    Split,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum RecvPhase {
    Posted,
    /// Matched an announced eager message, accepted it, waiting for its data.
    Eager {
        from: Rank,
    },
    /// Matched an RTS, sent CTS, waiting for `len` bytes of body.
    Data {
        from: Rank,
        len: u64,
    },
    /// Split copy: sent SPLIT and read the body up to `at` out of the sender's buffer at
    /// `addr` (`read_ok`: the read worked); waiting for WROTE.
    Split {
        from: Rank,
        sreq: u64,
        len: u64,
        addr: u64,
        at: u64,
        read_ok: bool,
    },
}

#[derive(Debug)]
enum Kind {
    Send {
        ptr: Mem,
        len: usize,
        phase: SendPhase,
        /// An error to report when the transport releases the body.
        error: Option<Error>,
    },
    Recv {
        src: Option<Rank>,
        tag: Sel,
        buf: RecvBuf,
        phase: RecvPhase,
    },
}

#[derive(Debug)]
struct Req {
    kind: Kind,
    /// Send: destination. Receive: the source once matched.
    peer: Rank,
    tag: i32,
    scope: u32,
    /// Dropped by its owner: free the slot on completion.
    detached: bool,
    /// A peer whose silence this request counts on (see `Transport::expect`).
    interest: Option<Rank>,
    done: Option<Result<Status, Error>>,
    keep: Keep,
}

struct Slot {
    generation: u32,
    req: Option<Req>,
}

#[derive(Default)]
struct Slab {
    slots: Vec<Slot>,
    free: Vec<u32>,
}

impl Slab {
    fn insert(&mut self, r: Req) -> ReqId {
        let i = match self.free.pop() {
            Some(i) => i,
            None => {
                self.slots.push(Slot {
                    generation: 1,
                    req: None,
                });
                (self.slots.len() - 1) as u32
            }
        };
        let s = &mut self.slots[i as usize];
        s.req = Some(r);
        (u64::from(s.generation) << 32) | u64::from(i)
    }

    fn get_mut(&mut self, id: ReqId) -> Option<&mut Req> {
        let s = self.slots.get_mut((id & 0xffff_ffff) as usize)?;
        if u64::from(s.generation) != id >> 32 {
            return None;
        }
        s.req.as_mut()
    }

    fn get(&self, id: ReqId) -> Option<&Req> {
        let s = self.slots.get((id & 0xffff_ffff) as usize)?;
        if u64::from(s.generation) != id >> 32 {
            return None;
        }
        s.req.as_ref()
    }

    fn remove(&mut self, id: ReqId) -> Option<Req> {
        let i = (id & 0xffff_ffff) as usize;
        let s = self.slots.get_mut(i)?;
        if u64::from(s.generation) != id >> 32 || s.req.is_none() {
            return None;
        }
        s.generation = s.generation.wrapping_add(1).max(1);
        self.free.push(i as u32);
        s.req.take()
    }

    fn ids(&self) -> Vec<ReqId> {
        self.slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.req.is_some())
            .map(|(i, s)| (u64::from(s.generation) << 32) | i as u64)
            .collect()
    }
}

/// An unexpected message, waiting for a receive.
enum Unexp {
    /// A whole eager message; payload at `data[off..]`.
    Eager { data: Vec<u8>, off: usize },
    /// An announced eager message, not accepted yet.
    Announced { id: MsgId, len: u64 },
    Rts {
        len: u64,
        sreq: u64,
        addr: Option<u64>,
    },
    /// A send to self of rendezvous size.
    Local { sreq: ReqId },
}

/// Where the raw body after a DATA header goes.
#[derive(Clone, Copy, Debug)]
enum RawTarget {
    Recv {
        rid: ReqId,
        len: u64,
    },
    /// A body for nothing (a stale or bad header): swallowed to stay in step.
    Discard,
}

/// What an announced message turned out to be (RMPP: announcement first, data later).
enum Binding {
    Eager(ReqId),
    Raw(RawTarget),
    /// In the unexpected queue, not accepted.
    Unmatched,
    /// Delivered although never accepted (a protocol that does not wait for `accept`).
    Arrived(Vec<u8>),
    /// A control message, handled from its head.
    Consumed,
    /// The head was too short to match on: handle the message when it arrives.
    Deferred,
}

struct Peer {
    dead: Option<Error>,
    /// The next new message from this peer is the body announced by a DATA header.
    raw: Option<RawTarget>,
    /// Requests counting on this peer.
    interest: u32,
    /// Whether it shares this host (and may be offered single copy).
    local: bool,
    /// Verified single-copy access to its memory.
    vm: Option<Published>,
    /// A message whose announced head was too short to match on is still to arrive
    /// whole: what this peer sent after it waits in `held`, in order, so that nothing
    /// matches before it (order per source and tag).
    deferring: bool,
    held: VecDeque<Sight>,
}

/// Counters for reports and for finding where time goes.
#[derive(Clone, Copy, Debug, Default)]
pub struct Stats {
    pub eager_sent: u64,
    pub rndv_sent: u64,
    pub received: u64,
    pub unexpected: u64,
    pub single_copy: u64,
    pub single_copy_bytes: u64,
    /// Of the single-copy receives, those split with the sender (each copied a part).
    pub split_copy: u64,
    /// Rendezvous receives that fell back to the transport after a refused read.
    pub single_copy_refused: u64,
    pub truncated: u64,
    /// Envelopes or control messages that made no sense (counted, then ignored).
    pub bad: u64,
}

/// How p2p behaves; see [`crate::Config`].
#[derive(Clone, Copy, Debug)]
pub struct Settings {
    pub eager: usize,
    /// The eager limit toward peers read in place (single copy makes rendezvous cheap).
    pub eager_local: usize,
    /// Offer local peers single-copy reads of our buffers and read theirs.
    pub single_copy: bool,
    /// Test knob: pretend every single-copy read is refused (exercises the fallback).
    pub refuse_reads: bool,
    /// Single-copy bodies of at least this many bytes are split: the receiver reads the
    /// first half, the sender writes the second into the receiver's buffer, both at once
    /// (`usize::MAX`: never).
    pub split: usize,
}

/// Sends whose bodies the transport has let go of, with a count that makes "none" one
/// atomic load on every pump.
#[derive(Default)]
struct Released {
    ids: Mutex<Vec<ReqId>>,
    pending: AtomicUsize,
}

/// Keeps a user buffer handed to the transport as `Bytes`; when the transport drops the
/// last reference, the send may complete.
struct Tracked {
    ptr: Mem,
    len: usize,
    rid: ReqId,
    released: Arc<Released>,
}

impl AsRef<[u8]> for Tracked {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: the send request owning this buffer stays incomplete (and its buffer
        // alive and unmodified) until this owner is dropped and reported in `released`.
        unsafe { self.ptr.slice(self.len) }
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        self.released
            .ids
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(self.rid);
        self.released.pending.fetch_add(1, Ordering::Release);
    }
}

/// Where a message's first sighting comes from.
enum Sight {
    Full(Vec<u8>),
    Head {
        id: MsgId,
        total: u64,
        head: Vec<u8>,
    },
}

/// The p2p state of one process.
pub struct State {
    t: Option<Box<dyn Transport>>,
    me: Rank,
    n: u32,
    set: Settings,
    reqs: Slab,
    posted: Posted<ReqId>,
    unexp: Unexpected<Unexp>,
    /// Messages taken out of matching by a matched probe (MPI_Mprobe), by claim number,
    /// until a receive for them is posted.
    claimed: HashMap<u64, Arrived<Unexp>>,
    next_claim: u64,
    peers: Vec<Peer>,
    bindings: HashMap<(Rank, MsgId), Binding>,
    /// Receives in a split copy, by sender and the sender's request.
    splits: HashMap<(Rank, u64), ReqId>,
    released: Arc<Released>,
    scratch: Vec<ReqId>,
    /// Set once the job failed or the transport broke: every request fails with it.
    failed: Option<Error>,
    /// The job's failure notices (one atomic load per pump).
    job: Option<Arc<JobState>>,
    incomplete: usize,
    scopes: HashMap<u32, usize>,
    next_scope: u32,
    pub stats: Stats,
}

fn send_error(e: bulkwire_engine::Error) -> Error {
    use bulkwire_engine::Error as E;
    use bulkwire_protocol::ProtoError as P;
    match e {
        E::PeerDead(d) | E::Protocol(P::PeerDead(d)) => Error::PeerDead(d),
        E::JobFailed(m) => Error::JobFailed {
            rank: None,
            message: m,
        },
        E::Protocol(P::TooLarge { len, max }) => Error::TooLarge { len, max },
        other => Error::Transport(other.to_string()),
    }
}

impl State {
    /// A state over `t`; `local[r]` says whether rank r shares this host, `vm[r]` what it
    /// published for single copy.
    pub fn new(
        t: Box<dyn Transport>,
        set: Settings,
        local: &[bool],
        vm: &[Option<Published>],
    ) -> State {
        let me = t.rank();
        let n = t.nprocs();
        let peers = (0..n as usize)
            .map(|r| {
                let local = r != me as usize && local.get(r).copied().unwrap_or(false);
                let vm = if local && set.single_copy {
                    vm.get(r).copied().flatten().filter(|p| p.verify())
                } else {
                    None
                };
                Peer {
                    dead: None,
                    raw: None,
                    interest: 0,
                    deferring: false,
                    held: VecDeque::new(),
                    local,
                    vm,
                }
            })
            .collect();
        State {
            t: Some(t),
            me,
            n,
            set,
            reqs: Slab::default(),
            posted: Posted::new(),
            unexp: Unexpected::new(n),
            claimed: HashMap::new(),
            next_claim: 1,
            peers,
            bindings: HashMap::new(),
            splits: HashMap::new(),
            released: Arc::new(Released::default()),
            scratch: Vec::new(),
            failed: None,
            job: None,
            incomplete: 0,
            scopes: HashMap::new(),
            next_scope: 1,
            stats: Stats::default(),
        }
    }

    pub fn rank(&self) -> Rank {
        self.me
    }

    /// Fails every request, naming the culprit, as soon as `job` records a failure.
    pub fn set_job(&mut self, job: Arc<JobState>) {
        self.job = Some(job);
    }

    /// Ends a concurrent [`State::block`] from any thread.
    pub fn waker(&self) -> Option<Waker> {
        self.t.as_ref().map(|t| t.waker())
    }

    pub fn size(&self) -> u32 {
        self.n
    }

    /// Ranks this process reads in place.
    pub fn single_copy_peers(&self) -> Vec<Rank> {
        (0..self.n)
            .filter(|&r| self.peers[r as usize].vm.is_some())
            .collect()
    }

    /// The transport's name, or "closed".
    pub fn protocol_name(&self) -> &'static str {
        self.t.as_ref().map_or("closed", |t| t.protocol_name())
    }

    pub fn failure(&self) -> Option<&Error> {
        self.failed.as_ref()
    }

    /// Requests not completed yet.
    pub fn incomplete(&self) -> usize {
        self.incomplete
    }

    /// Unexpected messages waiting.
    pub fn unexpected_len(&self) -> usize {
        self.unexp.len()
    }

    /// Posted receives waiting.
    pub fn posted_len(&self) -> usize {
        self.posted.len()
    }

    /// Whether the transport has packets waiting for room (spinning then beats blocking).
    pub fn has_unsent(&self) -> bool {
        self.t.as_ref().is_some_and(|t| t.has_unsent())
    }

    /// Whether anything sent is unacknowledged.
    pub fn transport_busy(&self) -> bool {
        self.t.as_ref().is_some_and(|t| t.busy())
    }

    /// Sleeps in the transport until input, a timer, a wake or `timeout`.
    pub fn block(&mut self, timeout: Duration) {
        match self.t.as_mut() {
            Some(t) => {
                if let Err(e) = t.block(Some(timeout)) {
                    self.poison(Error::Transport(e.to_string()));
                }
            }
            None => std::thread::sleep(timeout.min(Duration::from_millis(1))),
        }
    }

    /// Messages to `peer` of at most this many bytes go eagerly.
    pub fn eager_limit(&self, peer: Rank) -> usize {
        if self.peers[peer as usize].vm.is_some() {
            self.set.eager_local
        } else {
            self.set.eager
        }
    }

    fn check_peer(&self, r: Rank) -> Result<(), Error> {
        if r >= self.n {
            return Err(Error::InvalidRank {
                rank: r as i64,
                size: self.n,
            });
        }
        Ok(())
    }

    // ---- requests ---------------------------------------------------------------------

    fn new_req(&mut self, kind: Kind, peer: Rank, tag: i32, scope: u32, keep: Keep) -> ReqId {
        self.incomplete += 1;
        if scope != 0 {
            *self.scopes.entry(scope).or_default() += 1;
        }
        self.reqs.insert(Req {
            kind,
            peer,
            tag,
            scope,
            detached: false,
            interest: None,
            done: None,
            keep,
        })
    }

    fn set_interest(&mut self, rid: ReqId, peer: Option<Rank>) {
        let Some(r) = self.reqs.get_mut(rid) else {
            return;
        };
        let old = std::mem::replace(&mut r.interest, peer);
        if old == peer {
            return;
        }
        if let Some(p) = old {
            let c = &mut self.peers[p as usize].interest;
            *c -= 1;
            if *c == 0
                && let Some(t) = self.t.as_mut()
            {
                t.expect(p, false);
            }
        }
        if let Some(p) = peer {
            let c = &mut self.peers[p as usize].interest;
            *c += 1;
            if *c == 1
                && let Some(t) = self.t.as_mut()
            {
                t.expect(p, true);
            }
        }
    }

    /// Completes `rid` with `res`. Its buffer is never touched again.
    fn complete(&mut self, rid: ReqId, res: Result<Status, Error>) {
        self.set_interest(rid, None);
        let Some(r) = self.reqs.get_mut(rid) else {
            return;
        };
        if r.done.is_some() {
            return;
        }
        if matches!(res, Err(Error::Truncated { .. })) {
            self.stats.truncated += 1;
        }
        r.done = Some(res);
        let (scope, detached) = (r.scope, r.detached);
        self.incomplete -= 1;
        if scope != 0
            && let Some(c) = self.scopes.get_mut(&scope)
        {
            *c -= 1;
        }
        if detached {
            self.reqs.remove(rid);
        }
    }

    /// The outcome of `rid` and its owned buffer, if it has completed (the handle is then
    /// spent). `Err(InvalidRequest)` for a handle that names nothing.
    pub fn take(&mut self, rid: ReqId) -> Option<(Result<Status, Error>, Keep)> {
        match self.reqs.get(rid) {
            None => Some((Err(Error::InvalidRequest), Keep::None)),
            Some(r) if r.done.is_some() => {
                let r = self.reqs.remove(rid)?;
                Some((r.done?, r.keep))
            }
            Some(_) => None,
        }
    }

    /// The outcome of `rid` if it has completed, leaving it to be collected.
    pub fn peek(&self, rid: ReqId) -> Option<Result<Status, Error>> {
        match self.reqs.get(rid) {
            None => Some(Err(Error::InvalidRequest)),
            Some(r) => r.done.clone(),
        }
    }

    /// Whether `rid` has completed (or names nothing).
    pub fn is_done(&self, rid: ReqId) -> bool {
        self.reqs.get(rid).is_none_or(|r| r.done.is_some())
    }

    /// The owner no longer wants `rid`: a receive not matched yet is cancelled; anything
    /// else finishes in the background and is then forgotten.
    pub fn release(&mut self, rid: ReqId) {
        if self.cancel_posted(rid) || self.is_done(rid) {
            self.reqs.remove(rid);
            return;
        }
        if let Some(r) = self.reqs.get_mut(rid) {
            r.detached = true;
        }
    }

    /// Cancels `rid` if it is a receive still waiting to be matched.
    pub fn cancel_posted(&mut self, rid: ReqId) -> bool {
        let Some(r) = self.reqs.get(rid) else {
            return false;
        };
        let Kind::Recv {
            src,
            tag,
            phase: RecvPhase::Posted,
            ..
        } = r.kind
        else {
            return false;
        };
        if r.done.is_some() || !self.posted.remove(src, tag, rid) {
            return false;
        }
        self.complete(rid, Err(Error::Cancelled));
        true
    }

    pub fn open_scope(&mut self) -> u32 {
        let s = self.next_scope;
        self.next_scope = self.next_scope.wrapping_add(1).max(1);
        s
    }

    /// Requests of `scope` not completed yet.
    pub fn scope_live(&self, scope: u32) -> usize {
        self.scopes.get(&scope).copied().unwrap_or(0)
    }

    /// Cancels the receives of `scope` that nothing has matched.
    pub fn cancel_scope_posted(&mut self, scope: u32) {
        for rid in self.reqs.ids() {
            if self.reqs.get(rid).is_some_and(|r| r.scope == scope) {
                self.cancel_posted(rid);
            }
        }
    }

    /// Forgets a finished scope: its remaining handles were dropped or leaked.
    pub fn close_scope(&mut self, scope: u32) {
        self.scopes.remove(&scope);
        for rid in self.reqs.ids() {
            if self
                .reqs
                .get(rid)
                .is_some_and(|r| r.scope == scope && r.done.is_some())
            {
                self.reqs.remove(rid);
            }
        }
    }

    // ---- sending ----------------------------------------------------------------------

    /// Starts a send of `len` bytes at `ptr` to `dest`.
    ///
    /// # Safety
    /// `ptr` must be valid for reads of `len` bytes and not modified until the request
    /// completes (the `keep` may own it).
    pub unsafe fn isend(
        &mut self,
        dest: Rank,
        tag: i32,
        ptr: *const u8,
        len: usize,
        keep: Keep,
        scope: u32,
    ) -> Result<ReqId, Error> {
        // SAFETY: forwarded contract.
        unsafe { self.isend_mode(dest, tag, ptr, len, keep, scope, false) }
    }

    /// [`State::isend`]; a `sync` send goes by rendezvous whatever its length, so that it
    /// completes only once a receive has matched it (MPI's synchronous mode).
    ///
    /// # Safety
    /// As [`State::isend`].
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn isend_mode(
        &mut self,
        dest: Rank,
        tag: i32,
        ptr: *const u8,
        len: usize,
        keep: Keep,
        scope: u32,
        sync: bool,
    ) -> Result<ReqId, Error> {
        self.check_peer(dest)?;
        let ptr = Mem(ptr as *mut u8);
        let status = Status {
            source: dest,
            tag,
            len,
        };
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        if dest == self.me {
            // SAFETY: forwarded contract.
            return Ok(unsafe { self.send_local(tag, ptr, len, keep, scope) });
        }
        if !sync && len <= self.eager_limit(dest) {
            // SAFETY: the caller's buffer is valid for len bytes; the copy ends its use.
            let msg = env::eager(tag, unsafe { ptr.slice(len) });
            let res = match self.t.as_mut() {
                Some(t) => t.send(dest, msg, false).map(|_| status).map_err(send_error),
                None => Err(self.failed.clone().unwrap_or(Error::Finalized)),
            };
            self.stats.eager_sent += 1;
            let kind = Kind::Send {
                ptr,
                len,
                phase: SendPhase::Data,
                error: None,
            };
            let rid = self.new_req(kind, dest, tag, scope, keep);
            self.complete(rid, res);
            return Ok(rid);
        }
        let kind = Kind::Send {
            ptr,
            len,
            phase: SendPhase::Rts,
            error: None,
        };
        let rid = self.new_req(kind, dest, tag, scope, keep);
        let p = &self.peers[dest as usize];
        let addr = (p.local && self.set.single_copy).then_some(ptr.0 as u64);
        let rts = env::control(&Envelope::Rts {
            tag,
            len: len as u64,
            sreq: rid,
            addr,
        });
        self.stats.rndv_sent += 1;
        let sent = match self.t.as_mut() {
            Some(t) => t.send(dest, rts, false).map_err(send_error),
            None => Err(self.failed.clone().unwrap_or(Error::Finalized)),
        };
        match sent {
            Ok(_) => self.set_interest(rid, Some(dest)),
            Err(e) => self.complete(rid, Err(e)),
        }
        Ok(rid)
    }

    /// A send to this process itself: matched here, no transport.
    ///
    /// # Safety
    /// As [`State::isend`].
    unsafe fn send_local(
        &mut self,
        tag: i32,
        ptr: Mem,
        len: usize,
        keep: Keep,
        scope: u32,
    ) -> ReqId {
        let status = Status {
            source: self.me,
            tag,
            len,
        };
        let kind = Kind::Send {
            ptr,
            len,
            phase: SendPhase::Local,
            error: None,
        };
        let sid = self.new_req(kind, self.me, tag, scope, keep);
        if let Some(rid) = self.posted.take(self.me, tag) {
            // SAFETY: the send's buffer is valid for len bytes (caller's contract).
            let data = unsafe { ptr.slice(len) };
            self.deliver_copy(rid, self.me, tag, data);
            self.complete(sid, Ok(status));
        } else if len <= self.set.eager {
            // SAFETY: as above; the copy ends the send's use of the buffer.
            let data = unsafe { ptr.slice(len) }.to_vec();
            self.unexp.push(self.me, tag, Unexp::Eager { data, off: 0 });
            self.stats.unexpected += 1;
            self.complete(sid, Ok(status));
        } else {
            self.unexp.push(self.me, tag, Unexp::Local { sreq: sid });
            self.stats.unexpected += 1;
        }
        sid
    }

    fn send_ctl(&mut self, to: Rank, e: Envelope) -> Result<(), Error> {
        match self.t.as_mut() {
            Some(t) => t
                .send(to, env::control(&e), false)
                .map(|_| ())
                .map_err(send_error),
            None => Err(self.failed.clone().unwrap_or(Error::Finalized)),
        }
    }

    fn on_cts(&mut self, from: Rank, sreq: u64, rreq: u64) {
        let Some(r) = self.reqs.get_mut(sreq) else {
            self.stats.bad += 1;
            return;
        };
        let Kind::Send {
            ptr, len, phase, ..
        } = &mut r.kind
        else {
            self.stats.bad += 1;
            return;
        };
        // After a split copy the receiver asks for the body through the transport when a
        // part could not be copied in place.
        if !matches!(*phase, SendPhase::Rts | SendPhase::Split)
            || r.peer != from
            || r.done.is_some()
        {
            self.stats.bad += 1;
            return;
        }
        *phase = SendPhase::Data;
        let (ptr, len) = (*ptr, *len);
        let body = Bytes::from_owner(Tracked {
            ptr,
            len,
            rid: sreq,
            released: self.released.clone(),
        });
        let hdr = Envelope::Data {
            rreq,
            len: len as u64,
        };
        // The body's owner reports its release whatever happens to it (sent, or dropped
        // with an error); the request completes then, with the error if there was one.
        let res = self
            .send_ctl(from, hdr)
            .and_then(|()| match self.t.as_mut() {
                Some(t) => t.send(from, body, false).map(|_| ()).map_err(send_error),
                None => Err(self.failed.clone().unwrap_or(Error::Finalized)),
            });
        if let Err(e) = res
            && let Some(Req {
                kind: Kind::Send { error, .. },
                ..
            }) = self.reqs.get_mut(sreq)
        {
            *error = Some(e);
        }
    }

    fn on_fin(&mut self, from: Rank, sreq: u64) {
        let ok = self.reqs.get(sreq).is_some_and(|r| {
            r.peer == from
                && r.done.is_none()
                && matches!(
                    r.kind,
                    Kind::Send {
                        phase: SendPhase::Rts | SendPhase::Split,
                        ..
                    }
                )
        });
        if !ok {
            self.stats.bad += 1;
            return;
        }
        let st = self.send_status(sreq);
        self.complete(sreq, Ok(st));
    }

    fn send_status(&self, sreq: ReqId) -> Status {
        match self.reqs.get(sreq) {
            Some(Req {
                kind: Kind::Send { len, .. },
                peer,
                tag,
                ..
            }) => Status {
                source: *peer,
                tag: *tag,
                len: *len,
            },
            _ => Status::default(),
        }
    }

    /// Completes the sends whose bodies the transport has let go of.
    fn drain_released(&mut self) -> bool {
        if self.released.pending.load(Ordering::Acquire) == 0 {
            return false;
        }
        let mut got = std::mem::take(&mut self.scratch);
        {
            let mut ids = self.released.ids.lock().unwrap_or_else(|e| e.into_inner());
            self.released.pending.fetch_sub(ids.len(), Ordering::AcqRel);
            got.append(&mut ids);
        }
        let any = !got.is_empty();
        for rid in got.drain(..) {
            let Some(r) = self.reqs.get_mut(rid) else {
                continue;
            };
            let Kind::Send {
                phase: SendPhase::Data,
                error,
                ..
            } = &mut r.kind
            else {
                continue;
            };
            let err = error.take();
            let peer = r.peer;
            let res = match err
                .or_else(|| self.failed.clone())
                .or_else(|| self.peers[peer as usize].dead.clone())
            {
                Some(e) => Err(e),
                None => Ok(self.send_status(rid)),
            };
            self.complete(rid, res);
        }
        self.scratch = got;
        any
    }

    // ---- receiving --------------------------------------------------------------------

    /// Posts a receive.
    ///
    /// # Safety
    /// A [`RecvBuf::Ptr`] must be valid for writes of `cap` bytes, not accessed by anyone
    /// else until the request completes.
    pub unsafe fn irecv(
        &mut self,
        src: Option<Rank>,
        tag: Sel,
        buf: RecvBuf,
        keep: Keep,
        scope: u32,
    ) -> Result<ReqId, Error> {
        if let Some(s) = src {
            self.check_peer(s)?;
        }
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        let kind = Kind::Recv {
            src,
            tag,
            buf,
            phase: RecvPhase::Posted,
        };
        let rid = self.new_req(
            kind,
            src.unwrap_or(0),
            tag.exact().unwrap_or(0),
            scope,
            keep,
        );
        let Some(a) = self.unexp.take(src, tag) else {
            if let Some(s) = src
                && let Some(e) = self.peers[s as usize].dead.clone()
            {
                self.complete(rid, Err(e));
                return Ok(rid);
            }
            self.posted.post(src, tag, rid);
            self.set_interest(rid, src);
            return Ok(rid);
        };
        self.deliver_arrived(rid, a);
        Ok(rid)
    }

    /// Hands an arrived message to the receive `rid` that matched it.
    fn deliver_arrived(&mut self, rid: ReqId, a: Arrived<Unexp>) {
        let (from, t) = (a.src, a.tag);
        match a.item {
            Unexp::Eager { data, off } => self.deliver_copy(rid, from, t, &data[off..]),
            Unexp::Announced { id, len } => self.take_announced(rid, from, t, id, len),
            Unexp::Rts { len, sreq, addr } => self.start_rndv(rid, from, t, len, sreq, addr),
            Unexp::Local { sreq } => self.match_local(sreq, rid, t),
        }
    }

    /// Takes the earliest arrived message matching (`src`, `tag`) out of matching (no
    /// receive takes it any more): its status and a claim number for
    /// [`State::irecv_claimed`] (MPI_Mprobe's message handle).
    pub fn claim(&mut self, src: Option<Rank>, tag: Sel) -> Option<(Status, u64)> {
        let st = self.iprobe(src, tag)?;
        let a = self.unexp.take(src, tag)?;
        let c = self.next_claim;
        self.next_claim += 1;
        self.claimed.insert(c, a);
        Some((st, c))
    }

    /// Receives the message of claim `c` (see [`State::claim`]).
    ///
    /// # Safety
    /// As [`State::irecv`].
    pub unsafe fn irecv_claimed(
        &mut self,
        c: u64,
        buf: RecvBuf,
        keep: Keep,
        scope: u32,
    ) -> Result<ReqId, Error> {
        let a = self.claimed.remove(&c).ok_or(Error::InvalidRequest)?;
        let kind = Kind::Recv {
            src: Some(a.src),
            tag: Sel::Is(a.tag),
            buf,
            phase: RecvPhase::Posted,
        };
        let rid = self.new_req(kind, a.src, a.tag, scope, keep);
        if let Some(e) = self.peers[a.src as usize].dead.clone() {
            self.complete(rid, Err(e));
            return Ok(rid);
        }
        self.deliver_arrived(rid, a);
        Ok(rid)
    }

    /// Sets the matched receive's source and tag.
    fn matched(&mut self, rid: ReqId, from: Rank, tag: i32) {
        if let Some(r) = self.reqs.get_mut(rid) {
            r.peer = from;
            r.tag = tag;
        }
    }

    /// Copies an eager payload into the receive `rid` and completes it (truncation is an
    /// error on the request; the prefix that fits is delivered).
    fn deliver_copy(&mut self, rid: ReqId, from: Rank, tag: i32, data: &[u8]) {
        self.matched(rid, from, tag);
        self.stats.received += 1;
        let Some(r) = self.reqs.get_mut(rid) else {
            return;
        };
        let Kind::Recv { buf, .. } = &r.kind else {
            return;
        };
        let cap = buf.cap();
        let n = data.len().min(cap);
        match *buf {
            // SAFETY: the receive is incomplete, so its buffer is valid for cap >= n bytes.
            RecvBuf::Ptr { ptr, .. } => unsafe { ptr.fill(&data[..n]) },
            RecvBuf::Alloc { .. } => r.keep = Keep::Vec(data[..n].to_vec()),
        }
        let res = self.recv_result(from, tag, data.len(), cap);
        self.complete(rid, res);
    }

    /// Delivers a whole vector (a rendezvous body): moved into an `Alloc` receive.
    fn deliver_vec(&mut self, rid: ReqId, from: Rank, tag: i32, data: Vec<u8>) {
        let alloc = matches!(
            self.reqs.get(rid),
            Some(Req {
                kind: Kind::Recv {
                    buf: RecvBuf::Alloc { max },
                    ..
                },
                ..
            }) if data.len() <= *max
        );
        if !alloc {
            return self.deliver_copy(rid, from, tag, &data);
        }
        self.matched(rid, from, tag);
        self.stats.received += 1;
        let len = data.len();
        if let Some(r) = self.reqs.get_mut(rid) {
            r.keep = Keep::Vec(data);
        }
        self.complete(
            rid,
            Ok(Status {
                source: from,
                tag,
                len,
            }),
        );
    }

    fn recv_result(&self, from: Rank, tag: i32, len: usize, cap: usize) -> Result<Status, Error> {
        if len > cap {
            Err(Error::Truncated {
                peer: from,
                tag,
                len: len as u64,
                cap,
            })
        } else {
            Ok(Status {
                source: from,
                tag,
                len,
            })
        }
    }

    fn set_recv_phase(&mut self, rid: ReqId, p: RecvPhase) {
        if let Some(Req {
            kind: Kind::Recv { phase, .. },
            ..
        }) = self.reqs.get_mut(rid)
        {
            *phase = p;
        }
    }

    /// A receive matched an announced (not yet accepted) eager message.
    fn take_announced(&mut self, rid: ReqId, from: Rank, tag: i32, id: MsgId, len: u64) {
        self.matched(rid, from, tag);
        if let Some(Binding::Arrived(data)) = self.bindings.remove(&(from, id)) {
            let payload = data.get(env::EAGER_HDR..).unwrap_or(&[]);
            return self.deliver_copy(rid, from, tag, payload);
        }
        if let Some(e) = self.peers[from as usize].dead.clone() {
            return self.complete(rid, Err(e));
        }
        // The length is checked when the data arrives (deliver_copy reports truncation).
        let _ = len;
        self.bindings.insert((from, id), Binding::Eager(rid));
        self.set_recv_phase(rid, RecvPhase::Eager { from });
        self.set_interest(rid, Some(from));
        if let Some(t) = self.t.as_mut() {
            t.accept(from, id);
        }
    }

    /// A receive matched an RTS: read in place, or clear the sender to send.
    fn start_rndv(
        &mut self,
        rid: ReqId,
        from: Rank,
        tag: i32,
        len: u64,
        sreq: u64,
        addr: Option<u64>,
    ) {
        self.matched(rid, from, tag);
        if let Some(e) = self.peers[from as usize].dead.clone() {
            return self.complete(rid, Err(e));
        }
        let Some(Req {
            kind: Kind::Recv { buf, .. },
            ..
        }) = self.reqs.get(rid)
        else {
            return;
        };
        let cap = buf.cap();
        if len > cap as u64 {
            // Refuse the body: the sender completes; this receive reports the truncation.
            let _ = self.send_ctl(from, Envelope::Fin { sreq });
            return self.complete(
                rid,
                Err(Error::Truncated {
                    peer: from,
                    tag,
                    len,
                    cap,
                }),
            );
        }
        let len = len as usize;
        if let (Some(a), Some(p)) = (addr, self.peers[from as usize].vm) {
            if len >= self.set.split
                && let Some(dst) = self.in_place_target(rid, len)
            {
                return self.start_split(rid, from, len, sreq, (p.pid as i32, a), dst);
            }
            match self.read_in_place(rid, p.pid as i32, a, len) {
                Ok(()) => {
                    self.stats.single_copy += 1;
                    self.stats.single_copy_bytes += len as u64;
                    self.stats.received += 1;
                    let _ = self.send_ctl(from, Envelope::Fin { sreq });
                    return self.complete(
                        rid,
                        Ok(Status {
                            source: from,
                            tag,
                            len,
                        }),
                    );
                }
                Err(e) => {
                    self.stats.single_copy_refused += 1;
                    if vm::is_refusal(&e) {
                        self.peers[from as usize].vm = None;
                    }
                }
            }
        }
        if let Err(e) = self.send_ctl(from, Envelope::Cts { sreq, rreq: rid }) {
            return self.complete(rid, Err(e));
        }
        self.set_recv_phase(
            rid,
            RecvPhase::Data {
                from,
                len: len as u64,
            },
        );
        self.set_interest(rid, Some(from));
    }

    /// Where a receive's `len`-byte body is copied in place: the caller's buffer, or a
    /// vector of `len` bytes' capacity made now for a receive into a vector of its own
    /// (its length is set once the body is in, [`State::in_place_done`]); `None` when
    /// there is none, or the allocator refused that capacity.
    fn in_place_target(&mut self, rid: ReqId, len: usize) -> Option<Mem> {
        let r = self.reqs.get_mut(rid)?;
        match r.kind {
            Kind::Recv {
                buf: RecvBuf::Ptr { ptr, .. },
                ..
            } => Some(ptr),
            Kind::Recv {
                buf: RecvBuf::Alloc { .. },
                ..
            } => {
                // `len` is what the sender announced (up to the receive's own limit, which
                // may be unbounded): ask, so that a size the allocator cannot meet is a
                // refused single copy (the body then comes through the transport, within
                // its per-peer budget), not an abort. Pages are touched only as bytes
                // are read into them.
                let mut v: Vec<u8> = Vec::new();
                v.try_reserve_exact(len).ok()?;
                let p = Mem(v.as_mut_ptr());
                r.keep = Keep::Vec(v);
                Some(p)
            }
            Kind::Send { .. } => None,
        }
    }

    /// The place [`State::in_place_target`] gave, for a receive in a split copy.
    fn in_place_dst(&mut self, rid: ReqId) -> Option<Mem> {
        match self.reqs.get_mut(rid)? {
            Req {
                kind:
                    Kind::Recv {
                        buf: RecvBuf::Ptr { ptr, .. },
                        ..
                    },
                ..
            } => Some(*ptr),
            Req {
                keep: Keep::Vec(v), ..
            } => Some(Mem(v.as_mut_ptr())),
            _ => None,
        }
    }

    /// The body copied in place is whole: a receive into a vector of its own gets its
    /// length.
    fn in_place_done(&mut self, rid: ReqId, len: usize) {
        if let Some(Req {
            kind:
                Kind::Recv {
                    buf: RecvBuf::Alloc { .. },
                    ..
                },
            keep: Keep::Vec(v),
            ..
        }) = self.reqs.get_mut(rid)
        {
            // SAFETY: the vector was made with capacity len (in_place_target), and its
            // first len bytes are written (both parts of a split copy, or one read).
            unsafe { v.set_len(len) };
        }
    }

    /// Split copy, the receiver's side: asks the sender to write the body's second half
    /// into `dst` and reads the first half itself, so that the two halves are copied on
    /// two cores at once. `process_vm_readv` pins every page it copies, which makes one
    /// copy by one process slower than two processes copying half each. The receive
    /// completes when the sender's WROTE arrives (`on_wrote`).
    fn start_split(
        &mut self,
        rid: ReqId,
        from: Rank,
        len: usize,
        sreq: u64,
        (pid, addr): (i32, u64),
        dst: Mem,
    ) {
        // Half, on a page boundary, so that neither side pins a page the other copies.
        let at = (len / 2) & !4095;
        let split = Envelope::Split {
            sreq,
            addr: dst.0 as u64,
            at: at as u64,
        };
        if let Err(e) = self.send_ctl(from, split) {
            return self.complete(rid, Err(e));
        }
        // SAFETY: the receive is incomplete and at <= len <= its capacity.
        let read = unsafe { self.read_part(pid, addr, dst.0, at) };
        if let Err(e) = &read
            && vm::is_refusal(e)
        {
            self.peers[from as usize].vm = None;
        }
        self.set_recv_phase(
            rid,
            RecvPhase::Split {
                from,
                sreq,
                len: len as u64,
                addr,
                at: at as u64,
                read_ok: read.is_ok(),
            },
        );
        self.splits.insert((from, sreq), rid);
        self.set_interest(rid, Some(from));
    }

    /// `len` bytes at `addr` in process `pid` to `dst` (refused when the test knob says
    /// so).
    ///
    /// # Safety
    /// As [`vm::read`].
    unsafe fn read_part(
        &self,
        pid: i32,
        addr: u64,
        dst: *mut u8,
        len: usize,
    ) -> std::io::Result<()> {
        if self.set.refuse_reads {
            return Err(std::io::Error::from_raw_os_error(libc::EPERM));
        }
        // SAFETY: forwarded contract.
        unsafe { vm::read(pid, addr, dst, len) }
    }

    /// Split copy, the sender's side: writes the body from `at` on into the receiver's
    /// buffer at `addr`, then says whether it could. The receiver is still reading the
    /// first part, so the send completes at its FIN, as any single-copy send.
    fn on_split(&mut self, from: Rank, sreq: u64, addr: u64, at: u64) {
        let vm = self.peers[from as usize].vm;
        let Some(Req {
            kind: Kind::Send {
                ptr, len, phase, ..
            },
            peer,
            done: None,
            ..
        }) = self.reqs.get_mut(sreq)
        else {
            self.stats.bad += 1;
            return;
        };
        if *phase != SendPhase::Rts || *peer != from || at > *len as u64 {
            self.stats.bad += 1;
            return;
        }
        *phase = SendPhase::Split;
        let (ptr, len, at) = (*ptr, *len, at as usize);
        // The address is the receiver's word: the kernel checks it in the receiver's
        // memory, so a wrong one can only fail this write, never touch ours.
        let ok = match vm {
            Some(p) if !self.set.refuse_reads => {
                // SAFETY: the send is incomplete, so its buffer is valid for len bytes,
                // and at <= len.
                let r = unsafe {
                    vm::write(
                        p.pid as i32,
                        addr.wrapping_add(at as u64),
                        ptr.0.add(at),
                        len - at,
                    )
                };
                if let Err(e) = &r
                    && vm::is_refusal(e)
                {
                    self.peers[from as usize].vm = None;
                }
                r.is_ok()
            }
            _ => false,
        };
        if let Err(e) = self.send_ctl(from, Envelope::Wrote { sreq, ok }) {
            self.complete(sreq, Err(e));
        }
    }

    /// Split copy, the receiver's side, at the sender's WROTE: the receive completes if
    /// both parts arrived in place (this process copies the sender's part if the sender
    /// could not); otherwise the whole body comes through the transport (CTS).
    fn on_wrote(&mut self, from: Rank, sreq: u64, wrote: bool) {
        let Some(rid) = self.splits.remove(&(from, sreq)) else {
            self.stats.bad += 1;
            return;
        };
        let dst = self.in_place_dst(rid);
        let Some(Req {
            kind:
                Kind::Recv {
                    phase:
                        RecvPhase::Split {
                            len,
                            addr,
                            at,
                            read_ok,
                            ..
                        },
                    ..
                },
            tag,
            done: None,
            ..
        }) = self.reqs.get(rid)
        else {
            self.stats.bad += 1;
            return;
        };
        let (len, addr, at, tag) = (*len as usize, *addr, *at as usize, *tag);
        let mut ok = *read_ok && dst.is_some();
        if ok && !wrote {
            ok = match (self.peers[from as usize].vm, dst) {
                // SAFETY: the receive is incomplete and at <= len <= its capacity.
                (Some(p), Some(d)) => unsafe {
                    self.read_part(
                        p.pid as i32,
                        addr.wrapping_add(at as u64),
                        d.0.add(at),
                        len - at,
                    )
                }
                .is_ok(),
                _ => false,
            };
        }
        if !ok {
            self.stats.single_copy_refused += 1;
            if let Err(e) = self.send_ctl(from, Envelope::Cts { sreq, rreq: rid }) {
                return self.complete(rid, Err(e));
            }
            return self.set_recv_phase(
                rid,
                RecvPhase::Data {
                    from,
                    len: len as u64,
                },
            );
        }
        self.stats.single_copy += 1;
        self.stats.single_copy_bytes += len as u64;
        if wrote {
            self.stats.split_copy += 1;
        }
        self.stats.received += 1;
        self.in_place_done(rid, len);
        let _ = self.send_ctl(from, Envelope::Fin { sreq });
        self.complete(
            rid,
            Ok(Status {
                source: from,
                tag,
                len,
            }),
        );
    }

    /// Copies `len` bytes at `addr` in process `pid` into the receive's buffer.
    fn read_in_place(
        &mut self,
        rid: ReqId,
        pid: i32,
        addr: u64,
        len: usize,
    ) -> std::io::Result<()> {
        let Some(dst) = self.in_place_target(rid, len) else {
            return Err(std::io::Error::from_raw_os_error(libc::EINVAL));
        };
        // SAFETY: the receive is incomplete and len <= its capacity (checked by the
        // caller).
        unsafe { self.read_part(pid, addr, dst.0, len) }?;
        self.in_place_done(rid, len);
        Ok(())
    }

    /// A receive matched this process's own rendezvous-size send.
    fn match_local(&mut self, sreq: ReqId, rid: ReqId, tag: i32) {
        let (ptr, len) = match self.reqs.get(sreq) {
            Some(Req {
                kind: Kind::Send { ptr, len, .. },
                ..
            }) => (*ptr, *len),
            _ => return self.complete(rid, Err(Error::InvalidRequest)),
        };
        // SAFETY: the send is incomplete, so its buffer is valid for len bytes; the receive
        // buffer is a different request's (overlap would be the caller's breach of both
        // requests' contracts).
        let data = unsafe { ptr.slice(len) };
        self.deliver_copy(rid, self.me, tag, data);
        let st = self.send_status(sreq);
        self.complete(sreq, Ok(st));
    }

    /// The earliest unexpected message matching (`src`, `tag`), without receiving it.
    pub fn iprobe(&self, src: Option<Rank>, tag: Sel) -> Option<Status> {
        let (from, t, u) = self.unexp.peek(src, tag)?;
        let len = match u {
            Unexp::Eager { data, off } => data.len() - off,
            Unexp::Announced { len, .. } | Unexp::Rts { len, .. } => *len as usize,
            Unexp::Local { sreq } => self.send_status(*sreq).len,
        };
        Some(Status {
            source: from,
            tag: t,
            len,
        })
    }

    // ---- events -----------------------------------------------------------------------

    /// Drives the transport once and handles everything it delivered. True if anything
    /// moved.
    pub fn pump(&mut self) -> bool {
        if let Some(f) = self
            .job
            .as_ref()
            .and_then(|j| j.is_failed().then(|| j.failure()))
        {
            let f = f.map_or_else(
                || Error::JobFailed {
                    rank: None,
                    message: "the job failed".into(),
                },
                |f| Error::JobFailed {
                    rank: f.rank(),
                    message: f.to_string(),
                },
            );
            self.poison(f);
            return true;
        }
        let Some(t) = self.t.as_mut() else {
            return false;
        };
        if let Err(e) = t.check() {
            self.poison(send_error(e));
            return true;
        }
        let mut any = match t.step() {
            Ok(p) => p.any(),
            Err(e) => {
                self.poison(send_error(e));
                return true;
            }
        };
        while let Some(ev) = self.t.as_mut().and_then(|t| t.poll_event()) {
            any = true;
            self.on_event(ev);
        }
        any | self.drain_released()
    }

    fn on_event(&mut self, ev: Event) {
        match ev {
            Event::Message { from, id, data } => {
                if self.valid_source(from) {
                    self.on_message(from, id, data);
                }
            }
            Event::Announce {
                from,
                id,
                total,
                head,
            } => {
                if self.valid_source(from) {
                    self.sighting(from, Sight::Head { id, total, head });
                }
            }
            Event::Sent { .. } => {}
            Event::PeerDead { peer, silent_for } => {
                if self.valid_source(peer) {
                    self.on_peer_dead(peer, silent_for);
                }
            }
        }
    }

    fn valid_source(&mut self, r: Rank) -> bool {
        let ok = r < self.n && r != self.me;
        if !ok {
            self.stats.bad += 1;
        }
        ok
    }

    fn on_message(&mut self, from: Rank, id: MsgId, data: Vec<u8>) {
        // Bindings exist only with announcing transports: skip the hash otherwise.
        let b = if self.bindings.is_empty() {
            None
        } else {
            self.bindings.remove(&(from, id))
        };
        let Some(b) = b else {
            return self.sighting(from, Sight::Full(data));
        };
        match b {
            Binding::Eager(rid) => {
                let ok = self.reqs.get(rid).is_some_and(|r| {
                    r.done.is_none()
                        && matches!(
                            r.kind,
                            Kind::Recv {
                                phase: RecvPhase::Eager { from: f },
                                ..
                            } if f == from
                        )
                });
                if ok {
                    let tag = self.reqs.get(rid).map_or(0, |r| r.tag);
                    match data.get(env::EAGER_HDR..) {
                        Some(p) => self.deliver_copy(rid, from, tag, p),
                        None => {
                            self.stats.bad += 1;
                            self.deliver_copy(rid, from, tag, &[]);
                        }
                    }
                }
            }
            Binding::Raw(target) => self.finish_raw(from, target, data),
            Binding::Unmatched => {
                self.bindings.insert((from, id), Binding::Arrived(data));
            }
            Binding::Arrived(old) => {
                // Delivered twice: keep the first.
                self.stats.bad += 1;
                self.bindings.insert((from, id), Binding::Arrived(old));
            }
            Binding::Consumed => {}
            Binding::Deferred => self.undefer(from, data),
        }
    }

    fn accept(&mut self, from: Rank, id: MsgId) {
        if let Some(t) = self.t.as_mut() {
            t.accept(from, id);
        }
    }

    /// The first sight of a message from `from`: its whole data, or an announcement.
    /// These come in per-pair order, which is the order envelopes are matched in; behind
    /// a deferred message they wait until it has arrived.
    fn sighting(&mut self, from: Rank, s: Sight) {
        let p = &mut self.peers[from as usize];
        if p.deferring {
            p.held.push_back(s);
            return;
        }
        self.sight(from, s);
    }

    /// The deferred message from `from` has arrived whole: it matches now, then what
    /// was held behind it, up to the next deferral.
    fn undefer(&mut self, from: Rank, data: Vec<u8>) {
        self.peers[from as usize].deferring = false;
        self.sight(from, Sight::Full(data));
        while !self.peers[from as usize].deferring {
            let Some(s) = self.peers[from as usize].held.pop_front() else {
                break;
            };
            self.sight(from, s);
        }
    }

    /// Handles one sighting now.
    fn sight(&mut self, from: Rank, s: Sight) {
        if let Some(target) = self.peers[from as usize].raw.take() {
            return match s {
                Sight::Full(data) => self.finish_raw(from, target, data),
                Sight::Head { id, .. } => {
                    self.bindings.insert((from, id), Binding::Raw(target));
                    self.accept(from, id);
                }
            };
        }
        let bytes: &[u8] = match &s {
            Sight::Full(d) => d,
            Sight::Head { head, .. } => head,
        };
        let e = match env::decode(bytes) {
            Ok(e) => e,
            Err(bad) => {
                if let Sight::Head { id, total, head } = &s {
                    if (head.len() as u64) < *total && head.len() < env::MAX_ENVELOPE {
                        // Too little to match on: take it whole, match it on arrival.
                        self.bindings.insert((from, *id), Binding::Deferred);
                        self.peers[from as usize].deferring = true;
                    } else {
                        self.stats.bad += 1;
                        self.bindings.insert((from, *id), Binding::Consumed);
                    }
                    self.accept(from, *id);
                } else {
                    let _ = bad;
                    self.stats.bad += 1;
                }
                return;
            }
        };
        if let Envelope::Eager { tag } = e {
            return self.on_eager(from, tag, s);
        }
        if let Sight::Head { id, .. } = s {
            self.bindings.insert((from, id), Binding::Consumed);
            self.accept(from, id);
        }
        match e {
            Envelope::Eager { .. } => {}
            Envelope::Rts {
                tag,
                len,
                sreq,
                addr,
            } => match self.posted.take(from, tag) {
                Some(rid) => self.start_rndv(rid, from, tag, len, sreq, addr),
                None => {
                    self.stats.unexpected += 1;
                    self.unexp.push(from, tag, Unexp::Rts { len, sreq, addr });
                }
            },
            Envelope::Cts { sreq, rreq } => self.on_cts(from, sreq, rreq),
            Envelope::Fin { sreq } => self.on_fin(from, sreq),
            Envelope::Split { sreq, addr, at } => self.on_split(from, sreq, addr, at),
            Envelope::Wrote { sreq, ok } => self.on_wrote(from, sreq, ok),
            Envelope::Data { rreq, len } => {
                let ok = self.reqs.get(rreq).is_some_and(|r| {
                    r.done.is_none()
                        && matches!(
                            r.kind,
                            Kind::Recv { phase: RecvPhase::Data { from: f, len: l }, .. }
                                if f == from && l == len
                        )
                });
                self.peers[from as usize].raw = Some(if ok {
                    RawTarget::Recv { rid: rreq, len }
                } else {
                    self.stats.bad += 1;
                    RawTarget::Discard
                });
            }
        }
    }

    fn on_eager(&mut self, from: Rank, tag: i32, s: Sight) {
        let matched = self.posted.take(from, tag);
        match (s, matched) {
            (Sight::Full(data), Some(rid)) => {
                self.deliver_copy(rid, from, tag, &data[env::EAGER_HDR..]);
            }
            (Sight::Full(data), None) => {
                self.stats.unexpected += 1;
                self.unexp.push(
                    from,
                    tag,
                    Unexp::Eager {
                        data,
                        off: env::EAGER_HDR,
                    },
                );
            }
            (Sight::Head { id, total, .. }, Some(rid)) => {
                let len = total.saturating_sub(env::EAGER_HDR as u64);
                self.take_announced(rid, from, tag, id, len);
            }
            (Sight::Head { id, total, .. }, None) => {
                // Not accepted: with RMPP the data stays with the sender until a receive
                // for it is posted.
                self.stats.unexpected += 1;
                let len = total.saturating_sub(env::EAGER_HDR as u64);
                self.bindings.insert((from, id), Binding::Unmatched);
                self.unexp.push(from, tag, Unexp::Announced { id, len });
            }
        }
    }

    fn finish_raw(&mut self, from: Rank, target: RawTarget, data: Vec<u8>) {
        let RawTarget::Recv { rid, len } = target else {
            return;
        };
        let ok = self.reqs.get(rid).is_some_and(|r| {
            r.done.is_none()
                && matches!(
                    r.kind,
                    Kind::Recv { phase: RecvPhase::Data { from: f, len: l }, .. }
                        if f == from && l == len
                )
        });
        if !ok {
            return;
        }
        if data.len() as u64 != len {
            self.stats.bad += 1;
            let e = Error::Transport(format!(
                "rank {from} sent a body of {} bytes for a message of {len}",
                data.len()
            ));
            return self.complete(rid, Err(e));
        }
        let tag = self.reqs.get(rid).map_or(0, |r| r.tag);
        self.deliver_vec(rid, from, tag, data);
    }

    fn on_peer_dead(&mut self, peer: Rank, silent_for: Time) {
        let err = Error::PeerDead(crate::PeerDead { peer, silent_for });
        let p = &mut self.peers[peer as usize];
        if p.dead.is_some() {
            return;
        }
        p.dead = Some(err.clone());
        p.raw = None;
        p.vm = None;
        p.deferring = false;
        p.held.clear();
        self.bindings.retain(|k, _| k.0 != peer);
        self.splits.retain(|k, _| k.0 != peer);
        for rid in self.posted.drain_source(peer) {
            self.complete(rid, Err(err.clone()));
        }
        for rid in self.reqs.ids() {
            let Some(r) = self.reqs.get_mut(rid) else {
                continue;
            };
            if r.done.is_some() {
                continue;
            }
            let fail = match &mut r.kind {
                Kind::Send { phase, error, .. } if r.peer == peer => match phase {
                    SendPhase::Rts | SendPhase::Split => true,
                    // Completes when the transport lets go of the body (close_peer
                    // dropped it already, normally).
                    SendPhase::Data => {
                        *error = Some(err.clone());
                        false
                    }
                    SendPhase::Local => false,
                },
                Kind::Recv {
                    phase:
                        RecvPhase::Eager { from }
                        | RecvPhase::Data { from, .. }
                        | RecvPhase::Split { from, .. },
                    ..
                } => *from == peer,
                _ => false,
            };
            if fail {
                self.complete(rid, Err(err.clone()));
            }
        }
    }

    /// The job failed or the transport broke: drop the transport (which lets go of every
    /// buffer it held) and fail every request.
    pub fn poison(&mut self, e: Error) {
        if self.failed.is_some() {
            return;
        }
        self.failed = Some(e.clone());
        self.t = None;
        self.drain_released();
        self.bindings.clear();
        for rid in self.reqs.ids() {
            if let Some(Req {
                kind:
                    Kind::Recv {
                        src,
                        tag,
                        phase: RecvPhase::Posted,
                        ..
                    },
                ..
            }) = self.reqs.get(rid)
            {
                let (s, t) = (*src, *tag);
                self.posted.remove(s, t, rid);
            }
            if !self.is_done(rid) {
                self.complete(rid, Err(e.clone()));
            }
        }
    }

    /// Closes the transport at the end (finalize): sends still referenced are let go.
    pub fn close(&mut self) {
        self.poison(Error::Finalized);
    }
}

impl Service for State {
    fn progress(&mut self) -> bool {
        self.pump()
    }

    fn block(&mut self, timeout: Duration) {
        State::block(self, timeout);
    }

    fn busy(&self) -> bool {
        self.incomplete > 0 || self.transport_busy()
    }

    fn wait_handle(&mut self) -> Option<bulkwire_engine::WaitHandle> {
        self.t.as_mut()?.wait_handle()
    }

    /// The transport alone: nothing is matched or delivered into the user's buffers.
    fn keep_alive(&mut self) {
        if let Some(Err(e)) = self.t.as_mut().map(|t| t.step()) {
            self.poison(send_error(e));
        }
    }

    fn keep_alive_interval(&self) -> Option<Duration> {
        self.t.as_ref()?.liveness_interval()
    }
}

#[cfg(test)]
mod tests {
    use crate::{Error, PeerDead};
    use bulkwire_protocol::{ProtoError, SEC};

    #[test]
    fn a_dead_peer_keeps_its_rank_and_silence_in_point_to_point() {
        let d = PeerDead {
            peer: 2,
            silent_for: 4 * SEC,
        };
        for e in [
            bulkwire_engine::Error::PeerDead(d),
            bulkwire_engine::Error::Protocol(ProtoError::PeerDead(d)),
        ] {
            let e = super::send_error(e);
            assert!(matches!(e, Error::PeerDead(x) if x == d), "{e:?}");
            assert_eq!(e.peer(), Some(2));
            assert!(e.to_string().contains("rank 2") && e.to_string().contains("4.0 s"));
        }
    }
}
