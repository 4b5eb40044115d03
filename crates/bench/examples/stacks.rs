//! Seed 000's comparison on this machine: every stack's latency table and bandwidth as a
//! fraction of utopia's on loopback, then the client/server error-rate experiment
//! (simulated network for the datagram protocols, kernel TCP between network namespaces
//! when run as root with `ip` and `iptables`).
//!
//! `cargo run --release -p bulkwire-bench --example stacks [quick]`

use bulkwire_bench::compare::{CompareConfig, compare};
use bulkwire_bench::errors::{ErrorRateConfig, sim_error_rate, to_text};
use bulkwire_bench::netns::tcp_error_rate;
use bulkwire_protocol::SEC;

fn main() {
    let quick = std::env::args().any(|a| a == "quick");
    let mut cfg = CompareConfig::default();
    if quick {
        cfg.latency_iters = 300;
        cfg.bandwidth_reps = 3;
    }
    match compare(&cfg) {
        Ok(c) => println!("{}", c.to_text()),
        Err(e) => eprintln!("comparison failed: {e}"),
    }
    let mut ecfg = ErrorRateConfig::default();
    if quick {
        ecfg.requests = 50;
    }
    let mut curves = Vec::new();
    for p in ["rmpp", "gbn", "holefill"] {
        match sim_error_rate(p, &ecfg) {
            Ok(c) => curves.push(c),
            Err(e) => eprintln!("{p}: {e}"),
        }
    }
    println!(
        "simulated network (10 Gb/s, 9000-byte MTU, 2 us hops), request {} B, reply {} B:",
        ecfg.request_size, ecfg.reply_size
    );
    println!("{}", to_text(&curves));
    let tcfg = ErrorRateConfig {
        bers: vec![0.0, 1e-7, 1e-6, 3e-6, 1e-5, 3e-5],
        requests: if quick { 30 } else { 100 },
        limit: 20 * SEC,
        ..ecfg
    };
    match tcp_error_rate(&tcfg) {
        Ok(c) => println!(
            "kernel TCP between network namespaces (veth, MTU 9000, iptables random drops):\n{}",
            to_text(&[c])
        ),
        Err(e) => eprintln!("tcp: {e}"),
    }
}
