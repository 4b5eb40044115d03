//! `job::connect` across real processes: the transport chosen by `BULKWIRE_TRANSPORT` per
//! peer (with `BULKWIRE_HOST_ID` faking hosts), the protocol chosen for it, delivery through
//! it, clear errors, and no shared memory left behind when processes are killed.
//!
//! The test binary is its own job process: the test runs a rendezvous server on a thread and
//! re-executes this binary with `BWJOB_TEST_CHILD=<scenario>`, which makes the `child` test
//! below act as one rank.

mod common;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use bulkwire_engine::job::connect;
use bulkwire_engine::{Event, Transport};
use bulkwire_launch::{Control, JobEnv, Server, ServerConfig};
use bytes::Bytes;
use common::{Checker, bytes_of, plan};

const CHILD_ENV: &str = "BWJOB_TEST_CHILD";
const LIMIT: Duration = Duration::from_secs(90);

/// One rank's lines starting with `RESULT `, and its exit status.
#[derive(Debug)]
struct RankOut {
    results: Vec<String>,
    code: Option<i32>,
}

struct Job {
    children: Vec<Child>,
    lines: mpsc::Receiver<(usize, String)>,
    server: Option<std::thread::JoinHandle<bulkwire_launch::JobOutcome>>,
}

fn start(scenario: &str, hosts: &[&str], env: &[(&str, &str)]) -> Job {
    let n = hosts.len() as u32;
    let secret = bulkwire_launch::Secret::generate();
    let mut cfg = ServerConfig::new(n, secret.clone());
    cfg.timeout = Some(LIMIT);
    cfg.term_delay = Duration::from_millis(50);
    cfg.kill_grace = Duration::from_millis(500);
    // The test, not the server, reaps the children (the server would otherwise wait for
    // them through pidfds and take their exit statuses).
    let server = Server::bind(SocketAddr::from(([127, 0, 0, 1], 0)), cfg).unwrap();
    let job = JobEnv::bulkwire(0, n, secret, 42, server.local_addr());
    let (tx, lines) = mpsc::channel();
    let mut children = Vec::new();
    for (r, host) in hosts.iter().enumerate() {
        let mut c = Command::new(std::env::current_exe().unwrap());
        c.args(["--exact", "child", "--nocapture", "--test-threads=1"]);
        for (k, _) in std::env::vars() {
            if k.starts_with("BULKWIRE_") || k.starts_with("SLURM_") || k.starts_with("OMPI_") {
                c.env_remove(k);
            }
        }
        c.envs(job.vars_for(r as u32))
            .env("BULKWIRE_HOST_ID", host)
            .env("BULKWIRE_SPIN_US", "50")
            .env(CHILD_ENV, scenario);
        // "K=V" applies to every rank, "R:K=V" to rank R only.
        for (k, v) in env {
            match k.split_once(':') {
                Some((rank, k)) if rank.parse() == Ok(r) => {
                    c.env(k, v);
                }
                Some(_) => {}
                None => {
                    c.env(k, v);
                }
            }
        }
        c.stdin(Stdio::null()).stdout(Stdio::piped());
        let mut child = c.spawn().unwrap();
        let out = child.stdout.take().unwrap();
        let tx = tx.clone();
        std::thread::spawn(move || {
            for l in BufReader::new(out).lines().map_while(Result::ok) {
                // libtest may have written "test child ... " on the same line.
                if let Some((_, rest)) = l.split_once("RESULT ") {
                    let _ = tx.send((r, rest.to_string()));
                }
            }
        });
        children.push(child);
    }
    Job {
        children,
        lines,
        server: Some(std::thread::spawn(move || server.run())),
    }
}

impl Job {
    /// Waits for every rank to exit (killing them all past the limit).
    fn finish(&mut self) -> Vec<RankOut> {
        let start = Instant::now();
        let mut codes = vec![None; self.children.len()];
        let mut left = self.children.len();
        while left > 0 {
            for (i, c) in self.children.iter_mut().enumerate() {
                if codes[i].is_none()
                    && let Some(s) = c.try_wait().unwrap()
                {
                    codes[i] = Some(s.code());
                    left -= 1;
                }
            }
            if start.elapsed() > LIMIT {
                for c in &mut self.children {
                    let _ = c.kill();
                    let _ = c.wait();
                }
                panic!("job did not end within {LIMIT:?}");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        if let Some(s) = self.server.take() {
            let _ = s.join();
        }
        let mut outs: Vec<RankOut> = codes
            .into_iter()
            .map(|c| RankOut {
                results: Vec::new(),
                code: c.flatten(),
            })
            .collect();
        while let Ok((r, l)) = self.lines.recv_timeout(Duration::from_millis(200)) {
            outs[r].results.push(l);
        }
        outs
    }
}

impl Drop for Job {
    /// A failed test leaves no process behind.
    fn drop(&mut self) {
        for c in &mut self.children {
            if matches!(c.try_wait(), Ok(None)) {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }
}

fn run(scenario: &str, hosts: &[&str], env: &[(&str, &str)]) -> Vec<RankOut> {
    start(scenario, hosts, env).finish()
}

fn first(o: &RankOut) -> &str {
    o.results.first().map_or("", |s| s.as_str())
}

#[test]
fn auto_on_one_host_is_shared_memory_with_utopia() {
    for o in run("deliver", &["h"; 3], &[]) {
        assert_eq!(first(&o), "links=shm protocol=utopia check=none", "{o:?}");
        assert!(o.results.contains(&"delivered".to_string()), "{o:?}");
        assert_eq!(o.code, Some(0));
    }
}

#[test]
fn auto_on_two_hosts_routes_per_peer_with_holefill() {
    let outs = run("deliver", &["a", "b", "a", "b"], &[]);
    for o in &outs {
        // The hosts "a" and "b" are one machine's loopback here: intact, so the MAC covers
        // the header alone (others can send to the socket but not read its datagrams).
        assert_eq!(
            first(o),
            "links=shm+udp protocol=holefill check=mac-header",
            "{o:?}"
        );
        assert!(o.results.contains(&"delivered".to_string()), "{o:?}");
        assert_eq!(o.code, Some(0));
    }
}

#[test]
fn chosen_protocol_and_faults_are_respected() {
    for o in run("deliver", &["h"; 2], &[("BULKWIRE_PROTOCOL", "gbn")]) {
        assert_eq!(first(&o), "links=shm protocol=gbn check=none", "{o:?}");
        assert!(o.results.contains(&"delivered".to_string()), "{o:?}");
    }
    let faults = [("BULKWIRE_FAULTS", "loss=0.02,seed=1")];
    for o in run("deliver", &["h"; 2], &faults) {
        assert_eq!(first(&o), "links=shm protocol=holefill check=none", "{o:?}");
        assert!(o.results.contains(&"delivered".to_string()), "{o:?}");
    }
    for o in run("deliver", &["h"; 2], &[("BULKWIRE_TRANSPORT", "udp")]) {
        assert_eq!(
            first(&o),
            "links=udp protocol=holefill check=mac-header",
            "{o:?}"
        );
        assert!(o.results.contains(&"delivered".to_string()), "{o:?}");
    }
    // Corrupted bytes need the payload checked, and so does a user who asks for it: by
    // the MAC over header and payload, or by the CRC without it.
    let corrupt = [
        ("BULKWIRE_TRANSPORT", "udp"),
        ("BULKWIRE_FAULTS", "corrupt=0.02,seed=3"),
    ];
    let always = [
        ("BULKWIRE_TRANSPORT", "udp"),
        ("BULKWIRE_CHECKSUM", "always"),
    ];
    for env in [&corrupt[..], &always[..]] {
        for o in run("deliver", &["h"; 2], env) {
            assert_eq!(first(&o), "links=udp protocol=holefill check=mac", "{o:?}");
            assert!(o.results.contains(&"delivered".to_string()), "{o:?}");
        }
        for (auth, check) in [("off", "crc"), ("header", "mac-crc")] {
            let e: Vec<_> = env
                .iter()
                .copied()
                .chain([("BULKWIRE_AUTH", auth)])
                .collect();
            for o in run("deliver", &["h"; 2], &e) {
                let want = format!("links=udp protocol=holefill check={check}");
                assert_eq!(first(&o), want, "{o:?}");
                assert!(o.results.contains(&"delivered".to_string()), "{o:?}");
            }
        }
    }
}

#[test]
fn ranks_that_disagree_on_the_mac_fail_at_once() {
    let env = [("BULKWIRE_TRANSPORT", "udp"), ("1:BULKWIRE_AUTH", "off")];
    for o in run("deliver", &["h"; 2], &env) {
        let r = first(&o);
        assert!(
            r.starts_with("error") && r.contains("BULKWIRE_AUTH"),
            "{o:?}"
        );
    }
}

#[test]
fn ranks_that_disagree_on_the_checksum_fail_at_once() {
    let env = [
        ("BULKWIRE_TRANSPORT", "udp"),
        ("0:BULKWIRE_CHECKSUM", "always"),
    ];
    for o in run("deliver", &["h"; 2], &env) {
        let r = first(&o);
        assert!(
            r.starts_with("error") && r.contains("BULKWIRE_CHECKSUM"),
            "{o:?}"
        );
    }
}

#[test]
fn shm_across_hosts_is_a_clear_error() {
    for o in run("deliver", &["a", "b"], &[("BULKWIRE_TRANSPORT", "shm")]) {
        let r = first(&o);
        assert!(
            r.starts_with("error") && r.contains("shared memory reaches only one host"),
            "{o:?}"
        );
    }
}

/// Every `memfd:bulkwire` descriptor `pid` holds.
fn memfd_fds(pid: u32) -> Vec<String> {
    let Ok(rd) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return Vec::new();
    };
    rd.filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .map(|p| p.to_string_lossy().into_owned())
        .filter(|p| p.contains("memfd:bulkwire"))
        .collect()
}

fn dev_shm() -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir("/dev/shm")
        .map(|rd| {
            rd.filter_map(|e| Some(e.ok()?.file_name().to_string_lossy().into_owned()))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

#[test]
fn nothing_is_left_after_sigkill() {
    let before = dev_shm();
    let mut job = start("hold", &["h"; 3], &[]);
    let mut ready = 0;
    let deadline = Instant::now() + LIMIT;
    while ready < 3 {
        let (_, l) = job
            .lines
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .expect("ranks connect");
        if l == "ready" {
            ready += 1;
        }
    }
    for c in &job.children {
        let maps = std::fs::read_to_string(format!("/proc/{}/maps", c.id())).unwrap();
        assert!(
            maps.contains("memfd:bulkwire-shm-link"),
            "every rank maps the segment"
        );
        assert_eq!(
            memfd_fds(c.id()),
            Vec::<String>::new(),
            "once mapped everywhere, no descriptor (no name) is left"
        );
    }
    assert_eq!(dev_shm(), before, "nothing was ever named in /dev/shm");
    let pids: Vec<u32> = job.children.iter().map(|c| c.id()).collect();
    for &p in &pids {
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(p as i32, libc::SIGKILL) };
    }
    let outs = job.finish();
    assert!(outs.iter().all(|o| o.code.is_none()), "killed: {outs:?}");
    assert_eq!(dev_shm(), before, "nothing left in /dev/shm");
    for p in pids {
        assert!(!std::path::Path::new(&format!("/proc/{p}")).exists());
    }
}

/// One rank of a job, when run as a child by the tests above.
/// The lines of `outs` that start with `prefix`, one per rank.
fn lines_with<'a>(outs: &'a [RankOut], prefix: &str) -> Vec<&'a str> {
    outs.iter()
        .map(|o| {
            o.results
                .iter()
                .find(|l| l.starts_with(prefix))
                .map_or("", |l| l.as_str())
        })
        .collect()
}

#[test]
fn the_multicast_group_carries_broadcasts_across_hosts() {
    // Three "hosts" on this machine's loopback, where multicast loops back to members.
    let outs = run("mcast", &["a", "b", "c"], &[("BULKWIRE_MCAST", "auto")]);
    for o in &outs {
        assert!(o.results.contains(&"mcast=on".to_string()), "{o:?}");
        assert!(
            o.results.iter().any(|l| l.starts_with("broadcasts ok")),
            "{o:?}"
        );
        assert_eq!(o.code, Some(0));
    }
    // A loss of 2 % on receive is repaired.
    let lossy = [
        ("BULKWIRE_MCAST", "on"),
        ("BULKWIRE_FAULTS", "loss=0.02,seed=5"),
    ];
    let outs = run("mcast", &["a", "b", "c"], &lossy);
    for o in &outs {
        assert!(
            o.results.iter().any(|l| l.starts_with("broadcasts ok")),
            "{o:?}"
        );
    }
    assert!(
        lines_with(&outs, "broadcasts ok")
            .iter()
            .any(|l| !l.contains("repairs=0 ")),
        "{outs:?}"
    );
}

#[test]
fn multicast_is_not_opened_on_one_host_or_when_off() {
    for env in [&[][..], &[("BULKWIRE_MCAST", "off")]] {
        for o in run("mcast", &["h", "h"], env) {
            assert!(o.results.contains(&"mcast=none".to_string()), "{o:?}");
        }
    }
}

#[test]
fn a_group_that_does_not_reach_everyone_falls_back_or_fails() {
    // Rank 2 joins another group: it hears no one and no one hears it, as on a network
    // that drops multicast.
    let env = [
        ("BULKWIRE_MCAST", "auto"),
        ("2:BULKWIRE_MCAST_GROUP", "239.192.77.77:31313"),
    ];
    let outs = run("mcast", &["a", "b", "c"], &env);
    for o in &outs {
        let l = o
            .results
            .iter()
            .find(|l| l.starts_with("mcast="))
            .unwrap_or_else(|| panic!("{o:?}"));
        assert!(l.starts_with("mcast=off multicast off: "), "{l}");
        assert!(l.contains("rank 2 heard nothing from 0, 1"), "{l}");
        assert_eq!(o.code, Some(0));
    }
    let on = [
        ("BULKWIRE_MCAST", "on"),
        ("2:BULKWIRE_MCAST_GROUP", "239.192.77.77:31313"),
    ];
    for o in run("mcast", &["a", "b", "c"], &on) {
        assert!(first(&o).starts_with("error "), "{o:?}");
        assert!(first(&o).contains("BULKWIRE_MCAST=on"), "{o:?}");
    }
}

#[test]
fn child() {
    let Ok(scenario) = std::env::var(CHILD_ENV) else {
        return;
    };
    let settings = bulkwire_config::Settings::from_env().unwrap();
    let env = settings.launch.job.clone().expect("launched");
    let mut ctl = Control::join(&env).unwrap();
    let (mut e, info) = match connect(&mut ctl, settings.job()) {
        Ok(x) => x,
        Err(err) => {
            println!("RESULT error {err}");
            ctl.finish(0).unwrap();
            return;
        }
    };
    println!(
        "RESULT links={} protocol={} check={}",
        info.links,
        e.protocol_name(),
        e.endpoint().integrity()
    );
    match scenario.as_str() {
        "deliver" => deliver(&mut e, ctl.rank(), ctl.nprocs()),
        "mcast" => group(&ctl, &settings, &info),
        "hold" => {
            println!("RESULT ready");
            std::thread::sleep(LIMIT);
        }
        other => panic!("unknown scenario {other}"),
    }
    println!("RESULT delivered");
    ctl.finish(0).unwrap();
}

/// Reports whether the job kept its multicast group and, if it did, broadcasts over it
/// from two roots, checked, with the stats.
fn group(ctl: &Control, s: &bulkwire_config::Settings, info: &bulkwire_engine::job::JobInfo) {
    let mcfg = bulkwire_protocol::mcast::McastConfig::new(1);
    let Some(mut g) = bulkwire_engine::job::mcast_group(ctl, s.job(), info, mcfg).unwrap() else {
        match &info.mcast_off {
            Some(why) => println!("RESULT mcast=off {why}"),
            None => println!("RESULT mcast=none"),
        }
        return;
    };
    println!("RESULT mcast=on");
    let (r, p) = (ctl.rank(), ctl.nprocs());
    for (root, n) in [(0, 1 << 20), (p - 1, 300_001), (0, 10)] {
        let want: Vec<u8> = (0..n).map(|i| (i * 7 + root as usize) as u8).collect();
        let mut buf = if r == root { want.clone() } else { vec![0; n] };
        g.broadcast(root, &mut buf).unwrap();
        assert!(buf == want, "rank {r}: broadcast from {root} corrupted");
    }
    let st = g.stats();
    println!(
        "RESULT broadcasts ok repairs={} nacks={} drops={}",
        st.repairs_group + st.repairs_unicast,
        st.nacks_sent,
        g.drops().total()
    );
}

/// Random traffic among all ranks, checked; then a "DONE" message to every peer (after its
/// traffic, in per-pair order), and serving until every peer's DONE has come and everything
/// sent is acknowledged, plus a linger so that peers get their last acknowledgements.
fn deliver(e: &mut bulkwire_engine::Engine, r: u32, p: u32) {
    let msgs = plan(11, p, 60 * p as usize, 2 << 20, 12 << 20, 0);
    let mut checker = Checker::new(p, &msgs);
    let expected: Vec<usize> = (0..p)
        .map(|s| msgs.iter().filter(|m| m.src == s && m.dst == r).count())
        .collect();
    let mut got = vec![0usize; p as usize];
    for m in msgs.iter().filter(|m| m.src == r) {
        e.send(m.dst, bytes_of(m), false).unwrap();
    }
    for d in (0..p).filter(|&d| d != r) {
        e.send(d, Bytes::from_static(b"DONE"), false).unwrap();
    }
    let start = Instant::now();
    let mut dones = 0;
    let mut quiet_since: Option<Instant> = None;
    loop {
        assert!(
            start.elapsed() < LIMIT,
            "rank {r}: got {got:?} of {expected:?}"
        );
        if let Ok(ev) = e.wait_for(Some(Duration::from_millis(20)), |t| t.poll_event()) {
            match ev {
                Event::Message { from, ref data, .. }
                    if got[from as usize] == expected[from as usize] =>
                {
                    assert_eq!(data, b"DONE", "rank {r}: extra message from {from}");
                    dones += 1;
                }
                Event::Message { from, .. } => {
                    checker.check(r, &ev);
                    got[from as usize] += 1;
                }
                other => checker.check(r, &other),
            }
        }
        if dones == p - 1 && !e.busy() {
            let q = *quiet_since.get_or_insert_with(Instant::now);
            if q.elapsed() > Duration::from_millis(300) {
                return;
            }
        }
    }
}
