//! The report's charts as SVG. Points are drawn in transformed coordinates (log2 of a size,
//! log10 of a time or rate), so one linear chart serves every axis, with ticks placed and
//! labelled as a reader writes the values ("8 B", "64 KiB", "10 us", "1 GB/s", "1e-7").
//! Every series has its own colour and marker (and baselines a dashed line), the same
//! stack looking the same in every chart; the legend sits beside the plot, never on it.

use plotters::coord::Shift;
use plotters::coord::types::RangedCoordf64;
use plotters::element::DashedPathElement;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::section::{Axis, Chart, Scale, Series, rate_label, size_label, time_label};

const WIDTH: u32 = 1100;
const HEIGHT: u32 = 560;
/// Room for the legend right of the plot.
const LEGEND: u32 = 330;

/// Renders `c` as SVG.
pub fn svg(c: &Chart) -> String {
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, (WIDTH, HEIGHT)).into_drawing_area();
        let _ = draw(&root, c);
        let _ = root.present();
    }
    out
}

/// How a point's marker is drawn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Marker {
    Circle,
    Square,
    Diamond,
    TriangleUp,
    TriangleDown,
    Cross,
    Plus,
    Star,
    HollowCircle,
    HollowSquare,
    HollowDiamond,
    HollowTriangle,
}

/// How a series is drawn.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Style {
    pub colour: RGBColor,
    pub marker: Marker,
    pub dashed: bool,
}

const BLACK_: RGBColor = RGBColor(0, 0, 0);
const GREY: RGBColor = RGBColor(130, 130, 130);
const BLUE_: RGBColor = RGBColor(31, 119, 180);
const ORANGE: RGBColor = RGBColor(255, 127, 14);
const GREEN_: RGBColor = RGBColor(44, 160, 44);
const RED_: RGBColor = RGBColor(214, 39, 40);
const PURPLE: RGBColor = RGBColor(148, 103, 189);
const BROWN: RGBColor = RGBColor(140, 86, 75);
const PINK: RGBColor = RGBColor(227, 119, 194);
const OLIVE: RGBColor = RGBColor(188, 189, 34);
const CYAN_: RGBColor = RGBColor(23, 190, 207);
const NAVY: RGBColor = RGBColor(40, 40, 140);

/// The styles series fall back on, in order, when their own is taken or they have none.
const SPARE: [(RGBColor, Marker); 12] = [
    (BLUE_, Marker::Circle),
    (ORANGE, Marker::Square),
    (GREEN_, Marker::Diamond),
    (RED_, Marker::TriangleUp),
    (PURPLE, Marker::TriangleDown),
    (BROWN, Marker::Cross),
    (PINK, Marker::Plus),
    (OLIVE, Marker::Star),
    (CYAN_, Marker::HollowCircle),
    (NAVY, Marker::HollowSquare),
    (GREY, Marker::HollowDiamond),
    (BLACK_, Marker::HollowTriangle),
];

/// The style a stack has in every chart, by its label.
fn own_style(label: &str) -> Option<Style> {
    let s = |colour, marker, dashed| {
        Some(Style {
            colour,
            marker,
            dashed,
        })
    };
    if label.contains("no progress thread") {
        s(PINK, Marker::HollowCircle, true)
    } else if label == "raw UDP" {
        s(BLACK_, Marker::Square, true)
    } else if label == "raw TCP" || label == "tcp" {
        s(GREY, Marker::Diamond, true)
    } else if label.contains("MPI") && label.contains("shm") {
        s(OLIVE, Marker::TriangleDown, false)
    } else if label.contains("MPI") {
        s(BROWN, Marker::HollowSquare, false)
    } else if label.contains("utopia/shm") || label.contains("netcache") {
        s(CYAN_, Marker::TriangleUp, false)
    } else if label.contains("bulkwire/tcp") {
        s(PURPLE, Marker::Plus, false)
    } else if label.contains("holefill") {
        s(GREEN_, Marker::Circle, false)
    } else if label.contains("gbn") {
        s(ORANGE, Marker::Cross, false)
    } else if label.contains("rmpp") {
        s(RED_, Marker::Star, false)
    } else if label.contains("utopia") {
        s(BLUE_, Marker::HollowDiamond, false)
    } else {
        None
    }
}

/// A style per series: its own where its colour and marker are both still free in this
/// chart, otherwise the first free colour with the first free marker.
pub fn styles(series: &[Series]) -> Vec<Style> {
    let mut taken: Vec<Style> = Vec::new();
    for s in series {
        let free_colour = |c: RGBColor, taken: &[Style]| taken.iter().all(|t| t.colour != c);
        let free_marker = |m: Marker, taken: &[Style]| taken.iter().all(|t| t.marker != m);
        let own = own_style(&s.label)
            .filter(|st| free_colour(st.colour, &taken) && free_marker(st.marker, &taken));
        let style = own.unwrap_or_else(|| {
            // More series than styles: repeat, at least distinct from the last one.
            let n = taken.len();
            let colour = SPARE
                .iter()
                .map(|s| s.0)
                .find(|&c| free_colour(c, &taken))
                .unwrap_or(SPARE[n % SPARE.len()].0);
            let marker = SPARE
                .iter()
                .map(|s| s.1)
                .find(|&m| free_marker(m, &taken))
                .unwrap_or(SPARE[(n + 1) % SPARE.len()].1);
            Style {
                colour,
                marker,
                dashed: false,
            }
        });
        taken.push(style);
    }
    taken
}

/// A value in the chart's transformed coordinates.
fn forward(a: &Axis, v: f64) -> Option<f64> {
    let t = if !a.log {
        v
    } else {
        match a.scale {
            Scale::Bytes => v.log2(),
            Scale::BitErrorRate => v.log10() - 12.0,
            Scale::Count | Scale::Seconds | Scale::BytesPerSecond => v.log10(),
        }
    };
    t.is_finite().then_some(t)
}

/// The label of the tick at transformed `t`.
fn tick_label(a: &Axis, t: f64) -> String {
    let v = if !a.log {
        t
    } else {
        match a.scale {
            Scale::Bytes => 2f64.powf(t),
            Scale::BitErrorRate => return format!("{:.0e}", 10f64.powf(t)),
            _ => 10f64.powf(t),
        }
    };
    match a.scale {
        Scale::Bytes => size_label(v.round() as usize),
        Scale::Count => format!("{}", v.round() as i64),
        Scale::BitErrorRate => format!("{:.0e}", v / 1e12),
        Scale::Seconds => time_label(v),
        Scale::BytesPerSecond => rate_label(v),
    }
}

/// Tick positions (transformed) for data spanning `lo..=hi` (transformed), and the range to
/// draw: at most about nine ticks, at values a reader writes.
fn ticks(a: &Axis, lo: f64, hi: f64, data: &[f64]) -> (Vec<f64>, f64, f64) {
    if !a.log {
        return linear_ticks(a, lo, hi, data);
    }
    match a.scale {
        Scale::Bytes => (byte_ticks(lo, hi, data), lo - 0.3, hi + 0.3),
        _ => {
            // Decades, with 2 and 5 between them when the data span fewer than three.
            let (from, to) = (lo.floor() as i64, hi.ceil() as i64);
            let steps: &[f64] = if hi - lo < 2.5 {
                &[1.0, 2.0, 5.0]
            } else {
                &[1.0]
            };
            let pad = 0.08 * (hi - lo).max(0.5);
            let mut t = Vec::new();
            for d in from..=to {
                for m in steps {
                    let x = d as f64 + m.log10();
                    if x >= lo - pad && x <= hi + pad {
                        t.push(x);
                    }
                }
            }
            // Data far below the first tick or above the last would have no label to read
            // it by (shared memory's 0.3 us under a first tick of 1 us): the axis reaches
            // the next decade out.
            let (mut from_at, mut to_at) = (lo - pad, hi + pad);
            if t.first().is_none_or(|&f| f > lo + 0.3) {
                t.insert(0, from as f64);
                from_at = from_at.min(from as f64 - 0.02);
            }
            if t.last().is_none_or(|&l| l < hi - 0.3) {
                t.push(to as f64);
                to_at = to_at.max(to as f64 + 0.02);
            }
            (t, from_at, to_at)
        }
    }
}

/// Ticks of a size axis (log2 of bytes): at the sizes measured when they are few and far
/// enough apart to label, otherwise at powers of two on a stride that lands on 1 KiB and
/// 1 MiB where it can.
fn byte_ticks(lo: f64, hi: f64, data: &[f64]) -> Vec<f64> {
    let mut at: Vec<f64> = data.to_vec();
    at.sort_by(f64::total_cmp);
    at.dedup();
    if (2..=9).contains(&at.len()) && at.windows(2).all(|w| w[1] - w[0] >= 0.9) {
        return at;
    }
    let (from, to) = (lo.floor() as i64, hi.ceil() as i64);
    let stride = [1, 2, 5, 10]
        .into_iter()
        .find(|s| (to - from) / s <= 8)
        .unwrap_or(10);
    (from..=to)
        .filter(|k| k.rem_euclid(stride) == 0)
        .map(|k| k as f64)
        .filter(|&k| k >= lo - 0.3 && k <= hi + 0.3)
        .collect()
}

fn linear_ticks(a: &Axis, lo: f64, hi: f64, data: &[f64]) -> (Vec<f64>, f64, f64) {
    if a.scale == Scale::Count {
        // At the counts measured.
        let mut t: Vec<f64> = data.iter().map(|x| x.round()).collect();
        t.sort_by(f64::total_cmp);
        t.dedup();
        let pad = 0.1 * (hi - lo).max(2.0);
        return (t, lo - pad, hi + pad);
    }
    // From zero, in steps of 1, 2 or 5 times a power of ten.
    let top = hi.max(f64::MIN_POSITIVE);
    let raw = top / 5.0;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * mag)
        .find(|s| top / s <= 6.0)
        .unwrap_or(10.0 * mag);
    // The axis ends at a tick, so no label falls outside the plot.
    let n = (top * 1.03 / step).ceil() as usize;
    let t = (0..=n).map(|i| i as f64 * step).collect();
    (t, 0.0f64.min(lo), n as f64 * step)
}

/// Each series' points in transformed coordinates, leaving out what the axes cannot show
/// (zero or negative on a log axis).
fn transformed(c: &Chart) -> Vec<Vec<(f64, f64)>> {
    c.series
        .iter()
        .map(|s| {
            s.points
                .iter()
                .filter_map(|p| Some((forward(&c.x, p.size as f64)?, forward(&c.y, p.median)?)))
                .collect()
        })
        .collect()
}

/// The lowest and highest of `v`, at least a unit apart.
fn span(v: &[f64]) -> (f64, f64) {
    let lo = v.iter().copied().fold(f64::MAX, f64::min);
    let hi = v.iter().copied().fold(f64::MIN, f64::max);
    if hi > lo {
        (lo, hi)
    } else {
        (lo - 0.5, hi + 0.5)
    }
}

type Plot<'a, DB> = ChartContext<'a, DB, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

fn draw<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, c: &Chart) -> Result<(), String> {
    let err = |e: &dyn std::fmt::Display| e.to_string();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let pts = transformed(c);
    let all: Vec<(f64, f64)> = pts.iter().flatten().copied().collect();
    if all.is_empty() {
        return Ok(());
    }
    let xs: Vec<f64> = all.iter().map(|p| p.0).collect();
    let ys: Vec<f64> = all.iter().map(|p| p.1).collect();
    let ((xl, xh), (yl, yh)) = (span(&xs), span(&ys));
    let x = ticks(&c.x, xl, xh, &xs);
    let y = ticks(&c.y, yl, yh, &ys);
    let styles = styles(&c.series);
    let (plot, legend) = root.split_horizontally(WIDTH - LEGEND);
    let mut chart = ChartBuilder::on(&plot)
        .caption(&c.title, ("sans-serif", 22))
        .margin(14)
        .x_label_area_size(50)
        .y_label_area_size(78)
        .build_cartesian_2d(x.1..x.2, y.1..y.2)
        .map_err(|e| err(&e))?;
    axes(&mut chart, &plot, c, &x, &y)?;
    for (p, st) in pts.iter().zip(&styles) {
        let line = st.colour.stroke_width(2);
        if st.dashed {
            chart
                .draw_series(DashedLineSeries::new(p.iter().copied(), 8, 5, line))
                .map_err(|e| err(&e))?;
        } else {
            chart
                .draw_series(LineSeries::new(p.iter().copied(), line))
                .map_err(|e| err(&e))?;
        }
        for &q in p {
            marker(chart.plotting_area(), q, st)?;
        }
    }
    draw_legend(&legend, &c.series, &styles)
}

/// The axes with their names (from plotters), and the grid and tick labels at our ticks
/// `x` and `y` (each: the ticks, and the axis' range).
fn axes<DB: DrawingBackend>(
    chart: &mut Plot<'_, DB>,
    plot: &DrawingArea<DB, Shift>,
    c: &Chart,
    (xt, x0, x1): &(Vec<f64>, f64, f64),
    (yt, y0, y1): &(Vec<f64>, f64, f64),
) -> Result<(), String> {
    let err = |e: &dyn std::fmt::Display| e.to_string();
    let y_desc = match c.y.scale {
        Scale::Seconds => format!("{} (lower is better)", c.y.label),
        Scale::BytesPerSecond => format!("{} (higher is better)", c.y.label),
        _ => c.y.label.clone(),
    };
    chart
        .configure_mesh()
        .disable_mesh()
        .x_labels(0)
        .y_labels(0)
        .x_desc(&c.x.label)
        .y_desc(&y_desc)
        .axis_desc_style(("sans-serif", 15))
        .draw()
        .map_err(|e| err(&e))?;
    let grid = BLACK.mix(0.12);
    let font = ("sans-serif", 14).into_font().color(&BLACK);
    for &t in xt {
        chart
            .draw_series(LineSeries::new([(t, *y0), (t, *y1)], grid))
            .map_err(|e| err(&e))?;
        let (px, py) = chart.backend_coord(&(t, *y0));
        let style = font.pos(Pos::new(HPos::Center, VPos::Top));
        plot.draw(&Text::new(tick_label(&c.x, t), (px, py + 6), style))
            .map_err(|e| err(&e))?;
    }
    for &t in yt {
        chart
            .draw_series(LineSeries::new([(*x0, t), (*x1, t)], grid))
            .map_err(|e| err(&e))?;
        let (px, py) = chart.backend_coord(&(*x0, t));
        let style = font.pos(Pos::new(HPos::Right, VPos::Center));
        plot.draw(&Text::new(tick_label(&c.y, t), (px - 6, py), style))
            .map_err(|e| err(&e))?;
    }
    Ok(())
}

/// The legend: a sample of each series' line and marker, and its label, top to bottom.
fn draw_legend<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    series: &[Series],
    styles: &[Style],
) -> Result<(), String> {
    let err = |e: &dyn std::fmt::Display| e.to_string();
    let top = 56;
    let row = 26;
    for (i, (s, st)) in series.iter().zip(styles).enumerate() {
        let y = top + row * i as i32;
        let line = st.colour.stroke_width(2);
        let path = vec![(6, y), (44, y)];
        if st.dashed {
            area.draw(&DashedPathElement::new(path, 8, 5, line))
                .map_err(|e| err(&e))?;
        } else {
            area.draw(&PathElement::new(path, line))
                .map_err(|e| err(&e))?;
        }
        marker(area, (25, y), st)?;
        area.draw(&Text::new(
            s.label.clone(),
            (54, y - 8),
            ("sans-serif", 14).into_font().color(&BLACK),
        ))
        .map_err(|e| err(&e))?;
    }
    Ok(())
}

/// Draws `st`'s marker at `at`, in `area`'s coordinates.
fn marker<DB: DrawingBackend, CT: CoordTranslate>(
    area: &DrawingArea<DB, CT>,
    at: CT::From,
    st: &Style,
) -> Result<(), String> {
    let (fill, line) = (st.colour.filled(), st.colour.stroke_width(2));
    let r = 5;
    let e = EmptyElement::at(at);
    let diamond = vec![
        (0, -r - 1),
        (r + 1, 0),
        (0, r + 1),
        (-r - 1, 0),
        (0, -r - 1),
    ];
    let up = vec![(0, -r - 1), (r, r - 1), (-r, r - 1), (0, -r - 1)];
    let down = vec![(0, r + 1), (r, 1 - r), (-r, 1 - r)];
    let square = [(-r + 1, -r + 1), (r - 1, r - 1)];
    let cross = |a: i32| vec![(-a, -a), (a, a), (0, 0), (a, -a), (-a, a)];
    let plus = |a: i32| vec![(-a, 0), (a, 0), (0, 0), (0, -a), (0, a)];
    let r = match st.marker {
        Marker::Circle => area.draw(&(e + Circle::new((0, 0), r, fill))),
        Marker::HollowCircle => area.draw(&(e + Circle::new((0, 0), r, line))),
        Marker::Square => area.draw(&(e + Rectangle::new(square, fill))),
        Marker::HollowSquare => area.draw(&(e + Rectangle::new(square, line))),
        Marker::Diamond => area.draw(&(e + Polygon::new(diamond, fill))),
        Marker::HollowDiamond => area.draw(&(e + PathElement::new(diamond, line))),
        Marker::TriangleUp => area.draw(&(e + Polygon::new(up, fill))),
        Marker::HollowTriangle => area.draw(&(e + PathElement::new(up, line))),
        Marker::TriangleDown => area.draw(&(e + Polygon::new(down, fill))),
        Marker::Cross => area.draw(&(e + PathElement::new(cross(r), line))),
        Marker::Plus => area.draw(&(e + PathElement::new(plus(r + 1), line))),
        Marker::Star => area.draw(
            &(e + PathElement::new(cross(r - 1), line) + PathElement::new(plus(r + 1), line)),
        ),
    };
    r.map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::section::{Group, Stat};

    fn series(label: &str, pts: &[(usize, f64)]) -> Series {
        Series {
            label: label.into(),
            group: Group::Bulkwire,
            points: pts.iter().map(|&(x, y)| Stat::single(x, 1, y)).collect(),
        }
    }

    #[test]
    fn every_series_has_its_own_colour_and_marker() {
        let labels = [
            "raw UDP",
            "raw TCP",
            "utopia/udp",
            "gbn/udp",
            "holefill/udp",
            "rmpp/udp",
            "bulkwire/tcp",
            "utopia/shm",
            "Open MPI 4.1.4 shm",
            "Open MPI 4.1.4 TCP",
            "p2p over holefill/udp, no progress thread",
            "something new",
            "and another",
        ];
        let s: Vec<Series> = labels.iter().map(|l| series(l, &[(8, 1e-6)])).collect();
        let st = styles(&s);
        for (i, a) in st.iter().enumerate().take(12) {
            for b in &st[..i] {
                assert!(a.colour != b.colour && a.marker != b.marker, "{a:?} {b:?}");
            }
        }
        // The baselines are not both grey, and are dashed.
        assert_ne!(st[0].colour, st[1].colour);
        assert!(st[0].dashed && st[1].dashed && !st[4].dashed);
        // A stack looks the same in another chart.
        let alone = styles(&[series("holefill/udp", &[])]);
        assert_eq!(alone[0], st[4]);
    }

    #[test]
    fn data_below_the_first_decade_has_a_label_under_it() {
        let time = Axis::log("half round trip", Scale::Seconds);
        // 0.29 us (shared memory) to 1 ms: the axis must show 100 ns.
        let (lo, hi) = (0.29e-6f64.log10(), 1e-3f64.log10());
        let (t, from, _) = ticks(&time, lo, hi, &[]);
        let labels: Vec<String> = t.iter().map(|&x| tick_label(&time, x)).collect();
        assert_eq!(
            labels.first().map(String::as_str),
            Some("100 ns"),
            "{labels:?}"
        );
        assert!(from <= -7.0 + 0.02 && from < lo);
    }

    #[test]
    fn ticks_read_as_a_user_writes_the_values() {
        let bytes = Axis::log("size", Scale::Bytes);
        let (lo, hi) = (8f64.log2(), (16usize << 20) as f64);
        let (t, ..) = ticks(&bytes, lo, hi.log2(), &[]);
        let labels: Vec<String> = t.iter().map(|&x| tick_label(&bytes, x)).collect();
        assert!(labels.len() <= 9, "{labels:?}");
        assert!(labels.contains(&"1 KiB".to_string()) && labels.contains(&"1 MiB".to_string()));
        // A few sizes far enough apart: a tick at each.
        let quick: Vec<f64> = [8usize, 64, 512, 1024, 8192, 65536]
            .iter()
            .map(|&n| (n as f64).log2())
            .collect();
        let (t, ..) = ticks(&bytes, 3.0, 16.0, &quick);
        let labels: Vec<String> = t.iter().map(|&x| tick_label(&bytes, x)).collect();
        assert_eq!(labels, ["8 B", "64 B", "512 B", "1 KiB", "8 KiB", "64 KiB"]);
        let secs = Axis::log("wait", Scale::Seconds);
        let (t, ..) = ticks(&secs, (3e-5f64).log10(), 4f64.log10(), &[]);
        let labels: Vec<String> = t.iter().map(|&x| tick_label(&secs, x)).collect();
        // 30 us lies half a decade under 100 us: the axis reaches 10 us.
        assert_eq!(
            labels[..6],
            ["10 us", "100 us", "1 ms", "10 ms", "100 ms", "1 s"]
        );
        let rate = Axis::log("bw", Scale::BytesPerSecond);
        let (t, ..) = ticks(&rate, (3e8f64).log10(), (2.2e10f64).log10(), &[]);
        let labels: Vec<String> = t.iter().map(|&x| tick_label(&rate, x)).collect();
        assert!(labels.contains(&"1 GB/s".to_string()) && labels.contains(&"10 GB/s".to_string()));
        let ber = Axis::log("ber", Scale::BitErrorRate);
        let x = forward(&ber, 1e-7 * 1e12).unwrap();
        assert_eq!(tick_label(&ber, x), "1e-7");
        let (t, ..) = ticks(&ber, -7.0, (3e-5f64).log10(), &[]);
        let labels: Vec<String> = t.iter().map(|&x| tick_label(&ber, x)).collect();
        assert_eq!(labels[..4], ["1e-7", "2e-7", "5e-7", "1e-6"]);
        let procs = Axis::linear("p", Scale::Count);
        let (t, ..) = ticks(&procs, 2.0, 4.0, &[2.0, 4.0, 2.0]);
        assert_eq!(t, [2.0, 4.0]);
        let lin = Axis::linear("bw", Scale::BytesPerSecond);
        let (t, lo, hi) = ticks(&lin, 7e8, 6.1e9, &[]);
        assert_eq!(lo, 0.0);
        assert!(hi > 6.1e9 && t.len() <= 8 && t[1] == 2e9, "{t:?}");
    }

    #[test]
    fn chart_renders_every_series_with_its_label() {
        let c = Chart {
            file: "x.svg".into(),
            title: "t".into(),
            x: Axis::log("size", Scale::Bytes),
            y: Axis::log("time", Scale::Seconds),
            series: vec![
                series("alpha", &[(8, 2e-6), (1024, 4e-6)]),
                series("beta", &[(8, 3e-6), (1024, 5e-6)]),
            ],
        };
        let s = svg(&c);
        assert!(s.contains("<svg"));
        assert!(s.contains("alpha") && s.contains("beta"));
        assert!(s.contains("1 KiB") && s.contains(" us<") || s.contains(" us"));
    }
}
