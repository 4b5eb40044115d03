//! Shared-memory rings between real processes: two producers stream to one consumer that
//! sleeps whenever its rings are empty, so every burst needs a doorbell across processes.
//! The test binary re-executes itself as the three ranks (`BWSHM_TEST_CHILD`).

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use bulkwire_launch::{Control, JobEnv, Server, ServerConfig};
use bulkwire_link::{Link, RxBatch, ShmConfig, ShmLink, Tx};

const CHILD_ENV: &str = "BWSHM_TEST_CHILD";
const N: u64 = 100_000;
const LIMIT: Duration = Duration::from_secs(60);

fn dgram(k: u64) -> Vec<u8> {
    let len = 8 + (k as usize * 37) % 3000;
    let mut v: Vec<u8> = (0..len).map(|i| (k as usize ^ i) as u8).collect();
    v[..8].copy_from_slice(&k.to_le_bytes());
    v
}

#[test]
fn producers_and_a_sleeping_consumer_in_processes() {
    let n = 3u32;
    let secret = bulkwire_launch::Secret::generate();
    let mut cfg = ServerConfig::new(n, secret.clone());
    cfg.timeout = Some(LIMIT);
    let server = Server::bind(SocketAddr::from(([127, 0, 0, 1], 0)), cfg).unwrap();
    let job = JobEnv::bulkwire(0, n, secret, 9, server.local_addr());
    let srv = std::thread::spawn(move || server.run());
    let mut children: Vec<_> = (0..n)
        .map(|r| {
            let mut c = Command::new(std::env::current_exe().unwrap());
            c.args(["--exact", "child", "--nocapture", "--test-threads=1"]);
            for (k, _) in std::env::vars() {
                if k.starts_with("BULKWIRE_") {
                    c.env_remove(k);
                }
            }
            c.envs(job.vars_for(r))
                .env(CHILD_ENV, "1")
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let out = children[0].stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        BufReader::new(out)
            .lines()
            .map_while(Result::ok)
            .filter_map(|l| l.split_once("RESULT ").map(|(_, r)| r.to_string()))
            .collect::<Vec<_>>()
    });
    let start = Instant::now();
    for c in &mut children {
        loop {
            if let Some(s) = c.try_wait().unwrap() {
                assert!(s.success(), "a rank failed: {s}");
                break;
            }
            if start.elapsed() > LIMIT {
                for c in &mut children {
                    let _ = c.kill();
                    let _ = c.wait();
                }
                panic!("ranks did not finish within {LIMIT:?}");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    let results = reader.join().unwrap();
    assert!(srv.join().unwrap().success());
    let r = results.first().expect("the consumer reports");
    assert!(r.starts_with("ok"), "{r}");
}

#[test]
fn child() {
    if std::env::var(CHILD_ENV).is_err() {
        return;
    }
    let env = bulkwire_config::Settings::from_env()
        .unwrap()
        .launch
        .job
        .expect("launched");
    let mut ctl = Control::join(&env).unwrap();
    let rank = ctl.rank();
    let local = vec![true; ctl.nprocs() as usize];
    let cfg = ShmConfig {
        ring_bytes: 64 << 10,
        max_datagram: 4096,
    };
    let mut rv = |b: &[u8]| ctl.allgather(b).map_err(std::io::Error::other);
    let mut l = ShmLink::create(rank, &local, &cfg, &mut rv).unwrap();
    let start = Instant::now();
    if rank == 0 {
        let mut next = [0u64; 3];
        let mut rx = RxBatch::new(32, 4096);
        let mut waits = 0u64;
        while next[1] < N || next[2] < N {
            assert!(start.elapsed() < LIMIT, "got {next:?}");
            if l.recv(&mut rx).unwrap() == 0 {
                let t = Instant::now();
                l.wait(Some(Duration::from_secs(5))).unwrap();
                assert!(t.elapsed() < Duration::from_secs(4), "lost wake-up");
                waits += 1;
                continue;
            }
            for d in rx.iter() {
                let k = u64::from_le_bytes(d[..8].try_into().unwrap());
                // Which producer: each sends 0..N in order with contents fixed by k.
                let from = if next[1] == k && d == &dgram(k)[..] {
                    1
                } else {
                    2
                };
                assert_eq!(d, &dgram(next[from])[..], "from {from}");
                next[from] += 1;
            }
        }
        let s = l.stats();
        println!(
            "RESULT ok waits={waits} sleeps={} broken={}",
            s.sleeps, s.broken_rings
        );
        assert_eq!(s.broken_rings, 0);
    } else {
        let mut k = 0;
        while k < N {
            assert!(start.elapsed() < LIMIT);
            let d = dgram(k);
            if l.send(&[Tx {
                dst: 0,
                head: &d,
                body: &[],
            }])
            .unwrap()
                == 1
            {
                k += 1;
                // Pauses now and then, so the consumer runs dry and sleeps.
                if k % 997 == 0 {
                    std::thread::sleep(Duration::from_micros(50 + rank as u64 * 30));
                }
            }
        }
        let s = l.stats();
        assert!(s.doorbells > 0 || s.tx_full > 0);
    }
    // The consumer's mapping keeps the segment (and what producers left in it) alive, so
    // producers may finish first.
    ctl.finish(0).unwrap();
}
