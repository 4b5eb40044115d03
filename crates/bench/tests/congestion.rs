//! Congestion control on a simulated switch with finite port buffers (64 KiB, 1500-byte
//! frames, hosts sending at 10 Gb/s into 100 Mb/s ports, as on a tc-shaped bridge): every
//! protocol under the real BSP layer, with `BULKWIRE_CC` on and off. With it on, each
//! holds near the links' bound and loses few packets; off, the papers' protocols are
//! reproduced as they collapse. Deterministic: each run is a function of its seed.

use bulkwire_bench::scale::{self, Cluster, Steps};
use bulkwire_bsp::Config;

/// 60 KB per pair, as in the RMPP paper's all-to-all and the switch.
const SIZE: usize = 60_000;

fn exchange(protocol: &str, cc: bool, p: u32, gbps: f64, steps: u32) -> Steps {
    let c = Cluster::switched(gbps, protocol, cc);
    scale::exchange_steps(&c, p, SIZE, steps).unwrap_or_else(|e| panic!("{protocol}, cc {cc}: {e}"))
}

fn show(what: &str, s: &Steps) -> String {
    format!(
        "{what}: median {:.1} ms ({:.2}x the bound {:.1} ms), worst {:.1} ms, {} data \
         packets, {} switch drops ({:.2} %)",
        s.median() / 1e6,
        s.median() / s.bound_ns,
        s.bound_ns / 1e6,
        s.worst() / 1e6,
        s.packets.data,
        s.packets.switch_drops,
        100.0 * s.drop_rate()
    )
}

/// 8 nodes, 100 Mb/s, 64 KiB port buffers, 60 KB per pair, five supersteps.
///
/// - gbn with the controller holds the links' bound within 1.5x and loses under 1 % of
///   its packets; without it, go-back-N resends whole windows into full ports and takes
///   more than twice as long.
/// - holefill stays the paper's under either setting (its window is on only with
///   `BULKWIRE_CC=all`: with it, it lost a seventh as much but took 2.05x the bound
///   against 1.39x): within 1.5x the bound, at half its packets lost.
/// - rmpp collapses without it (over half its packets lost, streaming every message
///   whole after its Cts); with it the receiver grants data to a few packets' worth at a
///   time, in the order it accepted the messages: within 1.2x the bound, under 0.5 %
///   lost, and in under half the time.
#[test]
fn total_exchange_on_a_100_mbit_switch() {
    for protocol in ["gbn", "holefill", "rmpp"] {
        let on = exchange(protocol, true, 8, 0.1, 5);
        let off = exchange(protocol, false, 8, 0.1, 5);
        let (a, b) = (show("on", &on), show("off", &off));
        eprintln!("{protocol}: {a}\n{protocol}: {b}");
        let both = format!("{protocol}:\n{a}\n{b}");
        match protocol {
            "gbn" => {
                assert!(on.median() <= 1.5 * on.bound_ns, "{both}");
                assert!(on.drop_rate() < 0.01, "{both}");
                assert!(off.median() >= 2.0 * on.median(), "{both}");
            }
            "holefill" => {
                assert!(on.median() <= 1.5 * on.bound_ns, "{both}");
                assert_eq!(on, off, "{both}");
            }
            _ => {
                assert!(off.drop_rate() > 0.5, "{both}");
                assert!(on.median() <= 1.2 * on.bound_ns, "{both}");
                assert!(on.drop_rate() < 0.005, "{both}");
                assert!(off.median() >= 2.0 * on.median(), "{both}");
            }
        }
    }
}

/// Why holefill takes 1.39x the bound on this switch, and what holds it near 1.0x.
///
/// Its own window (256 packets, 4 MiB) takes every message whole, so the BSP layer hands
/// all seven messages of the latin square to it at once and a host sending at 10 Gb/s
/// puts them on the wire within 0.4 ms: every port receives seven senders' bursts
/// together (about 290 packets against 43 of buffer) and drops half of them, whatever
/// order the schedule gave. Hole reports repair that within the superstep (1.39x, 49 %
/// of the data packets lost, at this seed). The schedule works when the sender's
/// packets leave at the link rate, one destination after the other:
///
/// - paced by the BSP layer at the link rate (`BULKWIRE_BSP_RATE`, the BSPlib paper's
///   remedy): 1.05x, no packet lost;
/// - hosts whose own egress runs at the link rate, as on the emulated switch of `bwbench
///   fabric`, with no pacing: 1.01x, no packet lost (one superstep of five at 1.74x,
///   resending packets that were only queued).
///
/// Limits, at the fixed seed: the default within 1.5x and under 55 % lost; each of the
/// other two within 1.1x and under 0.5 % lost.
#[test]
fn holefill_holds_the_bound_when_its_packets_leave_at_the_link_rate() {
    let c = Cluster::switched(0.1, "holefill", true);
    let burst = exchange("holefill", true, 8, 0.1, 5);
    let paced = scale::exchange_steps_with(&c, &Config::default().with_rate(c.pace()), 8, SIZE, 5)
        .unwrap_or_else(|e| panic!("paced: {e}"));
    let line = scale::exchange_steps(&c.clone().hosts_at_line_rate(), 8, SIZE, 5)
        .unwrap_or_else(|e| panic!("hosts at line rate: {e}"));
    let all = format!(
        "{}\n{}\n{}",
        show("10 Gb/s hosts", &burst),
        show("paced", &paced),
        show("hosts at line rate", &line)
    );
    eprintln!("holefill:\n{all}");
    assert!(burst.median() <= 1.5 * burst.bound_ns, "{all}");
    assert!(burst.drop_rate() < 0.55, "{all}");
    for s in [&paced, &line] {
        assert!(s.median() <= 1.1 * s.bound_ns, "{all}");
        assert!(s.drop_rate() < 0.005, "{all}");
    }
}

/// rmpp at 16 nodes, 100 Mb/s: 15 senders' Rts heads and the grants share each port,
/// and a grant's Cts waits behind data in its sender's port. The receiver's timers wait
/// out that queue (at the delivery rate it measures) before they take a silence for a
/// loss or a stall; when they did not, half the packets were lost (4.60x the bound).
#[test]
fn rmpp_grants_hold_the_bound_at_16_nodes() {
    let on = exchange("rmpp", true, 16, 0.1, 5);
    let a = show("on", &on);
    eprintln!("rmpp 16: {a}");
    assert!(on.median() <= 1.2 * on.bound_ns, "{a}");
    assert!(on.drop_rate() < 0.005, "{a}");
}

/// p - 1 senders into one 64 KiB port at p = 64, 16 KB each (a gather). A window cannot
/// go below one packet, and 63 packets do not fit the port's 43: the first flight of
/// every superstep overflows whatever a sender's window does. What gbn's controller does
/// is recover without flooding: with it, gbn sends a third of the packets and finishes
/// in under half the time. rmpp's receiver grants (as Homa's) let few senders send at a
/// time after the Rts: a fifth of the packets, in under two thirds of the time. holefill
/// is the same either way.
#[test]
fn incast_at_p_64() {
    for protocol in ["holefill", "gbn", "rmpp"] {
        let run = |cc| {
            let c = Cluster::switched(0.1, protocol, cc);
            scale::incast_steps(&c, 64, 16_000, 3)
                .unwrap_or_else(|e| panic!("{protocol}, cc {cc}: {e}"))
        };
        let (on, off) = (run(true), run(false));
        let (a, b) = (show("incast on", &on), show("incast off", &off));
        eprintln!("{protocol}: {a}\n{protocol}: {b}");
        if protocol == "gbn" {
            assert!(
                on.packets.data * 3 <= off.packets.data,
                "{protocol}:\n{a}\n{b}"
            );
            assert!(on.median() * 2.0 <= off.median(), "{protocol}:\n{a}\n{b}");
        } else if protocol == "rmpp" {
            assert!(
                on.packets.data * 5 <= off.packets.data,
                "{protocol}:\n{a}\n{b}"
            );
            assert!(on.median() * 1.5 <= off.median(), "{protocol}:\n{a}\n{b}");
        } else {
            assert_eq!(on, off, "{protocol}:\n{a}\n{b}");
        }
    }
}

/// Same seed, same run, with the controller deciding.
#[test]
fn runs_are_functions_of_their_seed() {
    let a = exchange("gbn", true, 8, 0.1, 2);
    let b = exchange("gbn", true, 8, 0.1, 2);
    assert_eq!(a, b);
}

/// The table of docs/performance.md ("Congestion control on the simulated switch"):
/// `cargo test --release -p bulkwire-bench --test congestion -- --ignored --nocapture`.
#[test]
#[ignore = "prints the table of docs/performance.md; slow"]
fn table() {
    println!(
        "| protocol | nodes | link | hosts | cc | median superstep | vs bound | worst | drops / data packets |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for (p, gbps, hosts) in [
        (8, 0.1, ""),
        (16, 0.1, ""),
        (8, 1.0, ""),
        (16, 1.0, ""),
        (8, 0.1, "line rate"),
        (16, 0.1, "line rate"),
        (8, 1.0, "line rate"),
        (8, 0.1, "paced"),
        (16, 0.1, "paced"),
        (8, 1.0, "paced"),
    ] {
        for protocol in ["holefill", "gbn", "rmpp"] {
            for cc in [true, false] {
                let steps = 5;
                let mut c = Cluster::switched(gbps, protocol, cc);
                let mut bsp = Config::default();
                match hosts {
                    "line rate" => c = c.hosts_at_line_rate(),
                    "paced" => bsp = bsp.with_rate(c.pace()),
                    _ => {}
                }
                let row = match scale::exchange_steps_with(&c, &bsp, p, SIZE, steps) {
                    Ok(s) => format!(
                        "{:.1} ms | {:.2}x | {:.1} ms | {} / {} ({:.2} %)",
                        s.median() / 1e6,
                        s.median() / s.bound_ns,
                        s.worst() / 1e6,
                        s.packets.switch_drops + s.packets.receiver_drops,
                        s.packets.data,
                        100.0 * s.drop_rate()
                    ),
                    Err(e) => format!("failed: {e} | | |"),
                };
                println!(
                    "| {protocol} | {p} | {} Mb/s | {} | {} | {row} |",
                    gbps * 1000.0,
                    if hosts.is_empty() { "10 Gb/s" } else { hosts },
                    if cc { "on" } else { "off" }
                );
            }
        }
    }
}
