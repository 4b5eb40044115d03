//! The cost of a superstep next to the transport it runs on: one job of P processes
//! (self-spawned, or under `bsprun`) measures pid 0 <-> pid 1 ping-pong of 8 bytes over
//! the engine, then builds BSP over the same engine and measures an empty superstep and
//! bspbench's g and l.
//!
//!     cargo run --release -p bulkwire-bsp --example calibrate -- [P [ITERS]]

use bulkwire_bench::kernels::{Role, pingpong};
use bulkwire_bsp::Runtime;
use bulkwire_bsp::bench::{BenchConfig, measure};
use bulkwire_engine::job;

fn main() {
    let mut args = std::env::args().skip(1);
    let p: u32 = args.next().and_then(|a| a.parse().ok()).unwrap_or(2);
    let iters: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(20000);
    let settings = bulkwire_config::Settings::from_env().expect("settings");
    let mut ctl = bulkwire_launch::self_spawn(p, &settings.launch).expect("start the job");
    let (mut engine, _) = job::connect(&mut ctl, settings.job()).expect("connect");
    let me = ctl.rank();
    let half = match me {
        0 => pingpong(&mut engine, Role::Initiator, 1, 8, 1000, iters).expect("ping-pong"),
        1 => {
            pingpong(&mut engine, Role::Responder, 0, 8, 1000, iters).expect("ping-pong");
            Vec::new()
        }
        _ => Vec::new(),
    };
    // The ping-pong skips messages from the others: nobody starts a superstep before it
    // is over.
    ctl.allgather(&[]).expect("barrier");
    let rt = Runtime::over(Box::new(engine), ctl.nprocs(), settings.bsp);
    for _ in 0..1000 {
        rt.sync().expect("sync");
    }
    // Batches, and the median batch: a shared machine has hiccups.
    let mut batches: Vec<f64> = (0..5)
        .map(|_| {
            let t0 = std::time::Instant::now();
            for _ in 0..iters / 5 {
                rt.sync().expect("sync");
            }
            t0.elapsed().as_secs_f64() * 1e6 / (iters / 5).max(1) as f64
        })
        .collect();
    batches.sort_by(f64::total_cmp);
    let empty = batches[2];
    let r = measure(&rt, &BenchConfig::default()).expect("bspbench");
    if me == 0 {
        let mut h = half.clone();
        h.sort_by(f64::total_cmp);
        let med = h.get(h.len() / 2).copied().unwrap_or(0.0) * 1e6;
        let mean = h.iter().sum::<f64>() / h.len().max(1) as f64 * 1e6;
        println!(
            "p={} protocol={} engine half round trip: median {med:.2} us, mean {mean:.2} us",
            ctl.nprocs(),
            rt.protocol()
        );
        println!(
            "p={} empty superstep: {empty:.2} us (median of 5 batch means of {})",
            ctl.nprocs(),
            iters / 5
        );
        println!(
            "p={} bspbench: g = {:.4} us per 8-byte word, l = {:.2} us, empty (fit run) = {:.2} us",
            r.p, r.g_us, r.l_us, r.empty_us
        );
    }
    // Everyone has passed the last barrier once this exchange completes.
    ctl.allgather(&[]).expect("final exchange");
    drop(rt);
    ctl.finish(0).expect("finish");
}
