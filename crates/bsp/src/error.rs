//! What can go wrong, sorted by who should hear about it.

/// An error of the BSP layer.
#[derive(Debug, thiserror::Error)]
pub enum BspError {
    /// The program broke a rule of BSPlib. The message names the call and the values.
    #[error("{0}")]
    Misuse(String),
    /// The job failed elsewhere (another process aborted or died, or the launcher went
    /// away). The launcher has reported the cause; this process should stop quietly with
    /// `exit_code`.
    #[error("{message}")]
    JobFailed { message: String, exit_code: i32 },
    /// The transport failed (I/O, a peer declared dead after a long silence...).
    #[error("{0}")]
    Transport(bulkwire_engine::Error),
    /// Another process sent something this layer cannot understand.
    #[error("{0}")]
    Protocol(String),
    /// Starting or joining the job failed.
    #[error("{0}")]
    Launch(#[from] bulkwire_launch::LaunchError),
    /// A `BULKWIRE_BSP_*` or other setting is wrong.
    #[error("{0}")]
    Config(String),
}

impl From<bulkwire_engine::Error> for BspError {
    fn from(e: bulkwire_engine::Error) -> BspError {
        match e {
            bulkwire_engine::Error::JobFailed(message) => BspError::JobFailed {
                message,
                exit_code: 1,
            },
            e => BspError::Transport(e),
        }
    }
}

/// Shorthand for a misuse error.
pub(crate) fn misuse<T>(msg: impl Into<String>) -> Result<T, BspError> {
    Err(BspError::Misuse(msg.into()))
}
