//! Helpers for the process tests: running the probe with a time limit, reading its output
//! as it comes, and checking that no process of a test is left behind.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

pub const PROBE: &str = env!("CARGO_BIN_EXE_launch-probe");

pub use bulkwire_launch::testing::{Out, assert_no_leftovers, clean, mark};

/// The job secret the tests give every probe (a launcher's own replaces it for the
/// processes it starts).
pub const SECRET: &str = "7e577e577e577e577e577e577e577e577e577e577e577e577e577e577e577e57";

/// The probe with `args`, a clean job environment (whatever the test runner has), the
/// tests' job secret, and `mark`.
pub fn probe(args: &[&str], mark: &str) -> Command {
    let mut c = Command::new(PROBE);
    c.args(args);
    clean(&mut c, mark);
    c.env("BULKWIRE_SECRET", SECRET);
    c
}

fn drain(r: impl Read + Send + 'static) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut s = String::new();
        let _ = BufReader::new(r).read_to_string(&mut s);
        s
    })
}

/// Runs `cmd` to its end, killing it if it takes longer than `limit` (see
/// [`bulkwire_launch::testing::run`]).
pub fn run(mut cmd: impl std::borrow::BorrowMut<Command>, limit: Duration) -> Out {
    bulkwire_launch::testing::run(cmd.borrow_mut(), limit)
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

/// `key=value` fields of a line.
pub fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    let k = format!("{key}=");
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(k.as_str()))
}

pub fn ns(line: &str) -> u128 {
    field(line, "t").and_then(|t| t.parse().ok()).expect("t=")
}
