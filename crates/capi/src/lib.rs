//! `libbulkwire`: bulkwire's C ABI, built as a static and a shared library. One module
//! per part of the C headers:
//!
//! - [`bsp`]: BSPlib (`include/bsp.h`), the `int` dialect of the Oxford BSP toolset and
//!   BSPonMPI;
//! - [`p2p`]: point-to-point messaging (`include/bulkwire.h`);
//! - [`coll`]: collectives (`include/bulkwire.h`), on the communicator of [`p2p`];
//! - [`settings`]: the environment, read once per process for all of them.

pub mod bsp;
pub mod coll;
pub mod p2p;
pub mod settings;
