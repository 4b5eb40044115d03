//! How steady a total exchange is: one job of P processes (self-spawned, or under
//! `bsprun`) times every superstep of a total exchange by `bsp_put` on its own, and pid 0
//! prints their spread (best, median, 90th and 99th percentiles, worst), how the slow
//! ones cluster, and what each process paid for the timed supersteps: page faults and
//! context switches (getrusage), so that a slow median can be told apart as sleeping
//! (voluntary switches), preemption (involuntary ones) or fresh memory (minor faults).
//!
//!     BULKWIRE_TRANSPORT=shm cargo run --release -p bulkwire-bsp --example steady -- \
//!         [P [BYTES [SUPERSTEPS]]]

use bulkwire_bsp::Bsp;

/// What getrusage counts that a superstep can pay for.
#[derive(Clone, Copy, Default)]
struct Usage {
    minflt: i64,
    nvcsw: i64,
    nivcsw: i64,
}

fn usage() -> Usage {
    // SAFETY: getrusage fills the rusage it is given; all zeros is a valid rusage.
    let mut r: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `r` is a valid, writable rusage. RUSAGE_THREAD: the progress thread's
    // switches are its own business, the caller's are the superstep's.
    unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut r) };
    Usage {
        minflt: r.ru_minflt,
        nvcsw: r.ru_nvcsw,
        nivcsw: r.ru_nivcsw,
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let p: u32 = args.next().and_then(|a| a.parse().ok()).unwrap_or(2);
    let n: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(64 << 10);
    let steps: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(5000);
    let settings = bulkwire_config::Settings::from_env().expect("settings");
    let bsp = Bsp::begin(p, &settings.launch, settings.bsp).expect("bsp_begin");
    let rt = bsp.runtime();
    let (p, s) = (rt.nprocs() as usize, rt.pid() as usize);
    let dest = vec![0u8; n * p];
    let addr = dest.as_ptr() as usize;
    let src: Vec<u8> = (0..n).map(|i| (i + s) as u8).collect();
    rt.with(|c| c.push_reg(addr, n * p));
    rt.sync().expect("sync");
    let step = || {
        for k in 1..p {
            let to = (s + k) % p;
            rt.with(|c| c.put("bsp_put", to as u32, &src, addr, s * n))
                .expect("put");
        }
        rt.sync().expect("sync");
    };
    for _ in 0..steps / 10 {
        step();
    }
    // Touched before the clock starts, so that its page faults are not counted.
    let mut t = vec![0f64; steps];
    let u0 = usage();
    let start = std::time::Instant::now();
    let mut last = start;
    for x in t.iter_mut() {
        step();
        let now = std::time::Instant::now();
        *x = (now - last).as_secs_f64() * 1e6;
        last = now;
    }
    let u1 = usage();
    let paid = format!(
        "pid {s}: {} minor faults, {} voluntary and {} involuntary switches in {steps} \
         supersteps",
        u1.minflt - u0.minflt,
        u1.nvcsw - u0.nvcsw,
        u1.nivcsw - u0.nivcsw
    );
    // Every process's line reaches pid 0 through a put into its area.
    let line = {
        let mut b = paid.into_bytes();
        b.resize(256, b' ');
        b
    };
    let lines = vec![0u8; 256 * p];
    let laddr = lines.as_ptr() as usize;
    rt.with(|c| c.push_reg(laddr, 256 * p));
    rt.sync().expect("sync");
    rt.with(|c| c.put("bsp_put", 0, &line, laddr, s * 256))
        .expect("put");
    rt.sync().expect("sync");
    if s == 0 {
        let mean = t.iter().sum::<f64>() / t.len() as f64;
        let best = t.iter().copied().fold(f64::INFINITY, f64::min);
        let mut v = t.clone();
        v.sort_by(f64::total_cmp);
        let q = |x: f64| v[((v.len() as f64 * x).ceil() as usize).clamp(1, v.len()) - 1];
        println!(
            "p={p} {n} B per pair, {steps} supersteps (us): best {best:.2}, median {:.2}, \
             p90 {:.2}, p99 {:.2}, worst {:.2}, mean {mean:.2}",
            q(0.5),
            q(0.9),
            q(0.99),
            v[v.len() - 1]
        );
        // A superstep within 1.5x of the best is fast; how long do slow runs last?
        let fast = |x: f64| x <= 1.5 * best;
        let slow = t.iter().filter(|&&x| !fast(x)).count();
        let mut runs = Vec::new();
        let mut run = 0;
        for &x in &t {
            if fast(x) {
                if run > 0 {
                    runs.push(run);
                }
                run = 0;
            } else {
                run += 1;
            }
        }
        runs.sort_unstable();
        println!(
            "{slow} of {steps} supersteps above 1.5x the best, in {} runs (median run {}, \
             longest {})",
            runs.len(),
            runs.get(runs.len() / 2).copied().unwrap_or(0),
            runs.last().copied().unwrap_or(0)
        );
        // The histogram: how many supersteps per band of multiples of the best.
        let bands = [1.25, 1.5, 2.0, 3.0, 5.0, 10.0, f64::INFINITY];
        let mut counts = [0usize; 7];
        for &x in &t {
            let i = bands.iter().position(|&b| x <= b * best).unwrap_or(6);
            counts[i] += 1;
        }
        let mut lo = 1.0;
        for (b, c) in bands.iter().zip(counts) {
            println!("  {lo:>4}-{b:<4}x best: {c}");
            lo = *b;
        }
        for l in lines.chunks(256) {
            println!("{}", String::from_utf8_lossy(l).trim_end());
        }
    }
    rt.with(|c| c.pop_reg("bsp_pop_reg", laddr)).expect("pop");
    rt.with(|c| c.pop_reg("bsp_pop_reg", addr)).expect("pop");
    rt.sync().expect("sync");
    drop((dest, lines));
    bsp.end().expect("bsp_end");
}
