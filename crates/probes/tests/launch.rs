//! Whole jobs of real processes: launching, output tagging, self-spawn, failure notices
//! and their latency, and cleanup (no process of a test may outlive it).

mod common;

use std::time::Duration;

use common::*;

const LIMIT: Duration = Duration::from_secs(60);

#[test]
fn allgather_at_1_2_4_8() {
    for n in [1, 2, 4, 8] {
        let m = mark();
        let ns = n.to_string();
        let out = run(
            probe(
                &[
                    "run",
                    "-n",
                    &ns,
                    "--tag",
                    "--",
                    PROBE,
                    "rank",
                    "allgather",
                    "3",
                ],
                &m,
            ),
            LIMIT,
        );
        assert_eq!(out.code, Some(0), "{out:?}");
        for r in 0..n {
            let cards = format!("[{r}] cards rank={r} n={n} same_host={n} local_ip=127.0.0.1");
            assert!(
                out.lines("").contains(&cards.as_str()),
                "{cards} in {out:?}"
            );
            let done = format!("[{r}] done rank={r} rounds=3");
            assert!(out.lines("").contains(&done.as_str()), "{out:?}");
        }
        for r in 0..n {
            let udp = format!("[{r}] udp rank={r} heard={}", n - 1);
            assert!(out.lines("").contains(&udp.as_str()), "{out:?}");
        }
        assert_eq!(out.lines("").len(), 3 * n, "{out:?}");
        assert_no_leftovers(&m);
    }
}

/// The latency from the victim's last line to the last survivor's notice.
fn latency(lines: &[&str], victim: u32) -> Duration {
    let t0 = lines
        .iter()
        .find(|l| l.contains(&format!("victim rank={victim} ")))
        .map(|l| ns(l))
        .expect("victim line");
    let t1 = lines
        .iter()
        .filter(|l| l.contains("notified"))
        .map(|l| ns(l))
        .max()
        .expect("notified lines");
    Duration::from_nanos(t1.saturating_sub(t0) as u64)
}

/// A job of 4 where rank 2 fails by `kind`: the launcher prints the failure once and
/// exits with `code`; every other rank is told, promptly; nothing is left behind.
fn failure_case(kind: &str, message: &str, code: i32) {
    let m = mark();
    // A long term delay, so that the survivors are told and not merely killed.
    let out = run(
        probe(
            &[
                "run",
                "-n",
                "4",
                "--tag",
                "--term-delay-ms",
                "5000",
                "--",
                PROBE,
                "rank",
                "fail",
                kind,
                "2",
            ],
            &m,
        ),
        LIMIT,
    );
    assert_eq!(out.code, Some(code), "{out:?}");
    let report = format!("launch-probe: {message}");
    assert_eq!(out.stderr.matches(&report).count(), 1, "{out:?}");
    let lines = out.lines("");
    for r in [0, 1, 3] {
        let want = format!("[{r}] notified rank={r} ");
        let l = lines
            .iter()
            .find(|l| l.starts_with(&want))
            .unwrap_or_else(|| panic!("rank {r} not notified: {out:?}"));
        assert!(l.ends_with(&format!("failure={message}")), "{l}");
    }
    let lat = latency(&lines, 2);
    eprintln!("{kind}: last survivor notified {lat:?} after the victim's last line");
    assert!(lat < Duration::from_secs(1), "{lat:?}");
    assert_no_leftovers(&m);
}

#[test]
fn abort_is_printed_once_and_notifies_all() {
    failure_case("abort", "rank 2 aborted: probe abort from rank 2", 1);
}

#[test]
fn sigkill_is_noticed() {
    failure_case("kill", "rank 2 died (signal 9, SIGKILL)", 137);
}

#[test]
fn segfault_is_noticed() {
    // Core dumps may be on or off on the machine: match up to the signal name.
    let m = mark();
    let out = run(
        probe(
            &[
                "run",
                "-n",
                "3",
                "--tag",
                "--term-delay-ms",
                "5000",
                "--",
                PROBE,
                "rank",
                "fail",
                "segv",
                "1",
            ],
            &m,
        ),
        LIMIT,
    );
    assert_eq!(out.code, Some(139), "{out:?}");
    assert_eq!(
        out.stderr
            .matches("launch-probe: rank 1 died (signal 11, SIGSEGV")
            .count(),
        1,
        "{out:?}"
    );
    assert_eq!(out.stdout.matches("notified").count(), 2, "{out:?}");
    assert!(latency(&out.lines(""), 1) < Duration::from_secs(1));
    assert_no_leftovers(&m);
}

#[test]
fn exit_before_finishing_is_noticed() {
    failure_case("exit", "rank 2 exited with status 3 before finishing", 3);
}

#[test]
fn killed_from_outside_then_the_rest_terminated() {
    // The survivors ignore nothing: with the default term delay they are told, then
    // SIGTERMed; the launcher's status names the victim's signal.
    let m = mark();
    let mut live = Live::start(probe(
        &["run", "-n", "4", "--tag", "--", PROBE, "rank", "hang"],
        &m,
    ));
    let mut pids = Vec::new();
    for _ in 0..4 {
        let l = live.expect(LIMIT, |l| l.contains("ready rank="));
        pids.push((
            field(&l, "rank").unwrap().parse::<u32>().unwrap(),
            field(&l, "pid").unwrap().parse::<i32>().unwrap(),
        ));
    }
    let victim = pids.iter().find(|(r, _)| *r == 1).unwrap().1;
    let t0 = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    // SAFETY: killing a process of this test.
    unsafe { libc::kill(victim, libc::SIGKILL) };
    let (code, lines, err) = live.wait(LIMIT);
    assert_eq!(code, Some(137), "{lines:?} {err}");
    assert_eq!(
        err.matches("rank 1 died (signal 9, SIGKILL)").count(),
        1,
        "{err}"
    );
    let notified: Vec<&String> = lines.iter().filter(|l| l.contains("notified")).collect();
    assert_eq!(notified.len(), 3, "{lines:?}");
    let worst = notified.iter().map(|l| ns(l)).max().unwrap() - t0;
    eprintln!(
        "external SIGKILL: last survivor notified after {:?}",
        Duration::from_nanos(worst as u64)
    );
    assert!(worst < 1_000_000_000);
    assert_no_leftovers(&m);
}

#[test]
fn tag_output_prefixes_every_line_whole() {
    let m = mark();
    let out = run(
        probe(
            &[
                "run", "-n", "3", "--tag", "--", PROBE, "rank", "chatter", "40",
            ],
            &m,
        ),
        LIMIT,
    );
    assert_eq!(out.code, Some(0), "{out:?}");
    let lines = out.lines("");
    assert_eq!(lines.len(), 3 * 41, "{out:?}");
    for l in &lines {
        let (tag, rest) = l.split_once(' ').unwrap();
        let r = tag
            .strip_prefix('[')
            .and_then(|t| t.strip_suffix(']'))
            .unwrap_or_else(|| panic!("untagged: {l:?}"));
        let ok = rest == format!("chatter {r} tail")
            || (rest.starts_with(&format!("chatter {r} line "))
                && rest.ends_with(" first-half second-half"));
        assert!(ok, "mixed or torn line: {l:?}");
    }
    for l in out
        .stderr
        .lines()
        .filter(|l| !l.starts_with("launch-probe:"))
    {
        let (tag, rest) = l.split_once(' ').unwrap();
        let r = &tag[1..tag.len() - 1];
        assert!(rest.starts_with(&format!("chatter {r} err ")), "{l:?}");
    }
    assert_eq!(out.stderr.matches(" err ").count(), 3 * 8);
    assert_no_leftovers(&m);
}

#[test]
fn self_spawn_runs_the_job_from_rank_0() {
    let m = mark();
    let out = run(probe(&["selfspawn", "4"], &m), LIMIT);
    assert_eq!(out.code, Some(0), "{out:?}");
    // Exactly four processes took part: ranks 1..3 joined and did not spawn again.
    assert_eq!(out.stdout.matches("cards rank=").count(), 4, "{out:?}");
    for r in 0..4 {
        assert!(
            out.lines("")
                .contains(&format!("finished rank={r}").as_str()),
            "{out:?}"
        );
    }
    assert_no_leftovers(&m);
}

#[test]
fn self_spawn_failure_reaches_rank_0() {
    let m = mark();
    let out = run(probe(&["selfspawn", "3", "kill", "2"], &m), LIMIT);
    // Rank 0 learns of the death and exits (status 1, from the probe); the server thread
    // in rank 0 printed the cause once.
    assert_eq!(out.code, Some(1), "{out:?}");
    assert!(
        out.lines("")
            .iter()
            .any(|l| l.starts_with("notified rank=0 ")
                && l.ends_with("failure=rank 2 died (signal 9, SIGKILL)"))
    );
    assert_eq!(
        out.stderr
            .matches("launch-probe: rank 2 died (signal 9, SIGKILL)")
            .count(),
        1,
        "{out:?}"
    );
    assert_no_leftovers(&m);
}

#[test]
fn timeout_ends_the_job() {
    let m = mark();
    let out = run(
        probe(
            &[
                "run",
                "-n",
                "3",
                "--timeout-ms",
                "500",
                "--",
                PROBE,
                "rank",
                "hang",
            ],
            &m,
        ),
        LIMIT,
    );
    assert_eq!(out.code, Some(124), "{out:?}");
    assert!(
        out.stderr.contains("the job timed out after 0.5 s"),
        "{out:?}"
    );
    assert!(out.elapsed < Duration::from_secs(10), "{:?}", out.elapsed);
    assert_no_leftovers(&m);
}

#[test]
fn a_failed_job_takes_what_its_ranks_started_along() {
    // Each rank leaves a `sleep` in the background (same process group); rank 1 then fails.
    let m = mark();
    let out = run(
        probe(
            &[
                "run",
                "-n",
                "2",
                "--",
                "sh",
                "-c",
                "sleep 30 & if [ $BULKWIRE_RANK = 1 ]; then exit 3; fi; wait",
            ],
            &m,
        ),
        LIMIT,
    );
    assert_eq!(out.code, Some(3), "{out:?}");
    // The sleeps hold the output pipe: had they survived, the run would last 30 s.
    assert!(out.elapsed < Duration::from_secs(10), "{:?}", out.elapsed);
    assert_no_leftovers(&m);
}

#[test]
fn killed_launcher_leaves_no_orphans() {
    let m = mark();
    let mut live = Live::start(probe(&["run", "-n", "3", "--", PROBE, "rank", "hang"], &m));
    for _ in 0..3 {
        live.expect(LIMIT, |l| l.contains("ready rank="));
    }
    live.child.kill().unwrap(); // SIGKILL: no chance to clean up
    let _ = live.child.wait();
    assert_no_leftovers(&m);
}

#[test]
fn interrupted_launcher_passes_the_signal_on() {
    let m = mark();
    let mut live = Live::start(probe(&["run", "-n", "2", "--", PROBE, "rank", "hang"], &m));
    for _ in 0..2 {
        live.expect(LIMIT, |l| l.contains("ready rank="));
    }
    // SAFETY: signalling our own child.
    unsafe { libc::kill(live.child.id() as i32, libc::SIGINT) };
    let (code, _, err) = live.wait(LIMIT);
    assert_eq!(code, Some(130), "{err}");
    assert!(
        err.contains("the job was interrupted (signal 2, SIGINT)"),
        "{err}"
    );
    assert_no_leftovers(&m);
}

/// Starts a standalone server (`serve`) and returns it with its address.
fn serve(n: u32, m: &str, extra: &[&str]) -> (Live, String) {
    let ns = n.to_string();
    let mut args = vec!["serve", "-n", &ns];
    args.extend_from_slice(extra);
    let mut s = Live::start(probe(&args, m));
    let l = s.expect(LIMIT, |l| l.starts_with("listening "));
    let addr = l.strip_prefix("listening ").unwrap().to_string();
    (s, addr)
}

#[test]
fn slurm_and_mpirun_environments_join_a_served_job() {
    let flavours: [&[(&str, &str)]; 2] = [
        &[
            ("SLURM_NTASKS", "3"),
            ("SLURM_JOB_ID", "4242"),
            ("SLURM_STEP_ID", "0"),
        ],
        &[
            ("OMPI_COMM_WORLD_SIZE", "3"),
            ("OMPI_MCA_ess_base_jobid", "123456"),
        ],
    ];
    let rank_var = ["SLURM_PROCID", "OMPI_COMM_WORLD_RANK"];
    for (f, vars) in flavours.iter().enumerate() {
        let m = mark();
        let (server, addr) = serve(3, &m, &["--timeout-ms", "30000"]);
        let ranks: Vec<_> = (0..3)
            .map(|r| {
                let mut c = probe(&["rank", "allgather", "2"], &m);
                c.env("BULKWIRE_RENDEZVOUS", &addr)
                    .env(rank_var[f], r.to_string())
                    .envs(vars.iter().copied());
                std::thread::spawn(move || run(c, LIMIT))
            })
            .collect();
        for (r, t) in ranks.into_iter().enumerate() {
            let out = t.join().unwrap();
            assert_eq!(out.code, Some(0), "rank {r}: {out:?}");
            assert!(out.stdout.contains(&format!("done rank={r} rounds=2")));
        }
        let (code, _, err) = server.wait(LIMIT);
        assert_eq!(code, Some(0), "{err}");
        assert_no_leftovers(&m);
    }
}

#[test]
fn available_processors_before_begin() {
    let m = mark();
    let out = run(
        probe(&["rank", "nprocs"], &m).env("BULKWIRE_NPROCS", "6"),
        LIMIT,
    );
    assert_eq!(out.stdout.trim(), "nprocs 6", "{out:?}");
    let cpus = std::thread::available_parallelism().unwrap().get();
    let out = run(probe(&["rank", "nprocs"], &m), LIMIT);
    assert_eq!(out.stdout.trim(), format!("nprocs {cpus}"), "{out:?}");
    let out = run(
        probe(&["rank", "nprocs"], &m)
            .env("SLURM_PROCID", "0")
            .env("SLURM_NTASKS", "3")
            .env("SLURM_JOB_ID", "5")
            .env("BULKWIRE_RENDEZVOUS", "127.0.0.1:9"),
        LIMIT,
    );
    assert_eq!(out.stdout.trim(), "nprocs 3", "{out:?}");
}

#[test]
fn env_errors_are_clear() {
    let m = mark();
    let out = run(
        probe(&["rank", "env"], &m)
            .env("SLURM_PROCID", "1")
            .env("SLURM_NTASKS", "4")
            .env("SLURM_JOB_ID", "9"),
        LIMIT,
    );
    assert_eq!(out.code, Some(1));
    assert!(
        out.stderr.contains(
            "started as rank 1 of 4 (SLURM_PROCID, SLURM_NTASKS) but BULKWIRE_RENDEZVOUS is not set"
        ),
        "{out:?}"
    );
    let out = run(
        probe(&["rank", "env"], &m)
            .env("OMPI_COMM_WORLD_RANK", "1")
            .env("OMPI_COMM_WORLD_SIZE", "2")
            .env("OMPI_MCA_ess_base_jobid", "77")
            .env("BULKWIRE_RENDEZVOUS", "127.0.0.1:9"),
        LIMIT,
    );
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(out.stdout.starts_with("env rank=1 nprocs=2 "), "{out:?}");
    assert!(out.stdout.contains("launcher=OpenMpi"), "{out:?}");
}

#[test]
fn a_process_of_another_job_is_rejected_with_a_clear_message() {
    let m = mark();
    let (server, addr) = serve(2, &m, &["--timeout-ms", "1500"]);
    let mut mine = probe(&["rank", "allgather"], &m);
    mine.env("BULKWIRE_RENDEZVOUS", &addr)
        .env("BULKWIRE_RANK", "0")
        .env("BULKWIRE_NPROCS", "2");
    let mine = std::thread::spawn(move || run(mine, LIMIT));
    std::thread::sleep(Duration::from_millis(300));
    let mut stray = probe(&["rank", "allgather"], &m);
    let other = SECRET.replace('7', "8");
    stray
        .env("BULKWIRE_RENDEZVOUS", &addr)
        .env("BULKWIRE_RANK", "1")
        .env("BULKWIRE_NPROCS", "2")
        .env("BULKWIRE_SECRET", &other);
    let out = run(stray, LIMIT);
    assert_eq!(out.code, Some(2), "{out:?}");
    // Told nothing about the job: neither its size nor any secret or cookie.
    assert!(
        out.stderr.contains("rejected rank 1: not admitted"),
        "{out:?}"
    );
    assert!(
        !out.stderr.contains(SECRET) && !out.stderr.contains("cookie"),
        "{out:?}"
    );
    // Rank 0 waits for a rank 1 that never comes, until the server's time limit.
    let o0 = mine.join().unwrap();
    assert_eq!(o0.code, Some(2), "{o0:?}");
    assert!(
        o0.stderr.contains("the job failed: the job timed out"),
        "{o0:?}"
    );
    let (code, _, _) = server.wait(LIMIT);
    assert_eq!(code, Some(124));
    assert_no_leftovers(&m);
}

#[test]
fn ranks_learn_when_the_launcher_dies() {
    let m = mark();
    let (mut server, addr) = serve(2, &m, &[]);
    let mut ranks: Vec<Live> = (0..2)
        .map(|r| {
            let mut c = probe(&["rank", "hang"], &m);
            c.env("BULKWIRE_RENDEZVOUS", &addr)
                .env("SLURM_PROCID", r.to_string())
                .env("SLURM_NTASKS", "2")
                .env("SLURM_JOB_ID", "1");
            Live::start(c)
        })
        .collect();
    for l in &mut ranks {
        l.expect(LIMIT, |l| l.contains("ready rank="));
    }
    let t0 = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    server.child.kill().unwrap();
    for l in &mut ranks {
        let line = l.expect(LIMIT, |l| l.contains("notified"));
        assert!(
            line.contains("failure=lost the control connection to the launcher"),
            "{line}"
        );
        let dt = ns(&line) - t0;
        eprintln!(
            "launcher death noticed after {:?}",
            Duration::from_nanos(dt as u64)
        );
        assert!(dt < 1_000_000_000);
        // It then tried to finish over the dead connection and lived to tell.
        l.expect(LIMIT, |l| {
            l.starts_with("finish rank=") && l.ends_with(" ok=false")
        });
    }
    drop(ranks);
    drop(server);
    assert_no_leftovers(&m);
}

/// `(rank, cpus, host_cpus)` of every `cpus` line.
fn cpu_lines(out: &Out) -> Vec<(u32, Vec<usize>, usize)> {
    let mut v: Vec<(u32, Vec<usize>, usize)> = out
        .lines("cpus ")
        .iter()
        .map(|l| {
            let list = field(l, "list").expect("list=");
            (
                field(l, "rank")
                    .and_then(|r| r.parse().ok())
                    .expect("rank="),
                list.split(',').map(|c| c.parse().expect("a cpu")).collect(),
                field(l, "host_cpus")
                    .and_then(|h| h.parse().ok())
                    .expect("host_cpus="),
            )
        })
        .collect();
    v.sort();
    v
}

/// Where this test may run: what the launchers below share out.
fn my_cpus() -> Vec<usize> {
    bulkwire_launch::bind::CpuSet::current().unwrap().cpus()
}

/// Each process of a job gets its own equal share of the launcher's CPUs, by `launch` and
/// by self-spawn, and still knows how many CPUs the job has; with too few CPUs for a share
/// each, or with binding off, every process may run anywhere the launcher could.
#[test]
fn processes_get_disjoint_shares_of_the_cores() {
    let all = my_cpus();
    let check = |out: &Out, n: usize, bound: bool| {
        assert_eq!(out.code, Some(0), "{out:?}");
        let got = cpu_lines(out);
        assert_eq!(got.len(), n, "{out:?}");
        for (r, cpus, host) in &got {
            assert_eq!(*host, all.len(), "rank {r}: {out:?}");
            assert!(cpus.iter().all(|c| all.contains(c)), "rank {r}: {cpus:?}");
            if !bound {
                assert_eq!(cpus, &all, "rank {r} was bound");
            }
        }
        if bound {
            let mut union: Vec<usize> = got.iter().flat_map(|g| g.1.clone()).collect();
            union.sort_unstable();
            assert_eq!(union, all, "shares overlap or leave CPUs out: {got:?}");
        }
    };
    let two = all.len() >= 2;
    for how in ["share", "none"] {
        let m = mark();
        let bind = ["run", "-n", "2", "--bind", how, "--", PROBE, "rank", "cpus"];
        let out = run(probe(&bind, &m), LIMIT);
        check(&out, 2, how == "share" && two);
        let mut c = probe(&["selfspawn", "2"], &m);
        c.env("BULKWIRE_BIND", how);
        check(&run(c, LIMIT), 2, how == "share" && two);
        assert_no_leftovers(&m);
    }
    // One process more than there are CPUs: nobody is bound (not tried on big machines).
    if all.len() > 16 {
        return;
    }
    let n = (all.len() + 1).to_string();
    let m = mark();
    let out = run(
        probe(&["run", "-n", &n, "--", PROBE, "rank", "cpus"], &m),
        LIMIT,
    );
    check(&out, all.len() + 1, false);
    assert_no_leftovers(&m);
}

/// Two tasks as srun starts them without PMI (a derived rendezvous on this host), with
/// `home` as their home directory and no job secret of the test's.
fn derived_job(home: &std::path::Path, m: &str, extra: &[(&str, &str)]) -> Vec<Out> {
    let job = format!(
        "derived-{}-{}",
        std::process::id(),
        home.display().to_string().len()
    );
    let ts: Vec<_> = (0..2)
        .map(|r| {
            let mut c = probe(&["rank", "allgather"], m);
            c.env_remove("BULKWIRE_SECRET")
                .env("HOME", home)
                .env("SLURM_PROCID", r.to_string())
                .env("SLURM_NTASKS", "2")
                .env("SLURM_JOB_ID", &job)
                .env("SLURM_STEP_ID", "0")
                .env("SLURM_STEP_NODELIST", "localhost")
                .env("BULKWIRE_JOIN_TIMEOUT", "10")
                .envs(extra.iter().copied());
            std::thread::spawn(move || run(c, LIMIT))
        })
        .collect();
    ts.into_iter().map(|t| t.join().unwrap()).collect()
}

#[test]
fn a_derived_rendezvous_needs_a_private_user_key() {
    use std::os::unix::fs::PermissionsExt;
    let m = mark();
    let home = std::env::temp_dir().join(format!("bw-home-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&home);
    std::fs::create_dir_all(home.join(".config/bulkwire")).unwrap();
    // No key: refused with how to fix it.
    for o in derived_job(&home, &m, &[]) {
        assert_ne!(o.code, Some(0), "{o:?}");
        assert!(
            o.stderr.contains("--mpi=pmi2") && o.stderr.contains("umask 077"),
            "{o:?}"
        );
    }
    // A key file others may read: refused, naming it.
    let key = home.join(".config/bulkwire/key");
    std::fs::write(&key, "ab".repeat(32)).unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o640)).unwrap();
    for o in derived_job(&home, &m, &[]) {
        assert_ne!(o.code, Some(0), "{o:?}");
        assert!(
            o.stderr.contains(key.to_str().unwrap()) && o.stderr.contains("0640"),
            "{o:?}"
        );
    }
    // A private key file, or the key in the environment: the job forms.
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    for o in derived_job(&home, &m, &[]) {
        assert_eq!(o.code, Some(0), "{o:?}");
    }
    std::fs::remove_file(&key).unwrap();
    for o in derived_job(&home, &m, &[("BULKWIRE_SECRET", SECRET)]) {
        assert_eq!(o.code, Some(0), "{o:?}");
    }
    std::fs::remove_dir_all(&home).unwrap();
    assert_no_leftovers(&m);
}
