//! Settings of the BSP layer (`bulkwire-config` builds them from the environment).

use std::path::PathBuf;
use std::time::Duration;

use bulkwire_engine::job::JobConfig;

/// Order in which a process sends to its destinations in a superstep.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Schedule {
    /// Step t sends to `(pid + t) mod p`: at every step each destination has exactly
    /// one sender (a latin square), so no receiver is flooded by all at once.
    Latin,
    /// Everyone sends to 0, then 1, ... (the naive order, for comparison).
    Pid,
    /// Each process in its own random order, drawn afresh every superstep from its pid
    /// and the superstep (the BSPlib paper's other way of spreading the load).
    Random,
}

/// How the BSP layer runs.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// Destination order within a superstep; default latin.
    pub schedule: Schedule,
    /// Cap on the bytes per second this process hands to the transport in a superstep.
    /// None: no cap.
    pub rate: Option<u64>,
    /// Most bytes per transport message of a superstep's data for one destination.
    /// Default: one message per destination without a rate cap, 64 KiB with one, so the
    /// cap has something to pace (see [`Config::with_rate`]).
    pub chunk: Option<usize>,
    /// `bsp_end` prints packet statistics (the BSPlib paper's Table 5).
    pub stats: bool,
    /// Record the cost profile of every superstep; each process writes its records to
    /// this path with `.<pid>` appended at `bsp_end` (see [`crate::profile`]).
    pub profile: Option<PathBuf>,
    /// The progress thread's interval; `None`: no thread (progress only inside calls).
    pub progress: Option<Duration>,
    /// Synchronise through the sync board ([`crate::board`]) when every process shares
    /// this host over shared memory; default on.
    pub board: bool,
    /// A message of puts of at least this many bytes to a process of the same host,
    /// whose data goes over shared memory, is read by its destination straight out of
    /// the sender's memory (`process_vm_readv`) instead of through the transport; puts
    /// of `bsp_hpput` are then read from their source, one copy in all. `usize::MAX`:
    /// never.
    pub lend: usize,
    /// Where the job has a multicast group (`BULKWIRE_MCAST`, across hosts) and three
    /// processes or more, a superstep's message to every other process that is one and
    /// the same (a broadcast by `bsp_put` or `bsp_send`) of at least this many bytes goes
    /// out once, by multicast, instead of once per destination. `usize::MAX`: never.
    pub mcast_min: usize,
    /// How the job's transport is built (by `bsp_begin`; unused over a given transport).
    pub job: JobConfig,
}

/// Default of [`Config::lend`].
pub const DEFAULT_LEND: usize = 8 << 20;

/// Default of [`Config::mcast_min`]: the collectives' threshold for broadcasts.
pub const DEFAULT_MCAST_MIN: usize = 32 << 10;

/// The chunk a rate cap implies when none is set: small enough for pacing to act on.
pub const PACED_CHUNK: usize = 64 << 10;

impl Default for Config {
    fn default() -> Self {
        Config {
            schedule: Schedule::Latin,
            rate: None,
            chunk: None,
            stats: false,
            profile: None,
            progress: Some(bulkwire_engine::progress::DEFAULT_INTERVAL),
            board: true,
            lend: DEFAULT_LEND,
            mcast_min: DEFAULT_MCAST_MIN,
            job: JobConfig::default(),
        }
    }
}

impl Config {
    /// These settings paced at `rate` bytes per second, in chunks of [`PACED_CHUNK`] unless
    /// a chunk size is set.
    pub fn with_rate(mut self, rate: u64) -> Config {
        self.rate = Some(rate);
        self.chunk = self.chunk.or(Some(PACED_CHUNK));
        self
    }

    /// These settings with the cost profile written to `base.<pid>`.
    pub fn with_profile(mut self, base: impl Into<PathBuf>) -> Config {
        self.profile = Some(base.into());
        self
    }
}
