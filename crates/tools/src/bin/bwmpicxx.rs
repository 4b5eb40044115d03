//! `bwmpicxx`: `bwmpicc` for C++ programs, with the C++ compiler (`$BWMPICXX_CXX`,
//! `$CXX`, `c++`, `g++`, `clang++`); installed also as `mpicxx` and `mpic++`.
//!
//! ```text
//! bwmpicxx -O2 prog.cpp -o prog
//! ```

use bulkwire_tools::compile;

fn main() -> std::process::ExitCode {
    compile::main_mpi(compile::Lang::Cxx)
}
