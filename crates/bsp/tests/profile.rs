//! The cost profile (`Config::profile`) of a program whose supersteps and h-relations are
//! known, run as threads over the in-process link: the files read back hold one record
//! per superstep and process, with the bytes, messages, time and packets the program
//! caused.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bulkwire_bsp::profile::{Profile, Record, read_set};
use bulkwire_bsp::{Bsp, Config};
use bulkwire_engine::{Endpoint, EndpointConfig, Engine, WaitPolicy};
use bulkwire_link::{FaultConfig, Faulty, Link, inproc};
use bulkwire_protocol::{Common, ProtocolConfigs, wire::HEADER_LEN};

const P: u32 = 3;
/// Bytes process s puts to its right neighbour: distinct per process, so that every byte
/// count in the profile tells whose it is.
fn put_bytes(s: u32) -> usize {
    1000 * (s as usize + 1)
}
/// The superstep in which nothing is sent: the process computes this long first.
const COMPUTE: Duration = Duration::from_millis(30);
/// Per message: its header and the put's record (tag, slot, offset and length varints).
const OVERHEAD: u64 = 64;

fn base(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("bwprof-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

/// Runs the program as `P` threads over `protocol`, with `faults`, profiled into `base`.
fn run(protocol: &str, faults: &str, base: &std::path::Path) {
    run_with(protocol, faults, &ProtocolConfigs::default(), base)
}

fn run_with(protocol: &str, faults: &str, pcfg: &ProtocolConfigs, base: &std::path::Path) {
    let mtu = 9000;
    let cfg = Config::default().with_profile(base);
    let links = inproc::network(P, mtu, 4096);
    let faults = Arc::new(faults.to_string());
    let handles: Vec<_> = links
        .into_iter()
        .map(|l| {
            let rank = l.rank();
            let link: Box<dyn Link> = if faults.is_empty() {
                Box::new(l)
            } else {
                let mut fc = FaultConfig::parse(&faults).unwrap();
                fc.seed = fc.seed.wrapping_add(rank as u64);
                Box::new(Faulty::new(l, fc))
            };
            let common = pcfg.timers(Common::new(rank, P, mtu - HEADER_LEN));
            let proto = bulkwire_protocol::by_name(protocol, common, pcfg).unwrap();
            let engine = Engine::new(
                Endpoint::new(link, proto, EndpointConfig::new(7)),
                WaitPolicy::for_host(P as usize),
            );
            let cfg = cfg.clone();
            std::thread::spawn(move || {
                let mut bsp = Bsp::over(Box::new(engine), P, cfg);
                program(&mut bsp);
                bsp.end().unwrap();
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
}

/// Superstep 0 registers; 1 puts `put_bytes(s)` to the right neighbour; 2 computes and
/// sends nothing; 3 sends two BSMP messages to every other process; `bsp_end` ends 4.
fn program(bsp: &mut Bsp) {
    let s = bsp.pid();
    let area = bsp.push_reg(vec![0u8; 8000]);
    bsp.sync().unwrap();
    let right = (s + 1) % P;
    let data = vec![s as u8; put_bytes(s)];
    bsp.put(right, &data, &area, 0).unwrap();
    bsp.sync().unwrap();
    let left = (s + P - 1) % P;
    assert!(
        bsp.area(&area)[..put_bytes(left)]
            .iter()
            .all(|&b| b == left as u8)
    );
    std::thread::sleep(COMPUTE);
    bsp.sync().unwrap();
    for q in (0..P).filter(|&q| q != s) {
        bsp.send(q, &[], &[1u8; 100]).unwrap();
        bsp.send(q, &[], &[2u8; 50]).unwrap();
    }
    bsp.sync().unwrap();
    assert_eq!(bsp.qsize().0, 2 * (P as usize - 1));
}

fn records(all: &[Profile], step: usize) -> Vec<&Record> {
    all.iter().map(|p| &p.records[step]).collect()
}

#[test]
fn the_profile_counts_what_the_program_did() {
    let base = base("known");
    // Without loss nothing needs resending, but a loaded machine can hold a peer back past
    // the retransmission timer (1 ms at least), whose resend would then arrive as a
    // duplicate: here the timers wait a second, so every packet counted went once.
    let pcfg = ProtocolConfigs {
        rto_initial: 1000 * bulkwire_protocol::MS,
        rto_min: 1000 * bulkwire_protocol::MS,
        ..Default::default()
    };
    run_with("holefill", "", &pcfg, &base);
    let all = read_set(&base).unwrap();
    assert_eq!(all.len(), P as usize);
    for (s, prof) in all.iter().enumerate() {
        assert_eq!((prof.pid, prof.p), (s as u32, P));
        assert_eq!(prof.protocol, "holefill");
        // Four syncs and bsp_end: five supersteps, only the last ended by bsp_end.
        let steps: Vec<u64> = prof.records.iter().map(|r| r.step).collect();
        assert_eq!(steps, [0, 1, 2, 3, 4], "pid {s}");
        let ending: Vec<bool> = prof.records.iter().map(|r| r.ending).collect();
        assert_eq!(ending, [false, false, false, false, true]);
        // The supersteps follow each other: each starts when the previous sync returned.
        for w in prof.records.windows(2) {
            let end = w[0].start_ns + w[0].compute_ns + w[0].sync_ns;
            assert_eq!(w[1].start_ns, end, "pid {s}: {:?} then {:?}", w[0], w[1]);
        }
    }
    // Superstep 0 (registration) and 2 (computation only) move no data.
    for step in [0, 2, 4] {
        for r in records(&all, step) {
            assert_eq!(
                (r.bytes_out, r.bytes_in, r.messages_out, r.messages_in),
                (0, 0, 0, 0),
                "superstep {step}: {r:?}"
            );
        }
    }
    for r in records(&all, 2) {
        assert!(r.compute_ns >= COMPUTE.as_nanos() as u64, "{r:?}");
    }
    // Superstep 1: one message of put_bytes(s) bytes and its record to the right, one from
    // the left; what one process sent is exactly what its neighbour received.
    let step1 = records(&all, 1);
    for (s, r) in step1.iter().enumerate() {
        let s = s as u32;
        let want = put_bytes(s) as u64;
        assert!(
            r.bytes_out > want && r.bytes_out <= want + OVERHEAD,
            "pid {s}: {r:?}"
        );
        assert_eq!((r.messages_out, r.messages_in), (1, 1), "pid {s}");
        let left = step1[((s + P - 1) % P) as usize];
        assert_eq!(r.bytes_in, left.bytes_out, "pid {s} from its left");
        assert_eq!(r.bytes_local, 0);
        // The data went in at least one of the protocol's packets each way.
        assert!(r.data_sent >= 1 && r.data_received >= 1, "pid {s}: {r:?}");
    }
    // Superstep 3: 150 payload bytes to each other process, in one message each.
    let step3 = records(&all, 3);
    for r in &step3 {
        let n = u64::from(P - 1);
        assert_eq!((r.messages_out, r.messages_in), (n, n), "{r:?}");
        assert!(r.bytes_out > 150 * n && r.bytes_out <= n * (150 + OVERHEAD));
    }
    let out: u64 = step3.iter().map(|r| r.bytes_out).sum();
    let inn: u64 = step3.iter().map(|r| r.bytes_in).sum();
    assert_eq!(out, inn);
    // No loss and no prod within the program: nothing dropped, resent or duplicated.
    for prof in &all {
        for r in &prof.records {
            assert_eq!((r.drops, r.retransmits, r.duplicates), (0, 0, 0), "{r:?}");
        }
    }
    let _ = std::fs::remove_dir_all(base.parent().unwrap());
}

#[test]
fn retransmissions_under_loss_appear_in_the_profile() {
    let base = base("lossy");
    run("holefill", "loss=0.2,seed=3", &base);
    let all = read_set(&base).unwrap();
    let retransmits: u64 = all
        .iter()
        .flat_map(|p| &p.records)
        .map(|r| r.retransmits)
        .sum();
    assert!(retransmits > 0, "20% loss and no retransmission recorded");
    // The data are the same as without loss: loss costs packets, not bytes.
    for (s, r) in records(&all, 1).iter().enumerate() {
        let want = put_bytes(s as u32) as u64;
        assert!(r.bytes_out > want && r.bytes_out <= want + OVERHEAD);
    }
    let _ = std::fs::remove_dir_all(base.parent().unwrap());
}
