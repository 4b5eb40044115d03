//! The kernels over two threads joined by the in-process link: they measure something
//! plausible and agree on what was sent.

use bulkwire_bench::kernels::{Role, pingpong, stream};
use bulkwire_engine::{Endpoint, EndpointConfig, Engine, WaitPolicy};
use bulkwire_link::{Link, inproc};
use bulkwire_protocol::{Common, SEC, wire::HEADER_LEN};

fn pair() -> (Engine, Engine) {
    pair_of("utopia")
}

fn pair_of(protocol: &str) -> (Engine, Engine) {
    pair_with(protocol, |_| {})
}

fn pair_with(protocol: &str, tune: impl Fn(&mut Common)) -> (Engine, Engine) {
    let mut v: Vec<Engine> = inproc::network(2, 9000, 1 << 16)
        .into_iter()
        .map(|l| {
            let mut c = Common::new(l.rank(), 2, 9000 - HEADER_LEN);
            tune(&mut c);
            let p = bulkwire_protocol::by_name(protocol, c, &Default::default()).unwrap();
            Engine::new(
                Endpoint::new(Box::new(l), p, EndpointConfig::new(1)),
                WaitPolicy::default(),
            )
        })
        .collect();
    let b = v.pop().unwrap();
    (v.pop().unwrap(), b)
}

#[test]
fn pingpong_and_stream_measure() {
    let (mut a, mut b) = pair();
    let h = std::thread::spawn(move || {
        pingpong(&mut b, Role::Responder, 0, 100, 5, 50).unwrap();
        stream(&mut b, Role::Responder, 0, 20_000, 16, 1, 3, None).unwrap();
    });
    let lat = pingpong(&mut a, Role::Initiator, 1, 100, 5, 50).unwrap();
    assert_eq!(lat.len(), 50);
    assert!(lat.iter().all(|&x| x > 0.0 && x < 1.0));
    let bw = stream(&mut a, Role::Initiator, 1, 20_000, 16, 1, 3, None).unwrap();
    assert_eq!(bw.len(), 3);
    for s in &bw {
        assert_eq!(s.bytes, 16 * 20_000);
        assert!(s.rate() > 0.0);
    }
    h.join().unwrap();
}

/// The packet counts of Riesen & Maccabe's Table 1: utopia one packet per message; gbn a data packet and
/// its ACK; holefill about one (acks ride on the replies); rmpp about three (its Fin and
/// Close besides the data). The link loses nothing, so the retransmission timeout is set
/// far above any stall of the two threads: a thread descheduled for longer than the
/// default 1 ms minimum (CI, a loaded machine) made gbn resend, 2.08 packets a message.
#[test]
fn packets_per_message_match_each_protocol_design() {
    for (protocol, lo, hi) in [
        ("utopia", 1.0, 1.0),
        ("gbn", 2.0, 2.05),
        ("holefill", 1.0, 1.1),
        ("rmpp", 2.9, 3.2),
    ] {
        let (mut a, mut b) = pair_with(protocol, |c| {
            c.rto_initial = SEC;
            c.rto_min = SEC;
            c.rto_max = 2 * SEC;
        });
        let n = 400;
        let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let d2 = done.clone();
        // The responder keeps serving (answering acknowledgement requests) until the
        // initiator has everything acknowledged.
        let h = std::thread::spawn(move || {
            pingpong(&mut b, Role::Responder, 0, 64, 0, n).unwrap();
            while !d2.load(std::sync::atomic::Ordering::Acquire) {
                bulkwire_engine::Transport::step(&mut b).unwrap();
            }
        });
        pingpong(&mut a, Role::Initiator, 1, 64, 0, n).unwrap();
        bulkwire_engine::Transport::flush(&mut a, Some(std::time::Duration::from_secs(10)))
            .unwrap();
        done.store(true, std::sync::atomic::Ordering::Release);
        h.join().unwrap();
        let s = a.endpoint().peer_stats(1);
        assert_eq!(s.timeouts, 0, "{protocol}: a stall of over a second");
        let per = (s.data_sent + s.control_sent) as f64 / n as f64;
        assert!(
            (lo..=hi).contains(&per),
            "{protocol}: {per:.2} packets per message (data {}, control {})",
            s.data_sent,
            s.control_sent
        );
    }
}
