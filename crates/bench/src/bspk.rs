//! The BSP parameters by bspbench's method (Bisseling): the time of an h-relation of
//! 8-byte puts for h = 0..hmax fitted to t(h) = l + g h, and the time of an empty
//! superstep (and optionally a total exchange), measured by the BSP library's own kernel in
//! a job of p processes.

use std::ffi::OsString;
use std::path::Path;
use std::time::Duration;

use bulkwire_bsp::bench::{BenchConfig, measure};
use serde::{Deserialize, Serialize};

use crate::jobs;
use crate::stack::{Faults, Stack, Transport};
use crate::stats::Spread;

/// What to measure.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BspSpec {
    pub hmax: usize,
    pub hstep: usize,
    pub iters: usize,
    pub batches: usize,
    pub warmup: usize,
    /// Bytes per pair of a total exchange by `bsp_put`, also timed; 0 leaves it out.
    pub exchange: usize,
    /// The exchange by `bsp_get` instead.
    #[serde(default)]
    pub by_get: bool,
}

/// The fitted parameters, microseconds, and every (h, superstep time) measured.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BspResult {
    pub nprocs: u32,
    pub g_us: f64,
    pub l_us: f64,
    pub empty_us: f64,
    /// A superstep of the total exchange of `BspSpec::exchange` bytes per pair, or 0.
    pub exchange_us: f64,
    pub samples: Vec<(usize, f64)>,
    /// Single empty supersteps, seconds: best, median, 90th percentile.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub empty_steps: Option<Spread>,
    /// Single supersteps of the total exchange, seconds (none without one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exchange_steps: Option<Spread>,
}

/// Runs `spec` on `p` processes of `exe`, BSPlib over `over`.
pub fn run(
    exe: &Path,
    p: u32,
    spec: &BspSpec,
    over: Transport,
    timeout: Duration,
) -> Result<BspResult, String> {
    run_on(exe, p, spec, over, timeout, None)
}

/// [`run`], the processes spread over the hosts of `across` when it is given.
pub fn run_on(
    exe: &Path,
    p: u32,
    spec: &BspSpec,
    over: Transport,
    timeout: Duration,
    across: Option<&jobs::Across>,
) -> Result<BspResult, String> {
    let job = jobs::Job {
        n: p,
        mode: "__bsp",
        stack: &Stack::Bsp(over.check()?),
        faults: &Faults::none(),
        timeout,
        across,
        env: &[],
    };
    jobs::run(exe, &job, spec)
}

/// The worker side of [`run`]: a BSP program of the launched job's size.
pub fn worker_main(args: &[OsString]) -> Result<(), String> {
    let (w, bsp) = jobs::bsp_worker::<BspSpec>(args)?;
    let cfg = BenchConfig {
        hmax: w.spec.hmax,
        hstep: w.spec.hstep,
        iters: w.spec.iters,
        batches: w.spec.batches,
        warmup: w.spec.warmup,
        exchange: w.spec.exchange,
        by_get: w.spec.by_get,
    };
    let r = measure(bsp.runtime(), &cfg).map_err(|e| e.to_string())?;
    if bsp.pid() == 0 {
        w.write(&BspResult {
            nprocs: r.p,
            g_us: r.g_us,
            l_us: r.l_us,
            empty_us: r.empty_us,
            exchange_us: r.exchange_us,
            samples: r.samples,
            empty_steps: seconds(r.empty_steps),
            exchange_steps: seconds(r.exchange_steps),
        })?;
    }
    bsp.end().map_err(|e| e.to_string())
}

/// The BSP kernel's spread (microseconds) in seconds; none when nothing was timed.
fn seconds(s: bulkwire_bsp::bench::Spread) -> Option<Spread> {
    Some(
        Spread {
            best: s.best,
            median: s.median,
            p90: s.p90,
        }
        .scaled(1e-6),
    )
    .filter(Spread::is_measured)
}
