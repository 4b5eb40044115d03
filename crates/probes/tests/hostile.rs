//! A hostile neighbour: another user of the host watches a running job and throws
//! datagrams at it. Root runs the attacker as `nobody` (uid 65534): this test binary again,
//! with its attack in the environment; run as another user the test says it skips.
//!
//! What must hold: the job's secret and cookie appear in none of the views the other user
//! has (`/proc/*/cmdline`, which `ps` shows; `/proc/*/environ` is the owner's alone);
//! datagrams from it — garbage, and perfect headers with the right cookie, addresses and
//! CRC, as if the cookie had leaked — are counted and dropped, and the job's results are
//! right. At the rendezvous, its forged hello learns nothing and its flood of idle
//! connections does not keep the job from forming.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::time::{Duration, Instant};

use bulkwire_launch::testing::{Out, clean, leftovers, mark};
use bulkwire_launch::{JobEnv, Secret, Server, ServerConfig};
use bulkwire_protocol::wire::{Header, Kind, flags};

const BSP_PROBE: &str = env!("CARGO_BIN_EXE_bsp-probe");
const ATTACK: &str = "BWTEST_ATTACK";
const NOBODY: u32 = 65534;
const FORGED: usize = 200;
const FLOOD: &str = "BWTEST_FLOOD";
const IDLE: usize = 600;

/// Runs this test binary's test `name` as `nobody`, with `env`.
fn as_nobody(name: &str, env: (&str, String)) -> Command {
    let mut c = Command::new(std::env::current_exe().unwrap());
    c.args(["--exact", name, "--nocapture", "--test-threads=1"])
        .env(env.0, env.1)
        .uid(NOBODY)
        .gid(NOBODY);
    c
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// What the attacker is told: where the job's ranks listen, and (to test the packet MAC
/// with a leaked cookie) the cookie. The secret is passed to be searched for, not used.
struct Attack {
    secret: String,
    cookie: u32,
    /// (rank, address of its UDP socket)
    targets: Vec<(u32, SocketAddr)>,
}

impl Attack {
    fn encode(&self) -> String {
        let t: Vec<String> = self
            .targets
            .iter()
            .map(|(r, a)| format!("{r}@{a}"))
            .collect();
        format!("{} {} {}", self.secret, self.cookie, t.join(","))
    }

    fn decode(s: &str) -> Attack {
        let mut w = s.split(' ');
        let secret = w.next().unwrap().to_string();
        let cookie = w.next().unwrap().parse().unwrap();
        let targets = w
            .next()
            .unwrap()
            .split(',')
            .map(|t| {
                let (r, a) = t.split_once('@').unwrap();
                (r.parse().unwrap(), a.parse().unwrap())
            })
            .collect();
        Attack {
            secret,
            cookie,
            targets,
        }
    }
}

/// The attacker's side: runs only in the child started as `nobody`.
#[test]
fn attacker() {
    let Ok(spec) = std::env::var(ATTACK) else {
        return;
    };
    let a = Attack::decode(&spec);
    let cookie_hex = format!("{:08x}", a.cookie);
    // Every view of other processes this user has (its own environment holds the
    // secret to look for).
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        match e.file_name().to_string_lossy().parse::<u32>() {
            Ok(pid) if pid != std::process::id() => {}
            _ => continue,
        }
        for f in ["cmdline", "environ", "comm"] {
            if let Ok(b) = std::fs::read(e.path().join(f)) {
                let text = String::from_utf8_lossy(&b).to_lowercase();
                if text.contains(&a.secret) || text.contains(&cookie_hex) {
                    println!("\nseen-by-another-user {}/{f}", e.path().display());
                }
            }
        }
    }
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    let mut sent = 0;
    for round in 0..FORGED / 20 {
        for &(rank, to) in &a.targets {
            for i in 0..10 {
                let mut h = Header::new(Kind::Data);
                (h.cookie, h.src, h.dst) = (a.cookie, 1 - rank, rank);
                (h.flags, h.seq, h.msg) = (flags::FIRST, (round * 10 + i) as u32, 0);
                // A message of 2^40 bytes, ending in this fragment.
                (h.total, h.offset) = (1 << 40, (1 << 40) - 6);
                let _ = s.send_to(&h.encode_to_vec(b"forged"), to);
                let _ = s.send_to(b"garbage", to);
                sent += 2;
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    println!("\nsent {sent} forged={}", sent / 2);
}

/// The UDP sockets `pid` holds, from its descriptors and the kernel's socket table.
fn udp_ports(pid: u32) -> Vec<u16> {
    let inodes: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| std::fs::read_link(e.path()).ok())
        .filter_map(|l| {
            let l = l.to_string_lossy().into_owned();
            Some(l.strip_prefix("socket:[")?.strip_suffix(']')?.to_string())
        })
        .collect();
    let table = std::fs::read_to_string(format!("/proc/{pid}/net/udp")).unwrap_or_default();
    table
        .lines()
        .skip(1)
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            let port = u16::from_str_radix(w.get(1)?.split(':').nth(1)?, 16).ok()?;
            inodes.contains(&w.get(9)?.to_string()).then_some(port)
        })
        .collect()
}

fn environ(pid: u32, var: &str) -> Option<String> {
    let env = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    let key = format!("{var}=");
    env.split(|&b| b == 0).find_map(|v| {
        let v = String::from_utf8_lossy(v);
        v.strip_prefix(&key).map(str::to_string)
    })
}

#[test]
fn another_user_sees_no_secret_and_cannot_inject_datagrams() {
    if !is_root() {
        eprintln!("skipped: needs root to run the attacker as another user (nobody)");
        return;
    }
    let m = mark();
    let mut job = Command::new(BSP_PROBE);
    // Long enough (seconds) for the attacker to start as another user and send.
    job.args(["2", "steps", "200000"]);
    clean(&mut job, &m);
    job.envs([("BULKWIRE_TRANSPORT", "udp"), ("BULKWIRE_STATS", "on")]);
    let job = std::thread::spawn(move || {
        bulkwire_launch::testing::run(&mut job, Duration::from_secs(120))
    });
    // Both ranks up, each with its UDP socket.
    let deadline = Instant::now() + Duration::from_secs(30);
    let (pids, ports) = loop {
        let pids = leftovers(&m, Duration::ZERO);
        let ports: Vec<Vec<u16>> = pids.iter().map(|&p| udp_ports(p)).collect();
        if pids.len() == 2 && ports.iter().all(|p| !p.is_empty()) {
            break (pids, ports);
        }
        assert!(Instant::now() < deadline, "the job did not start: {pids:?}");
        std::thread::sleep(Duration::from_millis(2));
    };
    let rank =
        |pid: u32| -> u32 { environ(pid, "BULKWIRE_RANK").map_or(0, |r| r.parse().unwrap()) };
    let secret = environ(pids[0], "BULKWIRE_SECRET")
        .or_else(|| environ(pids[1], "BULKWIRE_SECRET"))
        .expect("a rank has the job's secret in its (owner-only) environment");
    let cookie = Secret::from_hex(&secret).expect("64 hex digits").cookie();
    let targets = pids
        .iter()
        .zip(&ports)
        .flat_map(|(&p, ps)| {
            ps.iter()
                .map(move |&port| (rank(p), SocketAddr::from(([127, 0, 0, 1], port))))
        })
        .collect();
    let spec = Attack {
        secret: secret.to_lowercase(),
        cookie,
        targets,
    }
    .encode();
    let mut attacker = as_nobody("attacker", (ATTACK, spec));
    let a: Out = bulkwire_launch::testing::run(&mut attacker, Duration::from_secs(60));
    if a.code != Some(0) && a.stdout.is_empty() {
        eprintln!(
            "skipped: this test binary cannot run as nobody here ({}): {}",
            a.code.unwrap_or(-1),
            a.stderr.trim()
        );
        let _ = job.join();
        return;
    }
    assert!(a.stdout.contains("sent "), "{a:?}");
    let seen: Vec<&str> = (a.stdout.lines())
        .filter(|l| l.contains("seen-by-another-user"))
        .collect();
    assert!(
        seen.is_empty(),
        "another user saw the job's secret or cookie: {seen:?}"
    );
    let out = job.join().unwrap();
    assert_eq!(out.code, Some(0), "{out:?}");
    assert_eq!(out.lines("steps ok").len(), 2, "{out:?}");
    // Every forgery with the leaked cookie failed the packet MAC (the statistics' Rejected:
    // from outside the job); without the MAC they pass the cookie and reach the protocol.
    let total = out
        .stdout
        .lines()
        .chain(out.stderr.lines())
        .find(|l| l.starts_with("total"))
        .unwrap_or_else(|| panic!("no statistics: {out:?}"));
    eprintln!("attacker: {}\njob: {total}", a.stdout.trim());
    let rejected: u64 = total.split_whitespace().nth(4).unwrap().parse().unwrap();
    let forged: u64 = (a.stdout.lines())
        .find_map(|l| l.split("forged=").nth(1))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("{a:?}"));
    assert_eq!(rejected, forged, "every forgery rejected: {total}");
}

/// The flooder's side, as `nobody`: opens many idle connections to the rendezvous, sends
/// one forged hello (a well-formed frame whose proof it cannot know) and prints what came
/// back, then holds the connections while the ranks join.
#[test]
fn flooder() {
    let Ok(addr) = std::env::var(FLOOD) else {
        return;
    };
    let addr: SocketAddr = addr.parse().unwrap();
    let idle: Vec<TcpStream> = (0..IDLE)
        .filter_map(|_| TcpStream::connect(addr).ok())
        .collect();
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    // A HELLO frame: length, type 1, then what a hello holds, the proof a guess.
    let payload = [
        b"BWJC".as_slice(),
        &[2, 0, 3, 0, 0, 0, 4, 0, 0, 0],
        &[0x5A; 80],
    ]
    .concat();
    let mut f = ((payload.len() + 1) as u32).to_le_bytes().to_vec();
    f.push(1);
    f.extend_from_slice(&payload);
    let _ = s.write_all(&f);
    let mut reply = Vec::new();
    let _ = s.read_to_end(&mut reply);
    println!(
        "\nidle={} reply={:?}",
        idle.len(),
        String::from_utf8_lossy(&reply)
    );
    println!("ready");
    std::thread::sleep(Duration::from_secs(3));
    drop(idle);
}

#[test]
fn another_users_forged_hello_and_flood_do_not_stop_a_job() {
    if !is_root() {
        eprintln!("skipped: needs root to run the flooder as another user (nobody)");
        return;
    }
    let secret = Secret::generate();
    let mut cfg = ServerConfig::new(2, secret.clone());
    cfg.timeout = Some(Duration::from_secs(60));
    let srv = Server::bind(SocketAddr::from(([127, 0, 0, 1], 0)), cfg).unwrap();
    let addr = srv.local_addr();
    let srv = std::thread::spawn(move || srv.run());
    let mut flood = as_nobody("flooder", (FLOOD, addr.to_string()));
    let mut flood = flood
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(flood.stdout.take().unwrap()).lines();
    let mut said = Vec::new();
    for l in lines.by_ref() {
        let l = l.unwrap();
        let ready = l == "ready";
        said.push(l);
        if ready {
            break;
        }
    }
    let Some(reply) = said.iter().find(|l| l.starts_with("idle=")) else {
        let _ = flood.kill();
        let _ = flood.wait();
        eprintln!("skipped: this test binary cannot run as nobody here: {said:?}");
        return;
    };
    eprintln!("flooder: {reply}");
    // The forged hello learnt that it was not admitted, and nothing of the job.
    assert!(reply.contains("not admitted"), "{reply}");
    let words = ["size", "rank", "cookie", "secret", "job"];
    for leak in [secret.to_hex(), format!("{:08x}", secret.cookie())]
        .into_iter()
        .chain(words.map(String::from))
    {
        assert!(!reply.to_lowercase().contains(&leak), "{leak:?} in {reply}");
    }
    // The ranks join while the other user holds its connections.
    let env = JobEnv::bulkwire(0, 2, secret, 7, addr);
    let m = mark();
    let t0 = Instant::now();
    let ranks: Vec<_> = (0..2)
        .map(|r| {
            let mut c = Command::new(BSP_PROBE);
            c.args(["2", "steps", "100"]);
            clean(&mut c, &m);
            c.envs(env.vars_for(r));
            std::thread::spawn(move || {
                bulkwire_launch::testing::run(&mut c, Duration::from_secs(60))
            })
        })
        .collect();
    for r in ranks {
        let o = r.join().unwrap();
        assert_eq!(o.code, Some(0), "{o:?}");
        assert_eq!(o.lines("steps ok").len(), 1, "{o:?}");
    }
    let out = srv.join().unwrap();
    assert!(out.success(), "{out:?}");
    eprintln!(
        "the job formed and ran in {:?} beside the flood",
        t0.elapsed()
    );
    let _ = flood.wait();
}
