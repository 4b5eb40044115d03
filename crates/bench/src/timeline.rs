//! The timeline of a BSP cost profile as SVG: one bar per process across the run, grey
//! where it computes and blue where it is in `bsp_sync`, on the wall clock of the host
//! (every process's records are placed by the time its `bsp_begin` returned).
//!
//! A run has thousands of supersteps and the chart about a thousand pixels, so each pixel
//! column of a process's bar is shaded by the share of its time spent in sync (eight
//! shades from grey to blue), and columns of one shade are drawn as one rectangle: the
//! picture keeps its proportions and the file stays small.

use std::fmt::Write;

use bulkwire_bsp::profile::Profile;

use crate::section::time_label;

const WIDTH: f64 = 1100.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 30.0;
const TOP: f64 = 60.0;
const ROW: f64 = 26.0;
const BAR: f64 = 18.0;
const AXIS: f64 = 45.0;
const COMPUTE: &str = "#cfd8dc";
const SYNC: &str = "#1f77b4";
const MARK: &str = "#d62728";

/// Where each process's supersteps lie, in seconds from the earliest `bsp_begin`:
/// (start, end) of the process, and (start, end) of each of its syncs.
type Lanes = Vec<((f64, f64), Vec<(f64, f64)>)>;

fn lanes(procs: &[Profile]) -> Lanes {
    let t0 = procs.iter().map(|p| p.epoch_ns).min().unwrap_or(0);
    procs
        .iter()
        .map(|p| {
            let off = p.epoch_ns.saturating_sub(t0) as f64 * 1e-9;
            let at = |ns: u64| off + ns as f64 * 1e-9;
            let syncs: Vec<(f64, f64)> = p
                .records
                .iter()
                .map(|r| {
                    let s = r.start_ns + r.compute_ns;
                    (at(s), at(s + r.sync_ns))
                })
                .collect();
            let end = syncs.last().map_or(off, |s| s.1);
            ((off, end), syncs)
        })
        .collect()
}

/// Shades between computing and in sync.
const SHADES: usize = 8;

/// The share of each pixel column `[x0 + i, x0 + i + 1)` covered by `xs` (intervals in
/// pixels, in order), in shades from 0 (none) to [`SHADES`] (all): runs of one shade as
/// (from, to, shade), from `x0` to `x1`.
fn shade_runs(x0: f64, x1: f64, xs: impl Iterator<Item = (f64, f64)>) -> Vec<(f64, f64, usize)> {
    let n = (x1 - x0).ceil().max(1.0) as usize;
    let mut cover = vec![0f64; n];
    for (a, b) in xs {
        let (a, b) = ((a - x0).max(0.0), (b - x0).min(n as f64));
        let mut c = a.floor() as usize;
        while (c as f64) < b && c < n {
            let lo = a.max(c as f64);
            let hi = b.min(c as f64 + 1.0);
            cover[c] += (hi - lo).max(0.0);
            c += 1;
        }
    }
    let mut runs: Vec<(f64, f64, usize)> = Vec::new();
    for (i, c) in cover.iter().enumerate() {
        let shade = (c.min(1.0) * SHADES as f64).round() as usize;
        let (from, to) = (x0 + i as f64, (x0 + i as f64 + 1.0).min(x1));
        match runs.last_mut() {
            Some(r) if r.2 == shade => r.1 = to,
            _ => runs.push((from, to, shade)),
        }
    }
    runs
}

/// The colour `k` shades of [`SHADES`] from computing's grey to sync's blue.
fn colour(k: usize) -> String {
    let (a, b) = ((0xcf, 0xd8, 0xdc), (0x1f, 0x77, 0xb4));
    let mix = |x: i32, y: i32| x + (y - x) * k as i32 / SHADES as i32;
    format!(
        "#{:02x}{:02x}{:02x}",
        mix(a.0, b.0),
        mix(a.1, b.1),
        mix(a.2, b.2)
    )
}

/// A tick step for a span of `span` seconds: 1, 2 or 5 times a power of ten, about eight
/// ticks.
fn tick_step(span: f64) -> f64 {
    let raw = span / 8.0;
    let mag = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|&s| s >= raw)
        .unwrap_or(10.0 * mag)
}

/// The timeline of `procs` as an SVG document; `marks` are supersteps to point out (the
/// costliest), by index.
pub fn svg(procs: &[Profile], title: &str, marks: &[usize]) -> String {
    let lanes = lanes(procs);
    let span = lanes.iter().map(|l| l.0.1).fold(0.0, f64::max).max(1e-9);
    let plot = WIDTH - LEFT - RIGHT;
    let x = |t: f64| LEFT + t / span * plot;
    let height = TOP + ROW * lanes.len() as f64 + AXIS;
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" font-family="sans-serif" font-size="12">"#
    );
    let _ = write!(
        s,
        r#"<rect width="100%" height="100%" fill="white"/><text x="{LEFT}" y="20" font-size="15">{}</text>"#,
        escape(title)
    );
    legend(&mut s);
    for (i, ((a, b), syncs)) in lanes.iter().enumerate() {
        let y = TOP + ROW * i as f64;
        let _ = write!(
            s,
            r#"<text x="{}" y="{}" text-anchor="end">pid {i}</text>"#,
            LEFT - 8.0,
            y + BAR * 0.75,
        );
        let runs = shade_runs(x(*a), x(*b), syncs.iter().map(|&(p, q)| (x(p), x(q))));
        for (p, q, k) in runs {
            let _ = write!(
                s,
                r#"<rect x="{p:.2}" y="{y}" width="{:.2}" height="{BAR}" fill="{}"/>"#,
                (q - p).max(0.5),
                colour(k)
            );
        }
    }
    marks_and_axis(&mut s, &lanes, marks, span, &x);
    s += "</svg>\n";
    s
}

fn legend(s: &mut String) {
    let y = 34.0;
    let _ = write!(
        s,
        r#"<rect x="{LEFT}" y="{y}" width="14" height="10" fill="{COMPUTE}"/><text x="{}" y="{}">computing</text><rect x="{}" y="{y}" width="14" height="10" fill="{SYNC}"/><text x="{}" y="{}">in bsp_sync (shades: the share of a pixel's time)</text><line x1="{}" y1="{}" x2="{}" y2="{}" stroke="{MARK}" stroke-width="2"/><text x="{}" y="{}">the supersteps with the most time in bsp_sync (their end)</text>"#,
        LEFT + 18.0,
        y + 9.0,
        LEFT + 110.0,
        LEFT + 128.0,
        y + 9.0,
        LEFT + 430.0,
        y - 1.0,
        LEFT + 430.0,
        y + 11.0,
        LEFT + 436.0,
        y + 9.0,
    );
}

fn marks_and_axis(
    s: &mut String,
    lanes: &Lanes,
    marks: &[usize],
    span: f64,
    x: &dyn Fn(f64) -> f64,
) {
    let bottom = TOP + ROW * lanes.len() as f64;
    for &m in marks {
        let Some(end) = lanes
            .iter()
            .filter_map(|l| l.1.get(m))
            .map(|q| q.1)
            .reduce(f64::max)
        else {
            continue;
        };
        let _ = write!(
            s,
            r#"<line x1="{0:.2}" y1="{1}" x2="{0:.2}" y2="{2}" stroke="{MARK}" stroke-width="1.5"/><text x="{0:.2}" y="{3}" text-anchor="middle" font-size="10" fill="{MARK}">{m}</text>"#,
            x(end),
            TOP - 4.0,
            bottom - 4.0,
            TOP - 6.0,
        );
    }
    let _ = write!(
        s,
        r#"<line x1="{LEFT}" y1="{bottom}" x2="{}" y2="{bottom}" stroke="black"/>"#,
        WIDTH - RIGHT
    );
    let step = tick_step(span);
    for k in 0.. {
        let t = k as f64 * step;
        if t > span * 1.0001 {
            break;
        }
        let _ = write!(
            s,
            r#"<line x1="{0:.2}" y1="{bottom}" x2="{0:.2}" y2="{1}" stroke="black"/><text x="{0:.2}" y="{2}" text-anchor="middle">{3}</text>"#,
            x(t),
            bottom + 5.0,
            bottom + 18.0,
            if k == 0 { "0".into() } else { time_label(t) }
        );
    }
    let _ = write!(
        s,
        r#"<text x="{}" y="{}" text-anchor="middle">time since the first bsp_begin</text>"#,
        LEFT + (WIDTH - LEFT - RIGHT) / 2.0,
        bottom + 36.0
    );
}

fn escape(t: &str) -> String {
    t.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use bulkwire_bsp::profile::Record;

    use super::*;

    fn proc(pid: u32, epoch_ns: u64, steps: usize) -> Profile {
        let mut at = 0;
        let records = (0..steps)
            .map(|i| {
                let r = Record {
                    step: i as u64,
                    start_ns: at,
                    compute_ns: 900,
                    sync_ns: 100,
                    ..Record::default()
                };
                at += 1000;
                r
            })
            .collect();
        Profile {
            pid,
            p: 2,
            epoch_ns,
            protocol: "utopia".into(),
            records,
        }
    }

    #[test]
    fn a_timeline_has_a_bar_per_process_and_stays_small() {
        // 100000 supersteps of 1 us: the syncs merge into about a pixel's worth each.
        let procs = [proc(0, 5_000, 100_000), proc(1, 5_200, 100_000)];
        let svg = svg(&procs, "t <1>", &[3]);
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>\n"));
        assert!(svg.contains("pid 0") && svg.contains("pid 1"));
        assert!(svg.contains("t &lt;1&gt;"));
        let rects = svg.matches("<rect").count();
        assert!(rects < 3000, "{rects} rectangles");
        assert!(svg.contains("100 ms"), "ticks: {svg:.2000}");
    }

    #[test]
    fn pixels_are_shaded_by_their_share_of_sync() {
        // Column 0 all sync, column 1 a quarter, 2 and 3 none, 4 half.
        let runs = shade_runs(10.0, 15.0, [(10.0, 11.25), (14.0, 14.5)].into_iter());
        assert_eq!(
            runs,
            [
                (10.0, 11.0, 8),
                (11.0, 12.0, 2),
                (12.0, 14.0, 0),
                (14.0, 15.0, 4)
            ]
        );
        assert_eq!(colour(0), COMPUTE);
        assert_eq!(colour(SHADES), SYNC);
        assert_eq!(tick_step(1.0), 0.2);
        assert_eq!(tick_step(0.07), 0.01);
    }

    #[test]
    fn processes_are_placed_by_their_begin() {
        let l = lanes(&[proc(0, 2_000_000, 2), proc(1, 1_000_000, 2)]);
        assert!((l[0].0.0 - 1e-3).abs() < 1e-12 && l[1].0.0 == 0.0);
        assert!((l[1].1[1].1 - 2e-6).abs() < 1e-15);
    }
}
