//! `libbulkwire`: bulkwire's C ABI, built as a static and a shared library. One module
//! per C header:
//!
//! - [`bsp`]: BSPlib (`include/bsp.h`), the `int` dialect of the Oxford BSP toolset and
//!   BSPonMPI.

pub mod bsp;
