//! `bwbench profile FILE`: a BSP cost profile (`BULKWIRE_PROFILE`, see
//! [`bulkwire_bsp::profile`]) as tables, an SVG timeline of the supersteps, and the BSP
//! cost `W + H g + S l` beside the measured time.
//!
//! Per superstep i: w_i is the longest computation of any process, h_i the most words
//! (8 bytes, as bspbench's g is per word) any process sent or received, and the
//! superstep's time the longest a process spent in it. W, H and S sum them over the
//! supersteps; g and l come from a `bwbench bsp` run (its `results.json`) or are given.

use std::path::Path;

use bulkwire_bsp::profile::{Profile, Record};

use crate::section::{Table, time_label};

/// The BSP parameters the cost is computed with, microseconds.
#[derive(Clone, Debug, PartialEq)]
pub struct Params {
    /// Time per 8-byte word of an h-relation.
    pub g_us: f64,
    /// Fixed cost of a superstep.
    pub l_us: f64,
    /// Where they come from ("given", "bwbench bsp: holefill/udp p=2").
    pub source: String,
}

/// One superstep over all processes.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Step {
    pub index: usize,
    /// Longest computation of a process, seconds.
    pub w: f64,
    /// Time in bsp_sync: longest and mean over processes, seconds.
    pub sync_max: f64,
    pub sync_mean: f64,
    /// The superstep's time: the longest a process spent in it (computing and in sync).
    pub span: f64,
    /// Most bytes a process sent or received.
    pub h_bytes: u64,
    pub bytes_out: u64,
    pub messages: u64,
    /// Every process's records of the superstep, added up.
    pub sum: Record,
}

impl Step {
    /// h in 8-byte words.
    pub fn h_words(&self) -> u64 {
        self.h_bytes.div_ceil(8)
    }
}

/// A whole run's profile, by superstep.
#[derive(Clone, Debug, PartialEq)]
pub struct Analysis {
    pub p: u32,
    pub protocol: String,
    pub steps: Vec<Step>,
    /// Each process's time from bsp_begin to the end of its last superstep, seconds.
    pub proc_time: Vec<f64>,
    /// Each process's records added up.
    pub per_proc: Vec<Record>,
}

fn add(a: &mut Record, r: &Record) {
    a.compute_ns += r.compute_ns;
    a.sync_ns += r.sync_ns;
    a.bytes_out += r.bytes_out;
    a.bytes_in += r.bytes_in;
    a.bytes_local += r.bytes_local;
    a.messages_out += r.messages_out;
    a.messages_in += r.messages_in;
    a.data_sent += r.data_sent;
    a.data_received += r.data_received;
    a.acks_sent += r.acks_sent;
    a.implicit_acks += r.implicit_acks;
    a.piggybacked_acks += r.piggybacked_acks;
    a.retransmits += r.retransmits;
    a.duplicates += r.duplicates;
    a.drops += r.drops;
    a.control_sent += r.control_sent;
}

const NS: f64 = 1e-9;

/// Reads the profile named `base` (`base.0`, `base.1`, ...) and analyses it.
pub fn load(base: &Path) -> Result<Analysis, String> {
    analyse(&bulkwire_bsp::profile::read_set(base)?)
}

/// The profile of a run, by superstep. Every process must have recorded the same number
/// of supersteps (they do: every one is a barrier).
pub fn analyse(procs: &[Profile]) -> Result<Analysis, String> {
    let first = procs.first().ok_or("no process in the profile")?;
    let n = first.records.len();
    if let Some(q) = procs.iter().find(|q| q.records.len() != n) {
        return Err(format!(
            "pid {} recorded {} supersteps, pid {} recorded {n}",
            q.pid,
            q.records.len(),
            first.pid
        ));
    }
    let steps = (0..n).map(|i| step(procs, i)).collect();
    let proc_time = procs
        .iter()
        .map(|q| {
            q.records
                .last()
                .map_or(0.0, |r| (r.start_ns + r.compute_ns + r.sync_ns) as f64 * NS)
        })
        .collect();
    let per_proc = procs
        .iter()
        .map(|q| {
            let mut t = Record::default();
            for r in &q.records {
                add(&mut t, r);
            }
            t
        })
        .collect();
    Ok(Analysis {
        p: first.p,
        protocol: first.protocol.clone(),
        steps,
        proc_time,
        per_proc,
    })
}

fn step(procs: &[Profile], i: usize) -> Step {
    let mut s = Step {
        index: i,
        ..Step::default()
    };
    for q in procs {
        let r = &q.records[i];
        s.w = s.w.max(r.compute_ns as f64 * NS);
        s.sync_max = s.sync_max.max(r.sync_ns as f64 * NS);
        s.sync_mean += r.sync_ns as f64 * NS / procs.len() as f64;
        s.span = s.span.max((r.compute_ns + r.sync_ns) as f64 * NS);
        s.h_bytes = s.h_bytes.max(r.bytes_out.max(r.bytes_in));
        s.bytes_out += r.bytes_out;
        s.messages += r.messages_out;
        add(&mut s.sum, r);
    }
    s
}

/// The BSP cost of a run: its W, H and S, and with g and l the predicted time.
#[derive(Clone, Debug, PartialEq)]
pub struct Cost {
    /// Seconds of computation (the longest process's, superstep by superstep).
    pub w: f64,
    /// Words of the h-relations, added over the supersteps.
    pub h: u64,
    pub s: usize,
    /// `W + H g + S l`, seconds, when g and l are known.
    pub predicted: Option<f64>,
    /// The longest process's time from bsp_begin to its last superstep's end, seconds.
    pub measured: f64,
}

impl Analysis {
    pub fn cost(&self, params: Option<&Params>) -> Cost {
        let w = self.steps.iter().map(|s| s.w).sum();
        let h = self.steps.iter().map(Step::h_words).sum();
        let s = self.steps.len();
        Cost {
            w,
            h,
            s,
            predicted: params.map(|p| w + (h as f64 * p.g_us + s as f64 * p.l_us) * 1e-6),
            measured: self.proc_time.iter().copied().fold(0.0, f64::max),
        }
    }

    /// Every process's records added up.
    pub fn total(&self) -> Record {
        let mut t = Record::default();
        for r in &self.per_proc {
            add(&mut t, r);
        }
        t
    }

    /// Mean over processes of the time in bsp_sync, seconds.
    pub fn sync_mean(&self) -> f64 {
        self.steps.iter().map(|s| s.sync_mean).sum()
    }
}

/// Supersteps grouped by h: `[0]`, then powers of two of bytes.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HClass {
    /// Smallest h (bytes) of the class; 0 is a class of its own.
    pub from: u64,
    pub steps: usize,
    pub w: f64,
    pub sync_mean: f64,
    pub h_words: u64,
    pub data_packets: u64,
}

impl HClass {
    /// "0", "16-31 B", "1-2 KiB", "64-128 KiB".
    pub fn label(&self) -> String {
        if self.from == 0 {
            return "0".into();
        }
        let (a, b) = (self.from, self.from * 2);
        let unit = |x: u64| match x {
            x if x >= 1 << 20 => (x >> 20, "MiB"),
            x if x >= 1 << 10 => (x >> 10, "KiB"),
            x => (x, "B"),
        };
        let ((ua, sa), (ub, sb)) = (unit(a), unit(b));
        if sa == sb && sa == "B" {
            format!("{ua}-{} B", ub - 1)
        } else if sa == sb {
            format!("{ua}-{ub} {sa}")
        } else {
            format!("{ua} {sa}-{ub} {sb}")
        }
    }
}

impl Analysis {
    /// The supersteps by h class, costliest (mean time in sync) first.
    pub fn by_h(&self) -> Vec<HClass> {
        let mut classes: Vec<HClass> = Vec::new();
        for s in &self.steps {
            let from = if s.h_bytes == 0 {
                0
            } else {
                1 << (63 - s.h_bytes.leading_zeros())
            };
            let i = match classes.iter().position(|c| c.from == from) {
                Some(i) => i,
                None => {
                    classes.push(HClass {
                        from,
                        ..HClass::default()
                    });
                    classes.len() - 1
                }
            };
            let c = &mut classes[i];
            c.steps += 1;
            c.w += s.w;
            c.sync_mean += s.sync_mean;
            c.h_words += s.h_words();
            c.data_packets += s.sum.data_sent;
        }
        classes.sort_by(|a, b| b.sync_mean.total_cmp(&a.sync_mean));
        classes
    }
}

fn us(x: f64) -> String {
    format!("{:.1}", x * 1e6)
}

fn pct(x: f64, of: f64) -> String {
    if of > 0.0 {
        format!("{:.0}%", 100.0 * x / of)
    } else {
        "-".into()
    }
}

/// The cost table: W, H, S, the predicted time beside the measured one.
pub fn cost_table(a: &Analysis, params: Option<&Params>) -> Table {
    let c = a.cost(params);
    let mut t = Table::new(
        "BSP cost W + H g + S l against the measured time",
        &["term", "value", "seconds"],
        match params {
            Some(p) => format!(
                "g = {:.4} us per 8-byte word, l = {:.2} us ({}). W: the longest computation \
                 of a process in each superstep, added up; H: the most words a process sent \
                 or received in each superstep, added up; S: supersteps, bsp_begin's and \
                 bsp_end's included. Measured: the longest process, bsp_begin to its last \
                 superstep's end.",
                p.g_us, p.l_us, p.source
            ),
            None => "No g and l given (--g and --l, or --bsp-results with a bwbench bsp \
                     report): W, H and S only."
                .into(),
        },
    );
    t.rows
        .push(vec!["W".into(), time_label(c.w), format!("{:.6}", c.w)]);
    t.rows.push(vec![
        "H (words)".into(),
        c.h.to_string(),
        params.map_or("-".into(), |p| format!("{:.6}", c.h as f64 * p.g_us * 1e-6)),
    ]);
    t.rows.push(vec![
        "S".into(),
        c.s.to_string(),
        params.map_or("-".into(), |p| format!("{:.6}", c.s as f64 * p.l_us * 1e-6)),
    ]);
    if let Some(pred) = c.predicted {
        t.rows.push(vec![
            "W + H g + S l".into(),
            time_label(pred),
            format!("{pred:.6}"),
        ]);
    }
    t.rows.push(vec![
        "measured".into(),
        match c.predicted {
            Some(pred) if pred > 0.0 => format!("{:.2}x the cost", c.measured / pred),
            _ => time_label(c.measured),
        },
        format!("{:.6}", c.measured),
    ]);
    t
}

/// Where the time in bsp_sync went, by the supersteps' h.
pub fn h_table(a: &Analysis, params: Option<&Params>) -> Table {
    let total = a.sync_mean();
    let mut t = Table::new(
        "Supersteps by h: where the time in bsp_sync went",
        &[
            "h (bytes)",
            "supersteps",
            "computation (s)",
            "in sync (s)",
            "share of sync",
            "per superstep (us)",
            "h g + l per superstep (us)",
            "data packets",
        ],
        "h: the most bytes a process sent or received in the superstep. Computation: the \
         longest process's; in sync: the mean over processes (waiting for the others \
         counts). Costliest first.",
    );
    for c in a.by_h() {
        let per = c.sync_mean / c.steps as f64;
        let model = params.map_or("-".into(), |p| {
            format!("{:.1}", c.h_words as f64 / c.steps as f64 * p.g_us + p.l_us)
        });
        t.rows.push(vec![
            c.label(),
            c.steps.to_string(),
            format!("{:.4}", c.w),
            format!("{:.4}", c.sync_mean),
            pct(c.sync_mean, total),
            us(per),
            model,
            c.data_packets.to_string(),
        ]);
    }
    t
}

/// The `n` supersteps with the most time in sync.
pub fn top_table(a: &Analysis, n: usize) -> Table {
    let mut t = Table::new(
        format!("The {n} supersteps with the most time in bsp_sync"),
        &[
            "superstep",
            "computation (us)",
            "in sync, mean (us)",
            "in sync, max (us)",
            "h (bytes)",
            "messages",
            "data packets",
            "explicit acks",
            "retransmitted",
        ],
        "Superstep 0 runs from bsp_begin to the first bsp_sync; the last ends in bsp_end.",
    );
    let mut v: Vec<&Step> = a.steps.iter().collect();
    v.sort_by(|x, y| y.sync_mean.total_cmp(&x.sync_mean));
    for s in v.into_iter().take(n) {
        t.rows.push(vec![
            s.index.to_string(),
            us(s.w),
            us(s.sync_mean),
            us(s.sync_max),
            s.h_bytes.to_string(),
            s.messages.to_string(),
            s.sum.data_sent.to_string(),
            s.sum.acks_sent.to_string(),
            s.sum.retransmits.to_string(),
        ]);
    }
    t
}

/// Every superstep, in order.
pub fn steps_table(a: &Analysis) -> Table {
    let mut t = Table::new(
        "Every superstep",
        &[
            "superstep",
            "computation (us)",
            "in sync, mean (us)",
            "h (bytes)",
            "messages",
            "data packets",
        ],
        "",
    );
    for s in &a.steps {
        t.rows.push(vec![
            s.index.to_string(),
            us(s.w),
            us(s.sync_mean),
            s.h_bytes.to_string(),
            s.messages.to_string(),
            s.sum.data_sent.to_string(),
        ]);
    }
    t
}

/// The packet statistics per process, in the layout of the BSPlib paper's Table 5.
pub fn packets_table(a: &Analysis) -> Table {
    let mut t = Table::new(
        format!(
            "Packets per process ({}, p = {}): the BSPlib paper's Table 5",
            a.protocol, a.p
        ),
        &[
            "pid",
            "computation (s)",
            "in sync (s)",
            "bytes out",
            "bytes in",
            "received",
            "explicit acks",
            "drops",
            "duplicates",
            "implicit acks",
            "sent",
            "retransmitted",
        ],
        "Received and sent: the protocol's data packets (kernel TCP: segments). Explicit \
         acknowledgements as a share of the packets received, implicit ones (freed by the \
         superstep colour) of those sent.",
    );
    let rows = a
        .per_proc
        .iter()
        .enumerate()
        .map(|(i, r)| (i.to_string(), *r))
        .chain([("total".to_string(), a.total())]);
    for (name, r) in rows {
        t.rows.push(vec![
            name,
            format!("{:.4}", r.compute_ns as f64 * NS),
            format!("{:.4}", r.sync_ns as f64 * NS),
            r.bytes_out.to_string(),
            r.bytes_in.to_string(),
            r.data_received.to_string(),
            pct(r.acks_sent as f64, r.data_received as f64),
            r.drops.to_string(),
            r.duplicates.to_string(),
            pct(r.implicit_acks as f64, r.data_sent as f64),
            r.data_sent.to_string(),
            r.retransmits.to_string(),
        ]);
    }
    t
}

/// The parameters of a `bwbench bsp` report (`results.json`) for `p` processes: the stack
/// labelled `stack`, or the first whose label starts with `protocol/`.
pub fn params_from_report(
    json: &[u8],
    p: u32,
    protocol: &str,
    stack: Option<&str>,
) -> Result<Params, String> {
    let v: serde_json::Value =
        serde_json::from_slice(json).map_err(|e| format!("not a bwbench report: {e}"))?;
    let fits = v["sections"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|s| s["bsp"].as_array().into_iter().flatten());
    let mut seen = Vec::new();
    for f in fits {
        let (Some(label), r) = (f[0].as_str(), &f[1]) else {
            continue;
        };
        let n = r["nprocs"].as_u64().unwrap_or(0);
        seen.push(format!("{label} p={n}"));
        let fits_stack = match stack {
            Some(s) => label == s,
            None => label.starts_with(&format!("{protocol}/")),
        };
        if fits_stack && n == u64::from(p) {
            let (Some(g), Some(l)) = (r["g_us"].as_f64(), r["l_us"].as_f64()) else {
                continue;
            };
            return Ok(Params {
                g_us: g,
                l_us: l,
                source: format!("bwbench bsp: {label} p={p}"),
            });
        }
    }
    let want = stack.map_or(format!("{protocol}/..."), str::to_string);
    Err(format!(
        "the report has no BSP fit of {want} at p = {p} (it has: {})",
        if seen.is_empty() {
            "none".into()
        } else {
            seen.join(", ")
        }
    ))
}

/// The whole write-up of a profile: cost, supersteps by h, the costliest supersteps and
/// the packets per process (and every superstep with `all`).
pub fn tables(a: &Analysis, params: Option<&Params>, top: usize, all: bool) -> Vec<Table> {
    let mut v = vec![
        cost_table(a, params),
        h_table(a, params),
        top_table(a, top),
        packets_table(a),
    ];
    if all {
        v.push(steps_table(a));
    }
    v
}

/// What `bwbench profile` prints and draws for the profile named `base`.
pub struct WriteUp {
    /// The tables, as Markdown.
    pub markdown: String,
    pub svg: String,
}

/// Where `bwbench profile` takes g and l from.
pub enum ParamSource<'a> {
    None,
    Given {
        g_us: f64,
        l_us: f64,
    },
    /// A `bwbench bsp` report's `results.json`, and the stack label to pick (else the
    /// profile's protocol decides).
    Report {
        path: &'a Path,
        stack: Option<&'a str>,
    },
}

/// Reads the profile named `base` and writes it up: the tables (every superstep too with
/// `all`) and the timeline, marking the `top` supersteps with the most time in sync.
pub fn write_up(
    base: &Path,
    source: ParamSource<'_>,
    top: usize,
    all: bool,
) -> Result<WriteUp, String> {
    let procs = bulkwire_bsp::profile::read_set(base)?;
    let a = analyse(&procs)?;
    let params = match source {
        ParamSource::None => None,
        ParamSource::Given { g_us, l_us } => Some(Params {
            g_us,
            l_us,
            source: "given".into(),
        }),
        ParamSource::Report { path, stack } => {
            let json = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
            let p = params_from_report(&json, a.p, &a.protocol, stack)
                .map_err(|e| format!("{}: {e}", path.display()))?;
            Some(p)
        }
    };
    let title = format!(
        "{}: {} supersteps of {} processes over {}",
        base.display(),
        a.steps.len(),
        a.p,
        a.protocol
    );
    let mut markdown = format!("# BSP cost profile of {title}\n\n");
    for t in tables(&a, params.as_ref(), top, all) {
        markdown += &t.markdown();
        markdown += "\n";
    }
    let mut by_sync: Vec<&Step> = a.steps.iter().collect();
    by_sync.sort_by(|x, y| y.sync_mean.total_cmp(&x.sync_mean));
    let marks: Vec<usize> = by_sync.iter().take(top.min(5)).map(|s| s.index).collect();
    let svg = crate::timeline::svg(&procs, &title, &marks);
    Ok(WriteUp { markdown, svg })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(step: u64, compute_us: u64, sync_us: u64, out: u64, inn: u64) -> Record {
        Record {
            step,
            compute_ns: compute_us * 1000,
            sync_ns: sync_us * 1000,
            bytes_out: out,
            bytes_in: inn,
            messages_out: u64::from(out > 0),
            data_sent: out.div_ceil(1000),
            ..Record::default()
        }
    }

    /// Two processes, three supersteps; records laid end to end.
    fn run() -> Vec<Profile> {
        let mut procs = Vec::new();
        let steps = [
            [rec(0, 100, 10, 0, 0), rec(0, 80, 30, 0, 0)],
            [rec(1, 50, 200, 4000, 16), rec(1, 60, 190, 16, 4000)],
            [rec(2, 10, 20, 16, 16), rec(2, 5, 25, 16, 16)],
        ];
        for pid in 0..2 {
            let mut at = 0;
            let records = steps
                .iter()
                .map(|s| {
                    let mut r = s[pid];
                    r.start_ns = at;
                    at += r.compute_ns + r.sync_ns;
                    r
                })
                .collect();
            procs.push(Profile {
                pid: pid as u32,
                p: 2,
                epoch_ns: 0,
                protocol: "holefill".into(),
                records,
            });
        }
        procs
    }

    #[test]
    fn the_cost_adds_the_slowest_process_of_each_superstep() {
        let a = analyse(&run()).unwrap();
        let c = a.cost(Some(&Params {
            g_us: 0.5,
            l_us: 10.0,
            source: "given".into(),
        }));
        // W = 100 + 60 + 10 us; H = 0 + 500 + 2 words; S = 3.
        assert!((c.w - 170e-6).abs() < 1e-12, "{c:?}");
        assert_eq!((c.h, c.s), (502, 3));
        let want = 170e-6 + 502.0 * 0.5e-6 + 3.0 * 10e-6;
        assert!((c.predicted.unwrap() - want).abs() < 1e-12);
        // Both processes took 110 + 250 + 30 us.
        assert!((c.measured - 390e-6).abs() < 1e-12);
        assert_eq!(a.steps[1].h_bytes, 4000);
        assert!((a.steps[1].sync_mean - 195e-6).abs() < 1e-12);
    }

    #[test]
    fn supersteps_group_by_h() {
        let a = analyse(&run()).unwrap();
        let by = a.by_h();
        let labels: Vec<String> = by.iter().map(HClass::label).collect();
        // Costliest first: the 4000-byte superstep, then the 16-byte one, then the empty.
        assert_eq!(labels, ["2-4 KiB", "16-31 B", "0"]);
        assert_eq!(by[0].steps, 1);
        let t = h_table(&a, None);
        // 195 of 237.5 us.
        assert_eq!(t.rows[0][4], "82%");
        assert!(t.rows.iter().all(|r| r.len() == t.header.len()));
    }

    #[test]
    fn uneven_profiles_are_refused() {
        let mut procs = run();
        procs[1].records.pop();
        assert!(analyse(&procs).unwrap_err().contains("pid 1 recorded 2"));
        assert!(analyse(&[]).is_err());
    }

    #[test]
    fn parameters_come_from_a_bsp_report() {
        let json = br#"{"sections":[{"name":"bsp","bsp":[
            ["utopia/shm",{"nprocs":2,"g_us":0.01,"l_us":3.0}],
            ["holefill/udp",{"nprocs":2,"g_us":0.02,"l_us":9.5}],
            ["holefill/udp",{"nprocs":4,"g_us":0.03,"l_us":20.0}]]}]}"#;
        let p = params_from_report(json, 4, "holefill", None).unwrap();
        assert_eq!((p.g_us, p.l_us), (0.03, 20.0));
        let p = params_from_report(json, 2, "x", Some("utopia/shm")).unwrap();
        assert_eq!(p.l_us, 3.0);
        let e = params_from_report(json, 8, "holefill", None).unwrap_err();
        assert!(
            e.contains("holefill/... at p = 8") && e.contains("utopia/shm p=2"),
            "{e}"
        );
        assert!(params_from_report(b"{", 2, "x", None).is_err());
    }

    #[test]
    fn tables_have_full_rows() {
        let a = analyse(&run()).unwrap();
        for t in tables(&a, None, 10, true) {
            assert!(!t.rows.is_empty(), "{}", t.title);
            assert!(
                t.rows.iter().all(|r| r.len() == t.header.len()),
                "{}",
                t.title
            );
        }
        let t = packets_table(&a);
        assert_eq!(t.rows.last().unwrap()[0], "total");
    }
}
