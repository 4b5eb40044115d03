//! `bspcc`: compile and link BSPlib programs against bulkwire, like the Oxford toolset's
//! `bspcc`.
//!
//! ```text
//! bspcc -O2 prog.c -o prog            compile and link
//! bspcc -c part.c && bspcc part.o main.c -o prog
//! bspcc -v ...                        print the compiler command first
//! bspcc --show ...                    only print it
//! ```
//!
//! Every argument goes to the C compiler (`$BSPCC_CC`, else `$CC`, else `cc`) untouched,
//! with the directory of `bsp.h` added to the include path and, when linking, the static
//! `libbulkwire.a` and the system libraries it needs added at the end. `bsp.h` is carried
//! inside this executable and written to a cache directory
//! (`$XDG_CACHE_HOME/bulkwire/include-<hash>`), so `bspcc` works from any directory;
//! `libbulkwire.a` is looked for next to this executable (where `cargo build --release`
//! puts both), or in `$BULKWIRE_LIB_DIR`.
//!
//! Options of the Oxford `bspcc` that tune its own library (`-flibrary-level N`,
//! `-fcombine-puts`, `-fcombine-puts-buffer N`, `-bspfifo N`) are accepted and ignored:
//! bulkwire always combines a superstep's puts per destination.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

const HEADER: &str = include_str!("../../../capi/include/bsp.h");
const LIBRARY: &str = "libbulkwire.a";
/// What a Rust static library needs from the system (`rustc --print native-static-libs`).
const SYSTEM_LIBS: &[&str] = &[
    "-lgcc_s",
    "-lutil",
    "-lrt",
    "-lpthread",
    "-lm",
    "-ldl",
    "-lc",
];
/// Oxford options with a value, and without, that only tune Oxford's library.
const IGNORED_WITH_VALUE: &[&str] = &["-flibrary-level", "-fcombine-puts-buffer", "-bspfifo"];
const IGNORED: &[&str] = &["-fcombine-puts", "-fnocombine-puts"];

fn main() -> ExitCode {
    match run(std::env::args_os().skip(1).collect()) {
        Ok(code) => code,
        Err(msg) => {
            eprintln!("bspcc: {msg}");
            ExitCode::from(2)
        }
    }
}

fn usage() -> &'static str {
    "usage: bspcc [-v] [--show] [compiler options] files... [-o output]\n\
     Compiles and links BSPlib programs against bulkwire (bsp.h, libbulkwire.a).\n\
     The compiler is $BSPCC_CC, else $CC, else cc; all options but -v/--show go to it."
}

fn run(args: Vec<OsString>) -> Result<ExitCode, String> {
    let mut verbose = false;
    let mut show = false;
    let mut pass: Vec<OsString> = Vec::new();
    let mut it = args.into_iter();
    while let Some(a) = it.next() {
        let s = a.to_string_lossy();
        match s.as_ref() {
            "-v" | "--verbose" => verbose = true,
            "--show" => show = true,
            "-h" | "--help" => {
                println!("{}", usage());
                return Ok(ExitCode::SUCCESS);
            }
            x if IGNORED.contains(&x) => {}
            x if IGNORED_WITH_VALUE.contains(&x) => {
                it.next();
            }
            x if IGNORED_WITH_VALUE
                .iter()
                .any(|o| x.starts_with(&format!("{o}="))) => {}
            _ => pass.push(a),
        }
    }
    if pass.is_empty() {
        return Err(format!("no input files\n{}", usage()));
    }
    let include = header_dir()?;
    let linking = !pass.iter().any(|a| {
        matches!(
            a.to_string_lossy().as_ref(),
            "-c" | "-S" | "-E" | "-M" | "-MM" | "-fsyntax-only"
        )
    });
    let cc = std::env::var_os("BSPCC_CC")
        .or_else(|| std::env::var_os("CC"))
        .filter(|c| !c.is_empty())
        .unwrap_or_else(|| "cc".into());
    let mut cmd = Command::new(&cc);
    let mut inc = OsString::from("-I");
    inc.push(&include);
    cmd.arg(inc).args(&pass);
    if linking {
        cmd.arg(library()?).args(SYSTEM_LIBS);
    }
    if verbose || show {
        let words: Vec<String> = std::iter::once(cmd.get_program())
            .chain(cmd.get_args())
            .map(|w| quote(&w.to_string_lossy()))
            .collect();
        eprintln!("{}", words.join(" "));
    }
    if show {
        return Ok(ExitCode::SUCCESS);
    }
    let status = cmd
        .status()
        .map_err(|e| format!("cannot run the C compiler {:?}: {e}", cc))?;
    Ok(match status.code() {
        Some(0) => ExitCode::SUCCESS,
        Some(c) => ExitCode::from(c.clamp(1, 255) as u8),
        None => ExitCode::from(1),
    })
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

/// FNV-1a of the header, naming its cache directory (a new header, a new directory).
fn fingerprint(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ b as u64).wrapping_mul(0x0100_0000_01b3)
    })
}

/// A directory holding this version's `bsp.h`, written there on first use.
fn header_dir() -> Result<PathBuf, String> {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|v| !v.is_empty())
                .map(|h| Path::new(&h).join(".cache"))
        });
    let name = format!("include-{:016x}", fingerprint(HEADER));
    let mut tried = Vec::new();
    let tmp = std::env::temp_dir().join(format!("bulkwire-{}", unsafe_uid()));
    for dir in base
        .map(|b| b.join("bulkwire").join(&name))
        .into_iter()
        .chain(std::iter::once(tmp.join(&name)))
    {
        match write_header(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) => tried.push(format!("{}: {e}", dir.display())),
        }
    }
    Err(format!(
        "cannot write bsp.h to a cache directory ({})",
        tried.join("; ")
    ))
}

fn write_header(dir: &Path) -> std::io::Result<()> {
    let path = dir.join("bsp.h");
    if std::fs::read_to_string(&path).is_ok_and(|s| s == HEADER) {
        return Ok(());
    }
    std::fs::create_dir_all(dir)?;
    // Write then rename, so a concurrent bspcc never sees half a header.
    let tmp = dir.join(format!(".bsp.h.{}", std::process::id()));
    std::fs::write(&tmp, HEADER)?;
    std::fs::rename(&tmp, &path)
}

fn unsafe_uid() -> u32 {
    // SAFETY: getuid has no preconditions and cannot fail.
    unsafe { libc::getuid() }
}

/// `libbulkwire.a`: in `$BULKWIRE_LIB_DIR`, else next to this executable.
fn library() -> Result<PathBuf, String> {
    let mut dirs = Vec::new();
    if let Some(d) = std::env::var_os("BULKWIRE_LIB_DIR").filter(|d| !d.is_empty()) {
        dirs.push(PathBuf::from(d));
    }
    if let Ok(exe) = std::env::current_exe()
        && let Some(d) = exe.parent()
    {
        dirs.push(d.to_path_buf());
    }
    for d in &dirs {
        let p = d.join(LIBRARY);
        if p.is_file() {
            return Ok(p);
        }
    }
    let looked: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
    Err(format!(
        "{LIBRARY} not found (looked in {}); build it with `cargo build --release` (it is \
         put next to bspcc) or set BULKWIRE_LIB_DIR",
        looked.join(", ")
    ))
}
