//! The Rust snippets of the documents, for the crate's doctests (`src/lib.rs`, `mod
//! docs`): rustdoc takes every code block of a Markdown text as Rust, the documents'
//! indented shell lines too, so each document is written to `OUT_DIR` with only its
//! fenced ```rust blocks kept and every other line blank (line numbers stay the
//! document's).

use std::path::Path;

const DOCS: &[&str] = &["p2p", "collectives", "bsp", "configuration", "launch"];

fn main() {
    let out = std::env::var_os("OUT_DIR").expect("OUT_DIR");
    let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs");
    for name in DOCS {
        let src = docs.join(format!("{name}.md"));
        println!("cargo::rerun-if-changed={}", src.display());
        let text = std::fs::read_to_string(&src).expect("a document");
        let mut kept = String::new();
        // Inside a fence: whether it is a Rust block.
        let mut open: Option<bool> = None;
        for line in text.lines() {
            let keep = match (line.strip_prefix("```"), open) {
                (Some(info), None) => {
                    let rust = info.split(',').next() == Some("rust");
                    open = Some(rust);
                    rust
                }
                (Some(_), Some(rust)) => {
                    open = None;
                    rust
                }
                (None, inside) => inside == Some(true),
            };
            if keep {
                kept.push_str(line);
            }
            kept.push('\n');
        }
        std::fs::write(Path::new(&out).join(format!("{name}.md")), kept).expect("OUT_DIR");
    }
}
