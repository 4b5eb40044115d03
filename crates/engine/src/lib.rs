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
pub mod mcast;
pub mod progress;
pub mod sim;
pub mod simproc;
pub mod tcp;
pub mod transport;
pub mod vm;

pub use bulkwire_protocol::{Coloured, PeerDead};
pub use endpoint::{Endpoint, EndpointConfig, Event};
pub use engine::{DEFAULT_SPIN, Engine, WaitPolicy, YIELD_AFTER};
pub use tcp::{TcpConfig, TcpTransport};
pub use transport::{Transport, WaitHandle, Waker};

use bulkwire_protocol::ProtoError;

/// Errors the engine reports to the layers above.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The protocol's own error, carried as it is ([`From`] puts a protocol's
    /// [`ProtoError::PeerDead`] here too).
    #[error(transparent)]
    PeerDead(#[from] PeerDead),
    /// What a protocol refused, other than a dead peer.
    #[error(transparent)]
    Protocol(ProtoError),
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

impl From<ProtoError> for Error {
    /// A dead peer is one error in every layer: [`Error::PeerDead`].
    fn from(e: ProtoError) -> Error {
        match e {
            ProtoError::PeerDead(d) => Error::PeerDead(d),
            e => Error::Protocol(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dead_peer_is_one_error_that_keeps_its_silence() {
        let d = PeerDead {
            peer: 3,
            silent_for: 2_500_000_000,
        };
        let e = Error::from(ProtoError::PeerDead(d));
        assert!(matches!(e, Error::PeerDead(x) if x == d), "{e:?}");
        assert_eq!(
            e.to_string(),
            "rank 3 is dead: nothing heard from it for 2.5 s while waiting on it"
        );
        let other = Error::from(ProtoError::SelfSend { peer: 3 });
        assert!(matches!(
            other,
            Error::Protocol(ProtoError::SelfSend { peer: 3 })
        ));
    }
}
