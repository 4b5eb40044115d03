//! `bwmpicc`: compile and link MPI programs (`mpi.h`) against bulkwire with the C
//! compiler, like Open MPI's and MPICH's `mpicc` (`make install` also installs it under
//! that name, in `PREFIX/lib/bulkwire/mpi/bin`).
//!
//! ```text
//! bwmpicc -O2 prog.c -o prog          compile and link
//! bwmpicc -show                       the compiler and every flag it adds
//! bwmpicc -showme:compile             the flags for compiling (CMake's FindMPI asks)
//! bwmpicc -showme:link                the flags for linking
//! ./configure CC=bwmpicc              an autoconf package's programs
//! ```
//!
//! How the compiler is chosen (`$BWMPICC_CC`, `$CC`, `cc`, ...), and where the header and
//! the library come from: see `compile.rs`.

use bulkwire_tools::compile;

fn main() -> std::process::ExitCode {
    compile::main_mpi(compile::Lang::C)
}
