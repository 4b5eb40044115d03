//! Target checks measured in alternating rounds.
//!
//! On a shared machine a figure drifts by 10-30 % within a minute, so the ratio of two
//! runs taken a minute apart (as in the report's tables, which run one stack after the
//! other) measures the drift as much as the stacks. For the figures that decide a target,
//! the baseline and the candidate therefore run back to back, several times, in ABBA
//! order (baseline first in even rounds, candidate first in odd ones, so neither always
//! runs on a warmer or a quieter machine). Each round gives one ratio; the verdict takes
//! their median, and the report prints their range beside it. A plan's alternating runs
//! ([`crate::plan::Work::Rounds`]) follow [`order`]; [`Rounds`] holds their figures.

use crate::stats::Summary;

/// The figures of both sides, round by round.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct Rounds {
    pub base: Vec<f64>,
    pub cand: Vec<f64>,
    /// Rounds left out because a side had no valid figure (e.g. raw UDP lost datagrams).
    pub invalid: usize,
}

/// A side of an alternating check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    Base,
    Cand,
}

/// Which side runs first in round `i` (from 0): the baseline in even rounds (ABBA order).
pub fn order(i: usize) -> [Side; 2] {
    if i.is_multiple_of(2) {
        [Side::Base, Side::Cand]
    } else {
        [Side::Cand, Side::Base]
    }
}

impl Rounds {
    /// The rounds of each round's (baseline, candidate) figures: a round counts when both
    /// are finite and the baseline positive, and is left out otherwise.
    pub fn collect(figures: impl IntoIterator<Item = (Option<f64>, Option<f64>)>) -> Rounds {
        let mut r = Rounds::default();
        for (b, c) in figures {
            match (b, c) {
                (Some(b), Some(c)) if b > 0.0 && b.is_finite() && c.is_finite() => {
                    r.base.push(b);
                    r.cand.push(c);
                }
                _ => r.invalid += 1,
            }
        }
        r
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
        let order: String = (0..4)
            .flat_map(order)
            .map(|s| if s == Side::Base { 'b' } else { 'c' })
            .collect();
        assert_eq!(order, "bccbbccb");
        let r = Rounds::collect((1..=4).map(|k| (Some(2.0), Some(k as f64))));
        assert_eq!(r.ratios(), vec![0.5, 1.0, 1.5, 2.0]);
        assert_eq!(r.ratio(), Some(1.25));
        assert!(
            r.describe()
                .starts_with("median of 4 alternating rounds, 0.50-2.00x")
        );
        assert_eq!(r.medians(), Some((2.0, 2.5)));
    }

    #[test]
    fn rounds_without_a_valid_baseline_are_left_out() {
        let r = Rounds::collect([
            (Some(1.0), Some(3.0)),
            (None, Some(3.0)),
            (Some(1.0), Some(3.0)),
        ]);
        assert_eq!((r.ratios(), r.invalid), (vec![3.0, 3.0], 1));
        assert!(
            r.describe()
                .ends_with("1 left out, without a valid baseline")
        );
        let bad = [
            (Some(0.0), Some(1.0)),
            (Some(f64::NAN), Some(1.0)),
            (Some(1.0), None),
        ];
        let r = Rounds::collect(bad);
        assert_eq!(
            (r.ratio(), r.describe()),
            (None, "no valid round of 3".into())
        );
    }
}
