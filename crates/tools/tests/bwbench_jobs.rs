//! Jobs of `bwbench`'s worker processes, one at a time: a job that fails says why, in the
//! worker's words, and a stack reaches the workers as the stack it names.

use std::path::PathBuf;
use std::time::Duration;

use bulkwire_bench::coll::{self, CollSpec};
use bulkwire_bench::pair::{self, Measure, PairSpec};
use bulkwire_bench::stack::{CollAlgo, Faults, Protocol, Stack, Transport};

fn exe() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_bwbench"))
}

#[test]
fn a_failed_job_says_why_in_the_workers_words() {
    // Only the point-to-point layer has posted receives: rank 0's kernel refuses.
    let spec = PairSpec {
        stack: Stack::Proto(Transport::udp(Protocol::Holefill)),
        measure: Measure::Overlap {
            sizes: vec![8],
            compute_ms: 1,
            reps: 1,
        },
        faults: Faults::none(),
    };
    let e = pair::run(&exe(), &spec, Duration::from_secs(120)).unwrap_err();
    assert!(
        e.contains("8 B overlap: the overlap benchmark needs the point-to-point layer"),
        "{e}"
    );
    // A stack a pair cannot run is refused before any process starts.
    let spec = PairSpec {
        stack: Stack::Bsp(Transport::udp(Protocol::Gbn)),
        ..spec
    };
    let e = pair::run(&exe(), &spec, Duration::from_secs(120)).unwrap_err();
    assert!(e.contains("a pair experiment measures"), "{e}");
}

#[test]
fn collectives_run_over_the_stack_they_name() {
    let run = |stack| {
        let spec = CollSpec {
            kinds: vec!["allreduce".into()],
            sizes: vec![8],
            warmup: 1,
            iters: 3,
            stack,
        };
        coll::run(&exe(), 2, &spec, Duration::from_secs(120)).unwrap()
    };
    let netcache = run(Stack::Coll {
        over: Transport::shm(Protocol::Utopia),
        algo: CollAlgo::Netcache,
    });
    assert!(netcache.netcache);
    assert_eq!(netcache.protocol, "utopia");
    let p2p = run(Stack::Coll {
        over: Transport::udp(Protocol::Gbn),
        algo: CollAlgo::P2p,
    });
    assert!(!p2p.netcache);
    assert_eq!(p2p.protocol, "gbn");
    assert_eq!(p2p.points.len(), 1);
    assert_eq!(p2p.points[0].seconds.len(), 3);
}
