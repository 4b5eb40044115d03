//! bulkwire's MPI: the C interface of MPI-3.1 (`mpi.h`) as a layer over bulkwire's
//! point-to-point messaging (`bulkwire-p2p`) and collectives (`bulkwire-collectives`),
//! linked into `libbulkwire` beside BSPlib and `bulkwire.h` (the ParaStation2 paper's point:
//! a fast protocol under the interfaces programs already use). `docs/mpi.md` says what is
//! covered and how each part maps onto the layers below.
//!
//! Handle types and constant values follow the MPI 5.0 standard ABI (`mpi_abi.h`).
//!
//! Every `MPI_*` function is `extern "C"`, with handles as [`handle::Raw`]; errors go
//! through the communicator's error handler ([`runtime::fail`]).

// The C names are the standard's.
#![allow(non_snake_case)]
#![allow(clippy::missing_safety_doc)]

pub mod coll;
pub mod comm;
pub mod datatype;
pub mod error;
pub mod group;
pub mod handle;
pub mod net;
pub mod op;
pub mod predef;
pub mod pt2pt;
pub mod request;
pub mod rma;
pub mod runtime;
pub mod topo;

/// The datatype module the layer uses.
pub(crate) use datatype as dt;
