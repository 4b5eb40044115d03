//! The state of one BSP process and what its calls do: DRMA and BSMP calls only record
//! (puts are copied at once into the message for their destination), and `sync` does the
//! communication of the superstep, as the BSPlib paper's messaging layer (section 3):
//!
//! 1. **Repackaging.** Every put, get request and send of the superstep to one destination
//!    is already one message (cut into chunks only under a rate cap); the protocol cuts it
//!    into full packets.
//! 2. **Reduction = barrier.** Each process's row (whom it sends how many bytes, and its
//!    collective calls) is spread by dissemination: in round r a process sends everything it
//!    knows to `pid + 2^r` and learns from `pid - 2^r`, so after ceil(log2 p) rounds every
//!    process holds every row. That is the OR-reduction of the destination rows, and it is
//!    the barrier. When every process shares one host, the rows meet on the sync board
//!    ([`crate::board`]) instead, and the rounds run only in supersteps that register,
//!    set a tag size or end.
//! 3. **Total exchange** is folded into it: the rows carry sizes, so each process knows
//!    what it will receive from whom before anything is sent.
//! 4. **Destination scheduling and pacing.** Messages go out in latin-square order, one
//!    destination at a time: the next is handed to the transport only when the previous
//!    one has left it (`queued_bytes`), so the protocol's round-robin cannot undo the
//!    schedule; an optional rate cap spaces the chunks.
//!    A message that is the same to every other process (a broadcast) goes once, by the
//!    job's multicast group, when the job has one (`broadcast_len`, `Core::multicast`).
//! 5. **Completion.** A process continues when every announced byte has arrived and every
//!    get it asked for has been answered. Get requests are served as they arrive, before
//!    any put of the superstep is written: get results, then puts, are written only once
//!    every message of the superstep has arrived.

use std::collections::VecDeque;
use std::time::Duration;

use bulkwire_engine::mcast::McastGroup;
use bulkwire_engine::progress::Service;
use bulkwire_engine::vm::Published;
use bulkwire_engine::{Event, Transport};
use bulkwire_protocol::Time;
use bytes::Bytes;

use crate::BspError;
use crate::board::Board;
use crate::bsmp::Queue;
use crate::config::{Config, Schedule};
use crate::direct::InPlace;
use crate::error::misuse;
use crate::regs::{Regs, Unregistered};
use crate::wire::{self, Cell, LentPut, Rec, RegOp, Summary};

/// What one destination gets this superstep.
#[derive(Default)]
struct Outbox {
    /// DATA chunks, each a header then records.
    buf: Vec<u8>,
    /// Where each chunk starts in `buf`.
    chunks: Vec<usize>,
    /// Record bytes of the last chunk plus the reply bytes its gets ask for.
    weight: usize,
    /// Get requests, in order: where each value goes and its length.
    gets: Vec<(usize, usize)>,
    get_bytes: u64,
    /// `hpput`/`hpsend` data, read only when the message is built during the sync (so
    /// their bytes take no memory before): position in the message, source, length.
    holes: Vec<(usize, usize, usize)>,
    /// Bytes of the holes: the message is `buf` with them inserted.
    hole_bytes: usize,
    /// Bytes of the message already handed to the transport, before the barrier (see
    /// `Core::send_small`); `buf` is then empty.
    sent: u64,
    /// A get or a send is recorded: the message is not lent (see `Core::lend`).
    mixed: bool,
}

impl Outbox {
    /// Makes room for a record of `rec` bytes asking for `reply` bytes, `held` of them
    /// in holes (not in `buf`): starts a chunk when there is none or the current one
    /// would pass `limit`.
    #[inline]
    fn reserve(&mut self, step: u32, limit: Option<usize>, rec: usize, reply: usize, held: usize) {
        let add = rec + reply;
        if self.chunks.is_empty() || limit.is_some_and(|c| self.weight > 0 && self.weight + add > c)
        {
            if self.buf.capacity() == 0 {
                // Room for a few dozen small records before the first regrowth.
                self.buf.reserve(FIRST_CAPACITY);
            }
            self.chunks.push(self.len());
            wire::put_head(&mut self.buf, wire::DATA, step);
            self.weight = 0;
        }
        self.weight += add;
        self.buf.reserve(rec - held);
    }

    /// Bytes of the message, holes included.
    fn len(&self) -> usize {
        self.buf.len() + self.hole_bytes
    }

    /// Bytes for the destination this superstep, sent or not.
    fn total(&self) -> u64 {
        self.len() as u64 + self.sent
    }

    /// The recorded message as it stands (holes unfilled), its records taken out.
    fn take_records(&mut self) -> Recorded {
        self.hole_bytes = 0;
        Recorded {
            buf: std::mem::take(&mut self.buf),
            holes: std::mem::take(&mut self.holes),
            chunks: std::mem::take(&mut self.chunks),
            mixed: self.mixed,
        }
    }

    /// The message, built, to leave before the exchange (the transport, the sync board);
    /// its gets and the bytes they ask for stay, to match the replies.
    fn take_message(&mut self) -> Vec<u8> {
        self.take_records().build()
    }

    /// The superstep's message, if any, leaving the outbox empty for the next one (with
    /// the memory of a message that went elsewhere, the sync board, kept for reuse).
    fn take_recorded(&mut self) -> Option<Recorded> {
        let rec = (!self.buf.is_empty()).then(|| self.take_records());
        self.chunks.clear();
        self.holes.clear();
        self.weight = 0;
        self.get_bytes = 0;
        self.hole_bytes = 0;
        self.sent = 0;
        self.mixed = false;
        rec
    }

    /// Leaves room for `n` bytes read from `src` when the message is built.
    fn hole(&mut self, src: usize, n: usize) {
        self.holes.push((self.len(), src, n));
        self.hole_bytes += n;
    }
}

/// The length of this superstep's message to every other process when it is one and the
/// same message (a broadcast): at least `min` bytes, in one chunk, without get requests
/// (their replies are per destination), nothing of it sent yet, and every other process's
/// record for record and byte for byte, hpput and hpsend holes (position, source, length)
/// included. A put or send to only some processes, or anything else to one of them, makes
/// it none: then every message goes its own way, as without a group. Needs three
/// processes or more (at two a broadcast is one message anyway).
fn broadcast_len(out: &[Outbox], me: usize, min: usize) -> Option<usize> {
    if out.len() < 3 {
        return None;
    }
    let mut others = out.iter().enumerate().filter(|&(d, _)| d != me);
    let (_, first) = others.next()?;
    let len = first.len();
    let same = |o: &Outbox| {
        o.sent == 0
            && o.gets.is_empty()
            && o.chunks.len() == 1
            && o.len() == len
            && o.holes == first.holes
            && o.buf == first.buf
    };
    (len >= min.max(1) && same(first) && others.all(|(_, o)| same(o))).then_some(len)
}

/// One destination's message as recorded: bytes, holes to fill, chunk starts.
struct Recorded {
    buf: Vec<u8>,
    holes: Vec<(usize, usize, usize)>,
    chunks: Vec<usize>,
    mixed: bool,
}

impl Recorded {
    /// Bytes of the message, holes included.
    fn len(&self) -> usize {
        self.buf.len() + self.holes.iter().map(|h| h.2).sum::<usize>()
    }

    /// The puts of the message, each with the address of its bytes here (in `buf`, or an
    /// hpput's source), for the destination to read in place; `None` if the message is
    /// not worth lending: it holds a get or a send, or its puts average under
    /// [`LEND_PIECE`] bytes (reading many small pieces costs more than copying them
    /// through the transport).
    fn lent_puts(&self) -> Option<Vec<LentPut>> {
        if self.mixed || self.chunks != [0] {
            return None;
        }
        let most = self.len() / LEND_PIECE;
        let mut puts = Vec::new();
        let mut r = wire::Reader::at(&self.buf, wire::HEAD);
        let mut holes = self.holes.iter().peekable();
        // Hole bytes before the reader's position: a put's place in the message is its
        // place in `buf` plus these.
        let mut shift = 0;
        while !r.is_empty() {
            if puts.len() >= most || r.u8()? != wire::REC_PUT {
                return None;
            }
            let slot = u32::try_from(r.var()?).ok()?;
            let offset = r.size()?;
            let len = r.size()?;
            let addr = match holes.peek() {
                Some(&&(at, src, n)) if at == r.pos() + shift => {
                    holes.next();
                    if n != len {
                        return None;
                    }
                    shift += len;
                    src as u64
                }
                _ => self.buf.as_ptr() as u64 + r.take(len)?.start as u64,
            };
            puts.push(LentPut {
                slot,
                offset,
                len,
                addr,
            });
        }
        holes.next().is_none().then_some(puts)
    }

    /// The message with its holes filled from their sources.
    fn build(self) -> Vec<u8> {
        if self.holes.is_empty() {
            return self.buf;
        }
        let total = self.buf.len() + self.holes.iter().map(|h| h.2).sum::<usize>();
        let mut out = Vec::with_capacity(total);
        let mut from = 0;
        for (at, src, n) in self.holes {
            let upto = from + (at - out.len());
            out.extend_from_slice(&self.buf[from..upto]);
            from = upto;
            // SAFETY: the caller of hpput/hpsend promised `src` readable for `n` bytes
            // until the end of this sync.
            out.extend_from_slice(unsafe { std::slice::from_raw_parts(src as *const u8, n) });
        }
        out.extend_from_slice(&self.buf[from..]);
        out
    }

    /// The lowest and highest source address the holes read, if any.
    fn sources(&self) -> Option<(usize, usize)> {
        let lo = self.holes.iter().map(|h| h.1).min()?;
        let hi = self.holes.iter().map(|h| h.1 + h.2).max()?;
        Some((lo, hi))
    }
}

/// Counters for the statistics `bsp_end` prints.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    pub supersteps: u64,
    /// Bytes of DATA and REPLY messages handed to the transport / received.
    pub bytes_out: u64,
    pub bytes_in: u64,
    /// Bytes of puts and gets within this process (no transport).
    pub bytes_local: u64,
    /// DATA and REPLY messages handed to the transport / received.
    pub messages_out: u64,
    pub messages_in: u64,
    /// Bytes of messages of puts lent to processes of this host and read there in place
    /// (also counted in `bytes_out`).
    pub bytes_lent: u64,
    /// Bytes of get values lent the same way (`Core::lend_reply`; also in `bytes_out`).
    pub get_bytes_lent: u64,
}

/// What a wait loop's poll says.
pub(crate) enum Poll {
    Done,
    /// Not yet; poll again after progress, or at this time at the latest.
    Wait(Option<Time>),
}

/// State of one superstep's data phase.
#[derive(Default)]
struct Exchange {
    step: u32,
    /// Bytes announced by each sender for us, bytes arrived.
    expect: Vec<u64>,
    got: Vec<u64>,
    /// The sender's data holds get requests for us: we answer it.
    owes: Vec<bool>,
    senders_left: usize,
    /// DATA chunks arrived (ours included), to be applied.
    data: Vec<(u32, Vec<u8>)>,
    /// The replies to our gets, kept until all are here and all data has arrived.
    held: Vec<(u32, Vec<u8>)>,
    /// The server of each get request, in call order.
    get_order: Vec<u32>,
    /// Our get requests per server (destination, length), and reply bytes still due.
    gets: Vec<Vec<(usize, usize)>>,
    reply_left: Vec<u64>,
    replies_left: usize,
    applied: bool,
    /// Destinations in schedule order, and the next one to feed.
    order: Vec<u32>,
    next: usize,
    /// In the latin square, the step our own sending has reached (that of the destination
    /// fed last): a sender whose step toward us is further ahead than [`LOOKAHEAD`] is not
    /// waited on yet, so the protocol does not prod it for data it is not due to send.
    /// `None`: every sender is waited on (another schedule, few processes, or all our data
    /// handed over).
    turn: Option<usize>,
    /// The destination being fed: its data and the next chunk.
    cur: Option<(u32, Bytes, Vec<usize>, usize)>,
    /// A destination whose data must leave the transport before the next is fed.
    draining: Option<u32>,
    next_send_at: Time,
    /// All our data to a destination is queued / anything was sent / end_phase called.
    fed: Vec<bool>,
    sent: Vec<bool>,
    ended: Vec<bool>,
    /// `Transport::expect` is on for the peer.
    waiting: Vec<bool>,
    queue: Queue,
    /// Nobody reads our memory this superstep (no get requests for us): big messages of
    /// puts are written as they arrive (see `apply_early`).
    early: bool,
    /// The span of the sources our unsent hpput/hpsend data will be read from: an early
    /// write there must wait.
    hp_src: Option<(usize, usize)>,
    /// Who wrote which bytes early.
    owners: Owners,
    /// Memory of small messages already written, for the next superstep's board reads.
    pool: Vec<Vec<u8>>,
    /// The get values lent to each requester (ranges of our areas, in request order)
    /// until it answers (`Core::lend_reply`), and how many: nothing of ours is written
    /// before they are read.
    reply_lent: Vec<Option<Vec<(usize, usize)>>>,
    replies_lent: usize,
}

/// The user side of one BSP process: registrations, the superstep's outgoing data and the
/// message queue. Only the process's own thread touches it (`crate::lock`), so recording
/// a put takes no lock; the transport side ([`Net`]) is shared with the progress thread.
pub struct Core {
    pid: u32,
    p: u32,
    cfg: Config,
    /// Index of the current superstep (syncs completed).
    step: u32,
    pub(crate) regs: Regs,
    out: Vec<Outbox>,
    tagsize: usize,
    next_tagsize: Option<usize>,
    /// The process each get of the superstep reads from, in call order.
    get_order: Vec<u32>,
    queue: Queue,
    pub counters: Counters,
    /// The last superstep's exchange state, reused by the next.
    spare: Option<Exchange>,
    /// The sync board, when every process shares this host over shared memory.
    board: Option<Board>,
    /// A large message sent before this superstep's barrier (see `send_small`).
    early_large: Option<u32>,
    /// Messages lent to each destination this superstep, kept until it has read them
    /// (see `Core::lend`), and how many.
    lent: Vec<Option<Recorded>>,
    lent_left: usize,
    /// This superstep's message to every other process is one broadcast of this many
    /// bytes, which goes by the job's multicast group (see [`broadcast_len`]).
    bcast: Option<usize>,
}

/// The transport side of one BSP process: what the progress thread may drive while the
/// program computes. Lives behind [`bulkwire_engine::progress::Shared`].
pub struct Net {
    pub(crate) t: Box<dyn Transport>,
    p: u32,
    /// The superstep of the process: messages of it and of the next are valid.
    pub(crate) step: u32,
    /// Messages taken from the transport, not consumed yet: (sender, bytes).
    inbox: VecDeque<(u32, Vec<u8>)>,
    /// An error met by the progress thread, reported at the next sync.
    failure: Option<BspError>,
    /// This process's registrations by slot (address, size), to serve direct gets.
    pub(crate) local: Vec<Option<(usize, usize)>>,
    /// Direct gets of the next superstep, served once this one ends.
    pub(crate) pending_direct: Vec<(u32, Vec<u8>)>,
    /// Per peer: whether its memory can be read in place.
    pub(crate) in_place: Vec<InPlace>,
    /// Per peer: it shares this host and our data to it goes over shared memory, so our
    /// large messages of puts and get values may be lent to it (`Core::lend`,
    /// `Core::lend_reply`).
    pub(crate) lend_to: Vec<bool>,
    /// The job's multicast group, where the job has one and every member is a process of
    /// the computation (see [`Core::multicast`]).
    pub(crate) mcast: Option<McastGroup>,
    /// Longest message the group carries.
    pub(crate) mcast_max: usize,
}

impl Core {
    /// A process of a BSP computation of `p` processes over `t` (which may connect more
    /// ranks; those at `p` and above are not used): its user side and its transport side.
    pub fn new(mut t: Box<dyn Transport>, p: u32, cfg: Config) -> (Core, Net) {
        let pid = t.rank();
        // Colours from the first barrier on; until then nothing is freed implicitly.
        if let Some(c) = t.coloured() {
            c.set_colour(0);
        }
        let core = Core {
            pid,
            p,
            cfg,
            step: 0,
            regs: Regs::default(),
            out: (0..p).map(|_| Outbox::default()).collect(),
            tagsize: 0,
            next_tagsize: None,
            get_order: Vec::new(),
            queue: Queue::default(),
            counters: Counters::default(),
            spare: None,
            board: None,
            early_large: None,
            lent: (0..p).map(|_| None).collect(),
            lent_left: 0,
            bcast: None,
        };
        let net = Net {
            t,
            p,
            step: 0,
            inbox: VecDeque::new(),
            failure: None,
            local: Vec::new(),
            pending_direct: Vec::new(),
            in_place: vec![InPlace::default(); p as usize],
            lend_to: vec![false; p as usize],
            mcast: None,
            mcast_max: 0,
        };
        (core, net)
    }

    /// Synchronises through `board` from now on (see [`crate::board`]); its processes
    /// must be this computation's.
    pub fn set_board(&mut self, board: Board) {
        debug_assert_eq!(board.nprocs(), self.p as usize);
        self.board = Some(board);
    }

    /// Whether supersteps synchronise through the sync board.
    pub fn on_board(&self) -> bool {
        self.board.is_some()
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    pub fn nprocs(&self) -> u32 {
        self.p
    }

    pub(crate) fn check_pid(&self, call: &str, pid: u32) -> Result<(), BspError> {
        if pid >= self.p {
            return misuse(format!(
                "{call}: pid {pid} is not a process of this computation (pids are 0..{})",
                self.p - 1
            ));
        }
        Ok(())
    }

    /// The slot registered at `addr`, for a call naming it.
    pub(crate) fn slot(&self, call: &str, addr: usize) -> Result<u32, BspError> {
        self.regs.lookup(addr).or_else(|why| {
            let hint = match why {
                Unregistered::Pending => {
                    " (it was registered in this superstep; registrations take effect at \
                     the next bsp_sync)"
                        .to_string()
                }
                Unregistered::Inside { base, offset } => format!(
                    " (it lies {offset} bytes inside the area registered at {base:#x}: \
                     name that address and pass the offset)"
                ),
                Unregistered::Unknown => String::new(),
            };
            misuse(format!("{call}: address {addr:#x} is not registered{hint}"))
        })
    }

    /// Checks `[offset, offset + n)` against what `pid` registered in `slot`.
    pub(crate) fn check_bounds(
        &self,
        call: &str,
        pid: u32,
        slot: u32,
        addr: usize,
        offset: usize,
        n: usize,
    ) -> Result<(), BspError> {
        let reg = self.regs.get(slot).expect("lookup gives live slots");
        let size = reg.sizes[pid as usize];
        if (offset as u64)
            .checked_add(n as u64)
            .is_none_or(|end| end > size)
        {
            let (verb, prep) = if call.contains("get") {
                ("reading", "from")
            } else {
                ("writing", "into")
            };
            return misuse(format!(
                "{call}: {verb} {n} bytes at offset {offset} {prep} pid {pid}'s area \
                 (registered here at {addr:#x}), but pid {pid} registered it with {size} \
                 bytes"
            ));
        }
        Ok(())
    }

    fn chunk_limit(&self, pid: u32) -> Option<usize> {
        // Our own data never travels: one chunk.
        if pid == self.pid {
            None
        } else {
            self.cfg.chunk
        }
    }

    /// `bsp_put`: copies `src` now; it is written into `pid`'s area registered as `dst`,
    /// at `offset`, at the end of the superstep.
    #[inline]
    pub fn put(
        &mut self,
        call: &str,
        pid: u32,
        src: &[u8],
        dst: usize,
        offset: usize,
    ) -> Result<(), BspError> {
        let n = src.len();
        // The common case, kept short: a registration just used, in bounds, one record.
        // Everything else, errors included, takes the checks of `put_checked`.
        if let Some(slot) = self.regs.last_slot(dst)
            && pid < self.p
            && (pid == self.pid || self.cfg.chunk.is_none())
            && let Some(reg) = self.regs.get(slot)
            && n > 0
            && (offset as u64)
                .checked_add(n as u64)
                .is_some_and(|end| end <= reg.sizes[pid as usize])
        {
            let step = self.step;
            let o = &mut self.out[pid as usize];
            // Room for the longest head: without a chunk limit the record's exact size
            // matters to nobody, and computing it costs three varint lengths per put.
            o.reserve(step, None, wire::MAX_REC_HEAD + n, 0, 0);
            wire::put_rec_head(
                &mut o.buf,
                wire::REC_PUT,
                slot as u64,
                offset as u64,
                n as u64,
            );
            wire::append(&mut o.buf, src);
            return Ok(());
        }
        self.put_checked(call, pid, src, dst, offset)
    }

    #[inline(never)]
    fn put_checked(
        &mut self,
        call: &str,
        pid: u32,
        src: &[u8],
        dst: usize,
        offset: usize,
    ) -> Result<(), BspError> {
        // Nothing to write: no check either, as the peers do (a 0-byte put may name any
        // address).
        if src.is_empty() {
            return Ok(());
        }
        self.check_pid(call, pid)?;
        let slot = self.slot(call, dst)?;
        self.check_bounds(call, pid, slot, dst, offset, src.len())?;
        self.put_record(pid, slot, offset, src.len(), false, |o, range| {
            wire::append(&mut o.buf, &src[range]);
        });
        Ok(())
    }

    /// `bsp_hpput`: like [`Core::put`], but `src` is read at the sync.
    ///
    /// # Safety
    /// `src` must be readable for `n` bytes at the next sync.
    pub unsafe fn hpput(
        &mut self,
        call: &str,
        pid: u32,
        src: usize,
        dst: usize,
        offset: usize,
        n: usize,
    ) -> Result<(), BspError> {
        if n == 0 {
            return Ok(());
        }
        self.check_pid(call, pid)?;
        let slot = self.slot(call, dst)?;
        self.check_bounds(call, pid, slot, dst, offset, n)?;
        self.put_record(pid, slot, offset, n, true, |o, range| {
            o.hole(src + range.start, range.len());
        });
        Ok(())
    }

    /// Appends PUT records for `n` bytes (split at the chunk limit); `fill` appends the
    /// bytes of each piece, or leaves a hole for them (`held`).
    #[allow(clippy::too_many_arguments)]
    fn put_record(
        &mut self,
        pid: u32,
        slot: u32,
        offset: usize,
        n: usize,
        held: bool,
        mut fill: impl FnMut(&mut Outbox, std::ops::Range<usize>),
    ) {
        let limit = self.chunk_limit(pid);
        let step = self.step;
        let o = &mut self.out[pid as usize];
        let piece = limit.unwrap_or(usize::MAX).max(1);
        let mut done = 0;
        loop {
            let k = (n - done).min(piece);
            let off = (offset + done) as u64;
            let rec = 1 + wire::var_len(slot as u64) + wire::var_len(off) + wire::var_len(k as u64);
            o.reserve(step, limit, rec + k, 0, if held { k } else { 0 });
            wire::put_rec_head(&mut o.buf, wire::REC_PUT, slot as u64, off, k as u64);
            fill(o, done..done + k);
            done += k;
            if done >= n {
                break;
            }
        }
    }

    /// `bsp_get`: at the end of the superstep, `n` bytes at `offset` of `pid`'s area
    /// registered as `src` are read (before any put of the superstep is written) and
    /// written to `dst`.
    pub fn get(
        &mut self,
        call: &str,
        pid: u32,
        src: usize,
        offset: usize,
        dst: usize,
        n: usize,
    ) -> Result<(), BspError> {
        if n == 0 {
            return Ok(());
        }
        self.check_pid(call, pid)?;
        let slot = self.slot(call, src)?;
        self.check_bounds(call, pid, slot, src, offset, n)?;
        let limit = self.chunk_limit(pid);
        let step = self.step;
        let o = &mut self.out[pid as usize];
        o.mixed = true;
        let piece = limit.unwrap_or(usize::MAX).max(1);
        let mut done = 0;
        loop {
            let k = (n - done).min(piece);
            let off = (offset + done) as u64;
            let rec = 1 + wire::var_len(slot as u64) + wire::var_len(off) + wire::var_len(k as u64);
            o.reserve(step, limit, rec, k, 0);
            o.buf.push(wire::REC_GET);
            wire::put_var(&mut o.buf, slot as u64);
            wire::put_var(&mut o.buf, off);
            wire::put_var(&mut o.buf, k as u64);
            o.gets.push((dst + done, k));
            o.get_bytes += k as u64;
            // Where each piece's value comes from, in call order: results from several
            // processes land in this order (see `write_in_order`).
            self.get_order.push(pid);
            done += k;
            if done >= n {
                break;
            }
        }
        Ok(())
    }

    pub fn tagsize(&self) -> usize {
        self.tagsize
    }

    /// `bsp_set_tagsize`: the size from the next superstep on. Returns the size the
    /// previous call of this superstep asked for, or the current one (BSPonMPI's rule:
    /// calls chain).
    pub fn set_tagsize(&mut self, size: usize) -> usize {
        self.next_tagsize.replace(size).unwrap_or(self.tagsize)
    }

    /// `bsp_send`: `tag` and `payload` are copied now and readable by `pid` in the next
    /// superstep.
    pub fn send(
        &mut self,
        call: &str,
        pid: u32,
        tag: &[u8],
        payload: &[u8],
    ) -> Result<(), BspError> {
        self.send_record(call, pid, tag, payload.len(), false, |o| {
            o.buf.extend_from_slice(payload);
        })
    }

    /// `bsp_hpsend`: like [`Core::send`], but the payload is read at the sync.
    ///
    /// # Safety
    /// `payload` must be readable for `n` bytes at the next sync.
    pub unsafe fn hpsend(
        &mut self,
        call: &str,
        pid: u32,
        tag: &[u8],
        payload: usize,
        n: usize,
    ) -> Result<(), BspError> {
        self.send_record(call, pid, tag, n, true, |o| o.hole(payload, n))
    }

    fn send_record(
        &mut self,
        call: &str,
        pid: u32,
        tag: &[u8],
        n: usize,
        held: bool,
        fill: impl FnOnce(&mut Outbox),
    ) -> Result<(), BspError> {
        self.check_pid(call, pid)?;
        if tag.len() != self.tagsize {
            return misuse(format!(
                "{call}: a tag of {} bytes, but the tag size is {} (bsp_set_tagsize)",
                tag.len(),
                self.tagsize
            ));
        }
        let limit = self.chunk_limit(pid);
        let step = self.step;
        let o = &mut self.out[pid as usize];
        o.mixed = true;
        let rec = 1 + wire::var_len(tag.len() as u64) + tag.len() + wire::var_len(n as u64) + n;
        o.reserve(step, limit, rec, 0, if held { n } else { 0 });
        o.buf.push(wire::REC_SEND);
        wire::put_var(&mut o.buf, tag.len() as u64);
        o.buf.extend_from_slice(tag);
        wire::put_var(&mut o.buf, n as u64);
        fill(o);
        Ok(())
    }

    /// `bsp_push_reg`: staged, effective at the next sync.
    pub fn push_reg(&mut self, addr: usize, size: usize) {
        self.regs.push(addr, size);
    }

    /// `bsp_pop_reg`: staged, effective at the next sync. A pop of NULL pops what the
    /// others pop (see [`crate::regs`]).
    pub fn pop_reg(&mut self, call: &str, addr: usize) -> Result<(), BspError> {
        if !self.regs.pop(addr) {
            return misuse(format!(
                "{call}: address {addr:#x} is not registered (nothing to pop)"
            ));
        }
        Ok(())
    }

    /// `bsp_qsize`: messages in the queue and their payload bytes.
    pub fn qsize(&self) -> (usize, u64) {
        self.queue.size()
    }

    /// The first message: its tag and payload (valid until the next sync).
    pub fn first_message(&self) -> Option<(&[u8], &[u8])> {
        self.queue.first()
    }

    /// Removes the first message.
    pub fn pop_message(&mut self) {
        self.queue.pop();
    }

    /// Frees what the computation held (messages, outgoing data, registrations): after
    /// `bsp_end` pid 0 goes on without it.
    pub fn release(&mut self) {
        self.queue = Queue::default();
        self.get_order = Vec::new();
        self.out = (0..self.p).map(|_| Outbox::default()).collect();
        self.regs = Regs::default();
    }

    /// Ends the superstep (`bsp_sync`, or `bsp_end` with `ending`).
    pub fn sync(&mut self, n: &mut Net, ending: bool) -> Result<(), BspError> {
        n.take_failure()?;
        let step = self.step;
        // This sync's barrier messages carry the colour of the barriers passed, but only a
        // process past the next barrier proves everyone has them (docs/bsp.md).
        if let Some(c) = n.t.coloured() {
            c.hold_colour(step.wrapping_add(1) as u8);
        }
        let complex = ending || !self.regs.ops().is_empty() || self.next_tagsize.is_some();
        let pass = match self.board.take() {
            Some(mut b) => {
                let r = self.board_barrier(n, &mut b, complex);
                self.board = Some(b);
                Some(r?)
            }
            None => {
                // Decided before anything leaves: a broadcast waits for the barrier, which
                // tells every process it comes by multicast.
                self.bcast = n.mcast.as_ref().and_then(|_| {
                    broadcast_len(&self.out, self.pid as usize, self.cfg.mcast_min)
                        .filter(|&len| len <= n.mcast_max)
                });
                // The barrier's first message follows at once and takes these along.
                self.early_large = self.send_small(n, true)?;
                None
            }
        };
        match pass {
            // Nobody registered, popped, set a tag size or ended: the board's barrier was
            // the whole barrier.
            Some(pass) if !pass.complex => {
                if let Some(c) = n.t.coloured() {
                    c.set_colour(step.wrapping_add(1) as u8);
                }
                self.exchange(n, step, &pass.incoming, pass.msgs)?;
            }
            pass => {
                let msgs = pass.map(|p| p.msgs).unwrap_or_default();
                let b = self.reduce(n, step, ending)?;
                let ops = self.check_summaries(&b.summaries)?;
                let k = self.regs.pushed_slots().count();
                // Each push brings its size and address from every process.
                let pushes = b.pushes.finish(2 * k).ok_or_else(|| {
                    BspError::Protocol(format!(
                        "the barrier of superstep {step} did not bring every process's {k} \
                         registration sizes and addresses"
                    ))
                })?;
                let all_null = |k: usize| pushes.iter().all(|v| v[2 * k + 1] == 0);
                let popped = self.regs.resolve_pops(&ops, all_null, step)?;
                if let Some(c) = n.t.coloured() {
                    c.set_colour(step.wrapping_add(1) as u8);
                }
                self.exchange(n, step, &b.incoming, msgs)?;
                self.commit_regs(n, &pushes, &popped);
            }
        }
        self.early_large = None;
        self.bcast = None;
        if let Some(t) = self.next_tagsize {
            self.tagsize = t;
        }
        self.next_tagsize = None;
        self.step = step.wrapping_add(1);
        n.step = self.step;
        self.counters.supersteps += 1;
        // Direct gets of the new superstep that came while this one ended.
        n.serve_pending_direct()
    }

    /// The barrier on the sync board: posts each small message whole in the board (the
    /// destination copies it out after the barrier, so it never enters the transport),
    /// sends the other small ones before the barrier as [`Core::send_small`] does, posts
    /// the bytes every destination gets over the transport, arrives and waits for
    /// everyone. `complex` asks everyone to run the barrier over messages as well.
    fn board_barrier(
        &mut self,
        n: &mut Net,
        b: &mut Board,
        complex: bool,
    ) -> Result<BoardPass, BspError> {
        let me = self.pid as usize;
        b.begin();
        // Under a rate cap or a chunk size every byte goes the paced, cut way.
        if self.cfg.rate.is_none() && self.cfg.chunk.is_none() {
            for (d, o) in self.out.iter_mut().enumerate() {
                if d == me || o.buf.is_empty() || o.len() > SMALL_MAX || o.len() > b.room() {
                    continue;
                }
                let mut msg = o.take_message();
                let posted = b.post_message(d, &msg, !o.gets.is_empty());
                debug_assert!(posted, "room was checked");
                self.counters.bytes_out += msg.len() as u64;
                self.counters.messages_out += 1;
                // The next superstep's records go into the same memory.
                msg.clear();
                o.buf = msg;
            }
        }
        self.early_large = self.send_small(n, false)?;
        for (d, o) in self.out.iter().enumerate() {
            if d != me && o.total() > 0 {
                b.post_net(d, o.total(), !o.gets.is_empty());
            }
        }
        b.arrive(complex);
        n.await_board(b)?;
        let mut pass = BoardPass {
            complex: b.any_complex(),
            incoming: Vec::new(),
            msgs: Vec::new(),
        };
        for s in (0..self.p as usize).filter(|&s| s != me) {
            let e = b.entry(s);
            if e.net > 0 {
                pass.incoming.push(Cell {
                    src: s as u32,
                    dst: self.pid,
                    bytes: e.net,
                    gets: e.net_gets,
                    mcast: false,
                });
            }
            if let Some(at) = e.msg {
                let mut m = self
                    .spare
                    .as_mut()
                    .and_then(|x| x.pool.pop())
                    .unwrap_or_default();
                if !b.read_message_into(s, at, &mut m) {
                    return Err(BspError::Protocol(format!(
                        "pid {s} posted a message outside its part of the sync board"
                    )));
                }
                pass.msgs.push((s as u32, m, e.msg_gets));
            }
        }
        Ok(pass)
    }

    /// Hands every small message to the transport before the barrier, so that it travels
    /// while the barrier runs instead of after it: a superstep that carries a few words
    /// then costs about what an empty one does. Of the large messages, the one of the
    /// schedule's first step (to `pid + 1` in the latin square, where every destination
    /// has one sender) leaves too, so that the barrier and the first step overlap; the
    /// others wait for the barrier and their step. Under a rate cap or a chunk size, which
    /// space and cut what they send, everything waits. The receiver keeps a message of the
    /// next superstep until it gets there, and reads it only after its own barrier, so gets
    /// still read before any put is written. Returns the destination of a large message
    /// sent, which must leave the transport before the schedule's next step is fed.
    ///
    /// Each message is the last of the superstep to its destination unless gets of that
    /// destination need replies, so its ack is asked for now: its last packet carries the
    /// request, where asking after the barrier takes a packet of its own. With `batch`
    /// the messages wait for the caller's next send, which hands them to the link in the
    /// same system call.
    fn send_small(&mut self, n: &mut Net, batch: bool) -> Result<Option<u32>, BspError> {
        if self.cfg.rate.is_some() || self.cfg.chunk.is_some() || self.bcast.is_some() {
            return Ok(None);
        }
        let me = self.pid as usize;
        let first = (self.cfg.schedule == Schedule::Latin).then(|| (me + 1) % self.p as usize);
        let mut large = None;
        for d in 0..self.p as usize {
            let o = &mut self.out[d];
            let len = o.len();
            if d == me || o.buf.is_empty() || (len > SMALL_MAX && Some(d) != first) {
                continue;
            }
            if len > SMALL_MAX {
                large = Some(d as u32);
            }
            o.sent = len as u64;
            let rec = o.take_records();
            let rec = if len > SMALL_MAX {
                self.lend(n, d, rec, batch)?
            } else {
                Some(rec)
            };
            if let Some(rec) = rec {
                let msg = rec.build();
                self.counters.bytes_out += msg.len() as u64;
                self.counters.messages_out += 1;
                if batch {
                    n.t.send_later(d as u32, Bytes::from(msg), false)?;
                } else {
                    n.t.send(d as u32, Bytes::from(msg), false)?;
                }
            }
            if let Some(c) = n.t.coloured() {
                c.end_phase(d as u32);
            }
        }
        Ok(large)
    }

    /// Lends `rec`, this superstep's message to `d`, when `d` may read it in place: `d`
    /// shares this host and our data to it goes over shared memory, the message is of
    /// [`Config::lend`] bytes or more and holds only puts of [`LEND_PIECE`] bytes on
    /// average, and nothing paces or cuts it. A small `LEND` message then tells `d` where
    /// each put's bytes lie here (in the message, or at an hpput's source), and `d` copies
    /// them with `process_vm_readv`, straight into its areas when it may write them as
    /// they arrive: one copy where the transport takes three (into its ring, out of it,
    /// into place). The message stays here, unmoved, until `d` answers `LENT` (see
    /// `on_lent`); the superstep does not end before. Gives `rec` back if not lent; with
    /// `later` the `LEND` waits for the next send, as in `send_small`.
    fn lend(
        &mut self,
        n: &mut Net,
        d: usize,
        rec: Recorded,
        later: bool,
    ) -> Result<Option<Recorded>, BspError> {
        let len = rec.len();
        if d == self.pid as usize
            || !n.lend_to[d]
            || len < self.cfg.lend
            || self.cfg.rate.is_some()
            || self.cfg.chunk.is_some()
        {
            return Ok(Some(rec));
        }
        let Some(puts) = rec.lent_puts() else {
            return Ok(Some(rec));
        };
        let who = Published::mine().to_bytes();
        let msg = Bytes::from(wire::lend_msg(self.step, &who, len as u64, &puts));
        if later {
            n.t.send_later(d as u32, msg, false)?;
        } else {
            n.t.send(d as u32, msg, false)?;
        }
        self.counters.bytes_out += len as u64;
        self.counters.messages_out += 1;
        self.lent[d] = Some(rec);
        self.lent_left += 1;
        Ok(None)
    }

    /// Makes the superstep's registration calls effective, every process's sizes and
    /// addresses recorded per new slot.
    fn commit_regs(&mut self, n: &mut Net, pushes: &[Vec<u64>], popped: &[u32]) {
        if self.regs.ops().is_empty() {
            return;
        }
        self.regs.commit(
            |k| {
                (
                    pushes.iter().map(|v| v[2 * k]).collect(),
                    pushes.iter().map(|v| v[2 * k + 1]).collect(),
                )
            },
            popped,
        );
        n.local = self.regs.local_view();
    }

    /// What this process's superstep says about its collective calls.
    fn summary(&self, ending: bool) -> Summary {
        Summary {
            ending,
            ops: self
                .regs
                .ops()
                .iter()
                .map(|op| match *op {
                    RegOp::Push { .. } => RegOp::Push { size: 0, addr: 0 },
                    pop => pop,
                })
                .collect(),
            tagsize: self.next_tagsize.map(|t| t as u64),
        }
    }

    /// This superstep's cells of the communication matrix: whom we send how much.
    fn my_cells(&self) -> Vec<Cell> {
        let me = self.pid as usize;
        self.out
            .iter()
            .enumerate()
            .filter(|&(d, o)| d != me && o.total() > 0)
            .map(|(d, o)| Cell {
                src: self.pid,
                dst: d as u32,
                bytes: o.total(),
                gets: !o.gets.is_empty(),
                mcast: self.bcast.is_some(),
            })
            .collect()
    }

    /// The barrier, in ceil(log2 p) rounds of dissemination: in round r a process sends to
    /// `pid + 2^r` and waits for `pid - 2^r`. What the rounds carry costs nothing per
    /// process that has nothing to say, so an empty superstep's messages stay small at
    /// any p:
    ///
    /// - the collective calls, reduced: of the summaries a process has heard, it keeps
    ///   the lowest pid's and the lowest pid's that differs from it, so at the end every
    ///   process holds pid 0's and, if anyone disagrees, one that does (an idempotent
    ///   reduction: a summary heard twice changes nothing);
    /// - registration sizes, gathered: every process needs every size of a new area;
    /// - the communication matrix, transposed by index (Bruck et al.): the cell
    ///   (src, dst) travels from src to dst by the bits of `(dst - src) mod p`, one bit
    ///   per round, so each process ends with its column (who sends it how much: the
    ///   BSPlib paper's total exchange of counts) after forwarding about half of the cells it
    ///   holds per round, and no process ever holds the whole matrix.
    fn reduce(&mut self, n: &mut Net, step: u32, ending: bool) -> Result<Barrier, BspError> {
        let p = self.p;
        let me = self.pid;
        let mut own = Vec::new();
        self.summary(ending).encode(&mut own);
        let mut summaries = vec![(me, own)];
        let mut pushes = Pushes::new(p);
        let sizes: Vec<u64> = self
            .regs
            .ops()
            .iter()
            .filter_map(|op| match *op {
                RegOp::Push { size, addr } => Some([size, addr]),
                _ => None,
            })
            .flatten()
            .collect();
        if !sizes.is_empty() {
            pushes.insert(me, sizes);
        }
        let mut held = self.my_cells();
        let mut incoming = Vec::new();
        let mut dist = 1u32;
        let mut round = 0u8;
        while dist < p {
            let to = (me + dist) % p;
            let from = (me + p - dist) % p;
            let (go, stay): (Vec<Cell>, Vec<Cell>) = held
                .into_iter()
                .partition(|c| ((c.dst + p - me) % p) & dist != 0);
            held = stay;
            let msg = wire::reduce_msg(step, round, &summaries, pushes.iter(), &go);
            n.t.send(to, Bytes::from(msg), false)?;
            let msg = Self::await_reduce(n, step, from)?;
            let bad = || BspError::Protocol(format!("pid {from} sent a malformed barrier message"));
            let r = wire::parse_reduce(&msg, p).ok_or_else(bad)?;
            if r.round != round {
                return Err(bad());
            }
            merge_summaries(&mut summaries, &r.summaries);
            for (pid, sizes) in r.pushes {
                pushes.insert(pid, sizes);
            }
            for c in r.cells {
                // It came `dist` closer: the bits up to this round's are spent.
                if ((c.dst + p - me) % p) & (2 * dist - 1) != 0 {
                    return Err(bad());
                }
                if c.dst == me {
                    incoming.push(c);
                } else {
                    held.push(c);
                }
            }
            dist <<= 1;
            round = round.wrapping_add(1);
        }
        Ok(Barrier {
            summaries,
            pushes,
            incoming,
        })
    }

    /// Waits for `from`'s barrier message of superstep `step`.
    fn await_reduce(n: &mut Net, step: u32, from: u32) -> Result<Vec<u8>, BspError> {
        n.t.expect(from, true);
        let mut got = None;
        let r = n.wait(|n| {
            got = n.take(|f, k, s| f == from && k == wire::REDUCE && s == step);
            Ok(if got.is_some() {
                Poll::Done
            } else {
                Poll::Wait(None)
            })
        });
        n.t.expect(from, false);
        r?;
        Ok(got.expect("the wait ended with a message").1)
    }

    /// The rules every process checks once the barrier has brought the distinct summaries
    /// (or two that clash): all end together, make the same registration calls (a pop of
    /// NULL matches the pop of any registration), and set the same tag size. Returns the
    /// superstep's registration calls with each pop of NULL replaced by the registration
    /// the others named, if any did.
    fn check_summaries(&self, summaries: &[(u32, Vec<u8>)]) -> Result<Vec<RegOp>, BspError> {
        let decoded = summaries
            .iter()
            .map(|(pid, b)| {
                Summary::decode(b).map(|s| (*pid, s)).ok_or_else(|| {
                    BspError::Protocol(format!(
                        "the barrier brought a malformed summary of pid {pid}"
                    ))
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        for (i, a) in decoded.iter().enumerate() {
            for b in &decoded[i + 1..] {
                if let Some(c) = clash(&a.1, &b.1) {
                    return Err(c.error(self.step, a, b));
                }
            }
        }
        let mut ops = decoded[0].1.ops.clone();
        for (_, s) in &decoded[1..] {
            for (mine, theirs) in ops.iter_mut().zip(&s.ops) {
                if *mine == RegOp::PopNull {
                    *mine = *theirs;
                }
            }
        }
        Ok(ops)
    }

    /// The data phase of the superstep: send by schedule, serve gets, receive, write.
    fn exchange(
        &mut self,
        n: &mut Net,
        step: u32,
        incoming: &[Cell],
        board: Vec<(u32, Vec<u8>, bool)>,
    ) -> Result<(), BspError> {
        let p = self.p as usize;
        let me = self.pid as usize;
        if incoming.is_empty()
            && board.is_empty()
            && self.get_order.is_empty()
            && self.out.iter().all(|o| o.total() == 0)
        {
            // Nothing to send, nothing to receive: the barrier was our whole superstep.
            self.queue = Queue::default();
            self.get_order.clear();
            return Ok(());
        }
        if incoming.is_empty()
            && self.get_order.is_empty()
            && board.iter().all(|b| !b.2)
            && self
                .out
                .iter()
                .enumerate()
                .all(|(d, o)| d == me || o.total() == 0)
        {
            return self.apply_board(step, board);
        }
        let mut x = self.spare.take().unwrap_or_default();
        x.reset(step, p, std::mem::take(&mut self.get_order));
        // The schedule's first step left before the barrier: the next waits for it.
        x.draining = self.early_large.take();
        for c in incoming {
            let s = c.src as usize;
            if x.expect[s] > 0 || c.bytes == 0 {
                return Err(BspError::Protocol(format!(
                    "the barrier of superstep {step} announced data from pid {s} twice or \
                     empty"
                )));
            }
            x.expect[s] = c.bytes;
            x.owes[s] = c.gets;
            x.senders_left += 1;
        }
        for (s, _, gets) in &board {
            x.owes[*s as usize] |= *gets;
        }
        let mut bufs = Vec::with_capacity(p);
        for d in 0..p {
            let o = &mut self.out[d];
            x.sent[d] = o.sent > 0;
            // What left before the barrier asked for its ack then (`send_small`); only
            // replies to a destination's gets would need another request.
            x.ended[d] = x.sent[d] && !x.owes[d];
            x.reply_left[d] = o.get_bytes;
            if o.get_bytes > 0 && d != me {
                x.replies_left += 1;
            }
            x.gets.push(std::mem::take(&mut o.gets));
            bufs.push(o.take_recorded());
        }
        // Our own data is local: its gets are served first, like anyone's.
        if let Some(own) = bufs[me].take() {
            let own = own.build();
            self.counters.bytes_local += own.len() as u64;
            self.on_data(n, &mut x, me as u32, own, false)?;
        }
        // Messages read out of the sync board: here already, outside the transport's count.
        for (s, m, _) in board {
            self.counters.bytes_in += m.len() as u64;
            self.counters.messages_in += 1;
            self.on_data(n, &mut x, s, m, false)?;
        }
        if x.reply_left[me] > 0 {
            return Err(BspError::Protocol(
                "a get from this process was not answered by itself".into(),
            ));
        }
        if self.cfg.schedule == Schedule::Latin && p > LOOKAHEAD + 1 {
            x.turn = Some(usize::from(x.draining.is_some()));
        }
        let mut outgoing = bufs;
        // Get results land before puts (a put wins over a result it overlaps), so puts
        // wait while we read others' memory too.
        x.early = !x.owes.iter().any(|&g| g) && x.get_order.is_empty();
        // Lent messages count: their hpputs are read while the destination reads them.
        x.hp_src = outgoing
            .iter()
            .chain(&self.lent)
            .flatten()
            .filter_map(Recorded::sources)
            .reduce(|(a, b), (c, d)| (a.min(c), b.max(d)));
        // Before anyone is waited on over the transport: a root is not.
        self.multicast(n, &mut x, incoming, &mut outgoing)?;
        for s in 0..p {
            self.update_waiting(n, &mut x, s);
        }
        match self.cfg.schedule {
            Schedule::Latin => x.order.extend((1..p).map(|t| ((me + t) % p) as u32)),
            Schedule::Pid => x
                .order
                .extend((0..p).filter(|&d| d != me).map(|d| d as u32)),
            Schedule::Random => x.order.extend(shuffled(me as u32, step, p as u32)),
        }
        x.order.retain(|&d| outgoing[d as usize].is_some());
        for (fed, o) in x.fed.iter_mut().zip(&outgoing) {
            *fed = o.is_none();
        }
        for d in 0..p {
            Self::maybe_end_phase(n, &mut x, d);
        }
        let r = n.wait(|n| self.poll_exchange(n, &mut x, &mut outgoing));
        for s in 0..p {
            if x.waiting[s] {
                x.waiting[s] = false;
                n.t.expect(s as u32, false);
            }
        }
        r?;
        self.queue = std::mem::take(&mut x.queue);
        self.spare = Some(x);
        Ok(())
    }

    /// The superstep's broadcasts (see [`broadcast_len`]): the barrier brought, from every
    /// root, a cell marked `mcast` with the length of its message, so every process knows
    /// the roots and the lengths, and each calls the group's broadcast for every root in
    /// pid order (the group's rule: every member makes the same calls in the same order).
    /// A root builds its message once (its hpput and hpsend holes read now) and drops the
    /// other destinations' copies; a receiver takes the message as if it had come over
    /// the transport (`on_data`), so it is read and written exactly as the unicast one
    /// would be. The transport is served between the group's turns, so that peers still
    /// in the barrier, or sending us data, are answered.
    fn multicast(
        &mut self,
        n: &mut Net,
        x: &mut Exchange,
        incoming: &[Cell],
        outgoing: &mut [Option<Recorded>],
    ) -> Result<(), BspError> {
        let me = self.pid as usize;
        let mut roots: Vec<(u32, usize)> = incoming
            .iter()
            .filter(|c| c.mcast)
            .map(|c| (c.src, c.bytes as usize))
            .collect();
        if let Some(len) = self.bcast {
            roots.push((self.pid, len));
        }
        if roots.is_empty() {
            return Ok(());
        }
        roots.sort_unstable();
        let Some(mut group) = n.mcast.take() else {
            return Err(BspError::Protocol(format!(
                "pid {} announced a broadcast by multicast, but this process has no group",
                roots[0].0
            )));
        };
        let r = (|| {
            for &(root, len) in &roots {
                let mut body = if root as usize == me {
                    let mut mine = None;
                    for (d, o) in outgoing.iter_mut().enumerate() {
                        if d != me
                            && let Some(rec) = o.take()
                        {
                            mine.get_or_insert(rec);
                        }
                    }
                    let body = mine.map(Recorded::build).unwrap_or_default();
                    debug_assert_eq!(body.len(), len);
                    self.counters.bytes_out += body.len() as u64;
                    self.counters.messages_out += 1;
                    body
                } else {
                    vec![0; len]
                };
                let mut failed = None;
                let r = group.broadcast_serving(root, &mut body, &mut || {
                    n.serve().map_err(|e| {
                        let m = e.to_string();
                        failed = Some(e);
                        bulkwire_engine::Error::JobFailed(m)
                    })
                });
                if let Some(e) = failed {
                    return Err(e);
                }
                r?;
                if root as usize != me {
                    self.counters.bytes_in += body.len() as u64;
                    self.counters.messages_in += 1;
                    self.on_data(n, x, root, body, true)?;
                }
            }
            Ok(())
        })();
        n.mcast = Some(group);
        r
    }

    /// A superstep whose only data are puts and sends read out of the sync board, and
    /// this process's own: nothing to wait for, no get to serve, so they are written at
    /// once, in pid order as always.
    fn apply_board(&mut self, step: u32, board: Vec<(u32, Vec<u8>, bool)>) -> Result<(), BspError> {
        let me = self.pid as usize;
        let mut x = self.spare.take().unwrap_or_default();
        x.reset_for_apply(step, self.p as usize);
        for (d, o) in self.out.iter_mut().enumerate() {
            if let Some(rec) = o.take_recorded()
                && d == me
            {
                let own = rec.build();
                self.counters.bytes_local += own.len() as u64;
                x.data.push((self.pid, own));
            }
        }
        for (s, m, _) in board {
            self.counters.bytes_in += m.len() as u64;
            self.counters.messages_in += 1;
            x.data.push((s, m));
        }
        let r = self.apply(&mut x);
        self.queue = std::mem::take(&mut x.queue);
        self.spare = Some(x);
        r
    }

    fn update_waiting(&self, n: &mut Net, x: &mut Exchange, s: usize) {
        let (me, p) = (self.pid as usize, self.p as usize);
        let due = match x.turn {
            None => true,
            Some(t) => x.got[s] > 0 || (me + p - s) % p <= t + LOOKAHEAD,
        };
        let w = s != me
            && (x.reply_left[s] > 0
                || (x.got[s] < x.expect[s] && due)
                || self.lent[s].is_some()
                || x.reply_lent[s].is_some());
        if w != x.waiting[s] {
            x.waiting[s] = w;
            n.t.expect(s as u32, w);
        }
    }

    fn poll_exchange(
        &mut self,
        n: &mut Net,
        x: &mut Exchange,
        outgoing: &mut [Option<Recorded>],
    ) -> Result<Poll, BspError> {
        let step = x.step;
        while let Some((from, m)) = n.take(|_, k, s| {
            s == step
                && matches!(
                    k,
                    wire::DATA | wire::REPLY | wire::LEND | wire::LENT | wire::LEND_REPLY
                )
        }) {
            match m[0] {
                wire::LEND => {
                    self.on_lend(n, x, from, m)?;
                    continue;
                }
                wire::LENT => {
                    self.on_lent(n, x, from, m)?;
                    continue;
                }
                wire::LEND_REPLY => {
                    self.on_lend_reply(n, x, from, m)?;
                    continue;
                }
                _ => {}
            }
            let kind = m[0];
            self.counters.bytes_in += m.len() as u64;
            self.counters.messages_in += 1;
            if kind == wire::DATA {
                self.on_data(n, x, from, m, true)?;
            } else {
                self.on_reply(n, x, from, m)?;
            }
        }
        // A lent hpput is read from its source, which our puts must not overwrite before;
        // lent get values must be read before anything of ours is written.
        let hp_lent = x.hp_src.is_some() && self.lent_left > 0;
        if x.senders_left == 0
            && x.replies_left == 0
            && !x.applied
            && !hp_lent
            && x.replies_lent == 0
        {
            // Every get has been served and every put is here: get results land first,
            // then puts (as BSPonMPI writes them: a put wins over a get result it
            // overlaps).
            Self::write_in_order(x)?;
            self.apply(x)?;
        }
        let deadline = self.feed(n, x, outgoing)?;
        let fed_all = x.next >= x.order.len() && x.cur.is_none();
        if fed_all && x.turn.is_some() {
            // All our data is handed over: whoever still owes us some is due.
            x.turn = None;
            for s in 0..self.p as usize {
                self.update_waiting(n, x, s);
            }
        }
        if fed_all && x.applied && self.lent_left == 0 {
            return Ok(Poll::Done);
        }
        Ok(Poll::Wait(deadline))
    }

    /// Hands the next chunks to the transport, one destination at a time. Returns when
    /// to try again if the rate cap holds us back.
    fn feed(
        &mut self,
        n: &mut Net,
        x: &mut Exchange,
        outgoing: &mut [Option<Recorded>],
    ) -> Result<Option<Time>, BspError> {
        loop {
            if let Some(d) = x.draining {
                if n.t.queued_bytes(d) > 0 {
                    return Ok(None);
                }
                x.draining = None;
            }
            if x.cur.is_none() {
                let Some(&d) = x.order.get(x.next) else {
                    return Ok(None);
                };
                x.next += 1;
                self.advance_turn(n, x, d as usize);
                let rec = outgoing[d as usize].take().expect("scheduled once");
                let Some(mut rec) = self.lend(n, d as usize, rec, false)? else {
                    let d = d as usize;
                    (x.sent[d], x.fed[d]) = (true, true);
                    x.draining = Some(d as u32);
                    self.update_waiting(n, x, d);
                    Self::maybe_end_phase(n, x, d);
                    continue;
                };
                let chunks = std::mem::take(&mut rec.chunks);
                x.cur = Some((d, Bytes::from(rec.build()), chunks, 0));
            }
            let (d, whole, chunks, k) = x.cur.as_mut().expect("set above");
            let d = *d;
            let start = chunks[*k];
            let end = chunks.get(*k + 1).copied().unwrap_or(whole.len());
            if let Some(rate) = self.cfg.rate {
                let now = n.t.now();
                if now < x.next_send_at {
                    return Ok(Some(x.next_send_at));
                }
                let ns = ((end - start) as u128 * 1_000_000_000 / rate as u128) as Time;
                x.next_send_at = x.next_send_at.max(now) + ns;
            }
            let chunk = whole.slice(start..end);
            *k += 1;
            let last = *k == chunks.len();
            self.counters.bytes_out += chunk.len() as u64;
            self.counters.messages_out += 1;
            n.t.send(d, chunk, false)?;
            x.sent[d as usize] = true;
            if last {
                x.cur = None;
                x.fed[d as usize] = true;
                x.draining = Some(d);
                Self::maybe_end_phase(n, x, d as usize);
            }
        }
    }

    /// Our sending has reached destination `d`: the senders whose step toward us is now
    /// within [`LOOKAHEAD`] of ours are waited on.
    fn advance_turn(&self, n: &mut Net, x: &mut Exchange, d: usize) {
        let Some(t) = x.turn else {
            return;
        };
        let (me, p) = (self.pid as usize, self.p as usize);
        let now = (d + p - me) % p;
        if now <= t {
            return;
        }
        x.turn = Some(now);
        for step in (t + LOOKAHEAD + 1)..=(now + LOOKAHEAD).min(p - 1) {
            self.update_waiting(n, x, (me + p - step) % p);
        }
    }

    /// The last message of the superstep to `d` has been queued: ask for its ack.
    fn maybe_end_phase(n: &mut Net, x: &mut Exchange, d: usize) {
        if !x.ended[d] && x.sent[d] && x.fed[d] && (!x.owes[d] || x.got[d] == x.expect[d]) {
            x.ended[d] = true;
            if let Some(c) = n.t.coloured() {
                c.end_phase(d as u32);
            }
        }
    }

    /// A DATA chunk from `from`: serve its gets now, keep it to write its puts later.
    /// `net`: it came over the transport, and counts toward what the barrier announced.
    fn on_data(
        &mut self,
        n: &mut Net,
        x: &mut Exchange,
        from: u32,
        m: Vec<u8>,
        net: bool,
    ) -> Result<(), BspError> {
        let s = from as usize;
        let me = self.pid as usize;
        if s != me && net {
            Self::count_in(x, from, m.len())?;
        }
        // Only a message the barrier announced with get requests is read now; the others
        // are read once, when their puts are written.
        let has_gets = if s == me {
            !x.gets[me].is_empty()
        } else {
            x.owes[s]
        };
        let mut gets = Vec::new();
        let mut r = wire::Reader::at(&m, if has_gets { wire::HEAD } else { m.len() });
        while let Some(rec) = wire::next_rec(&mut r) {
            let rec = rec.map_err(|()| {
                BspError::Protocol(format!("pid {from} sent a malformed data record"))
            })?;
            if let Rec::Get { slot, offset, len } = rec {
                gets.push((self.local_range("bsp_get", from, slot, offset, len)?, len));
            }
        }
        let lent = !gets.is_empty() && s != me && self.lend_reply(n, x, from, &gets)?;
        if !gets.is_empty() && !lent {
            let rep = reply_msg(x.step, &gets);
            if s == me {
                self.counters.bytes_local += (rep.len() - wire::HEAD) as u64;
                self.on_reply(n, x, from, rep)?;
            } else {
                self.counters.bytes_out += rep.len() as u64;
                self.counters.messages_out += 1;
                n.t.send(from, Bytes::from(rep), false)?;
                x.sent[s] = true;
            }
        }
        let written =
            s != me && x.early && m.len() >= EARLY_MIN && self.apply_early(x, from, &m)?;
        if !written {
            x.data.push((from, m));
        }
        if s != me && net {
            self.maybe_all_in(n, x, s);
        }
        Ok(())
    }

    /// `len` bytes of data from `from` have arrived: more than the barrier announced is
    /// an error.
    fn count_in(x: &mut Exchange, from: u32, len: usize) -> Result<(), BspError> {
        let s = from as usize;
        x.got[s] += len as u64;
        if x.got[s] > x.expect[s] {
            return Err(BspError::Protocol(format!(
                "pid {from} sent more data than it announced ({} > {} bytes)",
                x.got[s], x.expect[s]
            )));
        }
        Ok(())
    }

    /// After data from `s`: once all it announced is here, it is waited on no more.
    fn maybe_all_in(&self, n: &mut Net, x: &mut Exchange, s: usize) {
        if x.got[s] == x.expect[s] {
            x.senders_left -= 1;
            self.update_waiting(n, x, s);
            Self::maybe_end_phase(n, x, s);
        }
    }

    /// A `LEND` from `from` (see [`Core::lend`]): its puts are read out of the sender's
    /// memory, into place when they may be written as they arrive (as `apply_early`
    /// writes a DATA message), else into a DATA message kept for the end, like one that
    /// came through the transport. The sender is told they have been read; if this
    /// process may not read its memory, that it must send the DATA message instead.
    fn on_lend(
        &mut self,
        n: &mut Net,
        x: &mut Exchange,
        from: u32,
        m: Vec<u8>,
    ) -> Result<(), BspError> {
        let s = from as usize;
        let malformed = || BspError::Protocol(format!("pid {from} sent a malformed lend message"));
        let (who, total, puts) = wire::parse_lend(&m).ok_or_else(malformed)?;
        let len = puts
            .iter()
            .try_fold(wire::HEAD, |a, p| a.checked_add(p.record_len()?))
            .filter(|&l| l as u64 == total && s != self.pid as usize)
            .ok_or_else(malformed)?;
        let answer = |n: &mut Net, x: &mut Exchange, status| {
            answer_lend(n, x, from, wire::LENT_PUTS, status)
        };
        let Some(os) = n.readable(s, &who) else {
            return answer(n, x, wire::LENT_REFUSED);
        };
        let dsts = puts
            .iter()
            .map(|p| self.local_range("bsp_put", from, p.slot, p.offset, p.len))
            .collect::<Result<Vec<_>, _>>()?;
        let on_hp_src = dsts
            .iter()
            .zip(&puts)
            .any(|(&d, p)| x.hp_src.is_some_and(|(lo, hi)| d < hi && lo < d + p.len));
        let failed = |e: std::io::Error| {
            BspError::Protocol(format!(
                "pid {from} lent {len} bytes of puts that cannot be read from it: {e}"
            ))
        };
        let kept = if x.early && !on_hp_src {
            // Counted first: nothing is written beyond what the barrier announced.
            Self::count_in(x, from, len)?;
            let mut pieces = Vec::with_capacity(puts.len());
            for (&dst, p) in dsts.iter().zip(&puts) {
                // Bytes a higher pid wrote early keep its value.
                for (a, b) in x.owners.claim(dst, dst + p.len, from, true) {
                    pieces.push((p.addr.wrapping_add((a - dst) as u64), a as *mut u8, b - a));
                }
            }
            // SAFETY: every destination lies in a registered area (`local_range`), which
            // the program keeps valid while registered and does not touch during the sync.
            match unsafe { n.read_from(s, os, &pieces) } {
                Ok(true) => None,
                Ok(false) => {
                    // What was written is the sender's and is written again by its DATA,
                    // which is counted when it comes.
                    x.got[s] -= len as u64;
                    return answer(n, x, wire::LENT_REFUSED);
                }
                Err(e) => return Err(failed(e)),
            }
        } else {
            // The message as it would have come: each record's head, then its bytes, read
            // into place; the heads are written into the spare capacity as well, and
            // the whole counts as the message's once read.
            // Sized by the lender's word: checked against what its barrier announced, and
            // asked of the allocator, before anything is reserved.
            if x.got[s].saturating_add(len as u64) > x.expect[s] {
                return Err(BspError::Protocol(format!(
                    "pid {from} lent {len} bytes of puts, more than it announced ({} bytes \
                     left)",
                    x.expect[s].saturating_sub(x.got[s])
                )));
            }
            let mut data = Vec::new();
            if data.try_reserve_exact(len).is_err() {
                return Err(BspError::Protocol(format!(
                    "pid {from} lent {len} bytes of puts, more than this process can allocate"
                )));
            }
            wire::put_head(&mut data, wire::DATA, x.step);
            let mut at = wire::HEAD;
            let base = data.as_mut_ptr();
            let mut head = Vec::with_capacity(wire::MAX_REC_HEAD);
            let mut pieces = Vec::with_capacity(puts.len());
            for p in &puts {
                head.clear();
                let (slot, offset) = (p.slot as u64, p.offset as u64);
                wire::put_rec_head(&mut head, wire::REC_PUT, slot, offset, p.len as u64);
                if at + head.len() + p.len > len {
                    return Err(malformed());
                }
                // SAFETY: the capacity is `len`, and the head and the piece lie below it
                // (checked above), in the order of the message.
                unsafe {
                    std::ptr::copy_nonoverlapping(head.as_ptr(), base.add(at), head.len());
                    pieces.push((p.addr, base.add(at + head.len()), p.len));
                }
                at += head.len() + p.len;
            }
            // SAFETY: as above.
            match unsafe { n.read_from(s, os, &pieces) } {
                // SAFETY: heads and bytes now fill the message up to `len` (= `at`).
                Ok(true) => unsafe {
                    data.set_len(at);
                    Some(data)
                },
                Ok(false) => return answer(n, x, wire::LENT_REFUSED),
                Err(e) => return Err(failed(e)),
            }
        };
        answer(n, x, wire::LENT_OK)?;
        self.counters.bytes_in += len as u64;
        self.counters.messages_in += 1;
        match kept {
            Some(data) => self.on_data(n, x, from, data, true),
            None => {
                self.maybe_all_in(n, x, s);
                Ok(())
            }
        }
    }

    /// `LENT` from `to`: the message lent to it has been read (its memory serves our next
    /// message to `to`), or it cannot be read in place and goes through the transport.
    fn on_lent(
        &mut self,
        n: &mut Net,
        x: &mut Exchange,
        to: u32,
        m: Vec<u8>,
    ) -> Result<(), BspError> {
        let d = to as usize;
        let unsent =
            || BspError::Protocol(format!("pid {to} answered a lend message it was not sent"));
        let malformed = || {
            BspError::Protocol(format!(
                "pid {to} sent a malformed answer to a lend message"
            ))
        };
        if m.get(wire::HEAD) == Some(&wire::LENT_REPLY) {
            let gets = x
                .reply_lent
                .get_mut(d)
                .and_then(Option::take)
                .ok_or_else(unsent)?;
            x.replies_lent -= 1;
            match m.get(wire::HEAD + 1..) {
                Some([wire::LENT_OK]) => {
                    self.counters.get_bytes_lent += gets.iter().map(|g| g.1 as u64).sum::<u64>();
                }
                Some([wire::LENT_REFUSED]) => {
                    // Nothing of ours has been written since: the values are as they were.
                    n.lend_to[d] = false;
                    self.counters.messages_out += 1;
                    n.t.send(to, Bytes::from(reply_msg(x.step, &gets)), false)?;
                }
                _ => return Err(malformed()),
            }
            self.update_waiting(n, x, d);
            return Ok(());
        }
        if m.get(wire::HEAD) != Some(&wire::LENT_PUTS) {
            return Err(malformed());
        }
        let rec = self
            .lent
            .get_mut(d)
            .and_then(Option::take)
            .ok_or_else(unsent)?;
        self.lent_left -= 1;
        match m.get(wire::HEAD + 1..) {
            Some([wire::LENT_OK]) => {
                self.counters.bytes_lent += rec.len() as u64;
                let o = &mut self.out[d];
                if o.buf.capacity() == 0 && rec.buf.capacity() <= LEND_KEEP_MAX {
                    let mut b = rec.buf;
                    b.clear();
                    o.buf = b;
                }
            }
            Some([wire::LENT_REFUSED]) => {
                n.lend_to[d] = false;
                self.counters.messages_out += 1;
                n.t.send(to, Bytes::from(rec.build()), false)?;
                if let Some(c) = n.t.coloured() {
                    c.end_phase(to);
                }
            }
            _ => return Err(malformed()),
        }
        self.update_waiting(n, x, d);
        Ok(())
    }

    /// Lends the values of `from`'s get requests (`gets`: ranges of our areas, in request
    /// order) when it may read them in place, as [`Core::lend`] lends puts: it is on this
    /// host over shared memory, they come to [`Config::lend`] bytes or more, of
    /// [`LEND_PIECE`] on average, and nothing paces or cuts them. A `LEND_REPLY` names
    /// where each value lies; `from` reads them as it gets the message (see
    /// `on_lend_reply`), and nothing of ours is written (get results or puts) before it
    /// answers. False if not lent: the caller sends the values.
    fn lend_reply(
        &mut self,
        n: &mut Net,
        x: &mut Exchange,
        from: u32,
        gets: &[(usize, usize)],
    ) -> Result<bool, BspError> {
        let s = from as usize;
        let total: usize = gets.iter().map(|g| g.1).sum();
        if !n.lend_to[s]
            || total < self.cfg.lend
            || gets.len() > total / LEND_PIECE
            || self.cfg.rate.is_some()
            || self.cfg.chunk.is_some()
            || x.reply_lent[s].is_some()
        {
            return Ok(false);
        }
        let who = Published::mine().to_bytes();
        let values: Vec<(u64, usize)> = gets.iter().map(|&(a, l)| (a as u64, l)).collect();
        let msg = wire::lend_reply_msg(x.step, &who, &values);
        n.t.send(from, Bytes::from(msg), false)?;
        x.sent[s] = true;
        self.counters.bytes_out += (wire::HEAD + total) as u64;
        self.counters.messages_out += 1;
        x.reply_lent[s] = Some(gets.to_vec());
        x.replies_lent += 1;
        self.update_waiting(n, x, s);
        Ok(true)
    }

    /// A `LEND_REPLY` from `from`: the values of our gets, read out of its memory into a
    /// REPLY message of our own, taken as if it had come through the transport (the
    /// values land with the others, in the order of the gets). The server is told they
    /// have been read, or that it must send them.
    fn on_lend_reply(
        &mut self,
        n: &mut Net,
        x: &mut Exchange,
        from: u32,
        m: Vec<u8>,
    ) -> Result<(), BspError> {
        let s = from as usize;
        let malformed =
            || BspError::Protocol(format!("pid {from} sent a malformed lent get reply"));
        let (who, values) = wire::parse_lend_reply(&m).ok_or_else(malformed)?;
        // The values of our requests to `from`, all of them, in order.
        let asked = x.gets.get(s).map_or(&[][..], Vec::as_slice);
        if s == self.pid as usize
            || values.len() != asked.len()
            || values.iter().zip(asked).any(|(v, a)| v.1 != a.1)
            || x.reply_left[s] != asked.iter().map(|a| a.1 as u64).sum::<u64>()
        {
            return Err(malformed());
        }
        let answer = |n: &mut Net, x: &mut Exchange, status| {
            answer_lend(n, x, from, wire::LENT_REPLY, status)
        };
        let Some(os) = n.readable(s, &who) else {
            return answer(n, x, wire::LENT_REFUSED);
        };
        let total: usize = values.iter().map(|v| v.1).sum();
        let mut reply = Vec::with_capacity(wire::HEAD + total);
        wire::put_head(&mut reply, wire::REPLY, x.step);
        // The values go into the spare capacity, which counts as the reply's once read.
        let mut at = reply.spare_capacity_mut().as_mut_ptr().cast::<u8>();
        let mut pieces = Vec::with_capacity(values.len());
        for &(addr, len) in &values {
            pieces.push((addr, at, len));
            // SAFETY: the pieces are consecutive and end at the capacity reserved.
            at = unsafe { at.add(len) };
        }
        // SAFETY: every piece lies in the spare capacity of `reply`, not resized meanwhile.
        match unsafe { n.read_from(s, os, &pieces) } {
            // SAFETY: the read wrote every byte up to the length set.
            Ok(true) => unsafe { reply.set_len(wire::HEAD + total) },
            Ok(false) => return answer(n, x, wire::LENT_REFUSED),
            Err(e) => {
                return Err(BspError::Protocol(format!(
                    "pid {from} lent {total} bytes of get values that cannot be read from \
                     it: {e}"
                )));
            }
        }
        answer(n, x, wire::LENT_OK)?;
        self.counters.bytes_in += reply.len() as u64;
        self.counters.messages_in += 1;
        self.on_reply(n, x, from, reply)
    }

    /// The address of `[offset, offset + len)` of our area in `slot`, checked.
    fn local_range(
        &self,
        call: &str,
        from: u32,
        slot: u32,
        offset: usize,
        len: usize,
    ) -> Result<usize, BspError> {
        match self.regs.get(slot) {
            Some(reg) if offset.checked_add(len).is_some_and(|e| e <= reg.size) => {
                Ok(reg.addr + offset)
            }
            Some(reg) => Err(BspError::Protocol(format!(
                "{call} from pid {from}: {len} bytes at offset {offset} do not fit the {} \
                 bytes registered here",
                reg.size
            ))),
            None => Err(BspError::Protocol(format!(
                "{call} from pid {from} names registration #{slot}, which this process does \
                 not have"
            ))),
        }
    }

    /// Values for our gets from `from`: kept, to be written once every get has been
    /// answered and all data has arrived.
    fn on_reply(
        &mut self,
        n: &mut Net,
        x: &mut Exchange,
        from: u32,
        m: Vec<u8>,
    ) -> Result<(), BspError> {
        let s = from as usize;
        let len = (m.len() - wire::HEAD) as u64;
        if len > x.reply_left[s] {
            return Err(BspError::Protocol(format!(
                "pid {from} answered more get bytes than were asked for"
            )));
        }
        x.reply_left[s] -= len;
        if x.reply_left[s] == 0 && s != self.pid as usize {
            x.replies_left -= 1;
        }
        self.update_waiting(n, x, s);
        x.held.push((from, m));
        Ok(())
    }

    /// Writes every get result, in the order the gets were made (all replies are here),
    /// so that the last of overlapping gets wins, whichever processes they read.
    fn write_in_order(x: &mut Exchange) -> Result<(), BspError> {
        if x.get_order.is_empty() {
            return Ok(());
        }
        let p = x.gets.len();
        let mut bufs: Vec<Vec<&[u8]>> = vec![Vec::new(); p];
        for (from, m) in &x.held {
            bufs[*from as usize].push(&m[wire::HEAD..]);
        }
        let mut next = vec![0usize; p];
        // Per server: the reply being read and the position in it.
        let mut at = vec![(0usize, 0usize); p];
        let short = || BspError::Protocol("get replies shorter than the requests".into());
        for &s in &x.get_order {
            let s = s as usize;
            let &(dst, len) = x.gets[s].get(next[s]).ok_or_else(short)?;
            next[s] += 1;
            let mut done = 0;
            while done < len {
                let (j, off) = at[s];
                let b = bufs[s].get(j).ok_or_else(short)?;
                let k = (len - done).min(b.len() - off);
                // SAFETY: `dst` was handed to bsp_get as writable for `len` bytes until the
                // end of the superstep; reply sizes were checked against the requests.
                unsafe { std::ptr::copy(b[off..].as_ptr(), (dst + done) as *mut u8, k) };
                done += k;
                at[s] = if off + k == b.len() {
                    (j + 1, 0)
                } else {
                    (j, off + k)
                };
            }
        }
        x.held.clear();
        Ok(())
    }

    /// Writes a big message of puts as it arrives, when that cannot be told from writing
    /// it at the end: nobody reads our memory this superstep (`x.early`), the message
    /// holds only puts (BSMP messages stay where they arrived), and none lands on the
    /// source of an hpput or hpsend of ours still to be read. A byte that a higher pid
    /// already wrote keeps its value, so the result is that of pid order; the owners are
    /// recorded for the messages written at the end. False if it must wait.
    fn apply_early(&self, x: &mut Exchange, from: u32, m: &[u8]) -> Result<bool, BspError> {
        let malformed = || BspError::Protocol(format!("pid {from} sent a malformed data record"));
        let mut puts = Vec::new();
        let mut r = wire::Reader::at(m, wire::HEAD);
        while let Some(rec) = wire::next_rec(&mut r) {
            let Rec::Put { slot, offset, data } = rec.map_err(|()| malformed())? else {
                return Ok(false);
            };
            let dst = self.local_range("bsp_put", from, slot, offset, data.len())?;
            if x.hp_src
                .is_some_and(|(lo, hi)| dst < hi && lo < dst + data.len())
            {
                return Ok(false);
            }
            puts.push((dst, data));
        }
        for (dst, data) in puts {
            for (a, b) in x.owners.claim(dst, dst + data.len(), from, true) {
                write(&m[data.start + a - dst..data.start + b - dst], a);
            }
        }
        Ok(true)
    }

    /// Every message of the superstep is here, every get served and its result written:
    /// write the puts in pid order (each process's in call order) and queue the BSMP
    /// messages.
    fn apply(&mut self, x: &mut Exchange) -> Result<(), BspError> {
        x.applied = true;
        let mut data = std::mem::take(&mut x.data);
        // Stable: one process's chunks stay in the order it made them.
        data.sort_by_key(|(from, _)| *from);
        let mut with_sends = Vec::new();
        for (from, m) in data.drain(..) {
            let mut has_send = false;
            let mut r = wire::Reader::at(&m, wire::HEAD);
            // The registration the last small put wrote into: (slot, address, size).
            let mut reg = (u32::MAX, 0usize, 0usize);
            let unowned = x.owners.is_empty();
            loop {
                // Small puts (a word or a few) are most records: decoded at once, written
                // into the registration the previous one used without looking it up.
                if unowned && let Some((slot, offset, data)) = wire::small_put(&m, r.pos()) {
                    if slot != reg.0 {
                        let a = self.local_range("bsp_put", from, slot, 0, 0)?;
                        reg = (slot, a, self.regs.get(slot).map_or(0, |g| g.size));
                    }
                    if offset + data.len() > reg.2 {
                        self.local_range("bsp_put", from, slot, offset, data.len())?;
                    }
                    r.skip_to(data.end);
                    write(&m[data], reg.1 + offset);
                    continue;
                }
                let Some(rec) = wire::next_rec(&mut r) else {
                    break;
                };
                match rec.map_err(|()| {
                    BspError::Protocol(format!("pid {from} sent a malformed data record"))
                })? {
                    Rec::Put { slot, offset, data } => {
                        let dst = self.local_range("bsp_put", from, slot, offset, data.len())?;
                        if x.owners.is_empty() {
                            write(&m[data], dst);
                        } else {
                            // Bytes a higher pid wrote early keep its value.
                            for (a, b) in x.owners.claim(dst, dst + data.len(), from, false) {
                                write(&m[data.start + a - dst..data.start + b - dst], a);
                            }
                        }
                    }
                    Rec::Send { .. } => has_send = true,
                    Rec::Get { .. } if from != self.pid && !x.owes[from as usize] => {
                        return Err(BspError::Protocol(format!(
                            "pid {from} sent a get request the barrier did not announce"
                        )));
                    }
                    Rec::Get { .. } => {}
                }
            }
            if has_send {
                with_sends.push((from, m));
            } else if m.capacity() <= POOLED_MAX && x.pool.len() < self.p as usize {
                x.pool.push(m);
            }
        }
        // The emptied vector serves the next superstep.
        x.data = data;
        // Messages from the highest pid first, each process's in the order it sent them:
        // the order BSPonMPI and MulticoreBSP for C give (the standard gives none).
        with_sends.sort_by_key(|(from, _)| std::cmp::Reverse(*from));
        for (_, m) in with_sends {
            let at = x.queue.hold(m);
            let mut r = wire::Reader::at(x.queue_buf(at), wire::HEAD);
            let mut sends = Vec::new();
            while let Some(Ok(rec)) = wire::next_rec(&mut r) {
                if let Rec::Send { tag, payload } = rec {
                    sends.push((tag, payload));
                }
            }
            for (tag, payload) in sends {
                x.queue.push(at, tag, payload);
            }
        }
        Ok(())
    }
}

impl Net {
    pub fn transport(&self) -> &dyn Transport {
        &*self.t
    }

    pub fn transport_mut(&mut self) -> &mut dyn Transport {
        &mut *self.t
    }

    /// An error the progress thread met, if any.
    fn take_failure(&mut self) -> Result<(), BspError> {
        match self.failure.take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Moves the transport's events into the inbox, checking each message's header.
    /// True if any arrived.
    fn drain_events(&mut self) -> Result<bool, BspError> {
        let mut any = false;
        while let Some(e) = self.t.poll_event() {
            match e {
                Event::Message { from, data, .. } => {
                    let head = wire::head(&data).filter(|&(k, s)| {
                        (wire::REDUCE..=wire::LEND_REPLY).contains(&k)
                            && (s == self.step || s == self.step.wrapping_add(1))
                    });
                    let Some((kind, step)) = head.filter(|_| from < self.p) else {
                        return Err(BspError::Protocol(format!(
                            "pid {from} sent a message that is not of this superstep ({}) \
                             or the next: is it running the same program?",
                            self.step
                        )));
                    };
                    if kind == wire::DGET {
                        self.on_direct_request(from, step, data)?;
                    } else {
                        self.inbox.push_back((from, data));
                    }
                    any = true;
                }
                // Announcing protocols (rmpp) wait for a posted receive; BSP takes all.
                Event::Announce { from, id, .. } => self.t.accept(from, id),
                Event::Sent { .. } => {}
                Event::PeerDead { peer, silent_for } => {
                    let dead = bulkwire_engine::PeerDead { peer, silent_for };
                    return Err(BspError::Transport(dead.into()));
                }
            }
        }
        Ok(any)
    }

    /// One turn of the transport, its messages into the inbox: what a wait elsewhere (the
    /// multicast group's) does to keep it answering.
    fn serve(&mut self) -> Result<(), BspError> {
        self.t.check()?;
        self.t.step()?;
        self.drain_events()?;
        Ok(())
    }

    /// Drives the transport until `poll` says done: spinning, then blocking, as
    /// `Transport::wait_for` does, and ending with an error as soon as the job fails.
    pub(crate) fn wait(
        &mut self,
        mut poll: impl FnMut(&mut Net) -> Result<Poll, BspError>,
    ) -> Result<(), BspError> {
        // Done at once (a superstep whose data is all here) costs no clock read.
        let mut first = match poll(self)? {
            Poll::Done => return Ok(()),
            Poll::Wait(d) => Some(d),
        };
        let policy = self.t.policy();
        let spin = policy.spin.as_nanos() as Time;
        // The clock as the transport last read it: a read per spin would cost about as
        // much as the spin (the transport reads it often enough for timers).
        let mut idle_since = self.t.begin_wait();
        loop {
            let deadline = match first.take() {
                Some(d) => d,
                None => match poll(self)? {
                    Poll::Done => return Ok(()),
                    Poll::Wait(d) => d,
                },
            };
            self.t.check()?;
            let prog = self.t.step()?;
            let arrived = self.drain_events()?;
            let now = self.t.recent_now();
            if prog.any() || arrived || deadline.is_some_and(|d| now >= d) {
                idle_since = now;
                continue;
            }
            let idle = now.saturating_sub(idle_since);
            if idle < spin || self.t.has_unsent() {
                // Past a short wait, give the core away on every turn: the peer we wait
                // for may be queued behind us on this core (see `YIELD_AFTER`).
                if policy.yields(Duration::from_nanos(idle)) {
                    std::thread::yield_now();
                } else {
                    std::hint::spin_loop();
                }
                continue;
            }
            let timeout = deadline.map(|d| Duration::from_nanos(d.saturating_sub(now)));
            self.t.block(timeout)?;
            idle_since = self.t.now();
        }
    }

    /// Waits until every process has arrived at the sync board's barrier. Spins on the
    /// board, driving the transport between rounds of polls (messages of the superstep
    /// may arrive meanwhile, a failure or a silent peer must end the wait, and what we sent
    /// may need resending), then, once the spin budget is spent, sleeps on the board in
    /// slices of `BOARD_NAP`, driving the transport between them; the last process to
    /// arrive wakes it. (A wake sent as a transport message would break holefill's rule
    /// that a process past the next barrier proves its peers hold everything sent before:
    /// nobody waits for a wake, so a lost one would be freed without being resent.)
    pub(crate) fn await_board(&mut self, b: &Board) -> Result<(), BspError> {
        let Some(mut missing) = b.missing_from(0) else {
            return Ok(());
        };
        let policy = self.t.policy();
        let spin = policy.spin.as_nanos() as Time;
        // With more processes than cores, the one we wait for may need this core: one
        // poll per turn, then the transport, then a yield.
        let polls = if policy.yield_cpu { 1 } else { 64 };
        let first = missing as u32;
        for j in (first..self.p).filter(|&j| j != b.me() as u32) {
            self.t.expect(j, true);
        }
        let mut idle_since = self.t.begin_wait();
        let r = loop {
            let mut done = false;
            for _ in 0..polls {
                match b.missing_from(missing) {
                    None => {
                        done = true;
                        break;
                    }
                    Some(j) => missing = j,
                }
                std::hint::spin_loop();
            }
            if done {
                break Ok(());
            }
            if let Err(e) = self.t.check().map_err(BspError::from).and_then(|()| {
                self.t.step()?;
                self.drain_events()
            }) {
                break Err(e);
            }
            let now = self.t.recent_now();
            let idle = now.saturating_sub(idle_since);
            if idle < spin || self.t.has_unsent() {
                if policy.yields(Duration::from_nanos(idle)) {
                    std::thread::yield_now();
                }
                continue;
            }
            b.set_asleep(true);
            if b.missing_from(missing).is_none() {
                b.set_asleep(false);
                break Ok(());
            }
            b.sleep(BOARD_NAP);
            b.set_asleep(false);
            idle_since = self.t.now();
        };
        for j in (first..self.p).filter(|&j| j != b.me() as u32) {
            self.t.expect(j, false);
        }
        r
    }

    /// Takes the first inbox message `want` accepts.
    pub(crate) fn take(
        &mut self,
        mut want: impl FnMut(u32, u8, u32) -> bool,
    ) -> Option<(u32, Vec<u8>)> {
        let i = self
            .inbox
            .iter()
            .position(|(from, m)| wire::head(m).is_some_and(|(k, s)| want(*from, k, s)))?;
        self.inbox.remove(i)
    }

    /// Sends nothing more and waits (at most `timeout`) until the transport has delivered
    /// everything sent; for runs without a launcher, whose `end` has no other way to know
    /// the last messages arrived.
    pub fn flush(&mut self, timeout: Duration) -> Result<(), BspError> {
        let t0 = self.t.now();
        let limit = t0 + timeout.as_nanos() as Time;
        self.wait(|c| {
            Ok(if !c.t.busy() || c.t.now() >= limit {
                Poll::Done
            } else {
                Poll::Wait(Some(limit))
            })
        })
    }
}

/// Largest message memory kept for reuse (`Exchange::pool`): what the sync board carries.
const POOLED_MAX: usize = crate::board::AREA;

/// Longest sleep on the sync board between turns of the transport: how late a process
/// asleep at the barrier answers its transport (resends, acknowledgements, direct gets).
const BOARD_NAP: Duration = Duration::from_millis(1);

/// Messages from this size on may be written as they arrive (`Core::apply_early`):
/// holding a superstep's big messages until the last arrives doubles its memory.
const EARLY_MIN: usize = 8 << 10;

/// Least average bytes per put of a message that is lent (`Recorded::lent_puts`).
const LEND_PIECE: usize = 4 << 10;

/// Largest lent message whose memory is kept for the next message to its destination.
/// Above 32 MiB glibc maps every allocation afresh: a 64 MiB message not kept costs 16384
/// page faults and as many pages zeroed per superstep, more than its copy.
const LEND_KEEP_MAX: usize = 256 << 20;

/// Bytes a destination's message starts with.
const FIRST_CAPACITY: usize = 512;

/// In the latin square, how many steps ahead of our own sending a sender is already
/// waited on (see `Exchange::turn`): processes drift apart by a step or two, and a
/// sender waited on too late only loses the protocol's prods, never its data.
const LOOKAHEAD: usize = 2;

/// Largest message sent before the barrier (see `Core::send_small`): below the size that
/// is written early, so nothing written early ever skips the schedule.
const SMALL_MAX: usize = EARLY_MIN - 1;

/// Answers what `to` lent us (`what`: puts or get values) with `status`.
fn answer_lend(
    n: &mut Net,
    x: &mut Exchange,
    to: u32,
    what: u8,
    status: u8,
) -> Result<(), BspError> {
    n.t.send(to, Bytes::from(wire::lent_msg(x.step, what, status)), false)?;
    x.sent[to as usize] = true;
    Ok(())
}

/// The REPLY to get requests: the values of `gets` (ranges of our areas, checked by
/// `local_range`), in request order.
fn reply_msg(step: u32, gets: &[(usize, usize)]) -> Vec<u8> {
    let mut v = Vec::with_capacity(wire::HEAD + gets.iter().map(|g| g.1).sum::<usize>());
    wire::put_head(&mut v, wire::REPLY, step);
    for &(src, len) in gets {
        // SAFETY: `local_range` checked the range against the registered area, which the
        // program keeps valid while registered.
        v.extend_from_slice(unsafe { std::slice::from_raw_parts(src as *const u8, len) });
    }
    v
}

/// Copies a put's bytes to where it goes.
#[inline]
fn write(bytes: &[u8], dst: usize) {
    // A word is one store, not a call of memmove.
    if let Ok(w) = <[u8; 8]>::try_from(bytes) {
        // SAFETY: as below, for 8 bytes; unaligned, since offsets are any byte.
        unsafe { (dst as *mut [u8; 8]).write_unaligned(w) };
        return;
    }
    // SAFETY: `dst` comes from `local_range`, checked against the registered area, which
    // the program keeps valid while registered. Areas may overlap, hence `copy`.
    unsafe { std::ptr::copy(bytes.as_ptr(), dst as *mut u8, bytes.len()) };
}

/// Byte ranges written early in a superstep, with their writer: disjoint, by start.
#[derive(Default)]
struct Owners {
    map: std::collections::BTreeMap<usize, (usize, u32)>,
}

impl Owners {
    fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// The parts of `[a, b)` that `pid` may write: those no higher pid wrote early.
    /// With `record`, they become `pid`'s.
    fn claim(&mut self, a: usize, b: usize, pid: u32, record: bool) -> Vec<(usize, usize)> {
        let mut over: Vec<(usize, usize, u32)> = self
            .map
            .range(..b)
            .rev()
            .take_while(|(_, (end, _))| *end > a)
            .map(|(&st, &(en, q))| (st, en, q))
            .collect();
        over.reverse();
        let mut free = Vec::new();
        let mut cur = a;
        for &(st, en, q) in &over {
            if q > pid {
                if cur < st.max(a) {
                    free.push((cur, st.max(a)));
                }
                cur = en.min(b);
            }
        }
        if cur < b {
            free.push((cur, b));
        }
        if record {
            for &(st, en, q) in over.iter().filter(|o| o.2 <= pid) {
                self.map.remove(&st);
                if st < a {
                    self.map.insert(st, (a, q));
                }
                if en > b {
                    self.map.insert(b, (en, q));
                }
            }
            for &(x, y) in &free {
                self.map.insert(x, (y, pid));
            }
        }
        free
    }
}

/// What the sync board's barrier gives each process.
struct BoardPass {
    /// Someone needs the barrier over messages too.
    complex: bool,
    /// Who sends us how much over the transport.
    incoming: Vec<Cell>,
    /// Messages read out of the board: sender, bytes, whether they hold get requests.
    msgs: Vec<(u32, Vec<u8>, bool)>,
}

/// What the barrier gives each process.
struct Barrier {
    /// The distinct summaries, each with the lowest pid that sent it (one, when all
    /// agree), or two that clash.
    summaries: Vec<(u32, Vec<u8>)>,
    /// Registration sizes and addresses of this superstep.
    pushes: Pushes,
    /// Our column of the communication matrix.
    incoming: Vec<Cell>,
}

/// Adds the summaries heard to those held: each distinct summary once, with the lowest
/// pid that sent it. Summaries differ without clashing only where some processes pop
/// NULL and others name the registration, so the set stays small; once two clash, only
/// the first clashing pair is kept. Union with the lowest pid is idempotent and
/// commutative, so every process ends with the same set when nothing clashes, and with
/// some clashing pair when anything does.
fn merge_summaries(held: &mut Vec<(u32, Vec<u8>)>, heard: &[(u32, &[u8])]) {
    for &(pid, b) in heard {
        match held.iter_mut().find(|(_, h)| h.as_slice() == b) {
            Some(h) => h.0 = h.0.min(pid),
            None => held.push((pid, b.to_vec())),
        }
    }
    if held.len() == 1 {
        return;
    }
    held.sort_by_key(|(pid, _)| *pid);
    let decoded: Vec<Option<Summary>> = held.iter().map(|(_, b)| Summary::decode(b)).collect();
    let clashes = |i: usize, j: usize| match (&decoded[i], &decoded[j]) {
        (Some(a), Some(b)) => clash(a, b).is_some(),
        _ => true,
    };
    let pair = (0..held.len())
        .flat_map(|i| (i + 1..held.len()).map(move |j| (i, j)))
        .find(|&(i, j)| clashes(i, j));
    if let Some((i, j)) = pair {
        let b = held.swap_remove(j);
        let a = held.swap_remove(i);
        *held = vec![a, b];
    }
}

/// How two processes' collective calls of a superstep disagree.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Clash {
    /// One is in `bsp_end`, the other in `bsp_sync`.
    Ending,
    /// They made different numbers of pushes (`true`) or pops.
    Count(bool),
    /// Call `k` is a push on one and a pop on the other.
    Order(usize),
    /// Call `k` pops different registrations.
    Pops(usize),
    /// They set different tag sizes.
    Tagsize,
}

/// The first way `a` and `b` disagree, if they do.
fn clash(a: &Summary, b: &Summary) -> Option<Clash> {
    if a.ending != b.ending {
        return Some(Clash::Ending);
    }
    for push in [true, false] {
        if count_ops(&a.ops, push) != count_ops(&b.ops, push) {
            return Some(Clash::Count(push));
        }
    }
    for (k, (x, y)) in a.ops.iter().zip(&b.ops).enumerate() {
        match (x, y) {
            (RegOp::Pop(u), RegOp::Pop(v)) if u != v => return Some(Clash::Pops(k)),
            (x, y) if is_push(x) != is_push(y) => return Some(Clash::Order(k)),
            _ => {}
        }
    }
    (a.tagsize != b.tagsize).then_some(Clash::Tagsize)
}

fn is_push(op: &RegOp) -> bool {
    matches!(op, RegOp::Push { .. })
}

fn count_ops(ops: &[RegOp], push: bool) -> usize {
    ops.iter().filter(|o| is_push(o) == push).count()
}

impl Clash {
    /// The misuse, naming both processes.
    fn error(self, step: u32, (pa, ra): &(u32, Summary), (pb, rb): &(u32, Summary)) -> BspError {
        let name = |op: &RegOp| {
            if is_push(op) {
                "bsp_push_reg"
            } else {
                "bsp_pop_reg"
            }
        };
        let say = |t: Option<u64>| match t {
            Some(t) => format!("set the tag size to {t}"),
            None => "did not call it".to_string(),
        };
        BspError::Misuse(match self {
            Clash::Ending => {
                let (end, sync) = if ra.ending { (pa, pb) } else { (pb, pa) };
                format!(
                    "bsp_end: pid {end} called bsp_end while pid {sync} called bsp_sync \
                     (superstep {step}); every process must call bsp_end together"
                )
            }
            Clash::Count(push) => {
                let (call, verb) = if push {
                    ("bsp_push_reg", "registered")
                } else {
                    ("bsp_pop_reg", "popped")
                };
                let (x, y) = (count_ops(&ra.ops, push), count_ops(&rb.ops, push));
                format!(
                    "{call}: in superstep {step} pid {pa} {verb} {x} area{} but pid {pb} \
                     {verb} {y}; registration is collective: every process makes the same \
                     calls in the same order",
                    if x == 1 { "" } else { "s" }
                )
            }
            Clash::Order(k) => format!(
                "bsp_push_reg/bsp_pop_reg: in superstep {step} pid {pa} and pid {pb} pushed \
                 and popped registrations in different orders (call {} was a {} on pid {pa} \
                 and a {} on pid {pb})",
                k + 1,
                name(&ra.ops[k]),
                name(&rb.ops[k])
            ),
            Clash::Pops(k) => {
                let slot = |op: &RegOp| match op {
                    RegOp::Pop(s) => *s,
                    _ => unreachable!("a clash of pops is between pops"),
                };
                format!(
                    "bsp_pop_reg: in superstep {step} pid {pa} and pid {pb} popped different \
                     registrations (call {}: pid {pa} popped registration #{}, pid {pb} #{}); \
                     pops must name the same registration on every process (or NULL)",
                    k + 1,
                    slot(&ra.ops[k]),
                    slot(&rb.ops[k])
                )
            }
            Clash::Tagsize => format!(
                "bsp_set_tagsize: in superstep {step} pid {pa} {} but pid {pb} {}; it is \
                 collective: every process sets the same size in the same superstep",
                say(ra.tagsize),
                say(rb.tagsize)
            ),
        })
    }
}

/// Registration sizes gathered in the barrier, by pid.
struct Pushes {
    p: u32,
    by_pid: Vec<Option<Vec<u64>>>,
    known: Vec<u32>,
}

impl Pushes {
    fn new(p: u32) -> Pushes {
        Pushes {
            p,
            by_pid: Vec::new(),
            known: Vec::new(),
        }
    }

    fn insert(&mut self, pid: u32, sizes: Vec<u64>) {
        if self.by_pid.is_empty() {
            self.by_pid = vec![None; self.p as usize];
        }
        let slot = &mut self.by_pid[pid as usize];
        if slot.is_none() {
            *slot = Some(sizes);
            self.known.push(pid);
        }
    }

    fn iter(&self) -> impl ExactSizeIterator<Item = (u32, &[u64])> {
        self.known.iter().map(|&pid| {
            let sizes = self.by_pid[pid as usize].as_deref().unwrap_or_default();
            (pid, sizes)
        })
    }

    /// Every process's `k` sizes by pid (the summaries agreed that everyone pushed `k`
    /// areas); `None` if any is missing or of another count.
    fn finish(self, k: usize) -> Option<Vec<Vec<u64>>> {
        if k == 0 {
            return self.known.is_empty().then(Vec::new);
        }
        self.by_pid
            .into_iter()
            .map(|v| v.filter(|v| v.len() == k))
            .collect()
    }
}

/// The destinations other than `me` in an order drawn from `me` and `step`
/// (Fisher-Yates over a splitmix64 stream), so every run of a program sends alike.
fn shuffled(me: u32, step: u32, p: u32) -> Vec<u32> {
    let mut order: Vec<u32> = (0..p).filter(|&d| d != me).collect();
    let mut x = ((me as u64) << 32 | step as u64) ^ 0x9e37_79b9_7f4a_7c15;
    let mut next = || {
        x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = x;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    for i in (1..order.len()).rev() {
        let j = (next() % (i as u64 + 1)) as usize;
        order.swap(i, j);
    }
    order
}

impl Exchange {
    /// Ready for superstep `step` of `p` processes, keeping the memory of the last
    /// superstep's state: a superstep allocates nothing per peer.
    fn reset(&mut self, step: u32, p: usize, get_order: Vec<u32>) {
        fn fill<T: Clone>(v: &mut Vec<T>, p: usize, value: T) {
            v.clear();
            v.resize(p, value);
        }
        self.step = step;
        fill(&mut self.expect, p, 0);
        fill(&mut self.got, p, 0);
        fill(&mut self.owes, p, false);
        self.senders_left = 0;
        self.data.clear();
        self.held.clear();
        self.get_order = get_order;
        self.gets.clear();
        fill(&mut self.reply_left, p, 0);
        self.replies_left = 0;
        self.applied = false;
        self.order.clear();
        self.next = 0;
        self.turn = None;
        self.cur = None;
        self.draining = None;
        self.next_send_at = 0;
        fill(&mut self.fed, p, false);
        fill(&mut self.sent, p, false);
        fill(&mut self.ended, p, false);
        fill(&mut self.waiting, p, false);
        self.queue = Queue::default();
        self.early = false;
        self.hp_src = None;
        self.owners = Owners::default();
        fill(&mut self.reply_lent, p, None);
        self.replies_lent = 0;
    }

    /// [`Exchange::reset`] for a superstep that only writes what is here.
    fn reset_for_apply(&mut self, step: u32, p: usize) {
        self.step = step;
        self.owes.clear();
        self.owes.resize(p, false);
        self.data.clear();
        self.queue = Queue::default();
        self.applied = false;
        if !self.owners.is_empty() {
            self.owners = Owners::default();
        }
    }

    fn queue_buf(&self, at: usize) -> &[u8] {
        self.queue.buf(at)
    }
}

impl Service for Net {
    fn progress(&mut self) -> bool {
        if self.failure.is_some() {
            return false;
        }
        let moved = match self.t.step() {
            Ok(p) => p.any(),
            Err(e) => {
                self.failure = Some(e.into());
                return false;
            }
        };
        match self.drain_events() {
            Ok(any) => moved || any,
            Err(e) => {
                self.failure = Some(e);
                false
            }
        }
    }

    fn block(&mut self, timeout: Duration) {
        let _ = self.t.block(Some(timeout));
    }

    fn busy(&self) -> bool {
        self.t.busy()
    }

    /// The transport alone: what arrives stays in it until the program syncs.
    fn keep_alive(&mut self) {
        if self.failure.is_none()
            && let Err(e) = self.t.step()
        {
            self.failure = Some(e.into());
        }
    }

    fn keep_alive_interval(&self) -> Option<Duration> {
        self.t.liveness_interval()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_schedules_are_permutations_that_change_with_the_superstep() {
        let a = shuffled(3, 0, 64);
        let mut sorted = a.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..64).filter(|&d| d != 3).collect::<Vec<_>>());
        assert_eq!(a, shuffled(3, 0, 64));
        assert_ne!(a, shuffled(3, 1, 64));
        assert_ne!(a, shuffled(4, 0, 64));
        assert!(shuffled(0, 0, 1).is_empty());
    }

    /// Runs the barrier's dissemination of summaries over `p` processes, `summary(pid)`
    /// each, and returns what every process holds at the end.
    fn disseminate(p: u32, summary: impl Fn(u32) -> Summary) -> Vec<Vec<(u32, Vec<u8>)>> {
        let mut held: Vec<Vec<(u32, Vec<u8>)>> = (0..p)
            .map(|q| {
                let mut b = Vec::new();
                summary(q).encode(&mut b);
                vec![(q, b)]
            })
            .collect();
        let mut dist = 1;
        while dist < p {
            let sent = held.clone();
            for (q, h) in held.iter_mut().enumerate() {
                let from = (q as u32 + p - dist) % p;
                let heard: Vec<(u32, &[u8])> = sent[from as usize]
                    .iter()
                    .map(|(pid, b)| (*pid, b.as_slice()))
                    .collect();
                merge_summaries(h, &heard);
            }
            dist <<= 1;
        }
        held
    }

    fn decode_all(h: &[(u32, Vec<u8>)]) -> Vec<(u32, Summary)> {
        h.iter()
            .map(|(pid, b)| (*pid, Summary::decode(b).unwrap()))
            .collect()
    }

    #[test]
    fn dissemination_of_summaries_finds_a_dissenting_pair() {
        for p in [1u32, 2, 3, 5, 8, 13, 64] {
            for odd in [None, Some(p - 1), Some(p / 2), Some(0)] {
                let summary = |pid: u32| Summary {
                    ending: Some(pid) == odd,
                    ..Summary::default()
                };
                for h in disseminate(p, summary) {
                    match odd.filter(|_| p > 1) {
                        Some(o) => {
                            let d = decode_all(&h);
                            assert_eq!(d.len(), 2, "p {p} odd {o}: {h:?}");
                            assert_eq!(clash(&d[0].1, &d[1].1), Some(Clash::Ending));
                        }
                        _ => {
                            let mut own = Vec::new();
                            summary(0).encode(&mut own);
                            assert_eq!(h, vec![(0, own)]);
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn pops_of_null_join_the_named_pops_everywhere() {
        let pops = |a: RegOp, b: RegOp| Summary {
            ops: vec![a, RegOp::Push { size: 0, addr: 0 }, b],
            ..Summary::default()
        };
        for p in [2u32, 3, 5, 8, 13, 64] {
            // Pids 1 mod 3 name registration 4 at the first pop; pid p-1 names 7 at the
            // second; the rest pop NULL.
            let agree = |pid: u32| {
                let first = if pid % 3 == 1 {
                    RegOp::Pop(4)
                } else {
                    RegOp::PopNull
                };
                let second = if pid == p - 1 {
                    RegOp::Pop(7)
                } else {
                    RegOp::PopNull
                };
                pops(first, second)
            };
            let held = disseminate(p, agree);
            for h in &held {
                assert_eq!(h, &held[0], "p {p}: every process holds the same set");
                let d = decode_all(h);
                for (i, a) in d.iter().enumerate() {
                    for b in &d[i + 1..] {
                        assert_eq!(clash(&a.1, &b.1), None, "p {p}: {d:?}");
                    }
                }
                // The set's join names both registrations.
                let mut ops = d[0].1.ops.clone();
                for (_, s) in &d[1..] {
                    for (m, t) in ops.iter_mut().zip(&s.ops) {
                        if *m == RegOp::PopNull {
                            *m = *t;
                        }
                    }
                }
                assert_eq!(ops[0], RegOp::Pop(4), "p {p}");
                assert_eq!(ops[2], RegOp::Pop(7), "p {p}");
            }
            // Pid 0 naming another registration is caught by every process.
            let one_off = |pid: u32| {
                if pid == 0 {
                    pops(RegOp::Pop(5), RegOp::PopNull)
                } else {
                    agree(pid)
                }
            };
            for h in disseminate(p, one_off) {
                let d = decode_all(&h);
                assert_eq!(d.len(), 2, "p {p}: {d:?}");
                assert_eq!(clash(&d[0].1, &d[1].1), Some(Clash::Pops(0)), "p {p}");
            }
        }
    }

    #[test]
    fn early_writes_keep_the_highest_pid() {
        let mut o = Owners::default();
        // Pid 5 writes [10, 20) first; pid 2 may write only around it.
        assert_eq!(o.claim(10, 20, 5, true), vec![(10, 20)]);
        assert_eq!(o.claim(0, 30, 2, true), vec![(0, 10), (20, 30)]);
        // Pid 7 takes everything, including pid 5's bytes.
        assert_eq!(o.claim(5, 25, 7, true), vec![(5, 25)]);
        let owners: Vec<(usize, usize, u32)> =
            o.map.iter().map(|(&s, &(e, p))| (s, e, p)).collect();
        assert_eq!(owners, vec![(0, 5, 2), (5, 25, 7), (25, 30, 2)]);
        // A late writer of a lower pid, not recorded, writes what nobody higher did.
        assert_eq!(o.claim(0, 40, 3, false), vec![(0, 5), (25, 40)]);
        assert_eq!(o.map.len(), 3);
        assert!(o.claim(8, 8, 1, false).is_empty());
    }

    #[test]
    fn recorded_messages_fill_their_holes_at_the_end() {
        let src = *b"HOLE";
        let mut o = Outbox::default();
        o.buf.extend_from_slice(b"ab");
        o.hole(src.as_ptr() as usize, 4);
        o.buf.extend_from_slice(b"cd");
        o.hole(src.as_ptr() as usize + 1, 2);
        assert_eq!(o.len(), 10);
        let r = Recorded {
            buf: o.buf,
            holes: o.holes,
            chunks: vec![0],
            mixed: false,
        };
        assert_eq!(
            r.sources(),
            Some((src.as_ptr() as usize, src.as_ptr() as usize + 4))
        );
        assert_eq!(r.build(), b"abHOLEcdOL");
    }

    /// A put of `n` bytes of `data` (inline) or from `hole` (an hpput) into `o`.
    fn record_put(o: &mut Outbox, slot: u64, offset: u64, data: &[u8], hole: Option<usize>) {
        let n = data.len();
        o.reserve(
            1,
            None,
            wire::MAX_REC_HEAD + n,
            0,
            if hole.is_some() { n } else { 0 },
        );
        wire::put_rec_head(&mut o.buf, wire::REC_PUT, slot, offset, n as u64);
        match hole {
            Some(src) => o.hole(src, n),
            None => o.buf.extend_from_slice(data),
        }
    }

    /// The outboxes of process `me` of `p` after `each(d, outbox)` recorded its calls for
    /// every destination `d`.
    fn outboxes(p: usize, each: impl Fn(usize, &mut Outbox)) -> Vec<Outbox> {
        (0..p)
            .map(|d| {
                let mut o = Outbox::default();
                each(d, &mut o);
                o
            })
            .collect()
    }

    #[test]
    fn the_same_message_to_every_other_process_is_a_broadcast() {
        let data = vec![7u8; 40 << 10];
        let src = vec![9u8; 1000];
        let me = 1;
        // Two puts and an hpput to every other process, and something to ourselves.
        let all = |d: usize, o: &mut Outbox| {
            if d == me {
                record_put(o, 3, 0, b"own", None);
                return;
            }
            record_put(o, 0, 64, &data, None);
            record_put(o, 1, 0, &src, Some(src.as_ptr() as usize));
            record_put(o, 0, 0, b"tail", None);
        };
        let out = outboxes(4, all);
        let len = out[0].len();
        assert_eq!(broadcast_len(&out, me, 32 << 10), Some(len));
        assert!(len > data.len() + src.len());
        // Not when smaller than the threshold, or with the threshold off.
        assert_eq!(broadcast_len(&out, me, len + 1), None);
        assert_eq!(broadcast_len(&out, me, usize::MAX), None);
        // Not at two processes: one message either way.
        assert_eq!(broadcast_len(&outboxes(2, all), 0, 0), None);
        // One byte differs for one destination.
        let mut out = outboxes(4, all);
        let at = out[3].buf.len() - 2;
        out[3].buf[at] ^= 1;
        assert_eq!(broadcast_len(&out, me, 0), None);
        // One destination gets nothing.
        let out = outboxes(4, |d, o| {
            if d != 2 {
                all(d, o)
            }
        });
        assert_eq!(broadcast_len(&out, me, 0), None);
        // One destination's hpput reads another source.
        let other = src.clone();
        let out = outboxes(4, |d, o| {
            if d == 3 {
                record_put(o, 0, 64, &data, None);
                record_put(o, 1, 0, &other, Some(other.as_ptr() as usize));
                record_put(o, 0, 0, b"tail", None);
            } else {
                all(d, o)
            }
        });
        assert_eq!(broadcast_len(&out, me, 0), None);
        // One destination gets a put more.
        let out = outboxes(4, |d, o| {
            all(d, o);
            if d == 0 {
                record_put(o, 0, 0, b"x", None);
            }
        });
        assert_eq!(broadcast_len(&out, me, 0), None);
        // A get request: its reply is per destination.
        let mut out = outboxes(4, all);
        out[2].gets.push((0, 8));
        assert_eq!(broadcast_len(&out, me, 0), None);
        // Part of it already left (before the barrier).
        let mut out = outboxes(4, all);
        out[0].sent = 10;
        assert_eq!(broadcast_len(&out, me, 0), None);
        // Cut into chunks: not one message.
        let mut out = outboxes(4, all);
        for (d, o) in out.iter_mut().enumerate() {
            if d != me {
                o.chunks.push(o.buf.len());
            }
        }
        assert_eq!(broadcast_len(&out, me, 0), None);
        // Nothing to anyone is no broadcast, whatever the threshold.
        assert_eq!(broadcast_len(&outboxes(4, |_, _| {}), me, 0), None);
    }

    #[test]
    fn lent_messages_name_each_puts_bytes_where_they_lie() {
        let a = vec![1u8; 5000];
        let b = vec![2u8; 9000];
        let c = vec![3u8; 7000];
        let mut o = Outbox::default();
        record_put(&mut o, 0, 10, &a, None);
        record_put(&mut o, 2, 300, &b, Some(b.as_ptr() as usize));
        record_put(&mut o, 1, 0, &c, None);
        let r = o.take_records();
        let puts = r.lent_puts().expect("only large puts");
        let whole = Recorded {
            buf: r.buf.clone(),
            holes: r.holes.clone(),
            chunks: r.chunks.clone(),
            mixed: false,
        }
        .build();
        assert_eq!(
            wire::HEAD + puts.iter().map(|p| p.record_len().unwrap()).sum::<usize>(),
            whole.len()
        );
        let at = |p: &LentPut| {
            // SAFETY: each address is a live buffer of this test, `len` bytes long.
            unsafe { std::slice::from_raw_parts(p.addr as *const u8, p.len) }.to_vec()
        };
        let want = [(0, 10, &a), (2, 300, &b), (1, 0, &c)];
        assert_eq!(puts.len(), 3);
        for (p, (slot, offset, data)) in puts.iter().zip(want) {
            assert_eq!((p.slot, p.offset), (slot, offset));
            assert_eq!(at(p), data[..]);
        }
        assert_eq!(
            puts[1].addr,
            b.as_ptr() as u64,
            "an hpput is read from its source"
        );
        // Small puts on average, or a get or send beside the puts: not lent.
        let mut o = Outbox::default();
        record_put(&mut o, 0, 0, &a, None);
        for i in 0..8 {
            record_put(&mut o, 0, i, &[0u8; 8], None);
        }
        assert!(o.take_records().lent_puts().is_none());
        let mut o = Outbox::default();
        record_put(&mut o, 0, 0, &b, None);
        o.mixed = true;
        assert!(o.take_records().lent_puts().is_none());
    }
}
