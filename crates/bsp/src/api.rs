//! The safe Rust surface of BSPlib.
//!
//! Remote puts write into registered memory at the end of the superstep, which in C
//! aliases whatever the program holds. Here registered memory belongs to the [`Bsp`]:
//! [`Bsp::push_reg`] takes a vector and gives back an [`Area`] handle, and the program
//! reads and writes it through [`Bsp::area`] and [`Bsp::area_mut`], borrows that end
//! before [`Bsp::sync`] (which takes `&mut self`) can write into it.
//!
//! ```no_run
//! use bulkwire_bsp::{Bsp, Config};
//! # fn main() -> Result<(), bulkwire_bsp::BspError> {
//! # let launch = bulkwire_launch::LaunchConfig::default();
//! // bsprun's job, or 4 copies of this program. The settings usually come from the
//! // environment: `bulkwire_config::Settings::from_env()` (`.launch`, `.bsp`).
//! let mut bsp = Bsp::begin(4, &launch, Config::default())?;
//! let (p, s) = (bsp.nprocs(), bsp.pid());
//! let sums = bsp.push_reg(vec![0u64; p as usize]);
//! bsp.sync()?;
//! for q in 0..p {
//!     bsp.put(q, &[s as u64 * 10], &sums, s as usize)?;
//! }
//! bsp.sync()?;
//! assert_eq!(bsp.area(&sums)[1], 10);
//! bsp.end()?; // every pid but 0 exits here
//! # Ok(()) }
//! ```

use std::any::Any;
use std::collections::HashMap;
use std::marker::PhantomData;

use bulkwire_engine::Transport;
use bulkwire_launch::LaunchConfig;

use crate::BspError;
use crate::config::Config;
use crate::error::misuse;
use crate::runtime::Runtime;

/// Plain old data: any bit pattern is a valid value and there is no padding, so values
/// can travel as bytes.
///
/// # Safety
/// Implement only for types with no padding, no pointers or references, and for which
/// every bit pattern (including all zeros) is valid.
pub unsafe trait Pod: Copy + Send + 'static {}

macro_rules! pod {
    ($($t:ty),*) => { $(
        // SAFETY: primitive numbers: no padding, every bit pattern valid.
        unsafe impl Pod for $t {}
    )* };
}
pod!(
    u8, i8, u16, i16, u32, i32, u64, i64, u128, i128, usize, isize, f32, f64
);
// SAFETY: an array of Pod has no padding between elements and inherits validity.
unsafe impl<T: Pod, const N: usize> Pod for [T; N] {}

fn bytes_of<T: Pod>(s: &[T]) -> &[u8] {
    // SAFETY: Pod has no padding, so every byte of the slice is initialised.
    unsafe { std::slice::from_raw_parts(s.as_ptr().cast(), std::mem::size_of_val(s)) }
}

/// A registered area of `T`s, owned by its [`Bsp`]. Cheap to copy; it names the same
/// logical area on every process (the k-th registration of each).
pub struct Area<T> {
    id: u64,
    _t: PhantomData<fn() -> T>,
}

impl<T> Clone for Area<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for Area<T> {}

impl<T> std::fmt::Debug for Area<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Area#{}", self.id)
    }
}

struct Storage {
    /// A `Box<[T]>` of at least one element (so that every area has its own address).
    data: Box<dyn Any + Send>,
    addr: usize,
    len: usize,
    popped: bool,
}

/// One BSP process, with the standard's calls as methods. Errors are values: a misuse
/// returns [`BspError::Misuse`] naming the call; the program may end the job with
/// [`Bsp::fail`] (what the C ABI does).
pub struct Bsp {
    rt: Runtime,
    areas: HashMap<u64, Storage>,
    next_area: u64,
    /// Areas popped this superstep: freed at the sync that makes the pop effective.
    dying: Vec<u64>,
    launched: bool,
}

/// What [`Bsp::hpmove`] gives: a message's tag and payload, borrowed until the next call
/// that needs the process mutably.
#[derive(Debug)]
pub struct Message<'a> {
    pub tag: &'a [u8],
    pub payload: &'a [u8],
}

/// `bsp_init`: when this process is a spawned rank of a job (not pid 0), runs `spmd` and
/// exits, so that a program whose parallel part is a function rather than `main` works
/// the same under `bsprun` and started by itself. Pid 0 returns and goes on with `main`.
pub fn init(spmd: fn(), launch: &LaunchConfig) {
    if launch.is_spawned() {
        spmd();
        std::process::exit(0);
    }
}

impl Bsp {
    /// `bsp_begin(p)`, see [`Runtime::begin`].
    pub fn begin(p: u32, launch: &LaunchConfig, cfg: Config) -> Result<Bsp, BspError> {
        let rt = Runtime::begin(p, launch, cfg)?;
        Ok(Bsp::wrap(rt, true))
    }

    /// `bsp_begin(p)` in the job `ctl` has joined ([`Runtime::join`]); every process
    /// continues after [`Bsp::end`].
    pub fn join(ctl: bulkwire_launch::Control, p: u32, cfg: Config) -> Result<Bsp, BspError> {
        Ok(Bsp::wrap(Runtime::join(ctl, p, cfg)?, false))
    }

    /// A process over a transport the caller built (e.g. threads of one test): `p`
    /// processes, this one `t.rank()`. See [`Runtime::over`].
    pub fn over(t: Box<dyn Transport>, p: u32, cfg: Config) -> Bsp {
        Bsp::wrap(Runtime::over(t, p, cfg), false)
    }

    /// [`Bsp::over`], synchronising through `board` ([`Runtime::over_on_board`]).
    pub fn over_on_board(
        t: Box<dyn Transport>,
        p: u32,
        cfg: Config,
        board: crate::board::Board,
    ) -> Bsp {
        Bsp::wrap(Runtime::over_on_board(t, p, cfg, board), false)
    }

    fn wrap(rt: Runtime, launched: bool) -> Bsp {
        Bsp {
            rt,
            areas: HashMap::new(),
            next_area: 0,
            dying: Vec::new(),
            launched,
        }
    }

    /// The underlying runtime (raw calls, statistics).
    pub fn runtime(&self) -> &Runtime {
        &self.rt
    }

    pub fn pid(&self) -> u32 {
        self.rt.pid()
    }

    pub fn nprocs(&self) -> u32 {
        self.rt.nprocs()
    }

    /// Seconds since the computation began.
    pub fn time(&self) -> f64 {
        self.rt.time()
    }

    /// Ends the superstep: every put, get and send of it takes effect, registrations
    /// pushed or popped in it become effective, and the messages sent to this process
    /// become readable.
    pub fn sync(&mut self) -> Result<(), BspError> {
        self.rt.sync()?;
        for id in self.dying.drain(..) {
            self.areas.remove(&id);
        }
        Ok(())
    }

    /// Ends the computation. In a launched job every process but pid 0 exits here with
    /// status 0, as the standard says; pid 0 (and every process of a run over given
    /// transports) continues.
    pub fn end(self) -> Result<(), BspError> {
        let pid = self.pid();
        let launched = self.launched;
        self.rt.end_sync()?;
        self.rt.finish()?;
        if launched && pid != 0 {
            std::process::exit(0);
        }
        Ok(())
    }

    /// `bsp_abort`: stops every process of the job, the launcher printing `msg` once.
    pub fn abort(&self, msg: &str) -> ! {
        self.rt.abort(msg)
    }

    /// Ends the job after an error of `call`, as the C library does.
    pub fn fail(&self, call: &str, e: BspError) -> ! {
        self.rt.fail(call, e)
    }

    /// Registers `data` (collective; effective at the next sync). The area's contents
    /// are then read and written with [`Bsp::area`] and [`Bsp::area_mut`].
    pub fn push_reg<T: Pod>(&mut self, data: Vec<T>) -> Area<T> {
        let len = data.len();
        let mut data = data;
        if data.is_empty() {
            // SAFETY: all zeros is a valid Pod. One hidden element gives the empty area an
            // address of its own, so that it does not shadow other empty areas.
            data.push(unsafe { std::mem::zeroed() });
        }
        let boxed: Box<[T]> = data.into_boxed_slice();
        let addr = boxed.as_ptr() as usize;
        let id = self.next_area;
        self.next_area += 1;
        self.rt
            .with(|c| c.push_reg(addr, len * std::mem::size_of::<T>()));
        self.areas.insert(
            id,
            Storage {
                data: Box::new(boxed),
                addr,
                len,
                popped: false,
            },
        );
        Area {
            id,
            _t: PhantomData,
        }
    }

    /// Deregisters `area` (collective; effective at the next sync, which also frees it).
    pub fn pop_reg<T: Pod>(&mut self, area: &Area<T>) -> Result<(), BspError> {
        let s = self.storage(area)?;
        if s.popped {
            return misuse(format!("bsp_pop_reg: {area:?} was already popped"));
        }
        let addr = s.addr;
        self.rt.with(|c| c.pop_reg("bsp_pop_reg", addr))?;
        self.areas.get_mut(&area.id).expect("checked").popped = true;
        self.dying.push(area.id);
        Ok(())
    }

    fn storage<T: Pod>(&self, area: &Area<T>) -> Result<&Storage, BspError> {
        self.areas
            .get(&area.id)
            .ok_or_else(|| BspError::Misuse(format!("{area:?} was popped and freed")))
    }

    /// The contents of `area`.
    ///
    /// # Panics
    /// If the area was popped and freed by a sync, or is of another `T` (impossible with
    /// handles from this process).
    pub fn area<T: Pod>(&self, area: &Area<T>) -> &[T] {
        let s = self.storage(area).unwrap_or_else(|e| panic!("{e}"));
        let b = s
            .data
            .downcast_ref::<Box<[T]>>()
            .expect("area of this type");
        &b[..s.len]
    }

    /// The contents of `area`, writable.
    ///
    /// # Panics
    /// As [`Bsp::area`].
    pub fn area_mut<T: Pod>(&mut self, area: &Area<T>) -> &mut [T] {
        let s = self
            .areas
            .get_mut(&area.id)
            .unwrap_or_else(|| panic!("{area:?} was popped and freed"));
        let len = s.len;
        let b = s
            .data
            .downcast_mut::<Box<[T]>>()
            .expect("area of this type");
        &mut b[..len]
    }

    fn addr_len<T: Pod>(&self, area: &Area<T>) -> Result<(usize, usize), BspError> {
        let s = self.storage(area)?;
        Ok((s.addr, s.len))
    }

    /// `bsp_put`: copies `src` now; at the end of the superstep it is written into
    /// `pid`'s `dst` from element `offset` on.
    pub fn put<T: Pod>(
        &mut self,
        pid: u32,
        src: &[T],
        dst: &Area<T>,
        offset: usize,
    ) -> Result<(), BspError> {
        let (addr, _) = self.addr_len(dst)?;
        let sz = std::mem::size_of::<T>();
        let off = offset
            .checked_mul(sz)
            .ok_or_else(|| BspError::Misuse(format!("bsp_put: offset {offset} is out of range")))?;
        self.rt
            .with(|c| c.put("bsp_put", pid, bytes_of(src), addr, off))
    }

    /// `bsp_hpput`: `len` elements of this process's `src` from `src_offset`, read at
    /// the sync (not now), written into `pid`'s `dst` from `dst_offset`.
    pub fn hpput<T: Pod>(
        &mut self,
        pid: u32,
        src: &Area<T>,
        src_offset: usize,
        dst: &Area<T>,
        dst_offset: usize,
        len: usize,
    ) -> Result<(), BspError> {
        let (saddr, slen) = self.addr_len(src)?;
        let (daddr, _) = self.addr_len(dst)?;
        if src_offset.checked_add(len).is_none_or(|e| e > slen) {
            return misuse(format!(
                "bsp_hpput: {len} elements from {src_offset} do not fit the source area of \
                 {slen}"
            ));
        }
        let sz = std::mem::size_of::<T>();
        // SAFETY: the source lies within an area this Bsp owns; it is freed only by a
        // sync, after the sync has read it.
        unsafe {
            self.rt.with(|c| {
                c.hpput(
                    "bsp_hpput",
                    pid,
                    saddr + src_offset * sz,
                    daddr,
                    dst_offset * sz,
                    len * sz,
                )
            })
        }
    }

    /// `bsp_get`: at the end of the superstep, `len` elements of `pid`'s `src` from
    /// `src_offset` (as they are before any put of the superstep) land in this process's
    /// `dst` from `dst_offset`.
    pub fn get<T: Pod>(
        &mut self,
        pid: u32,
        src: &Area<T>,
        src_offset: usize,
        dst: &Area<T>,
        dst_offset: usize,
        len: usize,
    ) -> Result<(), BspError> {
        let (saddr, _) = self.addr_len(src)?;
        let (daddr, dlen) = self.addr_len(dst)?;
        if dst_offset.checked_add(len).is_none_or(|e| e > dlen) {
            return misuse(format!(
                "bsp_get: {len} elements at {dst_offset} do not fit the destination area \
                 of {dlen}"
            ));
        }
        let sz = std::mem::size_of::<T>();
        self.rt.with(|c| {
            c.get(
                "bsp_get",
                pid,
                saddr,
                src_offset * sz,
                daddr + dst_offset * sz,
                len * sz,
            )
        })
    }

    /// `bsp_hpget`: the same as [`Bsp::get`] here (values are read at the sync either
    /// way, and written when they arrive).
    pub fn hpget<T: Pod>(
        &mut self,
        pid: u32,
        src: &Area<T>,
        src_offset: usize,
        dst: &Area<T>,
        dst_offset: usize,
        len: usize,
    ) -> Result<(), BspError> {
        self.get(pid, src, src_offset, dst, dst_offset, len)
    }

    /// `bsp_direct_get` (MulticoreBSP for C): `dst.len()` elements of `pid`'s `src`
    /// from element `offset`, as they are now (not at the sync), copied into `dst` before
    /// it returns. The owner may be writing them meanwhile: then some may be old, some
    /// new.
    pub fn direct_get<T: Pod>(
        &mut self,
        pid: u32,
        src: &Area<T>,
        offset: usize,
        dst: &mut [T],
    ) -> Result<(), BspError> {
        let (addr, _) = self.addr_len(src)?;
        let sz = std::mem::size_of::<T>();
        let off = offset.checked_mul(sz).ok_or_else(|| {
            BspError::Misuse(format!("bsp_direct_get: offset {offset} is out of range"))
        })?;
        // SAFETY: `dst` is a writable slice of `size_of_val(dst)` bytes, and any bit
        // pattern is a valid `T` (Pod).
        unsafe {
            self.rt.direct_get(
                "bsp_direct_get",
                pid,
                addr,
                off,
                dst.as_mut_ptr().cast(),
                std::mem::size_of_val(dst),
            )
        }
    }

    /// `bsp_set_tagsize`: the tag size from the next superstep on (collective); returns
    /// the size the previous call of this superstep asked for, else the size in effect.
    pub fn set_tagsize(&mut self, bytes: usize) -> usize {
        self.rt.with(|c| c.set_tagsize(bytes))
    }

    /// The tag size in effect.
    pub fn tagsize(&self) -> usize {
        self.rt.with(|c| c.tagsize())
    }

    /// `bsp_send`: `tag` (of the tag size) and `payload` are copied now and readable by
    /// `pid` in the next superstep.
    pub fn send(&mut self, pid: u32, tag: &[u8], payload: &[u8]) -> Result<(), BspError> {
        self.rt.with(|c| c.send("bsp_send", pid, tag, payload))
    }

    /// `bsp_hpsend`: like [`Bsp::send`] with the payload taken from `len` elements of an
    /// area at the sync.
    pub fn hpsend<T: Pod>(
        &mut self,
        pid: u32,
        tag: &[u8],
        src: &Area<T>,
        offset: usize,
        len: usize,
    ) -> Result<(), BspError> {
        let (addr, alen) = self.addr_len(src)?;
        if offset.checked_add(len).is_none_or(|e| e > alen) {
            return misuse(format!(
                "bsp_hpsend: {len} elements from {offset} do not fit the area of {alen}"
            ));
        }
        let sz = std::mem::size_of::<T>();
        // SAFETY: as in hpput: the area outlives the sync that reads it.
        unsafe {
            self.rt
                .with(|c| c.hpsend("bsp_hpsend", pid, tag, addr + offset * sz, len * sz))
        }
    }

    /// `bsp_qsize`: messages waiting and their payload bytes.
    pub fn qsize(&self) -> (usize, usize) {
        let (n, b) = self.rt.with(|c| c.qsize());
        (n, b as usize)
    }

    /// `bsp_get_tag`: the payload length and tag of the first message, if any.
    pub fn get_tag(&self) -> Option<(usize, Vec<u8>)> {
        self.rt
            .with(|c| c.first_message().map(|(t, p)| (p.len(), t.to_vec())))
    }

    /// `bsp_move`: copies the first message's payload into `buf` (as much as fits),
    /// removes the message, and returns its full payload length; `None` if the queue is
    /// empty.
    pub fn move_message(&mut self, buf: &mut [u8]) -> Option<usize> {
        self.rt.with(|c| {
            let (_, p) = c.first_message()?;
            let n = p.len();
            let k = n.min(buf.len());
            buf[..k].copy_from_slice(&p[..k]);
            c.pop_message();
            Some(n)
        })
    }

    /// `bsp_hpmove`: the first message, without copying, removed from the queue.
    pub fn hpmove(&mut self) -> Option<Message<'_>> {
        let (t, p) = self.rt.with(|c| {
            let (t, p) = c.first_message()?;
            let r = (
                (t.as_ptr() as usize, t.len()),
                (p.as_ptr() as usize, p.len()),
            );
            c.pop_message();
            Some(r)
        })?;
        // SAFETY: the queue's buffers are freed only by the next sync or by end, both of
        // which need `&mut self`/`self`, which the returned borrow prevents; the progress
        // thread never touches them.
        unsafe {
            Some(Message {
                tag: std::slice::from_raw_parts(t.0 as *const u8, t.1),
                payload: std::slice::from_raw_parts(p.0 as *const u8, p.1),
            })
        }
    }
}
