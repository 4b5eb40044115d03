//! A job process and mini-launcher for the integration tests of `bulkwire-launch`.
//!
//! ```text
//! launch-probe run [-n N] [--tag] [--timeout-ms T] [--term-delay-ms D] [--kill-grace-ms G] [--bind share|none] -- PROG ARGS..
//! launch-probe serve -n N [--timeout-ms T] [--bind ADDR]   standalone rendezvous server
//! launch-probe rank allgather [ROUNDS]            join, exchange cards and ROUNDS blobs, finish
//! launch-probe rank fail KIND VICTIM [WAIT_MS]    KIND: abort | kill | segv | exit | drop
//! launch-probe rank hang                          join, then wait to be told of a failure
//! launch-probe rank chatter LINES                 write lines in pieces (no job needed)
//! launch-probe rank env                           print the parsed job environment
//! launch-probe rank links                         build the engine, print its links
//! launch-probe rank nprocs                        print available_processors()
//! launch-probe rank cpus                          print the CPUs this process may run on
//! launch-probe selfspawn N [KIND VICTIM]          self-spawn mode (like ./program)
//! ```
//!
//! Times printed (`t=`) are nanoseconds of the realtime clock, comparable across processes.

use std::ffi::OsString;
use std::io::Write;
use std::net::{SocketAddr, UdpSocket};
use std::process::exit;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bulkwire_launch::bind::CpuSet;
use bulkwire_launch::{
    Card, Control, LaunchOpts, Placement, Server, ServerConfig, launch, self_spawn,
};
use bulkwire_probes::{die, say, settings};

fn now_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

fn ms(v: Option<&String>) -> Option<Duration> {
    v.map(|s| Duration::from_millis(s.parse().unwrap_or_else(|_| die("bad milliseconds"))))
}

fn main() {
    // Behave like a C program, where SIGPIPE kills: no write of the library may raise it.
    // SAFETY: setting a signal disposition before any thread exists.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("run") => run(&args[1..]),
        Some("serve") => serve(&args[1..]),
        Some("rank") => rank(&args[1..]),
        Some("selfspawn") => selfspawn(&args[1..]),
        _ => die("usage: launch-probe run|serve|rank|selfspawn ..."),
    }
}

/// Options `-n N --tag --timeout-ms T ...` up to `--`; returns them and what follows.
fn opts(args: &[String]) -> (std::collections::HashMap<String, String>, Vec<String>) {
    let mut m = std::collections::HashMap::new();
    let mut i = 0;
    while i < args.len() {
        let a = &args[i];
        if a == "--" {
            return (m, args[i + 1..].to_vec());
        }
        if a == "--tag" {
            m.insert(a.clone(), String::new());
        } else {
            let v = args
                .get(i + 1)
                .unwrap_or_else(|| die(format!("{a} needs a value")));
            m.insert(a.clone(), v.clone());
            i += 1;
        }
        i += 1;
    }
    (m, Vec::new())
}

fn run(args: &[String]) {
    let (o, cmd) = opts(args);
    let n: u32 = o
        .get("-n")
        .map_or(2, |v| v.parse().unwrap_or_else(|_| die("bad -n")));
    let mut lo = LaunchOpts {
        tag_output: o.contains_key("--tag"),
        timeout: ms(o.get("--timeout-ms")),
        report: Some("launch-probe".into()),
        forward_signals: true,
        ..LaunchOpts::default()
    };
    if let Some(b) = o.get("--bind") {
        lo.placement = Placement::parse(b).unwrap_or_else(|| die("--bind: share or none"));
    }
    if let Some(d) = ms(o.get("--term-delay-ms")) {
        lo.term_delay = d;
    }
    if let Some(d) = ms(o.get("--kill-grace-ms")) {
        lo.kill_grace = d;
    }
    let Some((prog, rest)) = cmd.split_first() else {
        die("run: no program")
    };
    let rest: Vec<OsString> = rest.iter().map(OsString::from).collect();
    match launch(n, prog, &rest, &lo) {
        Ok(out) => {
            eprintln!("launch-probe: exit code {}", out.exit_code());
            exit(out.exit_code())
        }
        Err(e) => die(e),
    }
}

fn serve(args: &[String]) {
    let (o, _) = opts(args);
    let n: u32 = o
        .get("-n")
        .map_or(2, |v| v.parse().unwrap_or_else(|_| die("bad -n")));
    // The tests give the server and its ranks the same secret in their environments.
    let secret = std::env::var("BULKWIRE_SECRET")
        .ok()
        .and_then(|h| bulkwire_launch::Secret::from_hex(&h))
        .unwrap_or_else(|| die("serve: set BULKWIRE_SECRET (64 hex digits)"));
    let mut cfg = ServerConfig::new(n, secret);
    cfg.report = Some("launch-probe serve".into());
    cfg.timeout = ms(o.get("--timeout-ms"));
    let bind: SocketAddr = o
        .get("--bind")
        .map_or(Ok(SocketAddr::from(([127, 0, 0, 1], 0))), |b| b.parse())
        .unwrap_or_else(|e| die(e));
    let server = Server::bind(bind, cfg).unwrap_or_else(|e| die(e));
    say(format!("listening {}", server.local_addr()));
    let out = server.run();
    exit(out.exit_code())
}

/// Joins the job this process was started in: through its rendezvous, or formed through
/// its launcher's bootstrap service (srun, mpirun, mpiexec).
fn join() -> Control {
    let launch = settings().launch;
    match (&launch.job, &launch.boot) {
        (Some(env), _) => Control::join(env).unwrap_or_else(|e| die(e)),
        (None, Some(_)) => self_spawn(1, &launch).unwrap_or_else(|e| die(e)),
        (None, None) => die("not started as part of a job"),
    }
}

/// Exchanges cards and checks them; returns the data socket and the cards.
fn cards(c: &mut Control) -> (UdpSocket, Vec<Card>) {
    let sock = UdpSocket::bind((c.local_ip(), 0)).unwrap_or_else(|e| die(e));
    let mine = c.card(vec![sock.local_addr().unwrap_or_else(|e| die(e))]);
    let all = c.allgather(&mine.to_bytes()).unwrap_or_else(|e| die(e));
    assert_eq!(all.len(), c.nprocs() as usize);
    let cards: Vec<Card> = all
        .iter()
        .map(|b| Card::from_bytes(b).unwrap_or_else(|| die("bad card")))
        .collect();
    for (r, card) in cards.iter().enumerate() {
        assert_eq!(card.rank as usize, r, "cards in rank order");
    }
    let same = cards.iter().filter(|k| k.same_host(&mine)).count();
    say(format!(
        "cards rank={} n={} same_host={same} local_ip={}",
        c.rank(),
        c.nprocs(),
        c.local_ip()
    ));
    (sock, cards)
}

/// Proves the cards usable: a datagram to every peer's card address, one from each back.
fn ping_all(me: u32, sock: &UdpSocket, cards: &[Card]) {
    for k in cards.iter().filter(|k| k.rank != me) {
        sock.send_to(&me.to_le_bytes(), k.addrs[0])
            .unwrap_or_else(|e| die(e));
    }
    sock.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap_or_else(|e| die(e));
    let mut heard = vec![false; cards.len()];
    heard[me as usize] = true;
    let mut buf = [0u8; 16];
    while heard.iter().any(|h| !h) {
        let (n, _) = sock.recv_from(&mut buf).unwrap_or_else(|e| die(e));
        let from = u32::from_le_bytes(buf[..4.min(n)].try_into().unwrap_or([0xff; 4]));
        if let Some(h) = heard.get_mut(from as usize) {
            *h = true;
        }
    }
    say(format!("udp rank={me} heard={}", cards.len() - 1));
}

fn wait_failure(c: &Control, wait: Duration) -> ! {
    match c.state().wait(Some(wait)) {
        Some(f) => {
            say(format!(
                "notified rank={} t={} failure={f}",
                c.rank(),
                now_ns()
            ));
            exit(1)
        }
        None => die(format!("rank {}: no failure notice in {wait:?}", c.rank())),
    }
}

fn fail(c: &Control, kind: &str) -> ! {
    say(format!("victim rank={} t={}", c.rank(), now_ns()));
    match kind {
        "abort" => c.abort(&format!("probe abort from rank {}", c.rank())),
        "kill" => {
            // SAFETY: raising a signal on ourselves.
            unsafe { libc::raise(libc::SIGKILL) };
            unreachable!()
        }
        "segv" => {
            // SAFETY: deliberately not: a write through a null pointer, for a real SIGSEGV.
            unsafe { std::ptr::null_mut::<u64>().write_volatile(1) };
            unreachable!()
        }
        "exit" => exit(3),
        _ => die(format!("unknown failure kind {kind}")),
    }
}

fn rank(args: &[String]) {
    match args.first().map(String::as_str) {
        Some("allgather") => {
            let rounds: u32 = args.get(1).map_or(0, |v| v.parse().unwrap_or(0));
            let mut c = join();
            let (sock, cards) = cards(&mut c);
            ping_all(c.rank(), &sock, &cards);
            for round in 0..rounds {
                let blob = format!("round{round}-rank{}", c.rank()).repeat((round as usize) + 1);
                let all = c.allgather(blob.as_bytes()).unwrap_or_else(|e| die(e));
                for (r, b) in all.iter().enumerate() {
                    let want = format!("round{round}-rank{r}").repeat((round as usize) + 1);
                    assert_eq!(b, want.as_bytes());
                }
            }
            say(format!("done rank={} rounds={rounds}", c.rank()));
            c.finish(0).unwrap_or_else(|e| die(e));
        }
        Some("fail") => {
            let kind = args.get(1).map_or("abort", String::as_str);
            let victim: u32 = args.get(2).map_or(1, |v| v.parse().unwrap_or(1));
            let wait = ms(args.get(3)).unwrap_or(Duration::from_secs(10));
            let mut c = join();
            cards(&mut c);
            if c.rank() == victim {
                fail(&c, kind);
            }
            wait_failure(&c, wait)
        }
        Some("hang") => {
            let mut c = join();
            cards(&mut c);
            say(format!(
                "ready rank={} pid={}",
                c.rank(),
                std::process::id()
            ));
            let Some(f) = c.state().wait(Some(Duration::from_secs(60))) else {
                die("no failure notice in 60 s")
            };
            let r = c.rank();
            say(format!("notified rank={r} t={} failure={f}", now_ns()));
            // Writing on a control connection whose other end is gone: an error, not SIGPIPE
            // (the first write draws the peer's RST, the second would raise the signal).
            let first = c.notify_abort("late");
            std::thread::sleep(Duration::from_millis(50));
            let res = c.finish(0).and(first);
            say(format!("finish rank={r} ok={}", res.is_ok()));
            exit(1)
        }
        Some("chatter") => {
            let lines: u32 = args.get(1).map_or(20, |v| v.parse().unwrap_or(20));
            let me = std::env::var("BULKWIRE_RANK").unwrap_or_default();
            for i in 0..lines {
                let mut o = std::io::stdout().lock();
                let _ = write!(o, "chatter {me} line {i} first-half");
                let _ = o.flush();
                drop(o);
                std::thread::sleep(Duration::from_micros(200));
                let mut o = std::io::stdout().lock();
                let _ = writeln!(o, " second-half");
                let _ = o.flush();
                if i % 5 == 0 {
                    eprintln!("chatter {me} err {i}");
                }
            }
            // A last line without a newline: still forwarded, tagged, whole.
            print!("chatter {me} tail");
            let _ = std::io::stdout().flush();
        }
        Some("links") => {
            // The engine's links to the others: shared memory on this host, UDP between
            // hosts.
            let mut c = join();
            let cfg = settings().p2p.job;
            let (mut engine, info) =
                bulkwire_engine::job::connect(&mut c, &cfg).unwrap_or_else(|e| die(e));
            say(format!(
                "links rank={} links={} local={} host={}",
                c.rank(),
                info.links,
                info.local_count(),
                bulkwire_launch::hostname()
            ));
            bulkwire_engine::job::finish(&mut engine, c, 0).unwrap_or_else(|e| die(e));
        }
        Some("nprocs") => say(format!(
            "nprocs {}",
            settings().launch.available_processors()
        )),
        Some("cpus") => {
            let job = settings().launch.job.unwrap_or_else(|| die("not in a job"));
            say_cpus(&job.rank.to_string(), job.cpus())
        }
        Some("env") => match settings().launch.job {
            Some(e) => say(format!(
                "env rank={} nprocs={} cookie={:#x} job={} launcher={:?} rendezvous={}",
                e.rank,
                e.nprocs,
                e.cookie(),
                e.job_id,
                e.launcher,
                e.rendezvous
            )),
            None => say("env none".into()),
        },
        _ => die("rank: allgather|fail|hang|chatter|env"),
    }
}

/// `cpus rank=R list=0,1 host_cpus=N`: where this process may run, and how many CPUs it
/// believes the job has here.
fn say_cpus(me: &str, host_cpus: usize) {
    let list = CpuSet::current()
        .unwrap_or_else(|e| die(e))
        .cpus()
        .iter()
        .map(|c| c.to_string())
        .collect::<Vec<_>>()
        .join(",");
    say(format!("cpus rank={me} list={list} host_cpus={host_cpus}"));
}

fn selfspawn(args: &[String]) {
    let n: u32 = args.first().map_or(2, |v| v.parse().unwrap_or(2));
    let mut c = self_spawn(n, &settings().launch).unwrap_or_else(|e| die(e));
    cards(&mut c);
    say_cpus(&c.rank().to_string(), c.host_cpus());
    if let (Some(kind), Some(victim)) = (args.get(1), args.get(2)) {
        let victim: u32 = victim.parse().unwrap_or(1);
        if c.rank() == victim {
            fail(&c, kind);
        }
        wait_failure(&c, Duration::from_secs(10));
    }
    let r = c.rank();
    match c.finish(0) {
        Ok(()) => say(format!("finished rank={r}")),
        Err(e) => die(format!("rank {r}: {e}")),
    }
}
