//! `bsprun` across hosts, on a test bed of two network namespaces joined by a veth pair
//! (Ethernet MTU), with `netns-rsh` standing in for ssh: the BSP conformance programs at
//! p = 4 (two ranks per host) over every protocol, also under injected faults; output,
//! input, environment and exit status as mpirun gives them; and a rank killed remotely, a
//! host unplugged, or bsprun interrupted ending every rank on both hosts within 15 s,
//! leaving nothing behind; and the same over a real ssh (an sshd of the test's own in the
//! second host). Needs root and `ip` (and openssh for the last); says so and skips
//! otherwise.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod common;

use bulkwire_launch::testing::{self, Out, Testbed};

const BSPRUN: &str = env!("CARGO_BIN_EXE_bsprun");
const RSH: &str = env!("CARGO_BIN_EXE_netns-rsh");
const LIMIT: Duration = Duration::from_secs(90);

/// The test bed, or `None` (with the reason printed) where it can't be made.
fn bed(mtu: u32) -> Option<Testbed> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: network namespaces need root");
        return None;
    }
    match Testbed::new(mtu) {
        Ok(t) => Some(t),
        Err(e) => {
            eprintln!("skipped: cannot make the test bed ({e})");
            None
        }
    }
}

/// Compiles `tests/c/NAME.c` once per run.
fn program(name: &str) -> PathBuf {
    common::bspcc_program("cluster", name)
}

/// `bsprun` in the bed's first namespace with ranks on both hosts (`per_host` each, the
/// first host given first unless `remote_first`), marked so that leftovers can be found.
fn bsprun(tb: &Testbed, per_host: u32, remote_first: bool, args: &[&str]) -> (Command, String) {
    let mark = testing::mark();
    let [a, b] = &tb.addrs;
    let hosts = if remote_first {
        format!("{b}:{per_host},{a}:{per_host}")
    } else {
        format!("{a}:{per_host},{b}:{per_host}")
    };
    let mut c = tb.command(0, BSPRUN);
    c.args(["--rsh", RSH, "-H", &hosts, "-x", testing::MARK_VAR]);
    c.args(["--timeout", "80"]).args(args);
    testing::clean(&mut c, &mark);
    (c, mark)
}

/// Runs it to the end and checks that nothing of it is left on either host.
fn run(tb: &Testbed, mut c: Command, mark: &str) -> Out {
    let out = testing::run(&mut c, LIMIT);
    testing::assert_no_leftovers(mark);
    for i in 0..2 {
        assert!(
            tb.pids(i).is_empty(),
            "processes left in host {i}: {:?}",
            tb.pids(i)
        );
    }
    out
}

fn ok(o: &Out, what: &str) {
    assert_eq!(
        o.code,
        Some(0),
        "{what}: exit {:?}\nstdout:\n{}\nstderr:\n{}",
        o.code,
        o.stdout,
        o.stderr
    );
}

#[test]
fn conformance_programs_run_across_two_hosts_over_every_protocol() {
    let Some(tb) = bed(1500) else { return };
    let stacks = bulkwire_protocol::PROTOCOLS.iter().chain(&["tcp"]);
    for &protocol in stacks {
        for name in ["drma", "bsmp"] {
            let prog = program(name);
            let (mut c, m) = bsprun(&tb, 2, false, &[prog.to_str().unwrap()]);
            c.env("BULKWIRE_PROTOCOL", protocol)
                .env("BULKWIRE_STATS", "on");
            let o = run(&tb, c, &m);
            ok(&o, &format!("{name} over {protocol}"));
            assert!(o.stdout.contains(&format!("{name} ok p=4")), "{}", o.stdout);
            // Pid 0 reaches pid 1 over shared memory and pids 2, 3 over the network.
            let links = if protocol == "tcp" { "tcp" } else { "shm+udp" };
            assert!(
                o.stderr
                    .contains(&format!("statistics ({protocol} over {links}, p=4")),
                "{protocol}: {}",
                o.stderr
            );
        }
    }
}

#[test]
fn conformance_programs_recover_injected_faults_across_hosts() {
    let Some(tb) = bed(1500) else { return };
    let reliable = bulkwire_protocol::PROTOCOLS
        .iter()
        .filter(|&&p| p != "utopia");
    for &protocol in reliable {
        for name in ["drma", "bsmp"] {
            let prog = program(name);
            let (mut c, m) = bsprun(&tb, 2, false, &[prog.to_str().unwrap()]);
            c.env("BULKWIRE_PROTOCOL", protocol)
                .env("BULKWIRE_FAULTS", "loss=0.05,dup=0.01,reorder=0.02");
            let o = run(&tb, c, &m);
            ok(&o, &format!("{name} over {protocol} with faults"));
            assert!(o.stdout.contains(&format!("{name} ok p=4")), "{}", o.stdout);
        }
    }
}

#[test]
fn jumbo_frames_carry_the_job_too() {
    let Some(tb) = bed(9000) else { return };
    let prog = program("drma");
    let (c, m) = bsprun(&tb, 2, false, &[prog.to_str().unwrap()]);
    let o = run(&tb, c, &m);
    ok(&o, "drma at MTU 9000");
    assert!(o.stdout.contains("drma ok p=4"), "{}", o.stdout);
}

#[test]
fn output_input_environment_and_status_as_mpirun_gives_them() {
    let Some(tb) = bed(1500) else { return };
    // Rank 0 on the other host: it reads bsprun's stdin; every line comes back tagged;
    // -x and the BULKWIRE_* settings reach it; the ranks run in bsprun's directory.
    let script = "read line; echo \"r$BULKWIRE_RANK in=$line x=$FOO p=$BULKWIRE_PROTOCOL \
                  cwd=$(pwd)\"; echo \"e$BULKWIRE_RANK\" >&2";
    let (mut c, m) = bsprun(
        &tb,
        1,
        true,
        &["--tag-output", "-x", "FOO=bar", "sh", "-c", script],
    );
    c.env("BULKWIRE_PROTOCOL", "gbn")
        .current_dir("/tmp")
        .stdin(Stdio::piped());
    let mut child = c
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        let mut i = child.stdin.take().unwrap();
        i.write_all(b"hello\n").unwrap();
    }
    let o = child.wait_with_output().unwrap();
    testing::assert_no_leftovers(&m);
    let (so, se) = (
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr),
    );
    assert_eq!(o.status.code(), Some(0), "{so}\n{se}");
    assert!(so.contains("[0] r0 in=hello x=bar p=gbn cwd=/tmp"), "{so}");
    assert!(so.contains("[1] r1 in= x=bar p=gbn cwd=/tmp"), "{so}");
    assert!(se.contains("[0] e0") && se.contains("[1] e1"), "{se}");

    // A rank that fails on the other host makes the job's status its own.
    let (c, m) = bsprun(
        &tb,
        1,
        false,
        &["sh", "-c", "[ $BULKWIRE_RANK = 1 ] && exit 3; exit 0"],
    );
    let o = run(&tb, c, &m);
    assert_eq!(o.code, Some(3), "{o:?}");
}

#[test]
fn a_job_across_hosts_may_run_long() {
    let Some(tb) = bed(1500) else { return };
    // Longer than a connection may stay silent before saying who it is (10 s): the
    // agents' connections are not held to it.
    let (c, m) = bsprun(
        &tb,
        1,
        false,
        &["sh", "-c", "sleep 11; echo done $BULKWIRE_RANK"],
    );
    let o = run(&tb, c, &m);
    ok(&o, "a job of 11 s");
    assert_eq!(o.stdout.matches("done").count(), 2, "{}", o.stdout);
}

#[test]
fn a_rank_killed_on_the_other_host_ends_the_job_naming_it() {
    let Some(tb) = bed(1500) else { return };
    // Rank 3, on the second host, kills itself in superstep 50.
    let prog = program("crash");
    let (c, m) = bsprun(&tb, 2, false, &[prog.to_str().unwrap(), "self", "3", "4"]);
    let t0 = Instant::now();
    let o = run(&tb, c, &m);
    assert!(t0.elapsed() < Duration::from_secs(15), "{:?}", t0.elapsed());
    assert_eq!(o.code, Some(137), "{o:?}");
    let want = format!("rank 3 died (signal 9, SIGKILL) (on host {})", tb.addrs[1]);
    assert_eq!(o.stderr.matches(&want).count(), 1, "{}", o.stderr);
    assert_eq!(o.stderr.lines().count(), 1, "one message: {}", o.stderr);
}

/// Starts `crash sync 99 4` (supersteps for a minute, nobody dies by itself) on both
/// hosts, and waits until every rank has reported.
fn running_job(tb: &Testbed) -> (std::process::Child, String) {
    let prog = program("crash");
    let (mut c, m) = bsprun(tb, 2, false, &[prog.to_str().unwrap(), "sync", "99", "4"]);
    let mut child = c
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::BufRead;
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let mut seen = 0;
    while seen < 4 {
        let l = lines.next().expect("every rank reports").unwrap();
        seen += usize::from(l.starts_with("pid "));
    }
    std::thread::spawn(move || lines.for_each(drop));
    (child, m)
}

fn ended_within(mut child: std::process::Child, limit: Duration) -> (Option<i32>, String) {
    let t0 = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if t0.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            panic!("the job did not end");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let took = t0.elapsed();
    let mut err = String::new();
    use std::io::Read;
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(took < limit, "ended after {took:?}: {err}");
    (status.code(), err)
}

#[test]
fn an_unreachable_host_ends_the_job_within_15_s() {
    let Some(tb) = bed(1500) else { return };
    let (child, m) = running_job(&tb);
    tb.unplug(1).unwrap();
    let (code, err) = ended_within(child, Duration::from_secs(15));
    assert_eq!(code, Some(1), "{err}");
    let want = format!("host {} became unreachable", tb.addrs[1]);
    assert_eq!(err.matches(&want).count(), 1, "{err}");
    assert!(err.contains("ranks 2-3 ran there"), "{err}");
    // The cut-off host's agent ends its ranks by itself.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !tb.pids(1).is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(tb.pids(1).is_empty(), "left on the cut-off host");
    testing::assert_no_leftovers(&m);
}

#[test]
fn interrupting_bsprun_ends_every_rank_on_every_host() {
    let Some(tb) = bed(1500) else { return };
    let (child, m) = running_job(&tb);
    // SAFETY: kill(2) on the bsprun process this test started (ip netns exec execs it).
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGINT) }, 0);
    let (code, err) = ended_within(child, Duration::from_secs(15));
    assert_eq!(code, Some(130), "{err}");
    assert!(err.contains("interrupted (signal 2, SIGINT)"), "{err}");
    testing::assert_no_leftovers(&m);
    assert!(tb.pids(0).is_empty() && tb.pids(1).is_empty());
}

#[test]
fn hostfiles_and_slots_place_the_ranks() {
    let Some(tb) = bed(1500) else { return };
    let file = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("hosts-{}", std::process::id()));
    std::fs::write(
        &file,
        format!(
            "# two hosts\n{} slots=1\n\n{} slots=3  # the big one\n",
            tb.addrs[0], tb.addrs[1]
        ),
    )
    .unwrap();
    let mark = testing::mark();
    let mut c = tb.command(0, BSPRUN);
    c.args(["--rsh", RSH, "--hostfile"]).arg(&file);
    c.args(["-x", testing::MARK_VAR, "sh", "-c"]);
    c.arg("echo rank=$BULKWIRE_RANK of=$BULKWIRE_NPROCS");
    testing::clean(&mut c, &mark);
    let o = run(&tb, c, &mark);
    ok(&o, "hostfile");
    let mut ranks: Vec<&str> = o.stdout.lines().collect();
    ranks.sort_unstable();
    assert_eq!(
        ranks,
        ["rank=0 of=4", "rank=1 of=4", "rank=2 of=4", "rank=3 of=4"]
    );
    // More processes than slots is refused, naming the slots, before anything starts.
    let mut c = tb.command(0, BSPRUN);
    c.args(["--rsh", RSH, "-n", "5", "--hostfile"])
        .arg(&file)
        .arg("true");
    let o = run(&tb, c, &mark);
    assert_eq!(o.code, Some(2), "{o:?}");
    assert!(o.stderr.contains("have 4 slots"), "{}", o.stderr);
    let _ = std::fs::remove_file(&file);
}

/// An sshd of its own in the second host (host key, one authorized user key, in a
/// directory of the test); the test bed's end takes it down with everything else there.
fn sshd(tb: &Testbed) -> Option<Vec<String>> {
    let tools = ["/usr/sbin/sshd", "/usr/bin/ssh", "/usr/bin/ssh-keygen"];
    if let Some(t) = tools.iter().find(|t| !Path::new(t).exists()) {
        eprintln!("skipped: {t} is not installed (Debian: openssh-server, openssh-client)");
        return None;
    }
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("ssh-{}", tb.names[1]));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).ok()?;
    for key in ["host_key", "user_key"] {
        let o = Command::new("/usr/bin/ssh-keygen")
            .args(["-q", "-t", "ed25519", "-N", "", "-f"])
            .arg(dir.join(key))
            .output()
            .ok()?;
        assert!(o.status.success(), "ssh-keygen: {o:?}");
    }
    std::fs::copy(dir.join("user_key.pub"), dir.join("authorized_keys")).ok()?;
    // The privilege separation directory sshd insists on.
    std::fs::create_dir_all("/run/sshd").ok()?;
    let d = dir.display();
    let conf = format!(
        "ListenAddress {}\nPort 22\nHostKey {d}/host_key\nAuthorizedKeysFile {d}/authorized_keys\n\
         PermitRootLogin prohibit-password\nStrictModes no\nUsePAM no\nPidFile {d}/sshd.pid\n",
        tb.addrs[1]
    );
    std::fs::write(dir.join("sshd_config"), conf).ok()?;
    let o = tb
        .command(1, "/usr/sbin/sshd")
        .arg("-f")
        .arg(dir.join("sshd_config"))
        .arg("-E")
        .arg(dir.join("sshd.log"))
        .output()
        .ok()?;
    assert!(o.status.success(), "sshd: {o:?}");
    Some(vec![
        "/usr/bin/ssh".into(),
        "-i".into(),
        format!("{d}/user_key"),
        "-o".into(),
        "StrictHostKeyChecking=no".into(),
        "-o".into(),
        "UserKnownHostsFile=/dev/null".into(),
        "-o".into(),
        "BatchMode=yes".into(),
        "-o".into(),
        "LogLevel=ERROR".into(),
    ])
}

#[test]
fn over_a_real_ssh() {
    let Some(tb) = bed(1500) else { return };
    let Some(ssh) = sshd(&tb) else { return };
    let rsh = ssh.join(" ");
    let hosts = format!("{}:2,{}:2", tb.addrs[0], tb.addrs[1]);
    let job = |args: &[&str]| {
        let mark = testing::mark();
        let mut c = tb.command(0, BSPRUN);
        c.args(["--rsh", &rsh, "-H", &hosts, "-x", testing::MARK_VAR]);
        c.args(["--timeout", "80"]).args(args);
        testing::clean(&mut c, &mark);
        let o = testing::run(&mut c, LIMIT);
        testing::assert_no_leftovers(&mark);
        o
    };
    let drma = program("drma");
    let o = job(&[drma.to_str().unwrap()]);
    ok(&o, "drma over ssh");
    assert!(o.stdout.contains("drma ok p=4"), "{}", o.stdout);
    let crash = program("crash");
    let o = job(&[crash.to_str().unwrap(), "self", "3", "4"]);
    assert_eq!(o.code, Some(137), "{o:?}");
    let want = format!("rank 3 died (signal 9, SIGKILL) (on host {})", tb.addrs[1]);
    assert_eq!(o.stderr.matches(&want).count(), 1, "{}", o.stderr);
}

#[test]
fn a_host_that_cannot_start_its_ranks_is_named() {
    let Some(tb) = bed(1500) else { return };
    // The program is missing there: the agent says so.
    let m = testing::mark();
    let mut c = tb.command(0, BSPRUN);
    let remote = format!("{}:2", tb.addrs[1]);
    c.args(["--rsh", RSH, "-H", &remote, "/nonexistent/program"]);
    testing::clean(&mut c, &m);
    let o = run(&tb, c, &m);
    assert_eq!(o.code, Some(1), "{o:?}");
    let want = format!("cannot start /nonexistent/program on host {}", tb.addrs[1]);
    assert_eq!(o.stderr.matches(&want).count(), 1, "{}", o.stderr);
    // The remote shell fails: no agent ever connects.
    let mark = testing::mark();
    let mut c = tb.command(0, BSPRUN);
    let hosts = format!("{}:1,{}:1", tb.addrs[0], tb.addrs[1]);
    c.args(["--rsh", "false", "-H", &hosts, "true"]);
    testing::clean(&mut c, &mark);
    let o = run(&tb, c, &mark);
    assert_eq!(o.code, Some(1), "{o:?}");
    assert!(
        o.stderr.contains(&format!(
            "cannot start ranks 1 on host {}: the remote shell ended (status 1)",
            tb.addrs[1]
        )),
        "{}",
        o.stderr
    );
}
