//! bspbench's measurement of the BSP parameters (Bisseling, "Parallel Scientific
//! Computation", program bspbench): the time of an h-relation of single-word puts for
//! h = 0..=hmax, fitted by least squares to t(h) = l + g h, and the time of an empty
//! superstep. Each time is the median of a few batch means (bspbench takes one mean),
//! which keeps a shared machine's hiccups out of the fit. Every process sends h words and receives h words: word i goes to
//! `(s + 1 + i mod (p-1)) mod p`, so each process talks to all others.

use crate::BspError;
use crate::runtime::Runtime;

/// What to measure.
#[derive(Clone, Debug)]
pub struct BenchConfig {
    /// Largest h (bspbench: 256).
    pub hmax: usize,
    /// Step between measured h.
    pub hstep: usize,
    /// Supersteps timed per batch, for every h (and for the empty superstep).
    pub iters: usize,
    /// Batches per h; the median batch mean counts, so that a batch in which the
    /// machine was busy with something else does not (this is a shared 2-core VM).
    pub batches: usize,
    /// Untimed supersteps before each measurement.
    pub warmup: usize,
    /// Bytes per pair of a total exchange done with one `bsp_put` per destination, timed
    /// like an h-relation; 0 leaves it out.
    pub exchange: usize,
    /// The total exchange by one `bsp_get` per source instead.
    pub by_get: bool,
}

impl Default for BenchConfig {
    fn default() -> Self {
        BenchConfig {
            hmax: 256,
            hstep: 1,
            iters: 100,
            batches: 5,
            warmup: 10,
            exchange: 0,
            by_get: false,
        }
    }
}

/// The fitted parameters, in microseconds.
#[derive(Clone, Debug, PartialEq)]
pub struct BenchResult {
    pub p: u32,
    /// Time per word (8 bytes) of an h-relation.
    pub g_us: f64,
    /// Fixed cost of a superstep with communication.
    pub l_us: f64,
    /// Time of a superstep without communication.
    pub empty_us: f64,
    /// Time of a superstep of the total exchange (`BenchConfig::exchange`), or 0.
    pub exchange_us: f64,
    /// Every measurement: h and the time of one superstep.
    pub samples: Vec<(usize, f64)>,
    /// The empty superstep's single supersteps: best, median, 90th percentile.
    pub empty_steps: Spread,
    /// The total exchange's single supersteps (all zero without one).
    pub exchange_steps: Spread,
}

/// How single supersteps spread, in microseconds: a batch mean hides whether every
/// superstep took about as long, or most took the best time and a few took far longer.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Spread {
    pub best: f64,
    pub median: f64,
    /// The 90th percentile (nearest rank).
    pub p90: f64,
}

impl Spread {
    /// The spread of `xs`, sorted in place; all zero when empty.
    pub fn of(xs: &mut [f64]) -> Spread {
        if xs.is_empty() {
            return Spread::default();
        }
        xs.sort_by(f64::total_cmp);
        let n = xs.len();
        let median = if n % 2 == 1 {
            xs[n / 2]
        } else {
            (xs[n / 2 - 1] + xs[n / 2]) / 2.0
        };
        // Nearest rank: the smallest sample with at least 90 % of them at or below it.
        let p90 = xs[(n * 9).div_ceil(10).max(1) - 1];
        Spread {
            best: xs[0],
            median,
            p90,
        }
    }
}

/// Least squares fit of `t = l + g h` over `samples`; returns `(g, l)`.
pub fn fit(samples: &[(usize, f64)]) -> (f64, f64) {
    let n = samples.len() as f64;
    if n < 2.0 {
        return (0.0, samples.first().map_or(0.0, |s| s.1));
    }
    let sx: f64 = samples.iter().map(|s| s.0 as f64).sum();
    let sy: f64 = samples.iter().map(|s| s.1).sum();
    let sxx: f64 = samples.iter().map(|s| (s.0 as f64).powi(2)).sum();
    let sxy: f64 = samples.iter().map(|s| s.0 as f64 * s.1).sum();
    let den = n * sxx - sx * sx;
    if den == 0.0 {
        return (0.0, sy / n);
    }
    let g = (n * sxy - sx * sy) / den;
    (g, (sy - g * sx) / n)
}

/// Measures g, l and the empty superstep on the computation `rt` belongs to. Collective:
/// every process calls it at the same point. Each process returns its own timings (they
/// agree closely, every superstep being a barrier).
pub fn measure(rt: &Runtime, cfg: &BenchConfig) -> Result<BenchResult, BspError> {
    let p = rt.nprocs() as usize;
    let s = rt.pid() as usize;
    let words = cfg.hmax.max(1) * 2 + p;
    let dest = vec![0f64; words];
    let addr = dest.as_ptr() as usize;
    let src: Vec<f64> = (0..cfg.hmax.max(1)).map(|i| i as f64).collect();
    rt.with(|c| c.push_reg(addr, words * 8));
    rt.sync()?;
    // Each put is a call of its own, as in bspbench: its cost is part of g.
    let superstep = |h: usize| -> Result<(), BspError> {
        for (i, v) in src.iter().enumerate().take(h) {
            let (to, at) = if p == 1 {
                (0, i)
            } else {
                ((s + 1 + i % (p - 1)) % p, s + (i / (p - 1)) * p)
            };
            rt.with(|c| c.put("bsp_put", to as u32, &v.to_le_bytes(), addr, at * 8))?;
        }
        rt.sync()
    };
    let (empty_us, empty_steps) = time(cfg, || superstep(0))?;
    let mut samples = Vec::new();
    let mut h = 0;
    while h <= cfg.hmax {
        samples.push((h, time(cfg, || superstep(h))?.0));
        h += cfg.hstep.max(1);
    }
    rt.with(|c| c.pop_reg("bsp_pop_reg", addr))?;
    rt.sync()?;
    drop(dest);
    let (exchange_us, exchange_steps) = if cfg.exchange > 0 {
        total_exchange(rt, cfg)?
    } else {
        (0.0, Spread::default())
    };
    // bspbench fits from h = p on: below it not every process talks to every other.
    let tail: Vec<(usize, f64)> = samples.iter().copied().filter(|s| s.0 >= p).collect();
    let (g_us, l_us) = fit(if tail.len() >= 2 { &tail } else { &samples });
    Ok(BenchResult {
        p: p as u32,
        g_us,
        l_us,
        empty_us,
        exchange_us,
        samples,
        empty_steps,
        exchange_steps,
    })
}

/// The median of `cfg.batches` batch means of `cfg.iters` calls of `step`, after
/// `cfg.warmup` untimed ones, in microseconds, and the spread of the single calls. Each
/// call ends where the next begins (one clock read between them), so the single times
/// add up to the batch's.
fn time(
    cfg: &BenchConfig,
    mut step: impl FnMut() -> Result<(), BspError>,
) -> Result<(f64, Spread), BspError> {
    for _ in 0..cfg.warmup {
        step()?;
    }
    let iters = cfg.iters.max(1);
    let mut means = Vec::with_capacity(cfg.batches.max(1));
    // Written before the clock starts: a page first touched inside a batch would time a
    // page fault.
    let mut single = vec![0f64; cfg.batches.max(1) * iters];
    for batch in single.chunks_mut(iters) {
        let t0 = std::time::Instant::now();
        let mut last = t0;
        for x in batch.iter_mut() {
            step()?;
            let now = std::time::Instant::now();
            *x = (now - last).as_secs_f64() * 1e6;
            last = now;
        }
        means.push((last - t0).as_secs_f64() * 1e6 / iters as f64);
    }
    means.sort_by(f64::total_cmp);
    Ok((means[means.len() / 2], Spread::of(&mut single)))
}

/// A superstep in which every process puts `cfg.exchange` bytes to every other, one put
/// per destination, to the block of the destination's area that belongs to the sender;
/// with `cfg.by_get`, every process gets each other's block of its own area instead.
fn total_exchange(rt: &Runtime, cfg: &BenchConfig) -> Result<(f64, Spread), BspError> {
    let (p, s, n) = (rt.nprocs() as usize, rt.pid() as usize, cfg.exchange);
    let dest = vec![0u8; n * p];
    let addr = dest.as_ptr() as usize;
    let src: Vec<u8> = (0..n).map(|i| (i + s) as u8).collect();
    rt.with(|c| c.push_reg(addr, n * p));
    rt.sync()?;
    let t = time(cfg, || {
        for k in 1..p {
            let to = (s + k) % p;
            if cfg.by_get {
                rt.with(|c| c.get("bsp_get", to as u32, addr, to * n, addr + to * n, n))?;
            } else {
                rt.with(|c| c.put("bsp_put", to as u32, &src, addr, s * n))?;
            }
        }
        rt.sync()
    })?;
    rt.with(|c| c.pop_reg("bsp_pop_reg", addr))?;
    rt.sync()?;
    drop(dest);
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fit_recovers_a_line() {
        let s: Vec<(usize, f64)> = (0..10).map(|h| (h, 5.0 + 0.25 * h as f64)).collect();
        let (g, l) = fit(&s);
        assert!((g - 0.25).abs() < 1e-12 && (l - 5.0).abs() < 1e-12);
        assert_eq!(fit(&[(3, 2.0)]), (0.0, 2.0));
    }

    #[test]
    fn spread_takes_best_median_and_nearest_rank_p90() {
        let mut xs: Vec<f64> = (1..=10).rev().map(f64::from).collect();
        let s = Spread::of(&mut xs);
        assert_eq!((s.best, s.median, s.p90), (1.0, 5.5, 9.0));
        let mut one = [4.0];
        assert_eq!(Spread::of(&mut one).p90, 4.0);
        let mut skewed: Vec<f64> = [1.0; 8].into_iter().chain([50.0, 60.0]).collect();
        let s = Spread::of(&mut skewed);
        assert_eq!((s.best, s.median, s.p90), (1.0, 1.0, 50.0));
        assert_eq!(Spread::of(&mut []), Spread::default());
    }
}
