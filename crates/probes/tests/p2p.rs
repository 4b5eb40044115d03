//! p2p between real processes: jobs of `p2p-probe` started by self-spawn (the launcher
//! library behind `bsprun`), over UDP with the job's protocol, bounded in time, with no
//! process left behind.

use std::time::Duration;

use bulkwire_launch::testing::{self, Out, field};

const PROBE: &str = env!("CARGO_BIN_EXE_p2p-probe");

/// Runs the probe with `args` and `env` (see [`testing::probe`]).
fn probe(args: &[&str], env: &[(&str, &str)], limit: Duration) -> Out {
    testing::probe(PROBE, args, env, limit)
}

fn ok(out: &Out) {
    assert_eq!(out.code, Some(0), "{out:#?}");
}

/// Every rank got all its messages, in per-(source, tag) order and intact.
fn check_mix(out: &Out, n: usize, msgs: usize) {
    ok(out);
    let lines = out.lines("mix ");
    assert_eq!(lines.len(), n, "{out:#?}");
    for l in lines {
        let got: usize = field(l, "received");
        assert_eq!(got, msgs * (n - 1), "{l}");
    }
}

const LIMIT: Duration = Duration::from_secs(120);

/// Three processes, each with 3000 receives posted (exact, any-tag and fully wildcard)
/// and 3000 sends outstanding at once, sizes 0 B to 200 KB.
#[test]
fn all_to_all_with_wildcards_thousands_outstanding() {
    let out = probe(&["-n", "3", "mix", "1500", "200000"], &[], LIMIT);
    check_mix(&out, 3, 1500);
    // Local peers: rendezvous bodies went by single copy.
    for l in out.lines("mix ") {
        assert!(field::<u64>(l, "single_copy") > 0, "{l}");
    }
}

/// Eager/rendezvous boundary from the environment: with BULKWIRE_EAGER=4096 the mix's
/// 4095/4096/4097-byte messages straddle it; with 0 everything but empty messages goes by
/// rendezvous, through the transport (single copy off).
#[test]
fn eager_limit_from_the_environment() {
    for (eager, sc) in [("4096", "on"), ("0", "off"), ("1m", "off")] {
        let env = [("BULKWIRE_EAGER", eager), ("BULKWIRE_SINGLE_COPY", sc)];
        let out = probe(&["-n", "2", "mix", "200", "100000"], &env, LIMIT);
        check_mix(&out, 2, 200);
        for l in out.lines("mix ") {
            let (e, r): (u64, u64) = (field(l, "eager"), field(l, "rndv"));
            match eager {
                // 200 messages, sizes cycling through 10 choices: 20 are empty.
                "0" => assert_eq!(e, 20, "{l}: only the empty ones"),
                "1m" => assert_eq!(r, 0, "{l}"),
                _ => assert!(e > 100 && r > 50, "{l}"),
            }
            if sc == "off" {
                assert_eq!(field::<u64>(l, "single_copy"), 0, "{l}");
            }
        }
    }
}

/// Lossy network (5% of datagrams dropped on receipt), both recovering protocols, data
/// forced through the transport: everything arrives, in order, intact.
#[test]
fn all_to_all_under_five_percent_loss_holefill_and_gbn() {
    for proto in ["holefill", "gbn"] {
        let env = [
            ("BULKWIRE_FAULTS", "loss=0.05"),
            ("BULKWIRE_PROTOCOL", proto),
            ("BULKWIRE_SINGLE_COPY", "off"),
            ("BULKWIRE_EAGER", "8k"),
        ];
        let out = probe(&["-n", "3", "mix", "150", "300000"], &env, LIMIT);
        check_mix(&out, 3, 150);
        eprintln!("{proto}: {:?}", out.elapsed);
    }
}

/// 64 MiB each way (into the receiver's buffer, and back into a vector of its own): by
/// single copy split between the two processes (the default), by single copy that the
/// receiver does alone, and through the transport; the data are checked each time.
#[test]
fn sixty_four_mib_by_single_copy_and_through_the_transport() {
    for (sc, split) in [("on", "64K"), ("on", "off"), ("off", "64K")] {
        let out = probe(
            &["-n", "2", "big", "64"],
            &[("BULKWIRE_SINGLE_COPY", sc), ("BULKWIRE_SPLIT_COPY", split)],
            LIMIT,
        );
        ok(&out);
        let l = out.lines("big bytes=")[0];
        assert_eq!(field::<u64>(l, "bytes"), 64 << 20);
        let single = if sc == "on" { 1 } else { 0 };
        let halves = if sc == "on" && split != "off" { 1 } else { 0 };
        assert_eq!(field::<u64>(l, "single_copy"), single, "{l}");
        assert_eq!(field::<u64>(l, "split"), halves, "{l}");
        let echo = out.lines("big rank=1 echo_ok");
        assert_eq!(echo.len(), 1, "{out:#?}");
        assert_eq!(field::<u64>(echo[0], "single_copy"), single, "{out:#?}");
        assert_eq!(field::<u64>(echo[0], "split"), halves, "{out:#?}");
        eprintln!("{l}");
    }
}

#[test]
fn sixteen_mib_under_loss() {
    let env = [
        ("BULKWIRE_FAULTS", "loss=0.05"),
        ("BULKWIRE_SINGLE_COPY", "off"),
    ];
    let out = probe(&["-n", "2", "big", "16"], &env, LIMIT);
    ok(&out);
    eprintln!("{}", out.lines("big bytes=")[0]);
}

/// The RMPP paper's Fig. 4: after a long computation the pre-posted receive is already complete,
/// for every size, by single copy and through the transport: the message was delivered
/// while the user computed (the counters say so before the wait), by the progress thread.
/// How small the wait then is, is the benchmark's business (`bwbench overlap`); here it
/// is only bounded far below the computation, since a loaded machine may deschedule the
/// waiter for milliseconds (CI once saw 2.8 ms).
#[test]
fn overlap_wait_after_computing_is_small() {
    for sc in ["on", "off"] {
        let out = probe(
            &[
                "-n", "2", "overlap", "400", "8", "65536", "1048576", "16777216",
            ],
            &[("BULKWIRE_SINGLE_COPY", sc)],
            LIMIT,
        );
        ok(&out);
        let lines = out.lines("overlap ");
        assert_eq!(lines.len(), 4, "{out:#?}");
        for l in lines {
            let (size, wait, transfer): (usize, f64, f64) = (
                field(l, "size"),
                field(l, "wait_us"),
                field(l, "transfer_us"),
            );
            eprintln!("single_copy={sc} {l}");
            assert!(field::<u64>(l, "takeovers") >= 1, "{l}");
            assert_eq!(field::<u64>(l, "received_while_computing"), 1, "{l}");
            assert!(wait < 100_000.0, "size={size} transfer_us={transfer}: {l}");
        }
    }
}

/// A peer killed while we wait on it: the wait ends at once with an error naming it (the
/// launcher's failure notice), for a blocking receive and a pending rendezvous receive.
#[test]
fn killed_peer_ends_waits_with_an_error_naming_it() {
    let out = probe(&["-n", "2", "die"], &[], LIMIT);
    assert_ne!(out.code, Some(0));
    let l = out.lines("die ")[0];
    assert!(l.contains("rank 1 died (signal 9, SIGKILL)"), "{l}");
    assert!(l.contains("peer=Some(1)"), "{l}");
    assert!(field::<u64>(l, "after_ms") < 5000, "{l}");
}

/// A peer that stops answering (SIGSTOP: alive to the launcher, silent on the wire): the
/// transport declares it dead after BULKWIRE_DEAD_AFTER_MS and the wait ends naming it.
/// `p2p-probe stop` with `env`: rank 0's wait on the stopped rank 1 ends naming it, at
/// least `floor_ms` after it stopped and within 5 s.
fn stopped_peer_is_named(env: &[(&str, &str)], floor_ms: u64) {
    let out = probe(&["-n", "2", "stop"], env, LIMIT);
    assert_ne!(out.code, Some(0));
    let l = out.lines("stop ")[0];
    assert!(l.contains("rank 1 is dead"), "{l}");
    assert!(l.contains("peer=Some(1)"), "{l}");
    let ms: u64 = field(l, "after_ms");
    assert!((floor_ms..5000).contains(&ms), "{l}");
    assert!(
        out.stderr.contains("rank 0 aborted: rank 1 stopped"),
        "{out:#?}"
    );
}

#[test]
fn silent_peer_is_declared_dead_and_named() {
    stopped_peer_is_named(&[("BULKWIRE_DEAD_AFTER_MS", "500")], 400);
}

/// Over kernel TCP too: a stopped process keeps its connections open and its kernel
/// acknowledges, so only the transport's pings find it silent; the wait ends naming it
/// within BULKWIRE_DEAD_AFTER_MS (it waited 20 s silently with 1 s set).
#[test]
fn silent_peer_over_tcp_is_declared_dead_and_named() {
    let env = [
        ("BULKWIRE_PROTOCOL", "tcp"),
        ("BULKWIRE_DEAD_AFTER_MS", "1000"),
    ];
    stopped_peer_is_named(&env, 900);
}

/// The kernel refuses process_vm_readv mid-job (non-dumpable sender, reader without
/// CAP_SYS_PTRACE): the rendezvous falls back to the transport and the data arrives.
#[test]
fn refused_single_copy_falls_back_to_the_transport() {
    // Capabilities belong to threads: the probe drops CAP_SYS_PTRACE in its main thread
    // only, so the progress thread, had it driven the read, could still read the peer
    // (this failed once in CI, on a loaded machine). Without it every read is the main
    // thread's.
    let out = probe(
        &["-n", "2", "refuse"],
        &[("BULKWIRE_PROGRESS_US", "0")],
        LIMIT,
    );
    ok(&out);
    let l = out.lines("refuse ")[0];
    assert!(l.contains("peers_before=[1]"), "{l}");
    assert!(l.contains("peers_after=[]"), "{l}");
    assert_eq!(field::<u64>(l, "refused"), 1, "{l}");
    assert_eq!(field::<u64>(l, "single_copy"), 0, "{l}");
    // The test knob: every read refused, all data still arrives.
    let out = probe(
        &["-n", "2", "big", "4"],
        &[("BULKWIRE_SINGLE_COPY", "refuse")],
        LIMIT,
    );
    ok(&out);
    assert!(field::<u64>(out.lines("big bytes=")[0], "refused") >= 1);
}

/// A split copy whose sender may no longer write into the receiver: the receiver, which
/// may still read the sender, copies the sender's half itself (into its own buffer and
/// into a vector), and the sender stops offering to write.
#[test]
fn refused_split_write_leaves_the_copy_to_the_receiver() {
    let out = probe(
        &["-n", "2", "refusewrite"],
        &[("BULKWIRE_PROGRESS_US", "0")],
        LIMIT,
    );
    ok(&out);
    let l = out.lines("refusewrite single_copy")[0];
    assert_eq!(field::<u64>(l, "single_copy"), 2, "{l}");
    assert_eq!(field::<u64>(l, "split"), 0, "{l}");
    assert_eq!(field::<u64>(l, "refused"), 0, "{l}");
    let l = out.lines("refusewrite rank=1")[0];
    assert!(l.contains("peers_after=[]"), "{l}");
}

/// Launched as `bsprun -n 4` launches (the launcher library behind it): the processes
/// join through the job environment instead of spawning, and the job succeeds.
#[test]
fn launched_by_the_launcher_four_processes() {
    let mark = testing::mark();
    let opts = bulkwire_launch::LaunchOpts {
        timeout: Some(LIMIT),
        env: vec![(testing::MARK_VAR.into(), mark.clone().into())],
        ..Default::default()
    };
    let args: Vec<std::ffi::OsString> = ["-n", "4", "mix", "300", "100000"]
        .iter()
        .map(Into::into)
        .collect();
    let outcome = bulkwire_launch::launch(4, PROBE, &args, &opts).unwrap();
    assert!(outcome.success(), "{:?}", outcome.failures);
    testing::assert_no_leftovers(&mark);
}

const LAUNCH_PROBE: &str = env!("CARGO_BIN_EXE_launch-probe");

/// Ranks started with different protocols (which hung, or blamed a duplicate packet) fail
/// when the job forms, every rank naming the variable, the values and the ranks: rank 2
/// gets its own BULKWIRE_PROTOCOL from a shell the mini-launcher starts for each rank.
#[test]
fn ranks_started_with_different_protocols_fail_at_once_naming_them() {
    for (all, other) in [
        ("holefill", "gbn"),
        ("rmpp", "gbn"),
        ("utopia", "gbn"),
        ("tcp", "holefill"),
    ] {
        let script = format!(
            "if [ \"$BULKWIRE_RANK\" = 2 ]; then export BULKWIRE_PROTOCOL={other}; fi; \
             exec {PROBE} -n 3 mix 10 1000"
        );
        let out = testing::probe(
            LAUNCH_PROBE,
            &["run", "-n", "3", "--", "sh", "-c", &script],
            &[("BULKWIRE_PROTOCOL", all)],
            LIMIT,
        );
        assert_ne!(out.code, Some(0), "{all}/{other}: {out:#?}");
        let want = format!("BULKWIRE_PROTOCOL differs: ranks 0-1 use {all}, rank 2 uses {other}");
        assert!(out.stderr.contains(&want), "{all}/{other}: {out:#?}");
        assert!(out.elapsed < Duration::from_secs(20), "{out:#?}");
    }
}
