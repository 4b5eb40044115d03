//! Every collective and algorithm against a serial reference with ranks as threads over
//! p2p's in-memory loopback transport: p = 1 to 8, both algorithm families forced, the
//! default selection with sizes on both sides of the thresholds, every type and
//! operation. Fast enough to run the whole matrix; the network cache and real
//! transports are in `crates/probes/tests/collectives.rs`. Each test is bounded by a watchdog.

mod suite;

use std::sync::Arc;
use std::time::{Duration, Instant};

use bulkwire_collectives::{Algorithm, Coll, Config, Family, Mode};
use bulkwire_p2p::loopback::{self, Delivery};
use bulkwire_p2p::{Comm, Config as P2pConfig, SingleCopy};

const LIMIT: Duration = Duration::from_secs(60);

fn p2p_config(eager: usize) -> P2pConfig {
    P2pConfig {
        eager,
        eager_local: eager,
        single_copy: SingleCopy::Off,
        split: usize::MAX,
        progress: Some(Duration::from_millis(1)),
        job: Default::default(),
    }
}

/// Runs `f(coll)` on a thread per rank of a loopback job of `n`; panics with the first
/// rank's error, or if the job outlives [`LIMIT`].
fn run<F>(n: u32, eager: usize, cfg: Config, f: F)
where
    F: Fn(&Coll) -> Result<(), String> + Send + Sync + 'static,
{
    let f = Arc::new(f);
    let start = Instant::now();
    let comms: Vec<Comm> = loopback::network(n, Delivery::Whole)
        .into_iter()
        .map(|l| Comm::from_transport(Box::new(l), &p2p_config(eager)))
        .collect();
    let hs: Vec<_> = comms
        .into_iter()
        .map(|comm| {
            let (f, cfg) = (f.clone(), cfg.clone());
            std::thread::spawn(move || {
                let r = Coll::new(&comm, cfg)
                    .map_err(|e| format!("rank {}: new: {e}", comm.rank()))
                    .and_then(|c| f(&c).map_err(|e| format!("rank {}: {e}", comm.rank())));
                let _ = comm.flush();
                r
            })
        })
        .collect();
    let mut errs = Vec::new();
    for h in hs {
        while !h.is_finished() {
            assert!(start.elapsed() < LIMIT, "job of {n} timed out");
            std::thread::sleep(Duration::from_millis(2));
        }
        match h.join() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => errs.push(e),
            Err(_) => errs.push("panicked".into()),
        }
    }
    assert!(errs.is_empty(), "{errs:#?}");
}

fn cfg(family: Family) -> Config {
    Config {
        mode: Mode::P2p,
        family,
        ..Config::default()
    }
}

const SIZES: &[usize] = &[0, 1, 7, 100, 1000];
const COUNTS: &[usize] = &[0, 1, 5, 33];

#[test]
fn small_algorithms_every_p() {
    for p in 1..=8 {
        run(p, 64 << 10, cfg(Family::Small), |c| {
            suite::movement(c, SIZES, 1)?;
            suite::reductions(c, COUNTS, 1)?;
            suite::misuse(c)?;
            Ok(())
        });
    }
}

#[test]
fn large_algorithms_every_p() {
    for p in 1..=8 {
        run(p, 64 << 10, cfg(Family::Large), |c| {
            suite::movement(c, SIZES, 2)?;
            suite::reductions(c, COUNTS, 2)?;
            Ok(())
        });
    }
}

/// The selection itself, with sizes on both sides of every threshold, rendezvous
/// messages included (a low eager limit).
#[test]
fn default_selection_across_thresholds() {
    for p in [3, 4, 5] {
        run(p, 4096, cfg(Family::Auto), move |c| {
            suite::movement(c, &[3, 40 << 10, 100 << 10], 3)?;
            suite::reductions(c, &[3, 20 << 10], 3)?;
            // The algorithms the thresholds name.
            let mut big = vec![0u8; 256 << 10];
            c.broadcast(&mut big, 0).map_err(|e| e.to_string())?;
            let want = if p >= 3 {
                Algorithm::ScatterAllgather
            } else {
                Algorithm::Binomial
            };
            assert_eq!(c.last_algorithm(), want);
            c.broadcast(&mut big[..10], 0).map_err(|e| e.to_string())?;
            assert_eq!(c.last_algorithm(), Algorithm::Binomial);
            let mut v = vec![1.0f64; 16 << 10];
            c.allreduce_in_place(&mut v, &bulkwire_collectives::Op::Sum)
                .map_err(|e| e.to_string())?;
            assert_eq!(c.last_algorithm(), Algorithm::Ring);
            assert!(v.iter().all(|&x| x == p as f64));
            c.allreduce_in_place(&mut v[..8], &bulkwire_collectives::Op::Sum)
                .map_err(|e| e.to_string())?;
            assert_eq!(c.last_algorithm(), Algorithm::RecursiveDoubling);
            c.barrier().map_err(|e| e.to_string())?;
            assert_eq!(c.last_algorithm(), Algorithm::Dissemination);
            Ok(())
        });
    }
}

/// Collective traffic never meets the user's: wildcard receives posted before the
/// collectives still get only the user's messages.
#[test]
fn user_wildcards_do_not_take_collective_messages() {
    run(3, 64 << 10, cfg(Family::Auto), |c| {
        let comm = c.comm();
        let (me, p) = (comm.rank(), comm.size());
        let mut r = comm
            .irecv_vec(bulkwire_p2p::ANY_SOURCE, bulkwire_p2p::ANY_TAG, 64)
            .map_err(|e| e.to_string())?;
        suite::movement(c, &[16], 9)?;
        comm.send((me + 1) % p, 5, &[me as u8])
            .map_err(|e| e.to_string())?;
        let st = r.wait().map_err(|e| e.to_string())?;
        let got = r.take_data().unwrap_or_default();
        if st.tag != 5 || got != [((me + p - 1) % p) as u8] {
            return Err(format!("wildcard got {st:?} {got:?}"));
        }
        Ok(())
    });
}

/// Processes configured differently are told so, all of them, naming a rank.
#[test]
fn configurations_must_agree() {
    let comms: Vec<Comm> = loopback::network(2, Delivery::Whole)
        .into_iter()
        .map(|l| Comm::from_transport(Box::new(l), &p2p_config(1 << 16)))
        .collect();
    let hs: Vec<_> = comms
        .into_iter()
        .map(|comm| {
            std::thread::spawn(move || {
                let mut c = cfg(Family::Auto);
                if comm.rank() == 1 {
                    c.family = Family::Large;
                }
                let r = Coll::new(&comm, c).map(|_| ());
                let _ = comm.flush();
                r
            })
        })
        .collect();
    for h in hs {
        let e = h.join().unwrap().unwrap_err().to_string();
        assert!(e.contains("rank 1") && e.contains("large"), "{e}");
    }
}
