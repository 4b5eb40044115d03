//! The engine: drives a protocol over a link for all the peers of one process.
//!
//! [`Endpoint`] is the deterministic core: [`Endpoint::step`] receives what the link has,
//! feeds the protocol, runs its timers and liveness checks, and transmits, all at a time
//! given by the caller (the monotonic clock in a process, virtual time in simulation).
//! [`Engine`] adds the real clock and the wait policy: spin on non-blocking receives, then
//! block after a budget, yielding the CPU when processes outnumber cores. [`TcpTransport`]
//! is the kernel-TCP baseline behind the same [`Transport`] trait.

pub mod endpoint;
pub mod engine;
pub mod job;
pub mod progress;
pub mod sim;
pub mod simproc;
pub mod tcp;
pub mod transport;
pub mod vm;

pub use bulkwire_protocol::Coloured;
pub use endpoint::{Endpoint, EndpointConfig, Event};
pub use engine::{DEFAULT_SPIN, Engine, WaitPolicy, YIELD_AFTER};
pub use tcp::{TcpConfig, TcpTransport};
pub use transport::{Transport, WaitHandle, Waker};

use bulkwire_link::Rank;

/// Errors the engine reports to the layers above.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(
        "rank {peer} is dead: nothing heard from it for {:.1} s while waiting on it",
        *silent_for as f64 / 1e9
    )]
    PeerDead { peer: Rank, silent_for: u64 },
    #[error(transparent)]
    Protocol(#[from] bulkwire_protocol::ProtoError),
    #[error("link error: {0}")]
    Io(#[from] std::io::Error),
    #[error("timed out after {0:?}")]
    Timeout(std::time::Duration),
    /// Another process of the job failed (aborted, died, or the launcher is gone).
    #[error("{0}")]
    JobFailed(String),
    #[error("bad configuration: {0}")]
    Config(String),
}
