//! Compiles the C part of the library (the variadic `bsp_abort` family, which stable Rust
//! cannot define, and MulticoreBSP's affinity, profiling and checkpointing calls) and
//! links all of it into both libraries. The shared library exports the C part's
//! functions too (rustc's export list has only Rust's), and gets its SONAME:
//! `libbulkwire.so.MAJOR`, or `libbulkwire.so.0.MINOR` before 1.0, following Cargo's
//! compatibility rule.

/// What the C part defines for programs.
const C_EXPORTS: &[&str] = &[
    "bsp_abort",
    "bsp_vabort",
    "bsp_abort_va",
    "mcbsp_abort",
    "mcbsp_vabort",
    "mcbsp_set_maximum_threads",
    "mcbsp_set_affinity_mode",
    "mcbsp_set_available_cores",
    "mcbsp_set_threads_per_core",
    "mcbsp_set_thread_numbering",
    "mcbsp_set_pinning",
    "mcbsp_set_reserved_cores",
    "mcbsp_get_maximum_threads",
    "mcbsp_get_affinity_mode",
    "mcbsp_get_available_cores",
    "mcbsp_get_threads_per_core",
    "mcbsp_get_thread_numbering",
    "mcbsp_get_pinning",
    "mcbsp_get_reserved_cores_number",
    "mcbsp_get_reserved_cores",
    "MCBSP_DEFAULT_AFFINITY",
    "MCBSP_DEFAULT_THREADS_PER_CORE",
    "MCBSP_DEFAULT_THREAD_NUMBERING",
    "mcbsp_profiling_set_description",
    "mcbsp_checkpoint",
    "mcbsp_enable_checkpoints",
    "mcbsp_disable_checkpoints",
    "mcbsp_set_checkpoint_frequency",
    "mcbsp_get_checkpoint_frequency",
    "mcbsp_set_safe_checkpoint_frequency",
    "mcbsp_get_safe_checkpoint_frequency",
];

fn main() {
    for f in [
        "csrc/bsp_abort.c",
        "csrc/mcbsp.c",
        "include/bsp.h",
        "include/mcbsp-affinity.h",
        "include/mcbsp-profiling.h",
        "include/mcbsp-resiliency.h",
    ] {
        println!("cargo:rerun-if-changed={f}");
    }
    cc::Build::new()
        .file("csrc/bsp_abort.c")
        .file("csrc/mcbsp.c")
        .include("include")
        .flag_if_supported("-std=c11")
        .warnings(true)
        // Nothing in Rust calls most of it: link every object anyway.
        .link_lib_modifier("+whole-archive")
        .compile("bulkwire_cshim");
    let var = |k: &str| std::env::var(k).unwrap_or_default();
    if var("CARGO_CFG_TARGET_OS") != "linux" {
        return;
    }
    let major = var("CARGO_PKG_VERSION_MAJOR");
    let abi = if major == "0" {
        format!("0.{}", var("CARGO_PKG_VERSION_MINOR"))
    } else {
        major
    };
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libbulkwire.so.{abi}");
    // The linker merges this with rustc's own version script.
    let map = std::path::Path::new(&var("OUT_DIR")).join("c_exports.map");
    let globals: String = C_EXPORTS.iter().map(|s| format!(" {s};")).collect();
    std::fs::write(&map, format!("{{\n  global:{globals}\n}};\n")).expect("write the export map");
    println!(
        "cargo:rustc-cdylib-link-arg=-Wl,--version-script={}",
        map.display()
    );
}
