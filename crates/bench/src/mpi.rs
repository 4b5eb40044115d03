//! The user's MPI, measured by the same experiments: a small C harness (`c/mpi_harness.c`)
//! compiled with their `mpicc` and run with their `mpirun`, once over shared memory and
//! once over TCP. Without MPI the report says it was not found.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde::Serialize;

use crate::stats::Spread;

const SOURCE: &str = include_str!("../c/mpi_harness.c");

/// Which of MPI's transports carries the messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum MpiNet {
    /// Shared memory (Open MPI: the vader BTL).
    Shm,
    /// TCP over loopback.
    Tcp,
}

impl MpiNet {
    pub fn label(self) -> &'static str {
        match self {
            MpiNet::Shm => "shm",
            MpiNet::Tcp => "TCP",
        }
    }
}

/// One line of the harness's output: a summary over its samples, in seconds (bytes per
/// second for bandwidth).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MpiPoint {
    pub kind: String,
    pub size: usize,
    pub nprocs: u32,
    pub n: usize,
    pub min: f64,
    pub mean: f64,
    pub max: f64,
    pub std_dev: f64,
    pub median: f64,
    /// The single operations' best, median and 90th percentile (of rates: the highest,
    /// the median and the slow tail). For supersteps and total exchanges the figures above
    /// are over batch means and these over the single supersteps; for the other kinds the
    /// samples are single operations already, and these are theirs. None for figures the
    /// harness did not time (OSU's own output).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub steps: Option<Spread>,
}

/// One run of the harness: `kind` (latency, bandwidth, bandwidth-own, overlap, or a
/// collective) on `np` processes over `net`, `warmup` and `iters` per size, and `extra`
/// (bandwidth: the window; overlap: seconds of computation).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MpiJob {
    pub kind: String,
    pub np: u32,
    pub net: MpiNet,
    pub warmup: usize,
    pub iters: usize,
    pub extra: f64,
    pub sizes: Vec<usize>,
}

/// An MPI found on this machine, with the harness built.
pub struct Mpi {
    pub version: String,
    mpicc: PathBuf,
    harness: PathBuf,
    open_mpi: bool,
    root: bool,
}

fn which(cmd: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|p| p.join(cmd))
            .find(|p| p.is_file())
    })
}

impl Mpi {
    /// Finds `mpicc` and `mpirun` and builds the harness in `dir`. `Err` says why MPI
    /// cannot be measured (not installed, or the build failed).
    pub fn find(dir: &Path) -> Result<Mpi, String> {
        let mpicc = which("mpicc").ok_or("mpicc not found")?;
        which("mpirun").ok_or("mpirun not found")?;
        let out = Command::new("mpirun")
            .arg("--version")
            .output()
            .map_err(|e| format!("mpirun --version: {e}"))?;
        let text = String::from_utf8_lossy(&out.stdout).to_string()
            + &String::from_utf8_lossy(&out.stderr);
        let version = text
            .lines()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("unknown MPI")
            .trim()
            .to_string();
        std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
        let src = dir.join("mpi_harness.c");
        let harness = dir.join("mpi_harness");
        std::fs::write(&src, SOURCE).map_err(|e| e.to_string())?;
        let st = Command::new(&mpicc)
            .args(["-O2", "-o"])
            .arg(&harness)
            .arg(&src)
            .arg("-lm")
            .output()
            .map_err(|e| format!("mpicc: {e}"))?;
        if !st.status.success() {
            return Err(format!(
                "mpicc failed: {}",
                String::from_utf8_lossy(&st.stderr).trim()
            ));
        }
        // SAFETY: geteuid has no preconditions.
        let root = unsafe { libc::geteuid() } == 0;
        Ok(Mpi {
            open_mpi: version.contains("Open MPI"),
            version,
            mpicc,
            harness,
            root,
        })
    }

    /// The user's `mpicc`.
    pub fn mpicc(&self) -> &Path {
        &self.mpicc
    }

    /// `mpirun` starting `program` on `np` processes over `net` (the arguments follow),
    /// stopped after `timeout`.
    pub fn command(&self, np: u32, net: MpiNet, timeout: Duration, program: &Path) -> Command {
        let mut cmd = Command::new("timeout");
        cmd.arg(format!("{}", timeout.as_secs().max(1)))
            .arg("mpirun");
        if self.root {
            cmd.arg("--allow-run-as-root");
        }
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as u32;
        if self.open_mpi {
            if np > cores {
                cmd.arg("--oversubscribe");
            }
            // The ob1 messaging layer with an explicit transport, so the row measures
            // what its label says.
            cmd.args(["--mca", "pml", "ob1", "--mca", "btl"]);
            cmd.arg(match net {
                MpiNet::Shm => "self,vader",
                MpiNet::Tcp => "self,tcp",
            });
            if net == MpiNet::Tcp {
                cmd.args(["--mca", "btl_tcp_if_include", "lo"]);
            }
        }
        cmd.arg("-np").arg(np.to_string()).arg(program);
        cmd
    }

    /// Runs `job` under `timeout`: a summary per size.
    pub fn run(&self, job: &MpiJob, timeout: Duration) -> Result<Vec<MpiPoint>, String> {
        let MpiJob {
            kind,
            np,
            net,
            warmup,
            iters,
            extra,
            sizes,
        } = job;
        let (np, net) = (*np, *net);
        let cmd = self.command(np, net, timeout, &self.harness);
        let args = (kind.as_str(), *warmup, *iters, *extra, sizes.as_slice());
        harness_points(cmd, args, &format!("over {}", net.label()))
    }
}

/// Open MPI across the hosts of a test bed: `mpirun` in the first host's network namespace
/// with `hosts`' slots, the other host's daemon started through the remote shell `rsh`,
/// TCP (`ob1`, `self,tcp`) restricted to the test bed's `subnet`, and no binding (mpirun
/// takes each namespace for a node, and would bind every rank to core 0).
#[derive(Clone, Debug)]
pub struct MpiAcross {
    pub netns: String,
    /// `host:slots` each.
    pub hosts: Vec<String>,
    pub rsh: PathBuf,
    pub subnet: String,
    /// The CPUs of each host (`taskset -c` lists): mpirun and the first host's rank run on
    /// the first, the other host's daemon and rank on the second.
    pub cpus: [String; 2],
}

impl Mpi {
    /// [`Mpi::run`] across the hosts of `a` (Open MPI only).
    #[allow(clippy::too_many_arguments)]
    pub fn run_across(
        &self,
        kind: &str,
        np: u32,
        warmup: usize,
        iters: usize,
        extra: f64,
        sizes: &[usize],
        timeout: Duration,
        a: &MpiAcross,
    ) -> Result<Vec<MpiPoint>, String> {
        if !self.open_mpi {
            return Err("only Open MPI's mpirun is driven across hosts".into());
        }
        let mut cmd = Command::new("ip");
        cmd.args([
            "netns", "exec", &a.netns, "taskset", "-c", &a.cpus[0], "timeout",
        ])
        .arg(format!("{}", timeout.as_secs().max(1)))
        .arg("mpirun");
        if self.root {
            cmd.arg("--allow-run-as-root");
        }
        cmd.arg("--mca")
            .arg("plm_rsh_agent")
            .arg(format!("taskset -c {} {}", a.cpus[1], a.rsh.display()))
            .arg("-H")
            .arg(a.hosts.join(","))
            .args([
                "--bind-to",
                "none",
                "--mca",
                "pml",
                "ob1",
                "--mca",
                "btl",
                "self,tcp",
            ])
            .args(["--mca", "btl_tcp_if_include", &a.subnet])
            .args(["--mca", "oob_tcp_if_include", &a.subnet])
            .args(["--mca", "btl_tcp_disable_family", "6"]);
        cmd.arg("-np").arg(np.to_string()).arg(&self.harness);
        harness_points(cmd, (kind, warmup, iters, extra, sizes), "across hosts")
    }
}

/// Runs the harness by `cmd` (mpirun up to the program's name) with its arguments (kind,
/// warm-up, iterations, extra, sizes): a summary per size, or why not, with the first
/// lines mpirun wrote (`place` says where it ran).
fn harness_points(
    mut cmd: Command,
    (kind, warmup, iters, extra, sizes): (&str, usize, usize, f64, &[usize]),
    place: &str,
) -> Result<Vec<MpiPoint>, String> {
    cmd.arg(kind)
        .arg(warmup.to_string())
        .arg(iters.to_string())
        .arg(format!("{extra}"));
    cmd.args(sizes.iter().map(|s| s.to_string()));
    let out = cmd.output().map_err(|e| format!("mpirun: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let points: Vec<MpiPoint> = text.lines().filter_map(parse).collect();
    if !out.status.success() || points.len() != sizes.len() {
        return Err(format!(
            "mpirun {kind} {place} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
                .lines()
                .filter(|l| !l.trim().is_empty() && !l.starts_with("---"))
                .take(3)
                .collect::<Vec<_>>()
                .join(" / ")
        ));
    }
    Ok(points)
}

fn parse(line: &str) -> Option<MpiPoint> {
    let f: Vec<&str> = line.split_whitespace().collect();
    if !(f.len() == 10 || f.len() == 13) || f[0] != "RESULT" {
        return None;
    }
    let num = |i: usize| f[i].parse::<f64>().ok();
    let steps = if f.len() == 13 {
        Some(Spread {
            best: num(10)?,
            median: num(11)?,
            p90: num(12)?,
        })
    } else {
        None
    };
    Some(MpiPoint {
        kind: f[1].to_string(),
        size: f[2].parse().ok()?,
        nprocs: f[3].parse().ok()?,
        n: f[4].parse().ok()?,
        min: num(5)?,
        mean: num(6)?,
        max: num(7)?,
        std_dev: num(8)?,
        median: num(9)?,
        steps,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_result_lines_only() {
        let p = parse("RESULT latency 8 2 1000 2.4e-07 5.1e-07 7.0e-06 2.2e-07 4.9e-07").unwrap();
        assert_eq!(
            (p.kind.as_str(), p.size, p.nprocs, p.n),
            ("latency", 8, 2, 1000)
        );
        assert_eq!(p.median, 4.9e-07);
        assert!(parse("RESULT latency 8 2").is_none());
        assert!(parse("warning: something").is_none());
        assert!(parse("RESULT latency x 2 1 1 1 1 1 1").is_none());
        assert_eq!(p.steps, None);
        let s = parse("RESULT alltoall-loop 65536 2 3 1e-5 2e-5 3e-5 1e-6 2e-5 8e-6 1.5e-5 4e-5")
            .unwrap();
        assert_eq!(
            s.steps,
            Some(Spread {
                best: 8e-6,
                median: 1.5e-5,
                p90: 4e-5
            })
        );
        assert!(parse("RESULT alltoall-loop 65536 2 3 1e-5 2e-5 3e-5 1e-6 2e-5 8e-6").is_none());
    }
}
