//! `bspcxx`: `bspcc` for C++ programs (BSPonMPI's name), with the C++ compiler
//! (`$BSPCXX_CXX`, `$CXX`, `c++`, `g++`, `clang++`). Both `bsp.h` (either dialect) and
//! `bulkwire.h` are usable from C++.
//!
//! ```text
//! bspcxx -O2 prog.cpp -o prog
//! bspcxx --mcbsp prog.cpp -o prog     MulticoreBSP for C's dialect of bsp.h
//! ```

use bulkwire_tools::compile;

fn main() -> std::process::ExitCode {
    compile::main(compile::Lang::Cxx)
}
