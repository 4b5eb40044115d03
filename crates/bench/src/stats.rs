//! Summary statistics and fits.

/// Summary of a sample.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct Summary {
    pub n: usize,
    pub min: f64,
    pub max: f64,
    pub mean: f64,
    pub median: f64,
    /// The 90th percentile, by nearest rank: the smallest sample with at least 90 % of
    /// the sample at or below it.
    pub p90: f64,
    /// Sample standard deviation.
    pub std_dev: f64,
}

impl Summary {
    /// Summarises `xs` (which must not be empty).
    pub fn of(xs: &[f64]) -> Summary {
        assert!(!xs.is_empty(), "summary of nothing");
        let mut v = xs.to_vec();
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let mean = v.iter().sum::<f64>() / n as f64;
        let var = if n > 1 {
            v.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / (n - 1) as f64
        } else {
            0.0
        };
        let median = if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        };
        Summary {
            n,
            min: v[0],
            max: v[n - 1],
            mean,
            median,
            p90: v[(n * 9).div_ceil(10).max(1) - 1],
            std_dev: var.sqrt(),
        }
    }
}

/// How single timed operations spread (seconds, like every time the harnesses report):
/// the best, the median and the 90th percentile. A mean over a batch hides whether most
/// operations took the best time and a few took far longer, or all took about the mean.
/// Of rates (bytes per second, [`Spread::of_rates`]) the best is the highest and the p90
/// the rate that 90 % of the operations reach: the slow tail either way.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Spread {
    pub best: f64,
    pub median: f64,
    pub p90: f64,
}

impl Spread {
    /// The spread of a sample (none when it is empty).
    pub fn of(xs: &[f64]) -> Option<Spread> {
        (!xs.is_empty()).then(|| Spread::from(Summary::of(xs)))
    }

    /// The spread of rates, where higher is better: the best is the highest, the p90 the
    /// rate of the operation at the 90th percentile of their times (none when empty).
    pub fn of_rates(xs: &[f64]) -> Option<Spread> {
        // The same nearest ranks as for times, counted from the fast end.
        let neg: Vec<f64> = xs.iter().map(|x| -x).collect();
        Spread::of(&neg).map(|s| s.scaled(-1.0))
    }

    /// A spread of times per operation as the rates of `bytes` per operation: the best
    /// time gives the best (highest) rate, the p90 time the p90 rate.
    pub fn as_rates(self, bytes: f64) -> Spread {
        Spread {
            best: bytes / self.best,
            median: bytes / self.median,
            p90: bytes / self.p90,
        }
    }

    /// Whether it holds a measurement (every figure finite, the best above zero).
    pub fn is_measured(&self) -> bool {
        self.best > 0.0
            && [self.best, self.median, self.p90]
                .iter()
                .all(|x| x.is_finite())
    }

    /// The spread scaled by `k` (microseconds to seconds: 1e-6).
    pub fn scaled(self, k: f64) -> Spread {
        Spread {
            best: self.best * k,
            median: self.median * k,
            p90: self.p90 * k,
        }
    }
}

impl From<Summary> for Spread {
    fn from(s: Summary) -> Spread {
        Spread {
            best: s.min,
            median: s.median,
            p90: s.p90,
        }
    }
}

/// A least-squares line y = a + b x.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Line {
    pub a: f64,
    pub b: f64,
    /// Coefficient of determination.
    pub r2: f64,
}

impl Line {
    /// The line when both parameters can be a cost (a start-up time or latency `a` of at
    /// least 0, a cost per unit `b` above 0), `None` otherwise: a fit through points that
    /// bend or scatter can give a negative l or g, which says nothing about the machine.
    pub fn physical(self) -> Option<Line> {
        (self.a.is_finite() && self.b.is_finite() && self.a >= 0.0 && self.b > 0.0).then_some(self)
    }
}

/// Fits y = a + b x by ordinary least squares. `None` with fewer than two distinct x.
pub fn fit_line(pts: &[(f64, f64)]) -> Option<Line> {
    let n = pts.len() as f64;
    if pts.len() < 2 {
        return None;
    }
    let mx = pts.iter().map(|p| p.0).sum::<f64>() / n;
    let my = pts.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = pts.iter().map(|p| (p.0 - mx) * (p.0 - mx)).sum();
    if sxx == 0.0 {
        return None;
    }
    let sxy: f64 = pts.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    let b = sxy / sxx;
    let a = my - b * mx;
    let ss_tot: f64 = pts.iter().map(|p| (p.1 - my) * (p.1 - my)).sum();
    let ss_res: f64 = pts.iter().map(|p| (p.1 - a - b * p.0).powi(2)).sum();
    let r2 = if ss_tot == 0.0 {
        1.0
    } else {
        1.0 - ss_res / ss_tot
    };
    Some(Line { a, b, r2 })
}

/// Hockney's model of a message transfer: t(n) = t0 + n / r_inf.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Hockney {
    /// Start-up time, seconds.
    pub t0: f64,
    /// Asymptotic bandwidth, bytes per second.
    pub r_inf: f64,
    /// Message size reaching half of r_inf, bytes: t0 * r_inf.
    pub n_half: f64,
}

/// Fits y = a + b x minimising the squared *relative* residuals (weights 1 / y^2), so that
/// points spanning orders of magnitude count alike: by ordinary least squares the largest
/// sizes alone set both parameters, and the start-up time comes out as noise around zero.
/// `None` with fewer than two distinct x or a non-positive y.
pub fn fit_line_relative(pts: &[(f64, f64)]) -> Option<(f64, f64)> {
    if pts.len() < 2 || pts.iter().any(|p| p.1 <= 0.0 || !p.1.is_finite()) {
        return None;
    }
    let w = |p: &(f64, f64)| 1.0 / (p.1 * p.1);
    let sw: f64 = pts.iter().map(w).sum();
    let mx = pts.iter().map(|p| w(p) * p.0).sum::<f64>() / sw;
    let my = pts.iter().map(|p| w(p) * p.1).sum::<f64>() / sw;
    let sxx: f64 = pts.iter().map(|p| w(p) * (p.0 - mx).powi(2)).sum();
    if sxx <= 0.0 {
        return None;
    }
    let sxy: f64 = pts.iter().map(|p| w(p) * (p.0 - mx) * (p.1 - my)).sum();
    let b = sxy / sxx;
    Some((my - b * mx, b))
}

/// Fits Hockney's model to (bytes, seconds) points: time against size, by least squares
/// of relative residuals ([`fit_line_relative`]). `None` when the fit is degenerate: no
/// positive slope, or no positive start-up time (the points bend away from a line; a t0
/// of 0 and an n1/2 of 0 B would be no figure of the machine).
pub fn hockney(pts: &[(f64, f64)]) -> Option<Hockney> {
    let (a, b) = fit_line_relative(pts)?;
    if b <= 0.0 || a <= 0.0 || !a.is_finite() || !b.is_finite() {
        return None;
    }
    let t0 = a;
    let r_inf = 1.0 / b;
    Some(Hockney {
        t0,
        r_inf,
        n_half: t0 * r_inf,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_of_known_sample() {
        let s = Summary::of(&[2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]);
        assert_eq!((s.min, s.max, s.mean, s.median), (2.0, 9.0, 5.0, 4.5));
        assert!((s.std_dev - 2.138).abs() < 1e-3);
        // 8 samples: the 90th percentile is the 8th (7.2 rounds up).
        assert_eq!(s.p90, 9.0);
        let ten: Vec<f64> = (1..=10).map(f64::from).collect();
        assert_eq!(Summary::of(&ten).p90, 9.0);
        assert_eq!(Summary::of(&[3.0]).p90, 3.0);
        let sp = Spread::of(&ten).unwrap();
        assert_eq!((sp.best, sp.median, sp.p90), (1.0, 5.5, 9.0));
        assert!(sp.is_measured() && !Spread::default().is_measured());
        assert!(Spread::of(&[]).is_none());
        // Rates: the best is the highest, the p90 the slow tail.
        let r = Spread::of_rates(&ten).unwrap();
        assert_eq!((r.best, r.median, r.p90), (10.0, 5.5, 2.0));
        assert!(r.is_measured() && Spread::of_rates(&[]).is_none());
        let t = Spread::of(&[1.0, 2.0, 4.0]).unwrap().as_rates(8.0);
        assert_eq!((t.best, t.median, t.p90), (8.0, 4.0, 2.0));
    }

    #[test]
    fn only_a_line_with_non_negative_costs_is_a_fit() {
        let line = |a, b| Line { a, b, r2: 1.0 };
        assert!(line(1.0, 0.5).physical().is_some());
        assert!(line(0.0, 0.5).physical().is_some());
        assert!(line(-34.7, 0.5).physical().is_none());
        assert!(line(1.0, -1.9e-9).physical().is_none());
        assert!(line(1.0, 0.0).physical().is_none());
        assert!(line(f64::NAN, 1.0).physical().is_none());
    }

    #[test]
    fn hockney_recovers_its_parameters() {
        // t0 = 10 us, r_inf = 1 GB/s.
        let pts: Vec<(f64, f64)> = (0..12)
            .map(|k| {
                let n = (1u64 << k) as f64 * 1024.0;
                (n, 10e-6 + n / 1e9)
            })
            .collect();
        let h = hockney(&pts).unwrap();
        assert!((h.t0 - 10e-6).abs() < 1e-9);
        assert!((h.r_inf - 1e9).abs() / 1e9 < 1e-9);
        assert!((h.n_half - 10_000.0).abs() < 1e-3);
        assert!(hockney(&[(1.0, 1.0)]).is_none());
        assert!(hockney(&[(1.0, 2.0), (2.0, 1.0)]).is_none());
        // Points on a line through a negative start-up time: no fit, not a t0 of 0.
        let bent: Vec<(f64, f64)> = [1e3, 1e4, 1e5]
            .iter()
            .map(|&n| (n, -5e-6 + n / 1e9))
            .filter(|p| p.1 > 0.0)
            .collect();
        assert!(hockney(&bent).is_none(), "{:?}", hockney(&bent));
    }

    #[test]
    fn hockney_start_up_time_survives_a_slow_largest_size() {
        // t0 = 5 us, 5 GB/s, except that the largest size runs at 4 GB/s (out of cache):
        // the start-up time must still come from the small sizes.
        let mut pts: Vec<(f64, f64)> = [1e3, 64e3, 1e6]
            .iter()
            .map(|&n| (n, 5e-6 + n / 5e9))
            .collect();
        pts.push((16e6, 5e-6 + 16e6 / 4e9));
        let h = hockney(&pts).unwrap();
        assert!((h.t0 - 5e-6).abs() < 1e-6, "t0 {}", h.t0);
        assert!(h.r_inf > 3.9e9 && h.r_inf < 5.1e9, "r_inf {}", h.r_inf);
    }
}
