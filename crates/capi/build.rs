//! Compiles the C part of the library: the variadic `bsp_abort`, which stable Rust cannot
//! define, formats its message and hands it to Rust.

fn main() {
    println!("cargo:rerun-if-changed=csrc/bsp_abort.c");
    println!("cargo:rerun-if-changed=include/bsp.h");
    cc::Build::new()
        .file("csrc/bsp_abort.c")
        .include("include")
        .flag_if_supported("-std=c11")
        .warnings(true)
        .compile("bulkwire_cshim");
}
