//! What a process knows about its job's health: [`Failure`] and [`JobState`].

use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::sys::{ExitKind, eventfd, eventfd_signal, signal_name};
use crate::wire::{MAX_TEXT, Reader, Writer};

/// Why a job cannot go on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Failure {
    /// A process called abort.
    Aborted { rank: u32, message: String },
    /// A process was killed by a signal before finishing.
    Signaled { rank: u32, signal: i32, core: bool },
    /// A process exited before finishing (`joined`: after joining the job), or exited
    /// with a non-zero status after finishing (`finished`).
    Exited {
        rank: u32,
        code: i32,
        joined: bool,
        finished: bool,
    },
    /// A process's control connection closed before it finished, and no exit status is
    /// known (a remote process, or one that isn't the launcher's child).
    Disconnected { rank: u32 },
    /// The control connection to the launcher broke: the launcher is gone.
    LauncherLost { detail: String },
    /// The control connection broke, and the server ran in rank `rank`'s process (a
    /// self-spawned rank 0, or rank 0 of a job formed through another launcher): that
    /// rank is gone.
    ServerGone { rank: u32, detail: String },
    /// The job ran past its time limit.
    TimedOut { after: Duration },
    /// The launcher was interrupted (Ctrl-C, SIGTERM, SIGHUP).
    Interrupted { signal: i32 },
    /// Anything else, in words (a process broke the control protocol, couldn't be started,
    /// asked for an exchange after a peer had finished...).
    Other { rank: Option<u32>, message: String },
}

impl Failure {
    /// The rank at fault, if one is.
    pub fn rank(&self) -> Option<u32> {
        match *self {
            Failure::Aborted { rank, .. }
            | Failure::Signaled { rank, .. }
            | Failure::Exited { rank, .. }
            | Failure::Disconnected { rank }
            | Failure::ServerGone { rank, .. } => Some(rank),
            Failure::Other { rank, .. } => rank,
            Failure::LauncherLost { .. }
            | Failure::TimedOut { .. }
            | Failure::Interrupted { .. } => None,
        }
    }

    /// The exit status a launcher reports for a job that failed this way: the failed
    /// process's status, 128 + a signal (shell convention), 124 for a timeout (as
    /// `timeout(1)`), 1 otherwise.
    pub fn exit_code(&self) -> i32 {
        match *self {
            Failure::Signaled { signal, .. } | Failure::Interrupted { signal } => 128 + signal,
            Failure::Exited { code, .. } if code != 0 => code,
            Failure::TimedOut { .. } => 124,
            _ => 1,
        }
    }

    pub(crate) fn from_exit(rank: u32, exit: ExitKind, joined: bool, finished: bool) -> Failure {
        match exit {
            ExitKind::Code(code) => Failure::Exited {
                rank,
                code,
                joined,
                finished,
            },
            ExitKind::Signal { signal, core } => Failure::Signaled { rank, signal, core },
        }
    }

    pub(crate) fn encode(&self, w: &mut Writer) {
        let none = u32::MAX;
        let (tag, rank, num, flags, text): (u8, u32, i64, u8, &str) = match self {
            Failure::Aborted { rank, message } => (1, *rank, 0, 0, message),
            Failure::Signaled { rank, signal, core } => (2, *rank, *signal as i64, *core as u8, ""),
            Failure::Exited {
                rank,
                code,
                joined,
                finished,
            } => (
                3,
                *rank,
                *code as i64,
                *joined as u8 | (*finished as u8) << 1,
                "",
            ),
            Failure::Disconnected { rank } => (4, *rank, 0, 0, ""),
            Failure::LauncherLost { detail } => (5, none, 0, 0, detail),
            Failure::TimedOut { after } => (6, none, after.as_millis() as i64, 0, ""),
            Failure::Interrupted { signal } => (7, none, *signal as i64, 0, ""),
            Failure::Other { rank, message } => (8, rank.unwrap_or(none), 0, 0, message),
            Failure::ServerGone { rank, detail } => (9, *rank, 0, 0, detail),
        };
        w.u8(tag);
        w.u32(rank);
        w.u64(num as u64);
        w.u8(flags);
        w.str16(text);
    }

    /// Decodes a failure notice; an unknown kind becomes [`Failure::Other`] so a newer
    /// launcher's notice still fails the job.
    pub(crate) fn decode(p: &[u8]) -> Option<Failure> {
        let mut r = Reader::new(p);
        let tag = r.u8()?;
        let rank = r.u32()?;
        let num = r.u64()? as i64;
        let flags = r.u8()?;
        let text = r.str16(MAX_TEXT)?;
        let opt_rank = (rank != u32::MAX).then_some(rank);
        let small = |n: i64| i32::try_from(n).ok();
        Some(match tag {
            1 => Failure::Aborted {
                rank,
                message: text,
            },
            2 => Failure::Signaled {
                rank,
                signal: small(num)?,
                core: flags & 1 != 0,
            },
            3 => Failure::Exited {
                rank,
                code: small(num)?,
                joined: flags & 1 != 0,
                finished: flags & 2 != 0,
            },
            4 => Failure::Disconnected { rank },
            5 => Failure::LauncherLost { detail: text },
            6 => Failure::TimedOut {
                after: Duration::from_millis(num.max(0) as u64),
            },
            7 => Failure::Interrupted {
                signal: small(num)?,
            },
            9 => Failure::ServerGone { rank, detail: text },
            _ => Failure::Other {
                rank: opt_rank,
                message: if text.is_empty() {
                    format!("job failed (unknown notice {tag})")
                } else {
                    text
                },
            },
        })
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Aborted { rank, message } => write!(f, "rank {rank} aborted: {message}"),
            Failure::Signaled { rank, signal, core } => {
                let e = ExitKind::Signal {
                    signal: *signal,
                    core: *core,
                };
                write!(f, "rank {rank} died ({e})")
            }
            Failure::Exited {
                rank,
                code,
                joined,
                finished,
            } => {
                if *finished {
                    write!(f, "rank {rank} exited with status {code} after finishing")
                } else if *joined {
                    write!(f, "rank {rank} exited with status {code} before finishing")
                } else {
                    write!(
                        f,
                        "rank {rank} exited with status {code} without joining the job"
                    )
                }
            }
            Failure::Disconnected { rank } => write!(
                f,
                "rank {rank} lost its control connection before finishing (died?)"
            ),
            Failure::LauncherLost { detail } => {
                write!(f, "lost the control connection to the launcher ({detail})")
            }
            Failure::ServerGone { rank, detail } => write!(
                f,
                "rank {rank} is gone: it ran the job's rendezvous, and the control \
                 connection to it broke ({detail})"
            ),
            Failure::TimedOut { after } => {
                write!(f, "the job timed out after {:.1} s", after.as_secs_f64())
            }
            Failure::Interrupted { signal } => {
                write!(f, "the job was interrupted (signal {signal}")?;
                if let Some(n) = signal_name(*signal) {
                    write!(f, ", {n}")?;
                }
                write!(f, ")")
            }
            Failure::Other { rank, message } => match rank {
                Some(r) => write!(f, "rank {r}: {message}"),
                None => write!(f, "{message}"),
            },
        }
    }
}

type Callback = Box<dyn Fn(&Failure) + Send + Sync>;

/// A process's view of its job's health, shared (`Arc`) between the control connection's
/// reader thread, which records failures, and the wait loops of the layers above, which
/// poll [`JobState::is_failed`] (one relaxed atomic load) on every idle spin. Only the
/// first failure is kept: the rest are usually its consequences.
pub struct JobState {
    failed: AtomicBool,
    first: Mutex<Option<Failure>>,
    cv: Condvar,
    callbacks: Mutex<Vec<Callback>>,
    wake: Option<OwnedFd>,
}

impl Default for JobState {
    fn default() -> Self {
        JobState::new()
    }
}

impl std::fmt::Debug for JobState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobState")
            .field("failure", &self.failure())
            .finish()
    }
}

impl JobState {
    /// A healthy job (the control connection makes one; tests of upper layers may too).
    pub fn new() -> JobState {
        JobState {
            failed: AtomicBool::new(false),
            first: Mutex::new(None),
            cv: Condvar::new(),
            callbacks: Mutex::new(Vec::new()),
            wake: eventfd().ok(),
        }
    }

    /// True once the job has failed. Cheap enough for every iteration of a spin loop.
    #[inline]
    pub fn is_failed(&self) -> bool {
        self.failed.load(Ordering::Relaxed)
    }

    /// The first failure, if any.
    pub fn failure(&self) -> Option<Failure> {
        if !self.is_failed() {
            return None;
        }
        lock(&self.first).clone()
    }

    /// An eventfd that becomes readable when the job fails (and stays readable). A wait
    /// loop that blocks in `poll` on its sockets adds it to the set, so a failure notice
    /// wakes it at once instead of at its next timeout. `None` if no fd could be made.
    pub fn wake_fd(&self) -> Option<RawFd> {
        self.wake.as_ref().map(|f| f.as_raw_fd())
    }

    /// Blocks until the job fails or `timeout` passes (`None`: no limit).
    pub fn wait(&self, timeout: Option<Duration>) -> Option<Failure> {
        let deadline = timeout.map(|t| Instant::now() + t);
        let mut g = lock(&self.first);
        loop {
            if let Some(f) = g.as_ref() {
                return Some(f.clone());
            }
            match deadline {
                None => g = self.cv.wait(g).unwrap_or_else(|e| e.into_inner()),
                Some(d) => {
                    let now = Instant::now();
                    if now >= d {
                        return None;
                    }
                    g = self
                        .cv
                        .wait_timeout(g, d - now)
                        .unwrap_or_else(|e| e.into_inner())
                        .0;
                }
            }
        }
    }

    /// Runs `f` (on the reader thread) when the job fails; at once if it already has.
    /// Keep it short and don't call back into the control connection from it: it is
    /// meant for waking a thread or setting a flag (or `_exit` for a program that wants
    /// no recovery).
    pub fn on_failure(&self, f: impl Fn(&Failure) + Send + Sync + 'static) {
        let mut cbs = lock(&self.callbacks);
        // Checked under the callbacks lock, which record() takes before running them: so
        // f runs exactly once, here or there.
        if let Some(fail) = self.failure() {
            drop(cbs);
            f(&fail);
            return;
        }
        cbs.push(Box::new(f));
    }

    /// Records a failure: the first one is kept, wakes waiters and runs the callbacks.
    /// Returns true if this was the first. Records only: telling the other processes is
    /// the launcher's job (or [`crate::Control::notify_abort`]'s).
    pub fn record(&self, f: Failure) -> bool {
        {
            let mut g = lock(&self.first);
            if g.is_some() {
                return false;
            }
            *g = Some(f.clone());
            self.failed.store(true, Ordering::Release);
            self.cv.notify_all();
        }
        if let Some(w) = &self.wake {
            eventfd_signal(w);
        }
        let cbs = lock(&self.callbacks);
        for cb in cbs.iter() {
            cb(&f);
        }
        true
    }
}

/// Poison-tolerant lock: a panicking callback must not make the failure state unreadable.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// For tests of upper layers: a state that has failed.
pub fn failed_state(f: Failure) -> Arc<JobState> {
    let s = Arc::new(JobState::new());
    s.record(f);
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    fn all() -> Vec<Failure> {
        vec![
            Failure::Aborted {
                rank: 2,
                message: "bad input".into(),
            },
            Failure::Signaled {
                rank: 1,
                signal: 9,
                core: false,
            },
            Failure::Signaled {
                rank: 1,
                signal: 11,
                core: true,
            },
            Failure::Exited {
                rank: 0,
                code: 3,
                joined: true,
                finished: false,
            },
            Failure::Exited {
                rank: 4,
                code: 0,
                joined: false,
                finished: false,
            },
            Failure::Disconnected { rank: 7 },
            Failure::LauncherLost {
                detail: "eof".into(),
            },
            Failure::TimedOut {
                after: Duration::from_millis(1500),
            },
            Failure::Interrupted { signal: 2 },
            Failure::ServerGone {
                rank: 0,
                detail: "eof".into(),
            },
            Failure::Other {
                rank: Some(3),
                message: "x".into(),
            },
            Failure::Other {
                rank: None,
                message: "y".into(),
            },
        ]
    }

    #[test]
    fn encode_decode_round_trip() {
        for f in all() {
            let mut w = Writer::default();
            f.encode(&mut w);
            let b = w.into_vec();
            assert_eq!(Failure::decode(&b), Some(f.clone()), "{f}");
            for cut in 0..b.len() {
                assert!(Failure::decode(&b[..cut]).is_none());
            }
        }
    }

    #[test]
    fn messages() {
        let s: Vec<String> = all().iter().map(|f| f.to_string()).collect();
        assert_eq!(s[0], "rank 2 aborted: bad input");
        assert_eq!(s[1], "rank 1 died (signal 9, SIGKILL)");
        assert_eq!(s[2], "rank 1 died (signal 11, SIGSEGV, core dumped)");
        assert_eq!(s[3], "rank 0 exited with status 3 before finishing");
        assert_eq!(s[8], "the job was interrupted (signal 2, SIGINT)");
        assert_eq!(all()[1].exit_code(), 137);
        assert_eq!(all()[7].exit_code(), 124);
    }

    #[test]
    fn first_failure_wins_and_callbacks_run_once() {
        let s = Arc::new(JobState::new());
        let n = Arc::new(AtomicUsize::new(0));
        let n2 = n.clone();
        s.on_failure(move |_| {
            n2.fetch_add(1, Ordering::SeqCst);
        });
        assert!(!s.is_failed());
        assert_eq!(s.wait(Some(Duration::from_millis(10))), None);
        let s2 = s.clone();
        let t = std::thread::spawn(move || s2.wait(Some(Duration::from_secs(10))));
        assert!(s.record(Failure::Disconnected { rank: 1 }));
        assert!(!s.record(Failure::Disconnected { rank: 2 }));
        assert_eq!(t.join().unwrap(), Some(Failure::Disconnected { rank: 1 }));
        assert_eq!(n.load(Ordering::SeqCst), 1);
        let n3 = n.clone();
        s.on_failure(move |_| {
            n3.fetch_add(10, Ordering::SeqCst);
        });
        assert_eq!(n.load(Ordering::SeqCst), 11);
        // The wake fd is readable.
        let mut pfd = [libc::pollfd {
            fd: s.wake_fd().unwrap(),
            events: libc::POLLIN,
            revents: 0,
        }];
        assert_eq!(crate::sys::poll(&mut pfd, Some(Duration::ZERO)).unwrap(), 1);
    }
}
