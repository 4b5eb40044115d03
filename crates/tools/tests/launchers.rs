//! BSPlib programs started by the launchers people already have, with no extra step: Open
//! MPI's `mpirun` (the job forms through PMIx, libpmix loaded at run time), MPICH's
//! `mpiexec.hydra` (the PMI-1 wire protocol on `PMI_FD`), and processes started as `srun`
//! starts them without PMI (rank 0 serves at the first host of the node list, on ports
//! derived from the job id). Each job of 4 passes the conformance programs and fails
//! cleanly, naming the rank, when one dies. A launcher that is not installed is skipped
//! with a message.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

mod common;
#[path = "common/launch.rs"]
mod launch;

use bulkwire_launch::testing::{self, Out};
use launch::{LIMIT, hydra, mpirun, run, srun_job, srun_like, which};

/// Compiles `tests/c/NAME.c` once per run.
fn program(name: &str) -> PathBuf {
    common::bspcc_program("launchers", name)
}

fn conformance(launch: impl Fn(&Path, &[(&str, &str)]) -> Option<(Command, String)>, boot: &str) {
    for name in ["drma", "bsmp"] {
        let prog = program(name);
        let Some(c) = launch(&prog, &[("BULKWIRE_BOOTSTRAP", boot)]) else {
            return;
        };
        let o = run(c);
        assert_eq!(o.code, Some(0), "{name} through {boot}: {o:?}");
        assert_eq!(
            o.stdout.matches(&format!("{name} ok p=4")).count(),
            1,
            "{o:?}"
        );
    }
}

/// A job of 4 under a foreign launcher is one BSP job, whichever way the program starts
/// its section: `bsp_init` (main's code after it runs on pid 0 only, the SPMD function on
/// every task) or `bsp_begin(P)` with P up to the job's size (the first P tasks). Each
/// result line is printed once: no task starts a job of its own.
fn one_job(launch: impl Fn(&Path, &[&str]) -> Option<(Command, String)>, what: &str) {
    for (name, args, result) in [
        ("init", &["4"][..], "init ok p=4"),
        ("init", &["2"][..], "init ok p=2"),
        ("drma", &["2", "2"][..], "drma ok p=2"),
    ] {
        let Some(c) = launch(&program(name), args) else {
            return;
        };
        let o = run(c);
        assert_eq!(o.code, Some(0), "{name} {args:?} under {what}: {o:?}");
        let count = |l: &str| o.stdout.lines().filter(|x| *x == l).count();
        assert_eq!(count(result), 1, "{name} {args:?} under {what}: {o:?}");
        if name == "init" {
            assert_eq!(count("sequential start"), 1, "{what}: {o:?}");
            assert_eq!(count("sequential end"), 1, "{what}: {o:?}");
        }
    }
}

#[test]
fn bsp_init_and_bsp_begin_programs_join_the_job_of_mpirun_and_mpiexec() {
    one_job(|p, args| mpirun(4, p, args, &[]), "mpirun -np 4");
    one_job(|p, args| hydra(4, p, args, &[]), "mpiexec -n 4");
}

/// bsp_abort under mpirun and mpiexec: the rendezvous in rank 0 prints the message once,
/// in one line naming the rank, before the launcher ends the job.
#[test]
fn an_abort_under_mpirun_or_mpiexec_is_printed_once() {
    for (what, launch) in [
        (
            "mpirun -np 3",
            mpirun as fn(u32, &Path, &[&str], &[(&str, &str)]) -> _,
        ),
        ("mpiexec -n 3", hydra),
    ] {
        let Some(c) = launch(3, &program("abort_main"), &["3"], &[]) else {
            continue;
        };
        let o = run(c);
        assert!(o.code.is_some_and(|c| c != 0), "{what}: {o:?}");
        let all = format!("{}{}", o.stdout, o.stderr);
        let line = "abort_main: rank 1 aborted: stopped by pid 1";
        assert_eq!(
            all.lines().filter(|l| l.ends_with(line)).count(),
            1,
            "{what}: {all}"
        );
        assert_eq!(all.matches("stopped by pid").count(), 1, "{what}: {all}");
        assert!(!all.contains("back in main"), "{what}: {all}");
    }
}

/// Nested sections in a job of another launcher: each of its two tasks begins a nested
/// section of its own (new processes it starts itself) and returns to the outer one.
#[test]
fn nested_sections_run_under_mpirun_and_mpiexec() {
    for (what, launch) in [
        (
            "mpirun -np 2",
            mpirun as fn(u32, &Path, &[&str], &[(&str, &str)]) -> _,
        ),
        ("mpiexec -n 2", hydra),
    ] {
        let Some(c) = launch(2, &program("nested"), &["3"], &[]) else {
            continue;
        };
        let o = run(c);
        assert_eq!(o.code, Some(0), "{what}: {o:?}");
        let count = |l: &str| o.stdout.lines().filter(|x| *x == l).count();
        for l in [
            "outer 0: inner 3 ok sum 3",
            "outer 1: inner 3 ok sum 303",
            "outer 0 ok p=2",
            "outer 1 ok p=2",
            "nested done",
        ] {
            assert_eq!(count(l), 1, "{what}: {l:?} in {o:?}");
        }
    }
}

/// As srun starts them (without PMI): four tasks, one job, one result line among them.
#[test]
fn bsp_init_programs_join_the_job_of_srun() {
    let job = format!("{}i", std::process::id());
    let outs = srun_job(4, &job, &program("init"), &["4"]);
    for (r, o) in outs.iter().enumerate() {
        assert_eq!(o.code, Some(0), "rank {r}: {o:?}");
    }
    let all: String = outs.iter().map(|o| o.stdout.as_str()).collect();
    assert_eq!(
        all.lines().filter(|l| *l == "init ok p=4").count(),
        1,
        "{all}"
    );
    assert_eq!(
        all.lines().filter(|l| *l == "sequential start").count(),
        1,
        "{all}"
    );
}

/// A job of 4 in which rank 3 kills itself: the launcher's status is non-zero, rank 3 is
/// named (`names`: by the launcher's message or by the rendezvous in rank 0), and the
/// rendezvous prints its line at most once: the launcher may end rank 0 before it can.
fn a_death(names: &str, launch: impl Fn(&Path, &[&str]) -> Option<(Command, String)>) {
    let prog = program("crash");
    let Some(c) = launch(&prog, &["self", "3", "4"]) else {
        return;
    };
    let o = run(c);
    assert!(o.code.is_some_and(|c| c != 0), "{o:?}");
    // Open MPI relays the ranks' stderr and its own messages partly on stdout.
    let all = format!("{}{}", o.stdout, o.stderr);
    let ours = "rank 3 lost its control connection before finishing";
    assert!(all.matches(ours).count() <= 1, "{all}");
    assert!(all.contains(names), "{all}");
    assert!(!o.stdout.contains("not reached"), "{o:?}");
}

#[test]
fn open_mpi_mpirun_forms_the_job_through_pmix() {
    conformance(|p, env| mpirun(4, p, &[], env), "pmix");
    // And by itself, without being told.
    conformance(|p, _| mpirun(4, p, &[], &[]), "auto");
}

#[test]
fn mpich_mpiexec_forms_the_job_through_pmi() {
    conformance(|p, env| hydra(4, p, &[], env), "pmi");
    conformance(|p, _| hydra(4, p, &[], &[]), "auto");
}

#[test]
fn a_rank_that_dies_under_mpirun_or_mpiexec_fails_the_job_naming_it() {
    // Open MPI names the rank itself ("process rank 3 ... exited on signal 9"); Hydra only
    // its pid and signal.
    a_death("rank 3", |p, args| mpirun(4, p, args, &[]));
    a_death("signal 9", |p, args| hydra(4, p, args, &[]));
    // Hydra kills every other process with SIGKILL as soon as one fails, before the
    // rendezvous in rank 0 can name it; told not to, it lets the rendezvous say it, once.
    let Some((c, m)) = hydra(4, &program("crash"), &["self", "3", "4"], &[]) else {
        return;
    };
    let args: Vec<_> = c.get_args().map(|a| a.to_owned()).collect();
    let mut keep = Command::new(c.get_program());
    keep.arg("-disable-auto-cleanup").args(args);
    for (k, v) in c.get_envs() {
        match v {
            Some(v) => keep.env(k, v),
            None => keep.env_remove(k),
        };
    }
    let o = run((keep, m));
    assert!(o.code.is_some_and(|c| c != 0), "{o:?}");
    let all = format!("{}{}", o.stdout, o.stderr);
    let ours = "rank 3 lost its control connection before finishing";
    // Never repeated by the survivors. Hydra may also stop forwarding output before the
    // rendezvous speaks (a clean-clone run printed only Hydra's "Killed (signal 9)").
    assert!(all.matches(ours).count() <= 1, "{all}");
}

#[test]
fn srun_without_pmi_forms_the_job_at_a_derived_address() {
    // A job id of this run, so that concurrent runs use other ports.
    let job = format!("{}", std::process::id());
    let outs = srun_job(4, &job, &program("drma"), &[]);
    for (r, o) in outs.iter().enumerate() {
        assert_eq!(o.code, Some(0), "rank {r}: {o:?}");
    }
    assert!(outs[0].stdout.contains("drma ok p=4"), "{:?}", outs[0]);
}

#[test]
fn a_task_that_never_starts_fails_the_job_within_the_join_deadline() {
    let prog = program("drma");
    let m = testing::mark();
    let job = format!("{}x", std::process::id());
    // Three of four tasks: the rendezvous in rank 0 names the missing one.
    let ts: Vec<_> = (0..3)
        .map(|r| {
            let mut c = srun_like(r, 4, &job, &prog, &m);
            c.env("BULKWIRE_JOIN_TIMEOUT", "2");
            std::thread::spawn(move || testing::run(&mut c, LIMIT))
        })
        .collect();
    let outs: Vec<Out> = ts.into_iter().map(|t| t.join().unwrap()).collect();
    assert!(
        outs.iter().all(|o| o.code.is_some_and(|c| c != 0)),
        "{outs:?}"
    );
    assert!(
        outs[0]
            .stderr
            .contains("the job did not form within 2 s: rank 3 has not joined"),
        "{:?}",
        outs[0]
    );
    testing::assert_no_leftovers(&m);
}

/// Rank 0, which runs the rendezvous of a job formed through another launcher, dies: the
/// survivors learn it when their control connection breaks, and one of them (rank 1)
/// says so, in one line naming rank 0 and the rendezvous' address; the others exit
/// quietly, all with a failure status. As srun starts tasks (each task's stderr is its
/// own here, so the lines are counted over all of them) and under Open MPI's mpirun, which
/// names the rank itself and may end the others before they can: at most one line there.
#[test]
fn the_death_of_rank_0_is_reported_once() {
    let prog = program("crash");
    let m = testing::mark();
    let job = format!("{}d", std::process::id());
    let ts: Vec<_> = (0..4)
        .map(|r| {
            let mut c = srun_like(r, 4, &job, &prog, &m);
            c.args(["self", "0", "4"]);
            std::thread::spawn(move || testing::run(&mut c, LIMIT))
        })
        .collect();
    let outs: Vec<Out> = ts.into_iter().map(|t| t.join().unwrap()).collect();
    let all: String = outs.iter().map(|o| o.stderr.as_str()).collect();
    // Rank 0 by its signal, the others with a status.
    assert!(outs.iter().all(|o| o.code != Some(0)), "{outs:?}");
    let line = "rank 0 is gone: it ran the job's rendezvous";
    assert_eq!(all.matches(line).count(), 1, "{all}");
    assert!(outs[1].stderr.contains(line), "{outs:?}");
    // Each line whole: the line naming rank 0 ends where its own text does.
    for l in all.lines().filter(|l| l.contains(line)) {
        assert!(l.contains("(rendezvous 127.0.0.1:"), "{l}");
        assert_eq!(l.matches("rank 0 is gone").count(), 1, "{l}");
    }
    testing::assert_no_leftovers(&m);
    if let Some(c) = mpirun(4, &prog, &["self", "0", "4"], &[]) {
        let o = run(c);
        assert!(o.code.is_some_and(|c| c != 0), "{o:?}");
        let all = format!("{}{}", o.stdout, o.stderr);
        assert!(all.matches(line).count() <= 1, "{all}");
        assert!(all.contains("rank 0"), "{all}");
    }
}

/// A one-host Slurm of our own (munged, slurmctld and slurmd as root, in a directory of
/// the test, on ports of its own); stopped and removed when dropped.
struct Slurm {
    dir: PathBuf,
}

impl Slurm {
    fn start() -> Option<Slurm> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("skipped: a private Slurm needs root");
            return None;
        }
        let tools = ["munged", "slurmctld", "slurmd", "srun", "sinfo"];
        if let Some(t) = tools
            .iter()
            .find(|t| which(t).is_none() && !Path::new("/usr/sbin").join(t).exists())
        {
            eprintln!("skipped: {t} is not installed (Debian: munge, slurm-wlm)");
            return None;
        }
        let dir =
            Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("slurm-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("state")).ok()?;
        std::fs::create_dir_all(dir.join("spool")).ok()?;
        let s = Slurm { dir };
        match s.boot() {
            Ok(()) => Some(s),
            Err(e) => {
                eprintln!("skipped: cannot start a private Slurm ({e})");
                None
            }
        }
    }

    fn boot(&self) -> Result<(), String> {
        let d = self.dir.display().to_string();
        let key: Vec<u8> = (0..1024u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        let keyfile = self.dir.join("munge.key");
        std::fs::write(&keyfile, key).map_err(|e| e.to_string())?;
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&keyfile, std::fs::Permissions::from_mode(0o400))
            .map_err(|e| e.to_string())?;
        let host = bulkwire_launch::hostname();
        let port = 20_000 + (std::process::id() % 10_000) as u16 * 2;
        let conf = format!(
            "ClusterName=bwtest\nSlurmctldHost={host}\nSlurmctldPort={port}\nSlurmdPort={}\n\
             AuthType=auth/munge\nAuthInfo=socket={d}/munge.sock\nCredType=cred/munge\n\
             SlurmUser=root\nSlurmdUser=root\nStateSaveLocation={d}/state\n\
             SlurmdSpoolDir={d}/spool\nSlurmctldPidFile={d}/slurmctld.pid\n\
             SlurmdPidFile={d}/slurmd.pid\nSlurmctldLogFile={d}/slurmctld.log\n\
             SlurmdLogFile={d}/slurmd.log\nProctrackType=proctrack/linuxproc\n\
             TaskPlugin=task/none\nSelectType=select/cons_tres\nSelectTypeParameters=CR_Core\n\
             SchedulerType=sched/builtin\nMpiDefault=none\nReturnToService=2\n\
             JobAcctGatherType=jobacct_gather/none\n\
             AccountingStorageType=accounting_storage/none\n\
             NodeName={host} CPUs={} State=UNKNOWN\n\
             PartitionName=bwtest Nodes={host} Default=YES MaxTime=INFINITE State=UP\n",
            port + 1,
            std::thread::available_parallelism().map_or(1, |n| n.get())
        );
        std::fs::write(self.dir.join("slurm.conf"), conf).map_err(|e| e.to_string())?;
        let daemon = |cmd: &mut Command| -> Result<(), String> {
            let o = cmd
                .env("SLURM_CONF", self.dir.join("slurm.conf"))
                .output()
                .map_err(|e| e.to_string())?;
            if o.status.success() {
                Ok(())
            } else {
                Err(format!(
                    "{cmd:?}: {}",
                    String::from_utf8_lossy(&o.stderr).trim()
                ))
            }
        };
        daemon(Command::new("munged").args([
            "--force".into(),
            format!("--key-file={d}/munge.key"),
            format!("--socket={d}/munge.sock"),
            format!("--pid-file={d}/munged.pid"),
            format!("--log-file={d}/munged.log"),
            format!("--seed-file={d}/munge.seed"),
        ]))?;
        daemon(Command::new("slurmctld").arg("-c"))?;
        daemon(&mut Command::new("slurmd"))?;
        for _ in 0..100 {
            let o = self
                .cmd("sinfo")
                .args(["-h", "-o", "%t"])
                .output()
                .map_err(|e| e.to_string())?;
            if String::from_utf8_lossy(&o.stdout).trim() == "idle" {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        Err("the node did not become idle within 20 s".into())
    }

    /// A Slurm command of this cluster.
    fn cmd(&self, c: &str) -> Command {
        let mut cmd = Command::new(c);
        cmd.env("SLURM_CONF", self.dir.join("slurm.conf"));
        cmd
    }

    /// `srun -n 4` (more tasks than cores allowed) with `--mpi=mpi`; without PMI
    /// (`none`), with the user's key that the derived rendezvous needs in the environment
    /// srun passes on, as a user exports it.
    fn srun(&self, mpi: &str, prog: &Path, args: &[&str]) -> (Command, String) {
        let (mut c, m) = self.srun_keyless(mpi, prog, args);
        if mpi == "none" {
            c.env("BULKWIRE_SECRET", "5eed".repeat(16));
        }
        (c, m)
    }

    /// [`Slurm::srun`] without a user key.
    fn srun_keyless(&self, mpi: &str, prog: &Path, args: &[&str]) -> (Command, String) {
        let m = testing::mark();
        let mut c = self.cmd("srun");
        testing::clean(&mut c, &m);
        c.env("SLURM_CONF", self.dir.join("slurm.conf"));
        c.args([
            "--overcommit",
            "-n",
            "4",
            "--time",
            "2",
            &format!("--mpi={mpi}"),
        ])
        .arg(prog)
        .args(args);
        (c, m)
    }
}

impl Drop for Slurm {
    fn drop(&mut self) {
        let pids: Vec<i32> = ["slurmd", "slurmctld", "munged"]
            .iter()
            .filter_map(|d| std::fs::read_to_string(self.dir.join(format!("{d}.pid"))).ok())
            .filter_map(|p| p.trim().parse().ok())
            .collect();
        // A daemon is gone once /proc has no live process of that pid (a zombie waits
        // for init).
        let alive = |p: i32| {
            std::fs::read_to_string(format!("/proc/{p}/stat")).is_ok_and(|s| {
                !s.rsplit(')')
                    .next()
                    .unwrap_or("")
                    .trim_start()
                    .starts_with('Z')
            })
        };
        for sig in [libc::SIGTERM, libc::SIGKILL] {
            for &p in &pids {
                // SAFETY: kill(2) on a daemon this test started (its pid file).
                unsafe { libc::kill(p, sig) };
            }
            for _ in 0..100 {
                if !pids.iter().any(|&p| alive(p)) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[test]
fn srun_forms_the_job_through_pmi2_pmix_or_nothing() {
    let Some(slurm) = Slurm::start() else { return };
    for mpi in ["pmi2", "pmix", "none"] {
        let o = run(slurm.srun(mpi, &program("init"), &["4"]));
        assert_eq!(o.code, Some(0), "init under srun --mpi={mpi}: {o:?}");
        assert_eq!(o.stdout.matches("init ok p=4").count(), 1, "{mpi}: {o:?}");
        for name in ["drma", "bsmp"] {
            let o = run(slurm.srun(mpi, &program(name), &[]));
            assert_eq!(o.code, Some(0), "{name} under srun --mpi={mpi}: {o:?}");
            assert!(o.stdout.contains(&format!("{name} ok p=4")), "{mpi}: {o:?}");
        }
    }
    // Without PMI and without a key there is no private way to a job secret: refused,
    // saying how to fix it (HOME: a directory without the key file).
    let (mut c, m) = slurm.srun_keyless("none", &program("drma"), &[]);
    c.env("HOME", &slurm.dir);
    let o = run((c, m));
    assert!(o.code.is_some_and(|c| c != 0), "{o:?}");
    assert!(o.stderr.contains("no user key is set up"), "{o:?}");
    let o = run(slurm.srun("pmi2", &program("crash"), &["self", "3", "4"]));
    assert!(o.code.is_some_and(|c| c != 0), "{o:?}");
    assert_eq!(
        o.stderr
            .matches("rank 3 lost its control connection before finishing")
            .count(),
        1,
        "{}",
        o.stderr
    );
    // Rank 0, which ran the rendezvous, dies: srun names its task, and of the survivors
    // only one may say so (srun may end them first), never each of them.
    for mpi in ["pmi2", "none"] {
        let o = run(slurm.srun(mpi, &program("crash"), &["self", "0", "4"]));
        assert!(o.code.is_some_and(|c| c != 0), "{o:?}");
        let all = format!("{}{}", o.stdout, o.stderr);
        assert!(all.contains("task 0"), "{mpi}: {all}");
        assert!(all.matches("rank 0 is gone").count() <= 1, "{mpi}: {all}");
    }
}
