//! The report `bwbench all` writes: `report.md` (tables in the seeds' layouts, every figure
//! beside its baseline), `results.json` (every measurement with the machine and
//! parameters) and SVG charts.

use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use plotters::prelude::*;
use serde::Serialize;

use crate::suite::{Chart, Group, Section};

/// What the measurements were taken on.
#[derive(Clone, Debug, Serialize)]
pub struct Machine {
    pub hostname: String,
    pub kernel: String,
    pub cpu: String,
    pub cores: usize,
    pub memory_gib: f64,
    pub bulkwire: String,
    pub mpi: String,
    /// UTC, ISO 8601.
    pub date: String,
    /// How the processes were connected.
    pub network: String,
}

fn read(path: &str) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

impl Machine {
    /// Reads this machine's description.
    pub fn here(mpi: &str) -> Machine {
        let cpu = read("/proc/cpuinfo")
            .lines()
            .find(|l| l.starts_with("model name"))
            .and_then(|l| l.split(':').nth(1))
            .unwrap_or("unknown")
            .trim()
            .to_string();
        let mem_kb: f64 = read("/proc/meminfo")
            .lines()
            .find(|l| l.starts_with("MemTotal:"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0);
        Machine {
            hostname: read("/proc/sys/kernel/hostname").trim().to_string(),
            kernel: read("/proc/sys/kernel/osrelease").trim().to_string(),
            cpu,
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
            memory_gib: mem_kb / (1024.0 * 1024.0),
            bulkwire: env!("CARGO_PKG_VERSION").to_string(),
            mpi: mpi.to_string(),
            date: utc_now(),
            network: "all processes on this host: bulkwire over UDP on loopback, MPI over \
                      shared memory and TCP on loopback"
                .into(),
        }
    }
}

/// The current time as `YYYY-MM-DDTHH:MM:SSZ` (civil-from-days, no calendar crate).
fn utc_now() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs()) as i64;
    let (days, rem) = (secs.div_euclid(86400), secs.rem_euclid(86400));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Everything one `bwbench` run measured.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub machine: Machine,
    pub level: crate::suite::Level,
    pub command: String,
    pub seconds: f64,
    pub sections: Vec<Section>,
}

impl Report {
    /// The Markdown report.
    pub fn markdown(&self) -> String {
        let m = &self.machine;
        let mut s = String::from("# bulkwire benchmark report\n\n");
        s += &format!(
            "Measured {} on `{}`: {} ({} cores, {:.0} GiB), Linux {}. bulkwire {}; MPI: {}.\n\n",
            m.date, m.hostname, m.cpu, m.cores, m.memory_gib, m.kernel, m.bulkwire, m.mpi
        );
        s += &format!(
            "Network: {}. Command: `{}` ({}, {:.0} s). Every ratio is against a baseline \
             measured in this same run; nothing is taken from the papers.\n\n",
            m.network,
            self.command,
            match self.level {
                crate::suite::Level::Smoke => "smoke test: too few iterations to quote",
                crate::suite::Level::Quick => "quick mode",
                crate::suite::Level::Full => "full mode",
            },
            self.seconds
        );
        let targets: Vec<_> = self.sections.iter().flat_map(|x| &x.targets).collect();
        if !targets.is_empty() {
            s += "## Targets\n\n| figure | measured | target | met |\n|---|---|---|---|\n";
            for t in targets {
                let met = match t.met {
                    Some(true) => "yes",
                    Some(false) => "**no**",
                    None => "-",
                };
                s += &format!("| {} | {} | {} | {met} |\n", t.what, t.measured, t.target);
            }
            s += "\n";
        }
        for sec in &self.sections {
            s += &sec.markdown();
        }
        s
    }

    /// Writes `report.md`, `results.json` and the charts into `dir`.
    pub fn write(&self, dir: &Path) -> std::io::Result<()> {
        std::fs::create_dir_all(dir)?;
        std::fs::write(dir.join("report.md"), self.markdown())?;
        let json = serde_json::to_vec_pretty(self).map_err(std::io::Error::other)?;
        std::fs::write(dir.join("results.json"), json)?;
        for sec in &self.sections {
            for c in &sec.charts {
                std::fs::write(dir.join(&c.file), svg(c))?;
            }
        }
        Ok(())
    }
}

/// Renders a chart as SVG: one line per series, log axes where asked.
pub fn svg(c: &Chart) -> String {
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, (900, 560)).into_drawing_area();
        let _ = draw(&root, c);
        let _ = root.present();
    }
    out
}

fn draw<DB: DrawingBackend>(
    root: &DrawingArea<DB, plotters::coord::Shift>,
    c: &Chart,
) -> Result<(), String> {
    let err = |e: &dyn std::fmt::Display| e.to_string();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let pts: Vec<Vec<(f64, f64)>> = c
        .series
        .iter()
        .map(|s| {
            s.points
                .iter()
                .map(|p| (p.size as f64, p.median * c.y_scale))
                .filter(|&(x, y)| x.is_finite() && y.is_finite() && (!c.log_x || x > 0.0))
                .filter(|&(_, y)| !c.log_y || y > 0.0)
                .collect()
        })
        .collect();
    let all: Vec<(f64, f64)> = pts.iter().flatten().copied().collect();
    if all.is_empty() {
        return Ok(());
    }
    let (mut x0, mut x1, mut y0, mut y1) = all.iter().fold(
        (f64::MAX, f64::MIN, f64::MAX, f64::MIN),
        |(a, b, c, d), &(x, y)| (a.min(x), b.max(x), c.min(y), d.max(y)),
    );
    if x0 == x1 {
        x1 = x0 * 2.0 + 1.0;
    }
    if y0 == y1 {
        y1 = y0 * 2.0 + 1.0;
    }
    if c.log_y {
        y0 /= 1.5;
        y1 *= 1.5;
    } else {
        y0 = 0.0f64.min(y0);
        y1 *= 1.1;
    }
    if !c.log_x {
        x0 = 0.0f64.min(x0);
    }
    let palette = |i: usize, g: Group| -> RGBColor {
        let base = [
            RGBColor(31, 119, 180),
            RGBColor(255, 127, 14),
            RGBColor(44, 160, 44),
            RGBColor(214, 39, 40),
            RGBColor(148, 103, 189),
            RGBColor(140, 86, 75),
            RGBColor(227, 119, 194),
            RGBColor(23, 190, 207),
            RGBColor(188, 189, 34),
        ];
        match g {
            Group::Baseline => RGBColor(90, 90, 90),
            _ => base[i % base.len()],
        }
    };
    macro_rules! plot {
        ($xr:expr, $yr:expr) => {{
            let mut chart = ChartBuilder::on(root)
                .caption(&c.title, ("sans-serif", 20))
                .margin(12)
                .x_label_area_size(44)
                .y_label_area_size(64)
                .build_cartesian_2d($xr, $yr)
                .map_err(|e| err(&e))?;
            chart
                .configure_mesh()
                .x_desc(&c.x_label)
                .y_desc(&c.y_label)
                .draw()
                .map_err(|e| err(&e))?;
            for (i, (s, p)) in c.series.iter().zip(&pts).enumerate() {
                let col = palette(i, s.group);
                let style = if s.group == Group::Mpi {
                    col.stroke_width(2)
                } else {
                    col.stroke_width(3)
                };
                chart
                    .draw_series(LineSeries::new(p.iter().copied(), style))
                    .map_err(|e| err(&e))?
                    .label(&s.label)
                    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], col));
                chart
                    .draw_series(p.iter().map(|&q| Circle::new(q, 3, col.filled())))
                    .map_err(|e| err(&e))?;
            }
            chart
                .configure_series_labels()
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK)
                .position(SeriesLabelPosition::UpperLeft)
                .draw()
                .map_err(|e| err(&e))?;
        }};
    }
    match (c.log_x, c.log_y) {
        (true, true) => plot!((x0..x1).log_scale(), (y0..y1).log_scale()),
        (true, false) => plot!((x0..x1).log_scale(), y0..y1),
        (false, true) => plot!(x0..x1, (y0..y1).log_scale()),
        (false, false) => plot!(x0..x1, y0..y1),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::suite::{Series, Stat};

    #[test]
    fn date_format() {
        let d = utc_now();
        assert_eq!(d.len(), 20);
        assert!(d.starts_with("20") && d.ends_with('Z'));
    }

    #[test]
    fn chart_renders_every_series() {
        let stat = |size, median| Stat {
            size,
            n: 1,
            min: median,
            mean: median,
            max: median,
            std_dev: 0.0,
            median,
            delivered: None,
        };
        let c = Chart {
            file: "x.svg".into(),
            title: "t".into(),
            x_label: "x".into(),
            y_label: "y".into(),
            y_scale: 1e6,
            log_x: true,
            log_y: true,
            series: vec![
                Series {
                    label: "alpha".into(),
                    group: Group::Baseline,
                    points: vec![stat(8, 2e-6), stat(1024, 4e-6)],
                },
                Series {
                    label: "beta".into(),
                    group: Group::Bulkwire,
                    points: vec![stat(8, 3e-6), stat(1024, 5e-6)],
                },
            ],
        };
        let s = svg(&c);
        assert!(s.starts_with("<svg") || s.contains("<svg"));
        assert!(s.contains("alpha") && s.contains("beta"));
    }
}
