//! The safe Rust API in real processes: `bsp-probe` starts its own job with
//! `Bsp::begin`, as `./program` does.

use std::process::Command;

const PROBE: &str = env!("CARGO_BIN_EXE_bsp-probe");

fn probe(args: &[&str]) -> (Option<i32>, String, String) {
    probe_with(args, &[])
}

/// The probe with these settings and no others of the caller's.
fn probe_with(args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, String, String) {
    let mut c = Command::new(PROBE);
    for (k, _) in std::env::vars() {
        if k.starts_with("BULKWIRE_") {
            c.env_remove(k);
        }
    }
    let o = c.args(args).envs(env.iter().copied()).output().unwrap();
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn begin_sync_put_end_in_processes() {
    for p in ["1", "3"] {
        let (code, out, err) = probe(&[p, "sum"]);
        assert_eq!(code, Some(0), "{err}");
        assert_eq!(
            out.lines().filter(|l| l.starts_with("sum ok")).count(),
            1,
            "{out}"
        );
        // Only pid 0 continues after end.
        assert_eq!(
            out.lines().filter(|l| *l == "after end pid 0").count(),
            1,
            "{out}"
        );
    }
}

#[test]
fn the_spmd_part_may_be_a_function() {
    let (code, out, err) = probe(&["4", "spmd"]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out.matches("sequential part").count(), 1, "{out}");
    assert!(out.contains("sum ok p=4 total=10"), "{out}");
}

#[test]
fn abort_stops_every_process() {
    let (code, _, err) = probe(&["3", "abort"]);
    assert_eq!(code, Some(1));
    assert!(err.contains("rank 1 aborted: the probe gives up"), "{err}");
    assert_eq!(err.matches("aborted").count(), 1, "{err}");
}

/// Messages of large puts lent to the destination, which reads them in place with
/// `process_vm_readv`: plain puts, hpputs, puts of several processes onto one range,
/// puts beside a large get (its values lent as well, read before the put that overwrites
/// them), a put onto an hpput's source (see `bsp-probe lend`). Every process checks every
/// superstep's result; lending off gives the same results and lends nothing; when the
/// kernel refuses to read, from the first superstep or from the fifth (after the lender
/// was verified), the data goes through the transport and arrives all the same.
#[test]
fn large_puts_and_gets_are_read_in_place_and_through_the_transport_when_refused() {
    // Per pid: bytes of puts lent, bytes of get values lent.
    let lent = |p: &str, more: &[&str], lend: &str| -> Vec<(u64, u64)> {
        let mut args = vec![p, "lend", "16", "300000"];
        args.extend_from_slice(more);
        // Reads happen on the thread that calls bsp_sync either way; without the progress
        // thread, dropping the capability in the main thread covers every thread.
        let env = [("BULKWIRE_BSP_LEND", lend), ("BULKWIRE_PROGRESS_US", "0")];
        let (code, out, err) = probe_with(&args, &env);
        assert_eq!(code, Some(0), "{args:?} {err}");
        let mut by_pid: Vec<(u64, u64, u64)> = out
            .lines()
            .filter(|l| l.starts_with("lend ok"))
            .map(|l| {
                let field = |k: &str| -> u64 {
                    let v = l.split(' ').find_map(|w| w.strip_prefix(k)).unwrap();
                    v.parse().unwrap()
                };
                (field("pid="), field("lent="), field("lent_gets="))
            })
            .collect();
        by_pid.sort();
        assert_eq!(by_pid.len(), p.parse::<usize>().unwrap(), "{out}");
        by_pid.into_iter().map(|(_, l, g)| (l, g)).collect()
    };
    for p in ["2", "3"] {
        let all = lent(p, &[], "64K");
        let np = p.parse::<u64>().unwrap();
        // Every superstep lends each destination a message of 150 KB or more; each pid
        // serves one get of 300000 bytes in each of the four supersteps of kind 2.
        for &(puts, gets) in &all {
            assert!(puts >= 16 * 150_000, "{all:?}");
            assert!(puts <= 16 * (np - 1) * 460_000, "{all:?}");
            assert_eq!(gets, 4 * 300_000, "{all:?}");
        }
        assert!(lent(p, &[], "off").iter().all(|&l| l == (0, 0)));
        assert!(lent(p, &["0"], "64K").iter().all(|&l| l == (0, 0)));
        // Refused from superstep 4 on: the first four (one of each kind) were lent.
        let first = lent(p, &["4"], "64K");
        for (f, a) in first.iter().zip(&all) {
            assert_eq!((f.0 * 4, f.1 * 4), *a, "{first:?} {all:?}");
        }
    }
}

/// A profile file planted as a symbolic link (as another user could in a shared
/// directory) is not written through: the job stops at `bsp_begin` naming the path, and
/// the link's target is untouched. Files that are written are the user's alone (0600).
#[test]
fn a_profile_path_that_is_a_link_is_refused_and_its_target_untouched() {
    use std::os::unix::fs::MetadataExt;
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("bsp-profile-link-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let base = dir.join("run.prof");
    let target = dir.join("precious");
    std::fs::write(&target, b"root-only data").unwrap();
    let link = dir.join("run.prof.1");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let t0 = std::time::Instant::now();
    let (code, _, err) = probe_with(
        &["2", "sum"],
        &[("BULKWIRE_PROFILE", base.to_str().unwrap())],
    );
    assert_ne!(code, Some(0), "{err}");
    assert!(
        err.contains("cannot create the profile file")
            && err.contains(link.to_str().unwrap())
            && err.contains("symbolic link"),
        "{err}"
    );
    assert!(t0.elapsed() < std::time::Duration::from_secs(30));
    assert_eq!(std::fs::read(&target).unwrap(), b"root-only data");
    // Without the link the same job profiles, into files only their owner may read.
    std::fs::remove_file(&link).unwrap();
    let (code, _, err) = probe_with(
        &["2", "sum"],
        &[("BULKWIRE_PROFILE", base.to_str().unwrap())],
    );
    assert_eq!(code, Some(0), "{err}");
    for pid in 0..2 {
        let m = std::fs::metadata(dir.join(format!("run.prof.{pid}"))).unwrap();
        assert!(m.len() > 0);
        assert_eq!(m.mode() & 0o777, 0o600);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The smallest shared-memory datagram the configuration accepts works: supersteps of
/// puts, with the barriers in the transport and on the shared board, under every protocol
/// (one byte of data per packet).
#[test]
fn the_smallest_shared_memory_datagram_accepted_works() {
    for protocol in ["utopia", "holefill", "gbn", "rmpp"] {
        for board in ["on", "off"] {
            let env = [
                ("BULKWIRE_SHM_DGRAM", "65"),
                ("BULKWIRE_TRANSPORT", "shm"),
                ("BULKWIRE_PROTOCOL", protocol),
                ("BULKWIRE_BSP_BOARD", board),
            ];
            let (code, out, err) = probe_with(&["3", "steps", "3"], &env);
            assert_eq!(code, Some(0), "{protocol} board={board}: {err}");
            assert_eq!(out.matches("steps ok").count(), 3, "{out}");
        }
    }
    // One byte less is refused at start, naming the variable.
    let (code, _, err) = probe_with(&["2", "sum"], &[("BULKWIRE_SHM_DGRAM", "64")]);
    assert_ne!(code, Some(0));
    assert!(err.contains("BULKWIRE_SHM_DGRAM=\"64\""), "{err}");
}

/// BSP over kernel TCP detects a stopped process within BULKWIRE_DEAD_AFTER_MS as over the
/// other protocols (it waited 20 s in silence with 1 s set): a stopped process keeps its
/// connections open, so only the transport's pings find it silent.
#[test]
fn a_stopped_process_over_tcp_fails_the_sync_naming_it() {
    let env = [
        ("BULKWIRE_PROTOCOL", "tcp"),
        ("BULKWIRE_DEAD_AFTER_MS", "1000"),
    ];
    let t0 = std::time::Instant::now();
    let (code, out, err) = probe_with(&["3", "stop"], &env);
    assert_ne!(code, Some(0), "{out}{err}");
    let l = out
        .lines()
        .find(|l| l.starts_with("stop pid=") && l.contains("error="))
        .unwrap_or_else(|| panic!("no failed sync in {out}{err}"));
    assert!(l.contains("rank 1 is dead"), "{l}");
    let ms: u64 = l
        .rsplit("after_ms=")
        .next()
        .and_then(|v| v.parse().ok())
        .unwrap();
    assert!((900..5000).contains(&ms), "{l}");
    assert!(err.contains("rank 1 is dead"), "{err}");
    assert!(t0.elapsed() < std::time::Duration::from_secs(30));
}
