//! Point-to-point messaging for bulkwire: what a user of MPI expects of `MPI_Isend`,
//! `MPI_Irecv` and `MPI_Wait`, over any [`Transport`] (the RMPP paper's pre-post / send / wait
//! library, the ParaStation2 paper's ports).
//!
//! - **Matching**: receives are matched by (source, tag) with wildcards ([`Source::Any`],
//!   [`Tag::Any`]) in MPI's order: an arriving message takes the earliest posted receive
//!   that matches it, a new receive the earliest arrived message; messages of one
//!   (source, tag) never overtake each other.
//! - **Protocols**: messages up to the eager limit ([`Config::eager`], default 64 KiB, or
//!   16 KiB toward peers read in place) go at once; larger ones by rendezvous (RTS, CTS,
//!   then the body straight from the sender's buffer); on one host the receiver copies
//!   the body out of the sender's buffer with `process_vm_readv` instead (one copy, no
//!   packets), falling back to the transport if the kernel refuses.
//! - **Progress**: the state lives in [`bulkwire_engine::progress::Shared`]: a background
//!   thread matches, copies and acknowledges while the user computes, so a pre-posted
//!   receive is complete when the user comes back to wait (the RMPP paper, Fig. 4).
//! - **Errors** are per request: truncation, a dead peer (named), a failed job.
//!
//! ```no_run
//! use bulkwire_p2p::{Comm, Config, Source, Tag};
//! # fn main() -> Result<(), bulkwire_p2p::Error> {
//! // Under bsprun, or a job of one. A program takes both from its environment with
//! // `bulkwire_config::Settings::from_env()` (`settings.launch`, `settings.p2p`).
//! let comm = Comm::init(&bulkwire_launch::LaunchConfig::default(), Config::default())?;
//! let (me, p) = (comm.rank(), comm.size());
//! let mut inbox = vec![0u8; 1 << 20];
//! let data = vec![me as u8; 1 << 20];
//! comm.scope(|s| -> Result<(), bulkwire_p2p::Error> {
//!     let mut r = s.irecv(Source::Any, Tag::Any, &mut inbox)?;
//!     let mut q = s.isend((me + 1) % p, 7, &data)?;
//!     // ... compute: the progress thread moves the data meanwhile ...
//!     let st = r.wait()?;
//!     println!("{} bytes from rank {} (tag {})", st.len, st.source, st.tag);
//!     q.wait()?;
//!     Ok(())
//! })?;
//! comm.finalize()
//! # }
//! ```

pub mod envelope;
pub mod loopback;
pub mod matching;
mod state;
/// Single-copy reads of a peer's memory on this host (shared with the BSP layer's
/// `bsp_direct_get`).
pub use bulkwire_engine::{PeerDead, vm};

use std::marker::PhantomData;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bulkwire_engine::job::{self, JobConfig};
use bulkwire_engine::progress::Shared;
use bulkwire_engine::{Transport, WaitPolicy};
use bulkwire_launch::{Control, JobState, LaunchConfig};
use bulkwire_link::Rank;
use bytes::Bytes;
use matching::Sel;

pub use state::{Keep, ReqId, Stats};
use state::{RecvBuf, Settings, State};
use vm::Published;

/// Errors of p2p calls and of individual requests.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The message was longer than the receive buffer. The prefix that fits was delivered
    /// (eager) or nothing was (rendezvous); `len` is the message's length.
    #[error(
        "message from rank {peer} with tag {tag} has {len} bytes, more than the {cap} bytes of the receive buffer"
    )]
    Truncated {
        peer: Rank,
        tag: i32,
        len: u64,
        cap: usize,
    },
    #[error(transparent)]
    PeerDead(PeerDead),
    /// Another process of the job failed (aborted, died, or the launcher is gone);
    /// `rank` names it when known.
    #[error("the job failed: {message}")]
    JobFailed { rank: Option<Rank>, message: String },
    #[error("rank {rank} is not in this job of {size} processes")]
    InvalidRank { rank: i64, size: u32 },
    #[error("tag {0} is invalid: tags are 0 to 2147483647")]
    InvalidTag(i64),
    #[error("invalid request handle (completed, freed, or never issued)")]
    InvalidRequest,
    #[error("the request was cancelled")]
    Cancelled,
    #[error("message of {len} bytes exceeds the transport's limit of {max} bytes")]
    TooLarge { len: u64, max: u64 },
    #[error("transport error: {0}")]
    Transport(String),
    #[error("cannot start: {0}")]
    Init(String),
    #[error("bad configuration: {0}")]
    Config(String),
    #[error("the communicator is finalized")]
    Finalized,
}

impl Error {
    /// The peer this error is about, if it names one.
    pub fn peer(&self) -> Option<Rank> {
        match *self {
            Error::Truncated { peer, .. } => Some(peer),
            Error::PeerDead(d) => Some(d.peer),
            Error::JobFailed { rank, .. } => rank,
            _ => None,
        }
    }
}

/// Lengths of the matching queues (see [`Comm::queues`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Queues {
    /// Receives posted and not matched yet.
    pub posted: usize,
    /// Messages (or their announcements) that arrived before a receive for them.
    pub unexpected: usize,
    /// Requests not completed yet.
    pub incomplete: usize,
    /// The transport holds data not acknowledged yet.
    pub unacknowledged: bool,
}

/// What a completed request tells: for a receive the matched message's source, tag and
/// length; for a send its destination, tag and length.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Status {
    pub source: Rank,
    pub tag: i32,
    pub len: usize,
}

/// Which sources a receive accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    Any,
    Rank(Rank),
}

impl From<Rank> for Source {
    fn from(r: Rank) -> Source {
        Source::Rank(r)
    }
}

impl Source {
    fn get(self) -> Option<Rank> {
        match self {
            Source::Any => None,
            Source::Rank(r) => Some(r),
        }
    }
}

/// Which tags a receive accepts. Tags are 0 to `i32::MAX`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tag {
    Any,
    Is(i32),
    /// Any tag of context `c`, the tags `c << 16 ..= c << 16 | 0xffff` (`c` < 32768): a
    /// layer that puts a context (an MPI communicator) in a tag's upper half receives
    /// "any tag" of its own context only.
    AnyIn(u16),
}

impl From<i32> for Tag {
    fn from(t: i32) -> Tag {
        Tag::Is(t)
    }
}

pub const ANY_SOURCE: Source = Source::Any;
pub const ANY_TAG: Tag = Tag::Any;

fn user_tag(tag: i32) -> Result<i32, Error> {
    if tag < 0 {
        Err(Error::InvalidTag(tag.into()))
    } else {
        Ok(tag)
    }
}

fn tag_sel(t: Tag) -> Result<Sel, Error> {
    match t {
        Tag::Any => Ok(Sel::Any),
        Tag::Is(t) => user_tag(t).map(Sel::Is),
        Tag::AnyIn(c) if c < 0x8000 => Ok(Sel::In(c)),
        Tag::AnyIn(c) => Err(Error::InvalidTag(i64::from(c) << 16)),
    }
}

/// Whether single copy is used between processes of one host.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SingleCopy {
    Off,
    On,
    /// Offered, but every read is treated as refused by the kernel (tests the fallback).
    Refuse,
}

/// How a communicator behaves (`bulkwire-config` builds one from the environment).
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// Messages of at most this many bytes are sent eagerly; larger ones by rendezvous.
    pub eager: usize,
    /// The same toward peers whose buffers are read in place (single copy).
    pub eager_local: usize,
    pub single_copy: SingleCopy,
    /// Single-copy messages of at least this many bytes are split between the two
    /// processes: each copies half ([`DEFAULT_SPLIT`]; `usize::MAX`: never).
    pub split: usize,
    /// The progress thread's interval; `None`: no thread (progress only inside calls).
    pub progress: Option<Duration>,
    /// How the job's transport is built.
    pub job: JobConfig,
}

impl Default for Config {
    /// Eager limit [`DEFAULT_EAGER`], single copy on, a progress thread looking every 2 ms,
    /// the transport's defaults.
    fn default() -> Config {
        Config {
            eager: DEFAULT_EAGER,
            eager_local: DEFAULT_EAGER_LOCAL,
            single_copy: SingleCopy::On,
            split: DEFAULT_SPLIT,
            progress: Some(bulkwire_engine::progress::DEFAULT_INTERVAL),
            job: JobConfig::default(),
        }
    }
}

/// Default eager limit: over UDP an eager message is faster than a rendezvous up to well
/// beyond this; the limit bounds what unexpected messages may pile up at a receiver
/// (docs/p2p.md has the measurements).
pub const DEFAULT_EAGER: usize = 64 << 10;

/// Default eager limit toward peers read in place: from about 16 KiB a single-copy
/// rendezvous beats an eager message's two copies (docs/p2p.md).
pub const DEFAULT_EAGER_LOCAL: usize = 16 << 10;

/// Default size from which a single-copy message is split between sender and receiver
/// (docs/p2p.md has the measurements).
pub const DEFAULT_SPLIT: usize = 64 << 10;

impl Config {
    fn settings(&self) -> Settings {
        Settings {
            eager: self.eager,
            eager_local: self.eager_local,
            single_copy: self.single_copy != SingleCopy::Off,
            refuse_reads: self.single_copy == SingleCopy::Refuse,
            split: self.split,
        }
    }
}

/// The world communicator of a job: every process of it, ranks 0 to size-1.
pub struct Comm {
    shared: Shared<State>,
    rank: Rank,
    size: u32,
    policy: WaitPolicy,
    ctl: Mutex<Option<Control>>,
    job: Option<Arc<JobState>>,
    finalized: AtomicBool,
    /// For each rank, whether it runs on this host (all false without a launcher).
    local: Vec<bool>,
    /// The CPUs of this host the job's processes share.
    host_cpus: usize,
    /// The job's multicast group, where the job kept one (`BULKWIRE_MCAST`), for the
    /// collectives' broadcasts.
    mcast: Mutex<Option<bulkwire_engine::mcast::McastGroup>>,
    /// Why the job goes without the group, where it tried one (the line rank 0 printed).
    mcast_off: Option<String>,
}

/// Idle rounds of a wait between two reads of the clock.
const CLOCK_EVERY: u32 = 16;

/// What an idle round of a wait ends with.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Idle {
    /// Not idle: something moved, or the round slept.
    No,
    Spin,
    /// Give the core away (see [`bulkwire_engine::YIELD_AFTER`]).
    Yield,
}

/// Longest a waiter sleeps in one go: the transport's own timers and wakers end sleeps
/// earlier; this only bounds the damage of a missed wake.
const MAX_BLOCK: Duration = Duration::from_millis(100);

impl Comm {
    /// Joins the job this process was launched in (`bsprun`, Slurm or mpirun with a
    /// rendezvous), or makes a job of one process if it was not launched.
    pub fn init(launch: &LaunchConfig, cfg: Config) -> Result<Comm, Error> {
        Comm::init_spawn(1, launch, cfg)
    }

    /// Joins the job this process was launched in, or starts one of `n` processes of this
    /// program with itself as rank 0 (self-spawn, like `bsp_begin(n)`).
    pub fn init_spawn(n: u32, launch: &LaunchConfig, cfg: Config) -> Result<Comm, Error> {
        let ctl = bulkwire_launch::self_spawn(n, launch).map_err(|e| Error::Init(e.to_string()))?;
        Comm::from_control(ctl, cfg)
    }

    /// Builds the communicator of the job `ctl` belongs to. Collective: every process of
    /// the job calls it, in the same order as other rendezvous exchanges.
    pub fn from_control(mut ctl: Control, cfg: Config) -> Result<Comm, Error> {
        // Any stack: a protocol over a link, or kernel TCP.
        let (engine, info) = job::connect_transport(&mut ctl, &cfg.job).map_err(|e| match e {
            bulkwire_engine::Error::JobFailed(m) => Error::JobFailed {
                rank: None,
                message: m,
            },
            other => Error::Init(other.to_string()),
        })?;
        // Round 2 of the rendezvous: what each process publishes for single copy.
        let blobs = ctl
            .allgather(&Published::mine().to_bytes())
            .map_err(|e| Error::Init(e.to_string()))?;
        let vm: Vec<Option<Published>> = blobs.iter().map(|b| Published::from_bytes(b)).collect();
        let job = ctl.state();
        let waker = engine.waker();
        // A waiter asleep in the transport wakes when the job fails.
        let w = waker.clone();
        job.on_failure(move |_| w());
        let policy = engine.policy();
        let mut state = State::new(engine, cfg.settings(), &info.local, &vm);
        state.set_job(job.clone());
        let host_cpus = ctl.host_cpus();
        let mcfg = bulkwire_protocol::mcast::McastConfig::new(1);
        let group = job::mcast_group(&ctl, &cfg.job, &info, mcfg)
            .map_err(|e| Error::Init(e.to_string()))?;
        let mut comm = Comm::build(state, waker, policy, cfg.progress, Some(ctl), Some(job));
        comm.local = info.local;
        comm.host_cpus = host_cpus;
        comm.mcast = Mutex::new(group);
        comm.mcast_off = info.mcast_off;
        Ok(comm)
    }

    /// A communicator over any transport (threads over an in-process link, tests). No
    /// single copy; [`Comm::finalize`] only flushes (there is no launcher to meet at).
    pub fn from_transport(t: Box<dyn Transport>, cfg: &Config) -> Comm {
        let n = t.nprocs() as usize;
        let waker = t.waker();
        let policy = t.policy();
        let state = State::new(t, cfg.settings(), &vec![false; n], &vec![None; n]);
        Comm::build(state, waker, policy, cfg.progress, None, None)
    }

    fn build(
        state: State,
        waker: bulkwire_engine::Waker,
        policy: WaitPolicy,
        progress: Option<Duration>,
        ctl: Option<Control>,
        job: Option<Arc<JobState>>,
    ) -> Comm {
        let (rank, size) = (state.rank(), state.size());
        Comm {
            shared: Shared::new(state, waker, progress),
            rank,
            size,
            policy,
            ctl: Mutex::new(ctl),
            job,
            finalized: AtomicBool::new(false),
            local: vec![false; size as usize],
            host_cpus: bulkwire_launch::available_cpus(),
            mcast: Mutex::new(None),
            mcast_off: None,
        }
    }

    /// Whether the job's multicast group carries broadcasts ([`Comm::with_mcast`]).
    pub fn has_mcast(&self) -> bool {
        self.mcast
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some()
    }

    /// Why the job goes without its multicast group, where it tried one
    /// (`BULKWIRE_MCAST=auto`): the line rank 0 printed.
    pub fn mcast_off(&self) -> Option<&str> {
        self.mcast_off.as_deref()
    }

    /// Runs `f` on the job's multicast group, if the job kept one; every process of the
    /// job has one or none. Nothing serves the point-to-point layer meanwhile but its
    /// progress thread, if any.
    pub fn with_mcast<R>(
        &self,
        f: impl FnOnce(&mut bulkwire_engine::mcast::McastGroup) -> R,
    ) -> Option<R> {
        self.mcast
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_mut()
            .map(f)
    }

    /// Broadcasts `buf` from `root` over the job's multicast group (collective: every
    /// process calls it alike; see `bulkwire_engine::mcast`). `None`: the job has none.
    pub fn mcast_broadcast(&self, root: Rank, buf: &mut [u8]) -> Option<Result<(), Error>> {
        self.with_mcast(|g| {
            g.broadcast(root, buf).map_err(|e| match e {
                bulkwire_engine::Error::PeerDead(d) => Error::PeerDead(d),
                bulkwire_engine::Error::JobFailed(message) => Error::JobFailed {
                    rank: None,
                    message,
                },
                e => Error::Transport(format!("multicast: {e}")),
            })
        })
    }

    /// The multicast group's counters: the protocol's and the datagrams it dropped.
    pub fn mcast_stats(
        &self,
    ) -> Option<(
        bulkwire_protocol::mcast::McastStats,
        bulkwire_protocol::wire::DropCounts,
    )> {
        self.with_mcast(|g| (g.stats(), g.drops()))
    }

    pub fn rank(&self) -> Rank {
        self.rank
    }

    pub fn size(&self) -> u32 {
        self.size
    }

    /// The transport protocol's name.
    pub fn protocol_name(&self) -> &'static str {
        self.shared.with(|s| s.protocol_name())
    }

    /// The eager limit in bytes toward `peer`.
    pub fn eager_limit(&self, peer: Rank) -> Result<usize, Error> {
        if peer >= self.size {
            return Err(Error::InvalidRank {
                rank: peer.into(),
                size: self.size,
            });
        }
        Ok(self.shared.with(|s| s.eager_limit(peer)))
    }

    /// Ranks whose buffers this process reads in place (single copy).
    pub fn single_copy_peers(&self) -> Vec<Rank> {
        self.shared.with(|s| s.single_copy_peers())
    }

    /// Counters of what this process has done.
    pub fn stats(&self) -> Stats {
        self.shared.with(|s| s.stats)
    }

    /// Lengths of the matching queues and requests in flight, for diagnostics.
    pub fn queues(&self) -> Queues {
        self.shared.with(|s| Queues {
            posted: s.posted_len(),
            unexpected: s.unexpected_len(),
            incomplete: s.incomplete(),
            unacknowledged: s.transport_busy(),
        })
    }

    /// Waits until everything this process sent has been acknowledged by its receiver.
    pub fn flush(&self) -> Result<(), Error> {
        self.wait_until(|s| {
            if let Some(e) = s.failure() {
                return Some(Err(e.clone()));
            }
            (!s.transport_busy()).then_some(Ok(()))
        })
    }

    /// Times the progress thread took over while the user was away.
    pub fn progress_takeovers(&self) -> u64 {
        self.shared.takeovers()
    }

    // ---- hooks for the collectives layer (bulkwire-collectives) ------------------------

    /// For each rank, whether it runs on this host (as the job's business cards say; all
    /// false for a communicator built without a launcher).
    pub fn host_local(&self) -> &[bool] {
        &self.local
    }

    /// The CPUs of this host the job's processes share (as the launcher said; the CPUs
    /// this process may run on for a communicator built without a launcher).
    pub fn host_cpus(&self) -> usize {
        self.host_cpus
    }

    /// The job's failure, if another process has died or aborted (one atomic load when
    /// the job is healthy).
    pub fn job_failure(&self) -> Option<Error> {
        if !self.job.as_ref()?.is_failed() {
            return None;
        }
        self.job_error()
    }

    /// Drives the transport once (sends what is queued, receives, acknowledges, answers
    /// pings) without waiting. For layers that wait outside p2p (the collectives' shared
    /// memory), so that traffic this process owes its peers is not held up, with or
    /// without the progress thread.
    pub fn progress(&self) {
        self.shared.with(|s| {
            s.pump();
        });
    }

    /// Tells the launcher that this process has failed (`msg` says why) without exiting:
    /// every process of the job, this one included, then sees `JobFailed`, so requests
    /// that wait on processes stuck behind this failure end too. Returns false when there
    /// is no launcher to tell (a communicator over a bare transport).
    pub fn fail_job(&self, msg: &str) -> bool {
        let ctl = self.ctl.lock().unwrap_or_else(|e| e.into_inner());
        ctl.as_ref().is_some_and(|c| c.notify_abort(msg).is_ok())
    }

    /// [`Comm::isend_raw`] with a tag of the collectives' reserved range
    /// ([`envelope::coll_tag`]), which no user receive can match.
    ///
    /// # Safety
    /// As for [`Comm::isend_raw`].
    pub unsafe fn isend_coll_raw(
        &self,
        dest: Rank,
        tag: i32,
        ptr: *const u8,
        len: usize,
    ) -> Result<ReqId, Error> {
        if !envelope::is_coll_tag(tag) {
            return Err(Error::InvalidTag(tag.into()));
        }
        // SAFETY: forwarded contract.
        self.shared
            .with(|s| unsafe { s.isend(dest, tag, ptr, len, Keep::None, 0) })
    }

    /// [`Comm::irecv_raw`] from one rank with a tag of the collectives' reserved range.
    ///
    /// # Safety
    /// As for [`Comm::irecv_raw`].
    pub unsafe fn irecv_coll_raw(
        &self,
        src: Rank,
        tag: i32,
        ptr: *mut u8,
        cap: usize,
    ) -> Result<ReqId, Error> {
        if !envelope::is_coll_tag(tag) {
            return Err(Error::InvalidTag(tag.into()));
        }
        let buf = RecvBuf::Ptr {
            ptr: state::Mem(ptr),
            cap,
        };
        // SAFETY: forwarded contract.
        self.shared
            .with(|s| unsafe { s.irecv(Some(src), Sel::Is(tag), buf, Keep::None, 0) })
    }

    // ---- waiting ----------------------------------------------------------------------

    /// Drives the state until `f` says so: spins (yielding when processes outnumber cores)
    /// for the wait policy's budget, then sleeps in the transport. Each round takes the
    /// state afresh, so other user threads get their turn.
    fn wait_until<R>(&self, mut f: impl FnMut(&mut State) -> Option<R>) -> R {
        // No clock is read on the way to an answer: a wait for something already done, or
        // done by the round's progress, costs no clock reads (each is ~40 ns in a VM, on
        // the critical path of a message). Idle rounds take ~100 ns; pacing the spin needs
        // the clock far less often than that: it is read when idling starts and every few
        // rounds after.
        let mut idle_since: Option<Instant> = None;
        let mut rounds = 0u32;
        let mut now: Option<Instant> = None;
        loop {
            let idle = {
                let mut s = self.shared.lock();
                if let Some(r) = f(&mut s) {
                    return r;
                }
                let moved = s.pump();
                if let Some(r) = f(&mut s) {
                    return r;
                }
                rounds = rounds.wrapping_add(1);
                if moved {
                    idle_since = None;
                    Idle::No
                } else {
                    let t = match (now, idle_since) {
                        (Some(t), Some(_)) if !rounds.is_multiple_of(CLOCK_EVERY) => t,
                        _ => Instant::now(),
                    };
                    now = Some(t);
                    let idle = t - *idle_since.get_or_insert(t);
                    if idle >= self.policy.spin && !s.has_unsent() {
                        s.block(MAX_BLOCK);
                        // Idle again from the next reading.
                        idle_since = None;
                        Idle::No
                    } else if self.policy.yields(idle) {
                        Idle::Yield
                    } else {
                        Idle::Spin
                    }
                }
            };
            // Another user thread waits for the state: let it in before the next round.
            if self.shared.contended() || idle == Idle::Yield {
                std::thread::yield_now();
            } else if idle == Idle::Spin {
                std::hint::spin_loop();
            }
        }
    }

    /// Waits for `id` to complete and collects it.
    fn wait_id(&self, id: ReqId) -> (Result<Status, Error>, Keep) {
        self.wait_until(|s| s.take(id))
    }

    // ---- raw entry points (C) ---------------------------------------------------------

    /// Starts sending `len` bytes at `ptr` to `dest` with `tag`.
    ///
    /// # Safety
    /// `ptr` must be valid for reads of `len` bytes and the bytes must not be modified
    /// until the request has completed ([`Comm::wait_raw`] or [`Comm::test_raw`] said so).
    pub unsafe fn isend_raw(
        &self,
        dest: Rank,
        tag: i32,
        ptr: *const u8,
        len: usize,
    ) -> Result<ReqId, Error> {
        let tag = user_tag(tag)?;
        // SAFETY: forwarded contract.
        self.shared
            .with(|s| unsafe { s.isend(dest, tag, ptr, len, Keep::None, 0) })
    }

    /// Posts a receive of at most `cap` bytes into `ptr`.
    ///
    /// # Safety
    /// `ptr` must be valid for writes of `cap` bytes, not read or written by anyone else
    /// until the request has completed (or been freed before it matched anything).
    pub unsafe fn irecv_raw(
        &self,
        src: Source,
        tag: Tag,
        ptr: *mut u8,
        cap: usize,
    ) -> Result<ReqId, Error> {
        let tag = tag_sel(tag)?;
        let buf = RecvBuf::Ptr {
            ptr: state::Mem(ptr),
            cap,
        };
        // SAFETY: forwarded contract.
        self.shared
            .with(|s| unsafe { s.irecv(src.get(), tag, buf, Keep::None, 0) })
    }

    /// [`Comm::isend_raw`] in synchronous mode: the send goes by rendezvous whatever its
    /// length, so it completes only once a receive on `dest` has matched it (MPI_Ssend).
    ///
    /// # Safety
    /// As for [`Comm::isend_raw`].
    pub unsafe fn issend_raw(
        &self,
        dest: Rank,
        tag: i32,
        ptr: *const u8,
        len: usize,
    ) -> Result<ReqId, Error> {
        let tag = user_tag(tag)?;
        // SAFETY: forwarded contract.
        self.shared
            .with(|s| unsafe { s.isend_mode(dest, tag, ptr, len, Keep::None, 0, true) })
    }

    /// Cancels a raw receive that nothing has matched yet: true if it was cancelled (it
    /// then completes with [`Error::Cancelled`], to be collected as usual); false if it had
    /// matched, completed, or is a send.
    pub fn cancel_raw(&self, id: ReqId) -> bool {
        self.shared.with(|s| s.cancel_posted(id))
    }

    /// The outcome of a raw request if it has completed, without collecting it (the
    /// handle stays valid); drives progress once.
    pub fn peek_raw(&self, id: ReqId) -> Option<Result<Status, Error>> {
        self.shared.with(|s| {
            if !s.is_done(id) {
                s.pump();
            }
            s.peek(id)
        })
    }

    /// Takes the earliest arrived message a receive for (`src`, `tag`) would match out of
    /// matching, if one has arrived: its status and a claim for
    /// [`Comm::irecv_claimed_raw`] (MPI_Improbe). No other receive can take it then.
    pub fn iclaim(
        &self,
        src: impl Into<Source>,
        tag: impl Into<Tag>,
    ) -> Result<Option<(Status, u64)>, Error> {
        let (src, tag) = (src.into().get(), tag_sel(tag.into())?);
        self.shared.with(|s| {
            s.pump();
            match s.claim(src, tag) {
                Some(x) => Ok(Some(x)),
                None => s.failure().cloned().map_or(Ok(None), Err),
            }
        })
    }

    /// Waits for a message a receive for (`src`, `tag`) would match and claims it
    /// (MPI_Mprobe); see [`Comm::iclaim`].
    pub fn claim(
        &self,
        src: impl Into<Source>,
        tag: impl Into<Tag>,
    ) -> Result<(Status, u64), Error> {
        let (src, tag) = (src.into().get(), tag_sel(tag.into())?);
        self.wait_until(|s| match s.claim(src, tag) {
            Some(x) => Some(Ok(x)),
            None => s.failure().cloned().map(Err),
        })
    }

    /// Posts the receive of a claimed message (MPI_Imrecv).
    ///
    /// # Safety
    /// As for [`Comm::irecv_raw`].
    pub unsafe fn irecv_claimed_raw(
        &self,
        claim: u64,
        ptr: *mut u8,
        cap: usize,
    ) -> Result<ReqId, Error> {
        let buf = RecvBuf::Ptr {
            ptr: state::Mem(ptr),
            cap,
        };
        // SAFETY: forwarded contract.
        self.shared
            .with(|s| unsafe { s.irecv_claimed(claim, buf, Keep::None, 0) })
    }

    /// Waits for a raw request; the handle is spent afterwards.
    pub fn wait_raw(&self, id: ReqId) -> Result<Status, Error> {
        self.wait_id(id).0
    }

    /// `Some` with the outcome if the raw request has completed (the handle is then spent).
    pub fn test_raw(&self, id: ReqId) -> Option<Result<Status, Error>> {
        self.shared.with(|s| {
            if let Some((r, _)) = s.take(id) {
                return Some(r);
            }
            s.pump();
            s.take(id).map(|(r, _)| r)
        })
    }

    /// Waits for the first of `ids` (`None` entries are inactive) to complete: its index
    /// and outcome; `None` if every entry is inactive.
    pub fn wait_any_raw(&self, ids: &[Option<ReqId>]) -> Option<(usize, Result<Status, Error>)> {
        self.any_ids(ids, true).map(|(i, r, _)| (i, r))
    }

    /// Like [`Comm::wait_any_raw`] without waiting: `Some((index, outcome))` if one has
    /// completed.
    pub fn test_any_raw(&self, ids: &[Option<ReqId>]) -> Option<(usize, Result<Status, Error>)> {
        self.any_ids(ids, false).map(|(i, r, _)| (i, r))
    }

    /// Waits for every active entry of `ids`; outcomes by index (`None` for inactive).
    pub fn wait_all_raw(&self, ids: &[Option<ReqId>]) -> Vec<Option<Result<Status, Error>>> {
        self.all_ids(ids)
            .into_iter()
            .map(|o| o.map(|x| x.0))
            .collect()
    }

    /// If every active entry of `ids` has completed, collects them all (outcomes by index,
    /// `None` for inactive entries); otherwise collects none.
    pub fn test_all_raw(
        &self,
        ids: &[Option<ReqId>],
    ) -> Option<Vec<Option<Result<Status, Error>>>> {
        self.shared.with(|s| {
            let all = |s: &State| ids.iter().flatten().all(|&id| s.is_done(id));
            if !all(s) {
                s.pump();
                if !all(s) {
                    return None;
                }
            }
            Some(
                ids.iter()
                    .map(|id| id.map(|id| s.take(id).map_or(Err(Error::InvalidRequest), |x| x.0)))
                    .collect(),
            )
        })
    }

    /// Gives up a raw request: a receive that has not matched is cancelled; anything else
    /// completes in the background (its buffer must stay valid until then).
    pub fn free_raw(&self, id: ReqId) {
        self.shared.with(|s| s.release(id));
    }

    fn any_ids(
        &self,
        ids: &[Option<ReqId>],
        block: bool,
    ) -> Option<(usize, Result<Status, Error>, Keep)> {
        if ids.iter().all(Option::is_none) {
            return None;
        }
        let pick = |s: &mut State| {
            ids.iter().enumerate().find_map(|(i, id)| {
                let id = (*id)?;
                s.take(id).map(|(r, k)| (i, r, k))
            })
        };
        if !block {
            return self.shared.with(|s| {
                if let Some(x) = pick(s) {
                    return Some(x);
                }
                s.pump();
                pick(s)
            });
        }
        Some(self.wait_until(pick))
    }

    fn all_ids(&self, ids: &[Option<ReqId>]) -> Vec<Option<(Result<Status, Error>, Keep)>> {
        let mut out: Vec<Option<(Result<Status, Error>, Keep)>> =
            ids.iter().map(|_| None).collect();
        // Every request before `next` is collected. Requests are taken in order, and the
        // check stops at the first one not done: the check runs on every spin, and
        // rescanning a window of 64 requests each time took 40 % of the cycles of a 1 MiB
        // stream over shared memory (cycles spent waiting: the rate did not change, but
        // a core shared with other processes gets them back).
        let mut next = 0;
        self.wait_until(|s| {
            while let Some(id) = ids.get(next) {
                match id {
                    None => {}
                    Some(id) => match s.take(*id) {
                        Some(x) => out[next] = Some(x),
                        None => return None,
                    },
                }
                next += 1;
            }
            Some(())
        });
        out
    }

    // ---- owned and blocking API -------------------------------------------------------

    /// Starts sending `data` (owned: no copy for rendezvous-size messages, which go
    /// straight from it).
    pub fn isend(
        &self,
        dest: Rank,
        tag: i32,
        data: impl Into<Bytes>,
    ) -> Result<Request<'_>, Error> {
        let data: Bytes = data.into();
        let (ptr, len) = (data.as_ptr(), data.len());
        let tag = user_tag(tag)?;
        // SAFETY: the request keeps `data` (immutable, heap or static) until it is
        // collected, which is after it completes.
        let id = self
            .shared
            .with(|s| unsafe { s.isend(dest, tag, ptr, len, Keep::Bytes(data), 0) })?;
        Ok(Request::new(self, id))
    }

    /// Posts a receive into `buf` (owned; all of its length is usable). The request hands
    /// it back, cut to the message's length, through [`Request::take_data`].
    pub fn irecv_into(
        &self,
        src: impl Into<Source>,
        tag: impl Into<Tag>,
        mut buf: Vec<u8>,
    ) -> Result<Request<'_>, Error> {
        let tag = tag_sel(tag.into())?;
        let rb = RecvBuf::Ptr {
            ptr: state::Mem(buf.as_mut_ptr()),
            cap: buf.len(),
        };
        // SAFETY: the request owns `buf` (moving a Vec does not move its heap buffer) until
        // it is collected after completing, and nothing else touches it meanwhile.
        let id = self
            .shared
            .with(|s| unsafe { s.irecv(src.into().get(), tag, rb, Keep::Vec(buf), 0) })?;
        Ok(Request::new(self, id))
    }

    /// Posts a receive of a message of up to `max_len` bytes into a vector of its exact
    /// length ([`Request::take_data`]); a rendezvous body from the transport is handed
    /// over without a copy.
    pub fn irecv_vec(
        &self,
        src: impl Into<Source>,
        tag: impl Into<Tag>,
        max_len: usize,
    ) -> Result<Request<'_>, Error> {
        let tag = tag_sel(tag.into())?;
        let rb = RecvBuf::Alloc { max: max_len };
        // SAFETY: an Alloc receive has no caller buffer.
        let id = self
            .shared
            .with(|s| unsafe { s.irecv(src.into().get(), tag, rb, Keep::None, 0) })?;
        Ok(Request::new(self, id))
    }

    /// Sends `data` to `dest`, returning when `data` may be reused.
    pub fn send(&self, dest: Rank, tag: i32, data: &[u8]) -> Result<(), Error> {
        // SAFETY: `data` is borrowed for this call, which returns only once the request
        // has completed.
        unsafe { self.send_raw(dest, tag, data.as_ptr(), data.len()) }.map(|_| ())
    }

    /// Receives a message into `buf`.
    pub fn recv(
        &self,
        src: impl Into<Source>,
        tag: impl Into<Tag>,
        buf: &mut [u8],
    ) -> Result<Status, Error> {
        // SAFETY: `buf` is borrowed mutably for this call, which returns only once the
        // request has completed.
        unsafe { self.recv_raw(src.into(), tag.into(), buf.as_mut_ptr(), buf.len()) }
    }

    /// Starts a request and waits for it, starting it in the first round of the wait so
    /// that a request done at once (an eager send, a message already here) costs one
    /// round of the state's lock.
    fn start_and_wait(
        &self,
        mut start: impl FnMut(&mut State) -> Result<ReqId, Error>,
    ) -> Result<Status, Error> {
        let mut id = None;
        self.wait_until(|s| {
            let rid = match id {
                Some(r) => r,
                None => match start(s) {
                    Ok(r) => *id.insert(r),
                    Err(e) => return Some(Err(e)),
                },
            };
            s.take(rid).map(|(r, _)| r)
        })
    }

    /// Sends `len` bytes at `ptr` to `dest`, returning when they may be reused.
    ///
    /// # Safety
    /// `ptr` must be valid for reads of `len` bytes during the call.
    pub unsafe fn send_raw(
        &self,
        dest: Rank,
        tag: i32,
        ptr: *const u8,
        len: usize,
    ) -> Result<Status, Error> {
        let tag = user_tag(tag)?;
        // SAFETY: forwarded contract; this call returns only once the request completed.
        self.start_and_wait(|s| unsafe { s.isend(dest, tag, ptr, len, Keep::None, 0) })
    }

    /// Receives a message of at most `cap` bytes into `ptr`.
    ///
    /// # Safety
    /// `ptr` must be valid for writes of `cap` bytes, untouched by others during the call.
    pub unsafe fn recv_raw(
        &self,
        src: Source,
        tag: Tag,
        ptr: *mut u8,
        cap: usize,
    ) -> Result<Status, Error> {
        let tag = tag_sel(tag)?;
        // SAFETY: forwarded contract; this call returns only once the request completed.
        self.start_and_wait(|s| unsafe {
            let buf = RecvBuf::Ptr {
                ptr: state::Mem(ptr),
                cap,
            };
            s.irecv(src.get(), tag, buf, Keep::None, 0)
        })
    }

    /// Receives a message of up to `max_len` bytes into a new vector.
    pub fn recv_vec(
        &self,
        src: impl Into<Source>,
        tag: impl Into<Tag>,
        max_len: usize,
    ) -> Result<(Vec<u8>, Status), Error> {
        let mut r = self.irecv_vec(src, tag, max_len)?;
        let st = r.wait()?;
        Ok((r.take_data().unwrap_or_default(), st))
    }

    /// The status of the earliest message that a receive for (`src`, `tag`) would match,
    /// if one has arrived; it is not received.
    pub fn iprobe(
        &self,
        src: impl Into<Source>,
        tag: impl Into<Tag>,
    ) -> Result<Option<Status>, Error> {
        let (src, tag) = (src.into().get(), tag_sel(tag.into())?);
        self.shared.with(|s| {
            s.pump();
            match s.iprobe(src, tag) {
                Some(st) => Ok(Some(st)),
                None => s.failure().cloned().map_or(Ok(None), Err),
            }
        })
    }

    /// Waits for a message that a receive for (`src`, `tag`) would match; its status.
    pub fn probe(&self, src: impl Into<Source>, tag: impl Into<Tag>) -> Result<Status, Error> {
        let (src, tag) = (src.into().get(), tag_sel(tag.into())?);
        self.wait_until(|s| match s.iprobe(src, tag) {
            Some(st) => Some(Ok(st)),
            None => s.failure().cloned().map(Err),
        })
    }

    /// Runs `f` with a [`Scope`] whose requests may borrow buffers; returns when every
    /// request of the scope has completed (receives nothing matched are cancelled), even
    /// if `f` leaks or drops its requests or panics.
    pub fn scope<'env, F, R>(&'env self, f: F) -> R
    where
        F: for<'scope> FnOnce(&'scope Scope<'scope, 'env>) -> R,
    {
        let id = self.shared.with(|s| s.open_scope());
        let scope = Scope {
            comm: self,
            id,
            _scope: PhantomData,
            _env: PhantomData,
        };
        let r = catch_unwind(AssertUnwindSafe(|| f(&scope)));
        self.shared.with(|s| s.cancel_scope_posted(id));
        // Never returns early without a timeout: the buffers must outlive their requests.
        self.wait_until(|s| (s.scope_live(id) == 0).then_some(()));
        self.shared.with(|s| s.close_scope(id));
        match r {
            Ok(r) => r,
            Err(p) => resume_unwind(p),
        }
    }

    /// Waits for every active request; the outcome of each, by index.
    pub fn wait_all_each(&self, reqs: &mut [Request<'_>]) -> Vec<Result<Status, Error>> {
        let ids: Vec<Option<ReqId>> = reqs.iter().map(|r| self.own(r)).collect();
        let outs = self.all_ids(&ids);
        reqs.iter_mut()
            .zip(outs)
            .map(|(r, o)| match o {
                Some(x) => r.finish(x),
                None => Err(Error::InvalidRequest),
            })
            .collect()
    }

    /// Waits for every active request: their statuses, or the first error (all requests
    /// have completed either way).
    pub fn wait_all(&self, reqs: &mut [Request<'_>]) -> Result<Vec<Status>, Error> {
        self.wait_all_each(reqs).into_iter().collect()
    }

    /// Waits for one of the active requests: its index and outcome; `None` if none is
    /// active.
    pub fn wait_any(&self, reqs: &mut [Request<'_>]) -> Option<(usize, Result<Status, Error>)> {
        let ids: Vec<Option<ReqId>> = reqs.iter().map(|r| self.own(r)).collect();
        let (i, r, k) = self.any_ids(&ids, true)?;
        Some((i, reqs[i].finish((r, k))))
    }

    /// Like [`Comm::wait_any`] without waiting.
    pub fn test_any(&self, reqs: &mut [Request<'_>]) -> Option<(usize, Result<Status, Error>)> {
        let ids: Vec<Option<ReqId>> = reqs.iter().map(|r| self.own(r)).collect();
        let (i, r, k) = self.any_ids(&ids, false)?;
        Some((i, reqs[i].finish((r, k))))
    }

    /// A request's id if it is active and belongs to this communicator.
    fn own(&self, r: &Request<'_>) -> Option<ReqId> {
        r.id.filter(|_| std::ptr::eq(r.comm, self))
    }

    // ---- the end ----------------------------------------------------------------------

    /// Ends this process's part: waits until everything it sent has been acknowledged,
    /// meets the other processes (they keep acknowledging meanwhile), closes the
    /// transport and tells the launcher. Collective. Dropping a `Comm` finalizes too.
    pub fn finalize(self) -> Result<(), Error> {
        self.finish()
    }

    fn finish(&self) -> Result<(), Error> {
        if self.finalized.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        // 1. Everything sent is acknowledged (or the job has failed).
        let mut res = self.flush();
        let ctl = self.ctl.lock().unwrap_or_else(|e| e.into_inner()).take();
        let Some(mut ctl) = ctl else {
            self.shared.with(|s| s.close());
            return res;
        };
        // 2. Meet everyone through the launcher, acknowledging peers still flushing: the
        //    exchange runs on a helper thread while this one drives the transport.
        if res.is_ok() && self.size > 1 {
            let done = Arc::new(AtomicBool::new(false));
            let d = done.clone();
            let waker = self.shared.with(|s| s.waker());
            let helper = std::thread::Builder::new()
                .name("bulkwire-finalize".into())
                .spawn(move || {
                    let r = ctl.allgather(&[]);
                    d.store(true, Ordering::SeqCst);
                    if let Some(w) = waker {
                        w();
                    }
                    (ctl, r)
                });
            match helper {
                Ok(h) => {
                    self.wait_until(|_| done.load(Ordering::SeqCst).then_some(()));
                    let (c, r) = h
                        .join()
                        .map_err(|_| Error::Init("the finalize helper panicked".into()))?;
                    ctl = c;
                    if let Err(e) = r {
                        res = Err(self.job_error().unwrap_or(Error::Init(e.to_string())));
                    }
                }
                Err(e) => return Err(Error::Init(e.to_string())),
            }
        }
        // 3. Close the transport, then leave the job.
        self.shared.with(|s| s.close());
        let fin = ctl.finish(if res.is_ok() { 0 } else { 1 });
        match (res, fin) {
            (Err(e), _) => Err(e),
            (Ok(()), Err(e)) => Err(self.job_error().unwrap_or(Error::Init(e.to_string()))),
            (Ok(()), Ok(())) => Ok(()),
        }
    }

    fn job_error(&self) -> Option<Error> {
        let f = self.job.as_ref()?.failure()?;
        Some(Error::JobFailed {
            rank: f.rank(),
            message: f.to_string(),
        })
    }

    /// Aborts the whole job with `msg` (the launcher prints it) and exits with status 1.
    pub fn abort(&self, msg: &str) -> ! {
        let ctl = self.ctl.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = ctl.as_ref() {
            c.abort(msg);
        }
        eprintln!("bulkwire: abort: {msg}");
        std::process::exit(1)
    }
}

impl Drop for Comm {
    fn drop(&mut self) {
        if std::thread::panicking() {
            // Don't meet the others: tell them this process failed.
            if !self.finalized.swap(true, Ordering::SeqCst)
                && let Some(c) = self.ctl.lock().unwrap_or_else(|e| e.into_inner()).as_ref()
            {
                let _ = c.notify_abort("panicked");
            }
            return;
        }
        let _ = self.finish();
    }
}

/// Requests that may borrow buffers for `'scope` (see [`Comm::scope`]).
pub struct Scope<'scope, 'env: 'scope> {
    comm: &'env Comm,
    id: u32,
    _scope: PhantomData<&'scope mut &'scope ()>,
    _env: PhantomData<&'env mut &'env ()>,
}

impl<'scope, 'env> Scope<'scope, 'env> {
    pub fn comm(&self) -> &'env Comm {
        self.comm
    }

    /// Starts sending `data`; rendezvous-size messages go straight from it.
    pub fn isend(
        &'scope self,
        dest: Rank,
        tag: i32,
        data: &'scope [u8],
    ) -> Result<Request<'scope>, Error> {
        let tag = user_tag(tag)?;
        let (ptr, len, sc) = (data.as_ptr(), data.len(), self.id);
        // SAFETY: `data` is borrowed for 'scope, and the scope ends only after every one
        // of its requests has completed.
        let id = self
            .comm
            .shared
            .with(|s| unsafe { s.isend(dest, tag, ptr, len, Keep::None, sc) })?;
        Ok(Request::new(self.comm, id))
    }

    /// Posts a receive into `buf`.
    pub fn irecv(
        &'scope self,
        src: impl Into<Source>,
        tag: impl Into<Tag>,
        buf: &'scope mut [u8],
    ) -> Result<Request<'scope>, Error> {
        let tag = tag_sel(tag.into())?;
        let rb = RecvBuf::Ptr {
            ptr: state::Mem(buf.as_mut_ptr()),
            cap: buf.len(),
        };
        let sc = self.id;
        // SAFETY: `buf` is borrowed mutably for 'scope, and the scope ends only after every
        // one of its requests has completed or (unmatched) been cancelled.
        let id = self
            .comm
            .shared
            .with(|s| unsafe { s.irecv(src.into().get(), tag, rb, Keep::None, sc) })?;
        Ok(Request::new(self.comm, id))
    }
}

/// A send or receive in progress. Wait for it ([`Request::wait`], [`Comm::wait_all`]...);
/// dropping it cancels a receive that has not matched yet and lets anything else finish
/// in the background.
#[must_use = "a request does its work in the background; wait for it to learn its outcome"]
pub struct Request<'a> {
    comm: &'a Comm,
    id: Option<ReqId>,
    data: Option<Vec<u8>>,
    _buf: PhantomData<&'a mut [u8]>,
}

impl<'a> Request<'a> {
    fn new(comm: &'a Comm, id: ReqId) -> Request<'a> {
        Request {
            comm,
            id: Some(id),
            data: None,
            _buf: PhantomData,
        }
    }

    fn finish(&mut self, (res, keep): (Result<Status, Error>, Keep)) -> Result<Status, Error> {
        self.id = None;
        if let Keep::Vec(mut v) = keep {
            if let Ok(st) = &res {
                v.truncate(st.len);
            }
            self.data = Some(v);
        }
        res
    }

    /// Whether it has not completed (or not been collected) yet.
    pub fn is_active(&self) -> bool {
        self.id.is_some()
    }

    /// Waits for it to complete; `InvalidRequest` if it already has been waited for.
    pub fn wait(&mut self) -> Result<Status, Error> {
        let Some(id) = self.id else {
            return Err(Error::InvalidRequest);
        };
        let x = self.comm.wait_id(id);
        self.finish(x)
    }

    /// Its outcome if it has completed.
    pub fn test(&mut self) -> Option<Result<Status, Error>> {
        let id = self.id?;
        let x = self.comm.shared.with(|s| {
            if let Some(x) = s.take(id) {
                return Some(x);
            }
            s.pump();
            s.take(id)
        })?;
        Some(self.finish(x))
    }

    /// The received data of an owned receive ([`Comm::irecv_into`], [`Comm::irecv_vec`])
    /// once it has completed.
    pub fn take_data(&mut self) -> Option<Vec<u8>> {
        self.data.take()
    }
}

impl Drop for Request<'_> {
    fn drop(&mut self) {
        if let Some(id) = self.id.take() {
            self.comm.shared.with(|s| s.release(id));
        }
    }
}
