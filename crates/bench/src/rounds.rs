//! Target checks measured in alternating rounds.
//!
//! On a shared machine a figure drifts by 10-30 % within a minute, so the ratio of two
//! runs taken a minute apart (as in the report's tables, which run one stack after the
//! other) measures the drift as much as the stacks. For the figures that decide a target,
//! the baseline and the candidate therefore run back to back, several times, in ABBA
//! order (baseline first in even rounds, candidate first in odd ones, so neither always
//! runs on a warmer or a quieter machine). Each round gives one ratio; the verdict takes
//! their median, and the report prints their range beside it.

use crate::stats::Summary;

/// The figures of both sides, round by round.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct Rounds {
    pub base: Vec<f64>,
    pub cand: Vec<f64>,
    /// Rounds left out because a side had no valid figure (e.g. raw UDP lost datagrams).
    pub invalid: usize,
}

/// One side's measurement: `Ok(None)` when the run worked but its figure is not a valid
/// baseline (the round is then left out), `Err` when it failed.
pub type Measurement<'a> = dyn FnMut() -> Result<Option<f64>, String> + 'a;

/// Runs `rounds` rounds of `base` and `cand` in ABBA order (baseline first in even
/// rounds): each round's (baseline, candidate) results. A failed run ends them all with
/// its error.
pub fn abba<T>(
    rounds: usize,
    base: &mut dyn FnMut() -> Result<T, String>,
    cand: &mut dyn FnMut() -> Result<T, String>,
) -> Result<Vec<(T, T)>, String> {
    let mut v = Vec::with_capacity(rounds);
    for i in 0..rounds {
        v.push(if i % 2 == 0 {
            let b = base()?;
            (b, cand()?)
        } else {
            let c = cand()?;
            (base()?, c)
        });
    }
    Ok(v)
}

impl Rounds {
    /// Runs `rounds` rounds of `base` and `cand` in ABBA order. A failed run ends the
    /// whole check with its error.
    pub fn run(
        rounds: usize,
        base: &mut Measurement<'_>,
        cand: &mut Measurement<'_>,
    ) -> Result<Rounds, String> {
        let mut r = Rounds::default();
        for (b, c) in abba(rounds, base, cand)? {
            match (b, c) {
                (Some(b), Some(c)) if b > 0.0 && b.is_finite() && c.is_finite() => {
                    r.base.push(b);
                    r.cand.push(c);
                }
                _ => r.invalid += 1,
            }
        }
        Ok(r)
    }

    /// Candidate over baseline, per valid round.
    pub fn ratios(&self) -> Vec<f64> {
        self.cand
            .iter()
            .zip(&self.base)
            .map(|(c, b)| c / b)
            .collect()
    }

    /// The median ratio, or `None` without a valid round.
    pub fn ratio(&self) -> Option<f64> {
        let r = self.ratios();
        (!r.is_empty()).then(|| Summary::of(&r).median)
    }

    /// "median of 5 alternating rounds, 1.05-1.31x", with how many were left out.
    pub fn describe(&self) -> String {
        let r = self.ratios();
        if r.is_empty() {
            return format!("no valid round of {}", self.invalid);
        }
        let s = Summary::of(&r);
        let mut d = format!(
            "median of {} alternating round{}",
            r.len(),
            if r.len() == 1 { "" } else { "s" }
        );
        if r.len() > 1 {
            d += &format!(", {:.2}-{:.2}x", s.min, s.max);
        }
        if self.invalid > 0 {
            d += &format!("; {} left out, without a valid baseline", self.invalid);
        }
        d
    }

    /// The median figure of each side, for the report (baseline, candidate).
    pub fn medians(&self) -> Option<(f64, f64)> {
        (!self.base.is_empty()).then(|| {
            (
                Summary::of(&self.base).median,
                Summary::of(&self.cand).median,
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alternates_the_order_and_takes_the_median_ratio() {
        let order = std::cell::RefCell::new(String::new());
        let mut k = 0.0;
        let mut base = || {
            order.borrow_mut().push('b');
            Ok(Some(2.0))
        };
        let mut cand = || {
            order.borrow_mut().push('c');
            k += 1.0;
            Ok(Some(k))
        };
        let r = Rounds::run(4, &mut base, &mut cand).unwrap();
        assert_eq!(*order.borrow(), "bccbbccb");
        assert_eq!(r.ratios(), vec![0.5, 1.0, 1.5, 2.0]);
        assert_eq!(r.ratio(), Some(1.25));
        assert!(
            r.describe()
                .starts_with("median of 4 alternating rounds, 0.50-2.00x")
        );
    }

    #[test]
    fn rounds_without_a_valid_baseline_are_left_out_and_errors_end_the_check() {
        let mut i = 0;
        let mut base = || {
            i += 1;
            Ok((i != 2).then_some(1.0))
        };
        let mut cand = || Ok(Some(3.0));
        let r = Rounds::run(3, &mut base, &mut cand).unwrap();
        assert_eq!((r.ratios(), r.invalid), (vec![3.0, 3.0], 1));
        assert!(
            r.describe()
                .ends_with("1 left out, without a valid baseline")
        );
        let mut bad = || Err("no such stack".to_string());
        let mut cand = || Ok(Some(1.0));
        assert_eq!(
            Rounds::run(3, &mut bad, &mut cand),
            Err("no such stack".into())
        );
        let mut none = || Ok(None);
        let mut cand = || Ok(Some(1.0));
        let r = Rounds::run(2, &mut none, &mut cand).unwrap();
        assert_eq!(
            (r.ratio(), r.describe()),
            (None, "no valid round of 2".into())
        );
    }
}
