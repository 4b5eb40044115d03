//! The host agent: what a multi-host launch runs on every other host, through the remote
//! shell (`ssh HOST bsprun --agent ...`), as mpirun runs its daemon there. It connects back
//! to the launcher's rendezvous server, receives how to start its host's ranks
//! ([`Start`]), starts them (each in its own process group, bound to a share of the host's
//! cores, killed if the agent dies), reports each one's exit status, passes signals on, and
//! ends them all when the launcher becomes unreachable. So a rank that dies remotely is
//! named with its signal, and nothing outlives the job on any host.
//!
//! Liveness runs both ways: each side sends a BEAT every [`BEAT_EVERY`] and gives the
//! other up after [`SILENCE`] without a frame (TCP keepalive alone takes about 25 s to
//! notice a host that vanished). The agent beats from a thread of its own, so that its
//! work (starting a large program on a loaded host) never silences it.

use std::ffi::OsString;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::LaunchError;
use crate::bind::{self, Placement};
use crate::env::JobEnv;
use crate::launch::{OutputForwarder, die_with_parent};
use crate::secret::Secret;
use crate::sys::{self, ExitKind};
use crate::wire::{self, AgentHello, Reader, Writer};

/// How often the agent and the launcher tell each other they are there.
pub const BEAT_EVERY: Duration = Duration::from_secs(1);
/// Silence after which the other side counts as unreachable: several beats, so that a
/// loaded host is not taken for a lost one, and short enough that a job with a lost host
/// ends within 15 s.
pub const SILENCE: Duration = Duration::from_secs(7);

/// What the launcher tells an agent: which ranks to start on its host, and how.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Start {
    /// The host as the user named it (for messages).
    pub host: String,
    pub ranks: Vec<u32>,
    pub nprocs: u32,
    pub job_id: u64,
    /// The rendezvous address as this host reaches it.
    pub rendezvous: SocketAddr,
    pub program: OsString,
    pub args: Vec<OsString>,
    /// Variables added to the agent's environment for every rank.
    pub env: Vec<(OsString, OsString)>,
    /// The launcher's working directory: the ranks run there when this host has it.
    pub cwd: OsString,
    pub tag_output: bool,
    /// The rank that gets the agent's standard input (the launcher's, relayed).
    pub stdin_rank: Option<u32>,
    pub placement: Placement,
}

impl Start {
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::frame(wire::T_START);
        w.str16(&self.host);
        w.u32(self.ranks.len() as u32);
        for &r in &self.ranks {
            w.u32(r);
        }
        w.u32(self.nprocs);
        w.u64(self.job_id);
        w.str16(&self.rendezvous.to_string());
        w.blob32(self.program.as_bytes());
        w.u32(self.args.len() as u32);
        for a in &self.args {
            w.blob32(a.as_bytes());
        }
        w.u32(self.env.len() as u32);
        for (k, v) in &self.env {
            w.blob32(k.as_bytes());
            w.blob32(v.as_bytes());
        }
        w.blob32(self.cwd.as_bytes());
        w.u8(self.tag_output as u8);
        w.u32(self.stdin_rank.unwrap_or(u32::MAX));
        w.u8(match self.placement {
            Placement::Share => 0,
            Placement::Free => 1,
        });
        w.finish_frame()
    }

    pub fn decode(p: &[u8]) -> Option<Start> {
        let mut r = Reader::new(p);
        let os = |b: &[u8]| OsString::from_vec(b.to_vec());
        let host = r.str16(wire::MAX_TEXT)?;
        let n = r.u32()? as usize;
        let ranks = (0..n.min(p.len()))
            .map(|_| r.u32())
            .collect::<Option<_>>()?;
        let (nprocs, job_id) = (r.u32()?, r.u64()?);
        let rendezvous = r.str16(wire::MAX_TEXT)?.parse().ok()?;
        let program = os(r.blob32()?);
        let n = r.u32()? as usize;
        let args = (0..n.min(p.len()))
            .map(|_| r.blob32().map(os))
            .collect::<Option<_>>()?;
        let n = r.u32()? as usize;
        let env = (0..n.min(p.len()))
            .map(|_| Some((os(r.blob32()?), os(r.blob32()?))))
            .collect::<Option<_>>()?;
        let cwd = os(r.blob32()?);
        let tag_output = r.u8()? != 0;
        let stdin_rank = Some(r.u32()?).filter(|&k| k != u32::MAX);
        let placement = match r.u8()? {
            0 => Placement::Share,
            _ => Placement::Free,
        };
        Some(Start {
            host,
            ranks,
            nprocs,
            job_id,
            rendezvous,
            program,
            args,
            env,
            cwd,
            tag_output,
            stdin_rank,
            placement,
        })
    }
}

/// The agent's command-line arguments after its own name: the launcher's address as this
/// host reaches it and the agent's index (what `bsprun --agent` takes). Nothing private:
/// any user on the host can read a command line. The secret comes on standard input
/// ([`secret_preamble`]).
pub fn agent_args(server: SocketAddr, index: usize) -> Vec<String> {
    vec![server.to_string(), index.to_string()]
}

/// What the launcher writes first to the agent's standard input (the remote shell carries
/// it, encrypted by ssh): the job's secret as one line of hex. What follows is rank 0's
/// input, when the host runs rank 0.
pub fn secret_preamble(secret: &Secret) -> Vec<u8> {
    format!("{}\n", secret.to_hex()).into_bytes()
}

/// Reads the [`secret_preamble`] from `fd` a byte at a time, so that nothing after its line
/// is consumed (the rest of the input goes to rank 0).
fn read_preamble(fd: i32) -> Result<Secret, String> {
    let mut line = Vec::with_capacity(65);
    loop {
        let mut b = 0u8;
        // SAFETY: reads one byte into a valid local.
        let n = unsafe { libc::read(fd, (&mut b as *mut u8).cast(), 1) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(format!(
                "cannot read the job's secret from standard input: {e}"
            ));
        }
        if n == 0 || b == b'\n' {
            break;
        }
        if line.len() >= 128 {
            break;
        }
        line.push(b);
    }
    std::str::from_utf8(&line)
        .ok()
        .and_then(Secret::from_hex)
        .ok_or_else(|| {
            "expected the job's secret (64 hex digits) as the first line of standard input \
             (value hidden); the agent is started by bsprun, not by hand"
                .to_string()
        })
}

/// Runs an agent from [`agent_args`], reading the secret from standard input first;
/// returns the exit status for the agent's process. Every problem is printed to stderr
/// (which the remote shell carries to the launcher).
pub fn agent_main(args: &[String]) -> i32 {
    let parsed = match args {
        [server, index] => server
            .parse::<SocketAddr>()
            .ok()
            .zip(index.parse::<u32>().ok()),
        _ => None,
    };
    let Some((server, index)) = parsed else {
        eprintln!(
            "bulkwire agent: expected SERVER INDEX, got {:?}",
            args.iter().map(|a| wire::printable(a)).collect::<Vec<_>>()
        );
        return 2;
    };
    let secret = match read_preamble(0) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("bulkwire agent on {}: {e}", crate::hostname());
            return 2;
        }
    };
    match run(server, &secret, index) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("bulkwire agent on {}: {e}", crate::hostname());
            1
        }
    }
}

struct Rank {
    rank: u32,
    pid: u32,
    pidfd: OwnedFd,
    exit: Option<ExitKind>,
}

/// The agent's connection to the launcher: frames in, frames out, and when each side last
/// spoke.
struct Link {
    stream: TcpStream,
    /// Writes, shared with the beat thread (a frame is written whole under the lock).
    writer: Arc<Mutex<TcpStream>>,
    rbuf: Vec<u8>,
    heard: Instant,
    /// Tells the beat thread to stop.
    done: Arc<AtomicBool>,
}

impl Link {
    fn send(&self, frame: &[u8]) -> io::Result<()> {
        let mut w = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        w.write_all(frame)
    }

    /// Beats every [`BEAT_EVERY`] until the link is dropped or a write fails.
    fn start_beats(&self) -> io::Result<()> {
        let (w, done) = (self.writer.clone(), self.done.clone());
        std::thread::Builder::new()
            .name("bulkwire-beat".into())
            .spawn(move || {
                let beat = wire::empty(wire::T_BEAT);
                while !done.load(Ordering::Relaxed) {
                    std::thread::sleep(BEAT_EVERY);
                    let mut g = w.lock().unwrap_or_else(|e| e.into_inner());
                    if g.write_all(&beat).is_err() {
                        return;
                    }
                }
            })?;
        Ok(())
    }

    /// Frames that arrived (call when the socket is readable); `Err` when it closed.
    fn receive(&mut self) -> io::Result<Vec<(u8, Vec<u8>)>> {
        let mut tmp = [0u8; 4096];
        let n = self.stream.read(&mut tmp)?;
        if n == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        self.heard = Instant::now();
        self.rbuf.extend_from_slice(&tmp[..n]);
        let mut frames = Vec::new();
        let mut used = 0;
        while let Some((t, p, k)) =
            wire::split_frame(&self.rbuf[used..]).map_err(io::Error::other)?
        {
            frames.push((t, p.to_vec()));
            used += k;
        }
        self.rbuf.drain(..used);
        Ok(frames)
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        self.done.store(true, Ordering::Relaxed);
    }
}

fn run(server: SocketAddr, secret: &Secret, index: u32) -> Result<i32, LaunchError> {
    let stream = TcpStream::connect_timeout(&server, crate::CONNECT_TIMEOUT).map_err(|e| {
        LaunchError::Connect {
            addr: server,
            source: e,
        }
    })?;
    let _ = stream.set_nodelay(true);
    crate::control::keepalive(&stream);
    stream.set_write_timeout(Some(SILENCE))?;
    stream.set_read_timeout(Some(crate::CONNECT_TIMEOUT))?;
    let mut buf = Vec::new();
    let nonce = match wire::read_frame(&mut &stream, &mut buf)? {
        Some(wire::T_CHALLENGE) => wire::decode_challenge(&buf).map_err(LaunchError::Protocol)?,
        _ => {
            return Err(LaunchError::Protocol(
                "no challenge from the launcher".into(),
            ));
        }
    };
    let hello = AgentHello {
        index,
        pid: std::process::id(),
    };
    let (frame, tr) = hello.encode(secret, &nonce);
    (&stream).write_all(&frame)?;
    match wire::read_frame(&mut &stream, &mut buf)? {
        Some(wire::T_WELCOME) => {
            if wire::verify_welcome(secret, &tr, &buf).is_err() {
                return Err(LaunchError::Rejected(format!(
                    "the server at {server} did not prove that it knows the job's secret \
                     (not the launcher)"
                )));
            }
        }
        Some(wire::T_REJECT) => {
            return Err(LaunchError::Rejected(wire::printable(&wire::text(&buf))));
        }
        _ => return Err(LaunchError::Protocol("no welcome from the launcher".into())),
    }
    let start = match wire::read_frame(&mut &stream, &mut buf)? {
        Some(wire::T_START) => Start::decode(&buf)
            .ok_or_else(|| LaunchError::Protocol("malformed start message".into()))?,
        _ => return Err(LaunchError::Protocol("no start message".into())),
    };
    stream.set_read_timeout(None)?;
    let mut link = Link {
        writer: Arc::new(Mutex::new(stream.try_clone()?)),
        stream,
        rbuf: Vec::new(),
        heard: Instant::now(),
        done: Arc::new(AtomicBool::new(false)),
    };
    link.start_beats()?;
    if std::path::Path::new(&start.cwd).is_dir() {
        let _ = std::env::set_current_dir(&start.cwd);
    }
    let (mut ranks, output) = match spawn_all(&start, secret) {
        Ok(x) => x,
        Err((rank, why, mut started)) => {
            let _ = link.send(&wire::nostart(rank, &why));
            kill_all(&mut started);
            return Ok(1);
        }
    };
    let code = supervise(&mut link, &mut ranks);
    if let Some(f) = output {
        f.finish(Duration::from_secs(1));
    }
    Ok(code)
}

type Spawned = (Vec<Rank>, Option<crate::launch::ForwarderHandle>);

/// Starts the host's ranks; on failure, the rank, why, and those already started.
fn spawn_all(s: &Start, secret: &Secret) -> Result<Spawned, (u32, String, Vec<Rank>)> {
    let plan = bind::plan(s.ranks.len() as u32, s.placement);
    // No SPMD entry: later SPMD sections run on the first host only, never an agent's.
    let env = JobEnv::bulkwire(0, s.nprocs, secret.clone(), s.job_id, s.rendezvous);
    let mut output = s.tag_output.then(OutputForwarder::default);
    let mut ranks = Vec::new();
    for (i, &rank) in s.ranks.iter().enumerate() {
        let mut cmd = Command::new(&s.program);
        cmd.args(&s.args)
            .envs(s.env.iter().map(|(k, v)| (k, v)))
            .envs(env.vars_for(rank))
            .process_group(0);
        die_with_parent(&mut cmd);
        if let Some(p) = &plan {
            crate::launch::bind_child(&mut cmd, p, i as u32);
        }
        cmd.stdin(if s.stdin_rank == Some(rank) {
            Stdio::inherit()
        } else {
            Stdio::null()
        });
        if output.is_some() {
            cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        }
        let started = cmd.spawn().and_then(|mut c| {
            if let Some(out) = output.as_mut() {
                if let Some(o) = c.stdout.take() {
                    out.add(rank, OwnedFd::from(o), false);
                }
                if let Some(e) = c.stderr.take() {
                    out.add(rank, OwnedFd::from(e), true);
                }
            }
            let pidfd = sys::pidfd_open(c.id());
            if pidfd.is_err() {
                let _ = c.kill();
                let _ = c.wait();
            }
            Ok((c.id(), pidfd?))
        });
        match started {
            Ok((pid, pidfd)) => ranks.push(Rank {
                rank,
                pid,
                pidfd,
                exit: None,
            }),
            Err(e) => {
                let why = format!(
                    "cannot start {} on host {}: {e}",
                    s.program.to_string_lossy(),
                    s.host
                );
                return Err((rank, why, ranks));
            }
        }
    }
    let handle = output.map(OutputForwarder::start).transpose();
    match handle {
        Ok(h) => Ok((ranks, h)),
        Err(e) => {
            let first = s.ranks.first().copied().unwrap_or(0);
            Err((first, format!("cannot relay output: {e}"), ranks))
        }
    }
}

/// Watches the ranks and the launcher until every rank has ended and been reported
/// (status 0), or the launcher is gone (the ranks are killed; status 1).
fn supervise(link: &mut Link, ranks: &mut [Rank]) -> i32 {
    loop {
        if ranks.iter().all(|r| r.exit.is_some()) {
            let _ = link.stream.flush();
            return 0;
        }
        let mut pfds = vec![libc::pollfd {
            fd: link.stream.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        }];
        let live: Vec<usize> = (0..ranks.len())
            .filter(|&i| ranks[i].exit.is_none())
            .collect();
        pfds.extend(live.iter().map(|&i| libc::pollfd {
            fd: ranks[i].pidfd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        }));
        let check = (link.heard + SILENCE).saturating_duration_since(Instant::now());
        if sys::poll(&mut pfds, Some(check.max(Duration::from_millis(10)))).is_err() {
            std::thread::sleep(Duration::from_millis(10));
        }
        for (k, &i) in live.iter().enumerate() {
            if pfds[k + 1].revents != 0
                && let Ok(Some(e)) = sys::pidfd_try_reap(&ranks[i].pidfd)
            {
                ranks[i].exit = Some(e);
                if link.send(&wire::exited(ranks[i].rank, e)).is_err() {
                    kill_all(ranks);
                    return 1;
                }
            }
        }
        let lost = if pfds[0].revents != 0 {
            match link.receive() {
                Ok(frames) => {
                    for (t, p) in frames {
                        if t == wire::T_SIGNAL
                            && let Some(sig) = Reader::new(&p).i32()
                        {
                            signal_all(ranks, sig);
                        }
                    }
                    false
                }
                Err(_) => true,
            }
        } else {
            false
        };
        if lost || link.heard.elapsed() >= SILENCE {
            kill_all(ranks);
            return 1;
        }
    }
}

fn signal_all(ranks: &[Rank], sig: i32) {
    for r in ranks.iter().filter(|r| r.exit.is_none()) {
        sys::kill_group(r.pid, sig);
        sys::pidfd_kill(&r.pidfd, sig);
    }
}

/// Kills every rank (and what it started in its group) and reaps them.
fn kill_all(ranks: &mut [Rank]) {
    for r in ranks.iter() {
        sys::kill_group(r.pid, libc::SIGKILL);
        sys::pidfd_kill(&r.pidfd, libc::SIGKILL);
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    for r in ranks.iter_mut() {
        while r.exit.is_none() && Instant::now() < deadline {
            match sys::pidfd_try_reap(&r.pidfd) {
                Ok(Some(e)) => r.exit = Some(e),
                Ok(None) => std::thread::sleep(Duration::from_millis(2)),
                Err(_) => break,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_round_trip_and_truncation() {
        let s = Start {
            host: "node2".into(),
            ranks: vec![4, 5, 6],
            nprocs: 8,
            job_id: 77,
            rendezvous: "10.0.0.1:4000".parse().unwrap(),
            program: "./prog".into(),
            args: vec!["-x".into(), "a b".into()],
            env: vec![("BULKWIRE_PROTOCOL".into(), "gbn".into())],
            cwd: "/home/u".into(),
            tag_output: true,
            stdin_rank: None,
            placement: Placement::Free,
        };
        let f = s.encode();
        let (t, p, _) = wire::split_frame(&f).unwrap().unwrap();
        assert_eq!(t, wire::T_START);
        assert_eq!(Start::decode(p), Some(s));
        for cut in 0..p.len() {
            assert!(Start::decode(&p[..cut]).is_none(), "cut {cut}");
        }
    }

    #[test]
    fn agent_arguments_hold_no_secret() {
        let secret = Secret::generate();
        let a = agent_args("10.1.2.3:555".parse().unwrap(), 2);
        assert_eq!(a, ["10.1.2.3:555", "2"]);
        let line = a.join(" ");
        assert!(!line.contains(&secret.to_hex()));
        assert!(!line.contains(&format!("{:x}", secret.cookie())));
        assert_eq!(agent_main(&a[..1]), 2);
    }

    #[test]
    fn the_preamble_is_read_to_its_line_only() {
        let secret = Secret::generate();
        let (r, w) = sys::pipe().unwrap();
        let mut input = secret_preamble(&secret);
        input.extend_from_slice(b"rank 0's input\n");
        std::fs::File::from(w).write_all(&input).unwrap();
        assert_eq!(read_preamble(r.as_raw_fd()).unwrap(), secret);
        let mut rest = String::new();
        std::fs::File::from(r).read_to_string(&mut rest).unwrap();
        assert_eq!(rest, "rank 0's input\n");
        let (r, w) = sys::pipe().unwrap();
        std::fs::File::from(w).write_all(b"0x1234\n").unwrap();
        let e = read_preamble(r.as_raw_fd()).unwrap_err();
        assert!(e.contains("value hidden") && !e.contains("1234"), "{e}");
    }
}
