//! `bwmpifort`: compile and link Fortran MPI programs (`use mpi`, `include 'mpif.h'`)
//! against bulkwire with gfortran, like Open MPI's and MPICH's `mpifort` (`make install`
//! also installs it as `mpifort`, `mpif90` and `mpif77` in `PREFIX/lib/bulkwire/mpi/bin`).
//!
//! ```text
//! bwmpifort -O2 prog.f90 -o prog      compile and link
//! bwmpifort -show                     the compiler and every flag it adds
//! make FC=bwmpifort                   a package's Fortran programs (NPB: MPIFC = bwmpifort)
//! ```
//!
//! The `mpi` module is compiled for the compiler in use on first use, into a cache
//! directory (see `compile.rs`); the Fortran entry points (`mpi_send_`, ...) are in
//! `libbulkwire.a` with the C ones.

use bulkwire_tools::compile;

fn main() -> std::process::ExitCode {
    compile::main_mpi(compile::Lang::Fortran)
}
