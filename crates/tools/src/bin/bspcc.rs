//! `bspcc`: compile and link BSPlib programs (and `bulkwire.h` programs) against bulkwire
//! with the C compiler, like the Oxford toolset's and BSPonMPI's `bspcc`.
//!
//! ```text
//! bspcc -O2 prog.c -o prog            compile and link
//! bspcc -c part.c && bspcc part.o main.c -o prog
//! bspcc --mcbsp prog.c -o prog        MulticoreBSP for C's dialect of bsp.h
//! bspcc -v ...                        print the compiler command first
//! bspcc --show ...                    only print it
//! make CC=bspcc                       a Makefile's programs
//! ```
//!
//! Options of the Oxford `bspcc` that tune its own library (`-flibrary-level N`,
//! `-fcombine-puts`, `-fcombine-puts-buffer N`, `-bspfifo N`) are accepted and ignored:
//! bulkwire always combines a superstep's puts per destination. How the compiler is
//! chosen, and where the headers and the library come from: see `compile.rs`.

use bulkwire_tools::compile;

fn main() -> std::process::ExitCode {
    compile::main(compile::Lang::C)
}
