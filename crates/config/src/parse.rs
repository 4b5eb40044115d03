//! The one set of parsers every variable goes through, and the lookup that records which
//! variables were read. A parser returns `None` for a value it does not accept; the lookup
//! turns that into a [`ConfigError`] naming the variable, the value and, from the table,
//! what is accepted.

use std::cell::RefCell;
use std::collections::BTreeSet;

use crate::ConfigError;
use crate::vars::Var;

/// A variable's value by name.
type Get<'a> = Box<dyn Fn(&str) -> Option<String> + 'a>;

/// Where values come from: the process environment at the edge, a map in tests.
pub struct Lookup<'a> {
    get: Get<'a>,
    read: RefCell<BTreeSet<&'static str>>,
}

impl<'a> Lookup<'a> {
    pub fn new(get: impl Fn(&str) -> Option<String> + 'a) -> Lookup<'a> {
        Lookup {
            get: Box::new(get),
            read: RefCell::new(BTreeSet::new()),
        }
    }

    /// The value of `var`, trimmed; `None` when unset or blank (blank counts as unset, as
    /// `VAR= program` is how a shell unsets a variable for one command).
    pub fn raw(&self, var: &Var) -> Option<String> {
        self.read.borrow_mut().insert(var.name);
        (self.get)(var.name)
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
    }

    /// Any other variable (another launcher's), trimmed, blank as unset.
    pub fn foreign(&self, name: &str) -> Option<String> {
        (self.get)(name)
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
    }

    /// `var` parsed by `parse`; `Ok(None)` when unset.
    pub fn get<T>(
        &self,
        var: &'static Var,
        parse: impl FnOnce(&str) -> Option<T>,
    ) -> Result<Option<T>, ConfigError> {
        match self.raw(var) {
            None => Ok(None),
            Some(v) => parse(&v).map(Some).ok_or_else(|| bad(var, &v)),
        }
    }

    /// The variables looked up so far.
    pub fn read(&self) -> BTreeSet<&'static str> {
        self.read.borrow().clone()
    }
}

/// The error for `value` of `var`.
pub fn bad(var: &'static Var, value: &str) -> ConfigError {
    ConfigError::Bad {
        var: var.name,
        value: value.to_string(),
        accepted: var.accepted,
    }
}

/// `on`/`off`, `1`/`0`, `true`/`false`, `yes`/`no`, in any case.
pub fn flag(v: &str) -> Option<bool> {
    match v.to_ascii_lowercase().as_str() {
        "1" | "on" | "true" | "yes" => Some(true),
        "0" | "off" | "false" | "no" => Some(false),
        _ => None,
    }
}

/// A decimal integer in `lo..=hi`.
pub fn int(v: &str, lo: u64, hi: u64) -> Option<u64> {
    // `parse` alone would take a leading `+`; a setting is digits.
    if !v.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    v.parse::<u64>().ok().filter(|n| (lo..=hi).contains(n))
}

/// Bytes with an optional suffix K, M or G (powers of `unit`, in any case), in `lo..=hi`.
fn scaled(v: &str, unit: u64, lo: u64, hi: u64) -> Option<u64> {
    let (digits, mul) = match v.as_bytes().last()?.to_ascii_lowercase() {
        b'k' => (&v[..v.len() - 1], unit),
        b'm' => (&v[..v.len() - 1], unit * unit),
        b'g' => (&v[..v.len() - 1], unit * unit * unit),
        _ => (v, 1),
    };
    int(digits.trim_end(), 0, u64::MAX)?
        .checked_mul(mul)
        .filter(|n| (lo..=hi).contains(n))
}

/// A size in bytes: K, M, G are powers of 1024.
pub fn size(v: &str, lo: u64, hi: u64) -> Option<u64> {
    scaled(v, 1024, lo, hi)
}

/// A rate or count: K, M, G are powers of 1000.
pub fn decimal(v: &str, lo: u64, hi: u64) -> Option<u64> {
    scaled(v, 1000, lo, hi)
}

/// One of `words`, exactly.
pub fn word<T: Copy>(v: &str, words: &[(&str, T)]) -> Option<T> {
    words.iter().find(|(w, _)| *w == v).map(|&(_, t)| t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags() {
        for on in ["1", "on", "ON", "true", "Yes"] {
            assert_eq!(flag(on), Some(true), "{on}");
        }
        for off in ["0", "off", "False", "no"] {
            assert_eq!(flag(off), Some(false), "{off}");
        }
        for bad in ["", "2", "maybe", "enable"] {
            assert_eq!(flag(bad), None, "{bad}");
        }
    }

    #[test]
    fn integers_refuse_signs_garbage_and_overflow() {
        assert_eq!(int("42", 0, 100), Some(42));
        assert_eq!(int("0", 1, 100), None);
        for bad in ["-5", "+5", "x", "4.5", "", "99999999999999999999999"] {
            assert_eq!(int(bad, 0, u64::MAX), None, "{bad}");
        }
    }

    #[test]
    fn sizes_and_rates() {
        assert_eq!(size("64k", 0, u64::MAX), Some(65536));
        assert_eq!(size("1M", 0, u64::MAX), Some(1 << 20));
        assert_eq!(size("2 G", 0, u64::MAX), Some(2 << 30));
        assert_eq!(size("4096", 0, u64::MAX), Some(4096));
        assert_eq!(decimal("500M", 0, u64::MAX), Some(500_000_000));
        assert_eq!(size("1G", 0, 1 << 29), None);
        assert_eq!(size("17179869184G", 0, u64::MAX), None);
        for bad in ["k", "1.5M", "-1k", "1T", "1KiB"] {
            assert_eq!(size(bad, 0, u64::MAX), None, "{bad}");
        }
    }

    #[test]
    fn lookups_record_and_name_what_is_accepted() {
        let l = Lookup::new(|k| (k == "BULKWIRE_SPIN_US").then(|| " -5 ".to_string()));
        let e = l
            .get(&crate::vars::SPIN_US, |v| int(v, 0, 10))
            .unwrap_err()
            .to_string();
        assert!(e.contains("BULKWIRE_SPIN_US=\"-5\""), "{e}");
        assert!(e.contains(crate::vars::SPIN_US.accepted), "{e}");
        assert_eq!(l.get(&crate::vars::MTU, |v| int(v, 0, 9)), Ok(None));
        assert_eq!(
            l.read().into_iter().collect::<Vec<_>>(),
            ["BULKWIRE_MTU", "BULKWIRE_SPIN_US"]
        );
    }
}
