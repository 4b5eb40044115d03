//! Every MPI collective, blocking and non-blocking.
//!
//! A collective call becomes a schedule (`sched`): rounds of sends, receives and local
//! reductions over the communicator's collective channel (`crate::net::Net`), built by the
//! algorithms in `algo` from the call's arguments (`plan`). A blocking call runs its
//! schedule to completion; a non-blocking one hands it to the request table, whose
//! `MPI_Wait`/`MPI_Test` move it on.

pub mod algo;
pub mod plan;
pub mod sched;

#[cfg(test)]
mod tests;

use std::fmt::Display;
use std::os::raw::c_int;

/// Reports an error of a call without a communicator through `MPI_COMM_WORLD`'s handler.
///
/// TO BE REPLACED on merge with core: `crate::runtime::fail(MPI_COMM_WORLD, code, what)`.
/// Until then the error is returned (`MPI_ERRORS_RETURN`'s behaviour).
pub(crate) fn fail_world(code: c_int, what: impl Display) -> c_int {
    let _ = what.to_string();
    code
}
