//! Broadcasts of supersteps over the job's IP multicast group: three BSP processes of a
//! job, as threads that pretend to run on three hosts, over this machine's loopback
//! interface (where multicast loops back to the group's members). A superstep in which a
//! process puts or sends the same data to every other goes out once by multicast (the
//! group's counters show one transmission, the transport's almost nothing), also with
//! datagrams lost on receive and beside ordinary puts; a superstep whose messages differ
//! by a put goes by the transport. The results are the same without the group. Every wait
//! is bounded by the job's deadline.

use std::net::SocketAddr;
use std::time::Duration;

use bulkwire_bsp::{Bsp, Config};
use bulkwire_launch::testing::{in_netns, namespaces_missing};
use bulkwire_launch::{Control, JobEnv, Server, ServerConfig};
use bulkwire_link::{FaultConfig, McastMode};
use bulkwire_protocol::mcast::McastStats;

const LIMIT: Duration = Duration::from_secs(60);

fn pattern(n: usize, seed: usize) -> Vec<u8> {
    (0..n)
        .map(|i| (i * 31 + seed * 7 + i / 251) as u8)
        .collect()
}

/// Runs `body` as each of `n` BSP processes on hosts of their own, with the multicast
/// `mode` and `faults` on receive (none for "").
fn job<T: Send>(
    n: u32,
    mode: McastMode,
    faults: &str,
    body: impl Fn(&mut Bsp) -> T + Sync,
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
                    let mut c = Config::default();
                    c.job.mcast.mode = mode;
                    c.job.dead_after = 10_000_000_000;
                    if !faults.is_empty() {
                        c.job.faults = faults.parse::<FaultConfig>().unwrap();
                    }
                    let mut bsp = Bsp::join(ctl, n, c).unwrap();
                    let t = body(&mut bsp);
                    bsp.end().unwrap();
                    t
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let _ = srv.join();
    out
}

fn no_multicast_on_loopback() -> bool {
    let g = "239.192.200.9:31989".parse().unwrap();
    let s = bulkwire_link::McastSettings::default();
    match bulkwire_link::McastLink::open(g, std::net::Ipv4Addr::LOCALHOST, 0, 1, &s) {
        Ok(_) => false,
        Err(e) => {
            eprintln!("skipped: no multicast on the loopback interface here ({e})");
            true
        }
    }
}

/// What one superstep cost a process: the group's counters and the payload bytes its
/// transport sent, as differences over the superstep.
#[derive(Clone, Copy, Debug, Default)]
struct Cost {
    mcast: McastStats,
    unicast_bytes: u64,
}

fn cost(bsp: &Bsp) -> Cost {
    let p = bsp.nprocs();
    Cost {
        mcast: bsp
            .runtime()
            .mcast_stats()
            .map(|(s, _)| s)
            .unwrap_or_default(),
        unicast_bytes: bsp
            .runtime()
            .with_transport(|t| (0..p).map(|d| t.peer_stats(d).bytes_sent).sum())
            .unwrap(),
    }
}

/// The cost of a superstep since `c0`, once an empty superstep has followed it: a
/// process's sync may end when its data has left it, not when it has arrived (the
/// transport may not have sent all of it yet).
fn settle(bsp: &mut Bsp, c0: Cost, costs: &mut Vec<Cost>) {
    bsp.sync().unwrap();
    costs.push(minus(cost(bsp), c0));
}

fn minus(a: Cost, b: Cost) -> Cost {
    let (x, y) = (a.mcast, b.mcast);
    Cost {
        mcast: McastStats {
            data_sent: x.data_sent - y.data_sent,
            bytes_sent: x.bytes_sent - y.bytes_sent,
            repairs_group: x.repairs_group - y.repairs_group,
            repairs_unicast: x.repairs_unicast - y.repairs_unicast,
            data_received: x.data_received - y.data_received,
            ..McastStats::default()
        },
        unicast_bytes: a.unicast_bytes - b.unicast_bytes,
    }
}

const BIG: usize = 1 << 20;
const MID: usize = 96 << 10;

/// Four supersteps at p = 3, every area checked after each; the cost of each superstep
/// (with an empty one after it, see [`settle`]).
///
/// 1. pid 0 puts 1 MiB to everyone (itself too): a broadcast.
/// 2. Two roots and ordinary puts: pid 1 sends a 96 KiB message to both others (BSMP),
///    pid 2 hpputs 96 KiB of its `h` into both others' `a` at 0; pid 0 puts 10 bytes into pid 1's
///    `a` at 0 (overlapped by pid 2's broadcast, which wins: higher pid) and 96 KiB into
///    pid 2's `b`, and gets 16 bytes of pid 2's `a`.
/// 3. pid 0 puts 96 KiB to both others and 10 bytes more to pid 1 only: not one message.
/// 4. pid 1 puts 96 KiB to pid 0 only: not everyone.
fn exercise(bsp: &mut Bsp) -> Vec<Cost> {
    let me = bsp.pid() as usize;
    let p = bsp.nprocs();
    assert_eq!(p, 3);
    let a = bsp.push_reg(vec![0u8; BIG]);
    let b = bsp.push_reg(vec![0u8; MID]);
    let got = bsp.push_reg(vec![0u8; 16]);
    let h = bsp.push_reg(vec![0u8; MID]);
    bsp.set_tagsize(4);
    bsp.sync().unwrap();
    let mut costs = Vec::new();

    // 1: a broadcast by bsp_put.
    let c0 = cost(bsp);
    if me == 0 {
        let data = pattern(BIG, 1);
        for d in 0..p {
            bsp.put(d, &data, &a, 0).unwrap();
        }
    }
    bsp.sync().unwrap();
    assert!(
        bsp.area(&a) == &pattern(BIG, 1)[..],
        "pid {me}: superstep 1"
    );
    settle(bsp, c0, &mut costs);

    // 2: two roots, ordinary puts and a get.
    let c0 = cost(bsp);
    let hp = pattern(MID, 2);
    match me {
        0 => {
            bsp.put(1, b"ten bytes!", &a, 0).unwrap();
            bsp.put(2, &pattern(MID, 3), &b, 0).unwrap();
            bsp.get(2, &a, 0, &got, 0, 16).unwrap();
        }
        1 => {
            let msg = pattern(MID, 4);
            for d in [0, 2] {
                bsp.send(d, b"tag1", &msg).unwrap();
            }
        }
        _ => {
            // Read at the sync.
            bsp.area_mut(&h).copy_from_slice(&hp);
            for d in [0, 1] {
                bsp.hpput(d, &h, 0, &a, 0, MID).unwrap();
            }
        }
    }
    bsp.sync().unwrap();
    let mut want_a = pattern(BIG, 1);
    if me != 2 {
        want_a[..MID].copy_from_slice(&hp);
    }
    assert!(bsp.area(&a) == &want_a[..], "pid {me}: superstep 2, a");
    if me == 2 {
        assert!(
            bsp.area(&b) == &pattern(MID, 3)[..],
            "pid 2: superstep 2, b"
        );
    }
    if me == 0 {
        // Read before any put of the superstep was written.
        assert_eq!(bsp.area(&got), &pattern(BIG, 1)[..16], "pid 0: the get");
    }
    if me == 1 {
        assert_eq!(bsp.qsize(), (0, 0));
    } else {
        assert_eq!(bsp.qsize(), (1, MID));
        let (len, tag) = bsp.get_tag().unwrap();
        assert_eq!((len, &tag[..]), (MID, &b"tag1"[..]));
        let mut m = vec![0u8; MID];
        assert_eq!(bsp.move_message(&mut m), Some(MID));
        assert!(m == pattern(MID, 4), "pid {me}: the message");
    }
    settle(bsp, c0, &mut costs);

    // 3: the root sends one destination more.
    let c0 = cost(bsp);
    if me == 0 {
        let data = pattern(MID, 5);
        bsp.put(1, &data, &b, 0).unwrap();
        bsp.put(2, &data, &b, 0).unwrap();
        bsp.put(1, b"0123456789", &b, 100).unwrap();
    }
    bsp.sync().unwrap();
    if me != 0 {
        let mut want = pattern(MID, 5);
        if me == 1 {
            want[100..110].copy_from_slice(b"0123456789");
        }
        assert!(bsp.area(&b) == &want[..], "pid {me}: superstep 3");
    }
    settle(bsp, c0, &mut costs);

    // 4: a put to only one of the two others.
    let c0 = cost(bsp);
    if me == 1 {
        bsp.put(0, &pattern(MID, 6), &b, 0).unwrap();
    }
    bsp.sync().unwrap();
    if me == 0 {
        assert!(bsp.area(&b) == &pattern(MID, 6)[..], "pid 0: superstep 4");
    }
    settle(bsp, c0, &mut costs);
    costs
}

/// The first superstep's 1 MiB left its root once, by multicast: the group carried its
/// bytes once (not once per receiver) and the transport far less than one copy.
fn check_one_transmission(costs: &[Vec<Cost>]) {
    let root = costs[0][0];
    assert!(
        root.mcast.bytes_sent >= BIG as u64 && root.mcast.bytes_sent < BIG as u64 + 64,
        "{root:?}"
    );
    assert!(root.unicast_bytes < 16 << 10, "{root:?}");
    for c in &costs[1..] {
        assert_eq!(c[0].mcast.bytes_sent, 0, "{c:?}");
        assert!(c[0].mcast.data_received >= root.mcast.data_sent, "{c:?}");
    }
}

#[test]
fn a_superstep_broadcast_goes_out_once_by_multicast() {
    if no_multicast_on_loopback() {
        return;
    }
    let costs = job(3, McastMode::On, "", exercise);
    check_one_transmission(&costs);
    // Superstep 2: pids 1 and 2 multicast their 96 KiB; pid 0's puts differ per
    // destination and take the transport.
    assert_eq!(costs[0][1].mcast.bytes_sent, 0);
    for r in [1, 2] {
        let c = costs[r][1];
        assert!(c.mcast.bytes_sent >= MID as u64, "pid {r}: {c:?}");
        assert!(c.unicast_bytes < 16 << 10, "pid {r}: {c:?}");
    }
    assert!(costs[0][1].unicast_bytes >= MID as u64);
    // Supersteps 3 and 4 take the transport.
    for (r, c) in costs.iter().enumerate() {
        assert_eq!(c[2].mcast.bytes_sent + c[3].mcast.bytes_sent, 0, "pid {r}");
    }
    assert!(costs[0][2].unicast_bytes >= 2 * MID as u64);
    assert!(costs[1][3].unicast_bytes >= MID as u64);
}

#[test]
fn lost_datagrams_of_a_broadcast_are_repaired() {
    if no_multicast_on_loopback() {
        return;
    }
    let costs = job(3, McastMode::On, "loss=0.01,seed=1", exercise);
    check_one_transmission(&costs);
    let repairs: u64 = costs
        .iter()
        .flatten()
        .map(|c| c.mcast.repairs_group + c.mcast.repairs_unicast)
        .sum();
    assert!(repairs > 0, "{costs:?}");
}

#[test]
fn without_the_group_the_same_supersteps_take_the_transport() {
    let costs = job(3, McastMode::Off, "", exercise);
    // pid 0's megabyte went to each of the two others.
    assert!(
        costs[0][0].unicast_bytes >= 2 * BIG as u64,
        "{:?}",
        costs[0]
    );
    assert_eq!(costs[0][0].mcast.bytes_sent, 0);
}

/// A BSP computation of one process per host of `f`, each a thread in its host's
/// namespace, with the rendezvous on host 0, the group as `BULKWIRE_MCAST=auto` finds
/// it, broadcasts by multicast from `mcast_min` bytes, and `faults` on receive at the
/// last host only.
fn fabric_job<T: Send + 'static>(
    f: &bulkwire_launch::testing::Fabric,
    faults: &'static str,
    mcast_min: usize,
    body: fn(&mut Bsp) -> T,
) -> Vec<T> {
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
            let secret = secret.clone();
            in_netns(&f.names[r as usize], move || {
                let mut env = JobEnv::bulkwire(r, n, secret, 9, addr);
                // Threads of one process: each says it is its namespace's host.
                env.host_id = Some(format!("ns{r}"));
                let ctl = Control::join(&env).unwrap();
                let mut c = Config {
                    mcast_min,
                    ..Config::default()
                };
                c.job.mcast.mode = McastMode::Auto;
                c.job.dead_after = 10_000_000_000;
                if r == n - 1 && !faults.is_empty() {
                    c.job.faults = faults.parse::<FaultConfig>().unwrap();
                }
                let mut bsp = Bsp::join(ctl, n, c).unwrap();
                let t = body(&mut bsp);
                bsp.end().unwrap();
                t
            })
        })
        .collect();
    let out = hs.into_iter().map(|h| h.join().unwrap()).collect();
    let _ = srv.join();
    out
}

/// Three hosts as network namespaces on a Linux bridge, which forwards multicast to
/// every port as a switch does: the supersteps' broadcasts take the group, also with
/// 1 % of datagrams dropped at one receiver; with multicast kept from one port, the job
/// goes without the group and the supersteps take the transport.
#[test]
fn over_a_bridge_between_namespaces() {
    use bulkwire_launch::testing::{Fabric, FabricSpec};
    if let Some(why) = namespaces_missing() {
        eprintln!("skipped: {why}");
        return;
    }
    let f = Fabric::new(FabricSpec::unshaped(3, 1500)).expect("the fabric");
    let min = bulkwire_bsp::DEFAULT_MCAST_MIN;
    check_one_transmission(&fabric_job(&f, "", min, exercise));
    check_one_transmission(&fabric_job(&f, "loss=0.01,seed=1", min, exercise));

    // The switch floods multicast to every port but host 2's: the job starts without
    // the group, and the same supersteps take the transport.
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
    let out = fabric_job(&f, "", min, |bsp| {
        let grouped = bsp.runtime().mcast_stats().is_some();
        (grouped, exercise(bsp))
    });
    for (grouped, _) in &out {
        assert!(!grouped, "the group was kept");
    }
    assert!(
        out[0].1[0].unicast_bytes >= 2 * BIG as u64,
        "{:?}",
        out[0].1
    );
}

/// Milliseconds, at pid 0, from the end of an empty superstep to the end of the empty
/// superstep after one in which pid 0 puts `BIG` bytes (`BIG - 64` in odd rounds, under
/// the threshold [`measure_on_a_shaped_switch`] sets, so they take the transport) into
/// every process, in each of `rounds` rounds of each kind, alternating: the medians of
/// the multicast rounds and of the transport's.
fn alternate(bsp: &mut Bsp, rounds: usize) -> (f64, f64) {
    let a = bsp.push_reg(vec![0u8; BIG]);
    bsp.sync().unwrap();
    let data = pattern(BIG, 1);
    let mut t = [Vec::new(), Vec::new()];
    for i in 0..2 * rounds {
        let p2p = i % 2 == 1;
        let n = if p2p { BIG - 64 } else { BIG };
        bsp.sync().unwrap();
        let t0 = std::time::Instant::now();
        if bsp.pid() == 0 {
            for d in 0..bsp.nprocs() {
                bsp.put(d, &data[..n], &a, 0).unwrap();
            }
        }
        bsp.sync().unwrap();
        // Until everyone has everything: the root's sync ends when its data has left
        // it, not when it has arrived.
        bsp.sync().unwrap();
        t[p2p as usize].push(t0.elapsed().as_secs_f64() * 1e3);
        assert!(bsp.area(&a)[..n] == data[..n]);
    }
    let med = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    (med(&mut t[0]), med(&mut t[1]))
}

/// Figures for `docs/performance.md`: on a switch of `BW_MCAST_HOSTS` (default 8) hosts
/// with 100 Mb/s ports and 64 KiB port buffers, a superstep in which pid 0 puts 1 MiB
/// into every process, by multicast against the same by the transport, in alternating
/// rounds of one job (the transport's rounds put 64 bytes less, under the threshold).
/// `cargo test -p bulkwire-bsp --test mcast -- --ignored --nocapture
/// measure_on_a_shaped_switch` as root; `BW_MCAST_FAULTS` injects faults on receive at
/// the last host.
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
        .unwrap_or(8);
    let faults: &'static str =
        std::env::var("BW_MCAST_FAULTS").map_or("", |v| Box::leak(v.into_boxed_str()));
    let f = Fabric::new(FabricSpec::shaped(hosts, 1500, 100_000_000, 64 << 10)).unwrap();
    let out = fabric_job(&f, faults, BIG, |bsp| alternate(bsp, 7));
    // One transmission of 1 MiB: 1408-byte payloads in 1518-byte frames (with the
    // preamble and gap, 1538 bytes of wire time) at 100 Mb/s.
    let frames = BIG.div_ceil(1500 - 28 - 64) as f64;
    let wire = frames * 1538.0 * 8.0 / 1e8 * 1e3;
    let (m, u) = out[0];
    println!(
        "hosts {hosts}, faults {faults:?}: BSP broadcast of 1 MiB by bsp_put: multicast \
         {m:.1} ms, transport {u:.1} ms (ratio {:.2}); one transmission's wire time \
         {wire:.1} ms (ratio {:.2})",
        m / u,
        m / wire
    );
}
