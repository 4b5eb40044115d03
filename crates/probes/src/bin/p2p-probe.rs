//! A job program for the p2p integration tests and measurements. Run it under `bsprun`,
//! or alone: it then starts its own job of `-n` processes (self-spawn).
//!
//! ```text
//! p2p-probe [-n N] mix MSGS MAXSIZE        all-to-all traffic with wildcards; order and data checked
//! p2p-probe [-n N] big MIB                 MIB MiB from 1 to 0 and back, checked, timed
//! p2p-probe [-n N] overlap COMPUTE_MS SIZE..   the RMPP paper's Fig. 4: pre-post, compute, wait
//! p2p-probe [-n N] pingpong SIZE ITERS     half round trip, rank 0 <-> 1
//! p2p-probe [-n N] bw SIZE ITERS [WINDOW]  OSU-style bandwidth, rank 0 -> 1
//! p2p-probe [-n N] die                     rank 1 is killed while rank 0 waits on it
//! p2p-probe [-n N] stop                    rank 1 stops (SIGSTOP) while rank 0 waits on it
//! p2p-probe [-n N] refuse                  the kernel refuses single copy mid-job: fallback
//! p2p-probe [-n N] refusewrite             the same for the sender's half of a split copy
//! p2p-probe [-n N] rawpingpong SIZE ITERS  the same ping-pong on the bare transport (no p2p)
//! p2p-probe [-n N] rawbw SIZE ITERS [WINDOW]  the same bandwidth on the bare transport
//! ```
//!
//! Results are `key=value` lines on stdout, from rank 0 unless noted.

use std::process::exit;
use std::time::{Duration, Instant};

use bulkwire_launch::testing;
use bulkwire_p2p::{ANY_SOURCE, ANY_TAG, Comm, Error};
use bulkwire_probes::{die, num, say};

/// Body of message `seq` from `src`: recognisable, so any misdelivery shows.
fn body(n: usize, src: u32, seq: u32) -> Vec<u8> {
    let mut x = (src as u64) << 32 | seq as u64 | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let mut n = 2u32;
    if args.first().map(String::as_str) == Some("-n") {
        n = num(args.get(1), "a process count");
        args.drain(..2);
    }
    let rest = &args[1.min(args.len())..];
    if let Some(raw @ ("rawpingpong" | "rawbw")) = args.first().map(String::as_str) {
        return bare(n, raw, rest);
    }
    let s = bulkwire_probes::settings();
    let comm = Comm::init_spawn(n, &s.launch, s.p2p).unwrap_or_else(|e| die(e));
    let r = match args.first().map(String::as_str) {
        Some("mix") => mix(
            &comm,
            num(rest.first(), "MSGS"),
            num(rest.get(1), "MAXSIZE"),
        ),
        Some("big") => big(&comm, num(rest.first(), "MIB")),
        Some("overlap") => overlap(&comm, rest),
        Some("pingpong") => pingpong(&comm, num(rest.first(), "SIZE"), num(rest.get(1), "ITERS")),
        Some("bw") => bw(
            &comm,
            num(rest.first(), "SIZE"),
            num(rest.get(1), "ITERS"),
            rest.get(2).map_or(64, |w| num(Some(w), "WINDOW")),
        ),
        Some("die") => die_case(&comm),
        Some("stop") => stop_case(&comm),
        Some("refuse") => refuse(&comm),
        Some("refusewrite") => refuse_write(&comm),
        _ => die("usage: p2p-probe [-n N] mix|big|overlap|pingpong|bw|die|stop|refuse ..."),
    };
    if let Err(e) = r {
        say(format!("rank={} error={e}", comm.rank()));
        exit(1);
    }
    if let Err(e) = comm.finalize() {
        die(e);
    }
}

/// Every rank sends `msgs` messages to every other rank (sizes 0..=max, tags 0..4) and
/// receives everything with a mix of exact and wildcard receives, all posted before the
/// data comes, checking per-(source, tag) order and content.
fn mix(c: &Comm, msgs: u32, max: usize) -> Result<(), Error> {
    let (me, p) = (c.rank(), c.size());
    let sizes = |src: u32, seq: u32| -> usize {
        let choices = [
            0,
            1,
            8,
            100,
            4095,
            4096,
            4097,
            32 << 10,
            (32 << 10) + 1,
            max,
        ];
        choices[((seq * 7 + src) % choices.len() as u32) as usize].min(max)
    };
    let tag = |seq: u32| (seq % 5) as i32;
    let start = Instant::now();
    // Post every receive before any data comes, in three classes per source: exact
    // (source, tag) for the first quarter of its messages, (source, any tag) for the
    // second, (any, any) for the rest. Earlier posts win, so each class takes exactly
    // its share and nothing is stranded.
    let mut reqs = Vec::new();
    let total = msgs * (p - 1);
    let (q1, q2) = (msgs / 4, msgs / 2);
    // The "receives posted" handshake goes first: posted earlier, these receives win
    // over the wildcards for the handshake messages.
    let mut hello: Vec<_> = (0..p)
        .filter(|&q| q != me)
        .map(|q| c.irecv_vec(q, 1_000_000, 16))
        .collect::<Result<_, _>>()?;
    for q in (0..p).filter(|&q| q != me) {
        for seq in 0..q1 {
            reqs.push(c.irecv_vec(q, tag(seq), max)?);
        }
    }
    for q in (0..p).filter(|&q| q != me) {
        for _ in q1..q2 {
            reqs.push(c.irecv_vec(q, ANY_TAG, max)?);
        }
    }
    for _ in 0..(msgs - q2) * (p - 1) {
        reqs.push(c.irecv_vec(ANY_SOURCE, ANY_TAG, max)?);
    }
    // Tell everyone our receives are posted, then send.
    for q in 0..p {
        if q != me {
            c.send(q, 1_000_000, b"posted")?;
        }
    }
    c.wait_all(&mut hello)?;
    let mut sends = Vec::new();
    for seq in 0..msgs {
        for q in 0..p {
            if q != me {
                let n = sizes(me, seq);
                sends.push(c.isend(q, tag(seq), body(n, me, seq))?);
            }
        }
    }
    // MPI's guarantee: of two messages from one source with one tag, the earlier goes to
    // the receive posted earlier (the classes are posted from narrow to wide, so each
    // later receive matches whatever an earlier one does). Completions may come in any
    // order: collect them, then check per (source, tag) in posting order.
    let mut done: Vec<(usize, u32, i32, Vec<u8>)> = Vec::new();
    while let Some((i, r)) = c.wait_any(&mut reqs) {
        let st = r?;
        done.push((
            i,
            st.source,
            st.tag,
            reqs[i].take_data().unwrap_or_default(),
        ));
    }
    done.sort_by_key(|d| d.0);
    let mut next = vec![[0u32; 5]; p as usize];
    for s in next.iter_mut() {
        for (t, v) in s.iter_mut().enumerate() {
            *v = t as u32;
        }
    }
    let got = done.len();
    for (_, src, tag, data) in done {
        let (s, t) = (src as usize, tag as usize);
        let seq = next[s][t];
        if data.len() != sizes(src, seq) || data != body(data.len(), src, seq) {
            return Err(Error::Transport(format!(
                "from {s} tag {t}: expected message {seq} ({} bytes), got {} bytes that differ",
                sizes(src, seq),
                data.len()
            )));
        }
        next[s][t] += 5;
    }
    c.wait_all(&mut sends)?;
    let st = c.stats();
    say(format!(
        "mix rank={me} received={got} expected={total} secs={:.3} eager={} rndv={} single_copy={} unexpected={}",
        start.elapsed().as_secs_f64(),
        st.eager_sent,
        st.rndv_sent,
        st.single_copy,
        st.unexpected
    ));
    Ok(())
}

fn big(c: &Comm, mib: usize) -> Result<(), Error> {
    let n = mib << 20;
    match c.rank() {
        0 => {
            let mut buf = vec![0u8; n];
            let t0 = Instant::now();
            let st = c.recv(1, 1, &mut buf)?;
            let t1 = t0.elapsed();
            if st.len != n || buf != body(n, 1, 1) {
                return Err(Error::Transport("big: data differ".into()));
            }
            let t2 = Instant::now();
            c.send(1, 2, &buf)?;
            let st = c.stats();
            say(format!(
                "big bytes={n} recv_secs={:.4} send_secs={:.4} single_copy={} split={} refused={}",
                t1.as_secs_f64(),
                t2.elapsed().as_secs_f64(),
                st.single_copy,
                st.split_copy,
                st.single_copy_refused
            ));
        }
        1 => {
            let data = body(n, 1, 1);
            c.send(0, 1, &data)?;
            let (back, st) = c.recv_vec(0, 2, n)?;
            if st.len != n || back != data {
                return Err(Error::Transport("big: echo differs".into()));
            }
            let st = c.stats();
            say(format!(
                "big rank=1 echo_ok single_copy={} split={}",
                st.single_copy, st.split_copy
            ));
        }
        _ => {}
    }
    Ok(())
}

/// Busy computation that does not call the library.
fn compute(ms: u64) -> u64 {
    let t0 = Instant::now();
    let mut x = 1u64;
    while t0.elapsed() < Duration::from_millis(ms) {
        for _ in 0..1000 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
        }
    }
    x
}

/// The RMPP paper's Fig. 4: rank 0 pre-posts a receive, tells rank 1 to send, computes for a long
/// time, then waits; the wait is what remains. Reference: the same receive waited for at
/// once (the message's transfer time).
fn overlap(c: &Comm, args: &[String]) -> Result<(), Error> {
    let compute_ms: u64 = num(args.first(), "COMPUTE_MS");
    let sizes: Vec<usize> = args[1..].iter().map(|s| num(Some(s), "SIZE")).collect();
    for &n in &sizes {
        match c.rank() {
            0 => {
                let mut buf = vec![0u8; n];
                // Transfer time: post, ask, wait at once (best of 3).
                let mut transfer = f64::MAX;
                for _ in 0..3 {
                    let t0 = Instant::now();
                    c.scope(|s| -> Result<(), Error> {
                        let mut r = s.irecv(1, 1, &mut buf)?;
                        c.send(1, 0, b"go")?;
                        r.wait()?;
                        Ok(())
                    })?;
                    transfer = transfer.min(t0.elapsed().as_secs_f64());
                }
                // Overlap: post, ask, compute, then wait. Whether the message arrived
                // while computing is read from the counters, which do not drive progress.
                let takeovers = c.progress_takeovers();
                let mut waited = 0.0;
                let mut during = 0;
                c.scope(|s| -> Result<(), Error> {
                    let mut r = s.irecv(1, 1, &mut buf)?;
                    c.send(1, 0, b"go")?;
                    let before = c.stats().received;
                    std::hint::black_box(compute(compute_ms));
                    let t0 = Instant::now();
                    during = c.stats().received - before;
                    r.wait()?;
                    waited = t0.elapsed().as_secs_f64();
                    Ok(())
                })?;
                if buf != body(n, 1, n as u32) {
                    return Err(Error::Transport("overlap: data differ".into()));
                }
                say(format!(
                    "overlap size={n} compute_ms={compute_ms} wait_us={:.1} transfer_us={:.1} takeovers={} received_while_computing={during}",
                    waited * 1e6,
                    transfer * 1e6,
                    c.progress_takeovers() - takeovers
                ));
            }
            1 => {
                let data = body(n, 1, n as u32);
                for i in 0..4 {
                    let mut g = [0u8; 2];
                    c.recv(0, 0, &mut g)?;
                    let t0 = Instant::now();
                    c.send(0, 1, &data)?;
                    // The last send goes to a receiver that computes: how long it takes
                    // is the sender's side of the overlap (a rendezvous needs the
                    // receiver's progress thread to answer).
                    if i == 3 {
                        say(format!(
                            "overlap-sender size={n} send_us={:.1}",
                            t0.elapsed().as_secs_f64() * 1e6
                        ));
                    }
                }
            }
            _ => {}
        }
    }
    Ok(())
}

fn pingpong(c: &Comm, n: usize, iters: usize) -> Result<(), Error> {
    let mut buf = vec![0u8; n];
    let data = vec![7u8; n];
    let warm = iters / 10 + 10;
    let mut t = Vec::with_capacity(iters);
    for i in 0..warm + iters {
        match c.rank() {
            0 => {
                let t0 = Instant::now();
                c.send(1, 1, &data)?;
                c.recv(1, 1, &mut buf)?;
                if i >= warm {
                    t.push(t0.elapsed().as_secs_f64() / 2.0);
                }
            }
            1 => {
                c.recv(0, 1, &mut buf)?;
                c.send(0, 1, &data)?;
            }
            _ => {}
        }
    }
    if c.rank() == 0 {
        t.sort_by(f64::total_cmp);
        let mean = t.iter().sum::<f64>() / t.len() as f64;
        say(format!(
            "pingpong size={n} iters={iters} half_rtt_us_median={:.3} mean={:.3} min={:.3} protocol={}",
            t[t.len() / 2] * 1e6,
            mean * 1e6,
            t[0] * 1e6,
            c.protocol_name()
        ));
    }
    Ok(())
}

fn bw(c: &Comm, n: usize, iters: usize, window: usize) -> Result<(), Error> {
    let data = bytes::Bytes::from(vec![3u8; n]);
    let warm = 2;
    let mut t0 = Instant::now();
    let mut bufs: Vec<Vec<u8>> = (0..window).map(|_| vec![0u8; n]).collect();
    for i in 0..warm + iters {
        if i == warm {
            t0 = Instant::now();
        }
        match c.rank() {
            0 => {
                let mut rs: Vec<_> = (0..window)
                    .map(|_| c.isend(1, 1, data.clone()))
                    .collect::<Result<_, _>>()?;
                c.wait_all(&mut rs)?;
                let mut ack = [0u8; 1];
                c.recv(1, 2, &mut ack)?;
            }
            1 => {
                c.scope(|s| -> Result<(), Error> {
                    let mut rs: Vec<_> = bufs
                        .iter_mut()
                        .map(|b| s.irecv(0, 1, b))
                        .collect::<Result<_, _>>()?;
                    c.wait_all(&mut rs)?;
                    Ok(())
                })?;
                c.send(0, 2, b"a")?;
            }
            _ => {}
        }
    }
    if c.rank() == 0 {
        let secs = t0.elapsed().as_secs_f64();
        let st = c.stats();
        say(format!(
            "bw size={n} window={window} iters={iters} gbytes_per_s={:.3} protocol={} single_copy={}",
            (n * window * iters) as f64 / secs / 1e9,
            c.protocol_name(),
            st.single_copy
        ));
    }
    Ok(())
}

/// Rank 1 is killed (SIGKILL) while rank 0 waits for a message from it: rank 0's wait ends
/// with an error naming rank 1.
fn die_case(c: &Comm) -> Result<(), Error> {
    match c.rank() {
        0 => {
            let mut buf = [0u8; 16];
            let mut big = vec![0u8; 1 << 20];
            // A receive it will never satisfy, and a rendezvous it has started.
            let t0 = Instant::now();
            let e = c.scope(|s| {
                let mut a = s.irecv(1, 5, &mut big).unwrap();
                c.send(1, 0, b"kill yourself").unwrap();
                let e = c.recv(1, 1, &mut buf).unwrap_err();
                let e2 = a.wait().unwrap_err();
                (e, e2)
            });
            say(format!(
                "die error={} | {} peer={:?} after_ms={}",
                e.0,
                e.1,
                e.0.peer(),
                t0.elapsed().as_millis()
            ));
            exit(3);
        }
        1 => {
            let mut g = [0u8; 13];
            c.recv(0, 0, &mut g)?;
            // SAFETY: sends a signal to this very process; no memory is involved.
            unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
            unreachable!("SIGKILL");
        }
        _ => Ok(()),
    }
}

/// Rank 1 stops (SIGSTOP: alive to the launcher, silent on the network) while rank 0 waits
/// on it: after BULKWIRE_DEAD_AFTER_MS rank 0's wait ends with PeerDead naming rank 1.
fn stop_case(c: &Comm) -> Result<(), Error> {
    match c.rank() {
        0 => {
            let mut buf = [0u8; 16];
            c.send(1, 0, b"stop")?;
            let t0 = Instant::now();
            let e = c.recv(1, 1, &mut buf).unwrap_err();
            say(format!(
                "stop error={e} peer={:?} after_ms={}",
                e.peer(),
                t0.elapsed().as_millis()
            ));
            // Rank 1 will never finish: end the job.
            c.abort("rank 1 stopped")
        }
        1 => {
            let mut g = [0u8; 4];
            c.recv(0, 0, &mut g)?;
            // SAFETY: sends a signal to this very process; no memory is involved.
            unsafe { libc::raise(libc::SIGSTOP) };
            Ok(())
        }
        _ => Ok(()),
    }
}

/// Single copy verified at start, then refused by the kernel: the sender becomes
/// non-dumpable and the reader loses CAP_SYS_PTRACE. The transfer must fall back.
fn refuse(c: &Comm) -> Result<(), Error> {
    let n = 1 << 20;
    let before = c.single_copy_peers();
    match c.rank() {
        0 => {
            testing::drop_ptrace_capability();
            c.send(1, 0, b"ready")?;
            let (v, st) = c.recv_vec(1, 1, n)?;
            if st.len != n || v != body(n, 1, 7) {
                return Err(Error::Transport("refuse: data differ".into()));
            }
            let s = c.stats();
            say(format!(
                "refuse peers_before={before:?} peers_after={:?} single_copy={} refused={}",
                c.single_copy_peers(),
                s.single_copy,
                s.single_copy_refused
            ));
        }
        1 => {
            testing::make_undumpable();
            let mut g = [0u8; 5];
            c.recv(0, 0, &mut g)?;
            c.send(0, 1, &body(n, 1, 7))?;
        }
        _ => {}
    }
    Ok(())
}

/// A split copy whose sender may no longer write into the receiver (the receiver becomes
/// non-dumpable, the sender loses CAP_SYS_PTRACE) while the receiver may still read the
/// sender: the receiver copies the sender's half itself. Rank 0 receives into its own
/// buffer, then into a vector.
fn refuse_write(c: &Comm) -> Result<(), Error> {
    let n = 1 << 20;
    match c.rank() {
        0 => {
            testing::make_undumpable();
            c.send(1, 0, b"ready")?;
            let mut buf = vec![0u8; n];
            let st = c.recv(1, 1, &mut buf)?;
            let (v, st2) = c.recv_vec(1, 2, n)?;
            if st.len != n || buf != body(n, 1, 7) || st2.len != n || v != body(n, 1, 8) {
                return Err(Error::Transport("refusewrite: data differ".into()));
            }
            let s = c.stats();
            say(format!(
                "refusewrite single_copy={} split={} refused={}",
                s.single_copy, s.split_copy, s.single_copy_refused
            ));
        }
        1 => {
            testing::drop_ptrace_capability();
            let mut g = [0u8; 5];
            c.recv(0, 0, &mut g)?;
            c.send(0, 1, &body(n, 1, 7))?;
            c.send(0, 2, &body(n, 1, 8))?;
            say(format!(
                "refusewrite rank=1 peers_after={:?}",
                c.single_copy_peers()
            ));
        }
        _ => {}
    }
    Ok(())
}

/// Ping-pong and bandwidth on the job's transport without p2p: what p2p adds is the
/// difference with `pingpong` and `bw`.
fn bare(n: u32, what: &str, args: &[String]) {
    use bulkwire_engine::job::connect;
    use bulkwire_engine::{Event, Transport};
    let s = bulkwire_probes::settings();
    let mut ctl = bulkwire_launch::self_spawn(n, &s.launch).unwrap_or_else(|e| die(e));
    let cfg = s.job().clone();
    let (mut t, _) = connect(&mut ctl, &cfg).unwrap_or_else(|e| die(e));
    let me = t.rank();
    let size: usize = num(args.first(), "SIZE");
    let iters: usize = num(args.get(1), "ITERS");
    let window: usize = args.get(2).map_or(64, |w| num(Some(w), "WINDOW"));
    let next = |t: &mut bulkwire_engine::Engine| -> Vec<u8> {
        match t.next_event(Some(Duration::from_secs(30))) {
            Ok(Event::Message { data, .. }) => data,
            other => die(format!("{other:?}")),
        }
    };
    let data = bytes::Bytes::from(vec![5u8; size]);
    if me < 2 {
        let peer = 1 - me;
        if what == "rawpingpong" {
            let warm = iters / 10 + 10;
            let mut ts = Vec::with_capacity(iters);
            for i in 0..warm + iters {
                let t0 = Instant::now();
                if me == 0 {
                    t.send(peer, data.clone(), false).unwrap_or_else(|e| die(e));
                    next(&mut t);
                } else {
                    next(&mut t);
                    t.send(peer, data.clone(), false).unwrap_or_else(|e| die(e));
                }
                if i >= warm {
                    ts.push(t0.elapsed().as_secs_f64() / 2.0);
                }
            }
            if me == 0 {
                ts.sort_by(f64::total_cmp);
                let mean = ts.iter().sum::<f64>() / ts.len() as f64;
                say(format!(
                    "rawpingpong size={size} iters={iters} half_rtt_us_median={:.3} mean={:.3} min={:.3} protocol={}",
                    ts[ts.len() / 2] * 1e6,
                    mean * 1e6,
                    ts[0] * 1e6,
                    t.protocol_name()
                ));
            }
        } else {
            let mut t0 = Instant::now();
            for i in 0..2 + iters {
                if i == 2 {
                    t0 = Instant::now();
                }
                if me == 0 {
                    for _ in 0..window {
                        t.send(peer, data.clone(), false).unwrap_or_else(|e| die(e));
                    }
                    next(&mut t);
                } else {
                    for _ in 0..window {
                        next(&mut t);
                    }
                    t.send(peer, bytes::Bytes::from_static(b"a"), false)
                        .unwrap_or_else(|e| die(e));
                }
            }
            if me == 0 {
                say(format!(
                    "rawbw size={size} window={window} iters={iters} gbytes_per_s={:.3} protocol={}",
                    (size * window * iters) as f64 / t0.elapsed().as_secs_f64() / 1e9,
                    t.protocol_name()
                ));
            }
        }
    }
    t.flush(Some(Duration::from_secs(10)))
        .unwrap_or_else(|e| die(e));
    // Meet before leaving, acknowledging the others' last packets meanwhile (as
    // Comm::finalize does): the exchange runs on a helper thread.
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let d = done.clone();
    let h = std::thread::spawn(move || {
        let r = ctl.allgather(&[]);
        d.store(true, std::sync::atomic::Ordering::SeqCst);
        (ctl, r)
    });
    while !done.load(std::sync::atomic::Ordering::SeqCst) {
        let _ = t.step();
        std::thread::sleep(Duration::from_micros(100));
    }
    let (ctl, r) = h.join().unwrap_or_else(|_| die("helper panicked"));
    r.unwrap_or_else(|e| die(e));
    drop(t);
    ctl.finish(0).unwrap_or_else(|e| die(e));
}
