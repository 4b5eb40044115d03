//! Two "hosts" on one machine: network namespaces joined by a veth pair. The server and
//! rank 0 run in one, rank 1 in the other; each sees only its own interface. This checks
//! what a multi-host launcher relies on: the server is reachable by address, each process
//! binds its data socket on the interface that reaches the server, the cards carry
//! addresses the other host can use, and a remote death (no exit status, only a dropped
//! connection) still reaches the survivors. Skipped where namespaces can't be made (not
//! root, no `ip`).

mod common;

use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use common::*;

const LIMIT: Duration = Duration::from_secs(60);

struct Netns {
    names: [String; 2],
    ips: [String; 2],
}

fn ip(args: &[&str]) -> bool {
    Command::new("ip")
        .args(args)
        .output()
        .is_ok_and(|o| o.status.success())
}

impl Netns {
    fn new() -> Option<Netns> {
        static N: AtomicU32 = AtomicU32::new(0);
        let id = std::process::id() % 10_000 * 10 + N.fetch_add(1, Ordering::SeqCst) % 10;
        let subnet = format!("10.231.{}", id % 250);
        let names = [format!("bwl{id}a"), format!("bwl{id}b")];
        let ips = [format!("{subnet}.1"), format!("{subnet}.2")];
        let ns = Netns { names, ips };
        let [a, b] = &ns.names;
        let (va, vb) = (format!("{a}v"), format!("{b}v"));
        let ok = ip(&["netns", "add", a])
            && ip(&["netns", "add", b])
            && ip(&[
                "link", "add", &va, "netns", a, "type", "veth", "peer", "name", &vb, "netns", b,
            ])
            && ip(&[
                "-n",
                a,
                "addr",
                "add",
                &format!("{}/24", ns.ips[0]),
                "dev",
                &va,
            ])
            && ip(&[
                "-n",
                b,
                "addr",
                "add",
                &format!("{}/24", ns.ips[1]),
                "dev",
                &vb,
            ])
            && ip(&["-n", a, "link", "set", &va, "up"])
            && ip(&["-n", b, "link", "set", &vb, "up"])
            // Traffic to a namespace's own address goes through its loopback.
            && ip(&["-n", a, "link", "set", "lo", "up"])
            && ip(&["-n", b, "link", "set", "lo", "up"]);
        if !ok {
            eprintln!("skipped: cannot set up network namespaces (needs root and ip)");
            return None; // Drop removes whatever was made
        }
        Some(ns)
    }

    /// The probe with `args`, in namespace `i`.
    fn probe(&self, i: usize, args: &[&str], mark: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.names[i], PROBE]).args(args);
        clean(&mut c, mark);
        c.env("BULKWIRE_SECRET", SECRET);
        c
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        for n in &self.names {
            ip(&["netns", "del", n]);
        }
    }
}

fn rank(net: &Netns, i: usize, args: &[&str], addr: &str, m: &str) -> Command {
    let mut c = net.probe(i, args, m);
    c.env("BULKWIRE_RENDEZVOUS", addr)
        .env("BULKWIRE_RANK", i.to_string())
        .env("BULKWIRE_NPROCS", "2")
        .env("BULKWIRE_JOB", "two-hosts")
        .env("BULKWIRE_HOST_ID", format!("host-{i}"));
    c
}

#[test]
fn rendezvous_and_cards_across_namespaces() {
    let Some(net) = Netns::new() else { return };
    let m = mark();
    let bind = format!("{}:0", net.ips[0]);
    let mut server = Live::start(net.probe(0, &["serve", "-n", "2", "--bind", &bind], &m));
    let l = server.expect(LIMIT, |l| l.starts_with("listening "));
    let addr = l.strip_prefix("listening ").unwrap().to_string();
    assert!(addr.starts_with(&net.ips[0]), "{addr}");

    let t: Vec<_> = (0..2)
        .map(|i| {
            let c = rank(&net, i, &["rank", "allgather", "2"], &addr, &m);
            std::thread::spawn(move || run(c, LIMIT))
        })
        .collect();
    for (i, t) in t.into_iter().enumerate() {
        let out = t.join().unwrap();
        assert_eq!(out.code, Some(0), "rank {i}: {out:?}");
        // Only itself on its host; its data socket on the veth address; the other host
        // answered on the address its card gave.
        let want = format!("cards rank={i} n=2 same_host=1 local_ip={}", net.ips[i]);
        assert!(out.stdout.contains(&want), "{out:?}");
        assert!(
            out.stdout.contains(&format!("udp rank={i} heard=1")),
            "{out:?}"
        );
    }
    let (code, _, err) = server.wait(LIMIT);
    assert_eq!(code, Some(0), "{err}");
    assert_no_leftovers(&m);
}

#[test]
fn a_remote_death_reaches_the_other_host() {
    let Some(net) = Netns::new() else { return };
    let m = mark();
    let bind = format!("{}:0", net.ips[0]);
    let mut server = Live::start(net.probe(0, &["serve", "-n", "2", "--bind", &bind], &m));
    let l = server.expect(LIMIT, |l| l.starts_with("listening "));
    let addr = l.strip_prefix("listening ").unwrap().to_string();
    let t: Vec<_> = (0..2)
        .map(|i| {
            let c = rank(&net, i, &["rank", "fail", "kill", "1"], &addr, &m);
            std::thread::spawn(move || run(c, LIMIT))
        })
        .collect();
    let outs: Vec<Out> = t.into_iter().map(|t| t.join().unwrap()).collect();
    // The server has no exit status for a process it didn't start: a dropped connection.
    let line = outs[0]
        .lines("notified rank=0")
        .into_iter()
        .next()
        .unwrap_or_else(|| panic!("{:?}", outs[0]))
        .to_string();
    assert!(
        line.ends_with("failure=rank 1 lost its control connection before finishing (died?)"),
        "{line}"
    );
    let victim = outs[1].lines("victim").into_iter().next().map(ns).unwrap();
    let dt = ns(&line) - victim;
    eprintln!(
        "remote death noticed after {:?}",
        Duration::from_nanos(dt as u64)
    );
    assert!(dt < 1_000_000_000);
    let (code, _, err) = server.wait(LIMIT);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("rank 1 lost its control connection"), "{err}");
    assert_no_leftovers(&m);
}
