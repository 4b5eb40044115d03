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
    /// Rounds left out because the baseline had no valid figure (e.g. raw UDP lost
    /// datagrams, or its run failed).
    pub invalid: usize,
    /// Rounds left out because bulkwire's side had no valid figure: its run failed, or a
    /// fitted parameter came out negative or zero (a time or a rate never is, so such a fit
    /// says nothing).
    pub no_figure: usize,
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
    /// are finite and positive (every figure a target compares is a time or a rate), and
    /// is left out otherwise, counted against the side that failed (the baseline first).
    pub fn collect(figures: impl IntoIterator<Item = (Option<f64>, Option<f64>)>) -> Rounds {
        let valid = |x: Option<f64>| x.filter(|x| x.is_finite() && *x > 0.0);
        let mut r = Rounds::default();
        for (b, c) in figures {
            match (valid(b), valid(c)) {
                (Some(b), Some(c)) => {
                    r.base.push(b);
                    r.cand.push(c);
                }
                (None, _) => r.invalid += 1,
                (Some(_), None) => r.no_figure += 1,
            }
        }
        r
    }

    /// Why no round is valid, in the words of the targets table: "no baseline" when the
    /// baseline failed in some round, "no fit" when only bulkwire's side did; `None` when
    /// some round is valid.
    pub fn missing(&self) -> Option<&'static str> {
        if !self.base.is_empty() {
            None
        } else if self.invalid > 0 {
            Some("no baseline")
        } else {
            Some("no fit")
        }
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
            let n = self.invalid + self.no_figure;
            return match (self.invalid, self.no_figure) {
                (0, 0) => "no round ran".into(),
                (_, 0) => format!("no valid baseline in {n} rounds"),
                (0, _) => format!("no valid figure of bulkwire's in {n} rounds"),
                (b, c) => format!(
                    "no valid round of {n}: {b} without a valid baseline, {c} without a valid \
                     figure of bulkwire's"
                ),
            };
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
        if self.no_figure > 0 {
            d += &format!(
                "; {} left out, without a valid figure of bulkwire's",
                self.no_figure
            );
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
            (None, None),
        ];
        let r = Rounds::collect(bad);
        assert_eq!(
            (r.ratio(), r.describe(), r.missing()),
            (
                None,
                "no valid baseline in 3 rounds".into(),
                Some("no baseline")
            )
        );
        let r = Rounds::collect([(Some(1.0), None), (None, Some(1.0))]);
        assert_eq!(
            (r.describe(), r.missing()),
            (
                "no valid round of 2: 1 without a valid baseline, 1 without a valid figure \
                 of bulkwire's"
                    .into(),
                Some("no baseline")
            )
        );
    }

    #[test]
    fn a_negative_or_zero_figure_of_bulkwires_is_no_fit() {
        // A fitted g of -1.9 ns must never make a ratio, let alone meet a target.
        let r = Rounds::collect([(Some(250e-9), Some(-1.9e-9)), (Some(250e-9), Some(0.0))]);
        assert_eq!((r.ratio(), r.no_figure, r.invalid), (None, 2, 0));
        assert_eq!(r.missing(), Some("no fit"));
        let mixed = Rounds::collect([(Some(1.0), Some(-1.0)), (Some(1.0), Some(2.0))]);
        assert_eq!(mixed.ratio(), Some(2.0));
        assert!(
            mixed
                .describe()
                .ends_with("1 left out, without a valid figure of bulkwire's")
        );
    }
}
