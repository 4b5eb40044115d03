//! What the compiler wrappers share: `bspcc` and `bspcxx` compile and link BSPlib (and
//! `bulkwire.h`) programs against bulkwire, `bwmpicc` and `bwmpicxx` MPI programs
//! (`mpi.h`), with the system's C or C++ compiler.
//!
//! Every argument goes to the compiler untouched, with the directory of bulkwire's
//! headers added to the include path and, when linking, the static `libbulkwire.a` and
//! the system libraries it needs added at the end. The headers (`bsp.h`, `mcbsp.h`,
//! `mcbsp-affinity.h`, `mcbsp-profiling.h`, `mcbsp-resiliency.h`, `bulkwire.h`, and
//! MulticoreBSP's C++ interface `bsp.hpp`) are those
//! of `../include` beside the executable when all of them are there (an installed tree:
//! `make install` puts them in `PREFIX/include`); otherwise (a build tree) the copies
//! carried inside the executable, written to a cache directory
//! (`$XDG_CACHE_HOME/bulkwire/include-<hash>`), so the wrapper works from any directory.
//! `libbulkwire.a` is looked for in `$BULKWIRE_LIB_DIR`, next to the executable (where
//! `cargo build --release` puts both) and in `../lib` beside it (an installed tree).
//!
//! The compiler is the first usable of `$BSPCC_CC`, `$CC`, `cc`, `gcc`, `clang` (bspcxx:
//! `$BSPCXX_CXX`, `$CXX`, `c++`, `g++`, `clang++`; bwmpicc and bwmpicxx: `$BWMPICC_CC`,
//! `$BWMPICXX_CXX`, then the same); a variable may hold leading words
//! (`CC="ccache gcc"`). A candidate that is this wrapper itself (by its resolved path) or
//! another bulkwire wrapper (by name) is skipped, so `make CC=bspcc` works; the MPI
//! wrappers also skip other MPIs' wrappers (`CC=mpicc` naming Open MPI's would link two
//! MPI libraries); a wrapper started by a compiler this wrapper started (a script that
//! calls it back) ignores the variables altogether; a compiler a variable names that does
//! not exist is an error.
//!
//! The MPI wrappers answer what build systems ask of an MPI compiler wrapper: `-show`
//! (`-showme`) prints the whole command, `-showme:compile` and `-showme:link` the flags of
//! each step, `-showme:incdirs`, `-showme:libdirs`, `-showme:libs` and `-showme:version`
//! their parts (Open MPI's options, which CMake's FindMPI tries first), `-compile_info` and
//! `-link_info` the compiler with each step's flags (MPICH's), each on standard output.
//! Their header `mpi.h` is installed in `PREFIX/include/bulkwire-mpi`, apart from the
//! other headers, so that it never shadows another MPI's `mpi.h` in `/usr/local/include`.
//!
//! `bwmpifort` compiles Fortran MPI programs (`use mpi`, `include 'mpif.h'`) with
//! `$BWMPIFORT_FC`, `$FC`, `gfortran` or `f95`. A Fortran module file belongs to the
//! compiler (and version) that wrote it, so the `mpi` module's source (`mpi.f90`, beside
//! `mpif.h`) is compiled on first use into a cache directory named by the compiler and the
//! sources (`$XDG_CACHE_HOME/bulkwire/mpi-mod-<hash>`), added to the include path; the
//! link adds `-lgfortran` for build systems that link with another driver.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

/// The headers, by name.
const HEADERS: &[(&str, &str)] = &[
    ("bsp.h", include_str!("../../capi/include/bsp.h")),
    ("mcbsp.h", include_str!("../../capi/include/mcbsp.h")),
    (
        "mcbsp-affinity.h",
        include_str!("../../capi/include/mcbsp-affinity.h"),
    ),
    (
        "mcbsp-profiling.h",
        include_str!("../../capi/include/mcbsp-profiling.h"),
    ),
    (
        "mcbsp-resiliency.h",
        include_str!("../../capi/include/mcbsp-resiliency.h"),
    ),
    ("bulkwire.h", include_str!("../../capi/include/bulkwire.h")),
    ("bsp.hpp", include_str!("../../capi/include/bsp.hpp")),
];
/// MPI's header, by name.
const MPI_HEADERS: &[(&str, &str)] = &[("mpi.h", include_str!("../../mpi/include/mpi.h"))];
/// MPI's Fortran include file and the source of its `mpi` module.
const MPI_FORTRAN_HEADERS: &[(&str, &str)] = &[
    ("mpif.h", include_str!("../../mpi/include/mpif.h")),
    ("mpi.f90", include_str!("../../mpi/include/mpi.f90")),
];
/// Where the MPI header is installed, under `PREFIX/include`.
const MPI_INCLUDE_SUBDIR: &str = "bulkwire-mpi";
const LIBRARY: &str = "libbulkwire.a";
/// What a Rust static library needs from the system (`rustc --print native-static-libs`):
/// the Makefile's SYSTEM_LIBS, which `pkg-config --libs bulkwire-static` gives (a test of
/// `tests/install.rs` checks they agree).
const SYSTEM_LIBS: &[&str] = &["-lgcc_s", "-lutil", "-lrt", "-lpthread", "-lm", "-ldl"];
/// Oxford options with a value, and without, that only tune Oxford's library.
const IGNORED_WITH_VALUE: &[&str] = &["-flibrary-level", "-fcombine-puts-buffer", "-bspfifo"];
const IGNORED: &[&str] = &["-fcombine-puts", "-fnocombine-puts"];
/// bulkwire's compiler wrappers: never a compiler for another one.
const WRAPPERS: &[&str] = &[
    "bspcc",
    "bspcxx",
    "bwcc",
    "bwmpicc",
    "bwmpicxx",
    "bwmpifort",
];
/// Other MPIs' wrappers (Open MPI's, MPICH's and their Debian names): never the compiler
/// of an MPI wrapper.
const MPI_WRAPPERS: &[&str] = &[
    "mpicc",
    "mpicxx",
    "mpic++",
    "mpiCC",
    "mpicc.openmpi",
    "mpicxx.openmpi",
    "mpic++.openmpi",
    "mpicc.mpich",
    "mpicxx.mpich",
    "mpifort",
    "mpif90",
    "mpif77",
    "mpifort.openmpi",
    "mpif90.openmpi",
    "mpif77.openmpi",
    "mpifort.mpich",
    "mpif90.mpich",
    "mpif77.mpich",
];
/// Set in the compiler's environment: a wrapper that finds it was started, directly or
/// not, by a compiler a wrapper started.
const NESTED: &str = "BULKWIRE_BSPCC_NESTED";

/// The language a wrapper compiles.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Lang {
    C,
    Cxx,
    /// Only for MPI (`bwmpifort`).
    Fortran,
}

/// The interface a wrapper's programs are written to.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Api {
    /// BSPlib (`bsp.h`, `mcbsp.h`) and `bulkwire.h`.
    Bsp,
    /// MPI (`mpi.h`).
    Mpi,
}

/// One wrapper: its language and interface.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Tool {
    lang: Lang,
    api: Api,
}

impl Tool {
    fn name(self) -> &'static str {
        match (self.api, self.lang) {
            (Api::Bsp, Lang::C) => "bspcc",
            (Api::Bsp, Lang::Cxx) => "bspcxx",
            (Api::Mpi, Lang::C) => "bwmpicc",
            (Api::Mpi, Lang::Cxx) => "bwmpicxx",
            (Api::Mpi, Lang::Fortran) | (Api::Bsp, Lang::Fortran) => "bwmpifort",
        }
    }

    /// The variables naming the compiler, then the usual names.
    fn candidates(self) -> (&'static [&'static str], &'static [&'static str]) {
        match (self.api, self.lang) {
            (Api::Bsp, Lang::C) => (&["BSPCC_CC", "CC"], &["cc", "gcc", "clang"]),
            (Api::Bsp, Lang::Cxx) => (&["BSPCXX_CXX", "CXX"], &["c++", "g++", "clang++"]),
            (Api::Mpi, Lang::C) => (&["BWMPICC_CC", "CC"], &["cc", "gcc", "clang"]),
            (Api::Mpi, Lang::Cxx) => (&["BWMPICXX_CXX", "CXX"], &["c++", "g++", "clang++"]),
            (_, Lang::Fortran) => (&["BWMPIFORT_FC", "FC"], &["gfortran", "f95"]),
        }
    }

    /// The headers this wrapper's programs include, and where they are installed under
    /// `PREFIX/include`.
    fn headers(self) -> (&'static [(&'static str, &'static str)], &'static str) {
        match (self.api, self.lang) {
            (_, Lang::Fortran) => (MPI_FORTRAN_HEADERS, MPI_INCLUDE_SUBDIR),
            (Api::Bsp, _) => (HEADERS, ""),
            (Api::Mpi, _) => (MPI_HEADERS, MPI_INCLUDE_SUBDIR),
        }
    }
}

/// `bspcc` (C) and `bspcxx` (C++).
pub fn main(lang: Lang) -> ExitCode {
    main_of(Tool {
        lang,
        api: Api::Bsp,
    })
}

/// `bwmpicc` (C), `bwmpicxx` (C++) and `bwmpifort` (Fortran).
pub fn main_mpi(lang: Lang) -> ExitCode {
    main_of(Tool {
        lang,
        api: Api::Mpi,
    })
}

fn main_of(tool: Tool) -> ExitCode {
    match run(tool, std::env::args_os().skip(1).collect()) {
        Ok(code) => code,
        Err(msg) => {
            eprintln!("{}: {msg}", tool.name());
            ExitCode::from(2)
        }
    }
}

fn usage(tool: Tool) -> String {
    let (vars, names) = tool.candidates();
    let mut list: Vec<String> = vars.iter().map(|v| format!("${v}")).collect();
    list.extend(names.iter().map(|n| n.to_string()));
    match tool.api {
        Api::Bsp => format!(
            "usage: {0} [-v] [--show] [--mcbsp] [compiler options] files... [-o output]\n\
             Compiles and links BSPlib programs (bsp.h, mcbsp.h) and bulkwire.h programs\n\
             against bulkwire (libbulkwire.a). The compiler is the first usable of {1};\n\
             all options but -v, --show and --mcbsp go to it.\n\
             \n\
             \x20 --mcbsp   MulticoreBSP for C's dialect for programs that include bsp.h\n\
             \x20 -v        print the compiler command, then run it\n\
             \x20 --show    only print it\n\
             \x20 --version print bulkwire's version",
            tool.name(),
            list.join(", ")
        ),
        Api::Mpi => format!(
            "usage: {0} [-v] [-show] [compiler options] files... [-o output]\n\
             Compiles and links MPI programs (mpi.h; Fortran: use mpi, mpif.h) against\n\
             bulkwire (libbulkwire.a).\n\
             The compiler is the first usable of {1}; all options but those below go to it.\n\
             \n\
             \x20 -v                print the compiler command, then run it\n\
             \x20 -show, -showme    only print it (without files: the compiler and every flag)\n\
             \x20 -showme:compile   the flags for compiling    -compile_info  with the compiler\n\
             \x20 -showme:link      the flags for linking      -link_info     with the compiler\n\
             \x20 -showme:incdirs   the header directory       -showme:libdirs  the library's\n\
             \x20 -showme:libs      the libraries' names       -showme:version  bulkwire's version\n\
             \x20 --version         bulkwire's version",
            tool.name(),
            list.join(", ")
        ),
    }
}

/// What an MPI wrapper is asked to print instead of compiling.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Show {
    /// The whole command (`-show`, `-showme`, `--show`).
    Command,
    /// The compiler and the compile flags (`-compile_info`).
    CompileInfo,
    /// The compiler and the link flags (`-link_info`).
    LinkInfo,
    /// The compile flags (`-showme:compile`).
    Compile,
    /// The link flags (`-showme:link`).
    Link,
    IncDirs,
    LibDirs,
    Libs,
    Version,
}

/// What the wrapper was asked.
struct Request {
    verbose: bool,
    show: Option<Show>,
    mcbsp: bool,
    pass: Vec<OsString>,
}

fn parse(tool: Tool, args: Vec<OsString>) -> Result<Option<Request>, String> {
    let mut r = Request {
        verbose: false,
        show: None,
        mcbsp: false,
        pass: Vec::new(),
    };
    let mpi = tool.api == Api::Mpi;
    let mut it = args.into_iter();
    while let Some(a) = it.next() {
        let s = a.to_string_lossy();
        match s.as_ref() {
            "-v" | "--verbose" => r.verbose = true,
            "--show" | "-show" => r.show = Some(Show::Command),
            "--mcbsp" | "-mcbsp" if !mpi => r.mcbsp = true,
            "-showme" | "--showme" if mpi => r.show = Some(Show::Command),
            "-showme:compile" | "--showme:compile" if mpi => r.show = Some(Show::Compile),
            "-showme:link" | "--showme:link" if mpi => r.show = Some(Show::Link),
            "-showme:incdirs" | "--showme:incdirs" if mpi => r.show = Some(Show::IncDirs),
            "-showme:libdirs" | "--showme:libdirs" if mpi => r.show = Some(Show::LibDirs),
            "-showme:libs" | "--showme:libs" if mpi => r.show = Some(Show::Libs),
            "-showme:version" | "--showme:version" if mpi => r.show = Some(Show::Version),
            "-compile_info" | "-compile-info" if mpi => r.show = Some(Show::CompileInfo),
            "-link_info" | "-link-info" if mpi => r.show = Some(Show::LinkInfo),
            "-h" | "--help" | "-help" => {
                println!("{}", usage(tool));
                return Ok(None);
            }
            "--version" | "-version" => {
                println!("{} (bulkwire {})", tool.name(), env!("CARGO_PKG_VERSION"));
                return Ok(None);
            }
            x if !mpi && IGNORED.contains(&x) => {}
            x if !mpi && IGNORED_WITH_VALUE.contains(&x) => {
                it.next();
            }
            x if !mpi
                && IGNORED_WITH_VALUE
                    .iter()
                    .any(|o| x.starts_with(&format!("{o}="))) => {}
            _ => r.pass.push(a),
        }
    }
    // An MPI wrapper shows its flags without files (build systems ask `mpicc -show`).
    if r.pass.is_empty() && !(mpi && r.show.is_some()) {
        return Err(format!("no input files\n{}", usage(tool)));
    }
    Ok(Some(r))
}

fn run(tool: Tool, args: Vec<OsString>) -> Result<ExitCode, String> {
    let Some(req) = parse(tool, args)? else {
        return Ok(ExitCode::SUCCESS);
    };
    if req.show == Some(Show::Version) {
        println!("bulkwire {}", env!("CARGO_PKG_VERSION"));
        return Ok(ExitCode::SUCCESS);
    }
    let include = header_dir(tool)?;
    let linking = !req.pass.iter().any(|a| {
        matches!(
            a.to_string_lossy().as_ref(),
            "-c" | "-S" | "-E" | "-M" | "-MM" | "-fsyntax-only"
        )
    });
    let mut inc = OsString::from("-I");
    inc.push(&include);
    let fortran = tool.lang == Lang::Fortran;
    // Fortran: the compiler is needed for every answer, as the module is its own.
    let found = if fortran { Some(compiler(tool)?) } else { None };
    let mut compile_words = vec![inc.clone()];
    let mut inc_dirs = vec![include.clone().into_os_string()];
    if let Some((program, lead)) = &found {
        let (modules, version) = fortran_module_dir(&include, program, lead)?;
        let mut m = OsString::from("-I");
        m.push(&modules);
        compile_words.push(m);
        if allows_argument_mismatch(&version) {
            compile_words.push("-fallow-argument-mismatch".into());
        }
        inc_dirs.push(modules.into_os_string());
    }
    let link_words = || -> Result<Vec<OsString>, String> {
        let mut w = vec![library()?.into_os_string()];
        if fortran {
            w.push("-lgfortran".into());
        }
        w.extend(SYSTEM_LIBS.iter().map(OsString::from));
        Ok(w)
    };
    // The flag-only answers need no compiler.
    let words: Option<Vec<OsString>> = match req.show {
        Some(Show::Compile) => Some(compile_words.clone()),
        Some(Show::Link) => Some(link_words()?),
        Some(Show::IncDirs) => Some(inc_dirs),
        Some(Show::LibDirs) => {
            let lib = library()?;
            Some(vec![
                lib.parent()
                    .unwrap_or(Path::new("."))
                    .as_os_str()
                    .to_owned(),
            ])
        }
        Some(Show::Libs) => Some(
            std::iter::once("bulkwire")
                .chain(fortran.then_some("gfortran"))
                .chain(SYSTEM_LIBS.iter().map(|l| l.trim_start_matches("-l")))
                .map(OsString::from)
                .collect(),
        ),
        _ => None,
    };
    if let Some(words) = words {
        println!("{}", shell_words(words.iter().map(|w| w.as_os_str())));
        return Ok(ExitCode::SUCCESS);
    }
    let (program, lead) = match found {
        Some(f) => f,
        None => compiler(tool)?,
    };
    let mut cmd = Command::new(&program);
    cmd.args(&lead).args(&compile_words);
    if req.mcbsp {
        cmd.arg("-DBULKWIRE_MCBSP=1");
    }
    cmd.args(&req.pass);
    let link = match req.show {
        Some(Show::CompileInfo) => false,
        Some(Show::LinkInfo) => true,
        _ => linking,
    };
    if link {
        cmd.args(link_words()?);
    }
    cmd.env(NESTED, "1");
    if req.verbose || req.show.is_some() {
        let line = shell_words(std::iter::once(cmd.get_program()).chain(cmd.get_args()));
        // MPI wrappers answer on standard output, where build systems read it; bspcc's
        // --show has always written to standard error.
        if tool.api == Api::Mpi && req.show.is_some() {
            println!("{line}");
        } else {
            eprintln!("{line}");
        }
    }
    if req.show.is_some() {
        return Ok(ExitCode::SUCCESS);
    }
    // The compiler writes its diagnostics straight to our stdout and stderr.
    let status = cmd.status().map_err(|e| {
        format!(
            "cannot run the compiler {}: {e}",
            quote(&program.to_string_lossy())
        )
    })?;
    Ok(exit_code(status))
}

/// Words as one line for the shell.
fn shell_words<'a>(words: impl Iterator<Item = &'a OsStr>) -> String {
    words
        .map(|w| quote(&w.to_string_lossy()))
        .collect::<Vec<_>>()
        .join(" ")
}
/// The compiler's exit status as ours (a signal as the shell reports it).
fn exit_code(status: std::process::ExitStatus) -> ExitCode {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(0), _) => ExitCode::SUCCESS,
        (Some(c), _) => ExitCode::from(c.clamp(1, 255) as u8),
        (None, Some(sig)) => ExitCode::from((128 + sig).clamp(1, 255) as u8),
        (None, None) => ExitCode::from(1),
    }
}

/// The compiler to run: its program and leading words.
fn compiler(tool: Tool) -> Result<(PathBuf, Vec<OsString>), String> {
    let (vars, names) = tool.candidates();
    let nested = std::env::var_os(NESTED).is_some();
    let mut skipped = Vec::new();
    let from_vars = vars
        .iter()
        .filter(|_| !nested)
        .filter_map(|v| Some((format!("${v}"), std::env::var_os(v)?, true)));
    let defaults = names
        .iter()
        .map(|n| (n.to_string(), OsString::from(n), false));
    for (source, value, named) in from_vars.chain(defaults) {
        let mut words = value
            .to_string_lossy()
            .split_whitespace()
            .map(OsString::from)
            .collect::<Vec<_>>()
            .into_iter();
        let Some(first) = words.next() else { continue };
        let what = format!("{source} = {}", first.to_string_lossy());
        match usable(&first, tool.api) {
            Ok(path) => return Ok((path, words.collect())),
            // A compiler the user named but that is not there is an error, not a reason
            // to pick another.
            Err(Unusable::NotFound) if named => {
                return Err(format!("the compiler {what} was not found"));
            }
            Err(why) => skipped.push(format!("{what}: {why}")),
        }
    }
    Err(format!(
        "no {} compiler to run ({})",
        match tool.lang {
            Lang::C => "C",
            Lang::Cxx => "C++",
            Lang::Fortran => "Fortran",
        },
        skipped.join("; ")
    ))
}

/// Why a word names no compiler to run.
enum Unusable {
    NotFound,
    Myself,
    Wrapper,
    OtherMpi,
}

impl std::fmt::Display for Unusable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Unusable::NotFound => "not found",
            Unusable::Myself => "that is this wrapper",
            Unusable::Wrapper => "that is a bulkwire wrapper, not a compiler",
            Unusable::OtherMpi => "that is another MPI's compiler wrapper, not a compiler",
        })
    }
}

/// `word` as a compiler to run: found, and not a bulkwire wrapper (nor, for an MPI
/// wrapper, another MPI's).
fn usable(word: &OsStr, api: Api) -> Result<PathBuf, Unusable> {
    let path = find_program(word).ok_or(Unusable::NotFound)?;
    let real = path.canonicalize().unwrap_or_else(|_| path.clone());
    let me = std::env::current_exe().and_then(|e| e.canonicalize()).ok();
    if me.as_ref() == Some(&real) {
        return Err(Unusable::Myself);
    }
    let named = |list: &[&str], p: &Path| {
        p.file_name()
            .is_some_and(|n| list.iter().any(|w| n == OsStr::new(w)))
    };
    if named(WRAPPERS, &path) || named(WRAPPERS, &real) {
        return Err(Unusable::Wrapper);
    }
    if api == Api::Mpi && (named(MPI_WRAPPERS, &path) || named(MPI_WRAPPERS, &real)) {
        return Err(Unusable::OtherMpi);
    }
    Ok(path)
}

/// Where `word` runs from: itself if it has a slash, else the first executable of that
/// name on the PATH.
fn find_program(word: &OsStr) -> Option<PathBuf> {
    let is_exe = |p: &Path| {
        use std::os::unix::fs::PermissionsExt;
        p.metadata()
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    let w = Path::new(word);
    if w.components().count() > 1 {
        return is_exe(w).then(|| w.to_path_buf());
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(w))
        .find(|p| is_exe(p))
}

/// Quotes a word for the shell when it needs it (for `-v` output one can paste).
fn quote(w: &str) -> String {
    if !w.is_empty()
        && w.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=+,:@%".contains(c))
    {
        w.to_string()
    } else {
        format!("'{}'", w.replace('\'', r"'\''"))
    }
}

/// FNV-1a of the headers, naming their cache directory (new headers, a new directory).
fn fingerprint(headers: &[(&str, &str)]) -> u64 {
    headers
        .iter()
        .flat_map(|(n, h)| n.bytes().chain(h.bytes()))
        .fold(0xcbf2_9ce4_8422_2325, |h, b| {
            (h ^ b as u64).wrapping_mul(0x0100_0000_01b3)
        })
}

/// `../include` (the MPI wrappers: `../include/bulkwire-mpi`) beside this executable
/// when it holds every header: the headers installed with the library (`make install`),
/// used in place so nothing is written.
fn installed_headers(tool: Tool) -> Option<PathBuf> {
    let (headers, sub) = tool.headers();
    let exe = std::env::current_exe().ok()?;
    let dir = exe.parent()?.parent()?.join("include").join(sub);
    headers
        .iter()
        .all(|(name, _)| dir.join(name).is_file())
        .then_some(dir)
}

/// The directory of the headers: the installed ones, else a directory holding this
/// version's embedded headers, written there on first use.
fn header_dir(tool: Tool) -> Result<PathBuf, String> {
    let (headers, _) = tool.headers();
    if let Some(dir) = installed_headers(tool) {
        return Ok(dir);
    }
    let name = match tool.api {
        Api::Bsp => format!("include-{:016x}", fingerprint(headers)),
        Api::Mpi => format!("mpi-include-{:016x}", fingerprint(headers)),
    };
    in_cache(&name, "the headers", |dir| write_headers(dir, headers))
}

/// `fill(dir)` on the first cache directory `name` where it succeeds: under
/// `$XDG_CACHE_HOME/bulkwire` (or `~/.cache/bulkwire`), else under a private directory of
/// the system's temporary one.
fn in_cache(
    name: &str,
    what: &str,
    fill: impl Fn(&Path) -> std::io::Result<()>,
) -> Result<PathBuf, String> {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|v| !v.is_empty())
                .map(|h| Path::new(&h).join(".cache"))
        });
    let mut tried = Vec::new();
    let tmp = std::env::temp_dir().join(format!("bulkwire-{}", uid()));
    for dir in base
        .map(|b| b.join("bulkwire").join(name))
        .into_iter()
        .chain(std::iter::once(tmp.join(name)))
    {
        // The name under the shared temporary directory is predictable: another user
        // could create it first and put their own files in it, so it must be ours alone.
        let guarded = if dir.starts_with(&tmp) {
            bulkwire_launch::files::private_dir(&tmp)
        } else {
            Ok(())
        };
        match guarded.and_then(|()| fill(&dir)) {
            Ok(()) => return Ok(dir),
            Err(e) => tried.push(format!("{}: {e}", dir.display())),
        }
    }
    Err(format!(
        "cannot write {what} to a cache directory ({})",
        tried.join("; ")
    ))
}

/// The directory of the `mpi` module (`mpi.mod`) compiled by this Fortran compiler from
/// `include`'s `mpi.f90`: compiled on first use, into a directory named by the compiler's
/// path, its `--version` and the sources (a module file is only read by the compiler that
/// wrote it).
/// Also the compiler's `--version`.
fn fortran_module_dir(
    include: &Path,
    program: &Path,
    lead: &[OsString],
) -> Result<(PathBuf, String), String> {
    let source = include.join("mpi.f90");
    let text = std::fs::read_to_string(&source)
        .map_err(|e| format!("cannot read {}: {e}", source.display()))?;
    let mpif = std::fs::read_to_string(include.join("mpif.h")).unwrap_or_default();
    let version = Command::new(program)
        .args(lead)
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    let mut key = program.as_os_str().to_string_lossy().into_owned();
    for w in lead {
        key.push(' ');
        key.push_str(&w.to_string_lossy());
    }
    let name = format!(
        "mpi-mod-{:016x}",
        fingerprint(&[
            ("compiler", &key),
            ("version", &version),
            ("mpi.f90", &text),
            ("mpif.h", &mpif)
        ])
    );
    let dir = in_cache(&name, "the mpi module", |dir| {
        if dir.join("mpi.mod").is_file() {
            return Ok(());
        }
        // Compiled in a directory of its own, then renamed: a concurrent wrapper sees the
        // whole module or none.
        let parent = dir.parent().unwrap_or(Path::new("."));
        std::fs::create_dir_all(parent)?;
        let work = parent.join(format!(".{name}.{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&work);
        std::fs::create_dir_all(&work)?;
        let out = Command::new(program)
            .args(lead)
            .env(NESTED, "1")
            .arg("-c")
            .arg("-I")
            .arg(include)
            .arg(&source)
            .arg("-J")
            .arg(&work)
            .arg("-o")
            .arg(work.join("mpi.o"))
            .output()?;
        if !out.status.success() {
            let _ = std::fs::remove_dir_all(&work);
            return Err(std::io::Error::other(format!(
                "{} failed to compile {}: {}",
                program.display(),
                source.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        match std::fs::rename(&work, dir) {
            Ok(()) => Ok(()),
            // Another wrapper finished first.
            Err(_) if dir.join("mpi.mod").is_file() => {
                let _ = std::fs::remove_dir_all(&work);
                Ok(())
            }
            Err(e) => {
                let _ = std::fs::remove_dir_all(&work);
                Err(e)
            }
        }
    })?;
    Ok((dir, version))
}

/// Whether the compiler is gfortran 10 or later, which rejects one buffer argument
/// passed different types in one file (every MPI program with implicit interfaces does)
/// unless told `-fallow-argument-mismatch`, as MPICH's and Open MPI's mpif.h users are.
fn allows_argument_mismatch(version: &str) -> bool {
    let first = version.lines().next().unwrap_or("");
    first.starts_with("GNU Fortran")
        && first
            .split_whitespace()
            .last()
            .and_then(|v| v.split('.').next()?.parse::<u32>().ok())
            .is_some_and(|major| major >= 10)
}

fn write_headers(dir: &Path, headers: &[(&str, &str)]) -> std::io::Result<()> {
    for (name, text) in headers {
        let path = dir.join(name);
        if std::fs::read_to_string(&path).is_ok_and(|s| s == *text) {
            continue;
        }
        std::fs::create_dir_all(dir)?;
        // Write then rename, so a concurrent wrapper never sees half a header.
        let tmp = dir.join(format!(".{name}.{}", std::process::id()));
        std::fs::write(&tmp, text)?;
        std::fs::rename(&tmp, &path)?;
    }
    Ok(())
}

fn uid() -> u32 {
    // SAFETY: getuid has no preconditions and cannot fail.
    unsafe { libc::getuid() }
}

/// `libbulkwire.a`: in `$BULKWIRE_LIB_DIR`, else next to this executable, else in
/// `../lib` beside it.
fn library() -> Result<PathBuf, String> {
    let mut dirs = Vec::new();
    if let Some(d) = std::env::var_os("BULKWIRE_LIB_DIR").filter(|d| !d.is_empty()) {
        dirs.push(PathBuf::from(d));
    }
    if let Ok(exe) = std::env::current_exe()
        && let Some(d) = exe.parent()
    {
        dirs.push(d.to_path_buf());
        dirs.push(d.join("../lib"));
    }
    for d in &dirs {
        let p = d.join(LIBRARY);
        if p.is_file() {
            // Without `bin/..`: build systems keep the path the MPI wrappers show.
            return Ok(p.canonicalize().unwrap_or(p));
        }
    }
    let looked: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
    Err(format!(
        "{LIBRARY} not found (looked in {}); build it with `cargo build --release` (it is \
         put next to the wrappers), install with `make install`, or set BULKWIRE_LIB_DIR",
        looked.join(", ")
    ))
}
