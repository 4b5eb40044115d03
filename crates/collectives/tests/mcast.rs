//! Broadcast and allgather over the job's IP multicast group: three processes of a job,
//! as threads that pretend to run on three hosts, over this machine's loopback interface
//! (where multicast loops back to the group's members). The group is kept when it reaches
//! everyone, and then carries the large broadcasts and allgathers, also with datagrams
//! lost on receive; when one member cannot hear the group, the job falls back to the
//! point-to-point algorithms. Every wait is bounded by the job's deadline.

use std::net::SocketAddr;
use std::time::Duration;

use bulkwire_collectives::{Algorithm, Coll, Config};
use bulkwire_launch::testing::{in_netns, namespaces_missing};
use bulkwire_launch::{Control, JobEnv, Server, ServerConfig};
use bulkwire_link::{FaultConfig, McastMode};
use bulkwire_p2p::Comm;

const LIMIT: Duration = Duration::from_secs(60);

fn pattern(n: usize, seed: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 31 + seed * 7) as u8).collect()
}

/// Runs `body` as each of `n` ranks on hosts of their own, with the multicast `mode`,
/// `faults` on receive (none for ""), and `group` overriding the group of some ranks.
fn job<T: Send>(
    n: u32,
    mode: McastMode,
    faults: &str,
    group: &[(u32, &str)],
    body: impl Fn(&Coll) -> T + Sync,
) -> Vec<T> {
    job_with(n, mode, faults, group, 10, body)
}

/// [`job`] with a dead-peer deadline of `dead_s` seconds.
fn job_with<T: Send>(
    n: u32,
    mode: McastMode,
    faults: &str,
    group: &[(u32, &str)],
    dead_s: u64,
    body: impl Fn(&Coll) -> T + Sync,
) -> Vec<T> {
    let secret = bulkwire_launch::Secret::generate();
    let mut cfg = ServerConfig::new(n, secret.clone());
    cfg.timeout = Some(LIMIT);
    let server = Server::bind(SocketAddr::from(([127, 0, 0, 1], 0)), cfg).unwrap();
    let addr = server.local_addr();
    let srv = std::thread::spawn(move || server.run());
    let out = std::thread::scope(|s| {
        let hs: Vec<_> = (0..n)
            .map(|r| {
                let (secret, body) = (secret.clone(), &body);
                s.spawn(move || {
                    let mut env = JobEnv::bulkwire(r, n, secret, 7, addr);
                    env.host_id = Some(format!("host{r}"));
                    let ctl = Control::join(&env).unwrap();
                    let mut p = bulkwire_p2p::Config::default();
                    p.job.mcast.mode = mode;
                    p.job.dead_after = dead_s * 1_000_000_000;
                    if !faults.is_empty() {
                        p.job.faults = faults.parse::<FaultConfig>().unwrap();
                    }
                    if let Some((_, g)) = group.iter().find(|(q, _)| *q == r) {
                        p.job.mcast.group = Some(g.parse().unwrap());
                    }
                    let comm = Comm::from_control(ctl, p).unwrap();
                    let t = {
                        let coll = Coll::new(&comm, Config::default()).unwrap();
                        body(&coll)
                    };
                    comm.finalize().unwrap();
                    t
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let _ = srv.join();
    out
}

/// A broadcast of 1 MiB from each root in turn, a small one, and an allgather of 64 KiB
/// blocks, checked; the algorithms each used.
fn exercise(c: &Coll) -> Vec<Algorithm> {
    let (me, p) = (c.comm().rank() as usize, c.comm().size() as usize);
    let mut used = Vec::new();
    for root in 0..p {
        let want = pattern(1 << 20, root);
        let mut buf = if me == root {
            want.clone()
        } else {
            vec![0; want.len()]
        };
        c.broadcast(&mut buf, root as u32).unwrap();
        assert!(buf == want, "rank {me}: broadcast from {root} corrupted");
        used.push(c.last_algorithm());
    }
    let mut small = if me == 0 {
        pattern(100, 9)
    } else {
        vec![0; 100]
    };
    c.broadcast(&mut small, 0).unwrap();
    assert_eq!(small, pattern(100, 9));
    used.push(c.last_algorithm());
    let b = 64 << 10;
    let mine = pattern(b, 100 + me);
    let mut all = vec![0u8; b * p];
    c.allgather(&mine, &mut all).unwrap();
    for j in 0..p {
        assert!(
            all[j * b..(j + 1) * b] == pattern(b, 100 + j)[..],
            "block {j}"
        );
    }
    used.push(c.last_algorithm());
    used
}

fn no_multicast_on_loopback() -> bool {
    let g = "239.192.200.1:31999".parse().unwrap();
    let s = bulkwire_link::McastSettings::default();
    match bulkwire_link::McastLink::open(g, std::net::Ipv4Addr::LOCALHOST, 0, 1, &s) {
        Ok(_) => false,
        Err(e) => {
            eprintln!("skipped: no multicast on the loopback interface here ({e})");
            true
        }
    }
}

#[test]
fn large_broadcasts_and_allgathers_go_over_the_group() {
    if no_multicast_on_loopback() {
        return;
    }
    for used in job(3, McastMode::On, "", &[], exercise) {
        use Algorithm::*;
        assert_eq!(used, [Multicast, Multicast, Multicast, Binomial, Multicast]);
    }
}

#[test]
fn lost_datagrams_are_repaired() {
    if no_multicast_on_loopback() {
        return;
    }
    let stats = job(4, McastMode::Auto, "loss=0.01,seed=3", &[], |c| {
        let used = exercise(c);
        assert!(used.contains(&Algorithm::Multicast));
        c.comm().mcast_stats().unwrap()
    });
    let repairs: u64 = stats
        .iter()
        .map(|(s, _)| s.repairs_group + s.repairs_unicast)
        .sum();
    assert!(repairs > 0, "{stats:?}");
}

#[test]
fn a_group_that_does_not_reach_everyone_leaves_point_to_point() {
    if no_multicast_on_loopback() {
        return;
    }
    let apart = [(2, "239.192.201.2:31998")];
    for used in job(3, McastMode::Auto, "", &apart, exercise) {
        assert!(!used.contains(&Algorithm::Multicast), "{used:?}");
    }
}

#[test]
fn a_receiver_that_stops_is_named_by_the_root_within_the_deadline() {
    if no_multicast_on_loopback() {
        return;
    }
    let out = job_with(3, McastMode::On, "", &[], 2, |c| {
        let me = c.comm().rank();
        if me == 2 {
            // Rank 2 stops taking part: it never answers the group again.
            return None;
        }
        let t = std::time::Instant::now();
        let mut buf = vec![me as u8; 1 << 20];
        let r = c.broadcast(&mut buf, 0);
        Some((r.map_err(|e| e.peer()), t.elapsed()))
    });
    let (root, took) = out[0].unwrap();
    assert_eq!(root, Err(Some(2)), "the root names rank 2");
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_secs(6),
        "{took:?}"
    );
    // The live receiver has its data.
    assert_eq!(out[1].unwrap().0, Ok(()));
}

/// A job of one process per host of `f`, each a thread in its host's namespace, with the
/// rendezvous on host 0; `faults` on receive at the last rank only.
fn fabric_job<T: Send + 'static>(
    f: &bulkwire_launch::testing::Fabric,
    faults: &'static str,
    body: fn(&Coll) -> T,
) -> Vec<(T, Option<String>)> {
    fabric_job_with(f, faults, Config::default(), body)
}

/// [`fabric_job`] with the collectives' settings `coll`.
fn fabric_job_with<T: Send + 'static>(
    f: &bulkwire_launch::testing::Fabric,
    faults: &'static str,
    coll: Config,
    body: fn(&Coll) -> T,
) -> Vec<(T, Option<String>)> {
    let n = f.names.len() as u32;
    let secret = bulkwire_launch::Secret::generate();
    let mut cfg = ServerConfig::new(n, secret.clone());
    cfg.timeout = Some(LIMIT);
    let at: SocketAddr = format!("{}:0", f.addrs[0]).parse().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let srv = in_netns(&f.names[0], move || {
        let server = Server::bind(at, cfg).unwrap();
        tx.send(server.local_addr()).unwrap();
        server.run()
    });
    let addr = rx.recv().unwrap();
    let hs: Vec<_> = (0..n)
        .map(|r| {
            let (secret, coll) = (secret.clone(), coll.clone());
            in_netns(&f.names[r as usize], move || {
                let mut env = JobEnv::bulkwire(r, n, secret, 9, addr);
                // Threads of one process: each says it is its namespace's host.
                env.host_id = Some(format!("ns{r}"));
                let ctl = Control::join(&env).unwrap();
                let mut p = bulkwire_p2p::Config::default();
                p.job.mcast.mode = McastMode::Auto;
                p.job.dead_after = 10_000_000_000;
                if r == n - 1 && !faults.is_empty() {
                    p.job.faults = faults.parse::<FaultConfig>().unwrap();
                }
                let comm = Comm::from_control(ctl, p).unwrap();
                let t = {
                    let coll = Coll::new(&comm, coll).unwrap();
                    body(&coll)
                };
                let off = comm.mcast_off().map(str::to_string);
                comm.finalize().unwrap();
                (t, off)
            })
        })
        .collect();
    let out = hs.into_iter().map(|h| h.join().unwrap()).collect();
    let _ = srv.join();
    out
}

/// Three hosts as network namespaces on a Linux bridge, which forwards multicast to
/// every port as a switch does: the collectives take the group, also with 1 % of
/// datagrams dropped at one receiver; with multicast kept from one port, detection
/// finds it and the job falls back with the one line.
#[test]
fn over_a_bridge_between_namespaces() {
    use bulkwire_launch::testing::{Fabric, FabricSpec};
    if let Some(why) = namespaces_missing() {
        eprintln!("skipped: {why}");
        return;
    }
    let f = Fabric::new(FabricSpec::unshaped(3, 1500)).expect("the fabric");
    for (used, off) in fabric_job(&f, "", exercise) {
        assert_eq!(off, None);
        assert!(used.contains(&Algorithm::Multicast), "{used:?}");
    }
    let out = fabric_job(&f, "loss=0.01,seed=7", |c| {
        let used = exercise(c);
        (used, c.comm().mcast_stats().unwrap())
    });
    for ((used, _), _) in &out {
        assert!(used.contains(&Algorithm::Multicast), "{used:?}");
    }
    let repairs: u64 = out
        .iter()
        .map(|((_, (s, _)), _)| s.repairs_group + s.repairs_unicast)
        .sum();
    assert!(repairs > 0);

    // The switch floods multicast to every port but host 2's: host 2 hears no one.
    let sw = f.switch.clone();
    let ip = |args: &[&str]| {
        let ok = std::process::Command::new("ip")
            .args(args)
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "ip {args:?}");
    };
    ip(&[
        "-n",
        &sw,
        "link",
        "set",
        "br0",
        "type",
        "bridge",
        "mcast_snooping",
        "0",
    ]);
    ip(&[
        "-n",
        &sw,
        "link",
        "set",
        "p2",
        "type",
        "bridge_slave",
        "mcast_flood",
        "off",
    ]);
    for (used, off) in fabric_job(&f, "", exercise) {
        assert!(!used.contains(&Algorithm::Multicast), "{used:?}");
        let off = off.expect("the reason");
        assert!(off.contains("rank 2 heard nothing from 0, 1"), "{off}");
        assert!(!off.contains('\n'));
    }
}

/// Milliseconds of `op` at rank 0, between two barriers, in each of `rounds` rounds
/// alternating `a` and `b`: the medians of each.
fn alternate(c: &Coll, rounds: usize, mut op: impl FnMut(bool)) -> (f64, f64) {
    let mut t = [Vec::new(), Vec::new()];
    for i in 0..2 * rounds {
        let b = i % 2 == 1;
        c.barrier().unwrap();
        let t0 = std::time::Instant::now();
        op(b);
        c.barrier().unwrap();
        t[b as usize].push(t0.elapsed().as_secs_f64() * 1e3);
    }
    let med = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    (med(&mut t[0]), med(&mut t[1]))
}

/// Figures for `docs/performance.md`: on a switch of `BW_MCAST_HOSTS` (default 4) hosts
/// with 100 Mb/s ports and 64 KiB port buffers, a 1 MiB broadcast and an allgather of
/// 128 KiB blocks over the multicast group against the point-to-point algorithms, in
/// alternating rounds of one job (the point-to-point ones are given one byte less, under
/// the multicast threshold). `cargo test -p bulkwire-collectives --test mcast --
/// --ignored --nocapture measure_on_a_shaped_switch` as root; `BW_MCAST_FAULTS` injects
/// faults on receive at the last host.
#[test]
#[ignore = "a measurement: run by hand as root"]
fn measure_on_a_shaped_switch() {
    use bulkwire_launch::testing::{Fabric, FabricSpec};
    if let Some(why) = namespaces_missing() {
        eprintln!("skipped: {why}");
        return;
    }
    let hosts = std::env::var("BW_MCAST_HOSTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(4);
    // Faults on receive at the last host (its point-to-point link too), e.g.
    // BW_MCAST_FAULTS=loss=0.01,seed=1.
    let faults: &'static str =
        std::env::var("BW_MCAST_FAULTS").map_or("", |v| Box::leak(v.into_boxed_str()));
    let f = Fabric::new(FabricSpec::shaped(hosts, 1500, 100_000_000, 64 << 10)).unwrap();
    let mb = 1usize << 20;
    let c = Config {
        mcast_min: mb,
        ..Config::default()
    };
    let bc = fabric_job_with(&f, faults, c, |c| {
        let me = c.comm().rank();
        let mut buf = vec![me as u8; 1 << 20];
        alternate(c, 7, |p2p| {
            let n = if p2p { buf.len() - 1 } else { buf.len() };
            c.broadcast(&mut buf[..n], 0).unwrap();
        })
    });
    let c = Config {
        mcast_min: 128 << 10,
        ..Config::default()
    };
    let ag = fabric_job_with(&f, faults, c, |c| {
        let p = c.comm().size() as usize;
        let b = 128 << 10;
        let mine = vec![1u8; b];
        let mut all = vec![0u8; b * p];
        alternate(c, 7, |p2p| {
            let k = if p2p { b - 1 } else { b };
            c.allgather(&mine[..k], &mut all[..k * p]).unwrap();
        })
    });
    // One transmission of 1 MiB: 1408-byte payloads in 1518-byte frames (with the
    // preamble and gap, 1538 bytes of wire time) at 100 Mb/s.
    let frames = mb.div_ceil(1500 - 28 - 64) as f64;
    let wire = frames * 1538.0 * 8.0 / 1e8 * 1e3;
    let ((bm, bp), _) = bc[0];
    let ((am, ap), _) = ag[0];
    println!(
        "hosts {hosts}, faults {faults:?}: broadcast 1 MiB: multicast {bm:.1} ms, point-to-point {bp:.1} ms \
         (ratio {:.2}); one transmission's wire time {wire:.1} ms (ratio {:.2}); \
         allgather 128 KiB blocks: multicast {am:.1} ms, point-to-point {ap:.1} ms (ratio {:.2})",
        bm / bp,
        bm / wire,
        am / ap
    );
}
