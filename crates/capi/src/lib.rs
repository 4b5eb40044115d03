//! `libbulkwire`: bulkwire's C ABI, built as a static and a shared library. One module
//! per part of the C headers:
//!
//! - [`bsp`]: BSPlib (`include/bsp.h`), the `int` dialect of the Oxford BSP toolset and
//!   BSPonMPI, and the helpers both dialects share;
//! - [`mcbsp`]: MulticoreBSP for C's dialect (`include/mcbsp.h`, or `bsp.h` with
//!   `bspcc --mcbsp`): `size_t` sizes, `unsigned` pids, `bsp_direct_get`, and its
//!   affinity, profiling and checkpointing calls;
//! - [`p2p`]: point-to-point messaging (`include/bulkwire.h`);
//! - [`coll`]: collectives (`include/bulkwire.h`), on the communicator of [`p2p`];
//! - [`settings`]: the environment, read once per process for all of them;
//! - [`mpi`]: MPI (`crates/mpi/include/mpi.h`), the `bulkwire-mpi` crate, whose `MPI_*`
//!   functions the libraries carry.

pub mod bsp;
pub mod coll;
pub mod mcbsp;
pub mod p2p;
pub mod settings;
pub use bulkwire_mpi as mpi;
mod spmd;
