//! Settings of the BSP layer from the environment.

use crate::BspError;

/// Order in which a process sends to its destinations in a superstep.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Schedule {
    /// Step t sends to `(pid + t) mod p`: at every step each destination has exactly
    /// one sender (a latin square), so no receiver is flooded by all at once.
    Latin,
    /// Everyone sends to 0, then 1, ... (the naive order, for comparison).
    Pid,
    /// Each process in its own random order, drawn afresh every superstep from its pid
    /// and the superstep (the seed's other way of spreading the load).
    Random,
}

/// How the BSP layer runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// `BULKWIRE_BSP_SCHEDULE=latin|pid`, default latin.
    pub schedule: Schedule,
    /// `BULKWIRE_BSP_RATE`: cap on the bytes per second this process hands to the
    /// transport in a superstep (suffixes K, M, G: powers of 1000). None: no cap.
    pub rate: Option<u64>,
    /// `BULKWIRE_BSP_CHUNK`: most bytes per transport message of a superstep's data for
    /// one destination (suffixes K, M, G: powers of 1024). Default: one message per
    /// destination without a rate cap, 64 KiB with one, so the cap has something to pace.
    pub chunk: Option<usize>,
    /// `BULKWIRE_STATS=1`: `bsp_end` prints packet statistics (seed 003's Table 5).
    pub stats: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            schedule: Schedule::Latin,
            rate: None,
            chunk: None,
            stats: false,
        }
    }
}

fn number(var: &str, v: &str, unit: u64) -> Result<u64, BspError> {
    let v = v.trim();
    let (digits, mult) = match v.chars().last() {
        Some('k' | 'K') => (&v[..v.len() - 1], unit),
        Some('m' | 'M') => (&v[..v.len() - 1], unit * unit),
        Some('g' | 'G') => (&v[..v.len() - 1], unit * unit * unit),
        _ => (v, 1),
    };
    digits
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(mult))
        .filter(|&n| n > 0)
        .ok_or_else(|| {
            BspError::Config(format!(
                "{var}={v:?}: expected a positive number, optionally with K, M or G"
            ))
        })
}

impl Config {
    pub fn from_env() -> Result<Config, BspError> {
        Config::from_lookup(|k| std::env::var(k).ok())
    }

    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Config, BspError> {
        let schedule = match get("BULKWIRE_BSP_SCHEDULE").as_deref().map(str::trim) {
            None | Some("") | Some("latin") => Schedule::Latin,
            Some("pid") => Schedule::Pid,
            Some(o) => {
                return Err(BspError::Config(format!(
                    "BULKWIRE_BSP_SCHEDULE={o:?}: expected latin or pid"
                )));
            }
        };
        let rate = get("BULKWIRE_BSP_RATE")
            .filter(|v| !v.trim().is_empty())
            .map(|v| number("BULKWIRE_BSP_RATE", &v, 1000))
            .transpose()?;
        let chunk = match get("BULKWIRE_BSP_CHUNK").filter(|v| !v.trim().is_empty()) {
            Some(v) => Some(number("BULKWIRE_BSP_CHUNK", &v, 1024)? as usize),
            None => rate.map(|_| 64 << 10),
        };
        let stats = matches!(
            get("BULKWIRE_STATS").as_deref().map(str::trim),
            Some("1" | "yes" | "true" | "on")
        );
        Ok(Config {
            schedule,
            rate,
            chunk,
            stats,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(vars: &[(&str, &str)]) -> Result<Config, BspError> {
        Config::from_lookup(|k| {
            vars.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        })
    }

    #[test]
    fn defaults_and_overrides() {
        assert_eq!(cfg(&[]).unwrap(), Config::default());
        let c = cfg(&[
            ("BULKWIRE_BSP_SCHEDULE", "pid"),
            ("BULKWIRE_BSP_RATE", "500M"),
            ("BULKWIRE_STATS", "1"),
        ])
        .unwrap();
        assert_eq!(c.schedule, Schedule::Pid);
        assert_eq!(c.rate, Some(500_000_000));
        assert_eq!(c.chunk, Some(65536));
        assert!(c.stats);
        assert_eq!(
            cfg(&[("BULKWIRE_BSP_CHUNK", "1M")]).unwrap().chunk,
            Some(1 << 20)
        );
        for bad in [
            ("BULKWIRE_BSP_SCHEDULE", "random"),
            ("BULKWIRE_BSP_RATE", "fast"),
            ("BULKWIRE_BSP_CHUNK", "0"),
        ] {
            let e = cfg(&[bad]).unwrap_err().to_string();
            assert!(e.contains(bad.0), "{e}");
        }
    }
}
