//! The NAS kernels of `apps/npb` as jobs of `bwbench apps`: their sources (carried in the
//! binary, so that `bwbench` builds them wherever it runs), the build with the suite's
//! `bspcc` and the user's `mpicc`, one run of a kernel over BSPlib (profiled,
//! `BULKWIRE_PROFILE`) or MPI, and what the run printed (its `BWNPB` lines).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde::Serialize;

use crate::mpi::{Mpi, MpiNet};
use crate::profile::{Analysis, HClass};
use crate::stack::{self, Faults, Stack, Transport};

/// Every file the Makefile builds from, by its path under `apps/npb`.
pub const SOURCES: &[(&str, &str)] = &[
    ("Makefile", include_str!("../../../apps/npb/Makefile")),
    ("cg/cg.c", include_str!("../../../apps/npb/cg/cg.c")),
    ("cg/cg.h", include_str!("../../../apps/npb/cg/cg.h")),
    ("cg/cg_bsp.c", include_str!("../../../apps/npb/cg/cg_bsp.c")),
    ("cg/cg_mpi.c", include_str!("../../../apps/npb/cg/cg_mpi.c")),
    (
        "common/comm.h",
        include_str!("../../../apps/npb/common/comm.h"),
    ),
    (
        "common/comm_bsp.c",
        include_str!("../../../apps/npb/common/comm_bsp.c"),
    ),
    (
        "common/comm_mpi.c",
        include_str!("../../../apps/npb/common/comm_mpi.c"),
    ),
    (
        "common/npb.c",
        include_str!("../../../apps/npb/common/npb.c"),
    ),
    (
        "common/npb.h",
        include_str!("../../../apps/npb/common/npb.h"),
    ),
    ("ep/ep.c", include_str!("../../../apps/npb/ep/ep.c")),
    ("ep/ep.h", include_str!("../../../apps/npb/ep/ep.h")),
    ("ft/ft.c", include_str!("../../../apps/npb/ft/ft.c")),
    ("ft/ft.h", include_str!("../../../apps/npb/ft/ft.h")),
    ("ft/ft_bsp.c", include_str!("../../../apps/npb/ft/ft_bsp.c")),
    ("ft/ft_mpi.c", include_str!("../../../apps/npb/ft/ft_mpi.c")),
    ("is/is.c", include_str!("../../../apps/npb/is/is.c")),
    ("is/is.h", include_str!("../../../apps/npb/is/is.h")),
    ("is/is_bsp.c", include_str!("../../../apps/npb/is/is_bsp.c")),
    ("is/is_mpi.c", include_str!("../../../apps/npb/is/is_mpi.c")),
    ("mg/mg.c", include_str!("../../../apps/npb/mg/mg.c")),
    ("mg/mg.h", include_str!("../../../apps/npb/mg/mg.h")),
    ("mg/mg_bsp.c", include_str!("../../../apps/npb/mg/mg_bsp.c")),
    ("mg/mg_mpi.c", include_str!("../../../apps/npb/mg/mg_mpi.c")),
];

/// A NAS kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum Kernel {
    Is,
    Ep,
    Cg,
    Mg,
    Ft,
}

impl Kernel {
    pub const ALL: [Kernel; 5] = [Kernel::Is, Kernel::Ep, Kernel::Cg, Kernel::Mg, Kernel::Ft];

    /// The name of its directory and programs: `is`.
    pub fn name(self) -> &'static str {
        match self {
            Kernel::Is => "is",
            Kernel::Ep => "ep",
            Kernel::Cg => "cg",
            Kernel::Mg => "mg",
            Kernel::Ft => "ft",
        }
    }

    /// As NPB and the reports name it: `IS`.
    pub fn label(self) -> &'static str {
        match self {
            Kernel::Is => "IS",
            Kernel::Ep => "EP",
            Kernel::Cg => "CG",
            Kernel::Mg => "MG",
            Kernel::Ft => "FT",
        }
    }

    /// Seconds of one run at p = 2 here, roughly, for the progress bar's estimate.
    pub fn seconds(self, class: Class) -> f64 {
        let s = match self {
            Kernel::Is => [0.02, 0.1, 0.8],
            Kernel::Ep => [0.15, 0.8, 12.0],
            Kernel::Cg => [0.05, 0.5, 3.0],
            Kernel::Mg => [0.03, 0.3, 3.0],
            Kernel::Ft => [0.05, 0.3, 6.0],
        };
        match class {
            Class::S => s[0],
            Class::W => s[1],
            Class::A => s[2],
        }
    }
}

/// A problem class (NPB's: the sizes are compiled in).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum Class {
    S,
    W,
    A,
}

impl Class {
    pub fn letter(self) -> char {
        match self {
            Class::S => 'S',
            Class::W => 'W',
            Class::A => 'A',
        }
    }
}

/// Which version of a kernel runs, over what.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Side {
    /// The BSPlib version over a bulkwire transport.
    Bsp(Transport),
    /// The MPI version over the user's MPI.
    Mpi(MpiNet),
}

impl Side {
    /// "BSP utopia/shm", "MPI TCP".
    pub fn label(self) -> String {
        match self {
            Side::Bsp(t) => format!("BSP {}", t.label()),
            Side::Mpi(n) => format!("MPI {}", n.label()),
        }
    }

    fn suffix(self) -> &'static str {
        match self {
            Side::Bsp(_) => "bsp",
            Side::Mpi(_) => "mpi",
        }
    }
}

/// The programs, built in a directory of their own.
#[derive(Clone, Debug)]
pub struct Built {
    pub bin: PathBuf,
    pub class: Class,
    /// The BSP versions were built, or why not.
    pub bsp: Result<(), String>,
    /// The MPI versions were built, or why not (no MPI, or mpicc failed).
    pub mpi: Result<(), String>,
}

impl Built {
    /// The program of `kernel` for `side`, if it was built.
    pub fn program(&self, kernel: Kernel, side: Side) -> Result<PathBuf, String> {
        match side {
            Side::Bsp(_) => self.bsp.clone(),
            Side::Mpi(_) => self.mpi.clone(),
        }
        .map_err(|e| format!("not built: {e}"))?;
        Ok(program(&self.bin, kernel, self.class, side))
    }
}

fn program(bin: &Path, kernel: Kernel, class: Class, side: Side) -> PathBuf {
    bin.join(format!(
        "{}.{}.{}",
        kernel.name(),
        class.letter(),
        side.suffix()
    ))
}

/// Writes the sources into `dir/src` and builds `kernels` of `class` there with the
/// Makefile: the BSP versions with `bspcc`, the MPI ones with `mpicc` (when given; else
/// `no_mpi` says why there are none). The BSP and MPI versions are built apart, so that
/// one failing leaves the other.
pub fn build(
    dir: &Path,
    class: Class,
    kernels: &[Kernel],
    bspcc: &Path,
    mpicc: Result<&Path, String>,
) -> Built {
    let src = dir.join("src");
    let bin = dir.join("bin");
    let written = SOURCES.iter().try_for_each(|(path, text)| {
        let p = src.join(path);
        std::fs::create_dir_all(p.parent().expect("a file in a directory"))?;
        std::fs::write(p, text)
    });
    let make = |side: Side, cc: &Path| -> Result<(), String> {
        written
            .as_ref()
            .map_err(|e| format!("cannot write the sources into {}: {e}", src.display()))?;
        let targets = kernels.iter().map(|&k| program(&bin, k, class, side));
        let out = Command::new("make")
            .arg("-C")
            .arg(&src)
            .arg("-j2")
            .arg(format!("CLASS={}", class.letter()))
            .arg(format!("BSPCC={}", bspcc.display()))
            .arg(format!("MPICC={}", cc.display()))
            .arg(format!("BIN={}", bin.display()))
            .arg(format!("BUILDDIR={}", dir.join("build").display()))
            .args(targets)
            .output()
            .map_err(|e| format!("make: {e}"))?;
        if out.status.success() {
            return Ok(());
        }
        let err = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = err.lines().rev().take(4).collect();
        Err(format!(
            "make of the {} versions failed ({}): {}",
            side.suffix(),
            out.status,
            tail.into_iter().rev().collect::<Vec<_>>().join(" / ")
        ))
    };
    let bsp = if bspcc.is_file() {
        make(Side::Bsp(Transport::kernel_tcp()), bspcc)
    } else {
        Err(format!(
            "{} not found (build it: cargo build --release -p bulkwire-tools -p bulkwire-capi)",
            bspcc.display()
        ))
    };
    let mpi = mpicc.and_then(|cc| make(Side::Mpi(MpiNet::Shm), cc));
    Built {
        bin,
        class,
        bsp,
        mpi,
    }
}

/// A kernel's `BWNPB` line: what one run measured.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Line {
    pub kernel: String,
    pub np: u32,
    /// The timed section of the slowest process, seconds.
    pub time: f64,
    /// Mean over processes of the time in the library's calls, seconds.
    pub comm: f64,
    pub comp: f64,
    /// Mop/s in total.
    pub mops: f64,
    pub verified: bool,
}

/// Reads the `BWNPB` line of a run's output.
pub fn parse_line(out: &str) -> Result<Line, String> {
    let line = out
        .lines()
        .find(|l| l.starts_with("BWNPB "))
        .ok_or("the program printed no BWNPB line")?;
    let field = |k: &str| {
        line.split_whitespace()
            .find_map(|kv| kv.strip_prefix(k)?.strip_prefix('='))
            .ok_or_else(|| format!("no {k} in {line:?}"))
    };
    let num = |k: &str| -> Result<f64, String> {
        field(k)?
            .parse::<f64>()
            .ok()
            .filter(|x| x.is_finite())
            .ok_or_else(|| format!("{k} is not a number in {line:?}"))
    };
    Ok(Line {
        kernel: field("kernel")?.to_string(),
        np: field("np")?
            .parse()
            .map_err(|_| format!("np is not a count in {line:?}"))?,
        time: num("time")?,
        comm: num("comm")?,
        comp: num("comp")?,
        mops: num("mops")?,
        verified: field("verified")? == "1",
    })
}

/// The communication time by exchange (`BWNPB-COMM`): name, mean seconds, calls.
pub fn parse_exchanges(out: &str) -> Vec<(String, f64, u64)> {
    let Some(line) = out.lines().find(|l| l.starts_with("BWNPB-COMM ")) else {
        return Vec::new();
    };
    line.split_whitespace()
        .skip(1)
        .filter_map(|kv| {
            let (k, v) = kv.split_once('=')?;
            let (secs, calls) = v.split_once('/')?;
            Some((k.to_string(), secs.parse().ok()?, calls.parse().ok()?))
        })
        .collect()
}

/// The profile of a BSP run, summed up for the report.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ProfileFigures {
    pub supersteps: usize,
    /// W, H (words) and the longest process's time, seconds.
    pub w: f64,
    pub h_words: u64,
    pub measured: f64,
    /// Mean over processes of the time in bsp_sync, seconds.
    pub sync: f64,
    /// Every process's packets, added up (the BSPlib paper's Table 5).
    pub data_sent: u64,
    pub data_received: u64,
    pub acks_sent: u64,
    pub implicit_acks: u64,
    pub retransmits: u64,
    pub duplicates: u64,
    pub drops: u64,
    /// The supersteps by h, costliest first: label, supersteps, mean seconds in sync,
    /// words.
    pub by_h: Vec<(String, usize, f64, u64)>,
}

impl ProfileFigures {
    pub fn of(a: &Analysis) -> ProfileFigures {
        let c = a.cost(None);
        let t = a.total();
        ProfileFigures {
            supersteps: c.s,
            w: c.w,
            h_words: c.h,
            measured: c.measured,
            sync: a.sync_mean(),
            data_sent: t.data_sent,
            data_received: t.data_received,
            acks_sent: t.acks_sent,
            implicit_acks: t.implicit_acks,
            retransmits: t.retransmits,
            duplicates: t.duplicates,
            drops: t.drops,
            by_h: a
                .by_h()
                .iter()
                .map(|c: &HClass| (c.label(), c.steps, c.sync_mean, c.h_words))
                .collect(),
        }
    }
}

/// One run of a kernel.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct NpbRun {
    pub kernel: Kernel,
    pub class: Class,
    pub p: u32,
    pub side: Side,
    pub line: Line,
    pub exchanges: Vec<(String, f64, u64)>,
    /// BSP runs: their cost profile.
    pub profile: Option<ProfileFigures>,
}

static SERIAL: AtomicU64 = AtomicU64::new(0);

/// Runs `kernel` as built in `built` on `p` processes over `side`, stopped after
/// `timeout`; BSP runs are profiled in `dir`. `Err` says why there is no figure (the run
/// failed, or its result was not verified).
pub fn run(
    built: &Built,
    kernel: Kernel,
    p: u32,
    side: Side,
    tools: &Tools<'_>,
    timeout: Duration,
) -> Result<NpbRun, String> {
    let prog = built.program(kernel, side)?;
    let prof = tools.dir.join(format!(
        "prof-{}-{}",
        std::process::id(),
        SERIAL.fetch_add(1, Ordering::Relaxed)
    ));
    let mut cmd = match side {
        Side::Bsp(t) => {
            let mut c = Command::new(tools.bsprun);
            c.arg("-n")
                .arg(p.to_string())
                .arg("--timeout")
                .arg(timeout.as_secs().max(1).to_string())
                .arg("--profile")
                .arg(&prof)
                .arg(&prog);
            c.envs(stack::env(&Stack::Bsp(t.check()?), &Faults::none()));
            c
        }
        Side::Mpi(net) => tools.mpi.ok_or("no MPI")?.command(p, net, timeout, &prog),
    };
    let out = cmd
        .output()
        .map_err(|e| format!("{}: {e}", prog.display()))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let profile = match side {
        Side::Bsp(_) => Some(read_profile(&prof, p)),
        Side::Mpi(_) => None,
    };
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = err.lines().rev().take(3).collect();
        return Err(format!(
            "{} ({}): {}",
            prog.display(),
            out.status,
            tail.into_iter().rev().collect::<Vec<_>>().join(" / ")
        ));
    }
    let line = parse_line(&stdout)?;
    if !line.verified {
        return Err(format!(
            "{}: the result was not verified (Verification = UNSUCCESSFUL)",
            prog.display()
        ));
    }
    Ok(NpbRun {
        kernel,
        class: built.class,
        p,
        side,
        line,
        exchanges: parse_exchanges(&stdout),
        profile: profile.transpose()?,
    })
}

/// Reads and removes the profile of a run of `p` processes.
fn read_profile(base: &Path, p: u32) -> Result<ProfileFigures, String> {
    let a = crate::profile::load(base);
    for pid in 0..p {
        let _ = std::fs::remove_file(bulkwire_bsp::profile::path_of(base, pid));
    }
    Ok(ProfileFigures::of(
        &a.map_err(|e| format!("its profile: {e}"))?,
    ))
}

/// What runs the kernels: `bsprun`, the user's MPI, and a directory for profiles.
pub struct Tools<'a> {
    pub bsprun: &'a Path,
    pub mpi: Option<&'a Mpi>,
    pub dir: &'a Path,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_source_of_the_makefile_is_carried() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../apps/npb");
        let mut on_disk = Vec::new();
        for k in ["common"].into_iter().chain(Kernel::ALL.map(Kernel::name)) {
            for e in std::fs::read_dir(root.join(k)).unwrap() {
                let name = e.unwrap().file_name().into_string().unwrap();
                if name.ends_with(".c") || name.ends_with(".h") {
                    on_disk.push(format!("{k}/{name}"));
                }
            }
        }
        on_disk.push("Makefile".into());
        on_disk.sort();
        let carried: Vec<&str> = SOURCES.iter().map(|s| s.0).collect();
        assert_eq!(carried, on_disk);
    }

    #[test]
    fn bwnpb_lines_parse() {
        let out = "CG Benchmark Completed.\n\
            BWNPB kernel=CG class=S impl=bsp np=2 time=0.085926 comm=0.043671 comp=0.042255 verified=1 mops=775.713\n\
            BWNPB-COMM kernel=CG class=S impl=bsp np=2 rowsum=0.011214/795 matvec=0.032457/390\n";
        let l = parse_line(out).unwrap();
        assert_eq!((l.kernel.as_str(), l.np, l.verified), ("CG", 2, true));
        assert_eq!((l.time, l.comm, l.mops), (0.085926, 0.043671, 775.713));
        assert_eq!(
            parse_exchanges(out),
            [
                ("rowsum".to_string(), 0.011214, 795),
                ("matvec".to_string(), 0.032457, 390)
            ]
        );
        assert!(parse_line("nothing").unwrap_err().contains("no BWNPB"));
        let bad = "BWNPB kernel=CG np=2 time=x comm=0 comp=0 verified=1 mops=1";
        assert!(
            parse_line(bad)
                .unwrap_err()
                .contains("time is not a number")
        );
        let unverified = out.replace("verified=1", "verified=0");
        assert!(!parse_line(&unverified).unwrap().verified);
    }

    #[test]
    fn programs_are_named_as_the_makefile_names_them() {
        let b = Built {
            bin: "/x/bin".into(),
            class: Class::W,
            bsp: Ok(()),
            mpi: Err("mpicc not found".into()),
        };
        let t = Transport::udp(crate::stack::Protocol::Holefill);
        assert_eq!(
            b.program(Kernel::Mg, Side::Bsp(t)).unwrap(),
            PathBuf::from("/x/bin/mg.W.bsp")
        );
        let e = b.program(Kernel::Mg, Side::Mpi(MpiNet::Tcp)).unwrap_err();
        assert_eq!(e, "not built: mpicc not found");
        assert_eq!(Side::Bsp(t).label(), "BSP holefill/udp");
        assert_eq!(Side::Mpi(MpiNet::Shm).label(), "MPI shm");
    }
}
