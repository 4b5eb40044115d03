//! bulkwire installed like a system library: `make install-files` puts this build (the
//! test profile's tools and libraries) under a temporary prefix, and programs are built
//! against the installed tree the ways a user would: plain `cc $(pkg-config ...)` against
//! the shared library (then moved to another directory) and the static one, the
//! installed `bspcc` and `bspcxx` (which use the headers of `PREFIX/include` and write
//! nothing under `HOME`), and CMake's `find_package(bulkwire)` when CMake is installed.
//! The installed static library and a program linked against it are of a sane size (no
//! debug information). Then `make uninstall` removes every file.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

const BSPCC: &str = env!("CARGO_BIN_EXE_bspcc");

const BSP_PROGRAM: &str = r#"#include <stdio.h>
#include <bsp.h>
int main(void) {
    bsp_begin(3);
    bsp_pid_t p = bsp_nprocs(), s = bsp_pid();
    long v = (long)s + 1, sum = 0;
    for (bsp_pid_t q = 0; q < p; q++) bsp_send(q, NULL, &v, sizeof v);
    bsp_sync();
    void *tag, *m;
    while (bsp_hpmove(&tag, &m) != (bsp_size_t)-1) sum += *(long *)m;
    if (s == 0) printf("bsp sum %ld p %d\n", sum, (int)p);
    bsp_end();
    return 0;
}
"#;

const BW_PROGRAM: &str = r#"#include <stdio.h>
#include <bulkwire.h>
int main(void) {
    if (bw_init_spawn(2) != BW_SUCCESS) return 1;
    int r, n;
    bw_rank(&r);
    bw_size(&n);
    long long one = 1, all = 0;
    if (bw_allreduce(&one, &all, 1, BW_INT64, BW_SUM) != BW_SUCCESS) return 1;
    if (r == 0) printf("bw %d %lld\n", n, all);
    return bw_finalize() != BW_SUCCESS;
}
"#;

const CXX_PROGRAM: &str = r#"#include <cstdio>
#include <mcbsp.h>
#include <vector>
int main() {
    bsp_begin(2);
    std::vector<unsigned> seen(bsp_nprocs());
    bsp_push_reg(seen.data(), seen.size() * sizeof(unsigned));
    bsp_sync();
    unsigned me = bsp_pid();
    bsp_put(0, &me, seen.data(), me * sizeof(unsigned), sizeof me);
    bsp_sync();
    if (me == 0) std::printf("cxx %u %u\n", seen[0], seen[1]);
    bsp_end();
    return 0;
}
"#;

/// A command with no `BULKWIRE_` variables (the programs start their own jobs).
#[path = "common/installed.rs"]
mod installed;
use installed::{repo, stdout, walk};

/// Runs `c` (bounded in time), returning its output; panics with it if it fails.
fn ok(c: Command, what: &str) -> Output {
    installed::ok_within(c, what, Duration::from_secs(120))
}

fn clean(program: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut c = Command::new(program);
    for (k, _) in std::env::vars() {
        if k.starts_with("BULKWIRE_") {
            c.env_remove(k);
        }
    }
    c
}

/// `pkg-config --cflags --libs NAME` against the prefix, as words.
fn pkg_config(prefix: &Path, name: &str) -> Vec<String> {
    let mut c = Command::new("pkg-config");
    c.args(["--cflags", "--libs", name])
        .env("PKG_CONFIG_PATH", prefix.join("lib/pkgconfig"));
    let o = ok(c, &format!("pkg-config {name}"));
    stdout(&o).split_whitespace().map(str::to_string).collect()
}

/// The dynamic section of an ELF file, as `readelf -d` prints it.
fn dynamic(file: &Path) -> String {
    let mut c = Command::new("readelf");
    c.arg("-d").arg(file);
    stdout(&ok(c, "readelf -d"))
}

fn cc(src: &Path, out: &Path, flags: &[String]) {
    let mut c = Command::new("cc");
    c.arg(src).arg("-o").arg(out).args(flags);
    ok(c, &format!("cc {} {}", src.display(), flags.join(" ")));
}

#[test]
fn an_installed_tree_builds_programs_with_pkg_config_cmake_and_the_wrappers() {
    let root =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("install-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let prefix = root.join("prefix");
    let work = root.join("work");
    std::fs::create_dir_all(&work).unwrap();
    let builddir = Path::new(BSPCC).parent().unwrap();
    let make = |target: &str| {
        let mut c = Command::new("make");
        c.arg("-s")
            .arg("-C")
            .arg(repo())
            .arg(target)
            .arg(format!("PREFIX={}", prefix.display()))
            .arg(format!("BUILDDIR={}", builddir.display()));
        ok(c, &format!("make {target}"));
    };
    make("install-files");

    let lib = prefix.join("lib");
    for f in [
        "bin/bspcc",
        "bin/bspcxx",
        "bin/bsprun",
        "bin/bwbench",
        "lib/libbulkwire.a",
        "lib/libbulkwire.so",
        "include/bsp.h",
        "include/mcbsp.h",
        "include/bulkwire.h",
        "include/bsp.hpp",
        "lib/pkgconfig/bulkwire.pc",
        "lib/cmake/bulkwire/bulkwireConfig.cmake",
    ] {
        assert!(prefix.join(f).exists(), "{f} not installed");
    }
    // The shared library names its ABI; the development link leads to it.
    let soname = "libbulkwire.so.0.1";
    assert!(dynamic(&lib.join("libbulkwire.so")).contains(&format!("Library soname: [{soname}]")));
    assert!(lib.join(soname).exists());

    let bsp = work.join("bsp.c");
    let bw = work.join("bw.c");
    std::fs::write(&bsp, BSP_PROGRAM).unwrap();
    std::fs::write(&bw, BW_PROGRAM).unwrap();

    // Shared: the program needs the library by its SONAME and finds it from anywhere.
    let shared = pkg_config(&prefix, "bulkwire");
    let prog = work.join("bsp_shared");
    cc(&bsp, &prog, &shared);
    assert!(dynamic(&prog).contains(&format!("Shared library: [{soname}]")));
    let elsewhere = work.join("moved");
    std::fs::create_dir_all(&elsewhere).unwrap();
    let moved = elsewhere.join("renamed");
    std::fs::rename(&prog, &moved).unwrap();
    let o = ok(clean(&moved), "the moved program");
    assert_eq!(stdout(&o), "bsp sum 6 p 3\n");
    let mut c = clean(prefix.join("bin/bsprun"));
    c.args(["-n", "3"]).arg(&moved);
    assert_eq!(stdout(&ok(c, "installed bsprun")), "bsp sum 6 p 3\n");
    let prog = work.join("bw_shared");
    cc(&bw, &prog, &shared);
    assert_eq!(stdout(&ok(clean(&prog), "bulkwire.h program")), "bw 2 2\n");

    // Static: nothing of bulkwire needed at run time.
    let prog = work.join("bsp_static");
    cc(&bsp, &prog, &pkg_config(&prefix, "bulkwire-static"));
    assert!(!dynamic(&prog).contains("bulkwire"));
    assert_eq!(
        stdout(&ok(clean(&prog), "static program")),
        "bsp sum 6 p 3\n"
    );

    // The installed wrappers find the installed library (../lib) and headers
    // (../include), and write nothing: not the header cache under HOME, nor under TMPDIR.
    let home = root.join("home");
    let tmp = root.join("tmp");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::create_dir_all(&tmp).unwrap();
    let prog = work.join("bsp_wrapped");
    let mut c = clean(prefix.join("bin/bspcc"));
    c.arg(&bsp)
        .arg("-o")
        .arg(&prog)
        .env_remove("BULKWIRE_LIB_DIR")
        .env_remove("XDG_CACHE_HOME")
        .env("HOME", &home)
        .env("TMPDIR", &tmp);
    ok(c, "installed bspcc");
    assert_eq!(
        stdout(&ok(clean(&prog), "bspcc's program")),
        "bsp sum 6 p 3\n"
    );
    let written: Vec<PathBuf> = walk(&home).into_iter().chain(walk(&tmp)).collect();
    assert!(written.is_empty(), "the installed bspcc wrote {written:?}");
    // A header edited in PREFIX/include is the one compiled against.
    let header = prefix.join("include/bulkwire.h");
    let mut text = std::fs::read_to_string(&header).unwrap();
    text.push_str("\n#define BULKWIRE_EDITED_IN_PREFIX 1\n");
    std::fs::write(&header, text).unwrap();
    let probe = work.join("edited.c");
    std::fs::write(
        &probe,
        "#include <bulkwire.h>\n#ifndef BULKWIRE_EDITED_IN_PREFIX\n\
         #error not the header of PREFIX/include\n#endif\nint main(void) { return 0; }\n",
    )
    .unwrap();
    let mut c = clean(prefix.join("bin/bspcc"));
    c.arg("-c").arg(&probe).arg("-o").arg(work.join("edited.o"));
    ok(c, "installed bspcc with an edited header");
    // bspcc links with the system libraries pkg-config states for the static library.
    let mut c = clean(prefix.join("bin/bspcc"));
    c.arg("--show").arg(&bsp).arg("-o").arg(&prog);
    let shown = String::from_utf8_lossy(&ok(c, "bspcc --show").stderr).into_owned();
    let system: Vec<String> = pkg_config(&prefix, "bulkwire-static")
        .into_iter()
        .filter(|w| w.starts_with("-l"))
        .collect();
    assert!(
        shown.trim_end().ends_with(&system.join(" ")),
        "bspcc links {shown:?}, pkg-config says {system:?}"
    );
    sizes(&lib, &prog);
    let cxx = work.join("cxx.cpp");
    std::fs::write(&cxx, CXX_PROGRAM).unwrap();
    let prog = work.join("cxx");
    let mut c = clean(prefix.join("bin/bspcxx"));
    c.arg(&cxx).arg("-o").arg(&prog);
    ok(c, "installed bspcxx");
    assert_eq!(stdout(&ok(clean(&prog), "bspcxx's program")), "cxx 0 1\n");

    cmake_package(&prefix, &work);

    make("uninstall");
    let left: Vec<PathBuf> = walk(&prefix).into_iter().filter(|p| !p.is_dir()).collect();
    assert!(left.is_empty(), "left after uninstall: {left:?}");
    let _ = std::fs::remove_dir_all(&root);
}

/// The installed static library and a program bspcc linked against it carry no debug
/// information (with it, and the library's LLVM bitcode, a release build's are 69 MB and
/// 17 MB; without, 11 MB and 4 MB; the test profile's archive, with the MPI layer, 36 MB
/// without them).
fn sizes(lib: &Path, prog: &Path) {
    let size = |p: &Path| std::fs::metadata(p).unwrap().len();
    let (a, so, exe) = (
        size(&lib.join("libbulkwire.a")),
        size(&lib.join("libbulkwire.so")),
        size(prog),
    );
    eprintln!("installed sizes: libbulkwire.a {a} B, libbulkwire.so {so} B, program {exe} B");
    const MB: u64 = 1 << 20;
    assert!(a < 48 * MB, "libbulkwire.a is {a} bytes");
    assert!(
        exe < 12 * MB,
        "a program linked statically by bspcc is {exe} bytes"
    );
    let mut c = Command::new("readelf");
    c.arg("-S").arg(prog);
    let sections = stdout(&ok(c, "readelf -S"));
    assert!(
        !sections.contains(".debug_info"),
        "bspcc's program has debug information"
    );
}

/// `find_package(bulkwire)` in a CMake project, both targets (when CMake is installed).
fn cmake_package(prefix: &Path, work: &Path) {
    if Command::new("cmake").arg("--version").output().is_err() {
        eprintln!("cmake is not installed: the CMake package is not checked");
        return;
    }
    let proj = work.join("cmake");
    std::fs::create_dir_all(&proj).unwrap();
    std::fs::write(
        proj.join("CMakeLists.txt"),
        "cmake_minimum_required(VERSION 3.13)\nproject(uses_bulkwire C)\n\
         find_package(bulkwire 0.1 REQUIRED)\n\
         add_executable(shared ../bsp.c)\n\
         target_link_libraries(shared PRIVATE bulkwire::bulkwire)\n\
         add_executable(static ../bsp.c)\n\
         target_link_libraries(static PRIVATE bulkwire::static)\n",
    )
    .unwrap();
    let build = proj.join("build");
    let mut c = Command::new("cmake");
    c.arg("-S")
        .arg(&proj)
        .arg("-B")
        .arg(&build)
        .arg(format!("-DCMAKE_PREFIX_PATH={}", prefix.display()));
    ok(c, "cmake configure");
    let mut c = Command::new("cmake");
    c.arg("--build").arg(&build);
    ok(c, "cmake build");
    for exe in ["shared", "static"] {
        let o = ok(clean(build.join(exe)), &format!("cmake's {exe} program"));
        assert_eq!(stdout(&o), "bsp sum 6 p 3\n");
    }
    // A version from another series is refused.
    std::fs::write(
        proj.join("CMakeLists.txt"),
        "cmake_minimum_required(VERSION 3.13)\nproject(too_new C)\n\
         find_package(bulkwire 0.2 QUIET)\n\
         if(bulkwire_FOUND)\n  message(FATAL_ERROR \"0.2 accepted\")\nendif()\n",
    )
    .unwrap();
    let mut c = Command::new("cmake");
    c.arg("-S")
        .arg(&proj)
        .arg("-B")
        .arg(proj.join("build2"))
        .arg(format!("-DCMAKE_PREFIX_PATH={}", prefix.display()));
    ok(c, "cmake refusing another version");
}
