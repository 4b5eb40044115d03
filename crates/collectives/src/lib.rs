//! Collective operations for bulkwire: barrier, broadcast, scatter, gather, allgather,
//! alltoall, alltoallv, reduce and allreduce over a [`bulkwire_p2p::Comm`], with the
//! "network cache" of the network-cache paper on one host.
//!
//! - **Point-to-point algorithms**, chosen by message size and process count as MPICH and
//!   Open MPI do: binomial trees for small broadcast, scatter, gather and reduce;
//!   recursive doubling for small allgather and allreduce (with the fold for p not a
//!   power of two) and a dissemination barrier; rings for large allgather, broadcast
//!   (scatter + allgather) and reductions (reduce-scatter + allgather / gather);
//!   alltoall by posting everything in latin-square order (small) or by pairwise exchange
//!   (large). [`Thresholds`] has the switch points; `docs/collectives.md` the reasoning.
//! - **Network cache** ([`shm`]): when every process runs on this host, every collective
//!   goes through a shared segment partitioned among the processes: each process writes
//!   its data once into its own part, readers copy straight out of it, and a completion
//!   step frees the part for reuse (reductions read the parts and reduce in rank order).
//!   [`Config::mode`] chooses (default [`Mode::Auto`]).
//! - **Messages never meet the user's**: collectives use a reserved tag range that
//!   wildcard receives never match and user calls cannot name.
//! - **Failures**: a collective that fails on one process fails the job (MPI's default
//!   error handler does the same), so every process's collective ends with an error
//!   naming the cause instead of waiting forever; the communicator's collectives are then
//!   unusable ([`Error::Broken`]).
//!
//! ```no_run
//! use bulkwire_collectives::{Coll, Config, Op};
//! use bulkwire_p2p::Comm;
//! # fn main() -> Result<(), bulkwire_collectives::Error> {
//! # let launch = bulkwire_launch::LaunchConfig::default();
//! // The settings usually come from `bulkwire_config::Settings::from_env()`.
//! let comm = Comm::init(&launch, bulkwire_p2p::Config::default())?;
//! let coll = Coll::new(&comm, Config::default())?; // collective: every process calls it
//! let mut v = vec![comm.rank() as f64; 1000];
//! coll.allreduce_in_place(&mut v, &Op::Sum)?;
//! let mut block = vec![0u8; 64];
//! coll.broadcast(&mut block, 0)?;
//! # Ok(())
//! # }
//! ```

mod algo;
pub mod net;
pub mod op;
pub mod shm;

use std::sync::Mutex;
use std::time::Duration;

use bulkwire_p2p::Comm;

use net::Net;
pub use op::{Builtin, Datatype, Elem, Op, UserOp, as_bytes, as_bytes_mut};
use shm::Shm;

/// Errors of collective calls.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// From the point-to-point layer (a dead peer, the job's failure naming the rank...).
    #[error(transparent)]
    P2p(#[from] bulkwire_p2p::Error),
    /// Buffers or counts that do not fit the call (checked before any communication), or
    /// sizes that differ between processes (found while communicating).
    #[error("invalid argument: {0}")]
    Arg(String),
    #[error("root {root} is not a rank of this communicator of {size} processes")]
    Root { root: i64, size: u32 },
    /// A peer the network cache waits for stopped or vanished.
    #[error("rank {rank}: {why}")]
    Peer { rank: u32, why: String },
    /// The shared segment could not be made or used.
    #[error("network cache: {0}")]
    Shm(String),
    /// The job's multicast group failed (not a dead peer: that is [`Error::P2p`]).
    #[error("multicast: {0}")]
    Mcast(String),
    #[error("bad configuration: {0}")]
    Config(String),
    /// An earlier collective failed on this process; the processes no longer agree on
    /// where they are, so no further collective can work.
    #[error("an earlier collective failed on this process ({0}); collectives are unusable")]
    Broken(String),
}

impl Error {
    /// The process this error is about, if it names one.
    pub fn peer(&self) -> Option<u32> {
        match self {
            Error::P2p(e) => e.peer(),
            Error::Peer { rank, .. } => Some(*rank),
            _ => None,
        }
    }
}

/// Whether the network cache carries the collectives it can.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// The network cache when every process runs on this host, point-to-point otherwise.
    Auto,
    /// The network cache; an error if some process runs on another host.
    NetCache,
    /// Point-to-point algorithms only.
    P2p,
}

/// Which algorithm family to use regardless of sizes (a test knob: it lets small data
/// exercise the large-message algorithms).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    Auto,
    Small,
    Large,
}

/// Switch points between small- and large-message point-to-point algorithms, in bytes.
/// Every process must use the same values (checked when a [`Coll`] is made).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Thresholds {
    /// Broadcast: binomial tree below (or with fewer than 3 processes), scatter + ring
    /// allgather from here. The tree sends the whole message log2 p times in sequence;
    /// the ring moves about 2 n bytes per process but takes p + log2 p steps.
    pub bcast_long: usize,
    /// Scatter and gather: binomial tree while the root's whole buffer (p blocks) is
    /// below; linear (the root talks to each process directly) from here. The tree
    /// forwards blocks up to log2 p times, which only pays while latency dominates.
    pub gather_long: usize,
    /// Allgather: recursive doubling while the result (p blocks) is below; ring from here.
    pub allgather_long: usize,
    /// Alltoall: every exchange posted at once while a block is below; pairwise exchange
    /// (one partner per step) from here.
    pub alltoall_long: usize,
    /// Reduce: binomial tree below; ring reduce-scatter + gather from here (commutative
    /// operations with at least p elements).
    pub reduce_long: usize,
    /// Allreduce: recursive doubling below; ring reduce-scatter + allgather from here
    /// (commutative operations with at least p elements).
    pub allreduce_long: usize,
    /// Reductions through the network cache: while p vectors together are below this,
    /// whoever needs the result reads all of them and reduces alone (one generation);
    /// from here each process reduces a slice and the slices are gathered (two
    /// generations, the reading and the arithmetic shared out).
    pub netcache_reduce_long: usize,
    /// Network cache: scatter, gather and alltoall blocks from this size (broadcast and
    /// allgather too when each buffer has a single reader, p = 2; reductions from slices
    /// of 4 times this) are read straight out of the writer's own buffer with
    /// `process_vm_readv`, one copy instead of two (into the cache and out of it), when
    /// every process can read every other's memory. `usize::MAX` (the default): never.
    /// The kernel pins every page it copies, so one `process_vm_readv` moves about a
    /// third of what the cache's two copies move, running on two cores at once.
    pub netcache_direct: usize,
}

impl Default for Thresholds {
    fn default() -> Thresholds {
        Thresholds {
            bcast_long: 128 << 10,
            gather_long: 256 << 10,
            allgather_long: 64 << 10,
            alltoall_long: 32 << 10,
            reduce_long: 64 << 10,
            allreduce_long: 64 << 10,
            netcache_reduce_long: 64 << 10,
            netcache_direct: usize::MAX,
        }
    }
}

/// How a [`Coll`] behaves (`bulkwire-config` builds one from the environment).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    pub mode: Mode,
    /// Bytes of each process's part of the network cache (two halves used alternately;
    /// larger messages go in chunks).
    pub part_bytes: usize,
    pub family: Family,
    pub thresholds: Thresholds,
    /// A network-cache peer stopped or gone this long fails the waits on it (the job's
    /// dead-peer deadline, 30 s by default, like p2p's silent-peer rule).
    pub dead_after: Duration,
    /// Broadcasts of at least this many bytes, and allgathers of blocks this large, go
    /// over the job's multicast group where it has one and there are three processes or
    /// more (`usize::MAX`: never).
    pub mcast_min: usize,
}

/// [`Config::mcast_min`] by default: 32 KiB, where a broadcast takes tens of datagrams
/// and the p - 1 copies of the point-to-point algorithms start to cost their wire time.
pub const DEFAULT_MCAST_MIN: usize = 32 << 10;

/// Default part size: 1 MiB per process (two 512 KiB halves): past a few hundred KiB
/// per chunk the per-generation synchronisation is a small fraction of the copy time.
pub const DEFAULT_PART: usize = 1 << 20;

impl Default for Config {
    fn default() -> Config {
        Config {
            mode: Mode::Auto,
            part_bytes: DEFAULT_PART,
            family: Family::Auto,
            thresholds: Thresholds::default(),
            dead_after: Duration::from_secs(30),
            mcast_min: DEFAULT_MCAST_MIN,
        }
    }
}

impl Config {
    /// What every process must agree on, as bytes.
    fn agreed(&self) -> Vec<u8> {
        let t = &self.thresholds;
        let mut v = vec![self.mode as u8, self.family as u8];
        for x in [
            self.part_bytes,
            t.bcast_long,
            t.gather_long,
            t.allgather_long,
            t.alltoall_long,
            t.reduce_long,
            t.allreduce_long,
            t.netcache_reduce_long,
            t.netcache_direct,
            self.mcast_min,
        ] {
            v.extend_from_slice(&(x as u64).to_le_bytes());
        }
        v
    }
}

/// Which algorithm a call uses (for tests and reports: [`Coll::last_algorithm`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Algorithm {
    /// One process, or nothing to move.
    Local,
    NetCache,
    /// The network cache carries only where the data is; readers copy it out of the
    /// writer's own buffer (`process_vm_readv`, [`Thresholds::netcache_direct`]).
    SingleCopy,
    Dissemination,
    Binomial,
    ScatterAllgather,
    Linear,
    RecursiveDoubling,
    Ring,
    Posted,
    Pairwise,
    /// Over the job's IP multicast group: one transmission per datagram for every
    /// receiver, repaired where lost (`bulkwire_protocol::mcast`).
    Multicast,
}

struct Inner {
    /// Collective calls made (each gets its own block of tags).
    seq: u32,
    shm: Option<Shm>,
    broken: Option<String>,
    last: Algorithm,
}

/// The collectives of a communicator. Made collectively by [`Coll::new`]; every process
/// must then call the same collectives in the same order with matching arguments (MPI's
/// rules). Calls from several threads are serialised.
pub struct Coll<'c> {
    comm: &'c Comm,
    me: u32,
    p: u32,
    cfg: Config,
    inner: Mutex<Inner>,
}

impl std::fmt::Debug for Coll<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Coll")
            .field("rank", &self.me)
            .field("size", &self.p)
            .field("cfg", &self.cfg)
            .finish()
    }
}

/// Marks the collectives broken if a panic (a user operation's) unwinds through a call.
struct PanicGuard<'a>(&'a mut Inner);

impl Drop for PanicGuard<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.broken = Some("a panic in a user operation".into());
        }
    }
}

fn check_root(root: u32, p: u32) -> Result<usize, Error> {
    if root < p {
        Ok(root as usize)
    } else {
        Err(Error::Root {
            root: root.into(),
            size: p,
        })
    }
}

fn describe(agreed: &[u8]) -> String {
    let mode = match agreed.first() {
        Some(0) => "auto",
        Some(1) => "netcache",
        Some(2) => "p2p",
        _ => "?",
    };
    let family = match agreed.get(1) {
        Some(0) => "auto",
        Some(1) => "small",
        Some(2) => "large",
        _ => "?",
    };
    let nums: Vec<u64> = agreed
        .get(2..)
        .unwrap_or(&[])
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
        .collect();
    format!(
        "BULKWIRE_COLL={mode}, BULKWIRE_COLL_ALG={family}, part {} bytes, thresholds {:?}",
        nums.first().copied().unwrap_or(0),
        nums.get(1..).unwrap_or(&[])
    )
}

impl<'c> Coll<'c> {
    /// The collectives of `comm` with `cfg`, which every process must pass alike (checked:
    /// a difference is an error on every process, naming the rank). Collective: every
    /// process calls it, before any other collective.
    pub fn new(comm: &'c Comm, cfg: Config) -> Result<Coll<'c>, Error> {
        let (me, p) = (comm.rank(), comm.size());
        let mut seq = 0u32;
        let mut pids = vec![std::process::id(); p as usize];
        if p > 1 {
            // Agree on the configuration, and learn the processes' ids (for the network
            // cache's liveness checks).
            let mut mine = cfg.agreed();
            let m = mine.len();
            mine.extend_from_slice(&std::process::id().to_le_bytes());
            let w = mine.len();
            let mut all = vec![0u8; w * p as usize];
            all[me as usize * w..(me as usize + 1) * w].copy_from_slice(&mine);
            seq += 1;
            algo::allgather_doubling(&Net::new(comm, seq), &mut all, w)?;
            for (j, blob) in all.chunks_exact(w).enumerate() {
                if blob[..m] != mine[..m] {
                    return Err(Error::Config(format!(
                        "rank {j} has {}, rank {me} has {}: every process must configure \
                         the collectives alike",
                        describe(&blob[..m]),
                        describe(&mine[..m])
                    )));
                }
                pids[j] = u32::from_le_bytes(blob[m..].try_into().unwrap_or([0; 4]));
            }
        }
        let all_local = comm.host_local().iter().all(|&l| l);
        let shm = match cfg.mode {
            _ if p == 1 => None,
            Mode::P2p => None,
            Mode::Auto if !all_local => None,
            Mode::NetCache if !all_local => {
                let far = comm.host_local().iter().position(|&l| !l).unwrap_or(0);
                return Err(Error::Config(format!(
                    "BULKWIRE_COLL=netcache needs every process on one host, and rank {far} \
                     runs on another host than rank {me}"
                )));
            }
            _ => {
                // The job's CPUs here, not this process's share of them.
                let over = p as usize > comm.host_cpus();
                let direct = cfg.thresholds.netcache_direct;
                match Shm::create(
                    comm,
                    &mut seq,
                    cfg.part_bytes,
                    pids,
                    cfg.dead_after,
                    over,
                    direct,
                ) {
                    Ok(s) => Some(s),
                    // Segment creation fails alike on every process (its second round
                    // shares every member's status), so all fall back together.
                    Err(Error::Shm(_)) if cfg.mode == Mode::Auto => None,
                    Err(e) => return Err(e),
                }
            }
        };
        Ok(Coll {
            comm,
            me,
            p,
            cfg,
            inner: Mutex::new(Inner {
                seq,
                shm,
                broken: None,
                last: Algorithm::Local,
            }),
        })
    }

    pub fn comm(&self) -> &'c Comm {
        self.comm
    }

    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// Whether the network cache carries the collectives.
    pub fn uses_netcache(&self) -> bool {
        self.lock().shm.is_some()
    }

    /// The algorithm of the last collective call.
    pub fn last_algorithm(&self) -> Algorithm {
        self.lock().last
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether a network-cache reduction of `len` bytes goes in one generation (every
    /// process reads all vectors) rather than as reduce-scatter + allgather.
    fn whole(&self, len: usize) -> bool {
        !self.large(
            self.cfg.thresholds.netcache_reduce_long,
            len * self.p as usize,
        )
    }

    /// Whether a broadcast of `n` bytes (or an allgather of `n`-byte blocks) goes over
    /// the job's multicast group: the same answer on every process, since the group is
    /// everyone's or no one's.
    fn multicast(&self, n: usize) -> bool {
        self.p >= 3 && n >= self.cfg.mcast_min && self.comm.has_mcast()
    }

    /// Broadcasts `buf` from `root` over the job's multicast group.
    fn mcast_bcast(&self, buf: &mut [u8], root: u32) -> Result<(), Error> {
        match self.comm.mcast_broadcast(root, buf) {
            Some(r) => Ok(r?),
            None => Err(Error::Mcast("the job has no multicast group".into())),
        }
    }

    fn large(&self, threshold: usize, n: usize) -> bool {
        match self.cfg.family {
            Family::Small => false,
            Family::Large => true,
            Family::Auto => n >= threshold,
        }
    }

    /// Runs one collective call: its own tags, the network cache if any; any failure
    /// leaves the collectives broken (the processes no longer agree on where they are).
    fn call(
        &self,
        f: impl FnOnce(&mut Option<Shm>, &Net) -> Result<Algorithm, Error>,
    ) -> Result<(), Error> {
        let mut g = self.lock();
        if let Some(b) = &g.broken {
            return Err(Error::Broken(b.clone()));
        }
        g.seq = g.seq.wrapping_add(1);
        let net = Net::new(self.comm, g.seq);
        let guard = PanicGuard(&mut g);
        let r = f(&mut guard.0.shm, &net);
        match r {
            Ok(a) => {
                guard.0.last = a;
                Ok(())
            }
            Err(e) => {
                guard.0.broken = Some(e.to_string());
                Err(e)
            }
        }
    }

    // ---- barrier and data movement ------------------------------------------------

    /// Returns once every process has entered the barrier.
    pub fn barrier(&self) -> Result<(), Error> {
        let (comm, p) = (self.comm, self.p);
        self.call(|shm, net| {
            if p == 1 {
                return Ok(Algorithm::Local);
            }
            if let Some(s) = shm {
                s.barrier(comm)?;
                return Ok(Algorithm::NetCache);
            }
            algo::barrier_dissemination(net)?;
            Ok(Algorithm::Dissemination)
        })
    }

    /// Broadcasts `buf` from `root` to every process (every process passes a buffer of
    /// the same length).
    pub fn broadcast<T: Elem>(&self, buf: &mut [T], root: u32) -> Result<(), Error> {
        let r = check_root(root, self.p)?;
        self.broadcast_bytes(as_bytes_mut(buf), r)
    }

    fn broadcast_bytes(&self, buf: &mut [u8], root: usize) -> Result<(), Error> {
        let (comm, p) = (self.comm, self.p);
        let large = p >= 3 && self.large(self.cfg.thresholds.bcast_long, buf.len());
        let mcast = self.multicast(buf.len());
        self.call(|shm, net| {
            if p == 1 || buf.is_empty() {
                return Ok(Algorithm::Local);
            }
            if mcast {
                self.mcast_bcast(buf, root as u32)?;
                return Ok(Algorithm::Multicast);
            }
            if let Some(s) = shm {
                s.bcast(comm, buf, root)?;
                return Ok(s.shared_algorithm(buf.len()));
            }
            if large {
                algo::bcast_scatter_allgather(net, buf, root as u32)?;
                Ok(Algorithm::ScatterAllgather)
            } else {
                algo::bcast_binomial(net, buf, root as u32)?;
                Ok(Algorithm::Binomial)
            }
        })
    }

    /// Scatters `send` (at the root: p blocks of `recv.len()` elements, in rank order)
    /// so that process j receives block j in `recv`. `send` is ignored elsewhere.
    pub fn scatter<T: Elem>(&self, send: &[T], recv: &mut [T], root: u32) -> Result<(), Error> {
        let r = check_root(root, self.p)?;
        if self.me == root && Some(send.len()) != recv.len().checked_mul(self.p as usize) {
            return Err(Error::Arg(format!(
                "scatter: the root's send buffer has {} elements, not {} x {} processes",
                send.len(),
                recv.len(),
                self.p
            )));
        }
        let (send, recv) = (as_bytes(send), as_bytes_mut(recv));
        let (comm, p) = (self.comm, self.p);
        let large = self.large(self.cfg.thresholds.gather_long, recv.len() * p as usize);
        self.call(|shm, net| {
            if recv.is_empty() {
                return Ok(Algorithm::Local);
            }
            if p == 1 {
                recv.copy_from_slice(send);
                return Ok(Algorithm::Local);
            }
            if let Some(s) = shm {
                s.scatter(comm, send, recv, r)?;
                return Ok(s.algorithm(recv.len()));
            }
            if large {
                algo::scatter_linear(net, send, recv, root)?;
                Ok(Algorithm::Linear)
            } else {
                algo::scatter_binomial(net, send, recv, root)?;
                Ok(Algorithm::Binomial)
            }
        })
    }

    /// Gathers every process's `send` into `recv` at the root (p blocks in rank order;
    /// `recv` is ignored elsewhere).
    pub fn gather<T: Elem>(&self, send: &[T], recv: &mut [T], root: u32) -> Result<(), Error> {
        let r = check_root(root, self.p)?;
        if self.me == root && Some(recv.len()) != send.len().checked_mul(self.p as usize) {
            return Err(Error::Arg(format!(
                "gather: the root's receive buffer has {} elements, not {} x {} processes",
                recv.len(),
                send.len(),
                self.p
            )));
        }
        let (send, recv) = (as_bytes(send), as_bytes_mut(recv));
        let (comm, p) = (self.comm, self.p);
        let large = self.large(self.cfg.thresholds.gather_long, send.len() * p as usize);
        self.call(|shm, net| {
            if send.is_empty() {
                return Ok(Algorithm::Local);
            }
            if p == 1 {
                recv.copy_from_slice(send);
                return Ok(Algorithm::Local);
            }
            if let Some(s) = shm {
                s.gather(comm, send, recv, r)?;
                return Ok(s.algorithm(send.len()));
            }
            if large {
                algo::gather_linear(net, send, recv, root)?;
                Ok(Algorithm::Linear)
            } else {
                algo::gather_binomial(net, send, recv, root)?;
                Ok(Algorithm::Binomial)
            }
        })
    }

    /// Gathers every process's `send` into every process's `recv` (p blocks, rank order).
    pub fn allgather<T: Elem>(&self, send: &[T], recv: &mut [T]) -> Result<(), Error> {
        if Some(recv.len()) != send.len().checked_mul(self.p as usize) {
            return Err(Error::Arg(format!(
                "allgather: the receive buffer has {} elements, not {} x {} processes",
                recv.len(),
                send.len(),
                self.p
            )));
        }
        let (send, recv) = (as_bytes(send), as_bytes_mut(recv));
        let (comm, p, me) = (self.comm, self.p, self.me as usize);
        let b = send.len();
        let large = self.large(self.cfg.thresholds.allgather_long, recv.len());
        let mcast = self.multicast(b);
        self.call(|shm, net| {
            if b == 0 {
                return Ok(Algorithm::Local);
            }
            if p == 1 {
                recv.copy_from_slice(send);
                return Ok(Algorithm::Local);
            }
            if let Some(s) = shm {
                s.allgather(comm, send, recv)?;
                return Ok(s.shared_algorithm(send.len()));
            }
            recv[me * b..(me + 1) * b].copy_from_slice(send);
            if mcast {
                // A rotating sender: each process broadcasts its block in turn.
                for (j, block) in recv.chunks_exact_mut(b).enumerate() {
                    self.mcast_bcast(block, j as u32)?;
                }
                return Ok(Algorithm::Multicast);
            }
            if large {
                let pc: Vec<_> = (0..p as usize).map(|j| j * b..(j + 1) * b).collect();
                algo::ring_allgather(net, 0, recv, &pc, me as u32, &|v| v, 0)?;
                Ok(Algorithm::Ring)
            } else {
                algo::allgather_doubling(net, recv, b)?;
                Ok(Algorithm::RecursiveDoubling)
            }
        })
    }

    /// Sends block j of `send` to process j, which receives it as block i (this process's
    /// rank) of its `recv`. Both buffers hold p equal blocks.
    pub fn alltoall<T: Elem>(&self, send: &[T], recv: &mut [T]) -> Result<(), Error> {
        let p = self.p as usize;
        if send.len() != recv.len() || !send.len().is_multiple_of(p) {
            return Err(Error::Arg(format!(
                "alltoall: buffers of {} and {} elements are not both p = {p} equal blocks",
                send.len(),
                recv.len()
            )));
        }
        let (send, recv) = (as_bytes(send), as_bytes_mut(recv));
        let comm = self.comm;
        let b = send.len() / p;
        let large = self.large(self.cfg.thresholds.alltoall_long, b);
        self.call(|shm, net| {
            if b == 0 {
                return Ok(Algorithm::Local);
            }
            if p == 1 {
                recv.copy_from_slice(send);
                return Ok(Algorithm::Local);
            }
            if let Some(s) = shm {
                s.alltoall(comm, send, recv, b)?;
                return Ok(s.algorithm(b));
            }
            let bl = algo::Blocks {
                send: send.chunks(b).collect(),
                recv: recv.chunks_mut(b).collect(),
            };
            if large {
                algo::alltoall_pairwise(net, bl)?;
                Ok(Algorithm::Pairwise)
            } else {
                algo::alltoall_posted(net, bl)?;
                Ok(Algorithm::Posted)
            }
        })
    }

    /// Alltoall with blocks of any length: `send_counts[j]` elements from
    /// `send[send_displs[j]..]` go to process j, and `recv_counts[i]` elements from
    /// process i land at `recv[recv_displs[i]..]`. Counts must match pairwise (what i
    /// sends to j is what j expects from i); receive blocks must not overlap.
    pub fn alltoallv<T: Elem>(
        &self,
        send: &[T],
        send_counts: &[usize],
        send_displs: &[usize],
        recv: &mut [T],
        recv_counts: &[usize],
        recv_displs: &[usize],
    ) -> Result<(), Error> {
        let p = self.p as usize;
        let z = std::mem::size_of::<T>();
        for (what, v) in [
            ("send counts", send_counts),
            ("send displacements", send_displs),
            ("receive counts", recv_counts),
            ("receive displacements", recv_displs),
        ] {
            if v.len() != p {
                return Err(Error::Arg(format!(
                    "alltoallv: {} {what} for {p} processes",
                    v.len()
                )));
            }
        }
        let range = |c: usize, d: usize, len: usize, what: &str, j: usize| {
            d.checked_add(c)
                .filter(|&e| e <= len)
                .map(|e| d * z..e * z)
                .ok_or_else(|| {
                    Error::Arg(format!(
                        "alltoallv: {what} block {j} ({c} elements at {d}) is outside the \
                         buffer of {len}"
                    ))
                })
        };
        let mut sr = Vec::with_capacity(p);
        let mut rr = Vec::with_capacity(p);
        for j in 0..p {
            sr.push(range(
                send_counts[j],
                send_displs[j],
                send.len(),
                "send",
                j,
            )?);
            rr.push(range(
                recv_counts[j],
                recv_displs[j],
                recv.len(),
                "receive",
                j,
            )?);
        }
        // The block a process sends itself is its own receive block: the counts must agree
        // here, where it shows, rather than in a copy deep in an algorithm.
        let me = self.comm.rank() as usize;
        if send_counts[me] != recv_counts[me] {
            return Err(Error::Arg(format!(
                "alltoallv on rank {me}: sends itself {} elements but expects {} from itself",
                send_counts[me], recv_counts[me]
            )));
        }
        let (send, recv) = (as_bytes(send), as_bytes_mut(recv));
        let sends: Vec<&[u8]> = sr.iter().map(|r| &send[r.clone()]).collect();
        let recvs = disjoint(recv, &rr)?;
        let comm = self.comm;
        let most = sends.iter().map(|s| s.len()).max().unwrap_or(0);
        let large = self.large(self.cfg.thresholds.alltoall_long, most);
        self.call(|shm, net| {
            let mut recvs = recvs;
            if p == 1 {
                recvs[0].copy_from_slice(sends[0]);
                return Ok(Algorithm::Local);
            }
            if let Some(s) = shm {
                s.alltoallv(comm, &sends, &mut recvs)?;
                return Ok(Algorithm::NetCache);
            }
            let bl = algo::Blocks {
                send: sends,
                recv: recvs,
            };
            if large {
                algo::alltoall_pairwise(net, bl)?;
                Ok(Algorithm::Pairwise)
            } else {
                algo::alltoall_posted(net, bl)?;
                Ok(Algorithm::Posted)
            }
        })
    }

    // ---- reductions -------------------------------------------------------------------

    /// Reduces every process's `send` elementwise with `op` into `recv` at the root
    /// (`recv` is ignored elsewhere), in rank order: `x0 op x1 op ... op x(p-1)`.
    pub fn reduce<T: Elem>(
        &self,
        send: &[T],
        recv: &mut [T],
        op: &Op,
        root: u32,
    ) -> Result<(), Error> {
        self.reduce_bytes(as_bytes(send), as_bytes_mut(recv), T::TYPE, op, root)
    }

    /// [`Coll::reduce`] with `buf` as the input everywhere and the result at the root.
    pub fn reduce_in_place<T: Elem>(&self, buf: &mut [T], op: &Op, root: u32) -> Result<(), Error> {
        let send = buf.to_vec();
        self.reduce(&send, buf, op, root)
    }

    /// [`Coll::reduce`] on byte buffers holding whole elements of `dt` (the C API's).
    pub fn reduce_bytes(
        &self,
        send: &[u8],
        recv: &mut [u8],
        dt: Datatype,
        op: &Op,
        root: u32,
    ) -> Result<(), Error> {
        check_root(root, self.p)?;
        op.check(dt)?;
        if !send.len().is_multiple_of(dt.size()) {
            return Err(Error::Arg(format!(
                "reduce: {} bytes are not whole {dt:?} elements",
                send.len()
            )));
        }
        if self.me == root && recv.len() != send.len() {
            return Err(Error::Arg(format!(
                "reduce: the root's receive buffer has {} bytes, the send buffer {}",
                recv.len(),
                send.len()
            )));
        }
        let (me, p) = (self.me, self.p);
        let count = send.len() / dt.size();
        let ring = op.is_commutative()
            && self.large(self.cfg.thresholds.reduce_long, send.len())
            && (count >= p as usize || self.cfg.family == Family::Large);
        let comm = self.comm;
        let whole = self.whole(send.len());
        self.call(|shm, net| {
            if send.is_empty() {
                return Ok(Algorithm::Local);
            }
            if p == 1 {
                recv.copy_from_slice(send);
                return Ok(Algorithm::Local);
            }
            if let Some(s) = shm {
                let w = whole && s.fits(send.len());
                if me == root {
                    recv.copy_from_slice(send);
                    s.reduce(comm, recv, dt, op, Some(root as usize), w)?;
                } else {
                    // Only read from: a copy stands in for the caller's immutable buffer.
                    let mut mine = send.to_vec();
                    s.reduce(comm, &mut mine, dt, op, Some(root as usize), w)?;
                }
                return Ok(s.reduce_algorithm(send.len()));
            }
            if ring {
                algo::reduce_ring(net, send, recv, root, dt, op)?;
                return Ok(Algorithm::Ring);
            }
            // Non-commutative: the tree's root must be rank 0 for relative order to be
            // rank order; the result then moves to the root.
            let top = if op.is_commutative() { root } else { 0 };
            let res = algo::reduce_binomial(net, send, top, dt, op)?;
            if top == root {
                if let Some(r) = res {
                    recv.copy_from_slice(&r);
                }
            } else if me == top {
                net.send(root, 1, &res.unwrap_or_default())?;
            } else if me == root {
                net.recv(top, 1, recv)?;
            }
            Ok(Algorithm::Binomial)
        })
    }

    /// Reduces every process's `send` elementwise with `op` into every process's `recv`.
    pub fn allreduce<T: Elem>(&self, send: &[T], recv: &mut [T], op: &Op) -> Result<(), Error> {
        if send.len() != recv.len() {
            return Err(Error::Arg(format!(
                "allreduce: send and receive buffers of {} and {} elements",
                send.len(),
                recv.len()
            )));
        }
        op.check(T::TYPE)?;
        recv.copy_from_slice(send);
        self.allreduce_in_place(recv, op)
    }

    /// [`Coll::allreduce`] with `buf` as input and result.
    pub fn allreduce_in_place<T: Elem>(&self, buf: &mut [T], op: &Op) -> Result<(), Error> {
        self.allreduce_bytes(as_bytes_mut(buf), T::TYPE, op)
    }

    /// [`Coll::allreduce_in_place`] on a byte buffer of whole `dt` elements (the C API's).
    pub fn allreduce_bytes(&self, buf: &mut [u8], dt: Datatype, op: &Op) -> Result<(), Error> {
        op.check(dt)?;
        if !buf.len().is_multiple_of(dt.size()) {
            return Err(Error::Arg(format!(
                "allreduce: {} bytes are not whole {dt:?} elements",
                buf.len()
            )));
        }
        let p = self.p;
        let count = buf.len() / dt.size();
        let ring = op.is_commutative()
            && self.large(self.cfg.thresholds.allreduce_long, buf.len())
            && (count >= p as usize || self.cfg.family == Family::Large);
        let comm = self.comm;
        let whole = self.whole(buf.len());
        self.call(|shm, net| {
            if p == 1 || buf.is_empty() {
                return Ok(Algorithm::Local);
            }
            if let Some(s) = shm {
                let w = whole && s.fits(buf.len());
                s.reduce(comm, buf, dt, op, None, w)?;
                return Ok(s.reduce_algorithm(buf.len()));
            }
            if ring {
                algo::allreduce_ring(net, buf, dt, op)?;
                Ok(Algorithm::Ring)
            } else {
                algo::allreduce_doubling(net, buf, dt, op)?;
                Ok(Algorithm::RecursiveDoubling)
            }
        })
    }
}

/// `buf` cut into the given ranges, which must not overlap, as mutable slices in the
/// ranges' order.
fn disjoint<'b>(
    buf: &'b mut [u8],
    ranges: &[std::ops::Range<usize>],
) -> Result<Vec<&'b mut [u8]>, Error> {
    let mut order: Vec<usize> = (0..ranges.len()).collect();
    order.sort_by_key(|&i| (ranges[i].start, ranges[i].end));
    let mut out: Vec<Option<&'b mut [u8]>> = (0..ranges.len()).map(|_| None).collect();
    let mut rest = buf;
    let mut at = 0;
    for &i in &order {
        let r = &ranges[i];
        if r.is_empty() {
            out[i] = Some(&mut []);
            continue;
        }
        if r.start < at {
            return Err(Error::Arg(format!(
                "alltoallv: receive block {i} ({r:?} in bytes) overlaps another"
            )));
        }
        let (_, tail) = std::mem::take(&mut rest).split_at_mut(r.start - at);
        let (now, later) = tail.split_at_mut(r.len());
        out[i] = Some(now);
        rest = later;
        at = r.end;
    }
    Ok(out.into_iter().map(|o| o.unwrap_or_default()).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn disjoint_ranges() {
        let mut b: Vec<u8> = (0..10).collect();
        let v = disjoint(&mut b, &[5..7, 0..2, 2..2, 7..10]).unwrap();
        assert_eq!(v[0], &[5, 6]);
        assert_eq!(v[1], &[0, 1]);
        assert!(v[2].is_empty());
        assert_eq!(v[3], &[7, 8, 9]);
        assert!(disjoint(&mut b, &[0..3, 2..4]).is_err());
    }

    #[test]
    fn agreed_configuration_is_described() {
        let d = describe(&Config::default().agreed());
        assert!(
            d.contains("BULKWIRE_COLL=auto") && d.contains("1048576"),
            "{d}"
        );
    }
}
