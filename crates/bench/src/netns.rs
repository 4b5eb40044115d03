//! Kernel TCP in seed 000's error-rate experiment: two network namespaces joined by a veth
//! pair (jumbo MTU, like the simulated network), each dropping arriving packets at random
//! with iptables' `statistic` match, at the probability that a frame of that length has
//! at least one of its bits flipped at the given bit-error rate (a corrupted frame fails
//! its checksum and is lost, which is all a bit error can do to TCP). Probabilities are
//! set per length bucket (`-m length`), so control segments and full frames differ as
//! they would; where the kernel hands netfilter a GRO-merged packet, one draw decides for
//! the whole aggregate, which slightly overstates losses of bulk data.
//!
//! Needs root, `ip` and `iptables`; [`tcp_error_rate`] says so when they are missing.

use std::fs::File;
use std::net::{SocketAddr, TcpListener};
use std::os::fd::AsRawFd;
use std::process::Command;
use std::time::{Duration, Instant};

use bulkwire_engine::tcp::establish;
use bulkwire_engine::{Event, TcpConfig, TcpTransport, Transport, WaitPolicy};
use bytes::Bytes;

use crate::errors::{ErrorCurve, ErrorPoint, ErrorRateConfig};
use crate::stats::Summary;

/// Frame length buckets (bytes on the wire, IP length) and the length each stands for.
const BUCKETS: &[(u32, u32, u32)] = &[
    (0, 127, 100),
    (128, 1499, 800),
    (1500, 9099, 9000),
    (9100, 65535, 32000),
];

fn run(cmd: &[&str]) -> Result<(), String> {
    let out = Command::new(cmd[0])
        .args(&cmd[1..])
        .output()
        .map_err(|e| format!("{}: {e}", cmd[0]))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{}: {}",
            cmd.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Two namespaces and the veth between them; removed on drop.
pub struct NetnsPair {
    pub names: [String; 2],
    pub addrs: [String; 2],
}

impl NetnsPair {
    /// Creates the pair (names unique to this process).
    pub fn create() -> Result<NetnsPair, String> {
        let id = std::process::id();
        let names = [format!("bwla{id}"), format!("bwlb{id}")];
        let net = 16 + id % 200;
        let addrs = [format!("10.201.{net}.1"), format!("10.201.{net}.2")];
        let pair = NetnsPair { names, addrs };
        let [a, b] = &pair.names;
        let (va, vb) = (format!("va{id}"), format!("vb{id}"));
        run(&["ip", "netns", "add", a])?;
        run(&["ip", "netns", "add", b])?;
        run(&[
            "ip", "link", "add", &va, "type", "veth", "peer", "name", &vb,
        ])?;
        for (ns, dev, addr) in [(a, &va, &pair.addrs[0]), (b, &vb, &pair.addrs[1])] {
            run(&["ip", "link", "set", dev, "netns", ns])?;
            run(&["ip", "-n", ns, "link", "set", "lo", "up"])?;
            run(&["ip", "-n", ns, "link", "set", dev, "mtu", "9000", "up"])?;
            run(&[
                "ip",
                "-n",
                ns,
                "addr",
                "add",
                &format!("{addr}/24"),
                "dev",
                dev,
            ])?;
        }
        Ok(pair)
    }

    /// Drops arriving packets in both namespaces as bit errors at `ber` would.
    pub fn set_ber(&self, ber: f64) -> Result<(), String> {
        for ns in &self.names {
            run(&["ip", "netns", "exec", ns, "iptables", "-F", "INPUT"])?;
            if ber <= 0.0 {
                continue;
            }
            for &(lo, hi, len) in BUCKETS {
                let p = 1.0 - (1.0 - ber).powf(8.0 * len as f64);
                let (range, prob) = (format!("{lo}:{hi}"), format!("{:.6}", p.min(1.0)));
                run(&[
                    "ip",
                    "netns",
                    "exec",
                    ns,
                    "iptables",
                    "-A",
                    "INPUT",
                    "-m",
                    "length",
                    "--length",
                    &range,
                    "-m",
                    "statistic",
                    "--mode",
                    "random",
                    "--probability",
                    &prob,
                    "-j",
                    "DROP",
                ])?;
            }
        }
        Ok(())
    }

    /// Packets dropped so far in both namespaces.
    pub fn dropped(&self) -> u64 {
        let mut n = 0;
        for ns in &self.names {
            let Ok(out) = Command::new("ip")
                .args(["netns", "exec", ns, "iptables", "-nvxL", "INPUT"])
                .output()
            else {
                continue;
            };
            for line in String::from_utf8_lossy(&out.stdout).lines() {
                if line.contains("DROP") {
                    n += line
                        .split_whitespace()
                        .next()
                        .and_then(|x| x.parse::<u64>().ok())
                        .unwrap_or(0);
                }
            }
        }
        n
    }

    /// Runs `f` on a new thread inside namespace `i`: sockets it creates belong there.
    fn within<T: Send + 'static>(
        &self,
        i: usize,
        f: impl FnOnce() -> std::io::Result<T> + Send + 'static,
    ) -> std::thread::JoinHandle<std::io::Result<T>> {
        let path = format!("/var/run/netns/{}", self.names[i]);
        std::thread::spawn(move || {
            let ns = File::open(&path)?;
            // SAFETY: setns on a namespace fd we opened; it moves only this thread.
            if unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                return Err(std::io::Error::last_os_error());
            }
            f()
        })
    }
}

impl Drop for NetnsPair {
    fn drop(&mut self) {
        for ns in &self.names {
            let _ = run(&["ip", "netns", "del", ns]);
        }
    }
}

/// Two TCP ranks, rank 0 in the pair's first namespace and rank 1 in the second.
fn connect(pair: &NetnsPair) -> Result<(TcpTransport, TcpTransport), String> {
    let e = |e: std::io::Error| e.to_string();
    let ips = pair.addrs.clone();
    let listeners: Vec<TcpListener> = (0..2)
        .map(|i| {
            let ip = ips[i].clone();
            pair.within(i, move || TcpListener::bind((ip.as_str(), 0)))
                .join()
                .map_err(|_| "bind thread panicked".to_string())?
                .map_err(e)
        })
        .collect::<Result<_, _>>()?;
    let addrs: Vec<SocketAddr> = listeners
        .iter()
        .map(|l| l.local_addr().map_err(e))
        .collect::<Result<_, _>>()?;
    let mut hs = Vec::new();
    for (i, l) in listeners.into_iter().enumerate() {
        let addrs = addrs.clone();
        hs.push(pair.within(i, move || {
            establish(i as u32, l, &addrs, 0x10C, Duration::from_secs(20))
        }));
    }
    let mut ts = Vec::new();
    for (i, h) in hs.into_iter().enumerate() {
        let streams = h
            .join()
            .map_err(|_| "connect thread panicked".to_string())?
            .map_err(e)?;
        let policy = WaitPolicy::for_host(2);
        ts.push(TcpTransport::new(i as u32, streams, TcpConfig::default(), policy).map_err(e)?);
    }
    let b = ts.pop().expect("two");
    let a = ts.pop().expect("two");
    Ok((a, b))
}

/// Seed 000's client/server experiment over kernel TCP between two namespaces (see the
/// module). `cfg.limit` bounds each request in real time; `cfg.net` is not used.
pub fn tcp_error_rate(cfg: &ErrorRateConfig) -> Result<ErrorCurve, String> {
    let pair = NetnsPair::create().map_err(|e| {
        format!("kernel TCP under bit errors needs root, ip and iptables (statistic match): {e}")
    })?;
    pair.set_ber(0.0)?;
    let (mut client, server) = connect(&pair)?;
    let limit = Duration::from_nanos(cfg.limit);
    let reply = Bytes::from(vec![0x22u8; cfg.reply_size]);
    // The server answers every request until it receives an empty message.
    let srv = std::thread::spawn(move || {
        let mut t = server;
        loop {
            match t.next_event(Some(Duration::from_secs(3600))) {
                Ok(Event::Message { data, .. }) if data.is_empty() => return,
                Ok(Event::Message { .. }) => {
                    if t.send(0, reply.clone(), false).is_err() {
                        return;
                    }
                }
                Ok(Event::PeerDead { .. }) | Err(_) => return,
                Ok(_) => {}
            }
        }
    });
    let req = Bytes::from(vec![0x11u8; cfg.request_size]);
    let mut points = Vec::new();
    let mut stop = false;
    for &ber in &cfg.bers {
        if stop {
            break;
        }
        pair.set_ber(ber)?;
        let (r0, d0) = (client.peer_stats(1).retransmits, pair.dropped());
        let mut waits = Vec::new();
        let mut unanswered = 0;
        for _ in 0..cfg.requests {
            let t0 = Instant::now();
            client
                .send(1, req.clone(), false)
                .map_err(|e| e.to_string())?;
            let r = client.wait_for(Some(limit), |t| match t.poll_event() {
                Some(Event::Message { .. }) => Some(true),
                Some(Event::PeerDead { .. }) => Some(false),
                _ => None,
            });
            match r {
                Ok(true) => waits.push(t0.elapsed().as_secs_f64()),
                _ => {
                    // The connection is stuck behind this request: later rates would
                    // measure the backlog, not the rate.
                    unanswered += 1;
                    stop = true;
                    break;
                }
            }
        }
        points.push(ErrorPoint {
            ber,
            wait: (!waits.is_empty()).then(|| Summary::of(&waits)),
            answered: waits.len(),
            unanswered,
            retransmits: client.peer_stats(1).retransmits - r0,
            timeouts: 0,
            damaged: pair.dropped() - d0,
        });
    }
    pair.set_ber(0.0)?;
    let _ = client.send(1, Bytes::new(), false);
    let _ = client.flush(Some(Duration::from_secs(5)));
    drop(client);
    let _ = srv.join();
    Ok(ErrorCurve {
        stack: "tcp".into(),
        points,
    })
}
