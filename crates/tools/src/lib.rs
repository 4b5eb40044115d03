//! What the tools' binaries share: [`compile`], the compiler wrappers `bspcc` and
//! `bspcxx`.

pub mod compile;
