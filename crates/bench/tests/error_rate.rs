//! The error-rate experiment, small: it runs, measures something plausible, and shows
//! what Riesen & Maccabe report.

use bulkwire_bench::errors::{ErrorRateConfig, sim_error_rate, to_text};
use bulkwire_bench::netns::tcp_error_rate;
use bulkwire_protocol::SEC;

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

/// Kernel TCP between two network namespaces joined by a relay that drops frames as bit
/// errors would. It needs the right to make namespaces and the TUN driver: as root with
/// /dev/net/tun it must run; elsewhere it must say which is missing.
#[test]
fn tcp_under_bit_errors_between_namespaces() {
    let cfg = ErrorRateConfig {
        bers: vec![0.0, 1e-6],
        requests: 20,
        limit: 20 * SEC,
        ..ErrorRateConfig::default()
    };
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let tun = std::path::Path::new("/dev/net/tun").exists();
    match tcp_error_rate(&cfg) {
        Ok(c) => {
            eprintln!("{}", to_text(std::slice::from_ref(&c)));
            assert_eq!(c.points.len(), 2);
            assert_eq!((c.points[0].answered, c.points[0].damaged), (20, 0));
            // At 1e-6 a 9 KB frame fails about 7 % of the time, and each reply takes eight:
            // the relay drops some of them (about 9 expected), and TCP recovers every one.
            let noisy = &c.points[1];
            assert_eq!(noisy.answered, 20, "{noisy:?}");
            assert!(noisy.damaged > 0, "{noisy:?}");
        }
        Err(e) if !(root && tun) => {
            eprintln!("not measured here: {e}");
            assert!(
                e.contains("CAP_SYS_ADMIN") || e.contains("/dev/net/tun"),
                "{e}"
            );
        }
        Err(e) => panic!("as root with /dev/net/tun: {e}"),
    }
}
