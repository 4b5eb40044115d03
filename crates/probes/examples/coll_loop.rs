//! One collective in a loop between two processes (self-spawn), for profiling with
//! `perf record -g`: `coll_loop KIND BYTES ITERS`, KIND one of bcast, allgather, alltoall,
//! allreduce (BYTES per process; allreduce sums BYTES / 8 doubles). Prints each rank's
//! time per call (a barrier included) and the algorithm the last call took.

use std::process::exit;
use std::time::Instant;

use bulkwire_collectives::{Coll, Op};
use bulkwire_p2p::Comm;

fn die(msg: impl std::fmt::Display) -> ! {
    eprintln!("coll_loop: {msg}");
    exit(2)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [kind, size, iters] = args.as_slice() else {
        die("usage: coll_loop bcast|allgather|alltoall|allreduce BYTES ITERS");
    };
    let size: usize = size
        .parse()
        .unwrap_or_else(|_| die("BYTES: expected a number"));
    let iters: usize = iters
        .parse()
        .unwrap_or_else(|_| die("ITERS: expected a number"));
    let s = bulkwire_probes::settings();
    let comm = Comm::init_spawn(2, &s.launch, s.p2p).unwrap_or_else(|e| die(e));
    let coll = Coll::new(&comm, s.coll).unwrap_or_else(|e| die(e));
    let p = comm.size() as usize;
    let send = vec![1u8; size * p];
    let mut recv = vec![0u8; size * p];
    let mut v = vec![1.0f64; (size / 8).max(1)];
    let t0 = Instant::now();
    for _ in 0..iters {
        let r = coll.barrier().and_then(|()| match kind.as_str() {
            "bcast" => coll.broadcast(&mut recv[..size], 0),
            "allgather" => coll.allgather(&send[..size], &mut recv),
            "alltoall" => coll.alltoall(&send, &mut recv),
            "allreduce" => coll.allreduce_in_place(&mut v, &Op::Sum),
            _ => die(format!("unknown collective {kind}")),
        });
        r.unwrap_or_else(|e| die(e));
    }
    let us = t0.elapsed().as_secs_f64() * 1e6 / iters.max(1) as f64;
    println!(
        "rank {} {kind} {size}: {us:.2} us per call with a barrier ({:?})",
        comm.rank(),
        coll.last_algorithm()
    );
    drop(coll);
    comm.finalize().unwrap_or_else(|e| die(e));
}
