//! bulkwire's MPI: the C interface of MPI-3.1 (`mpi.h`) as a layer over bulkwire's
//! point-to-point messaging (`bulkwire-p2p`) and collectives (`bulkwire-collectives`),
//! linked into `libbulkwire` beside BSPlib and `bulkwire.h` (the ParaStation2 paper's point:
//! a fast protocol under the interfaces programs already use). `docs/mpi.md` says what is
//! covered and how each part maps onto the layers below.
//!
//! Handle types and constant values follow the MPI 5.0 standard ABI (`mpi_abi.h`).

pub mod coll;
pub mod datatype;
pub mod error;
pub mod handle;
pub mod net;
pub mod op;
pub mod rma;
