//! The kernels over two threads joined by the in-process link: they measure something
//! plausible and agree on what was sent.

use bulkwire_bench::kernels::{Role, pingpong, stream};
use bulkwire_engine::{Endpoint, EndpointConfig, Engine, WaitPolicy};
use bulkwire_link::{Link, inproc};
use bulkwire_protocol::{Common, wire::HEADER_LEN};

fn pair() -> (Engine, Engine) {
    let mut v: Vec<Engine> = inproc::network(2, 9000, 1 << 16)
        .into_iter()
        .map(|l| {
            let c = Common::new(l.rank(), 2, 9000 - HEADER_LEN);
            let p = bulkwire_protocol::by_name("utopia", c).unwrap();
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
