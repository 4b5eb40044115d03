//! Who may join a job and who may pass for its server: members prove the job's secret to
//! the rendezvous server and the server proves it back; strangers learn nothing and can't
//! keep the job from forming.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bulkwire_launch::{Control, JobEnv, JobOutcome, LaunchError, Secret, Server, ServerConfig};

fn secret() -> Secret {
    Secret::from_hex(&"a5".repeat(32)).unwrap()
}

fn server(n: u32) -> (SocketAddr, JoinHandle<JobOutcome>) {
    let mut cfg = ServerConfig::new(n, secret());
    cfg.timeout = Some(Duration::from_secs(30));
    cfg.term_delay = Duration::from_millis(50);
    cfg.kill_grace = Duration::from_millis(200);
    let s = Server::bind(SocketAddr::from(([127, 0, 0, 1], 0)), cfg).unwrap();
    let addr = s.local_addr();
    (addr, std::thread::spawn(move || s.run()))
}

fn env(addr: SocketAddr, rank: u32, nprocs: u32, secret: Secret) -> JobEnv {
    JobEnv::bulkwire(rank, nprocs, secret, 7, addr)
}

/// One control frame from a blocking stream: type and payload.
fn frame(s: &mut TcpStream) -> Option<(u8, Vec<u8>)> {
    let mut hdr = [0u8; 5];
    s.read_exact(&mut hdr).ok()?;
    let len = u32::from_le_bytes([hdr[0], hdr[1], hdr[2], hdr[3]]) as usize;
    let mut p = vec![0u8; len.checked_sub(1)?];
    s.read_exact(&mut p).ok()?;
    Some((hdr[4], p))
}

fn send(s: &mut TcpStream, t: u8, payload: &[u8]) {
    let mut f = ((payload.len() + 1) as u32).to_le_bytes().to_vec();
    f.push(t);
    f.extend_from_slice(payload);
    s.write_all(&f).unwrap();
}

const T_HELLO: u8 = 1;
const T_EXCHANGE: u8 = 2;
const T_WELCOME: u8 = 0x81;
const T_REJECT: u8 = 0x82;
const T_CHALLENGE: u8 = 0x88;
const MAGIC: &[u8] = b"BWJC";

/// A HELLO as a process of the job would send it, with `proof` for its proof.
fn forged_hello(rank: u32, nprocs: u32, proof: [u8; 32]) -> Vec<u8> {
    let mut p = MAGIC.to_vec();
    p.extend_from_slice(&2u16.to_le_bytes());
    p.extend_from_slice(&rank.to_le_bytes());
    p.extend_from_slice(&nprocs.to_le_bytes());
    p.extend_from_slice(&1234u32.to_le_bytes());
    p.extend_from_slice(&3u16.to_le_bytes());
    p.extend_from_slice(b"h/x");
    p.extend_from_slice(&[7u8; 32]);
    p.extend_from_slice(&proof);
    p
}

#[test]
fn a_forged_hello_learns_nothing_and_the_job_still_forms() {
    let (addr, srv) = server(3);
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let (t, challenge) = frame(&mut s).unwrap();
    assert_eq!(t, T_CHALLENGE);
    assert_eq!(&challenge[..4], MAGIC);
    send(&mut s, T_HELLO, &forged_hello(1, 3, [0x55; 32]));
    let (t, text) = frame(&mut s).unwrap();
    assert_eq!(t, T_REJECT);
    let text = String::from_utf8_lossy(&text).into_owned();
    assert_eq!(text, "not admitted");
    let cookie = secret().cookie();
    for leak in [
        "3".to_string(),
        format!("{cookie:x}"),
        format!("{cookie}"),
        secret().to_hex(),
    ] {
        assert!(!text.contains(&leak), "{text:?} shows {leak}");
    }
    // Then closed.
    assert!(frame(&mut s).is_none());
    // Another job's secret is refused the same way, through the real client.
    let e = Control::join(&env(addr, 1, 3, Secret::generate())).unwrap_err();
    assert!(
        matches!(&e, LaunchError::Rejected(m) if m.contains("not admitted")),
        "{e}"
    );
    // The job was not hurt: its members, with the secret, are admitted and run.
    let ranks: Vec<_> = (0..3)
        .map(|r| {
            std::thread::spawn(move || {
                let mut c = Control::join(&env(addr, r, 3, secret())).unwrap();
                c.allgather(&[r as u8]).unwrap();
                c.finish(0).unwrap();
            })
        })
        .collect();
    for t in ranks {
        t.join().unwrap();
    }
    assert!(srv.join().unwrap().success());
}

#[test]
fn a_server_without_the_secret_gets_no_card() {
    // An impostor: it challenges, accepts any hello, and welcomes with a made-up proof.
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let impostor = std::thread::spawn(move || {
        let mut got = Vec::new();
        let (mut s, _) = l.accept().unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut ch = MAGIC.to_vec();
        ch.extend_from_slice(&2u16.to_le_bytes());
        ch.extend_from_slice(&[9u8; 32]);
        send(&mut s, T_CHALLENGE, &ch);
        while let Some((t, _)) = frame(&mut s) {
            got.push(t);
            if t == T_HELLO {
                let mut w = 2u16.to_le_bytes().to_vec();
                w.extend_from_slice(&u32::MAX.to_le_bytes());
                w.extend_from_slice(&[1u8; 32]);
                send(&mut s, T_WELCOME, &w);
            }
        }
        got
    });
    let e = Control::join_timeout(&env(addr, 1, 2, secret()), Duration::from_secs(5))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("did not prove that it knows the job's secret"),
        "{e}"
    );
    // It saw the hello (whose proof is useless to it: bound to its own nonce), and
    // nothing after: no exchange, so no card.
    let got = impostor.join().unwrap();
    assert!(!got.contains(&T_EXCHANGE), "the impostor got {got:?}");
    assert_eq!(got, [T_HELLO], "the impostor got {got:?}");
}

#[test]
fn six_hundred_idle_connections_do_not_keep_a_job_from_forming() {
    let (addr, srv) = server(4);
    let idle: Vec<TcpStream> = (0..600)
        .map(|_| TcpStream::connect(addr).unwrap())
        .collect();
    let t0 = Instant::now();
    let ranks: Vec<_> = (0..4)
        .map(|r| {
            std::thread::spawn(move || {
                let mut c =
                    Control::join_timeout(&env(addr, r, 4, secret()), Duration::from_secs(20))
                        .unwrap();
                let all = c.allgather(&[r as u8]).unwrap();
                assert_eq!(all.len(), 4);
                c.finish(0).unwrap();
            })
        })
        .collect();
    for t in ranks {
        t.join().unwrap();
    }
    assert!(t0.elapsed() < Duration::from_secs(20));
    let out = srv.join().unwrap();
    assert!(out.success(), "{out:?}");
    drop(idle);
}

#[test]
fn the_agent_command_line_holds_no_secret() {
    let s = secret();
    let args = bulkwire_launch::agent::agent_args("10.0.0.1:7000".parse().unwrap(), 3);
    let line = args.join(" ");
    assert!(!line.contains(&s.to_hex()), "{line}");
    assert!(!line.contains(&format!("{:x}", s.cookie())), "{line}");
    assert!(!line.contains(&s.cookie().to_string()), "{line}");
}

#[test]
fn a_job_that_does_not_form_names_the_last_connection_not_admitted() {
    let mut cfg = ServerConfig::new(2, secret());
    cfg.join_timeout = Some(Duration::from_millis(500));
    let s = Server::bind(SocketAddr::from(([127, 0, 0, 1], 0)), cfg).unwrap();
    let addr = s.local_addr();
    let srv = std::thread::spawn(move || s.run());
    // A rank with a stale secret: refused, so the job can't form; the failure says why.
    let e = Control::join(&env(addr, 1, 2, Secret::generate())).unwrap_err();
    assert!(matches!(e, LaunchError::Rejected(_)), "{e}");
    let out = srv.join().unwrap();
    let text = out.failures[0].to_string();
    assert!(
        text.contains("ranks 0-1 have not joined")
            && text.contains("a process from 127.0.0.1 was not admitted (its proof does not match"),
        "{text}"
    );
}
