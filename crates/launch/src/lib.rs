//! Process launching and rendezvous: how the P processes of a job start, find each other,
//! and learn promptly that one of them failed.
//!
//! - **Identity**: [`job_env`] reads rank, size, cookie, job id and the rendezvous address
//!   from `BULKWIRE_*` (or Slurm's / Open MPI's rank and size, see [`JobEnv::from_lookup`]).
//! - **Rendezvous**: [`Control::join`] connects to the job's rendezvous server (TCP) and is
//!   admitted; [`Control::allgather`] exchanges opaque blobs, first the business cards
//!   ([`Card`]: data addresses, [`host_id`], pid), later anything (shared-memory names).
//! - **Failure notices**: the control connection stays open for the whole job. An abort, a
//!   process that dies or exits before finishing, or the launcher's disappearance reaches
//!   every process within a millisecond or so, recorded in the [`JobState`] that wait loops
//!   poll with one atomic load ([`JobState::is_failed`]) or wake on ([`JobState::wake_fd`]).
//! - **Launching**: [`launch`] starts n processes of a program on this host (`bsprun`);
//!   [`self_spawn`] makes `./program` start its own job (`bsp_begin`). Both give each
//!   process an equal share of the cores ([`bind`]).
//!
//! A BSP-style begin:
//!
//! ```no_run
//! use bulkwire_launch::{Card, self_spawn};
//! # fn main() -> Result<(), bulkwire_launch::LaunchError> {
//! let mut ctl = self_spawn(4)?; // joins bsprun's job, or starts 4 copies of ./program
//! let sock = std::net::UdpSocket::bind((ctl.local_ip(), 0))?;
//! let card = Card::local(ctl.rank(), vec![sock.local_addr()?]);
//! let cards: Vec<Card> = ctl.allgather(&card.to_bytes())?.iter()
//!     .map(|b| Card::from_bytes(b).expect("a bulkwire card")).collect();
//! let state = ctl.state(); // the engine polls state.is_failed() while it waits
//! // ... supersteps over `sock` to cards[p].addrs, cookie ctl.cookie() ...
//! ctl.finish(0)?; // bsp_end: rank 0 of a self-spawned job waits for the others here
//! # Ok(()) }
//! ```
//!
//! Environment: `BULKWIRE_RANK`, `BULKWIRE_NPROCS`, `BULKWIRE_RENDEZVOUS` (host:port),
//! `BULKWIRE_COOKIE` (u32), `BULKWIRE_JOB` (id), `BULKWIRE_HOST_ID` (overrides
//! [`host_id`]), `BULKWIRE_BIND` (`share`, `none`), `BULKWIRE_HOST_CPUS` (set for bound
//! processes); Slurm's `SLURM_PROCID`, `SLURM_NTASKS`, `SLURM_JOB_ID`, `SLURM_STEP_ID`;
//! Open MPI's `OMPI_COMM_WORLD_RANK`, `OMPI_COMM_WORLD_SIZE`, `OMPI_MCA_ess_base_jobid`.

pub mod bind;
mod control;
mod env;
mod host;
mod launch;
mod server;
mod state;
mod sys;
pub mod testing;
mod wire;

pub use bind::{Placement, host_cpus};
pub use control::{CONNECT_TIMEOUT, Control};
pub use env::{
    ENV_COOKIE, ENV_HOST_ID, ENV_JOB, ENV_NPROCS, ENV_RANK, ENV_RENDEZVOUS, ENV_SPMD_ENTRY, JobEnv,
    Launcher, available_processors, cookie_from_job, job_env, job_id_from_name,
};
pub use host::{Card, host_id, hostname};
pub use launch::{LaunchOpts, launch, self_spawn, spawn_job};
pub use server::{JobOutcome, RankOutcome, Server, ServerConfig};
pub use state::{Failure, JobState, failed_state};
pub use sys::{ExitKind, signal_name};
pub use wire::MAX_BLOB;

/// What can go wrong in launching, joining or running a job.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    /// The job environment is incomplete or inconsistent.
    #[error("bad job environment: {0}")]
    Env(String),
    #[error("cannot reach the rendezvous server at {addr}: {source}")]
    Connect {
        addr: std::net::SocketAddr,
        source: std::io::Error,
    },
    /// The server refused this process (cookie, rank or size mismatch...).
    #[error("{0}")]
    Rejected(String),
    /// The job failed (another process aborted or died, a timeout...).
    #[error("the job failed: {0}")]
    JobFailed(Failure),
    /// The connection to the rendezvous server broke.
    #[error("lost the launcher: {0}")]
    LauncherLost(String),
    #[error("control protocol error: {0}")]
    Protocol(String),
    #[error("exchange blob of {len} bytes exceeds the limit of {max}")]
    TooLarge { len: usize, max: usize },
    #[error("cannot start rank {rank} ({program}): {source}")]
    Spawn {
        rank: u32,
        program: String,
        source: std::io::Error,
    },
    #[error("{0}")]
    Usage(String),
    #[error(transparent)]
    Io(#[from] std::io::Error),
}
