//! Collectives between real processes: jobs of `coll-probe` started by self-spawn (the
//! launcher library behind `bsprun`), over the network cache, over p2p on UDP, and on UDP
//! with 5% loss; p = 1 to 8; 64 MiB buffers; a killed and a stopped peer. Bounded in time,
//! with no process left behind.
//!
//! The matrix runs small data everywhere and a few representative big cases, to keep the
//! suite to a couple of minutes on two cores.

use std::time::Duration;

use bulkwire_launch::testing::{self, Out, field};

const PROBE: &str = env!("CARGO_BIN_EXE_coll-probe");
const LIMIT: Duration = Duration::from_secs(120);

/// Runs the probe with `args` and `env` (see [`testing::probe`]).
fn probe(args: &[&str], env: &[(&str, &str)], limit: Duration) -> Out {
    testing::probe(PROBE, args, env, limit)
}

/// Every rank passed the suite, over the network cache or not as expected.
fn suite(n: u32, sizes: &[&str], env: &[(&str, &str)], netcache: bool) -> Out {
    let ns = n.to_string();
    let mut args = vec!["-n", &ns, "suite"];
    args.extend_from_slice(sizes);
    let out = probe(&args, env, LIMIT);
    assert_eq!(out.code, Some(0), "p={n} {env:?}: {out:#?}");
    let lines = out.lines("suite ");
    assert_eq!(lines.len(), n as usize, "{out:#?}");
    for l in &lines {
        assert!(field::<usize>(l, "checks") > 500, "{l}");
        let nc: bool = field(l, "netcache");
        assert_eq!(nc, netcache && n > 1, "{l}");
    }
    eprintln!("p={n} {env:?}: {:?}", out.elapsed);
    out
}

const SIZES: &[&str] = &["0", "1", "7", "100", "5000", "70000"];

/// Calls that went by single copy, over all ranks.
fn single_copies(out: &Out) -> usize {
    out.lines("suite ")
        .iter()
        .map(|l| field::<usize>(l, "singlecopy"))
        .sum()
}

/// p = 1 to 8 over the network cache (the default on one host), every collective, type
/// and operation; with the smallest parts too, so that every message goes in chunks;
/// with single copy at every size, and with none.
#[test]
fn network_cache_every_p() {
    for n in 1..=8 {
        let out = suite(n, SIZES, &[], true);
        // Single copy is off unless asked for.
        assert_eq!(single_copies(&out), 0, "p={n}: {out:#?}");
        // 70000-byte blocks are past a 16 KiB threshold.
        let out = suite(n, SIZES, &[("BULKWIRE_COLL_DIRECT", "16K")], true);
        assert_eq!(single_copies(&out) > 0, n > 1, "p={n}: {out:#?}");
    }
    // The suite roots scatter and gather at 0, p/2 and p-1: 2 roots at p = 2, 3 at p = 5.
    for (n, roots) in [(2, 2), (5, 3)] {
        let env = [("BULKWIRE_COLL_DIRECT", "1")];
        let out = suite(n, &["1", "7", "100", "5000"], &env, true);
        // Scatter and gather per root, and alltoall, at each of 4 sizes, on every rank.
        let calls = n as usize * 4 * (2 * roots + 1);
        assert_eq!(single_copies(&out), calls, "p={n}: {out:#?}");
    }
    let out = suite(4, SIZES, &[("BULKWIRE_SINGLE_COPY", "off")], true);
    assert_eq!(single_copies(&out), 0, "{out:#?}");
    for n in [3, 8] {
        suite(
            n,
            &["1", "100", "5000"],
            &[("BULKWIRE_COLL_PART", "1")],
            true,
        );
    }
    suite(4, &["3", "300"], &[("BULKWIRE_COLL", "netcache")], true);
}

/// A per-rank counter of the suite's output, summed over the ranks.
fn total(out: &Out, key: &str) -> usize {
    out.lines("suite ")
        .iter()
        .map(|l| field::<usize>(l, key))
        .sum()
}

/// Broadcast, allgather and the reductions by single copy: at p = 2 (one reader per lent
/// buffer) every call from the threshold on; at p = 3 broadcast and allgather stay in the
/// cache and the reductions still lend; with single copy off, no call does, and every
/// result is still checked against the serial reference.
#[test]
fn single_copy_broadcast_allgather_and_reductions() {
    let direct = [("BULKWIRE_COLL_DIRECT", "1")];
    let sizes = ["1", "7", "100", "5000"];
    let out = suite(2, &sizes, &direct, true);
    // Per size a broadcast from each of the 2 roots and an allgather, then a typed
    // broadcast and allgather; on 2 ranks.
    assert_eq!(total(&out, "sharedcopy"), 2 * (4 * 3 + 2), "{out:#?}");
    // Reductions of 1, 5, 33 and 625 elements (5000 / 8) of 10 types, 5 operations, an
    // allreduce and a reduce each: a slice of at least 4 bytes (4 single-copy blocks)
    // per process lends, so not the 1-element vectors of the 7 types of 1 to 4 bytes nor
    // the 5-element ones of the 2 one-byte types; then the non-commutative user operation
    // (u64): an allreduce and a reduce to each of 2 roots per count.
    let per_rank = (10 * 4 * 10 - 7 * 10 - 2 * 10) + 4 * 3;
    assert_eq!(total(&out, "reducecopy"), 2 * per_rank, "{out:#?}");
    let out = suite(3, &sizes, &direct, true);
    assert_eq!(total(&out, "sharedcopy"), 0, "{out:#?}");
    // Slices of at least 4 bytes, so vectors of at least 12: not the 1-element vectors
    // of the 10 types nor the 5-element ones of the 4 types of 1 and 2 bytes; the user
    // operation from 5 elements, reducing to 3 roots.
    let per_rank = (10 * 4 * 10 - 10 * 10 - 4 * 10) + 3 * 4;
    assert_eq!(total(&out, "reducecopy"), 3 * per_rank, "{out:#?}");
    let off = [("BULKWIRE_SINGLE_COPY", "off")];
    let out = suite(2, &["70000"], &off, true);
    for key in ["singlecopy", "sharedcopy", "reducecopy"] {
        assert_eq!(total(&out, key), 0, "{key}: {out:#?}");
    }
}

/// p = 1 to 8 with the point-to-point algorithms over UDP (small and large families).
#[test]
fn p2p_over_udp_every_p() {
    for n in 1..=8 {
        let family = if n % 2 == 1 { "large" } else { "small" };
        let env = [
            ("BULKWIRE_TRANSPORT", "udp"),
            ("BULKWIRE_COLL", "p2p"),
            ("BULKWIRE_COLL_ALG", family),
        ];
        suite(n, &["0", "1", "7", "1000", "70000"], &env, false);
    }
}

/// UDP with 5% of datagrams lost: holefill recovers, the collectives see nothing.
#[test]
fn p2p_over_udp_with_loss() {
    for (n, family) in [(3, "small"), (4, "large"), (5, "auto")] {
        let env = [
            ("BULKWIRE_TRANSPORT", "udp"),
            ("BULKWIRE_COLL", "p2p"),
            ("BULKWIRE_COLL_ALG", family),
            ("BULKWIRE_FAULTS", "loss=0.05"),
            ("BULKWIRE_SINGLE_COPY", "off"),
        ];
        suite(n, &["0", "7", "1000", "70000"], &env, false);
    }
}

/// Every protocol carries the collectives: rmpp and gbn over UDP (with and without 2%
/// loss: rmpp once announced messages out of order when an Rts was lost), and kernel
/// TCP (`BULKWIRE_PROTOCOL=tcp`), with the data forced through the transport.
#[test]
fn every_protocol() {
    for (n, protocol, faults) in [
        (3, "rmpp", ""),
        (3, "rmpp", "loss=0.02,seed=5"),
        (4, "rmpp", "loss=0.02,seed=6"),
        (3, "gbn", "loss=0.02,seed=6"),
        (3, "tcp", ""),
        (5, "tcp", ""),
    ] {
        let env = [
            ("BULKWIRE_TRANSPORT", "udp"),
            ("BULKWIRE_PROTOCOL", protocol),
            ("BULKWIRE_COLL", "p2p"),
            ("BULKWIRE_FAULTS", faults),
            ("BULKWIRE_SINGLE_COPY", "off"),
        ];
        suite(n, &["0", "7", "1000", "70000"], &env, false);
    }
}

/// 64 MiB buffers for every collective: through the network cache (in chunks), and
/// through p2p over UDP with the data forced through the transport.
#[test]
fn sixty_four_mib() {
    for (n, env) in [
        (3, vec![]),
        (
            2,
            vec![
                ("BULKWIRE_TRANSPORT", "udp"),
                ("BULKWIRE_COLL", "p2p"),
                ("BULKWIRE_SINGLE_COPY", "off"),
            ],
        ),
        (4, vec![("BULKWIRE_COLL", "p2p")]),
    ] {
        let ns = n.to_string();
        let out = probe(&["-n", &ns, "big", "64"], &env, LIMIT);
        assert_eq!(out.code, Some(0), "{env:?}: {out:#?}");
        assert_eq!(out.lines("big ").len(), n, "{out:#?}");
        eprintln!("64 MiB p={n} {env:?}: {:?}", out.elapsed);
    }
}

/// A killed process: every other process's collective ends at once with an error
/// naming it, over the network cache and over p2p.
#[test]
fn killed_peer_ends_collectives_naming_it() {
    for mode in ["auto", "p2p"] {
        let out = probe(&["-n", "3", "die"], &[("BULKWIRE_COLL", mode)], LIMIT);
        assert_ne!(out.code, Some(0), "{out:#?}");
        // The launcher says why the job failed.
        assert!(out.stderr.contains("rank 1 died"), "{out:#?}");
        let lines = out.lines("failed ");
        assert_eq!(lines.len(), 2, "{mode}: {out:#?}");
        for l in lines {
            assert!(l.contains("rank 1 died"), "{l}");
            // Rank 1 dies 300 ms into the broadcast; the launcher tells at once.
            let ms: u64 = field(l, "ms");
            assert!((250..2000).contains(&ms), "{l}");
            assert_eq!(field::<bool>(l, "netcache"), mode == "auto", "{l}");
        }
    }
}

/// A stopped process (SIGSTOP: alive, silent) is declared dead after the job's
/// `BULKWIRE_DEAD_AFTER_MS`, by the network cache's watch as by p2p's pings, and the
/// job then fails, so every collective ends.
#[test]
fn stopped_peer_ends_collectives_after_dead_after() {
    for mode in ["auto", "p2p"] {
        let env = [("BULKWIRE_COLL", mode), ("BULKWIRE_DEAD_AFTER_MS", "500")];
        let out = probe(&["-n", "3", "stop"], &env, LIMIT);
        assert_ne!(out.code, Some(0), "{out:#?}");
        let lines = out.lines("failed ");
        assert_eq!(lines.len(), 2, "{mode}: {out:#?}");
        for l in lines {
            assert!(l.contains("rank 1"), "{l}");
            let ms: u64 = field(l, "ms");
            assert!((700..5000).contains(&ms), "{l}");
        }
        assert!(out.elapsed < Duration::from_secs(20), "{out:#?}");
    }
}

/// Single copy agreed when the collectives were set up, then refused by the kernel (a
/// process made itself non-dumpable, the others lost CAP_SYS_PTRACE): the alltoall that
/// needs it fails on every process within a bounded time, with an error naming the part,
/// its pid and the size, and the job ends with no process left behind.
#[test]
fn refused_single_copy_fails_the_collective_naming_the_part() {
    let out = probe(
        &["-n", "3", "revoke"],
        &[("BULKWIRE_COLL_DIRECT", "16K")],
        LIMIT,
    );
    assert_ne!(out.code, Some(0), "{out:#?}");
    let lines = out.lines("revoked ");
    assert_eq!(lines.len(), 3, "{out:#?}");
    for l in lines {
        // Rank 0's own reads succeed: it learns of the others' failure through the job.
        assert!(
            l.contains("single-copy read of 65536 bytes from part 0 (pid "),
            "{l}"
        );
        assert!(l.contains("not permitted"), "{l}");
        let ms: u64 = field(l, "ms");
        assert!(ms < 5000, "{l}");
    }
    assert!(out.elapsed < Duration::from_secs(20), "{out:#?}");
}
