//! The real BSP messaging layer on simulated clusters: every process runs `bsp_sync` as a
//! thread of the deterministic scheduler, in virtual time. Each program checks its data
//! (every word, byte and key); the runs are repeated to check they are functions of
//! their seed.

use bulkwire_bench::scale::{self, Cluster, Proc};
use bulkwire_bsp::{Config, Schedule};

/// Empty supersteps, h-relations, a total exchange and a sample sort, one after the
/// other in one job: what each found, and when each process finished.
type Found = (
    u64,
    u64,
    scale::Packets,
    Vec<u64>,
    (u64, u64, scale::Packets),
    usize,
);

fn suite(p: u32, exchange: usize) -> bulkwire_engine::simproc::SimOutcome<Found> {
    let cluster = Cluster::ethernet25();
    let cfg = Config {
        rate: Some(cluster.pace()),
        chunk: Some(64 << 10),
        ..Config::default()
    };
    scale::run(&cluster, p, |t| {
        let mut b = Proc::new(t, cfg.clone());
        let t0 = b.now();
        let (empty, packets) = scale::empty_body(&mut b, 4)?;
        let h = scale::h_body(&mut b, &[0, 16, 64], 1)?;
        let x = scale::exchange_body(&mut b, exchange, false)?;
        let keys = scale::sort_body(&mut b, 64)?;
        b.end()?;
        Ok((b.now() - t0, empty, packets, h, x, keys))
    })
    .unwrap()
}

#[test]
fn bsp_at_p_256_is_checked_and_a_function_of_its_seed() {
    let p = 256;
    let a = suite(p, 12 << 10);
    // An empty superstep is the barrier alone: ceil(log2 p) = 8 one-packet messages per
    // process, not one per process.
    let (_, _, packets, ..) = &a.results[0];
    let all: u64 = a.results.iter().map(|r| r.2.data).sum();
    assert_eq!(all, 4 * p as u64 * 8, "{packets:?}");
    // Every key went somewhere, in order (pid 0 checked the order and the sum).
    let keys: usize = a.results.iter().map(|r| r.5).sum();
    assert_eq!(keys, 64 * p as usize);
    // The exchange moved (p - 1) * 12 KiB (two packets) per process without a drop.
    let x: Vec<_> = a.results.iter().map(|r| r.4.2).collect();
    assert_eq!(
        x.iter()
            .map(|k| k.switch_drops + k.receiver_drops)
            .sum::<u64>(),
        0
    );
    assert!(x.iter().map(|k| k.data).sum::<u64>() >= (p * (p - 1) * 2) as u64);
    // Same seed, same run: every hand-over between processes, every time, every count.
    let b = suite(p, 12 << 10);
    assert_eq!(a.trace, b.trace);
    assert_eq!(a.handovers, b.handovers);
    assert_eq!(a.finish, b.finish);
    assert_eq!(a.results, b.results);
    assert_eq!(a.net, b.net);
}

/// 64 KiB from every process to every other, each pair's bytes in its own place and all
/// checked: latin square with pacing loses nothing and stays near the links' bound, and no
/// receiver prods a sender whose turn has not come; pid order floods one receiver at a
/// time, whose switch port drops, and holefill recovers.
#[test]
fn total_exchange_of_64_kib_by_schedule() {
    let c = Cluster::ethernet25();
    let (latin, _) =
        scale::total_exchange(&c, 64, 64 << 10, Schedule::Latin, true, u64::MAX).unwrap();
    assert_eq!(latin.packets.switch_drops + latin.packets.receiver_drops, 0);
    assert!(latin.ratio() < 1.2, "{latin:?}");
    // Waiting on every sender at once made 4736 prods here.
    assert!(latin.packets.prods < 64, "{latin:?}");
    let (pid, _) = scale::total_exchange(&c, 64, 64 << 10, Schedule::Pid, false, u64::MAX).unwrap();
    assert!(pid.packets.switch_drops > 0, "{pid:?}");
    assert!(
        pid.packets.retransmits >= pid.packets.switch_drops,
        "{pid:?}"
    );
    assert!(
        pid.ratio() > 2.0 * latin.ratio(),
        "{pid:?} against {latin:?}"
    );
}

/// The empty superstep grows with log p: p = 16, 64, 256 add the same time per factor 4
/// (two rounds of the barrier), to within a tenth.
#[test]
fn empty_superstep_grows_with_log_p() {
    let c = Cluster::ethernet25();
    let l: Vec<f64> = [16, 64, 256]
        .iter()
        .map(|&p| scale::empty(&c, p, 4).unwrap().0)
        .collect();
    let (d1, d2) = (l[1] - l[0], l[2] - l[1]);
    assert!(d1 > 0.0 && (d2 - d1).abs() < 0.1 * d1, "{l:?}");
}

/// A two-tier fat tree with full bisection carries the latin-square exchange as one
/// switch does; pid order still drops.
#[test]
fn fat_tree_exchange() {
    let c = Cluster::fat_tree(8);
    let (latin, _) = scale::total_exchange(&c, 64, 32 << 10, Schedule::Latin, true, 0).unwrap();
    assert_eq!(latin.packets.switch_drops, 0);
    assert!(latin.ratio() < 1.5, "{latin:?}");
}
