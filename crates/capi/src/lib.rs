//! `libbulkwire`: bulkwire's C ABI, built as a static and a shared library. One module
//! per C header:
//!
//! - [`bsp`]: BSPlib (`include/bsp.h`), the `int` dialect of the Oxford BSP toolset and
//!   BSPonMPI;
//! - [`p2p`]: point-to-point messaging (`include/bulkwire.h`).

pub mod bsp;
pub mod p2p;
