//! p2p over the in-memory loopback transport: RMPP-style announce-then-accept delivery
//! (data only into posted buffers), announcements too short to match on, a dead peer,
//! and garbage from a peer (never a panic). Deterministic apart from thread scheduling;
//! every wait is bounded.

use std::time::{Duration, Instant};

use bulkwire_p2p::loopback::{self, Delivery, Injector};
use bulkwire_p2p::{ANY_SOURCE, ANY_TAG, Comm, Config, Error, PeerDead, SingleCopy};

const LIMIT: Duration = Duration::from_secs(20);

fn config(eager: usize, progress: bool) -> Config {
    Config {
        eager,
        eager_local: eager,
        single_copy: SingleCopy::Off,
        split: usize::MAX,
        progress: progress.then(|| Duration::from_millis(1)),
        job: Default::default(),
    }
}

fn world(n: u32, mode: Delivery, cfg: &Config) -> (Vec<Comm>, Vec<Injector>) {
    let ts = loopback::network(n, mode);
    let inj = ts.iter().map(|t| t.injector()).collect();
    let comms = ts
        .into_iter()
        .map(|t| Comm::from_transport(Box::new(t), cfg))
        .collect();
    (comms, inj)
}

fn pattern(n: usize, seed: u32) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u32).wrapping_mul(2654435761).wrapping_add(seed) as u8)
        .collect()
}

/// Drives `c` until `done` holds, for at most LIMIT.
fn until(c: &Comm, mut done: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !done() {
        assert!(t0.elapsed() < LIMIT, "condition not reached");
        let _ = c.iprobe(ANY_SOURCE, ANY_TAG);
        std::thread::yield_now();
    }
}

/// With announce-then-accept delivery, an eager message nobody has posted a receive for
/// is not accepted (its data stays with the sender); posting the receive accepts it.
/// Control messages (RTS, CTS, DATA headers, bodies) are accepted at once.
#[test]
fn announced_messages_are_accepted_only_for_posted_receives() {
    let (mut comms, inj) = world(2, Delivery::Announce { head: 64 }, &config(1000, true));
    let c1 = comms.pop().unwrap();
    let c0 = comms.pop().unwrap();
    let sender = std::thread::spawn(move || {
        let mut rs = Vec::new();
        for i in 0..5u32 {
            rs.push(c1.isend(0, 1, pattern(100 + i as usize, i)).unwrap());
        }
        rs.push(c1.isend(0, 2, pattern(50_000, 9)).unwrap());
        c1.wait_all(&mut rs).unwrap();
        drop(rs);
        c1
    });
    // All six announced; only the RTS (a control message) accepted.
    until(&c0, || c0.queues().unexpected == 6);
    assert_eq!(inj[0].accepts(0), 1, "only the RTS was accepted");
    assert_eq!(c0.iprobe(1, 2).unwrap().unwrap().len, 50_000);
    assert_eq!(
        c0.iprobe(1, 1).unwrap().unwrap().len,
        100,
        "length from the announcement"
    );
    // Receive them out of tag order: the rendezvous first (CTS, DATA header and body get
    // accepted as they come), then the eager ones in order, each accepted on posting.
    let (v, st) = c0.recv_vec(1, 2, 1 << 20).unwrap();
    assert!(st.len == 50_000 && v == pattern(50_000, 9));
    let after_rndv = inj[0].accepts(0);
    assert_eq!(after_rndv, 3, "RTS, DATA header, body");
    for i in 0..5u32 {
        let mut b = vec![0u8; 200];
        let st = c0.recv(ANY_SOURCE, ANY_TAG, &mut b).unwrap();
        assert_eq!((st.source, st.tag, st.len), (1, 1, 100 + i as usize));
        assert!(b[..st.len] == pattern(st.len, i));
        assert_eq!(inj[0].accepts(0), after_rndv + 1 + i as u64);
    }
    let c1 = sender.join().unwrap();
    // A receive posted before the announcement accepts at once; truncation is reported
    // when the (accepted) data arrives.
    let mut small = [0u8; 10];
    c0.scope(|s| {
        let mut r = s.irecv(1, 3, &mut small).unwrap();
        c1.send(0, 3, &pattern(40, 3)).unwrap();
        let e = r.wait().unwrap_err();
        assert!(
            matches!(
                e,
                Error::Truncated {
                    peer: 1,
                    tag: 3,
                    len: 40,
                    cap: 10
                }
            ),
            "{e}"
        );
    });
}

/// Announcement heads shorter than an envelope: p2p accepts them and matches on arrival.
#[test]
fn heads_too_short_to_match_on_are_taken_whole() {
    let (mut comms, _) = world(2, Delivery::Announce { head: 4 }, &config(100, true));
    let c1 = comms.pop().unwrap();
    let c0 = comms.pop().unwrap();
    let t = std::thread::spawn(move || {
        for (i, n) in [0usize, 10, 100, 101, 5000].into_iter().enumerate() {
            c1.send(0, i as i32, &pattern(n, i as u32)).unwrap();
        }
        let mut b = [0u8; 1];
        c1.recv(0, 99, &mut b).unwrap();
    });
    for (i, n) in [0usize, 10, 100, 101, 5000].into_iter().enumerate() {
        let (v, st) = c0.recv_vec(1, i as i32, 10_000).unwrap();
        assert!(st.len == n && v == pattern(n, i as u32), "message {i}");
    }
    c0.send(1, 99, b"k").unwrap();
    t.join().unwrap();
}

/// A head long enough for an eager envelope but not for a rendezvous one: the rendezvous
/// message waits for its whole data, and a later eager message with the same tag must
/// not match before it (order per source and tag), nor anything else behind it.
#[test]
fn a_deferred_head_is_not_overtaken() {
    let (mut comms, _) = world(2, Delivery::Announce { head: 16 }, &config(100, true));
    let c1 = comms.pop().unwrap();
    let c0 = comms.pop().unwrap();
    let big = pattern(5000, 1);
    let t = std::thread::spawn(move || {
        let big = pattern(5000, 1);
        c1.scope(|s| {
            let mut a = s.isend(0, 7, &big).unwrap();
            c1.send(0, 7, b"second").unwrap();
            c1.send(0, 8, b"third").unwrap();
            a.wait().unwrap();
        });
        let mut b = [0u8; 1];
        c1.recv(0, 99, &mut b).unwrap();
    });
    let (v, st) = c0.recv_vec(1, 7, 10_000).unwrap();
    assert!(
        st.len == 5000 && v == big,
        "first receive got {} bytes",
        st.len
    );
    let (v, _) = c0.recv_vec(1, 7, 100).unwrap();
    assert_eq!(v, b"second");
    let (v, _) = c0.recv_vec(1, ANY_TAG, 100).unwrap();
    assert_eq!(v, b"third");
    c0.send(1, 99, b"k").unwrap();
    t.join().unwrap();
}

/// A peer reported dead: receives naming it and rendezvous sends to it fail with an error
/// naming it; sends to it are refused; receives from anyone still work with others.
#[test]
fn dead_peer_fails_what_depends_on_it() {
    let (comms, inj) = world(3, Delivery::Whole, &config(100, false));
    let (c0, c2) = (&comms[0], &comms[2]);
    let mut from1 = [0u8; 8];
    let mut any = [0u8; 8];
    let big = pattern(10_000, 1);
    comms[0].scope(|s| {
        let mut r1 = s.irecv(1, 0, &mut from1).unwrap();
        let mut ra = s.irecv(ANY_SOURCE, 0, &mut any).unwrap();
        let mut sb = s.isend(1, 0, &big).unwrap(); // rendezvous: waits for 1's CTS
        inj[0].kill(1);
        let e = r1.wait().unwrap_err();
        assert!(
            matches!(e, Error::PeerDead(PeerDead { peer: 1, .. })),
            "{e}"
        );
        assert!(e.to_string().contains("rank 1"), "{e}");
        assert_eq!(e.peer(), Some(1));
        assert!(matches!(
            sb.wait(),
            Err(Error::PeerDead(PeerDead { peer: 1, .. }))
        ));
        assert!(matches!(
            c0.send(1, 0, b"x"),
            Err(Error::PeerDead(PeerDead { peer: 1, .. }))
        ));
        let mut b = [0u8; 1];
        assert!(matches!(
            c0.recv(1, 5, &mut b),
            Err(Error::PeerDead(PeerDead { peer: 1, .. }))
        ));
        // The any-source receive is still pending, and rank 2 satisfies it.
        assert!(ra.test().is_none());
        c2.send(0, 0, b"from 2").unwrap();
        let st = ra.wait().unwrap();
        assert_eq!((st.source, st.len), (2, 6));
    });
}

/// Nonsense from a peer (any bytes, plausible envelopes with wrong fields, bodies of the
/// wrong length) is counted and ignored: no panic, and real traffic still flows.
#[test]
fn garbage_from_a_peer_is_ignored() {
    let (mut comms, inj) = world(2, Delivery::Whole, &config(64, false));
    let c1 = comms.pop().unwrap();
    let c0 = comms.pop().unwrap();
    let mut x: u64 = 0x1234_5678_9abc_def1;
    let mut rnd = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let env = |kind: u8, flags: u8, tag: i32, words: &[u64]| {
        let mut v = vec![kind, flags, 1, 0];
        v.extend_from_slice(&tag.to_le_bytes());
        for w in words {
            v.extend_from_slice(&w.to_le_bytes());
        }
        v
    };
    for i in 0..3000 {
        let m = match i % 8 {
            // Random bytes, random lengths.
            0 | 1 => (0..rnd() % 48).map(|_| rnd() as u8).collect(),
            // CTS / FIN for requests that do not exist.
            2 => env(3, 0, 0, &[rnd(), rnd()]),
            3 => env(4, 0, 0, &[rnd()]),
            // A DATA header for nothing, then a "body".
            4 => env(5, 0, 0, &[rnd(), rnd() % 100]),
            // RTS with absurd lengths and addresses (unexpected; never read in place:
            // single copy is off and nobody posts for tag 7).
            5 => env(2, 1, 7, &[u64::MAX - rnd() % 4, rnd(), rnd()]),
            // Bad flags, versions, tags.
            6 => env(1, 3, -1, &[]),
            _ => {
                // Any kind, an internal (negative) tag: never a user receive's match.
                let mut v = env((rnd() % 7) as u8, 0, -((rnd() % 5) as i32) - 1, &[rnd()]);
                v[2] = (rnd() % 3) as u8;
                v
            }
        };
        inj[0].inject(1, m);
        if i % 7 == 0 {
            let data = (0..rnd() % 100).map(|_| rnd() as u8).collect();
            inj[0].inject_announce(1, data, (rnd() % 40) as usize);
        }
    }
    // Process it all.
    until(&c0, || c0.stats().bad > 1000);
    let bad = c0.stats().bad;
    // Real traffic still works (a DATA header's "body" may have eaten one message, so
    // resynchronise on a fresh exchange first).
    let t = std::thread::spawn(move || {
        c1.send(0, 1, &pattern(5000, 5)).unwrap();
        c1.send(0, 2, b"small").unwrap();
        c1
    });
    let (v, st) = c0.recv_vec(1, 1, 1 << 20).unwrap();
    assert!(st.len == 5000 && v == pattern(5000, 5));
    let mut b = [0u8; 5];
    c0.recv(1, 2, &mut b).unwrap();
    assert_eq!(&b, b"small");
    let c1 = t.join().unwrap();
    eprintln!("bad envelopes counted: {bad}");
    drop(c1);
}

/// What the MPI layer builds on: context wildcards, synchronous sends, cancel with an
/// answer, and claimed messages.
#[test]
fn context_wildcards_synchronous_sends_cancel_and_claims() {
    use bulkwire_p2p::Tag;
    let (comms, _inj) = world(2, Delivery::Whole, &config(1000, true));
    let (c0, c1) = (&comms[0], &comms[1]);
    // Any tag of context 2 skips context 1's earlier message.
    c1.send(0, (1 << 16) | 5, b"one").unwrap();
    c1.send(0, (2 << 16) | 6, b"two").unwrap();
    let mut b = [0u8; 8];
    let st = c0.recv(ANY_SOURCE, Tag::AnyIn(2), &mut b).unwrap();
    assert_eq!((st.tag, &b[..st.len]), ((2 << 16) | 6, &b"two"[..]));
    assert!(c0.iprobe(1, Tag::AnyIn(2)).unwrap().is_none());
    let st = c0.recv(1, Tag::AnyIn(1), &mut b).unwrap();
    assert_eq!(st.tag, (1 << 16) | 5);
    assert!(matches!(
        c0.iprobe(ANY_SOURCE, Tag::AnyIn(0x8000)),
        Err(Error::InvalidTag(_))
    ));
    // A synchronous send of 3 bytes completes only once the receive is posted.
    // SAFETY: the buffer is a static string.
    let id = unsafe { c0.issend_raw(1, 9, b"syn".as_ptr(), 3) }.unwrap();
    std::thread::sleep(Duration::from_millis(30));
    assert!(c0.peek_raw(id).is_none(), "complete before any receive");
    let st = c1.recv(0, 9, &mut b).unwrap();
    assert_eq!(&b[..st.len], b"syn");
    assert_eq!(c0.wait_raw(id).unwrap().len, 3);
    // Cancel says whether it cancelled.
    let mut c = [0u8; 4];
    // SAFETY: `c` outlives the request, which is collected below.
    let id = unsafe { c0.irecv_raw(ANY_SOURCE, Tag::Is(99), c.as_mut_ptr(), 4) }.unwrap();
    assert!(c0.cancel_raw(id));
    assert!(!c0.cancel_raw(id));
    assert_eq!(c0.wait_raw(id), Err(Error::Cancelled));
    // A claimed message is no longer matched by receives; its claim receives it.
    c1.send(0, 7, b"first").unwrap();
    c1.send(0, 7, b"second").unwrap();
    let mut claimed = None;
    until(c0, || {
        claimed = c0.iclaim(ANY_SOURCE, 7).unwrap();
        claimed.is_some()
    });
    let (st, claim) = claimed.unwrap();
    assert_eq!(st.len, 5);
    let st = c0.recv(ANY_SOURCE, 7, &mut b).unwrap();
    assert_eq!(&b[..st.len], b"second");
    // SAFETY: `b` outlives the request, waited for at once.
    let id = unsafe { c0.irecv_claimed_raw(claim, b.as_mut_ptr(), 8) }.unwrap();
    assert_eq!(c0.wait_raw(id).unwrap().len, 5);
    assert_eq!(&b[..5], b"first");
    // SAFETY: as above.
    assert!(unsafe { c0.irecv_claimed_raw(claim, b.as_mut_ptr(), 8) }.is_err());
}
