//! What the tools' binaries share: [`compile`], the compiler wrappers `bspcc` and
//! `bspcxx` (BSPlib) and `bwmpicc` and `bwmpicxx` (MPI).

pub mod compile;
