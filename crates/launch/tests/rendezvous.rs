//! The rendezvous server and control connections in one process: admission, exchanges,
//! failure notices, and robustness against garbage on the control port.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bulkwire_launch::{
    Card, Control, Failure, JobEnv, JobOutcome, LaunchError, Secret, Server, ServerConfig,
};

/// The tests' job secret.
fn secret() -> Secret {
    Secret::from_hex(&"5e".repeat(32)).unwrap()
}

fn server(n: u32, timeout: Duration) -> (SocketAddr, JoinHandle<JobOutcome>) {
    let mut cfg = ServerConfig::new(n, secret());
    cfg.timeout = Some(timeout);
    cfg.term_delay = Duration::from_millis(50);
    cfg.kill_grace = Duration::from_millis(200);
    let s = Server::bind(SocketAddr::from(([127, 0, 0, 1], 0)), cfg).unwrap();
    let addr = s.local_addr();
    (addr, std::thread::spawn(move || s.run()))
}

fn env(addr: SocketAddr, rank: u32, nprocs: u32) -> JobEnv {
    JobEnv::bulkwire(rank, nprocs, secret(), 7, addr)
}

#[test]
fn allgather_cards_and_rounds() {
    for n in [1u32, 2, 4, 8] {
        let (addr, srv) = server(n, Duration::from_secs(20));
        let ranks: Vec<_> = (0..n)
            .map(|r| {
                std::thread::spawn(move || {
                    let mut c = Control::join(&env(addr, r, n)).unwrap();
                    assert!(c.local_ip().is_loopback());
                    let card = c.card(vec![SocketAddr::from(([127, 0, 0, 1], 1000 + r as u16))]);
                    let all = c.allgather(&card.to_bytes()).unwrap();
                    for (k, b) in all.iter().enumerate() {
                        let ck = Card::from_bytes(b).unwrap();
                        assert_eq!(ck.rank, k as u32);
                        assert!(ck.same_host(&card));
                        assert_eq!(ck.addrs[0].port(), 1000 + k as u16);
                    }
                    // Later rounds, with sizes that differ per rank (one empty).
                    for round in 0..5u32 {
                        let blob = vec![r as u8; (r * round) as usize];
                        let all = c.allgather(&blob).unwrap();
                        for (k, b) in all.iter().enumerate() {
                            assert_eq!(b, &vec![k as u8; k * round as usize]);
                        }
                    }
                    assert!(!c.state().is_failed());
                    c.finish(0).unwrap();
                })
            })
            .collect();
        for t in ranks {
            t.join().unwrap();
        }
        let out = srv.join().unwrap();
        assert!(out.success(), "{out:?}");
        assert!(out.ranks.iter().all(|r| r.joined && r.finished == Some(0)));
    }
}

#[test]
fn processes_of_other_jobs_are_rejected_without_harm() {
    let (addr, srv) = server(2, Duration::from_secs(20));
    let mut wrong = env(addr, 1, 2);
    wrong.secret = Secret::generate();
    let e = Control::join(&wrong).unwrap_err();
    assert!(matches!(e, LaunchError::Rejected(_)), "{e}");
    let msg = e.to_string();
    assert!(
        msg.contains("rejected rank 1: not admitted") && msg.contains("BULKWIRE_SECRET"),
        "{msg}"
    );
    let a = Control::join(&env(addr, 0, 2)).unwrap();
    // The stray did not hurt the job, which forms and runs.
    let b = Control::join(&env(addr, 1, 2)).unwrap();
    // Once formed, a duplicate is refused and changes nothing either.
    let e = Control::join(&env(addr, 0, 2)).unwrap_err().to_string();
    assert!(e.contains("rank 0 has already joined"), "{e}");
    let (ta, tb) = (
        std::thread::spawn(move || {
            let mut a = a;
            a.allgather(b"a").unwrap();
            a.finish(0).unwrap()
        }),
        std::thread::spawn(move || {
            let mut b = b;
            b.allgather(b"b").unwrap();
            b.finish(0).unwrap()
        }),
    );
    ta.join().unwrap();
    tb.join().unwrap();
    assert!(srv.join().unwrap().success());
}

#[test]
fn a_process_of_the_job_refused_while_it_forms_fails_it() {
    for (bad, why) in [
        (
            env(SocketAddr::from(([127, 0, 0, 1], 0)), 1, 3),
            "thinks the job has 3 processes",
        ),
        (
            env(SocketAddr::from(([127, 0, 0, 1], 0)), 0, 2),
            "rank 0 has already joined",
        ),
    ] {
        let (addr, srv) = server(2, Duration::from_secs(20));
        let a = Control::join(&env(addr, 0, 2)).unwrap();
        let e = Control::join(&JobEnv {
            rendezvous: addr,
            ..bad
        })
        .unwrap_err()
        .to_string();
        assert!(e.contains(why), "{e}");
        let f = a
            .state()
            .wait(Some(Duration::from_secs(5)))
            .expect("failed");
        let text = f.to_string();
        assert!(text.contains("cannot form") && text.contains(why), "{text}");
        let out = srv.join().unwrap();
        assert_eq!(out.failures.len(), 1, "{out:?}");
        drop(a);
    }
}

#[test]
fn a_job_that_does_not_form_in_time_names_the_missing_ranks() {
    let mut cfg = ServerConfig::new(4, secret());
    cfg.join_timeout = Some(Duration::from_millis(300));
    cfg.term_delay = Duration::from_millis(50);
    cfg.kill_grace = Duration::from_millis(200);
    let s = Server::bind(SocketAddr::from(([127, 0, 0, 1], 0)), cfg).unwrap();
    let addr = s.local_addr();
    let t0 = Instant::now();
    let srv = std::thread::spawn(move || s.run());
    let a = Control::join(&env(addr, 0, 4)).unwrap();
    let c = Control::join(&env(addr, 2, 4)).unwrap();
    let f = a
        .state()
        .wait(Some(Duration::from_secs(10)))
        .expect("failed");
    assert!(t0.elapsed() >= Duration::from_millis(300));
    let text = f.to_string();
    assert!(
        text.contains("did not form within 0.3 s") && text.contains("ranks 1, 3 have not joined"),
        "{text}"
    );
    // Every member learns it, each when its own notice arrives.
    assert_eq!(c.state().wait(Some(Duration::from_secs(10))), Some(f));
    let out = srv.join().unwrap();
    assert_eq!(out.exit_code(), 1);
    drop((a, c));
}

#[test]
fn abort_reaches_everyone() {
    let n = 4;
    let (addr, srv) = server(n, Duration::from_secs(20));
    let cs: Vec<Control> = {
        let ts: Vec<_> = (0..n)
            .map(|r| std::thread::spawn(move || Control::join(&env(addr, r, n)).unwrap()))
            .collect();
        ts.into_iter().map(|t| t.join().unwrap()).collect()
    };
    let t0 = Instant::now();
    cs[2].notify_abort("out of cheese").unwrap();
    for c in &cs {
        let f = c
            .state()
            .wait(Some(Duration::from_secs(5)))
            .expect("notified");
        assert_eq!(
            f,
            Failure::Aborted {
                rank: 2,
                message: "out of cheese".into()
            }
        );
    }
    eprintln!("abort notice to all {n} ranks in {:?}", t0.elapsed());
    // A wait on an exchange ends at once on a failed job.
    let mut c0 = cs.into_iter().next().unwrap();
    assert!(matches!(c0.allgather(b"x"), Err(LaunchError::JobFailed(_))));
    drop(c0);
    let out = srv.join().unwrap();
    assert_eq!(out.failures.len(), 1);
    assert_eq!(out.exit_code(), 1);
}

#[test]
fn leaving_without_finish_fails_the_job_and_wakes_waiters() {
    let (addr, srv) = server(3, Duration::from_secs(20));
    let mut a = Control::join(&env(addr, 0, 3)).unwrap();
    let b = Control::join(&env(addr, 1, 3)).unwrap();
    let c = Control::join(&env(addr, 2, 3)).unwrap();
    let state = a.state();
    // The wake fd is readable after the failure, for engines that block in poll.
    let fd = state.wake_fd().unwrap();
    let waiter = std::thread::spawn(move || {
        let r = a.allgather(b"waiting");
        (r, a)
    });
    std::thread::sleep(Duration::from_millis(50));
    let t0 = Instant::now();
    drop(b); // rank 1 goes away in the middle of the job
    let (r, a) = waiter.join().unwrap();
    let took = t0.elapsed();
    match r {
        Err(LaunchError::JobFailed(Failure::Disconnected { rank: 1 })) => {}
        other => panic!("{other:?}"),
    }
    assert!(took < Duration::from_secs(1), "{took:?}");
    let mut p = [libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    }];
    // SAFETY: one valid pollfd, no wait.
    let ready = unsafe { libc::poll(p.as_mut_ptr(), 1, 0) };
    assert_eq!(ready, 1);
    // Rank 2 learns it from its own control connection, a moment later.
    assert!(c.state().wait(Some(Duration::from_secs(2))).is_some());
    drop(a);
    drop(c);
    let out = srv.join().unwrap();
    assert_eq!(out.failures, vec![Failure::Disconnected { rank: 1 }]);
}

#[test]
fn finishing_while_others_wait_in_a_round_fails_instead_of_hanging() {
    let (addr, srv) = server(2, Duration::from_secs(20));
    let mut a = Control::join(&env(addr, 0, 2)).unwrap();
    let b = Control::join(&env(addr, 1, 2)).unwrap();
    let t = std::thread::spawn(move || a.allgather(b"a"));
    std::thread::sleep(Duration::from_millis(50));
    b.finish(0).unwrap();
    let r = t.join().unwrap();
    assert!(
        matches!(
            &r,
            Err(LaunchError::JobFailed(Failure::Other { rank: Some(1), .. }))
        ),
        "{r:?}"
    );
    assert!(!srv.join().unwrap().success());
}

#[test]
fn launcher_loss_is_noticed() {
    let (addr, srv) = server(1, Duration::from_millis(300));
    let c = Control::join(&env(addr, 0, 1)).unwrap();
    // The server's time limit ends the job; it then stops waiting for us and hangs up.
    let f = c
        .state()
        .wait(Some(Duration::from_secs(5)))
        .expect("notified");
    assert!(matches!(f, Failure::TimedOut { .. }), "{f}");
    let out = srv.join().unwrap();
    assert_eq!(out.exit_code(), 124);
    // The connection is gone: a finish can't be acknowledged, and says so.
    assert!(c.finish(0).is_err());
}

#[test]
fn garbage_on_the_control_port_is_dropped() {
    let (addr, srv) = server(1, Duration::from_secs(20));
    // An absurd frame length, a bad magic, a message before hello, random bytes, a
    // truncated frame then EOF: each connection is dropped; none is admitted.
    let junk: Vec<Vec<u8>> = vec![
        u32::MAX.to_le_bytes().to_vec(),
        vec![9, 0, 0, 0, 1, b'x', b'x', b'x', b'x', 0, 0, 0, 0],
        vec![5, 0, 0, 0, 2, 0, 0, 0, 0],
        (0..4096u32)
            .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
            .collect(),
        vec![200, 0, 0, 0, 1, 2, 3],
    ];
    for j in junk {
        let mut s = TcpStream::connect(addr).unwrap();
        let _ = s.write_all(&j);
        let _ = s.shutdown(std::net::Shutdown::Write);
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut sink = Vec::new();
        let _ = s.read_to_end(&mut sink); // the server hangs up (maybe after a rejection)
    }
    let mut c = Control::join(&env(addr, 0, 1)).unwrap();
    assert_eq!(
        c.allgather(b"still fine").unwrap(),
        vec![b"still fine".to_vec()]
    );
    c.finish(0).unwrap();
    assert!(srv.join().unwrap().success());
}

#[test]
fn oversized_blob_is_refused_locally() {
    let (addr, srv) = server(1, Duration::from_secs(20));
    let mut c = Control::join(&env(addr, 0, 1)).unwrap();
    let big = vec![0u8; bulkwire_launch::MAX_BLOB + 1];
    assert!(matches!(
        c.allgather(&big),
        Err(LaunchError::TooLarge { .. })
    ));
    let max = vec![7u8; bulkwire_launch::MAX_BLOB];
    assert_eq!(c.allgather(&max).unwrap()[0].len(), max.len());
    c.finish(0).unwrap();
    assert!(srv.join().unwrap().success());
}

#[test]
fn control_can_be_shared_across_threads() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<Control>();
    send_sync::<bulkwire_launch::JobState>();
}
