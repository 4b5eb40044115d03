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
