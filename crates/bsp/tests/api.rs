//! The safe Rust API, with every process a thread over the in-process link (optionally
//! lossy), so the BSP rules are checked quickly and deterministically in what they
//! compute, over each protocol.

use std::sync::Arc;

use bulkwire_bsp::board::Board;
use bulkwire_bsp::{Bsp, BspError, Config, Schedule};
use bulkwire_engine::{Endpoint, EndpointConfig, Engine, WaitPolicy};
use bulkwire_link::{FaultConfig, Faulty, HostGroup, Link, inproc, thread_rendezvous};
use bulkwire_protocol::{Common, wire::HEADER_LEN};

/// Runs `f` as `p` processes over `protocol`, with `faults` on every link, and returns
/// what each returned.
fn run<R: Send + 'static>(
    p: u32,
    protocol: &str,
    faults: &str,
    cfg: Config,
    f: impl Fn(&mut Bsp) -> R + Send + Sync + 'static,
) -> Vec<R> {
    spawn(p, protocol, faults, cfg, true, f)
}

/// Like [`run`]; without `end`, the processes just drop their `Bsp` (after an error).
fn spawn<R: Send + 'static>(
    p: u32,
    protocol: &str,
    faults: &str,
    cfg: Config,
    end: bool,
    f: impl Fn(&mut Bsp) -> R + Send + Sync + 'static,
) -> Vec<R> {
    spawn_with(p, protocol, faults, cfg, end, None, f)
}

/// Like [`run`], the processes synchronising through a sync board, as processes that share
/// a host over shared memory do.
fn on_board<R: Send + 'static>(
    p: u32,
    protocol: &str,
    faults: &str,
    f: impl Fn(&mut Bsp) -> R + Send + Sync + 'static,
) -> Vec<R> {
    let spin = WaitPolicy::for_host(p as usize).spin;
    spawn_with(p, protocol, faults, Config::default(), true, Some(spin), f)
}

fn spawn_with<R: Send + 'static>(
    p: u32,
    protocol: &str,
    faults: &str,
    cfg: Config,
    end: bool,
    board_spin: Option<std::time::Duration>,
    f: impl Fn(&mut Bsp) -> R + Send + Sync + 'static,
) -> Vec<R> {
    let board = board_spin.is_some();
    let mtu = 9000;
    let f = Arc::new(f);
    let links = inproc::network(p, mtu, 4096);
    let local = vec![true; p as usize];
    let mut rvs: Vec<Option<_>> = thread_rendezvous(p as usize)
        .into_iter()
        .map(|rv| board.then_some(rv))
        .collect();
    let handles: Vec<_> = links
        .into_iter()
        .map(|l| {
            let rank = l.rank();
            let link: Box<dyn Link> = if faults.is_empty() {
                Box::new(l)
            } else {
                let mut fc = FaultConfig::parse(faults).unwrap();
                fc.seed = fc.seed.wrapping_add(rank as u64);
                Box::new(Faulty::new(l, fc))
            };
            let common = Common::new(rank, p, mtu - HEADER_LEN);
            let proto = bulkwire_protocol::by_name(protocol, common, &Default::default()).unwrap();
            let mut policy = WaitPolicy::for_host(p as usize);
            if let Some(spin) = board_spin {
                policy.spin = spin;
            }
            let engine = Engine::new(Endpoint::new(link, proto, EndpointConfig::new(42)), policy);
            let f = f.clone();
            let cfg = cfg.clone();
            let rv = rvs[rank as usize].take();
            let local = local.clone();
            std::thread::spawn(move || {
                let mut bsp = match rv {
                    Some(mut rv) => {
                        let group = HostGroup::new(rank, &local).unwrap();
                        let b = Board::create(&group, &mut rv).unwrap();
                        Bsp::over_on_board(Box::new(engine), p, cfg, b)
                    }
                    None => Bsp::over(Box::new(engine), p, cfg),
                };
                let r = f(&mut bsp);
                if end {
                    bsp.end().unwrap();
                }
                r
            })
        })
        .collect();
    handles.into_iter().map(|h| h.join().unwrap()).collect()
}

fn holefill<R: Send + 'static>(
    p: u32,
    f: impl Fn(&mut Bsp) -> R + Send + Sync + 'static,
) -> Vec<R> {
    run(p, "holefill", "", Config::default(), f)
}

/// Runs `f` over holefill with barrier messages, then over utopia on the sync board:
/// what a program computes must not depend on how its processes synchronise.
fn both(p: u32, f: impl Fn(&mut Bsp) + Send + Sync + 'static) {
    let f = Arc::new(f);
    let g = f.clone();
    holefill(p, move |bsp| g(bsp));
    // A board is for two processes and more: one alone has nobody to meet.
    if p > 1 {
        on_board(p, "utopia", "", move |bsp| f(bsp));
    }
}

/// Processes that end in an error: no `bsp_end`.
fn failing<R: Send + 'static>(p: u32, f: impl Fn(&mut Bsp) -> R + Send + Sync + 'static) -> Vec<R> {
    spawn(p, "holefill", "", Config::default(), false, f)
}

#[test]
fn puts_land_after_the_sync_and_gets_read_before_puts_write() {
    for p in [1, 2, 3, 5] {
        both(p, |bsp| {
            let (p, s) = (bsp.nprocs(), bsp.pid());
            let x = bsp.push_reg(vec![s as u64 * 100]);
            let got = bsp.push_reg(vec![0u64; 1]);
            bsp.sync().unwrap();
            let next = (s + 1) % p;
            let prev = (s + p - 1) % p;
            // Put ours into the next one's x, and get the previous one's x: the get must
            // see the value from before the superstep's puts.
            bsp.put(next, &[s as u64 * 100 + 1], &x, 0).unwrap();
            bsp.get(prev, &x, 0, &got, 0, 1).unwrap();
            assert_eq!(
                bsp.area(&x)[0],
                s as u64 * 100,
                "nothing lands before the sync"
            );
            bsp.sync().unwrap();
            assert_eq!(bsp.area(&x)[0], prev as u64 * 100 + 1);
            assert_eq!(bsp.area(&got)[0], prev as u64 * 100);
        });
    }
}

#[test]
fn put_copies_its_source_at_once_and_hpput_reads_it_at_the_sync() {
    both(3, |bsp| {
        let (p, s) = (bsp.nprocs(), bsp.pid());
        let dst = bsp.push_reg(vec![0u32; 2 * p as usize]);
        let src = bsp.push_reg(vec![0u32; 1]);
        bsp.sync().unwrap();
        let mut v = [7u32];
        for q in 0..p {
            bsp.put(q, &v, &dst, 2 * s as usize).unwrap();
            bsp.hpput(q, &src, 0, &dst, 2 * s as usize + 1, 1).unwrap();
        }
        v[0] = 8; // too late for the put
        assert_eq!(v, [8]);
        bsp.area_mut(&src)[0] = 9; // in time for the hpput
        bsp.sync().unwrap();
        let want: Vec<u32> = (0..p).flat_map(|_| [7, 9]).collect();
        assert_eq!(bsp.area(&dst), &want[..]);
    });
}

#[test]
fn registrations_shadow_pop_and_empty_areas_work() {
    both(4, |bsp| {
        let (p, s) = (bsp.nprocs(), bsp.pid());
        let a = bsp.push_reg(vec![0i32; 4]);
        // An empty area on all but pid 0, registered as the same logical area.
        let e = bsp.push_reg(if s == 0 {
            vec![0i32; p as usize]
        } else {
            Vec::new()
        });
        bsp.sync().unwrap();
        bsp.put(0, &[s as i32 + 1], &e, s as usize).unwrap();
        bsp.put((s + 1) % p, &[5], &a, 3).unwrap();
        let r = bsp.put(1 % p, &[5], &e, 0);
        if p > 1 {
            let msg = r.unwrap_err().to_string();
            assert!(
                msg.contains("bsp_put") && msg.contains("pid 1") && msg.contains("0 bytes"),
                "{msg}"
            );
        }
        bsp.sync().unwrap();
        if s == 0 {
            let want: Vec<i32> = (1..=p as i32).collect();
            assert_eq!(bsp.area(&e), &want[..]);
        }
        assert_eq!(bsp.area(&a)[3], 5);
        // Pop: still usable in this superstep, gone after the sync.
        bsp.pop_reg(&e).unwrap();
        bsp.put(0, &[9], &e, 0).unwrap();
        bsp.sync().unwrap();
        let r = bsp.put(0, &[9], &a, 4);
        let msg = r.unwrap_err().to_string();
        assert!(
            msg.contains("offset 16") && msg.contains("16 bytes"),
            "{msg}"
        );
    });
}

#[test]
fn bsmp_messages_arrive_in_the_next_superstep_with_the_tag_size_of_the_sender() {
    both(3, |bsp| {
        let (p, s) = (bsp.nprocs(), bsp.pid());
        assert_eq!(bsp.set_tagsize(4), 0, "the initial tag size is 0");
        assert_eq!(bsp.tagsize(), 0, "not before the sync");
        for q in 0..p {
            bsp.send(q, &[], format!("hello {q} from {s}").as_bytes())
                .unwrap();
        }
        assert_eq!(bsp.qsize(), (0, 0));
        bsp.sync().unwrap();
        assert_eq!(bsp.tagsize(), 4);
        let (n, bytes) = bsp.qsize();
        assert_eq!(n, p as usize);
        assert_eq!(
            bytes,
            (0..p).map(|q| format!("hello {s} from {q}").len()).sum()
        );
        let mut seen = Vec::new();
        while let Some((len, tag)) = bsp.get_tag() {
            assert!(tag.is_empty());
            let mut buf = vec![0u8; len];
            assert_eq!(bsp.move_message(&mut buf), Some(len));
            seen.push(String::from_utf8(buf).unwrap());
        }
        seen.sort();
        let want: Vec<String> = (0..p).map(|q| format!("hello {s} from {q}")).collect();
        assert_eq!(seen, want);
        assert_eq!(bsp.move_message(&mut []), None);
        // Now with 4-byte tags; a message is readable only in the superstep after.
        for q in 0..p {
            bsp.send(q, &(s * 1000 + q).to_le_bytes(), &[s as u8; 3])
                .unwrap();
        }
        let e = bsp.send(0, &[1, 2], b"x").unwrap_err().to_string();
        assert!(e.contains("bsp_send") && e.contains("tag size is 4"), "{e}");
        bsp.sync().unwrap();
        let mut from = Vec::new();
        while let Some(m) = bsp.hpmove() {
            let tag = u32::from_le_bytes(m.tag.try_into().unwrap());
            assert_eq!(tag % 1000, s);
            assert_eq!(m.payload, &[(tag / 1000) as u8; 3]);
            from.push(tag / 1000);
        }
        from.sort();
        assert_eq!(from, (0..p).collect::<Vec<_>>());
        // Unread messages are gone after the next sync.
        bsp.send((s + 1) % p, &[0; 4], b"lost").unwrap();
        bsp.sync().unwrap();
        assert_eq!(bsp.qsize().0, 1);
        bsp.sync().unwrap();
        assert_eq!(bsp.qsize(), (0, 0));
    });
}

#[test]
fn misuse_is_reported_with_the_call_and_the_numbers() {
    let r = holefill(2, |bsp| {
        let a = bsp.push_reg(vec![0u8; 10]);
        let early = bsp.put(0, &[1], &a, 0).unwrap_err().to_string();
        bsp.sync().unwrap();
        let far = bsp.put(1, &[1, 2], &a, 9).unwrap_err().to_string();
        let nopid = bsp.put(2, &[1], &a, 0).unwrap_err().to_string();
        let getfar = bsp.get(0, &a, 20, &a, 0, 1).unwrap_err().to_string();
        let tagged = bsp.send(1, &[0], b"").unwrap_err().to_string();
        (early, far, nopid, getfar, tagged)
    });
    let (early, far, nopid, getfar, tagged) = &r[0];
    assert!(
        early.contains("bsp_put") && early.contains("next bsp_sync"),
        "{early}"
    );
    assert!(
        far.contains("writing 2 bytes at offset 9")
            && far.contains("pid 1 registered it with 10 bytes"),
        "{far}"
    );
    assert!(
        nopid.contains("pid 2 is not a process") && nopid.contains("0..1"),
        "{nopid}"
    );
    assert!(
        getfar.starts_with("bsp_get: reading 1 bytes at offset 20"),
        "{getfar}"
    );
    assert!(tagged.contains("tag size is 0"), "{tagged}");
}

#[test]
fn collective_mismatches_are_caught_by_every_process() {
    // Different numbers of registrations.
    let r = failing(3, |bsp| {
        if bsp.pid() != 1 {
            bsp.push_reg(vec![0u8; 1]);
        }
        bsp.sync().unwrap_err().to_string()
    });
    for e in &r {
        assert!(
            e.starts_with(
                "bsp_push_reg: in superstep 0 pid 0 registered 1 area but pid 1 registered 0"
            ),
            "{e}"
        );
    }
    // Pops of different registrations.
    let r = failing(2, |bsp| {
        let a = bsp.push_reg(vec![0u8; 1]);
        let b = bsp.push_reg(vec![0u8; 1]);
        bsp.sync().unwrap();
        if bsp.pid() == 0 {
            bsp.pop_reg(&a).unwrap();
        } else {
            bsp.pop_reg(&b).unwrap();
        }
        bsp.sync().unwrap_err().to_string()
    });
    for e in &r {
        assert!(
            e.contains("bsp_pop_reg") && e.contains("different registrations"),
            "{e}"
        );
    }
    // Push and pop in different orders.
    let r = failing(2, |bsp| {
        let a = bsp.push_reg(vec![0u8; 1]);
        bsp.sync().unwrap();
        if bsp.pid() == 0 {
            bsp.pop_reg(&a).unwrap();
            bsp.push_reg(vec![0u8; 2]);
        } else {
            bsp.push_reg(vec![0u8; 2]);
            bsp.pop_reg(&a).unwrap();
        }
        bsp.sync().unwrap_err().to_string()
    });
    for e in &r {
        assert!(e.contains("different orders"), "{e}");
    }
    // Tag sizes.
    let r = failing(2, |bsp| {
        bsp.set_tagsize(4 * bsp.pid() as usize);
        bsp.sync().unwrap_err().to_string()
    });
    for e in &r {
        assert!(
            e.contains("bsp_set_tagsize")
                && e.contains("pid 0 set the tag size to 0 but pid 1 set the tag size to 4"),
            "{e}"
        );
    }
}

/// A deterministic random program: every process can compute what all of them do in
/// each superstep, so each checks its own memory against a model after every sync.
fn random_program(bsp: &mut Bsp, steps: u32, big: bool) {
    let (p, s) = (bsp.nprocs() as usize, bsp.pid() as usize);
    let region = 64usize; // words each source owns in every area
    let words = region * p;
    let x = bsp.push_reg(vec![0u64; words]);
    let y = bsp.push_reg(vec![0u64; words]);
    let big_area = bsp.push_reg(vec![0u8; if big { 3 << 20 } else { 0 }]);
    bsp.sync().unwrap();
    let mut model = vec![vec![0u64; words]; p];
    let rnd = |step: u32, pid: usize, i: u64| {
        let mut z = (step as u64) << 40 ^ (pid as u64) << 20 ^ i ^ 0x9e37_79b9_7f4a_7c15;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    for step in 0..steps {
        // What process q does this superstep: puts into its region of some areas of x,
        // and gets of words of others' x into its region of y (here y is local only).
        let ops = |q: usize| -> Vec<(usize, usize, u64, bool)> {
            let n = rnd(step, q, 0) % 20;
            (0..n)
                .map(|i| {
                    let r = rnd(step, q, i + 1);
                    let to = (r % p as u64) as usize;
                    let at = q * region + (r >> 8) as usize % region;
                    (to, at, r >> 16, r & 1 == 0)
                })
                .collect()
        };
        let pre = model.clone();
        let mut gets = Vec::new();
        for q in 0..p {
            for (i, (to, at, v, is_put)) in ops(q).into_iter().enumerate() {
                if is_put {
                    model[to][at] = v;
                } else if q == s {
                    // Get the word `at` of process `to`'s x into our y at i.
                    gets.push((to, at, i, pre[to][at]));
                }
            }
        }
        for (i, (to, at, v, is_put)) in ops(s).into_iter().enumerate() {
            if is_put {
                bsp.put(to as u32, &[v], &x, at).unwrap();
            } else {
                bsp.get(to as u32, &x, at, &y, i, 1).unwrap();
            }
        }
        if big && step % 3 == 1 {
            let to = (s + 1) % p;
            let data: Vec<u8> = (0..(3 << 20)).map(|i| (i as u32 ^ step) as u8).collect();
            bsp.put(to as u32, &data, &big_area, 0).unwrap();
        }
        bsp.sync().unwrap();
        assert_eq!(
            bsp.area(&x),
            &model[s][..],
            "pid {s} after superstep {step}"
        );
        for (_, _, i, want) in gets {
            assert_eq!(
                bsp.area(&y)[i],
                want,
                "get {i} of pid {s} in superstep {step}"
            );
        }
        if big && step % 3 == 1 {
            let b = bsp.area(&big_area);
            assert!(
                b.iter()
                    .enumerate()
                    .all(|(i, &v)| v == (i as u32 ^ step) as u8)
            );
        }
    }
}

#[test]
fn random_programs_match_the_model() {
    for p in [2, 4] {
        holefill(p, |bsp| random_program(bsp, 30, true));
    }
}

#[test]
fn random_programs_match_the_model_on_the_sync_board() {
    for p in [2, 3, 5] {
        on_board(p, "utopia", "", move |bsp| random_program(bsp, 40, p == 2));
    }
    // Lost packets concern only what the board does not carry.
    on_board(3, "holefill", "loss=0.05,seed=9", |bsp| {
        random_program(bsp, 20, false)
    });
}

#[test]
fn processes_asleep_at_the_sync_board_still_answer_their_transport() {
    // No spin: every wait at the board sleeps at once. Get replies lost on the way must
    // still be resent by processes that have gone on to sleep at the next barrier.
    for seed in [3, 8] {
        let faults = format!("loss=0.05,seed={seed}");
        spawn_with(
            4,
            "holefill",
            &faults,
            Config::default(),
            true,
            Some(std::time::Duration::ZERO),
            |bsp| random_program(bsp, 40, false),
        );
    }
}

#[test]
fn the_sync_board_carries_small_supersteps_and_the_transport_the_rest() {
    let r = on_board(2, "utopia", "", |bsp| {
        let (p, s) = (bsp.nprocs(), bsp.pid());
        let small = bsp.push_reg(vec![0u64; 4]);
        let big = bsp.push_reg(vec![0u8; 1 << 20]);
        bsp.sync().unwrap();
        let sent = |bsp: &Bsp| {
            bsp.runtime()
                .with_transport(|t| t.peer_stats(1 - s).messages_sent)
                .unwrap()
        };
        let before = sent(bsp);
        for k in 0..100u64 {
            bsp.put(1 - s, &[k + u64::from(s)], &small, 0).unwrap();
            bsp.sync().unwrap();
            assert_eq!(bsp.area(&small)[0], k + u64::from(1 - s));
        }
        let small_msgs = sent(bsp) - before;
        let data = vec![s as u8 + 1; 1 << 20];
        bsp.put(1 - s, &data, &big, 0).unwrap();
        bsp.sync().unwrap();
        assert!(bsp.area(&big).iter().all(|&b| b == (1 - s) as u8 + 1));
        let big_msgs = sent(bsp) - before - small_msgs;
        assert_eq!(p, 2);
        (bsp.runtime().with(|c| c.on_board()), small_msgs, big_msgs)
    });
    for (board, small, big) in r {
        assert!(board);
        assert_eq!(
            small, 0,
            "a superstep of one word sends no transport message"
        );
        assert!(big >= 1, "1 MiB goes through the transport");
    }
}

#[test]
fn random_programs_match_the_model_under_loss_with_every_protocol() {
    for proto in ["holefill", "gbn"] {
        run(3, proto, "loss=0.05,seed=3", Config::default(), |bsp| {
            random_program(bsp, 25, false)
        });
    }
}

#[test]
fn pid_schedule_rate_cap_and_chunks_deliver_the_same() {
    let cfg = Config {
        schedule: Schedule::Pid,
        rate: Some(2_000_000_000),
        chunk: Some(1000),
        ..Config::default()
    };
    run(3, "holefill", "", cfg, |bsp| random_program(bsp, 12, true));
}

#[test]
fn a_superstep_costs_one_message_each_way_at_two_processes() {
    let r = holefill(2, |bsp| {
        for _ in 0..100 {
            bsp.sync().unwrap();
        }
        let rt = bsp.runtime();
        let pid = rt.pid();
        let sent = rt
            .with_transport(|t| t.peer_stats(1 - pid).messages_sent)
            .unwrap();
        (rt.with(|c| c.counters.supersteps), sent)
    });
    for (steps, msgs) in r {
        assert_eq!(steps, 100);
        assert_eq!(msgs, 100, "one barrier message per superstep");
    }
}

/// A superstep with data at p = 2: the message goes before the barrier and asks for its
/// ack on its own last packet, so each process sends the message, its barrier message and
/// one ack (for the peer's message), and no separate request for an ack (which would make
/// it two control packets per superstep). A timer on a loaded machine may add a few.
#[test]
fn a_superstep_with_data_asks_for_its_ack_on_the_data_at_two_processes() {
    for size in [8usize, 64 << 10] {
        let r = holefill(2, move |bsp| {
            let s = bsp.pid();
            let area = bsp.push_reg(vec![0u8; size]);
            bsp.sync().unwrap();
            let rt = bsp.runtime();
            let stats =
                |rt: &bulkwire_bsp::Runtime| rt.with_transport(|t| t.peer_stats(1 - s)).unwrap();
            let before = stats(rt);
            for k in 0..100u8 {
                let data = vec![k ^ s as u8; size];
                bsp.put(1 - s, &data, &area, 0).unwrap();
                bsp.sync().unwrap();
                assert!(bsp.area(&area).iter().all(|&b| b == k ^ (1 - s) as u8));
            }
            let after = stats(bsp.runtime());
            (
                after.messages_sent - before.messages_sent,
                after.control_sent - before.control_sent,
            )
        });
        for (msgs, control) in r {
            assert_eq!(msgs, 200, "size {size}: the data and the barrier message");
            assert!(
                control <= 130,
                "size {size}: {control} control packets in 100 supersteps"
            );
        }
    }
}

#[test]
fn hp_sends_and_many_small_puts_at_eight_processes() {
    both(8, move |bsp| {
        let (p, s) = (bsp.nprocs(), bsp.pid());
        bsp.set_tagsize(4);
        let words = bsp.push_reg(vec![0u32; 1000 * p as usize]);
        let pay = bsp.push_reg(vec![s as u16; 5]);
        bsp.sync().unwrap();
        for q in 0..p {
            for i in 0..1000 {
                bsp.put(q, &[s * 1000 + i], &words, (s * 1000 + i) as usize)
                    .unwrap();
            }
            bsp.hpsend(q, &s.to_le_bytes(), &pay, 1, 3).unwrap();
        }
        bsp.area_mut(&pay)[2] = 77;
        bsp.sync().unwrap();
        let w = bsp.area(&words);
        assert!(w.iter().enumerate().all(|(i, &v)| v == i as u32));
        let mut n = 0;
        while let Some(m) = bsp.hpmove() {
            let from = u32::from_le_bytes(m.tag.try_into().unwrap());
            let want: Vec<u8> = [from as u16, 77, from as u16]
                .iter()
                .flat_map(|v| v.to_le_bytes())
                .collect();
            assert_eq!(m.payload, &want[..]);
            n += 1;
        }
        assert_eq!(n, p);
    });
}

#[test]
fn errors_are_values_in_the_rust_api() {
    let r = holefill(1, |bsp| {
        let a = bsp.push_reg(vec![1u8]);
        bsp.sync().unwrap();
        bsp.pop_reg(&a).unwrap();
        let twice = bsp.pop_reg(&a).unwrap_err();
        bsp.sync().unwrap();
        let gone = bsp.put(0, &[1], &a, 0).unwrap_err();
        (twice, gone)
    });
    assert!(matches!(&r[0].0, BspError::Misuse(m) if m.contains("already popped")));
    assert!(matches!(&r[0].1, BspError::Misuse(m) if m.contains("popped and freed")));
}

#[test]
fn overlapping_gets_from_several_processes_land_in_call_order() {
    // Small chunks cut every get into pieces: the order holds piece by piece too.
    let chunked = Config {
        chunk: Some(64),
        ..Config::default()
    };
    for (p, cfg) in [
        (2, Config::default()),
        (3, Config::default()),
        (4, Config::default()),
        (5, chunked.clone()),
    ] {
        run(p, "holefill", "", cfg, |bsp| {
            let (p, s) = (bsp.nprocs(), bsp.pid());
            let n = 64usize;
            let src = bsp.push_reg((0..n as u64).map(|i| s as u64 * 1000 + i).collect());
            let dst = bsp.push_reg(vec![u64::MAX; n]);
            bsp.sync().unwrap();
            let (a, b) = ((s + 1) % p, (s + 2) % p);
            // Later gets overwrite earlier ones where they overlap, wherever they read.
            bsp.get(a, &src, 0, &dst, 0, 32).unwrap();
            bsp.get(b, &src, 16, &dst, 16, 32).unwrap();
            bsp.get(s, &src, 24, &dst, 24, 8).unwrap();
            bsp.get(a, &src, 40, &dst, 40, 4).unwrap();
            bsp.sync().unwrap();
            let mut want = vec![u64::MAX; n];
            for (from, lo, len) in [(a, 0, 32), (b, 16, 32), (s, 24, 8), (a, 40, 4)] {
                for (i, w) in want.iter_mut().enumerate().skip(lo).take(len) {
                    *w = from as u64 * 1000 + i as u64;
                }
            }
            assert_eq!(bsp.area(&dst), &want[..], "pid {s} of {p}");
        });
    }
}

#[test]
fn a_popped_registration_serves_its_superstep() {
    both(3, |bsp| {
        let (p, s) = (bsp.nprocs(), bsp.pid());
        let a = bsp.push_reg(vec![s; p as usize]);
        let got = bsp.push_reg(vec![0u32; 1]);
        bsp.sync().unwrap();
        bsp.pop_reg(&a).unwrap();
        // Popped in this superstep: puts and gets to it still work until the sync.
        bsp.put((s + 1) % p, &[100 + s], &a, s as usize).unwrap();
        bsp.get((s + p - 1) % p, &a, 0, &got, 0, 1).unwrap();
        bsp.sync().unwrap();
        assert_eq!(bsp.area(&got)[0], (s + p - 1) % p);
        let e = bsp.put(0, &[1], &a, 0).unwrap_err().to_string();
        assert!(e.contains("was popped and freed"), "{e}");
    });
}

/// The address of `n` bytes this test never frees (registered memory in C terms).
fn leaked(words: &[u64]) -> usize {
    Box::leak(words.to_vec().into_boxed_slice()).as_ptr() as usize
}

#[test]
fn a_pop_of_null_pops_what_the_others_pop() {
    both(3, |bsp| {
        let (p, s) = (bsp.nprocs(), bsp.pid());
        // Pid 0 holds the data in two areas; the others register NULL twice.
        let (first, second) = if s == 0 {
            (leaked(&[0; 3]), leaked(&[0; 3]))
        } else {
            (0, 0)
        };
        let size = if s == 0 { 24 } else { 0 };
        bsp.runtime().with(|c| {
            c.push_reg(first, size);
            c.push_reg(second, size);
        });
        bsp.sync().unwrap();
        // Pid 0 pops its first area; a NULL pop elsewhere follows it (the newest NULL
        // registration there would be the second).
        bsp.runtime()
            .with(|c| c.pop_reg("bsp_pop_reg", first))
            .unwrap();
        bsp.sync().unwrap();
        let v = 7 + s as u64;
        let r = bsp
            .runtime()
            .with(|c| c.put("bsp_put", 0, &v.to_ne_bytes(), second, 8 * s as usize));
        r.unwrap();
        bsp.sync().unwrap();
        if s == 0 {
            // SAFETY: `second` is this process's leaked 3-word area.
            let area = unsafe { std::slice::from_raw_parts(second as *const u64, 3) };
            assert_eq!(area, &(0..p as u64).map(|q| 7 + q).collect::<Vec<_>>()[..]);
        }
        // The last one: pid 0 names it, the others pop NULL.
        bsp.runtime()
            .with(|c| c.pop_reg("bsp_pop_reg", second))
            .unwrap();
        bsp.sync().unwrap_or_else(|e| panic!("pid {s}: {e}"));
        let e = bsp.runtime().with(|c| {
            c.put("bsp_put", 0, &v.to_ne_bytes(), second, 0)
                .unwrap_err()
                .to_string()
        });
        assert!(e.contains("is not registered"), "{e}");
    });
}

#[test]
fn pops_of_null_everywhere_take_the_newest_registration_of_null_everywhere() {
    let r = failing(2, |bsp| {
        let s = bsp.pid();
        let own = leaked(&[0; 1]);
        bsp.runtime().with(|c| {
            c.push_reg(0, 0);
            // NULL on pid 1 only: not a candidate.
            c.push_reg(if s == 0 { own } else { 0 }, 8 * (s == 0) as usize);
            c.push_reg(0, 0);
        });
        bsp.sync().unwrap();
        let pop = |bsp: &mut Bsp| bsp.runtime().with(|c| c.pop_reg("bsp_pop_reg", 0));
        pop(bsp).unwrap();
        pop(bsp).unwrap();
        bsp.sync().unwrap();
        // Both NULL-everywhere registrations are gone; pid 0's area remains.
        let v = 5u64;
        bsp.runtime()
            .with(|c| {
                c.put(
                    "bsp_put",
                    0,
                    &v.to_ne_bytes(),
                    if s == 0 { own } else { 0 },
                    0,
                )
            })
            .unwrap_or_else(|e| panic!("pid {s}: {e}"));
        bsp.sync().unwrap();
        pop(bsp).unwrap();
        let e = bsp.sync().unwrap_err().to_string();
        (s, own, e)
    });
    for (s, own, e) in r {
        if s == 0 {
            // SAFETY: pid 0's leaked word.
            assert_eq!(unsafe { *(own as *const u64) }, 5);
        }
        assert!(
            e.contains("every process popped NULL")
                && e.contains("no registration that every process made with NULL"),
            "{e}"
        );
    }
}

#[test]
fn zero_byte_transfers_are_no_ops_before_any_check() {
    both(2, |bsp| {
        let a = bsp.push_reg(vec![0u8; 4]);
        bsp.sync().unwrap();
        bsp.runtime().with(|c| {
            // Unregistered address, pid out of range, offset past the end: no error.
            c.put("bsp_put", 9, &[], 0x1234, 1 << 40).unwrap();
            // SAFETY: nothing is read.
            unsafe { c.hpput("bsp_hpput", 9, 0, 0x1234, 1 << 40, 0) }.unwrap();
            c.get("bsp_get", 9, 0x1234, 1 << 40, 0, 0).unwrap();
        });
        let next = (bsp.pid() + 1) % bsp.nprocs();
        bsp.put(next, &[1u8], &a, 0).unwrap();
        bsp.sync().unwrap();
        assert_eq!(bsp.area(&a)[0], 1);
    });
}

#[test]
fn tag_size_calls_chain_within_a_superstep() {
    both(2, |bsp| {
        assert_eq!(bsp.set_tagsize(8), 0);
        assert_eq!(
            bsp.set_tagsize(2),
            8,
            "the size the previous call asked for"
        );
        assert_eq!(bsp.set_tagsize(4), 2);
        bsp.sync().unwrap();
        assert_eq!(bsp.tagsize(), 4);
        assert_eq!(
            bsp.set_tagsize(6),
            4,
            "a new superstep starts from the size in effect"
        );
        bsp.sync().unwrap();
        assert_eq!(bsp.tagsize(), 6);
    });
}

#[test]
fn direct_get_reads_at_once_even_from_a_process_that_computes() {
    for p in [2u32, 4] {
        both(p, |bsp| {
            let (p, s) = (bsp.nprocs(), bsp.pid());
            let a = bsp.push_reg(vec![s as u64; 8]);
            bsp.sync().unwrap();
            bsp.area_mut(&a)[3] = 100 + s as u64;
            bsp.sync().unwrap();
            // Pid 0 computes without calling the library: its progress thread answers.
            if s == 0 {
                std::thread::sleep(std::time::Duration::from_millis(30));
            }
            for round in 0..2 {
                // The first read of each peer is a round trip, later ones read in place.
                for q in (0..p).map(|k| (s + k) % p) {
                    let mut v = [0u64; 2];
                    bsp.direct_get(q, &a, 2, &mut v).unwrap();
                    assert_eq!(v, [q as u64, 100 + q as u64], "round {round} from {q}");
                }
            }
            let mut one = [0u64];
            let e = bsp.direct_get((s + 1) % p, &a, 8, &mut one).unwrap_err();
            assert!(
                e.to_string()
                    .starts_with("bsp_direct_get: reading 8 bytes at offset 64 from pid"),
                "{e}"
            );
            bsp.sync().unwrap();
        });
    }
}

#[test]
fn a_put_wins_over_a_get_result_it_overlaps() {
    // As BSPonMPI writes them: the superstep's get results first, then its puts.
    for p in [1u32, 3] {
        both(p, |bsp| {
            let (p, s) = (bsp.nprocs(), bsp.pid());
            let src = bsp.push_reg((0..8u64).map(|i| 100 * s as u64 + i).collect());
            let x = bsp.push_reg(vec![0u64; 8]);
            bsp.sync().unwrap();
            let (next, prev) = ((s + 1) % p, (s + p - 1) % p);
            bsp.get(next, &src, 0, &x, 0, 4).unwrap();
            bsp.put(next, &[7000 + s as u64; 4], &x, 2).unwrap();
            bsp.sync().unwrap();
            let want: Vec<u64> = (0..8u64)
                .map(|i| match i {
                    0 | 1 => 100 * next as u64 + i,
                    2..=5 => 7000 + prev as u64,
                    _ => 0,
                })
                .collect();
            assert_eq!(bsp.area(&x), &want[..], "pid {s} of {p}");
        });
    }
}

#[test]
fn messages_come_from_the_highest_pid_first_each_in_the_order_sent() {
    // The standard gives no order; BSPonMPI and MulticoreBSP for C both give this one, and
    // programs written for them rely on it.
    both(4, |bsp| {
        let (p, s) = (bsp.nprocs(), bsp.pid());
        for k in 0..3u8 {
            bsp.send(0, &[], &[s as u8, k]).unwrap();
        }
        bsp.sync().unwrap();
        let mut got = Vec::new();
        while let Some(m) = bsp.hpmove() {
            got.push((m.payload[0], m.payload[1]));
        }
        let want: Vec<(u8, u8)> = if s == 0 {
            (0..p as u8)
                .rev()
                .flat_map(|q| (0..3).map(move |k| (q, k)))
                .collect()
        } else {
            Vec::new()
        };
        assert_eq!(got, want);
    });
}
