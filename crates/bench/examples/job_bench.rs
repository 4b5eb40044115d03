//! Ping-pong and streaming through the whole engine of a job built by `job::connect`
//! (whatever `BULKWIRE_TRANSPORT` / `BULKWIRE_PROTOCOL` choose: by default shared memory and
//! utopia between two processes of this host). Self-spawns its second process.
//!
//! `cargo run --release -p bulkwire-bench --example job_bench [ITERS]`

use std::time::Duration;

use bulkwire_bench::kernels::{Role, pingpong, stream};
use bulkwire_bench::stats::Summary;
use bulkwire_engine::Transport;
use bulkwire_engine::job::connect;

fn main() {
    let iters: usize = std::env::args()
        .nth(1)
        .map_or(100_000, |a| a.parse().unwrap());
    let settings = bulkwire_config::Settings::from_env().unwrap();
    let mut ctl = bulkwire_launch::self_spawn(2, &settings.launch).unwrap();
    let (mut e, info) = connect(&mut ctl, settings.job()).unwrap();
    let rank = ctl.rank();
    let (role, peer) = if rank == 0 {
        (Role::Initiator, 1)
    } else {
        (Role::Responder, 0)
    };
    for size in [8usize, 1024] {
        let lat = pingpong(&mut e, role, peer, size, iters / 10, iters).unwrap();
        if rank == 0 {
            let s = Summary::of(&lat);
            println!(
                "{} over {}: {size} B half round trip median {:.3} us, mean {:.3} us",
                e.protocol_name(),
                info.links,
                s.median * 1e6,
                s.mean * 1e6
            );
        }
    }
    for size in [64usize << 10, 1 << 20] {
        let bw = stream(&mut e, role, peer, size, 64, 3, 20, None).unwrap();
        if rank == 0 {
            let rates: Vec<f64> = bw.iter().map(|s| s.rate()).collect();
            let s = Summary::of(&rates);
            println!(
                "{} over {}: {size} B stream (window 64) median {:.2} GB/s, max {:.2} GB/s",
                e.protocol_name(),
                info.links,
                s.median / 1e9,
                s.max / 1e9
            );
        }
    }
    // The last acknowledgements; a peer that already finished cannot send its own, so a
    // time-out here is no failure of the measurement.
    let _ = e.flush(Some(Duration::from_secs(2)));
    ctl.finish(0).unwrap();
}
