//! Communicators: a group, this process's rank in it, and a context of its own, so
//! that messages of different communicators never match. Every `MPI_Comm_*` call but
//! those of the collectives, and attributes.
//!
//! A communicator's point-to-point messages carry the p2p tag `ctx << 16 | tag`, its
//! collectives' `(ctx + 1) << 16 | seq` (`crate::net`); `MPI_ANY_TAG` receives any tag of
//! `ctx` only (`bulkwire_p2p::Tag::AnyIn`). Context ids are agreed by the members when a
//! communicator is made: the lowest id free on all of them (a reduction of bitmaps of the
//! ids each process has in use), so freed ids are reused; a second round confirms that
//! every member could still take it (threads of one process may make communicators at
//! once), else they agree again. Disjoint communicators made by one call (the colours of
//! a split) share an id: their messages never meet, being between different processes.
//!
//! The agreement travels in a context of its own (`CREATE_CTX`), tagged with the parent's
//! context, over plain p2p: gather at the first member, answer from it.

use std::collections::BTreeMap;
use std::ffi::{c_char, c_void};
use std::os::raw::c_int;
use std::sync::atomic::{AtomicU16, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use bulkwire_p2p::{ReqId, Source, Tag};

use crate::error::*;
use crate::group::{self, Group, put, tri};
use crate::handle::{Kind, Raw, Ref, Table};
use crate::net::Net;
use crate::predef::*;
use crate::runtime::{code_of, fail, p2p, put_str};
use crate::topo::Topo;

/// Context ids: even numbers below 32768.
const CONTEXTS: usize = 1 << 14;
const WORLD_CTX: u16 = 0;
const SELF_CTX: u16 = 2;
/// The context of the agreement messages (never a communicator's).
const CREATE_CTX: u16 = 4;
const BITMAP_BYTES: usize = CONTEXTS / 8;

pub struct Communicator {
    /// World ranks in communicator order.
    pub group: Arc<Group>,
    /// This process's rank in the communicator.
    pub rank: u32,
    /// Even; point-to-point context `ctx`, collectives' `ctx + 1`.
    pub ctx: u16,
    /// Same processes in the same order as `MPI_COMM_WORLD`.
    pub world_like: bool,
    pub topo: Option<Topo>,
    pub(crate) errhandler: Mutex<Raw>,
    pub(crate) attrs: Mutex<BTreeMap<c_int, usize>>,
    /// The keys of `attrs` in the order they were set (deleted last-set first at
    /// `MPI_Finalize`, MPI-3.1 8.7.1).
    attr_order: Mutex<Vec<c_int>>,
    pub(crate) name: Mutex<String>,
    coll_seq: AtomicU16,
    /// `MPI_Comm_idup` tickets issued and completed: idups of one communicator agree one
    /// after the other (their messages share a tag), in the order every member issued
    /// them.
    idup_next: AtomicU64,
    idup_done: AtomicU64,
    /// Communicator rank of each world rank (`u32::MAX`: not a member).
    inv: Vec<u32>,
    /// An intercommunicator's remote group (point-to-point ranks name its members).
    pub remote: Option<Arc<Group>>,
}

impl Communicator {
    /// A communicator of `group` as world rank `me` (a member) of a job of `world`
    /// processes sees it.
    fn new(
        group: Arc<Group>,
        ctx: u16,
        topo: Option<Topo>,
        errhandler: Raw,
        (world, me): (u32, u32),
    ) -> Communicator {
        let mut inv = vec![u32::MAX; world as usize];
        for (i, &w) in group.ranks.iter().enumerate() {
            inv[w as usize] = i as u32;
        }
        let world_like = group.ranks.len() == world as usize
            && group.ranks.iter().enumerate().all(|(i, &w)| i as u32 == w);
        Communicator {
            rank: inv[me as usize],
            group,
            ctx,
            world_like,
            topo,
            errhandler: Mutex::new(errhandler),
            attrs: Mutex::new(BTreeMap::new()),
            attr_order: Mutex::new(Vec::new()),
            name: Mutex::new(String::new()),
            coll_seq: AtomicU16::new(0),
            idup_next: AtomicU64::new(0),
            idup_done: AtomicU64::new(0),
            inv,
            remote: None,
        }
    }

    /// This communicator as an intercommunicator with `remote` on the other side.
    fn with_remote(mut self, remote: Arc<Group>) -> Communicator {
        self.world_like = false;
        self.remote = Some(remote);
        self
    }

    pub fn is_inter(&self) -> bool {
        self.remote.is_some()
    }

    /// The group point-to-point ranks name: the remote group of an intercommunicator,
    /// else the communicator's own.
    pub fn peers(&self) -> &Group {
        self.remote.as_deref().unwrap_or(&self.group)
    }

    /// The world rank of point-to-point peer `r`.
    pub fn peer_world(&self, r: u32) -> u32 {
        self.peers().ranks[r as usize]
    }

    /// The point-to-point rank of world rank `w`, if it is a peer.
    pub fn peer_rank_of(&self, w: u32) -> Option<u32> {
        match &self.remote {
            Some(g) => g.rank_of(w),
            None => self.rank_of(w),
        }
    }

    /// Every process of the communicator, both groups of an intercommunicator: the group
    /// whose first member has the lower world rank first (every member computes the
    /// same list).
    fn everyone(&self) -> Vec<u32> {
        match &self.remote {
            None => self.group.ranks.clone(),
            Some(r) => {
                let (a, b) = if self.group.ranks[0] < r.ranks[0] {
                    (&self.group, r)
                } else {
                    (r, &self.group)
                };
                a.ranks.iter().chain(&b.ranks).copied().collect()
            }
        }
    }

    pub fn size(&self) -> u32 {
        self.group.size()
    }

    /// The next sequence number of the communicator's collectives (wrapping).
    pub fn next_coll_tag(&self) -> u16 {
        self.coll_seq.fetch_add(1, Ordering::Relaxed)
    }

    /// A channel in the communicator's collective context.
    pub fn net(&self) -> CommNet<'_> {
        CommNet { comm: self }
    }

    /// The world rank of communicator rank `r`.
    pub fn world(&self, r: u32) -> u32 {
        self.group.ranks[r as usize]
    }

    /// The communicator rank of world rank `w`, if a member.
    pub fn rank_of(&self, w: u32) -> Option<u32> {
        self.inv.get(w as usize).copied().filter(|&r| r != u32::MAX)
    }

    /// The p2p tag of point-to-point `tag` (0..=65535).
    pub fn wire_tag(&self, tag: c_int) -> i32 {
        (i32::from(self.ctx) << 16) | tag
    }

    /// The p2p tag selector of a receive for `tag` (`MPI_ANY_TAG`: any of this context).
    pub fn tag_sel(&self, tag: c_int) -> Tag {
        if tag == MPI_ANY_TAG {
            Tag::AnyIn(self.ctx)
        } else {
            Tag::Is(self.wire_tag(tag))
        }
    }
}

/// [`Net`] over a communicator's collective context.
pub struct CommNet<'a> {
    comm: &'a Communicator,
}

impl CommNet<'_> {
    fn tag(&self, tag: u16) -> i32 {
        (i32::from(self.comm.ctx + 1) << 16) | i32::from(tag)
    }
}

impl Net for CommNet<'_> {
    fn rank(&self) -> u32 {
        self.comm.rank
    }
    fn size(&self) -> u32 {
        self.comm.size()
    }
    unsafe fn isend(&self, to: u32, tag: u16, ptr: *const u8, len: usize) -> Result<ReqId, c_int> {
        let p = p2p()?;
        // SAFETY: forwarded contract.
        unsafe { p.isend_raw(self.comm.world(to), self.tag(tag), ptr, len) }
            .map_err(|e| code_of(&e))
    }
    unsafe fn irecv(&self, from: u32, tag: u16, ptr: *mut u8, cap: usize) -> Result<ReqId, c_int> {
        let p = p2p()?;
        let src = Source::Rank(self.comm.world(from));
        // SAFETY: forwarded contract.
        unsafe { p.irecv_raw(src, Tag::Is(self.tag(tag)), ptr, cap) }.map_err(|e| code_of(&e))
    }
    fn test(&self, id: ReqId) -> Option<Result<usize, c_int>> {
        let p = match p2p() {
            Ok(p) => p,
            Err(e) => return Some(Err(e)),
        };
        p.test_raw(id)
            .map(|r| r.map(|s| s.len).map_err(|e| code_of(&e)))
    }
    fn wait(&self, id: ReqId) -> Result<usize, c_int> {
        p2p()?.wait_raw(id).map(|s| s.len).map_err(|e| code_of(&e))
    }
}

static COMMS: Mutex<Table<Arc<Communicator>>> = Mutex::new(Table::new(Kind::Comm));
static WORLD_COMM: OnceLock<Arc<Communicator>> = OnceLock::new();
static SELF_COMM: OnceLock<Arc<Communicator>> = OnceLock::new();
/// Context ids in use by this process, one bit per even id.
static USED: Mutex<[u8; BITMAP_BYTES]> = Mutex::new([0; BITMAP_BYTES]);

/// Makes `MPI_COMM_WORLD` and `MPI_COMM_SELF` (MPI_Init).
pub(crate) fn init_world(size: u32, rank: u32) {
    let w = Communicator::new(
        Arc::new(Group {
            ranks: (0..size).collect(),
        }),
        WORLD_CTX,
        None,
        MPI_ERRORS_ARE_FATAL,
        (size, rank),
    );
    *w.name.lock().unwrap_or_else(|e| e.into_inner()) = "MPI_COMM_WORLD".into();
    let _ = WORLD_COMM.set(Arc::new(w));
    let s = Communicator::new(
        Arc::new(Group { ranks: vec![rank] }),
        SELF_CTX,
        None,
        MPI_ERRORS_ARE_FATAL,
        (size, rank),
    );
    *s.name.lock().unwrap_or_else(|e| e.into_inner()) = "MPI_COMM_SELF".into();
    let _ = SELF_COMM.set(Arc::new(s));
    let mut used = USED.lock().unwrap_or_else(|e| e.into_inner());
    for c in [WORLD_CTX, SELF_CTX, CREATE_CTX] {
        mark(&mut used, c, true);
    }
}

fn mark(bits: &mut [u8; BITMAP_BYTES], ctx: u16, on: bool) {
    let i = usize::from(ctx / 2);
    if on {
        bits[i / 8] |= 1 << (i % 8);
    } else {
        bits[i / 8] &= !(1 << (i % 8));
    }
}

/// The communicator of a handle.
pub fn lookup(h: Raw) -> Result<Arc<Communicator>, c_int> {
    lookup_ref(h).map(|r| r.arc())
}

/// [`lookup`] lending `MPI_COMM_WORLD` and `MPI_COMM_SELF` instead of sharing them.
pub fn lookup_ref(h: Raw) -> Result<Ref<Communicator>, c_int> {
    match h {
        MPI_COMM_WORLD => WORLD_COMM.get().map(Ref::Static).ok_or(MPI_ERR_COMM),
        MPI_COMM_SELF => SELF_COMM.get().map(Ref::Static).ok_or(MPI_ERR_COMM),
        _ => COMMS
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(h)
            .cloned()
            .map(Ref::Shared)
            .ok_or(MPI_ERR_COMM),
    }
}

/// [`lookup`] for `call`, reporting an invalid handle through `MPI_COMM_WORLD`'s handler.
pub fn get(call: &str, h: Raw) -> Result<Arc<Communicator>, c_int> {
    get_ref(call, h).map(|r| r.arc())
}

/// [`get`] lending `MPI_COMM_WORLD` and `MPI_COMM_SELF`.
pub fn get_ref(call: &str, h: Raw) -> Result<Ref<Communicator>, c_int> {
    lookup_ref(h).map_err(|e| {
        let what = if h == MPI_COMM_NULL {
            format!("{call}: the communicator is MPI_COMM_NULL")
        } else {
            format!("{call}: invalid communicator handle {h:#x}")
        };
        fail(MPI_COMM_WORLD, e, what)
    })
}

/// The error handler of `comm` (`MPI_COMM_WORLD`'s if `comm` is no communicator).
pub fn errhandler_of(comm: Raw) -> Raw {
    let c = lookup(comm).or_else(|_| lookup(MPI_COMM_WORLD));
    match c {
        Ok(c) => *c.errhandler.lock().unwrap_or_else(|e| e.into_inner()),
        Err(_) => MPI_ERRORS_ARE_FATAL,
    }
}

/// The job's size and this process's world rank.
fn job() -> Result<(u32, u32), c_int> {
    let p = p2p()?;
    Ok((p.size(), p.rank()))
}

fn store(c: Communicator) -> Raw {
    COMMS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(Arc::new(c))
}

// ---- agreement among the members -----------------------------------------------------

/// Gathers each member's `mine` at the first member of `members` (world ranks; this
/// process is one of them), which makes the answer with `answer` from all contributions
/// in member order and sends it to all. `key` keeps concurrent agreements on different
/// parents apart.
fn agree(
    members: &[u32],
    key: u16,
    mine: Vec<u8>,
    answer: impl FnOnce(Vec<Vec<u8>>) -> Vec<u8>,
) -> Result<Vec<u8>, c_int> {
    let p = p2p()?;
    let me = p.rank();
    let tag = (i32::from(CREATE_CTX) << 16) | i32::from(key);
    let root = members[0];
    let e = |e: bulkwire_p2p::Error| code_of(&e);
    if me != root {
        p.send(root, tag, &mine).map_err(e)?;
        let (v, _) = p.recv_vec(root, tag, usize::MAX).map_err(e)?;
        return Ok(v);
    }
    let mut all = Vec::with_capacity(members.len());
    all.push(mine);
    for &m in &members[1..] {
        let (v, _) = p.recv_vec(m, tag, usize::MAX).map_err(e)?;
        all.push(v);
    }
    let out = answer(all);
    for &m in &members[1..] {
        p.send(m, tag, &out).map_err(e)?;
    }
    Ok(out)
}

/// This process's contribution to a context agreement: its bitmap of ids in use.
fn used_bitmap() -> Vec<u8> {
    USED.lock().unwrap_or_else(|e| e.into_inner()).to_vec()
}

/// The lowest id free in all of `maps` (each a bitmap at `off`), as two bytes; 0 (the
/// world's id, never free) if none is.
fn lowest_free<'a>(maps: impl Iterator<Item = &'a [u8]>) -> [u8; 2] {
    let mut any = [0u8; BITMAP_BYTES];
    for m in maps {
        for (a, b) in any.iter_mut().zip(m) {
            *a |= b;
        }
    }
    let id = (0..CONTEXTS)
        .find(|&i| any[i / 8] & (1 << (i % 8)) == 0)
        .map_or(0, |i| (i * 2) as u16);
    id.to_le_bytes()
}

/// Marks `ctx` in use here if it is free: false if another communicator of this
/// process took it meanwhile (a creation in another thread).
fn try_take(ctx: u16) -> bool {
    let mut used = USED.lock().unwrap_or_else(|e| e.into_inner());
    let i = usize::from(ctx / 2);
    if ctx == WORLD_CTX || used[i / 8] & (1 << (i % 8)) != 0 {
        return false;
    }
    mark(&mut used, ctx, true);
    true
}

/// Agrees with `members` on a context id that each member taking part (`take`) marks in
/// use; also gathers every member's `extra` bytes (in member order, concatenated) for
/// all. Two rounds: the lowest id free on every member, then whether each could still
/// take it (another thread's creation may have taken it meanwhile), until all could.
fn agree_ctx(members: &[u32], key: u16, extra: &[u8], take: bool) -> Result<(u16, Vec<u8>), c_int> {
    loop {
        let mut mine = extra.to_vec();
        mine.extend_from_slice(&used_bitmap());
        let n = extra.len();
        let ans = agree(members, key, mine, |all| {
            let mut out = lowest_free(all.iter().map(|v| &v[n..])).to_vec();
            for v in &all {
                out.extend_from_slice(&v[..n]);
            }
            out
        })?;
        let ctx = u16::from_le_bytes([ans[0], ans[1]]);
        if ctx == WORLD_CTX {
            return Err(MPI_ERR_INTERN);
        }
        let took = take && try_take(ctx);
        let ok = !take || took;
        let all_ok = agree(members, key, vec![u8::from(ok)], |all| {
            vec![u8::from(all.iter().all(|v| v.first() == Some(&1)))]
        })?;
        if all_ok.first() == Some(&1) {
            return Ok((ctx, ans[2..].to_vec()));
        }
        if took {
            release_ctx(ctx);
        }
    }
}

fn release_ctx(ctx: u16) {
    if ![WORLD_CTX, SELF_CTX, CREATE_CTX].contains(&ctx) {
        mark(
            &mut USED.lock().unwrap_or_else(|e| e.into_inner()),
            ctx,
            false,
        );
    }
}

/// Refuses an intercommunicator where only intra-communicators are supported.
pub(crate) fn intra(call: &str, c: &Communicator, h: Raw) -> Result<(), c_int> {
    if c.is_inter() {
        return Err(fail(
            h,
            MPI_ERR_COMM,
            format!("{call}: intercommunicators are not supported here"),
        ));
    }
    Ok(())
}

/// A communicator of `group` (a subset of `parent`'s, in its order) with `topo`; every
/// member of `parent` calls; those outside `group` get `MPI_COMM_NULL`.
pub(crate) fn create_sub(
    call: &str,
    parent: &Communicator,
    parent_h: Raw,
    group: Arc<Group>,
    topo: Option<Topo>,
) -> Result<Raw, c_int> {
    intra(call, parent, parent_h)?;
    let member = group.rank_of(crate::runtime::world_rank()).is_some();
    let (ctx, _) = agree_ctx(&parent.group.ranks, parent.ctx / 2, &[], member).map_err(|e| {
        fail(
            parent_h,
            e,
            format!("{call}: agreeing on a context id failed"),
        )
    })?;
    if !member {
        return Ok(MPI_COMM_NULL);
    }
    let eh = *parent.errhandler.lock().unwrap_or_else(|e| e.into_inner());
    Ok(store(Communicator::new(group, ctx, topo, eh, job()?)))
}

/// `MPI_Comm_split` (and Cartesian sub-grids): every member of `parent` calls with a
/// colour (`MPI_UNDEFINED`: none) and a key.
pub(crate) fn split(
    call: &str,
    parent: &Communicator,
    parent_h: Raw,
    color: c_int,
    key: c_int,
    topo: Option<Topo>,
) -> Result<Raw, c_int> {
    if let Some(remote) = &parent.remote {
        return split_inter(call, parent, parent_h, remote, color, key);
    }
    let mut mine = Vec::with_capacity(8);
    mine.extend_from_slice(&color.to_le_bytes());
    mine.extend_from_slice(&key.to_le_bytes());
    // Every member's colour and key come back with the context id.
    let (ctx, out) = agree_ctx(
        &parent.group.ranks,
        parent.ctx / 2,
        &mine,
        color != MPI_UNDEFINED,
    )
    .map_err(|e| {
        fail(
            parent_h,
            e,
            format!("{call}: agreeing on a context id failed"),
        )
    })?;
    if color == MPI_UNDEFINED {
        return Ok(MPI_COMM_NULL);
    }
    let rd = |i: usize| c_int::from_le_bytes(out[i..i + 4].try_into().unwrap_or_default());
    let mut same: Vec<(c_int, u32)> = (0..parent.size())
        .filter(|&r| rd(8 * r as usize) == color)
        .map(|r| (rd(8 * r as usize + 4), r))
        .collect();
    same.sort();
    let group = Group {
        ranks: same.iter().map(|&(_, r)| parent.world(r)).collect(),
    };
    let eh = *parent.errhandler.lock().unwrap_or_else(|e| e.into_inner());
    Ok(store(Communicator::new(
        Arc::new(group),
        ctx,
        topo,
        eh,
        job()?,
    )))
}

/// `MPI_Comm_split` of an intercommunicator: each new intercommunicator joins the
/// processes of one colour on each side (`MPI_COMM_NULL` where a side has none).
fn split_inter(
    call: &str,
    parent: &Communicator,
    parent_h: Raw,
    remote: &Group,
    color: c_int,
    key: c_int,
) -> Result<Raw, c_int> {
    let everyone = parent.everyone();
    let mut mine = Vec::with_capacity(8);
    mine.extend_from_slice(&color.to_le_bytes());
    mine.extend_from_slice(&key.to_le_bytes());
    let (ctx, out) =
        agree_ctx(&everyone, parent.ctx / 2, &mine, color != MPI_UNDEFINED).map_err(|e| {
            fail(
                parent_h,
                e,
                format!("{call}: agreeing on a context id failed"),
            )
        })?;
    if color == MPI_UNDEFINED {
        return Ok(MPI_COMM_NULL);
    }
    // Colour and key of world rank w, from its place in `everyone`.
    let of = |w: u32| {
        let i = everyone.iter().position(|&x| x == w).unwrap_or(0) * 8;
        let rd = |j: usize| c_int::from_le_bytes(out[j..j + 4].try_into().unwrap_or_default());
        (rd(i), rd(i + 4))
    };
    let pick = |g: &Group| {
        let mut v: Vec<(c_int, usize, u32)> = g
            .ranks
            .iter()
            .enumerate()
            .filter_map(|(i, &w)| {
                let (c, k) = of(w);
                (c == color).then_some((k, i, w))
            })
            .collect();
        v.sort();
        Group {
            ranks: v.into_iter().map(|x| x.2).collect(),
        }
    };
    let (local, far) = (pick(&parent.group), pick(remote));
    if far.ranks.is_empty() {
        release_ctx(ctx);
        return Ok(MPI_COMM_NULL);
    }
    let eh = *parent.errhandler.lock().unwrap_or_else(|e| e.into_inner());
    let c = Communicator::new(Arc::new(local), ctx, None, eh, job()?).with_remote(Arc::new(far));
    Ok(store(c))
}

/// `MPI_Comm_create` of an intercommunicator: each side names a subgroup of its own
/// group; the new intercommunicator joins the two (`MPI_COMM_NULL` outside them, or
/// where the other side's is empty).
fn create_inter(
    call: &str,
    parent: &Communicator,
    parent_h: Raw,
    remote: &Group,
    group: Arc<Group>,
) -> Result<Raw, c_int> {
    if let Some(w) = group.ranks.iter().find(|&&w| parent.rank_of(w).is_none()) {
        return Err(fail(
            parent_h,
            MPI_ERR_GROUP,
            format!("{call}: world rank {w} of the group is not in the local group"),
        ));
    }
    let everyone = parent.everyone();
    // Each process's place in its side's new group, or -1.
    let idx = group
        .rank_of(crate::runtime::world_rank())
        .map_or(-1, |r| r as c_int);
    let (ctx, out) =
        agree_ctx(&everyone, parent.ctx / 2, &idx.to_le_bytes(), idx >= 0).map_err(|e| {
            fail(
                parent_h,
                e,
                format!("{call}: agreeing on a context id failed"),
            )
        })?;
    if idx < 0 {
        return Ok(MPI_COMM_NULL);
    }
    let mut far: Vec<(c_int, u32)> = remote
        .ranks
        .iter()
        .filter_map(|&w| {
            let i = everyone.iter().position(|&x| x == w)? * 4;
            let v = c_int::from_le_bytes(out[i..i + 4].try_into().ok()?);
            (v >= 0).then_some((v, w))
        })
        .collect();
    far.sort();
    if far.is_empty() {
        release_ctx(ctx);
        return Ok(MPI_COMM_NULL);
    }
    let far = Group {
        ranks: far.into_iter().map(|x| x.1).collect(),
    };
    let eh = *parent.errhandler.lock().unwrap_or_else(|e| e.into_inner());
    let c = Communicator::new(group, ctx, None, eh, job()?).with_remote(Arc::new(far));
    Ok(store(c))
}

// ---- the calls ------------------------------------------------------------------------

/// # Safety
/// `size` valid for a write.
#[unsafe(export_name = "PMPI_Comm_size")]
pub unsafe extern "C" fn MPI_Comm_size(comm: Raw, size: *mut c_int) -> c_int {
    let c = tri!(get("MPI_Comm_size", comm));
    // SAFETY: the caller's contract.
    unsafe { put(size, c.size() as c_int) };
    MPI_SUCCESS
}

/// # Safety
/// `rank` valid for a write.
#[unsafe(export_name = "PMPI_Comm_rank")]
pub unsafe extern "C" fn MPI_Comm_rank(comm: Raw, rank: *mut c_int) -> c_int {
    let c = tri!(get("MPI_Comm_rank", comm));
    // SAFETY: the caller's contract.
    unsafe { put(rank, c.rank as c_int) };
    MPI_SUCCESS
}

/// Copies the attributes of `from` to `to` through their keys' copy callbacks.
fn copy_attrs(from_h: Raw, from: &Communicator, to_h: Raw) -> Result<(), c_int> {
    let attrs: Vec<(c_int, usize)> = from
        .attrs
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .map(|(&k, &v)| (k, v))
        .collect();
    let to = lookup(to_h)?;
    for (k, v) in attrs {
        let Some(kv) = keyval(k) else { continue };
        let copied = match kv.copy {
            0 => None,
            1 => Some(v),
            f => {
                // SAFETY: a MPI_Comm_copy_attr_function registered by the program.
                let f: CopyFn = unsafe { std::mem::transmute::<usize, CopyFn>(f) };
                let (mut out, mut flag) = (0usize, 0);
                // SAFETY: the callback's contract.
                let rc = unsafe {
                    f(
                        from_h,
                        k,
                        kv.extra,
                        v as *mut c_void,
                        (&mut out as *mut usize).cast(),
                        &mut flag,
                    )
                };
                if rc != MPI_SUCCESS {
                    return Err(rc);
                }
                (flag != 0).then_some(out)
            }
        };
        if let Some(v) = copied {
            to.attrs
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(k, v);
            to.attr_order
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(k);
        }
    }
    Ok(())
}

fn dup(call: &str, comm: Raw) -> Result<Raw, c_int> {
    let c = get(call, comm)?;
    let h = match &c.remote {
        None => create_sub(call, &c, comm, c.group.clone(), c.topo.clone())?,
        Some(r) => {
            let (ctx, _) = agree_ctx(&c.everyone(), c.ctx / 2, &[], true)
                .map_err(|e| fail(comm, e, format!("{call}: agreeing on a context id failed")))?;
            let eh = *c.errhandler.lock().unwrap_or_else(|e| e.into_inner());
            store(Communicator::new(c.group.clone(), ctx, None, eh, job()?).with_remote(r.clone()))
        }
    };
    copy_attrs(comm, &c, h).map_err(|e| {
        fail(
            comm,
            e,
            format!("{call}: an attribute copy callback failed"),
        )
    })?;
    Ok(h)
}

/// # Safety
/// `newcomm` valid for a write.
#[unsafe(export_name = "PMPI_Comm_dup")]
pub unsafe extern "C" fn MPI_Comm_dup(comm: Raw, newcomm: *mut Raw) -> c_int {
    let h = tri!(dup("MPI_Comm_dup", comm));
    // SAFETY: the caller's contract.
    unsafe { put(newcomm, h) };
    MPI_SUCCESS
}

/// # Safety
/// `newcomm` valid for a write.
#[unsafe(export_name = "PMPI_Comm_dup_with_info")]
pub unsafe extern "C" fn MPI_Comm_dup_with_info(comm: Raw, _info: Raw, newcomm: *mut Raw) -> c_int {
    let h = tri!(dup("MPI_Comm_dup_with_info", comm));
    // SAFETY: the caller's contract.
    unsafe { put(newcomm, h) };
    MPI_SUCCESS
}

/// Duplicates without blocking: the agreement on the context id runs as a request
/// (`IdupOp`), so processes may reach their `MPI_Comm_idup` at different times while
/// they keep communicating.
///
/// # Safety
/// Pointers valid for writes; `newcomm` stays valid until the request completes.
#[unsafe(export_name = "PMPI_Comm_idup")]
pub unsafe extern "C" fn MPI_Comm_idup(comm: Raw, newcomm: *mut Raw, request: *mut Raw) -> c_int {
    const CALL: &str = "MPI_Comm_idup";
    let c = tri!(get(CALL, comm));
    let p = tri!(p2p());
    let op = IdupOp {
        ticket: c.idup_next.fetch_add(1, Ordering::AcqRel),
        members: c.everyone(),
        // The context beside the agreements' own (never a communicator's, as
        // `CREATE_CTX` is reserved): a blocking constructor on the same parent while
        // idups of it are pending must not take their messages, nor they its.
        tag: (i32::from(CREATE_CTX + 1) << 16) | i32::from(c.ctx / 2),
        me: p.rank(),
        parent: c,
        parent_h: comm,
        out: Out(newcomm),
        round: Round::Start,
        ctx: 0,
        took: false,
        reqs: Vec::new(),
        bufs: Vec::new(),
    };
    // SAFETY: the caller's contract.
    unsafe { put(request, crate::request::start_operation(Box::new(op))) };
    MPI_SUCCESS
}

/// Where `MPI_Comm_idup` writes the new handle.
struct Out(*mut Raw);
// SAFETY: the program's variable, valid until the request completes (MPI's rules); any
// thread may complete the request.
unsafe impl Send for Out {}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Round {
    Start,
    /// Bitmaps on their way to the first member, the chosen id on its way back.
    Pick,
    /// Whether each member could take the id, and the verdict.
    Confirm,
}

/// [`agree_ctx`] as a state machine of non-blocking messages.
struct IdupOp {
    /// Runs once the communicator's earlier idups have completed.
    ticket: u64,
    members: Vec<u32>,
    tag: i32,
    me: u32,
    parent: Arc<Communicator>,
    parent_h: Raw,
    out: Out,
    round: Round,
    ctx: u16,
    took: bool,
    /// The round's requests in flight, and the buffers they use.
    reqs: Vec<ReqId>,
    bufs: Vec<Vec<u8>>,
}

impl IdupOp {
    fn root(&self) -> bool {
        self.me == self.members[0]
    }

    /// Starts a round: this member's `mine`; the first member also receives everyone's
    /// (`len` bytes each), others receive the verdict (`answer` bytes).
    fn start(&mut self, mine: Vec<u8>, len: usize, answer: usize) -> Result<(), c_int> {
        let p = p2p()?;
        let e = |e: bulkwire_p2p::Error| code_of(&e);
        self.reqs.clear();
        self.bufs.clear();
        if self.root() {
            self.bufs.push(mine);
            for i in 1..self.members.len() {
                self.bufs.push(vec![0; len]);
                let b = self.bufs[i].as_mut_ptr();
                // SAFETY: the buffer lives in `bufs` (its heap block does not move) until
                // the request completes.
                let id = unsafe {
                    p.irecv_raw(Source::Rank(self.members[i]), Tag::Is(self.tag), b, len)
                }
                .map_err(e)?;
                self.reqs.push(id);
            }
        } else {
            self.bufs.push(mine);
            self.bufs.push(vec![0; answer]);
            let (s, r) = (self.bufs[0].as_ptr(), self.bufs[1].as_mut_ptr());
            let root = self.members[0];
            // SAFETY: as above.
            let id = unsafe { p.isend_raw(root, self.tag, s, self.bufs[0].len()) }.map_err(e)?;
            self.reqs.push(id);
            // SAFETY: as above.
            let id = unsafe { p.irecv_raw(Source::Rank(root), Tag::Is(self.tag), r, answer) }
                .map_err(e)?;
            self.reqs.push(id);
        }
        Ok(())
    }

    /// Whether the round's requests have completed.
    fn arrived(&mut self) -> Result<bool, c_int> {
        let p = p2p()?;
        while let Some(&id) = self.reqs.first() {
            match p.test_raw(id) {
                None => return Ok(false),
                Some(Err(e)) => return Err(code_of(&e)),
                Some(Ok(_)) => {
                    self.reqs.remove(0);
                }
            }
        }
        Ok(true)
    }

    /// The first member sends `answer` to every other (and waits for the sends).
    fn answer(&mut self, answer: Vec<u8>) -> Result<(), c_int> {
        let p = p2p()?;
        let e = |e: bulkwire_p2p::Error| code_of(&e);
        let mut ids = Vec::new();
        for &m in &self.members[1..] {
            // SAFETY: `answer` outlives the sends, waited for below.
            ids.push(
                unsafe { p.isend_raw(m, self.tag, answer.as_ptr(), answer.len()) }.map_err(e)?,
            );
        }
        for id in ids {
            p.wait_raw(id).map_err(e)?;
        }
        Ok(())
    }

    fn step(&mut self) -> Result<Option<()>, c_int> {
        loop {
            match self.round {
                Round::Start => {
                    if self.parent.idup_done.load(Ordering::Acquire) != self.ticket {
                        return Ok(None);
                    }
                    self.start(used_bitmap(), BITMAP_BYTES, 2)?;
                    self.round = Round::Pick;
                }
                Round::Pick => {
                    if !self.arrived()? {
                        return Ok(None);
                    }
                    let ans = if self.root() {
                        let a = lowest_free(self.bufs.iter().map(Vec::as_slice)).to_vec();
                        self.answer(a.clone())?;
                        a
                    } else {
                        self.bufs[1].clone()
                    };
                    self.ctx = u16::from_le_bytes([ans[0], ans[1]]);
                    if self.ctx == WORLD_CTX {
                        return Err(MPI_ERR_INTERN);
                    }
                    self.took = try_take(self.ctx);
                    self.start(vec![u8::from(self.took)], 1, 1)?;
                    self.round = Round::Confirm;
                }
                Round::Confirm => {
                    if !self.arrived()? {
                        return Ok(None);
                    }
                    let ok = if self.root() {
                        let ok = self.bufs.iter().all(|b| b.first() == Some(&1));
                        self.answer(vec![u8::from(ok)])?;
                        ok
                    } else {
                        self.bufs[1].first() == Some(&1)
                    };
                    if ok {
                        return Ok(Some(()));
                    }
                    if self.took {
                        release_ctx(self.ctx);
                    }
                    self.round = Round::Start;
                }
            }
        }
    }
}

impl crate::request::Operation for IdupOp {
    fn progress(&mut self) -> Option<Result<(), c_int>> {
        let r = self.step();
        if !matches!(r, Ok(None)) {
            // The next idup of this communicator may start.
            self.parent.idup_done.fetch_add(1, Ordering::AcqRel);
        }
        match r {
            Ok(None) => None,
            Err(e) => Some(Err(e)),
            Ok(Some(())) => {
                let c = &self.parent;
                let eh = *c.errhandler.lock().unwrap_or_else(|e| e.into_inner());
                let job = match job() {
                    Ok(j) => j,
                    Err(e) => return Some(Err(e)),
                };
                let mut n = Communicator::new(c.group.clone(), self.ctx, c.topo.clone(), eh, job);
                if let Some(r) = &c.remote {
                    n = n.with_remote(r.clone());
                }
                let h = store(n);
                let res = copy_attrs(self.parent_h, c, h);
                // SAFETY: the program's variable, valid until this request completes.
                unsafe { put(self.out.0, h) };
                Some(res)
            }
        }
    }
}

/// # Safety
/// `newcomm` valid for a write.
#[unsafe(export_name = "PMPI_Comm_split")]
pub unsafe extern "C" fn MPI_Comm_split(
    comm: Raw,
    color: c_int,
    key: c_int,
    newcomm: *mut Raw,
) -> c_int {
    const CALL: &str = "MPI_Comm_split";
    let c = tri!(get(CALL, comm));
    if color < 0 && color != MPI_UNDEFINED {
        return fail(
            comm,
            MPI_ERR_ARG,
            format!("{CALL}: colour {color} is negative"),
        );
    }
    let h = tri!(split(CALL, &c, comm, color, key, None));
    // SAFETY: the caller's contract.
    unsafe { put(newcomm, h) };
    MPI_SUCCESS
}

/// `MPI_COMM_TYPE_SHARED`: the processes of one host (as the launcher placed them).
///
/// # Safety
/// `newcomm` valid for a write.
#[unsafe(export_name = "PMPI_Comm_split_type")]
pub unsafe extern "C" fn MPI_Comm_split_type(
    comm: Raw,
    split_type: c_int,
    key: c_int,
    _info: Raw,
    newcomm: *mut Raw,
) -> c_int {
    const CALL: &str = "MPI_Comm_split_type";
    let c = tri!(get(CALL, comm));
    let color = match split_type {
        MPI_UNDEFINED => MPI_UNDEFINED,
        MPI_COMM_TYPE_SHARED => {
            // The host's lowest world rank names it.
            let p = tri!(p2p());
            let me = p.rank();
            let local = p.host_local();
            (0..p.size())
                .find(|&r| r == me || local.get(r as usize).copied().unwrap_or(false))
                .unwrap_or(me) as c_int
        }
        t => {
            return fail(
                comm,
                MPI_ERR_ARG,
                format!("{CALL}: split type {t} is not MPI_COMM_TYPE_SHARED"),
            );
        }
    };
    let h = tri!(split(CALL, &c, comm, color, key, None));
    // SAFETY: the caller's contract.
    unsafe { put(newcomm, h) };
    MPI_SUCCESS
}

fn subset(call: &str, c: &Communicator, comm: Raw, g: &Group) -> Result<(), c_int> {
    match g.ranks.iter().find(|&&w| c.rank_of(w).is_none()) {
        Some(w) => Err(fail(
            comm,
            MPI_ERR_GROUP,
            format!("{call}: world rank {w} of the group is not in the communicator"),
        )),
        None => Ok(()),
    }
}

/// # Safety
/// `newcomm` valid for a write.
#[unsafe(export_name = "PMPI_Comm_create")]
pub unsafe extern "C" fn MPI_Comm_create(comm: Raw, group: Raw, newcomm: *mut Raw) -> c_int {
    const CALL: &str = "MPI_Comm_create";
    let c = tri!(get(CALL, comm));
    if let Some(remote) = &c.remote {
        let g = tri!(group::lookup(group).map_err(|e| fail(
            comm,
            e,
            format!("{CALL}: invalid group handle {group:#x}")
        )));
        let h = tri!(create_inter(CALL, &c, comm, remote, g));
        // SAFETY: the caller's contract.
        unsafe { put(newcomm, h) };
        return MPI_SUCCESS;
    }
    let g = tri!(group::lookup(group).map_err(|e| fail(
        comm,
        e,
        format!("{CALL}: invalid group handle {group:#x}")
    )));
    tri!(subset(CALL, &c, comm, &g));
    let h = tri!(create_sub(CALL, &c, comm, g, None));
    // SAFETY: the caller's contract.
    unsafe { put(newcomm, h) };
    MPI_SUCCESS
}

/// Collective over the group's members only.
///
/// # Safety
/// `newcomm` valid for a write.
#[unsafe(export_name = "PMPI_Comm_create_group")]
pub unsafe extern "C" fn MPI_Comm_create_group(
    comm: Raw,
    group: Raw,
    tag: c_int,
    newcomm: *mut Raw,
) -> c_int {
    const CALL: &str = "MPI_Comm_create_group";
    let c = tri!(get(CALL, comm));
    tri!(intra(CALL, &c, comm));
    let g = tri!(group::lookup(group).map_err(|e| fail(
        comm,
        e,
        format!("{CALL}: invalid group handle {group:#x}")
    )));
    tri!(subset(CALL, &c, comm, &g));
    if !(0..=TAG_UB).contains(&tag) {
        return fail(
            comm,
            MPI_ERR_TAG,
            format!("{CALL}: tag {tag} is outside 0..={TAG_UB}"),
        );
    }
    let me = crate::runtime::world_rank();
    if g.rank_of(me).is_none() {
        return fail(
            comm,
            MPI_ERR_GROUP,
            format!("{CALL}: this process is not in the group"),
        );
    }
    // The high bit keeps this apart from agreements of the whole parent.
    let key = 0x8000 | (c.ctx / 2);
    let (ctx, _) = tri!(agree_ctx(&g.ranks, key, &[], true).map_err(|e| fail(
        comm,
        e,
        format!("{CALL}: agreeing on a context id failed")
    )));
    let eh = *c.errhandler.lock().unwrap_or_else(|e| e.into_inner());
    let h = store(Communicator::new(g, ctx, None, eh, tri!(job())));
    // SAFETY: the caller's contract.
    unsafe { put(newcomm, h) };
    MPI_SUCCESS
}

/// Deletes every attribute of `comm` through its key's delete callback.
pub(crate) fn delete_all_attrs(comm: Raw) {
    let Ok(c) = lookup(comm) else { return };
    let keys: Vec<c_int> = c
        .attr_order
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    for k in keys.into_iter().rev() {
        let _ = delete_attr(comm, &c, k);
    }
}

/// # Safety
/// `comm` valid for reads and writes.
#[unsafe(export_name = "PMPI_Comm_free")]
pub unsafe extern "C" fn MPI_Comm_free(comm: *mut Raw) -> c_int {
    const CALL: &str = "MPI_Comm_free";
    if comm.is_null() {
        return fail(MPI_COMM_WORLD, MPI_ERR_ARG, format!("{CALL}: null pointer"));
    }
    // SAFETY: non-null, valid by contract.
    let h = unsafe { *comm };
    if h == MPI_COMM_WORLD || h == MPI_COMM_SELF {
        return fail(
            h,
            MPI_ERR_COMM,
            format!("{CALL}: a predefined communicator cannot be freed"),
        );
    }
    let c = tri!(get(CALL, h));
    delete_all_attrs(h);
    COMMS.lock().unwrap_or_else(|e| e.into_inner()).remove(h);
    release_ctx(c.ctx);
    // SAFETY: as above.
    unsafe { *comm = MPI_COMM_NULL };
    MPI_SUCCESS
}

/// # Safety
/// `result` valid for a write.
#[unsafe(export_name = "PMPI_Comm_compare")]
pub unsafe extern "C" fn MPI_Comm_compare(comm1: Raw, comm2: Raw, result: *mut c_int) -> c_int {
    let a = tri!(get("MPI_Comm_compare", comm1));
    let b = tri!(get("MPI_Comm_compare", comm2));
    let r = if comm1 == comm2 {
        MPI_IDENT
    } else {
        match a.group.compare(&b.group) {
            MPI_IDENT => MPI_CONGRUENT,
            x => x,
        }
    };
    // SAFETY: the caller's contract.
    unsafe { put(result, r) };
    MPI_SUCCESS
}

/// # Safety
/// `group` valid for a write.
#[unsafe(export_name = "PMPI_Comm_group")]
pub unsafe extern "C" fn MPI_Comm_group(comm: Raw, group: *mut Raw) -> c_int {
    let c = tri!(get("MPI_Comm_group", comm));
    // SAFETY: the caller's contract.
    unsafe { put(group, group::insert(c.group.clone())) };
    MPI_SUCCESS
}

/// # Safety
/// `name` NUL-terminated.
#[unsafe(export_name = "PMPI_Comm_set_name")]
pub unsafe extern "C" fn MPI_Comm_set_name(comm: Raw, name: *const c_char) -> c_int {
    let c = tri!(get("MPI_Comm_set_name", comm));
    if name.is_null() {
        return fail(comm, MPI_ERR_ARG, "MPI_Comm_set_name: null name");
    }
    // SAFETY: NUL-terminated by contract.
    let s = unsafe { std::ffi::CStr::from_ptr(name) }.to_string_lossy();
    let s: String = s.chars().take(MPI_MAX_OBJECT_NAME - 1).collect();
    *c.name.lock().unwrap_or_else(|e| e.into_inner()) = s;
    MPI_SUCCESS
}

/// # Safety
/// `name` holds `MPI_MAX_OBJECT_NAME` bytes; `resultlen` valid for a write.
#[unsafe(export_name = "PMPI_Comm_get_name")]
pub unsafe extern "C" fn MPI_Comm_get_name(
    comm: Raw,
    name: *mut c_char,
    resultlen: *mut c_int,
) -> c_int {
    let c = tri!(get("MPI_Comm_get_name", comm));
    let n = c.name.lock().unwrap_or_else(|e| e.into_inner()).clone();
    // SAFETY: the caller's contract.
    unsafe { put(resultlen, put_str(name, MPI_MAX_OBJECT_NAME, &n)) };
    MPI_SUCCESS
}

///
/// # Safety
/// `flag` valid for a write.
#[unsafe(export_name = "PMPI_Comm_test_inter")]
pub unsafe extern "C" fn MPI_Comm_test_inter(comm: Raw, flag: *mut c_int) -> c_int {
    let c = tri!(get("MPI_Comm_test_inter", comm));
    // SAFETY: the caller's contract.
    unsafe { put(flag, c_int::from(c.is_inter())) };
    MPI_SUCCESS
}

/// Hints are accepted and not kept.
#[unsafe(export_name = "PMPI_Comm_set_info")]
pub extern "C" fn MPI_Comm_set_info(comm: Raw, info: Raw) -> c_int {
    let _ = tri!(get("MPI_Comm_set_info", comm));
    if !crate::runtime::info_ok(info) {
        return fail(
            comm,
            MPI_ERR_INFO,
            format!("MPI_Comm_set_info: invalid info handle {info:#x}"),
        );
    }
    MPI_SUCCESS
}

/// # Safety
/// `info` valid for a write.
#[unsafe(export_name = "PMPI_Comm_get_info")]
pub unsafe extern "C" fn MPI_Comm_get_info(comm: Raw, info: *mut Raw) -> c_int {
    let _ = tri!(get("MPI_Comm_get_info", comm));
    // SAFETY: the caller's contract.
    unsafe { crate::runtime::MPI_Info_create(info) }
}

// ---- attributes -----------------------------------------------------------------------

/// `MPI_Comm_copy_attr_function`.
type CopyFn =
    unsafe extern "C" fn(Raw, c_int, *mut c_void, *mut c_void, *mut c_void, *mut c_int) -> c_int;
/// `MPI_Comm_delete_attr_function`.
type DeleteFn = unsafe extern "C" fn(Raw, c_int, *mut c_void, *mut c_void) -> c_int;

#[derive(Clone, Copy)]
struct Keyval {
    /// 0: `MPI_COMM_NULL_COPY_FN`, 1: `MPI_COMM_DUP_FN`, else a `CopyFn`.
    copy: usize,
    /// 0: `MPI_COMM_NULL_DELETE_FN`, else a `DeleteFn`.
    delete: usize,
    extra: *mut c_void,
}

// SAFETY: `extra` is the program's opaque pointer, handed back to its own callbacks.
unsafe impl Send for Keyval {}

static KEYVALS: Mutex<Table<Keyval>> = Mutex::new(Table::new(Kind::Keyval));

fn keyval(k: c_int) -> Option<Keyval> {
    KEYVALS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(k as u32 as Raw)
        .copied()
}

/// # Safety
/// Callbacks of the right types (or the predefined ones); `keyval` valid for a write.
#[unsafe(export_name = "PMPI_Comm_create_keyval")]
pub unsafe extern "C" fn MPI_Comm_create_keyval(
    copy: usize,
    delete: usize,
    comm_keyval: *mut c_int,
    extra_state: *mut c_void,
) -> c_int {
    let h = KEYVALS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(Keyval {
            copy,
            delete,
            extra: extra_state,
        });
    // SAFETY: the caller's contract.
    unsafe { put(comm_keyval, h as c_int) };
    MPI_SUCCESS
}

/// Attributes already set with the key keep it until deleted (the key is only no
/// longer usable for new ones... here: the key's callbacks stay known until then).
///
/// # Safety
/// `comm_keyval` valid for reads and writes.
#[unsafe(export_name = "PMPI_Comm_free_keyval")]
pub unsafe extern "C" fn MPI_Comm_free_keyval(comm_keyval: *mut c_int) -> c_int {
    if comm_keyval.is_null() {
        return fail(
            MPI_COMM_WORLD,
            MPI_ERR_ARG,
            "MPI_Comm_free_keyval: null pointer",
        );
    }
    // SAFETY: non-null, valid by contract.
    let k = unsafe { *comm_keyval };
    if keyval(k).is_none() {
        return fail(
            MPI_COMM_WORLD,
            MPI_ERR_KEYVAL,
            format!("MPI_Comm_free_keyval: invalid key {k}"),
        );
    }
    // SAFETY: as above.
    unsafe { *comm_keyval = MPI_KEYVAL_INVALID };
    MPI_SUCCESS
}

fn delete_attr(comm: Raw, c: &Communicator, k: c_int) -> Result<bool, c_int> {
    let Some(v) = c
        .attrs
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(&k)
        .copied()
    else {
        return Ok(false);
    };
    if let Some(kv) = keyval(k)
        && kv.delete != 0
    {
        // SAFETY: a MPI_Comm_delete_attr_function registered by the program.
        let f: DeleteFn = unsafe { std::mem::transmute::<usize, DeleteFn>(kv.delete) };
        // SAFETY: the callback's contract.
        let rc = unsafe { f(comm, k, v as *mut c_void, kv.extra) };
        if rc != MPI_SUCCESS {
            return Err(rc);
        }
    }
    c.attrs.lock().unwrap_or_else(|e| e.into_inner()).remove(&k);
    c.attr_order
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .retain(|&x| x != k);
    Ok(true)
}

#[unsafe(export_name = "PMPI_Comm_set_attr")]
pub extern "C" fn MPI_Comm_set_attr(
    comm: Raw,
    comm_keyval: c_int,
    attribute_val: *mut c_void,
) -> c_int {
    const CALL: &str = "MPI_Comm_set_attr";
    let c = tri!(get(CALL, comm));
    if keyval(comm_keyval).is_none() {
        return fail(
            comm,
            MPI_ERR_KEYVAL,
            format!("{CALL}: invalid or predefined key {comm_keyval}"),
        );
    }
    if let Err(rc) = delete_attr(comm, &c, comm_keyval) {
        return fail(
            comm,
            rc,
            format!("{CALL}: the delete callback of the old value failed"),
        );
    }
    c.attrs
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(comm_keyval, attribute_val as usize);
    c.attr_order
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(comm_keyval);
    MPI_SUCCESS
}

/// Values of the predefined attributes (pointers to these are handed out).
static ATTR_VALUES: Mutex<[c_int; 7]> = Mutex::new([0; 7]);

fn predefined_attr(k: c_int) -> Option<*mut c_void> {
    let i = (MPI_TAG_UB..=MPI_UNIVERSE_SIZE)
        .contains(&k)
        .then(|| (k - MPI_TAG_UB) as usize)?;
    let world = p2p().map_or(1, |p| p.size()) as c_int;
    let v = match k {
        MPI_TAG_UB => TAG_UB,
        MPI_HOST => MPI_PROC_NULL,
        // Every process can do I/O.
        MPI_IO => MPI_ANY_SOURCE,
        // Each process's clock starts at its own MPI_Init.
        MPI_WTIME_IS_GLOBAL => 0,
        MPI_APPNUM => 0,
        MPI_LASTUSEDCODE => crate::runtime::last_used_code(),
        _ => world,
    };
    let mut vals = ATTR_VALUES.lock().unwrap_or_else(|e| e.into_inner());
    vals[i] = v;
    // The array is static: the pointer stays valid.
    Some((&mut vals[i] as *mut c_int).cast())
}

/// # Safety
/// `attribute_val` points to a `void *` to write; `flag` valid for a write.
#[unsafe(export_name = "PMPI_Comm_get_attr")]
pub unsafe extern "C" fn MPI_Comm_get_attr(
    comm: Raw,
    comm_keyval: c_int,
    attribute_val: *mut c_void,
    flag: *mut c_int,
) -> c_int {
    const CALL: &str = "MPI_Comm_get_attr";
    let c = tri!(get(CALL, comm));
    let v = match predefined_attr(comm_keyval) {
        Some(p) => Some(p as usize),
        None => {
            if keyval(comm_keyval).is_none() {
                return fail(
                    comm,
                    MPI_ERR_KEYVAL,
                    format!("{CALL}: invalid key {comm_keyval}"),
                );
            }
            c.attrs
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(&comm_keyval)
                .copied()
        }
    };
    // SAFETY: the caller's contract.
    unsafe {
        put(flag, c_int::from(v.is_some()));
        if let Some(v) = v {
            put(attribute_val.cast::<usize>(), v);
        }
    }
    MPI_SUCCESS
}

#[unsafe(export_name = "PMPI_Comm_delete_attr")]
pub extern "C" fn MPI_Comm_delete_attr(comm: Raw, comm_keyval: c_int) -> c_int {
    const CALL: &str = "MPI_Comm_delete_attr";
    let c = tri!(get(CALL, comm));
    if keyval(comm_keyval).is_none() {
        return fail(
            comm,
            MPI_ERR_KEYVAL,
            format!("{CALL}: invalid key {comm_keyval}"),
        );
    }
    match delete_attr(comm, &c, comm_keyval) {
        Ok(_) => MPI_SUCCESS,
        Err(rc) => fail(comm, rc, format!("{CALL}: the delete callback failed")),
    }
}

/// # Safety
/// As `MPI_Comm_create_keyval`.
#[unsafe(export_name = "PMPI_Keyval_create")]
pub unsafe extern "C" fn MPI_Keyval_create(
    copy: usize,
    delete: usize,
    keyval: *mut c_int,
    extra_state: *mut c_void,
) -> c_int {
    // SAFETY: forwarded contract (the MPI-1 callbacks have the same shapes).
    unsafe { MPI_Comm_create_keyval(copy, delete, keyval, extra_state) }
}

/// # Safety
/// As `MPI_Comm_free_keyval`.
#[unsafe(export_name = "PMPI_Keyval_free")]
pub unsafe extern "C" fn MPI_Keyval_free(keyval: *mut c_int) -> c_int {
    // SAFETY: forwarded contract.
    unsafe { MPI_Comm_free_keyval(keyval) }
}

#[unsafe(export_name = "PMPI_Attr_put")]
pub extern "C" fn MPI_Attr_put(comm: Raw, keyval: c_int, attribute_val: *mut c_void) -> c_int {
    MPI_Comm_set_attr(comm, keyval, attribute_val)
}

/// # Safety
/// As `MPI_Comm_get_attr`.
#[unsafe(export_name = "PMPI_Attr_get")]
pub unsafe extern "C" fn MPI_Attr_get(
    comm: Raw,
    keyval: c_int,
    attribute_val: *mut c_void,
    flag: *mut c_int,
) -> c_int {
    // SAFETY: forwarded contract.
    unsafe { MPI_Comm_get_attr(comm, keyval, attribute_val, flag) }
}

#[unsafe(export_name = "PMPI_Attr_delete")]
pub extern "C" fn MPI_Attr_delete(comm: Raw, keyval: c_int) -> c_int {
    MPI_Comm_delete_attr(comm, keyval)
}

// ---- intercommunicators ---------------------------------------------------------------

/// Sends `mine` to world rank `to` and receives its answer, tagged `tag` (the leaders of
/// an intercommunicator's two groups; sent without waiting, so that two large messages
/// cannot wait for each other).
fn swap(to: u32, tag: i32, mine: &[u8]) -> Result<Vec<u8>, c_int> {
    let p = p2p()?;
    let e = |e: bulkwire_p2p::Error| code_of(&e);
    // SAFETY: `mine` outlives the request, waited for below.
    let id = unsafe { p.isend_raw(to, tag, mine.as_ptr(), mine.len()) }.map_err(e)?;
    let got = p.recv_vec(to, tag, usize::MAX).map_err(e);
    p.wait_raw(id).map_err(e)?;
    Ok(got?.0)
}

/// # Safety
/// `newintercomm` valid for a write.
#[unsafe(export_name = "PMPI_Intercomm_create")]
pub unsafe extern "C" fn MPI_Intercomm_create(
    local_comm: Raw,
    local_leader: c_int,
    peer_comm: Raw,
    remote_leader: c_int,
    tag: c_int,
    newintercomm: *mut Raw,
) -> c_int {
    const CALL: &str = "MPI_Intercomm_create";
    let lc = tri!(get(CALL, local_comm));
    tri!(intra(CALL, &lc, local_comm));
    if local_leader < 0 || local_leader as u32 >= lc.size() {
        return fail(
            local_comm,
            MPI_ERR_RANK,
            format!(
                "{CALL}: local leader {local_leader} is outside the communicator (size {})",
                lc.size()
            ),
        );
    }
    let leader = lc.world(local_leader as u32);
    let me = crate::runtime::world_rank();
    // Only the leader reads the peer communicator and the remote leader.
    let mut remote_world = 0;
    let mut wire = 0;
    if me == leader {
        let pc = tri!(get(CALL, peer_comm));
        if remote_leader < 0 || remote_leader as u32 >= pc.peers().size() {
            return fail(
                peer_comm,
                MPI_ERR_RANK,
                format!("{CALL}: remote leader {remote_leader} is outside the peer communicator"),
            );
        }
        if !(0..=TAG_UB).contains(&tag) {
            return fail(
                local_comm,
                MPI_ERR_TAG,
                format!("{CALL}: tag {tag} is outside 0..={TAG_UB}"),
            );
        }
        remote_world = pc.peer_world(remote_leader as u32);
        wire = pc.wire_tag(tag);
    }
    // The leader first: it gathers the group's bitmaps and talks to the other leader.
    let members: Vec<u32> = std::iter::once(leader)
        .chain(lc.group.ranks.iter().copied().filter(|&w| w != leader))
        .collect();
    let key = 0x4000 | (lc.ctx / 2);
    let mut ranks_bytes = Vec::with_capacity(lc.group.ranks.len() * 4);
    for r in &lc.group.ranks {
        ranks_bytes.extend_from_slice(&r.to_le_bytes());
    }
    let (ctx, remote) = loop {
        // Round 1: the lowest id free on both groups, and the remote group.
        let ans = agree(&members, key, used_bitmap(), |all| {
            let mut mine = [0u8; BITMAP_BYTES];
            for v in &all {
                for (a, b) in mine.iter_mut().zip(v) {
                    *a |= b;
                }
            }
            let mut out = mine.to_vec();
            out.extend_from_slice(&ranks_bytes);
            match swap(remote_world, wire, &out) {
                Ok(theirs) if theirs.len() >= BITMAP_BYTES => {
                    let (tb, tr) = theirs.split_at(BITMAP_BYTES);
                    let mut ans = lowest_free([&mine[..], tb].into_iter()).to_vec();
                    ans.extend_from_slice(tr);
                    ans
                }
                _ => vec![0, 0],
            }
        });
        let ans =
            tri!(ans.map_err(|e| fail(local_comm, e, format!("{CALL}: the exchange failed"))));
        let ctx = u16::from_le_bytes([ans[0], ans[1]]);
        if ctx == WORLD_CTX {
            return fail(
                local_comm,
                MPI_ERR_INTERN,
                format!("{CALL}: the leaders' exchange failed or no context id is free"),
            );
        }
        // Round 2: whether every process of both groups could take it.
        let took = try_take(ctx);
        let ok = tri!(
            agree(&members, key, vec![u8::from(took)], |all| {
                let mine = u8::from(all.iter().all(|v| v.first() == Some(&1)));
                let theirs = swap(remote_world, wire, &[mine]).ok();
                vec![u8::from(mine == 1 && theirs.as_deref() == Some(&[1][..]))]
            })
            .map_err(|e| fail(local_comm, e, format!("{CALL}: the exchange failed")))
        );
        if ok.first() == Some(&1) {
            let remote: Vec<u32> = ans[2..]
                .chunks_exact(4)
                .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect();
            break (ctx, remote);
        }
        if took {
            release_ctx(ctx);
        }
    };
    let eh = *lc.errhandler.lock().unwrap_or_else(|e| e.into_inner());
    let c = Communicator::new(lc.group.clone(), ctx, None, eh, tri!(job()))
        .with_remote(Arc::new(Group { ranks: remote }));
    // SAFETY: the caller's contract.
    unsafe { put(newintercomm, store(c)) };
    MPI_SUCCESS
}

/// # Safety
/// `newintracomm` valid for a write.
#[unsafe(export_name = "PMPI_Intercomm_merge")]
pub unsafe extern "C" fn MPI_Intercomm_merge(
    intercomm: Raw,
    high: c_int,
    newintracomm: *mut Raw,
) -> c_int {
    const CALL: &str = "MPI_Intercomm_merge";
    let c = tri!(get(CALL, intercomm));
    let Some(remote) = &c.remote else {
        return fail(
            intercomm,
            MPI_ERR_COMM,
            format!("{CALL}: not an intercommunicator"),
        );
    };
    let everyone = c.everyone();
    let key = 0xC000 | (c.ctx / 2);
    let (ctx, highs) = tri!(
        agree_ctx(&everyone, key, &[u8::from(high != 0)], true).map_err(|e| fail(
            intercomm,
            e,
            format!("{CALL}: agreeing on a context id failed")
        ))
    );
    // The first group of `everyone` goes first unless only it asked to be high.
    let (first, second) = if everyone[0] == c.group.ranks[0] {
        (&c.group, remote)
    } else {
        (remote, &c.group)
    };
    let first_high = highs.first() == Some(&1);
    let second_high = highs.get(first.ranks.len()) == Some(&1);
    let (a, b) = if first_high && !second_high {
        (second, first)
    } else {
        (first, second)
    };
    let group = Group {
        ranks: a.ranks.iter().chain(&b.ranks).copied().collect(),
    };
    let eh = *c.errhandler.lock().unwrap_or_else(|e| e.into_inner());
    let h = store(Communicator::new(
        Arc::new(group),
        ctx,
        None,
        eh,
        tri!(job()),
    ));
    // SAFETY: the caller's contract.
    unsafe { put(newintracomm, h) };
    MPI_SUCCESS
}

/// # Safety
/// `size` valid for a write.
#[unsafe(export_name = "PMPI_Comm_remote_size")]
pub unsafe extern "C" fn MPI_Comm_remote_size(comm: Raw, size: *mut c_int) -> c_int {
    let c = tri!(get("MPI_Comm_remote_size", comm));
    let Some(r) = &c.remote else {
        return fail(
            comm,
            MPI_ERR_COMM,
            "MPI_Comm_remote_size: not an intercommunicator",
        );
    };
    // SAFETY: the caller's contract.
    unsafe { put(size, r.size() as c_int) };
    MPI_SUCCESS
}

/// # Safety
/// `group` valid for a write.
#[unsafe(export_name = "PMPI_Comm_remote_group")]
pub unsafe extern "C" fn MPI_Comm_remote_group(comm: Raw, group: *mut Raw) -> c_int {
    let c = tri!(get("MPI_Comm_remote_group", comm));
    let Some(r) = &c.remote else {
        return fail(
            comm,
            MPI_ERR_COMM,
            "MPI_Comm_remote_group: not an intercommunicator",
        );
    };
    // SAFETY: the caller's contract.
    unsafe { put(group, group::insert(r.clone())) };
    MPI_SUCCESS
}

// ---- window attributes ----------------------------------------------------------------
// Keys are shared with communicators' (one table); values are kept here by window handle.
// `MPI_Win_get_attr` (rma) answers the predefined keys; [`win_attr`] the program's.

static WIN_ATTRS: Mutex<BTreeMap<(Raw, c_int), usize>> = Mutex::new(BTreeMap::new());

/// The value the program set for `key` on window `win`.
pub fn win_attr(win: Raw, key: c_int) -> Option<usize> {
    WIN_ATTRS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(&(win, key))
        .copied()
}

/// # Safety
/// As `MPI_Comm_create_keyval` (the window callbacks have the same shapes).
#[unsafe(export_name = "PMPI_Win_create_keyval")]
pub unsafe extern "C" fn MPI_Win_create_keyval(
    copy: usize,
    delete: usize,
    win_keyval: *mut c_int,
    extra_state: *mut c_void,
) -> c_int {
    // SAFETY: forwarded contract.
    unsafe { MPI_Comm_create_keyval(copy, delete, win_keyval, extra_state) }
}

/// # Safety
/// As `MPI_Comm_free_keyval`.
#[unsafe(export_name = "PMPI_Win_free_keyval")]
pub unsafe extern "C" fn MPI_Win_free_keyval(win_keyval: *mut c_int) -> c_int {
    // SAFETY: forwarded contract.
    unsafe { MPI_Comm_free_keyval(win_keyval) }
}

#[unsafe(export_name = "PMPI_Win_set_attr")]
pub extern "C" fn MPI_Win_set_attr(
    win: Raw,
    win_keyval: c_int,
    attribute_val: *mut c_void,
) -> c_int {
    const CALL: &str = "MPI_Win_set_attr";
    if crate::rma::lookup(win).is_err() {
        return fail(
            MPI_COMM_WORLD,
            MPI_ERR_WIN,
            format!("{CALL}: invalid window handle {win:#x}"),
        );
    }
    if keyval(win_keyval).is_none() {
        return fail(
            MPI_COMM_WORLD,
            MPI_ERR_KEYVAL,
            format!("{CALL}: invalid key {win_keyval}"),
        );
    }
    let _ = MPI_Win_delete_attr(win, win_keyval);
    WIN_ATTRS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert((win, win_keyval), attribute_val as usize);
    MPI_SUCCESS
}

/// Deletes every attribute of `win` (`MPI_Win_free`), each key's delete callback
/// called as `MPI_Win_delete_attr` calls it; the first callback's error, if any.
pub fn win_free_attrs(win: Raw) -> c_int {
    let keys: Vec<c_int> = WIN_ATTRS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .keys()
        .filter(|(w, _)| *w == win)
        .map(|&(_, k)| k)
        .collect();
    let mut rc = MPI_SUCCESS;
    for k in keys.into_iter().rev() {
        let r = MPI_Win_delete_attr(win, k);
        if rc == MPI_SUCCESS {
            rc = r;
        }
    }
    rc
}

/// Calls the key's delete callback (with the window's handle) and forgets the value.
#[unsafe(export_name = "PMPI_Win_delete_attr")]
pub extern "C" fn MPI_Win_delete_attr(win: Raw, win_keyval: c_int) -> c_int {
    let Some(v) = WIN_ATTRS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .remove(&(win, win_keyval))
    else {
        return MPI_SUCCESS;
    };
    if let Some(kv) = keyval(win_keyval)
        && kv.delete != 0
    {
        // SAFETY: a MPI_Win_delete_attr_function registered by the program (the same
        // shape as a communicator's, with the window's handle).
        let f: DeleteFn = unsafe { std::mem::transmute::<usize, DeleteFn>(kv.delete) };
        // SAFETY: the callback's contract.
        let rc = unsafe { f(win, win_keyval, v as *mut c_void, kv.extra) };
        if rc != MPI_SUCCESS {
            return fail(
                MPI_COMM_WORLD,
                rc,
                "MPI_Win_delete_attr: the delete callback failed",
            );
        }
    }
    MPI_SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lowest_id_free_everywhere_is_chosen() {
        let mut a = [0u8; BITMAP_BYTES];
        let mut b = [0u8; BITMAP_BYTES];
        for c in [0, 2, 4, 6] {
            mark(&mut a, c, true);
        }
        for c in [0, 2, 4, 8] {
            mark(&mut b, c, true);
        }
        assert_eq!(
            u16::from_le_bytes(lowest_free([&a[..], &b[..]].into_iter())),
            10
        );
        mark(&mut a, 6, false);
        assert_eq!(
            u16::from_le_bytes(lowest_free([&a[..], &b[..]].into_iter())),
            6
        );
    }
}
