//! A process's side of the job: the control connection to the rendezvous server.

use std::io::{self, Write};
use std::net::{IpAddr, Shutdown, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::LaunchError;
use crate::env::JobEnv;
use crate::host::Card;
use crate::server::JobOutcome;
use crate::state::{Failure, JobState};
use crate::wire::{self, Hello, Reader};

/// How long `join` keeps trying to reach the server (it may still be starting on a remote
/// host when srun starts the processes).
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long to wait for the server's answer to hello, finish and abort.
const REPLY_TIMEOUT: Duration = Duration::from_secs(10);

/// TCP keepalive on control connections, so a remote host that vanishes (no FIN, no RST)
/// is noticed in about 25 s rather than after hours.
pub(crate) fn keepalive(s: &TcpStream) {
    let ka = socket2::TcpKeepalive::new()
        .with_time(Duration::from_secs(10))
        .with_interval(Duration::from_secs(5))
        .with_retries(3);
    let _ = socket2::SockRef::from(s).set_tcp_keepalive(&ka);
}

#[derive(Default)]
struct Mailbox {
    /// Round whose parts are arriving, and the parts so far (in rank order).
    part_round: u32,
    parts: Vec<Vec<u8>>,
    complete: Option<Vec<Vec<u8>>>,
    finish_acked: bool,
    abort_acked: bool,
    /// The reader thread has stopped (connection closed or broken).
    ended: bool,
}

struct Shared {
    state: Arc<JobState>,
    mb: Mutex<Mailbox>,
    cv: Condvar,
    /// We are closing the connection ourselves: its end is not a failure.
    closing: AtomicBool,
    nprocs: u32,
    rendezvous: std::net::SocketAddr,
    /// The rank whose process runs the server, if one does (from the welcome).
    server_rank: Option<u32>,
}

impl Shared {
    fn mailbox(&self) -> std::sync::MutexGuard<'_, Mailbox> {
        self.mb.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits until `done` says so, the job fails (`fail_ok`: ignore failures), the reader
    /// stops, or `timeout` passes. Rechecks at least every 50 ms, so a failure recorded by
    /// someone else than the reader thread is seen too.
    fn wait<T>(
        &self,
        timeout: Option<Duration>,
        fail_ok: bool,
        mut done: impl FnMut(&mut Mailbox) -> Option<T>,
    ) -> Result<T, LaunchError> {
        let deadline = timeout.map(|t| Instant::now() + t);
        let mut mb = self.mailbox();
        loop {
            if let Some(x) = done(&mut mb) {
                return Ok(x);
            }
            if !fail_ok && let Some(f) = self.state.failure() {
                return Err(LaunchError::JobFailed(f));
            }
            if mb.ended {
                return Err(LaunchError::LauncherLost(format!(
                    "control connection to {} closed",
                    self.rendezvous
                )));
            }
            let mut step = Duration::from_millis(50);
            if let Some(d) = deadline {
                let now = Instant::now();
                if now >= d {
                    return Err(LaunchError::LauncherLost(format!(
                        "no answer from the rendezvous server {} in {:?}",
                        self.rendezvous,
                        timeout.unwrap_or_default()
                    )));
                }
                step = step.min(d - now);
            }
            mb = self
                .cv
                .wait_timeout(mb, step)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }
}

/// The open control connection of a process in a job. It lives as long as the job: it
/// carries the exchanges (business cards and later rounds) and the failure notices, which
/// a background thread records in the [`JobState`] that [`Control::state`] returns.
///
/// End it with [`Control::finish`]. Dropping it without finishing tells the job this
/// process left early, which fails the job.
pub struct Control {
    env: JobEnv,
    writer: Mutex<TcpStream>,
    shared: Arc<Shared>,
    local_ip: IpAddr,
    round: u32,
    reader: Option<JoinHandle<()>>,
    /// Self-spawn, rank 0: the server thread (it outlives this process's own work).
    server: Option<JoinHandle<JobOutcome>>,
    /// Self-spawn, rank 0: this thread's CPUs before it took its share of the job's,
    /// given back at [`Control::finish`] (the program goes on after the job, with all of
    /// them: `bsp_nprocs()` and a later section count them).
    affinity: Option<crate::bind::CpuSet>,
    done: bool,
}

impl std::fmt::Debug for Control {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Control")
            .field("env", &self.env)
            .field("local_ip", &self.local_ip)
            .field("round", &self.round)
            .finish()
    }
}

impl Control {
    /// Connects to the job's rendezvous server and is admitted: each side proves it knows
    /// the job's secret (a mismatch on the server's side is [`LaunchError::Rejected`]; a
    /// server that can't prove it gets nothing, not even this process's card).
    pub fn join(env: &JobEnv) -> Result<Control, LaunchError> {
        Control::join_timeout(env, CONNECT_TIMEOUT)
    }

    /// [`Control::join`], trying for at most `connect_timeout`. A connection closed before
    /// the server's challenge or welcome (a server shedding a flood of idle connections,
    /// one still starting) is retried with backoff until then.
    pub fn join_timeout(env: &JobEnv, connect_timeout: Duration) -> Result<Control, LaunchError> {
        let deadline = Instant::now() + connect_timeout;
        let mut pause = Duration::from_millis(10);
        let (stream, server_rank) = loop {
            let stream = connect(env, deadline.saturating_duration_since(Instant::now()))?;
            // A silent peer (not a server of ours) mustn't hold us past the deadline.
            let wait = deadline
                .saturating_duration_since(Instant::now())
                .clamp(Duration::from_secs(2), REPLY_TIMEOUT);
            match handshake(env, &stream, wait) {
                Ok(rank) => break (stream, rank),
                Err(Handshake::Final(e)) => return Err(e),
                Err(Handshake::Retry(e)) => {
                    if Instant::now() + pause >= deadline {
                        return Err(e);
                    }
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(Duration::from_millis(500));
                }
            }
        };
        let local_ip = stream.local_addr()?.ip();
        stream.set_read_timeout(None)?;

        let shared = Arc::new(Shared {
            state: Arc::new(JobState::new()),
            mb: Mutex::new(Mailbox::default()),
            cv: Condvar::new(),
            closing: AtomicBool::new(false),
            nprocs: env.nprocs,
            rendezvous: env.rendezvous,
            server_rank: server_rank.filter(|&k| k != env.rank),
        });
        let rd = stream.try_clone()?;
        let sh = shared.clone();
        let reader = std::thread::Builder::new()
            .name("bulkwire-control".into())
            .spawn(move || read_loop(rd, &sh))?;
        Ok(Control {
            env: env.clone(),
            writer: Mutex::new(stream),
            shared,
            local_ip,
            round: 0,
            reader: Some(reader),
            server: None,
            affinity: None,
            done: false,
        })
    }

    pub(crate) fn set_server(&mut self, h: JoinHandle<JobOutcome>) {
        self.server = Some(h);
    }

    /// The CPUs to give this thread back at [`Control::finish`].
    pub(crate) fn restore_affinity_at_finish(&mut self, cpus: crate::bind::CpuSet) {
        self.affinity = Some(cpus);
    }

    pub fn env(&self) -> &JobEnv {
        &self.env
    }

    pub fn rank(&self) -> u32 {
        self.env.rank
    }

    pub fn nprocs(&self) -> u32 {
        self.env.nprocs
    }

    /// The packet cookie (derived from the job's secret).
    pub fn cookie(&self) -> u32 {
        self.env.cookie()
    }

    /// The job's secret, for keys of the data plane ([`crate::Secret::derive`]).
    pub fn secret(&self) -> &crate::Secret {
        &self.env.secret
    }

    /// The CPUs of this host the job's processes share (see [`JobEnv::cpus`]).
    pub fn host_cpus(&self) -> usize {
        self.env.cpus()
    }

    /// This process's business card with the given data addresses.
    pub fn card(&self, addrs: Vec<std::net::SocketAddr>) -> Card {
        Card::local(self.env.rank, self.env.host(), addrs)
    }

    /// The local address of the control connection: the interface that reaches the
    /// rendezvous host, hence the one to bind data sockets on so that peers can reach them.
    pub fn local_ip(&self) -> IpAddr {
        self.local_ip
    }

    /// The job's health, for wait loops to poll (`state().is_failed()`) and for callbacks.
    pub fn state(&self) -> Arc<JobState> {
        self.shared.state.clone()
    }

    /// Sends `blob` and returns every rank's blob, indexed by rank (an allgather through the
    /// server). Every rank must call it the same number of times; the first call is
    /// usually the business cards. Fails with [`LaunchError::JobFailed`] as soon as the job
    /// fails, so it never waits for a dead process.
    pub fn allgather(&mut self, blob: &[u8]) -> Result<Vec<Vec<u8>>, LaunchError> {
        if blob.len() > wire::MAX_BLOB {
            return Err(LaunchError::TooLarge {
                len: blob.len(),
                max: wire::MAX_BLOB,
            });
        }
        if let Some(f) = self.shared.state.failure() {
            return Err(LaunchError::JobFailed(f));
        }
        self.write(&wire::exchange(self.round, blob))?;
        self.round += 1;
        self.shared.wait(None, false, |mb| mb.complete.take())
    }

    /// std's TcpStream writes with MSG_NOSIGNAL, so a launcher that has gone away gives
    /// EPIPE here, not a SIGPIPE that would kill a C program hosting this library.
    fn write(&self, frame: &[u8]) -> Result<(), LaunchError> {
        let mut w = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        w.write_all(frame).map_err(|e| {
            LaunchError::LauncherLost(format!(
                "writing to the rendezvous server {}: {e}",
                self.env.rendezvous
            ))
        })
    }

    /// Tells the job this process aborts with `msg`, without exiting: the launcher prints
    /// the message (once), notifies every process, and terminates the job. Returns when the
    /// launcher has the message.
    pub fn notify_abort(&self, msg: &str) -> Result<(), LaunchError> {
        self.write(&wire::text_frame(wire::T_ABORT, msg))?;
        self.shared
            .wait(Some(REPLY_TIMEOUT), true, |mb| mb.abort_acked.then_some(()))
    }

    /// Aborts the job with `msg` and exits with status 1 (`bsp_abort`). The message is
    /// printed by the launcher; here only if the launcher can't be reached.
    pub fn abort(&self, msg: &str) -> ! {
        if let Err(e) = self.notify_abort(msg) {
            let line = format!("rank {} aborted: {msg} ({e})\n", self.env.rank);
            let _ = io::stderr().lock().write_all(line.as_bytes());
        }
        std::process::exit(1)
    }

    /// Ends this process's part in the job with `status` (0: success) and closes the
    /// connection. In self-spawn mode rank 0 also waits here for the other processes to
    /// end, and returns [`LaunchError::JobFailed`] if any failed. Otherwise returns
    /// `JobFailed` if the job had failed before.
    pub fn finish(mut self, status: i32) -> Result<(), LaunchError> {
        self.done = true;
        let sent = self.write(&wire::finish(status)).and_then(|()| {
            self.shared.wait(Some(REPLY_TIMEOUT), true, |mb| {
                mb.finish_acked.then_some(())
            })
        });
        self.close();
        if let Some(cpus) = self.affinity.take() {
            // Best effort: a mask that can no longer be set (CPUs taken offline) leaves
            // the share, which is still a valid place to run.
            let _ = cpus.apply();
        }
        if let Some(h) = self.server.take() {
            let outcome = h.join().map_err(|_| {
                LaunchError::Protocol("the rendezvous server thread panicked".into())
            })?;
            if let Some(f) = outcome.failures.into_iter().next() {
                return Err(LaunchError::JobFailed(f));
            }
            return Ok(());
        }
        if let Some(f) = self.shared.state.failure() {
            return Err(LaunchError::JobFailed(f));
        }
        sent
    }

    fn close(&mut self) {
        self.shared.closing.store(true, Ordering::SeqCst);
        {
            let w = self.writer.lock().unwrap_or_else(|e| e.into_inner());
            let _ = w.shutdown(Shutdown::Both);
        }
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
    }
}

impl Drop for Control {
    fn drop(&mut self) {
        if !self.done {
            // Leaving without finish: the server sees the connection close and fails the job.
            self.close();
        }
    }
}

/// Why a handshake did not admit us: worth another connection, or not.
enum Handshake {
    Retry(LaunchError),
    Final(LaunchError),
}

/// CHALLENGE, HELLO with our proof, WELCOME with the server's: the rank whose process runs
/// the server (if one does), once each side has proven the secret.
fn handshake(env: &JobEnv, stream: &TcpStream, wait: Duration) -> Result<Option<u32>, Handshake> {
    use Handshake::{Final, Retry};
    let _ = stream.set_nodelay(true);
    keepalive(stream);
    let at = env.rendezvous;
    let lost = |why: String| LaunchError::LauncherLost(format!("{at}: {why}"));
    stream
        .set_read_timeout(Some(wait))
        .map_err(|e| Final(e.into()))?;
    let mut buf = Vec::new();
    let nonce = match wire::read_frame(&mut &*stream, &mut buf) {
        Ok(Some(wire::T_CHALLENGE)) => wire::decode_challenge(&buf)
            .map_err(|e| Final(LaunchError::Protocol(format!("{at}: {e}"))))?,
        Ok(Some(t)) => {
            return Err(Final(LaunchError::Protocol(format!(
                "unexpected message {t:#x} from {at} instead of a challenge (a bulkwire \
                 server of another version, or not a bulkwire server?)"
            ))));
        }
        Ok(None) => {
            return Err(Retry(lost(
                "closed the connection before its challenge".into(),
            )));
        }
        Err(e) => return Err(Retry(lost(format!("no challenge ({})", io_why(&e))))),
    };
    let hello = Hello {
        version: wire::VERSION,
        rank: env.rank,
        nprocs: env.nprocs,
        pid: std::process::id(),
        host: env.host(),
    };
    let (frame, tr) = hello.encode(&env.secret, &nonce);
    if let Err(e) = (&*stream).write_all(&frame) {
        return Err(Retry(lost(format!("writing hello: {}", io_why(&e)))));
    }
    let r = match wire::read_frame(&mut &*stream, &mut buf) {
        Ok(Some(wire::T_WELCOME)) => match wire::verify_welcome(&env.secret, &tr, &buf) {
            Ok(rank) => Ok(rank),
            Err(()) => Err(Final(LaunchError::Rejected(format!(
                "the server at {at} did not prove that it knows the job's secret: not this \
                 job's rendezvous (an impostor, or a server of another job); nothing was sent \
                 to it"
            )))),
        },
        Ok(Some(wire::T_REJECT)) => {
            let text = wire::printable(&wire::text(&buf));
            let hint = if text == crate::server::NOT_ADMITTED {
                " (its secret differs from this process's: a server of another job, or a \
                 stale BULKWIRE_SECRET?)"
            } else {
                ""
            };
            Err(Final(LaunchError::Rejected(format!(
                "the rendezvous server {at} rejected rank {}: {text}{hint}",
                env.rank
            ))))
        }
        Ok(Some(t)) => Err(Final(LaunchError::Protocol(format!(
            "unexpected message {t:#x} from {at} instead of welcome"
        )))),
        Ok(None) => Err(Retry(lost("closed the connection during hello".into()))),
        Err(e) => Err(Retry(lost(format!("no welcome ({})", io_why(&e))))),
    };
    let rank = r?;
    stream.set_read_timeout(None).map_err(|e| Final(e.into()))?;
    Ok(rank)
}

/// An I/O error in words; a timeout says what may be behind it.
fn io_why(e: &io::Error) -> String {
    match e.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => {
            "no answer in time: the server is overloaded or out of file descriptors, or the \
             peer is not a bulkwire server"
                .into()
        }
        _ => crate::sys::describe_io(e),
    }
}

fn connect(env: &JobEnv, timeout: Duration) -> Result<TcpStream, LaunchError> {
    let deadline = Instant::now() + timeout;
    let mut pause = Duration::from_millis(10);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match TcpStream::connect_timeout(&env.rendezvous, left.max(Duration::from_millis(100))) {
            Ok(s) => return Ok(s),
            // Out of descriptors here: waiting won't help, and the error must say so.
            Err(e) if matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)) => {
                return Err(LaunchError::Connect {
                    addr: env.rendezvous,
                    source: e,
                });
            }
            Err(e) => {
                if Instant::now() + pause >= deadline {
                    return Err(LaunchError::Connect {
                        addr: env.rendezvous,
                        source: e,
                    });
                }
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(200));
            }
        }
    }
}

fn read_loop(mut s: TcpStream, sh: &Shared) {
    let mut buf = Vec::new();
    let end = loop {
        match wire::read_frame(&mut s, &mut buf) {
            Ok(Some(t)) => {
                if let Err(e) = on_frame(sh, t, &buf) {
                    break Some(format!("malformed message from the launcher: {e}"));
                }
            }
            Ok(None) => break Some("the launcher closed the connection".to_string()),
            Err(e) => break Some(format!("{e}")),
        }
    };
    if !sh.closing.load(Ordering::SeqCst)
        && let Some(detail) = end
    {
        let detail = format!("rendezvous {}: {detail}", sh.rendezvous);
        sh.state.record(match sh.server_rank {
            Some(rank) => Failure::ServerGone { rank, detail },
            None => Failure::LauncherLost { detail },
        });
    }
    sh.mailbox().ended = true;
    sh.cv.notify_all();
}

fn on_frame(sh: &Shared, t: u8, p: &[u8]) -> Result<(), String> {
    match t {
        wire::T_PART => {
            let mut r = Reader::new(p);
            let (round, rank) = r.u32().zip(r.u32()).ok_or("short part")?;
            let blob = r.rest();
            let mut mb = sh.mailbox();
            if round != mb.part_round || rank as usize != mb.parts.len() || rank >= sh.nprocs {
                return Err(format!(
                    "part of round {round} rank {rank}, expected round {} rank {}",
                    mb.part_round,
                    mb.parts.len()
                ));
            }
            mb.parts.push(blob.to_vec());
            if mb.parts.len() == sh.nprocs as usize {
                let all = std::mem::take(&mut mb.parts);
                mb.complete = Some(all);
                mb.part_round += 1;
                sh.cv.notify_all();
            }
        }
        wire::T_FAILED => {
            let f = crate::state::Failure::decode(p).ok_or("malformed failure notice")?;
            sh.state.record(f);
            // Under the mailbox lock, so a waiter between its check and its wait can't miss it.
            let _mb = sh.mailbox();
            sh.cv.notify_all();
        }
        wire::T_ACK => {
            let mut mb = sh.mailbox();
            match p.first() {
                Some(&wire::ACK_FINISH) => mb.finish_acked = true,
                Some(&wire::ACK_ABORT) => mb.abort_acked = true,
                _ => return Err("malformed ack".into()),
            }
            sh.cv.notify_all();
        }
        t => return Err(format!("unexpected message type {t:#x}")),
    }
    Ok(())
}
