//! Programs that drive each layer of bulkwire in real processes, for the process tests in
//! `tests/` (and by hand: each prints its usage). They sit above every layer because they
//! read their settings from the environment, as programs do, through `bulkwire-config`:
//!
//! - `launch-probe`: launching, rendezvous, failure notices, binding;
//! - `p2p-probe`: point-to-point messaging scenarios, ping-pong and bandwidth;
//! - `bsp-probe`: the safe Rust BSPlib API;
//! - `coll-probe`: every collective against a serial reference, and failures.

use std::io::Write;

/// This process's settings from its environment; a bad variable ends the probe with the
/// reason, as it ends a program.
pub fn settings() -> bulkwire_config::Settings {
    bulkwire_config::Settings::from_env().unwrap_or_else(|e| {
        let name = std::env::args().next().unwrap_or_default();
        let _ = writeln!(std::io::stderr(), "{name}: {e}");
        std::process::exit(1)
    })
}

/// Prints one line of the probe's output at once (the tests read it as it comes).
pub fn say(line: String) {
    let mut o = std::io::stdout().lock();
    let _ = o.write_all(format!("{line}\n").as_bytes());
    let _ = o.flush();
}

/// Ends the probe with exit code 2 and `msg`, after the probe's name.
pub fn die(msg: impl std::fmt::Display) -> ! {
    let arg0 = std::env::args().next().unwrap_or_default();
    let name = std::path::Path::new(&arg0)
        .file_name()
        .map_or_else(|| arg0.clone(), |n| n.to_string_lossy().into_owned());
    eprintln!("{name}: {msg}");
    std::process::exit(2)
}

/// Argument `a` as a number, or the end of the probe saying that `what` was expected.
pub fn num<T: std::str::FromStr>(a: Option<&String>, what: &str) -> T {
    a.and_then(|s| s.parse().ok())
        .unwrap_or_else(|| die(format!("expected {what}")))
}
