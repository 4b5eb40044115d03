//! The documents as a user tries them: every C snippet of `README.md` and `docs/*.md`
//! builds with `bspcc`, the `bulkwire.h` example `examples/c/hello_p2p.c` builds and runs,
//! and every repository file a shell line names exists. The Rust snippets are doctests
//! of `bulkwire-config` (`cargo test -p bulkwire-config --doc`).

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const BSPCC: &str = env!("CARGO_BIN_EXE_bspcc");
const BSPRUN: &str = env!("CARGO_BIN_EXE_bsprun");

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `README.md` and `docs/*.md`, with their paths relative to the repository.
fn documents() -> Vec<(String, String)> {
    let mut names = vec!["README.md".to_string()];
    let mut docs: Vec<String> = std::fs::read_dir(repo().join("docs"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".md"))
        .map(|n| format!("docs/{n}"))
        .collect();
    docs.sort();
    names.extend(docs);
    names
        .into_iter()
        .map(|n| {
            let text = std::fs::read_to_string(repo().join(&n)).unwrap();
            (n, text)
        })
        .collect()
}

/// Runs `c` with no `BULKWIRE_` variables, killed after 60 s; its output.
fn run(mut c: Command, what: &str) -> Output {
    for (k, _) in std::env::vars() {
        if k.starts_with("BULKWIRE_") {
            c.env_remove(k);
        }
    }
    let mut child = c
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let o = child.wait_with_output().unwrap();
    assert!(
        o.status.success(),
        "{what}: {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    o
}

fn out_dir() -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join("docs");
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The fenced blocks of `text` whose info string starts with `lang`: (first line, body).
fn blocks(text: &str, lang: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut open: Option<(usize, bool, String)> = None;
    for (i, line) in text.lines().enumerate() {
        if let Some(info) = line.strip_prefix("```") {
            match open.take() {
                Some((start, true, body)) => out.push((start, body)),
                Some(_) => {}
                None => {
                    let first = info.split(',').next().unwrap_or("").trim();
                    open = Some((i + 2, first == lang, String::new()));
                }
            }
        } else if let Some((_, _, body)) = open.as_mut() {
            body.push_str(line);
            body.push('\n');
        }
    }
    out
}

#[test]
fn c_snippets_of_the_documents_build_with_bspcc() {
    let dir = out_dir();
    let mut built = 0;
    for (doc, text) in documents() {
        for (line, body) in blocks(&text, "c") {
            let name = format!("{}-{line}", doc.replace(['/', '.'], "_"));
            let src = dir.join(format!("{name}.c"));
            std::fs::write(&src, &body).unwrap();
            // A whole program is linked; a fragment (declarations) is compiled only.
            let mut c = Command::new(BSPCC);
            c.args(["-std=c11", "-Wall", "-Wextra", "-Werror"])
                .arg(&src);
            if body.contains("int main(") {
                c.arg("-o").arg(dir.join(&name));
            } else {
                c.arg("-c").arg("-o").arg(dir.join(format!("{name}.o")));
            }
            run(c, &format!("bspcc on the C snippet at {doc}:{line}"));
            built += 1;
        }
    }
    // docs/collectives.md has two; a parser that finds none checks nothing.
    assert!(built >= 2, "only {built} C snippets found");
}

/// Every document with a Rust snippet is one whose snippets are doctests
/// (`crates/config/build.rs`), so none is left out of `cargo test`.
#[test]
fn rust_snippets_of_the_documents_are_doctests() {
    let build = include_str!("../../config/build.rs");
    for (doc, text) in documents() {
        if blocks(&text, "rust").is_empty() {
            continue;
        }
        let stem = doc
            .strip_prefix("docs/")
            .and_then(|d| d.strip_suffix(".md"))
            .unwrap_or_else(|| panic!("{doc} has Rust snippets outside docs/"));
        assert!(
            build.contains(&format!("\"{stem}\"")),
            "{doc}'s Rust snippets are not doctests: add it to crates/config/build.rs"
        );
    }
}

#[test]
fn hello_p2p_builds_and_runs_self_spawned_and_under_bsprun() {
    let prog = out_dir().join("hello_p2p");
    let mut c = Command::new(BSPCC);
    c.args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-O2"])
        .arg(repo().join("examples/c/hello_p2p.c"))
        .arg("-o")
        .arg(&prog);
    run(c, "bspcc hello_p2p.c");

    let mut c = Command::new(&prog);
    c.arg("3");
    let o = run(c, "hello_p2p 3");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("hello_p2p ok: 3 of 3 greetings"), "{out}");
    for r in 0..3 {
        let left = (r + 2) % 3;
        let line = format!("rank {r} of 3: \"hello from {left}\"");
        assert!(out.contains(&line), "no {line:?} in:\n{out}");
    }

    let mut c = Command::new(BSPRUN);
    c.args(["-n", "4"]).arg(&prog);
    let o = run(c, "bsprun -n 4 hello_p2p");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("hello_p2p ok: 4 of 4 greetings"), "{out}");
    assert_eq!(out.lines().filter(|l| l.starts_with("rank ")).count(), 4);
}

/// The repository paths named by the shell lines of `text`: lines of fenced blocks marked
/// `sh` (or unmarked) and of indented code blocks.
fn named_paths(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut fence: Option<bool> = None;
    for (i, line) in text.lines().enumerate() {
        if let Some(info) = line.strip_prefix("```") {
            fence = match fence {
                Some(_) => None,
                None => Some(matches!(
                    info.split(',').next().unwrap_or("").trim(),
                    "" | "sh" | "bash" | "shell" | "console"
                )),
            };
            continue;
        }
        let indented = line.starts_with("    ") && !line.trim_start().starts_with(['-', '|']);
        if !fence.unwrap_or(indented) {
            continue;
        }
        for word in line.split(|c: char| c.is_whitespace() || "'\"()=,;:`[]".contains(c)) {
            let word = word.trim_end_matches('.');
            let repo_path = ["examples/", "crates/", "apps/", "docs/"]
                .iter()
                .any(|p| word.starts_with(p));
            if repo_path && !word.contains(['*', '<', '$']) {
                out.push((i + 1, word.to_string()));
            }
        }
    }
    out
}

#[test]
fn shell_lines_of_the_documents_name_files_that_exist() {
    let mut missing = Vec::new();
    let mut checked = 0;
    for (doc, text) in documents() {
        for (line, path) in named_paths(&text) {
            checked += 1;
            if !repo().join(&path).exists() {
                missing.push(format!("{doc}:{line}: {path}"));
            }
        }
    }
    assert!(missing.is_empty(), "missing:\n{}", missing.join("\n"));
    assert!(checked >= 5, "only {checked} paths found");
}

#[test]
fn the_path_finder_sees_fenced_and_indented_shell_lines() {
    let text = "text crates/not/code.rs\n\n    cc examples/c/a.c -o a\n\n```sh\n\
                bspcc 'crates/x.c' docs/y.md.\n```\n```rust\nlet p = \"crates/z\";\n```\n";
    let got: Vec<String> = named_paths(text).into_iter().map(|(_, p)| p).collect();
    assert_eq!(got, ["examples/c/a.c", "crates/x.c", "docs/y.md"]);
}
