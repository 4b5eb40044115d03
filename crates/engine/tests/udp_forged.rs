//! Forged datagrams over real UDP sockets on loopback: with the job's packet key, nothing
//! from a sender without it reaches the protocol (garbage, a perfect cookie-and-CRC
//! packet, a packet with another job's key), each is counted, and the job's own traffic
//! is delivered intact. Without the key, the cookie-and-CRC forgeries do reach the
//! protocol: the test of the key's effect.

use std::net::UdpSocket;
use std::time::Duration;

use bulkwire_engine::{Endpoint, EndpointConfig, Engine, Event, Transport, WaitPolicy};
use bulkwire_link::{Link, UdpConfig, UdpLink};
use bulkwire_protocol::wire::{Cover, DropReason, HEADER_LEN, Header, Kind, PacketKey, flags};
use bulkwire_protocol::{Common, SEC};
use bytes::Bytes;

const COOKIE: u32 = 0xFEED;
const FORGED: usize = 100;

fn pair(
    mac: Option<PacketKey>,
    always: bool,
    mac_payload: bool,
) -> (Engine, Engine, std::net::SocketAddr) {
    let cfg = UdpConfig::default();
    let bound: Vec<_> = (0..2)
        .map(|_| UdpLink::bind("127.0.0.1:0".parse().unwrap(), &cfg).unwrap())
        .collect();
    let addrs: Vec<_> = bound.iter().map(|b| b.local_addr()).collect();
    let mut e: Vec<Engine> = bound
        .into_iter()
        .enumerate()
        .map(|(r, b)| {
            let link = b.into_link(r as u32, addrs.clone()).unwrap();
            let common = Common::new(
                r as u32,
                2,
                link.capabilities().max_to(1 - r as u32) - HEADER_LEN,
            );
            let proto =
                bulkwire_protocol::by_name("holefill", common, &Default::default()).unwrap();
            let mut ec = EndpointConfig::with_deadline(COOKIE, 30 * SEC);
            ec.mac = mac.clone();
            ec.always_checksum = always;
            ec.mac_payload = mac_payload;
            Engine::new(
                Endpoint::new(Box::new(link), proto, ec),
                WaitPolicy::default(),
            )
        })
        .collect();
    let b = e.pop().unwrap();
    (e.pop().unwrap(), b, addrs[1])
}

/// Sends rank 1 every kind of forgery a hostile neighbour can make without the key, as
/// if from rank 0: garbage, packets that pass the cookie-and-CRC check (announcing a
/// message of 2^40 bytes), and packets tagged with another key.
fn forge(to: std::net::SocketAddr) {
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    let mut h = Header::new(Kind::Data);
    (h.cookie, h.src, h.dst, h.flags) = (COOKIE, 0, 1, flags::FIRST);
    // Far outside any window: without the key these reach the protocol, which must
    // discard them; with it they never get that far.
    (h.total, h.offset, h.msg) = (1 << 20, (1 << 20) - 7, 1 << 30);
    let other = PacketKey::new([0xAB; 32]);
    for i in 0..FORGED {
        s.send_to(&[i as u8; 40], to).unwrap();
        h.seq = (1 << 30) + i as u32;
        s.send_to(&h.encode_to_vec(b"forged!"), to).unwrap();
        let mut d = h.encode_mac(b"forged!", &other, Cover::Payload).to_vec();
        d.extend_from_slice(b"forged!");
        s.send_to(&d, to).unwrap();
    }
}

/// Rank 1's drops after the forgeries and one real message from rank 0, which must
/// arrive intact; `integrity` is how the endpoints must check datagrams (loopback is
/// intact: `always` makes them check as over a wire).
fn run(
    mac: Option<PacketKey>,
    always: bool,
    integrity: &str,
) -> bulkwire_protocol::wire::DropCounts {
    let (mut a, mut b, to) = pair(mac, always, integrity != "mac-crc");
    assert_eq!(b.endpoint().integrity(), integrity);
    forge(to);
    // Give the kernel the forgeries before the real message, so they are read first.
    std::thread::sleep(Duration::from_millis(50));
    let body: Vec<u8> = (0..100_000u32).map(|i| (i * 7) as u8).collect();
    let sender = {
        let body = body.clone();
        std::thread::spawn(move || {
            a.send(1, Bytes::from(body), false).unwrap();
            a.flush(Some(Duration::from_secs(20))).unwrap();
        })
    };
    match b.next_event(Some(Duration::from_secs(20))).unwrap() {
        Event::Message { from, data, .. } => {
            assert_eq!(from, 0);
            assert!(data == body, "the real message arrived intact");
        }
        e => panic!("unexpected {e:?}"),
    }
    // Keep answering until the sender has its acknowledgement.
    while !sender.is_finished() {
        let _ = b.next_event(Some(Duration::from_millis(10)));
    }
    sender.join().unwrap();
    b.endpoint().drops()
}

#[test]
fn forged_datagrams_never_reach_the_protocol_with_the_job_key() {
    for (always, integrity) in [(false, "mac-header"), (true, "mac"), (true, "mac-crc")] {
        let d = run(Some(PacketKey::new([0x5A; 32])), always, integrity);
        // The cookie-and-CRC forgeries and those with another key fail the MAC; the
        // garbage is not even a header.
        assert_eq!(
            d.get(DropReason::Mac),
            2 * FORGED as u64,
            "{integrity}: {d:?}"
        );
        assert_eq!(
            d.get(DropReason::Short),
            FORGED as u64,
            "{integrity}: {d:?}"
        );
        assert_eq!(d.total(), 3 * FORGED as u64, "{integrity}: {d:?}");
    }
}

#[test]
fn without_the_key_a_forger_who_knows_the_cookie_gets_through() {
    let d = run(None, false, "none");
    // Over loopback without a key nothing is checked beyond the cookie: the perfect
    // forgeries pass the decoder and reach the protocol; only garbage and the other-key
    // tags (whose cookie place holds tag bits) are dropped.
    assert_eq!(d.get(DropReason::Mac), 0, "{d:?}");
    assert_eq!(d.get(DropReason::Foreign), FORGED as u64, "{d:?}");
    assert_eq!(d.total(), 2 * FORGED as u64, "{d:?}");
}
