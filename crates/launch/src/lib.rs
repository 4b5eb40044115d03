//! Process launching and rendezvous: how the P processes of a job start, find each other,
//! and learn promptly that one of them failed.
//!
//! - **Identity**: a [`JobEnv`] holds rank, size, the job's [`Secret`], job id and the rendezvous address
//!   that the launcher handed over (`bulkwire-config` reads them from `BULKWIRE_*`, or
//!   Slurm's / Open MPI's rank and size); a [`LaunchConfig`] adds how this process starts a
//!   job of its own.
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
//! use bulkwire_launch::{Card, LaunchConfig, self_spawn};
//! # fn main() -> Result<(), bulkwire_launch::LaunchError> {
//! # let launch = LaunchConfig::default(); // at the edge: bulkwire_config::Settings::from_env()
//! let mut ctl = self_spawn(4, &launch)?; // joins bsprun's job, or starts 4 copies of ./program
//! let sock = std::net::UdpSocket::bind((ctl.local_ip(), 0))?;
//! let card = ctl.card(vec![sock.local_addr()?]);
//! let cards: Vec<Card> = ctl.allgather(&card.to_bytes())?.iter()
//!     .map(|b| Card::from_bytes(b).expect("a bulkwire card")).collect();
//! let state = ctl.state(); // the engine polls state.is_failed() while it waits
//! // ... supersteps over `sock` to cards[p].addrs, cookie ctl.cookie() ...
//! ctl.finish(0)?; // bsp_end: rank 0 of a self-spawned job waits for the others here
//! # Ok(()) }
//! ```
//!
//!
//! The variables launchers set and read are listed in `docs/configuration.md`.

pub mod agent;
pub mod bind;
pub mod bootstrap;
mod control;
mod env;
pub mod files;
mod host;
pub mod hosts;
mod launch;
mod secret;
mod server;
mod state;
mod sys;
pub mod testing;
mod wire;

pub use bind::Placement;
pub use control::{CONNECT_TIMEOUT, Control};
pub use env::{
    ENV_HOST_ID, ENV_JOB, ENV_NPROCS, ENV_RANK, ENV_RENDEZVOUS, ENV_SECRET, ENV_SECRET_FILE,
    ENV_SPMD_ENTRY, JobEnv, LaunchConfig, Launcher, available_cpus, job_id_from_name,
};
pub use host::{Card, host_id, hostname};
pub use hosts::HostSlots;
pub use launch::{LaunchOpts, launch, self_spawn, spawn_job};
pub use secret::{Secret, read_key_file, write_key_file};
pub use server::{DEFAULT_JOIN_TIMEOUT, JobOutcome, RankOutcome, Server, ServerConfig, rank_list};
pub use state::{Failure, JobState, failed_state};
pub use sys::{ExitKind, signal_name};
pub use wire::MAX_BLOB;

/// What can go wrong in launching, joining or running a job.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    #[error("cannot reach the rendezvous server at {addr}: {}", sys::describe_io(.source))]
    Connect {
        addr: std::net::SocketAddr,
        source: std::io::Error,
    },
    /// The server refused this process (not admitted, rank or size mismatch...).
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
    #[error("cannot start rank {rank} ({program}): {}", sys::describe_io(.source))]
    Spawn {
        rank: u32,
        program: String,
        source: std::io::Error,
    },
    #[error("{0}")]
    Usage(String),
    /// Out of file descriptors is named as such (EMFILE, ENFILE).
    #[error("{}", sys::describe_io(.0))]
    Io(#[from] std::io::Error),
}
