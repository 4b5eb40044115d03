//! `bsprun` end to end, with shell one-liners as the job's program.

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BSPRUN: &str = env!("CARGO_BIN_EXE_bsprun");

struct Out {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

/// Runs bsprun with `args`, feeding `stdin`, killed after 30 s so nothing can hang CI.
fn bsprun(args: &[&str], env: &[(&str, &str)], stdin: &str) -> Out {
    let mut c = Command::new(BSPRUN);
    c.args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, _) in std::env::vars() {
        if k.starts_with("BULKWIRE_") {
            c.env_remove(k);
        }
    }
    let mut child = c.spawn().unwrap();
    let mut i = child.stdin.take().unwrap();
    i.write_all(stdin.as_bytes()).unwrap();
    drop(i);
    let mut so = child.stdout.take().unwrap();
    let mut se = child.stderr.take().unwrap();
    let to = std::thread::spawn(move || {
        let mut s = String::new();
        so.read_to_string(&mut s).unwrap();
        s
    });
    let te = std::thread::spawn(move || {
        let mut s = String::new();
        se.read_to_string(&mut s).unwrap();
        s
    });
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > Duration::from_secs(30) {
            child.kill().unwrap();
            panic!("bsprun {args:?} hung");
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    Out {
        code: status.code(),
        stdout: to.join().unwrap(),
        stderr: te.join().unwrap(),
    }
}

#[test]
fn environment_reaches_every_rank_tagged() {
    let o = bsprun(
        &[
            "-n",
            "3",
            "--tag-output",
            "sh",
            "-c",
            "echo rank=$BULKWIRE_RANK n=$BULKWIRE_NPROCS proto=$BULKWIRE_PROTOCOL secret=${#BULKWIRE_SECRET}",
        ],
        &[("BULKWIRE_PROTOCOL", "holefill")],
        "",
    );
    assert_eq!(o.code, Some(0), "{}", o.stderr);
    let mut lines: Vec<&str> = o.stdout.lines().collect();
    lines.sort();
    assert_eq!(lines.len(), 3);
    for (r, l) in lines.iter().enumerate() {
        assert_eq!(*l, format!("[{r}] rank={r} n=3 proto=holefill secret=64"));
    }
}

#[test]
fn exit_status_names_the_failed_rank() {
    let o = bsprun(
        &[
            "-n",
            "3",
            "sh",
            "-c",
            "exit $((BULKWIRE_RANK == 1 ? 5 : 0))",
        ],
        &[],
        "",
    );
    assert_eq!(o.code, Some(5));
    assert_eq!(
        o.stderr.trim(),
        "bsprun: rank 1 exited with status 5 without joining the job"
    );

    let o = bsprun(
        &[
            "-n",
            "2",
            "sh",
            "-c",
            "[ $BULKWIRE_RANK = 1 ] && kill -9 $$; sleep 20",
        ],
        &[],
        "",
    );
    assert_eq!(o.code, Some(137));
    assert_eq!(o.stderr.trim(), "bsprun: rank 1 died (signal 9, SIGKILL)");
}

#[test]
fn timeout_and_missing_program() {
    let o = bsprun(&["-n", "2", "--timeout", "0.3", "sleep", "20"], &[], "");
    assert_eq!(o.code, Some(124));
    assert!(
        o.stderr.contains("the job timed out after 0.3 s"),
        "{}",
        o.stderr
    );

    let o = bsprun(&["-n", "2", "/nonexistent/program"], &[], "");
    assert_eq!(o.code, Some(127));
    assert!(
        o.stderr
            .contains("cannot start rank 0 (/nonexistent/program)")
    );
}

#[test]
fn stdin_goes_to_rank_0_and_options_after_the_program_pass_through() {
    let o = bsprun(
        &[
            "-n",
            "2",
            "--tag-output",
            "sh",
            "-c",
            "cat; echo -n end",
            "-n",
            "--tag-output",
        ],
        &[],
        "hello\n",
    );
    assert_eq!(o.code, Some(0), "{}", o.stderr);
    let mut lines: Vec<&str> = o.stdout.lines().collect();
    lines.sort();
    assert_eq!(lines, ["[0] end", "[0] hello", "[1] end"]);
}

/// A fresh private directory for one test.
fn private_dir(name: &str) -> std::path::PathBuf {
    use std::os::unix::fs::DirBuilderExt;
    let d = std::env::temp_dir().join(format!("bsprun-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::DirBuilder::new().mode(0o700).create(&d).unwrap();
    d
}

#[test]
fn serve_prints_its_address_and_where_its_secret_is() {
    let d = private_dir("serve");
    let f = d.join("secret");
    let fs = f.to_str().unwrap();
    let o = bsprun(
        &[
            "-n",
            "2",
            "--serve",
            "127.0.0.1:0",
            "--timeout",
            "0.2",
            "--secret-file",
            fs,
        ],
        &[],
        "",
    );
    assert_eq!(o.code, Some(124));
    assert!(
        o.stdout.starts_with("BULKWIRE_RENDEZVOUS=127.0.0.1:"),
        "{}",
        o.stdout
    );
    assert!(
        o.stdout.contains(&format!("\nBULKWIRE_SECRET_FILE={fs}\n")),
        "{}",
        o.stdout
    );
    // Removed when the server ends; never overwritten: an existing file is refused.
    assert!(!f.exists());
    std::fs::write(&f, "x").unwrap();
    let o = bsprun(
        &["-n", "2", "--serve", "127.0.0.1:0", "--secret-file", fs],
        &[],
        "",
    );
    assert_eq!(o.code, Some(2));
    assert!(o.stderr.contains("must not exist yet"), "{}", o.stderr);
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn the_secret_is_in_no_command_line_of_the_job() {
    let d = private_dir("cmdline");
    let script = format!(
        "printf %s \"$BULKWIRE_SECRET\" > {}/s.$BULKWIRE_RANK; sleep 3",
        d.display()
    );
    let mut c = Command::new(BSPRUN);
    c.args(["-n", "2", "sh", "-c", &script])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    for (k, _) in std::env::vars() {
        if k.starts_with("BULKWIRE_") {
            c.env_remove(k);
        }
    }
    let mut child = c.spawn().unwrap();
    let t0 = Instant::now();
    let files = [d.join("s.0"), d.join("s.1")];
    let secret = loop {
        let got: Vec<String> = files
            .iter()
            .filter_map(|f| std::fs::read_to_string(f).ok())
            .filter(|s| s.len() == 64)
            .collect();
        if got.len() == 2 {
            assert_eq!(got[0], got[1]);
            break got[0].clone();
        }
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "the ranks never started"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    // Every process descending from bsprun, from the parent links in /proc.
    let ppid = |pid: u32| -> Option<u32> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        stat.rsplit_once(')')?
            .1
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()
    };
    let mut family = vec![child.id()];
    let all: Vec<u32> = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    let mut grew = true;
    while grew {
        grew = false;
        for &p in &all {
            if !family.contains(&p) && ppid(p).is_some_and(|pp| family.contains(&pp)) {
                family.push(p);
                grew = true;
            }
        }
    }
    assert!(family.len() >= 3, "bsprun and its two ranks: {family:?}");
    for p in &family {
        let cmdline = std::fs::read(format!("/proc/{p}/cmdline")).unwrap_or_default();
        let text = String::from_utf8_lossy(&cmdline).to_lowercase();
        assert!(!text.contains(&secret), "pid {p}: {text}");
    }
    assert!(child.wait().unwrap().success());
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn serve_fails_a_job_that_does_not_form_in_time() {
    let t0 = Instant::now();
    let d = private_dir("serve-timeout");
    let f = d.join("secret");
    let o = bsprun(
        &[
            "-n",
            "2",
            "--serve",
            "127.0.0.1:0",
            "--join-timeout",
            "0.3",
            "--secret-file",
            f.to_str().unwrap(),
        ],
        &[],
        "",
    );
    std::fs::remove_dir_all(&d).unwrap();
    assert!(t0.elapsed() < Duration::from_secs(10));
    assert_eq!(o.code, Some(1), "{}", o.stderr);
    assert!(
        o.stderr
            .contains("the job did not form within 0.3 s: ranks 0-1 have not joined"),
        "{}",
        o.stderr
    );
}

#[test]
fn hosts_of_this_machine_run_their_ranks_directly_and_slots_are_counted() {
    // localhost is this host: no remote shell needed (a bogus one proves it is unused).
    let o = bsprun(
        &[
            "-H",
            "localhost:2",
            "--rsh",
            "false",
            "sh",
            "-c",
            "echo r$BULKWIRE_RANK",
        ],
        &[],
        "",
    );
    assert_eq!(o.code, Some(0), "{}", o.stderr);
    let mut lines: Vec<&str> = o.stdout.lines().collect();
    lines.sort_unstable();
    assert_eq!(lines, ["r0", "r1"]);
    let o = bsprun(&["-n", "3", "-H", "localhost:2", "true"], &[], "");
    assert_eq!(o.code, Some(2));
    assert!(o.stderr.contains("have 2 slots"), "{}", o.stderr);
    let o = bsprun(&["-H", "localhost:0", "true"], &[], "");
    assert_eq!(o.code, Some(2));
    assert!(
        o.stderr.contains("slots must be from 1 to 1024"),
        "{}",
        o.stderr
    );
    let o = bsprun(&["-n", "1", "-x", "NOT_SET_ANYWHERE_X", "true"], &[], "");
    assert_eq!(o.code, Some(2));
    assert!(
        o.stderr.contains("NOT_SET_ANYWHERE_X is not set"),
        "{}",
        o.stderr
    );
}

/// `--bind` (and `BULKWIRE_BIND`) choose where the processes run; a wrong value is a usage
/// error naming what is accepted.
#[test]
fn bind_option_places_the_processes_or_says_what_it_takes() {
    let lists = |args: &[&str], env: &[(&str, &str)]| -> Vec<String> {
        let mut a = vec!["-n", "2"];
        a.extend_from_slice(args);
        a.extend(["sh", "-c", "grep Cpus_allowed_list /proc/self/status"]);
        let o = bsprun(&a, env, "");
        assert_eq!(o.code, Some(0), "{}", o.stderr);
        let mut l: Vec<String> = o.stdout.lines().map(str::to_owned).collect();
        l.sort();
        assert_eq!(l.len(), 2, "{}", o.stdout);
        l
    };
    let free = lists(&["--bind", "none"], &[]);
    assert_eq!(free[0], free[1], "--bind none bound them");
    assert_eq!(lists(&[], &[("BULKWIRE_BIND", "none")]), free);
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let shared = lists(&[], &[]);
    if cpus >= 2 {
        assert_ne!(shared[0], shared[1], "the default did not bind");
    }
    assert_eq!(lists(&["--bind", "share"], &[]), shared);

    let o = bsprun(&["-n", "2", "--bind", "cores", "true"], &[], "");
    assert_eq!(o.code, Some(2));
    assert!(o.stderr.contains("expected share or none"), "{}", o.stderr);
    let o = bsprun(&["-n", "2", "true"], &[("BULKWIRE_BIND", "cores")], "");
    assert_eq!(o.code, Some(2));
    assert!(o.stderr.contains("BULKWIRE_BIND=\"cores\""), "{}", o.stderr);
}

/// Without -n, bsprun starts one process per CPU it may run on (as `bsprun ./program` in
/// BSPedupack's README); --serve still needs the count.
#[test]
fn without_n_one_process_per_available_cpu() {
    let count = "echo n=$BULKWIRE_NPROCS";
    let cpus = std::thread::available_parallelism().unwrap().get();
    let o = bsprun(&["--timeout", "20", "sh", "-c", count], &[], "");
    assert_eq!(o.code, Some(0), "{}", o.stderr);
    let want = format!("n={cpus}");
    let lines = o.stdout.lines().filter(|l| *l == want).count();
    assert_eq!(lines, cpus, "{}", o.stdout);
    // Confined to one CPU (as in a scheduler's allocation of one core): one process.
    match Command::new("taskset")
        .args(["-c", "0", BSPRUN, "--timeout", "20", "sh", "-c", count])
        .env_remove("BULKWIRE_NPROCS")
        .stdin(Stdio::null())
        .output()
    {
        Ok(o) => {
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
            assert_eq!(String::from_utf8_lossy(&o.stdout), "n=1\n");
        }
        Err(e) => eprintln!("skipped the one-CPU case: taskset: {e}"),
    }
    let o = bsprun(&["--serve", "127.0.0.1:0"], &[], "");
    assert_eq!(o.code, Some(2), "{}", o.stderr);
    assert!(o.stderr.contains("--serve needs -n P"), "{}", o.stderr);
}

/// A host that cannot be reached: its remote shell hangs (a host that drops the
/// connection) or fails (ssh's own error). Either way bsprun names the host within
/// seconds, says its ranks never started, and never that they ran there.
#[test]
fn an_unreachable_host_is_named_within_seconds() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("rsh-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let script = |name: &str, body: &str| {
        let p = dir.join(name);
        std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        p.to_string_lossy().into_owned()
    };
    // Hangs as ssh does while its connection attempt goes unanswered.
    let hang = script("hang-rsh", "exec sleep 120");
    // Fails at once as ssh does when the host refuses or has no route.
    let fail = script(
        "fail-rsh",
        "echo \"ssh: connect to host $1 port 22: No route to host\" >&2; exit 255",
    );
    // An address of TEST-NET-1 (RFC 5737): never a host of this machine.
    let hosts = "localhost:1,192.0.2.1:2";
    for (rsh, words, within) in [
        (
            &hang,
            "host 192.0.2.1 could not be reached (its agent did not connect within 15 s",
            Duration::from_secs(25),
        ),
        (
            &fail,
            "cannot start ranks 1-2 on host 192.0.2.1: the remote shell ended (status 255)",
            Duration::from_secs(5),
        ),
    ] {
        let t0 = Instant::now();
        // A join timeout shorter than the default minute, so that the test waits less.
        let env = [("BULKWIRE_JOIN_TIMEOUT", "15")];
        let o = bsprun(&["-H", hosts, "--rsh", rsh, "sleep", "1"], &env, "");
        let took = t0.elapsed();
        assert_eq!(o.code, Some(1), "{rsh}: {}", o.stderr);
        assert!(took < within, "{rsh}: took {took:?}: {}", o.stderr);
        assert_eq!(o.stderr.matches(words).count(), 1, "{rsh}: {}", o.stderr);
        assert!(!o.stderr.contains("ran there"), "{rsh}: {}", o.stderr);
        if rsh == &hang {
            // Named after 10 s of silence, declared unreachable only at the join timeout.
            let notice = "host 192.0.2.1 has not answered within 10 s of its remote shell's \
                          start (ranks 1-2 have not started); waiting until the join timeout, \
                          15 s";
            assert_eq!(o.stderr.matches(notice).count(), 1, "{}", o.stderr);
            assert!(took >= Duration::from_secs(15), "{took:?}");
            assert!(o.stderr.contains("ranks 1-2 never started"), "{}", o.stderr);
        } else {
            assert!(o.stderr.contains("No route to host"), "{}", o.stderr);
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
