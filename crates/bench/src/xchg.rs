//! A BSP total exchange timed superstep by superstep: every process puts `size` bytes to
//! every other (one `bsp_put` per destination, the order of sending left to the BSP
//! layer's schedule), then `bsp_sync`. The result is, per superstep, the slowest
//! process's time, so that a report can give the median and the worst superstep (the
//! BSPlib paper's Table 1, and the RMPP paper's all-to-all of its Fig. 3 at p processes).
//! Or incast: every process but 0 puts to process 0.

use std::ffi::OsString;
use std::path::Path;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::jobs;
use crate::stack::{Faults, Stack, Transport};

/// What to measure.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct XchgSpec {
    /// Bytes per ordered pair of processes.
    pub size: usize,
    /// Supersteps before the timed ones.
    pub warmup: usize,
    pub steps: usize,
    /// Incast instead: every process but 0 puts `size` bytes to process 0 (the collectives'
    /// gather and reduce pattern: p-1 senders into one port).
    #[serde(default)]
    pub incast: bool,
}

/// Seconds of each timed superstep, the slowest process's.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct XchgResult {
    pub nprocs: u32,
    pub seconds: Vec<f64>,
}

impl XchgResult {
    pub fn median(&self) -> f64 {
        let mut s = self.seconds.clone();
        s.sort_by(f64::total_cmp);
        s.get(s.len() / 2).copied().unwrap_or(f64::NAN)
    }

    pub fn worst(&self) -> f64 {
        self.seconds.iter().copied().fold(f64::NAN, f64::max)
    }
}

/// Runs `spec` on `p` processes of `exe`, BSPlib over `over` with `env` added to the
/// stack's settings, spread over `across`' hosts when given.
pub fn run_on(
    exe: &Path,
    p: u32,
    spec: &XchgSpec,
    over: Transport,
    env: &[(String, String)],
    timeout: Duration,
    across: Option<&jobs::Across>,
) -> Result<XchgResult, String> {
    let job = jobs::Job {
        n: p,
        mode: "__xchg",
        stack: &Stack::Bsp(over.check()?),
        faults: &Faults::none(),
        timeout,
        across,
        env,
    };
    jobs::run(exe, &job, spec)
}

/// The worker side of [`run_on`].
pub fn worker_main(args: &[OsString]) -> Result<(), String> {
    let (w, mut bsp) = jobs::bsp_worker::<XchgSpec>(args)?;
    let p = bsp.nprocs();
    let (n, me, pn) = (w.spec.size, bsp.pid() as usize, p as usize);
    let steps = w.spec.steps.max(1);
    let dest = bsp.push_reg(vec![0u8; n * pn]);
    let times = bsp.push_reg(vec![0f64; steps * pn]);
    let src: Vec<u8> = (0..n).map(|i| (i + me) as u8).collect();
    let e = |e: bulkwire_bsp::BspError| e.to_string();
    bsp.sync().map_err(e)?;
    let mut mine = Vec::with_capacity(steps);
    for k in 0..w.spec.warmup + steps {
        let t0 = Instant::now();
        if w.spec.incast {
            if me != 0 {
                bsp.put(0, &src, &dest, me * n).map_err(e)?;
            }
        } else {
            for d in 1..pn {
                let to = (me + d) % pn;
                bsp.put(to as u32, &src, &dest, me * n).map_err(e)?;
            }
        }
        bsp.sync().map_err(e)?;
        if k >= w.spec.warmup {
            mine.push(t0.elapsed().as_secs_f64());
        }
    }
    // Each process's times to pid 0, which keeps the slowest of each superstep.
    bsp.put(0, &mine, &times, me * steps).map_err(e)?;
    bsp.sync().map_err(e)?;
    if me == 0 {
        let all = bsp.area(&times);
        let seconds = (0..steps)
            .map(|k| (0..pn).map(|q| all[q * steps + k]).fold(0.0, f64::max))
            .collect();
        w.write(&XchgResult { nprocs: p, seconds })?;
    }
    bsp.end().map_err(e)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_and_worst() {
        let r = XchgResult {
            nprocs: 4,
            seconds: vec![0.3, 0.1, 0.2],
        };
        assert_eq!((r.median(), r.worst()), (0.2, 0.3));
    }
}
