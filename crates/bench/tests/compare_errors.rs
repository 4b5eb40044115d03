//! The comparison of every stack and the error-rate experiment, small: they run, measure
//! something plausible, and show what the seeds say.

use bulkwire_bench::compare::{self, CompareConfig, STACKS};
use bulkwire_bench::errors::{ErrorRateConfig, sim_error_rate, to_text};
use bulkwire_bench::netns::tcp_error_rate;
use bulkwire_protocol::SEC;

#[test]
fn every_stack_is_measured_on_equal_terms() {
    let cfg = CompareConfig {
        latency_warmup: 20,
        latency_iters: 200,
        bandwidth_sizes: vec![64 << 10],
        window: 16,
        bandwidth_warmup: 1,
        bandwidth_reps: 3,
        ..CompareConfig::default()
    };
    let c = compare::compare(&cfg).unwrap();
    eprintln!("{}", c.to_text());
    assert_eq!(c.latency.len(), STACKS.len());
    for r in &c.latency {
        assert!(r.half_rtt.min > 0.0 && r.half_rtt.max < 1.0, "{r:?}");
        assert!(r.packets_per_message > 0.0, "{r:?}");
    }
    let pk = |s: &str| {
        c.latency
            .iter()
            .find(|r| r.stack == s)
            .unwrap()
            .packets_per_message
    };
    // Utopia sends one packet per message; rmpp adds its Fin and Close (seed 000 counted
    // three times as many packets for rmpp as for TCP).
    assert!((pk("utopia") - 1.0).abs() < 0.01);
    assert!((pk("rmpp") - 3.0).abs() < 0.2, "rmpp {}", pk("rmpp"));
    for r in &c.bandwidth {
        assert!(r.rate > 0.0);
        assert!(r.fraction_of_utopia.is_some());
    }
}

#[test]
fn rmpp_degrades_past_a_bit_error_threshold() {
    let cfg = ErrorRateConfig {
        bers: vec![0.0, 1e-7, 1e-6, 1e-5],
        requests: 40,
        limit: 30 * SEC,
        ..ErrorRateConfig::default()
    };
    let curves: Vec<_> = ["rmpp", "gbn", "holefill"]
        .iter()
        .map(|p| sim_error_rate(p, &cfg).unwrap())
        .collect();
    eprintln!("{}", to_text(&curves));
    for c in &curves {
        assert_eq!(c.points.len(), 4);
        let clean = &c.points[0];
        assert_eq!((clean.answered, clean.damaged), (40, 0));
        assert!(c.points[3].damaged > 0);
    }
    let rmpp = &curves[0];
    assert!(rmpp.threshold(2.0).is_some_and(|b| b <= 1e-5), "{rmpp:?}");
    // Deterministic: the same configuration gives the same curve.
    let again = sim_error_rate("rmpp", &cfg).unwrap();
    for (a, b) in again.points.iter().zip(&rmpp.points) {
        assert_eq!((a.answered, a.retransmits), (b.answered, b.retransmits));
        assert_eq!(a.wait.map(|w| w.mean), b.wait.map(|w| w.mean));
    }
    assert!(sim_error_rate("utopia", &cfg).is_err());
}

/// Kernel TCP between two network namespaces with random drops; skipped (with a note)
/// where root, `ip` or `iptables` are missing.
#[test]
fn tcp_under_bit_errors_where_the_tools_exist() {
    let cfg = ErrorRateConfig {
        bers: vec![0.0, 1e-6],
        requests: 20,
        limit: 20 * SEC,
        ..ErrorRateConfig::default()
    };
    match tcp_error_rate(&cfg) {
        Ok(c) => {
            eprintln!("{}", to_text(std::slice::from_ref(&c)));
            assert_eq!(c.points[0].answered, 20);
            assert_eq!(c.points[0].damaged, 0);
        }
        Err(e) => eprintln!("skipped: {e}"),
    }
}
