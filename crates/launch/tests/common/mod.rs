//! Helpers for the process tests: running the probe with a time limit, reading its output
//! as it comes, and checking that no process of a test is left behind.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

pub const PROBE: &str = env!("CARGO_BIN_EXE_launch-probe");

/// Every process a test starts carries `BWL_TEST_MARK=<mark>` in its environment (children
/// inherit it), which is how [`leftovers`] finds them in /proc.
pub fn mark() -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    format!(
        "{}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    )
}

/// The probe with `args`, a clean job environment (whatever the test runner has), and `mark`.
pub fn probe(args: &[&str], mark: &str) -> Command {
    let mut c = Command::new(PROBE);
    c.args(args);
    clean(&mut c, mark);
    c
}

/// Removes job variables the test runner may have, and marks the command's processes.
pub fn clean(c: &mut Command, mark: &str) {
    c.env("BWL_TEST_MARK", mark);
    for (k, _) in std::env::vars() {
        if k.starts_with("BULKWIRE_") || k.starts_with("SLURM_") || k.starts_with("OMPI_") {
            c.env_remove(k);
        }
    }
}

/// A finished command.
#[derive(Debug)]
pub struct Out {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    pub elapsed: Duration,
}

impl Out {
    pub fn lines(&self) -> Vec<&str> {
        self.stdout.lines().collect()
    }
}

fn drain(r: impl Read + Send + 'static) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut s = String::new();
        let _ = BufReader::new(r).read_to_string(&mut s);
        s
    })
}

/// Runs `cmd` to its end, killing it (and so, by PR_SET_PDEATHSIG, its processes) if it
/// takes longer than `limit`: a hang fails the test instead of the CI run.
pub fn run(mut cmd: impl std::borrow::BorrowMut<Command>, limit: Duration) -> Out {
    let start = Instant::now();
    let mut child = cmd
        .borrow_mut()
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let o = drain(child.stdout.take().unwrap());
    let e = drain(child.stderr.take().unwrap());
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "timed out after {limit:?}\nstdout:\n{}\nstderr:\n{}",
                o.join().unwrap(),
                e.join().unwrap()
            );
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    Out {
        code: status.code(),
        stdout: o.join().unwrap(),
        stderr: e.join().unwrap(),
        elapsed: start.elapsed(),
    }
}

/// A running command whose stdout lines arrive on a channel. Killed when dropped.
pub struct Live {
    pub child: Child,
    lines: mpsc::Receiver<String>,
    pub seen: Vec<String>,
    stderr: Option<std::thread::JoinHandle<String>>,
}

impl Live {
    pub fn start(mut cmd: Command) -> Live {
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn");
        let (tx, rx) = mpsc::channel();
        let out = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            for l in BufReader::new(out).lines() {
                let Ok(l) = l else { break };
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        let stderr = Some(drain(child.stderr.take().unwrap()));
        Live {
            child,
            lines: rx,
            seen: Vec::new(),
            stderr,
        }
    }

    /// The next line matching `pred`, waiting at most `limit`.
    pub fn expect(&mut self, limit: Duration, pred: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + limit;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) => {
                    self.seen.push(l.clone());
                    if pred(&l) {
                        return l;
                    }
                }
                Err(_) => panic!("no expected line within {limit:?}; saw {:?}", self.seen),
            }
        }
    }

    /// Waits for the end (at most `limit`), returning the exit code, the remaining stdout
    /// lines and stderr.
    pub fn wait(mut self, limit: Duration) -> (Option<i32>, Vec<String>, String) {
        let start = Instant::now();
        let status = loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                break s;
            }
            assert!(start.elapsed() < limit, "did not end within {limit:?}");
            std::thread::sleep(Duration::from_millis(5));
        };
        let mut rest = std::mem::take(&mut self.seen);
        while let Ok(l) = self.lines.recv_timeout(Duration::from_secs(2)) {
            rest.push(l);
        }
        let err = self.stderr.take().unwrap().join().unwrap();
        (status.code(), rest, err)
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Pids of live processes carrying `mark`, after giving them `grace` to go away.
pub fn leftovers(mark: &str, grace: Duration) -> Vec<u32> {
    let needle = format!("BWL_TEST_MARK={mark}");
    let deadline = Instant::now() + grace;
    loop {
        let mut found = Vec::new();
        for e in std::fs::read_dir("/proc").unwrap().flatten() {
            let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            if pid == std::process::id() {
                continue;
            }
            // A zombie's environ reads empty, so only live processes match.
            if let Ok(env) = std::fs::read(e.path().join("environ"))
                && env.split(|&b| b == 0).any(|v| v == needle.as_bytes())
            {
                found.push(pid);
            }
        }
        if found.is_empty() || Instant::now() >= deadline {
            return found;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

pub fn assert_no_leftovers(mark: &str) {
    let left = leftovers(mark, Duration::from_secs(3));
    if !left.is_empty() {
        for &p in &left {
            // SAFETY: cleaning up our own test processes.
            unsafe { libc::kill(p as i32, libc::SIGKILL) };
        }
        panic!("processes left behind: {left:?}");
    }
}

/// `key=value` fields of a line.
pub fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    let k = format!("{key}=");
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(k.as_str()))
}

pub fn ns(line: &str) -> u128 {
    field(line, "t").and_then(|t| t.parse().ok()).expect("t=")
}
