//! The rendezvous server: one poll loop over the listening socket, every process's control
//! connection, and (when the server's process started them) the processes' pidfds.
//!
//! It admits processes that prove they know the job's secret (and proves it back, see
//! [`crate::wire`]), checking rank and size, runs exchange rounds (allgathers of
//! opaque blobs; the first is the business cards), and watches the job's health: an abort,
//! a control connection closing before its process finished, or a child's abnormal exit is
//! a failure, which is printed once, sent to every process, and (for children) followed by
//! SIGTERM and then SIGKILL. A process anywhere that can reach its address may join; on
//! other hosts, the ranks a multi-host launch starts are watched through their host's
//! agent ([`crate::agent`], the `agents` submodule here), which reports their exits.
//!
//! The job has a join deadline ([`ServerConfig::join_timeout`]): a job whose processes have
//! not all joined by then fails, naming the ranks that never came; a process refused while
//! the job forms (wrong size or rank) fails it at once, naming it and why.
//!
//! Connections that have not proven the secret are cheap and bounded: each gets a short
//! deadline ([`AUTH_TIMEOUT`]) and a few bytes ([`AUTH_BYTES`]) to do so, at most
//! [`AUTH_CAP`] of them are kept (a new one closes the oldest, so a flood of idle
//! connections can't keep real processes out), and they learn nothing: the answer is
//! "not admitted", whatever was wrong.

use std::collections::{HashSet, VecDeque};
use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::secret::Secret;
use crate::state::Failure;
use crate::sys::{self, ExitKind};
use crate::wire::{self, Hello};

/// After a process's connection closes before it finished, how long to wait for its exit
/// status (which names the signal) before reporting a bare disconnection. The kernel closes
/// a dying process's sockets just before it becomes a zombie, so this is normally microseconds.
const EXIT_STATUS_WAIT: Duration = Duration::from_millis(300);
/// A connection that hasn't proven the secret by then is dropped (a port scan, a stuck
/// process, a flood): a real process answers the challenge at once.
pub const AUTH_TIMEOUT: Duration = Duration::from_secs(5);
/// Bytes a connection may send before it has proven the secret (a HELLO is far smaller).
pub const AUTH_BYTES: usize = 8 * 1024;
/// Connections kept that have not proven the secret; a new one closes the oldest.
pub const AUTH_CAP: usize = 256;
/// Out of descriptors, a connection that has not proven the secret after this long is
/// closed for a new one (a real process proves it within milliseconds).
const STALE_STRANGER: Duration = Duration::from_secs(1);
/// What a connection that did not prove the secret is told, whatever was wrong.
pub const NOT_ADMITTED: &str = "not admitted";
/// Peers whose refusals are logged (once each); past this, refusals are only counted.
const MAX_LOGGED_PEERS: usize = 1024;
/// How long a job may take to form when nothing else is said.
pub const DEFAULT_JOIN_TIMEOUT: Duration = Duration::from_secs(60);

mod agents;

/// How a server runs a job.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    pub nprocs: u32,
    /// The job's secret: only processes that prove it are admitted, and the server proves
    /// it back in every WELCOME.
    pub secret: Secret,
    /// Prefix of the lines printed to stderr about failures (`"bsprun"`); `None`: silent.
    pub report: Option<String>,
    /// Limit on the whole job.
    pub timeout: Option<Duration>,
    /// After a failure notice, how long processes get to exit on their own before SIGTERM.
    pub term_delay: Duration,
    /// After SIGTERM, how long before SIGKILL.
    pub kill_grace: Duration,
    /// Every process must have joined this long after the server started (with processes
    /// of its own, after the first one joined: a program that never uses bulkwire is
    /// fine); `None`: no deadline.
    pub join_timeout: Option<Duration>,
    /// The rank whose process runs this server (self-spawn, a job formed through another
    /// launcher's bootstrap): processes that lose the server then name it.
    pub host_rank: Option<u32>,
    /// The name of the host the launcher runs on, for messages of a job spanning hosts.
    pub local_host: Option<String>,
}

impl ServerConfig {
    pub fn new(nprocs: u32, secret: Secret) -> ServerConfig {
        ServerConfig {
            nprocs,
            secret,
            report: None,
            timeout: None,
            term_delay: Duration::from_millis(250),
            kill_grace: Duration::from_secs(2),
            join_timeout: Some(DEFAULT_JOIN_TIMEOUT),
            host_rank: None,
            local_host: None,
        }
    }
}

/// What became of one rank.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RankOutcome {
    /// It connected and was admitted.
    pub joined: bool,
    /// It said it finished, with this status.
    pub finished: Option<i32>,
    /// How its process ended (known for processes the server's process started).
    pub exit: Option<ExitKind>,
}

/// How a job ended.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct JobOutcome {
    /// Everything that went wrong, the cause first. Exits that followed a failure (the
    /// processes the launcher terminated) are not listed.
    pub failures: Vec<Failure>,
    pub ranks: Vec<RankOutcome>,
}

impl JobOutcome {
    pub fn success(&self) -> bool {
        self.failures.is_empty()
    }

    /// The exit status for a launcher: 0, or the first failure's (see
    /// [`Failure::exit_code`]).
    pub fn exit_code(&self) -> i32 {
        self.failures.first().map_or(0, |f| f.exit_code())
    }
}

struct Conn {
    stream: TcpStream,
    peer: SocketAddr,
    rank: Option<u32>,
    /// A host agent's connection: the agent's index.
    agent: Option<usize>,
    opened: Instant,
    /// The server's nonce in this connection's CHALLENGE.
    nonce: [u8; wire::NONCE],
    rbuf: Vec<u8>,
    out: VecDeque<Bytes>,
    out_pos: usize,
    /// Broken or to be dropped: closed at the end of this loop iteration.
    dead: bool,
    /// Close once `out` is flushed (after a rejection).
    close_when_flushed: bool,
}

#[derive(Default)]
struct Slot {
    conn: Option<usize>,
    joined: bool,
    finished: Option<i32>,
    closed: bool,
    /// Its connection closed before it finished; waiting for its exit status until then.
    lost_at: Option<Instant>,
    child: Option<usize>,
    host: String,
    pid: u32,
    /// A started process exited 0 without ever joining: fine unless others joined.
    exited_unjoined: bool,
}

struct Child {
    rank: u32,
    proc: Proc,
    exit: Option<ExitKind>,
}

/// Where a rank's process runs, and so how it is watched and signalled.
enum Proc {
    /// Started by this server's process: a pidfd (`own_group`: it leads its process group).
    Local {
        pid: u32,
        pidfd: OwnedFd,
        own_group: bool,
    },
    /// Started on another host by agent number `agent`, which reports its exit.
    Remote { agent: usize },
}

/// The rendezvous server of one job.
pub struct Server {
    cfg: ServerConfig,
    listener: TcpListener,
    addr: SocketAddr,
    conns: Vec<Option<Conn>>,
    slots: Vec<Slot>,
    children: Vec<Child>,
    agents: Vec<agents::Agent>,
    signal_fd: Option<OwnedFd>,
    round: u32,
    contrib: Vec<Option<Vec<u8>>>,
    ncontrib: u32,
    ever_joined: bool,
    /// Every rank has joined once (the job formed).
    formed: bool,
    /// Connections not admitted while this job formed (the latest 16), for the message
    /// of a job that did not form.
    refused: Vec<String>,
    /// Peers whose refusal was logged (one line per address, not per connection).
    logged: HashSet<IpAddr>,
    /// Said that accepting ran out of file descriptors.
    said_fds: bool,
    /// The failure that ended the job (notices sent, terminations scheduled).
    fatal: Option<Failure>,
    failures: Vec<Failure>,
    started: Instant,
    terminate_at: Option<Instant>,
    kill_at: Option<Instant>,
    /// Serve mode: after a failure, stop waiting for processes we can't kill.
    give_up_at: Option<Instant>,
    signals_seen: u32,
}

impl Server {
    /// Binds the listening socket (port 0: any free port).
    pub fn bind(addr: SocketAddr, cfg: ServerConfig) -> io::Result<Server> {
        if cfg.nprocs == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a job has at least one process",
            ));
        }
        let listener = TcpListener::bind(addr)?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let n = cfg.nprocs as usize;
        Ok(Server {
            cfg,
            listener,
            addr,
            conns: Vec::new(),
            slots: (0..n).map(|_| Slot::default()).collect(),
            children: Vec::new(),
            agents: Vec::new(),
            signal_fd: None,
            round: 0,
            contrib: vec![None; n],
            ncontrib: 0,
            ever_joined: false,
            formed: false,
            refused: Vec::new(),
            logged: HashSet::new(),
            said_fds: false,
            fatal: None,
            failures: Vec::new(),
            started: Instant::now(),
            terminate_at: None,
            kill_at: None,
            give_up_at: None,
            signals_seen: 0,
        })
    }

    /// The address processes connect to (`BULKWIRE_RENDEZVOUS`).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Watches a process started as `rank`: its exit status names the failure when it dies,
    /// and it is terminated when the job fails. `own_group`: it leads its own process group,
    /// which is signalled as a whole.
    pub fn add_child(&mut self, rank: u32, pid: u32, own_group: bool) -> io::Result<()> {
        let slot = self
            .slots
            .get_mut(rank as usize)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "rank out of range"))?;
        let pidfd = sys::pidfd_open(pid)?;
        slot.child = Some(self.children.len());
        self.children.push(Child {
            rank,
            proc: Proc::Local {
                pid,
                pidfd,
                own_group,
            },
            exit: None,
        });
        Ok(())
    }

    /// A pipe whose bytes are signal numbers the launcher received: the first interrupts
    /// the job (the signal is passed on to the processes), the second kills them.
    pub fn set_signal_fd(&mut self, fd: OwnedFd) {
        self.signal_fd = Some(fd);
    }

    /// Kills and reaps every child at once (a launch that could not start them all).
    pub fn kill_children_now(&mut self) {
        for c in &self.children {
            if let Proc::Local {
                pid,
                pidfd,
                own_group,
            } = &c.proc
            {
                if *own_group {
                    sys::kill_group(*pid, libc::SIGKILL);
                }
                sys::pidfd_kill(pidfd, libc::SIGKILL);
            }
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        for c in &mut self.children {
            let Proc::Local { pidfd, .. } = &c.proc else {
                continue;
            };
            while c.exit.is_none() && Instant::now() < deadline {
                match sys::pidfd_try_reap(pidfd) {
                    Ok(Some(e)) => c.exit = Some(e),
                    Ok(None) => std::thread::sleep(Duration::from_millis(2)),
                    Err(_) => break,
                }
            }
        }
        self.kill_helpers_now();
    }

    /// Runs the job to its end: every process finished, failed, or was terminated.
    pub fn run(mut self) -> JobOutcome {
        let mut pfds: Vec<libc::pollfd> = Vec::new();
        // What each pollfd is: the listener, the signal pipe, a child, a connection.
        #[derive(Clone, Copy)]
        enum Src {
            Listener,
            Signal,
            Child(usize),
            Helper(usize),
            Conn(usize),
        }
        let mut srcs: Vec<Src> = Vec::new();
        while !self.settled() {
            pfds.clear();
            srcs.clear();
            let pfd = |fd: RawFd, events: i16| libc::pollfd {
                fd,
                events,
                revents: 0,
            };
            pfds.push(pfd(self.listener.as_raw_fd(), libc::POLLIN));
            srcs.push(Src::Listener);
            if let Some(s) = &self.signal_fd {
                pfds.push(pfd(s.as_raw_fd(), libc::POLLIN));
                srcs.push(Src::Signal);
            }
            for (i, c) in self.children.iter().enumerate() {
                if let (None, Proc::Local { pidfd, .. }) = (c.exit, &c.proc) {
                    pfds.push(pfd(pidfd.as_raw_fd(), libc::POLLIN));
                    srcs.push(Src::Child(i));
                }
            }
            for (i, fd) in self.helper_fds() {
                pfds.push(pfd(fd, libc::POLLIN));
                srcs.push(Src::Helper(i));
            }
            for (i, c) in self.conns.iter().enumerate() {
                if let Some(c) = c {
                    let ev = if c.out.is_empty() {
                        libc::POLLIN
                    } else {
                        libc::POLLIN | libc::POLLOUT
                    };
                    pfds.push(pfd(c.stream.as_raw_fd(), ev));
                    srcs.push(Src::Conn(i));
                }
            }
            let timeout = self
                .next_deadline()
                .map(|d| d.saturating_duration_since(Instant::now()));
            if let Err(e) = sys::poll(&mut pfds, timeout) {
                // poll only fails on resource exhaustion; don't spin on it.
                self.say(&format!("poll failed: {e}"));
                std::thread::sleep(Duration::from_millis(10));
            }
            for (p, src) in pfds.iter().zip(srcs.iter()) {
                if p.revents == 0 {
                    continue;
                }
                match *src {
                    Src::Listener => self.accept(),
                    Src::Signal => self.on_signal(),
                    Src::Child(i) => self.reap(i),
                    Src::Helper(i) => self.reap_helper(i),
                    Src::Conn(i) => {
                        if p.revents & libc::POLLOUT != 0 {
                            self.flush(i);
                        }
                        if p.revents & !libc::POLLOUT != 0 {
                            self.read(i);
                        }
                    }
                }
            }
            self.close_dead();
            self.timers();
            self.close_dead();
        }
        self.finish()
    }

    fn finish(mut self) -> JobOutcome {
        if !self.failures.is_empty() {
            // A failed job leaves nothing behind: what a rank started in the background
            // (still in its process group) goes too, though the rank itself has exited.
            // The leaders are reaped, but a group id stays reserved while it has members,
            // so this reaches only what is left of our ranks' groups.
            for c in &self.children {
                if let Proc::Local {
                    pid,
                    own_group: true,
                    ..
                } = c.proc
                {
                    sys::kill_group(pid, libc::SIGKILL);
                }
            }
        }
        self.end_helpers();
        // Best effort: let queued notices and acks out before the sockets close.
        let until = Instant::now() + Duration::from_millis(200);
        for i in 0..self.conns.len() {
            while self.conns[i]
                .as_ref()
                .is_some_and(|c| !c.out.is_empty() && !c.dead)
                && Instant::now() < until
            {
                self.flush(i);
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        let ranks = self
            .slots
            .iter()
            .map(|s| RankOutcome {
                joined: s.joined,
                finished: s.finished,
                exit: s.child.and_then(|c| self.children[c].exit),
            })
            .collect();
        JobOutcome {
            failures: self.failures,
            ranks,
        }
    }

    /// True when nothing more can happen: every rank's process is gone.
    fn settled(&self) -> bool {
        self.slots.iter().all(|s| match s.child {
            Some(c) => self.child_settled(c),
            None => {
                (s.joined && s.closed)
                    || (self.fatal.is_some() && (!s.joined || self.give_up_at.is_none()))
            }
        })
    }

    fn next_deadline(&self) -> Option<Instant> {
        let mut d: Option<Instant> = None;
        let mut add = |t: Option<Instant>| {
            if let Some(t) = t {
                d = Some(d.map_or(t, |x| x.min(t)));
            }
        };
        add(self.cfg.timeout.map(|t| self.started + t));
        add(self.terminate_at);
        add(self.kill_at);
        add(self.give_up_at);
        for s in &self.slots {
            add(s.lost_at.map(|t| t + EXIT_STATUS_WAIT));
        }
        add(self.join_deadline());
        add(self.agents_deadline());
        for c in self.conns.iter().flatten() {
            if c.rank.is_none() && c.agent.is_none() {
                add(Some(c.opened + AUTH_TIMEOUT));
            }
        }
        d
    }

    fn say(&self, msg: &str) {
        if let Some(p) = &self.cfg.report {
            // One write per line, so it doesn't interleave with forwarded output.
            let line = format!("{p}: {msg}\n");
            let _ = io::stderr().lock().write_all(line.as_bytes());
        }
    }

    fn accept(&mut self) {
        loop {
            match self.listener.accept() {
                Ok((stream, peer)) => {
                    if stream.set_nonblocking(true).is_err() {
                        continue;
                    }
                    self.make_room();
                    let _ = stream.set_nodelay(true);
                    crate::control::keepalive(&stream);
                    let nonce = wire::nonce();
                    let conn = Conn {
                        stream,
                        peer,
                        rank: None,
                        agent: None,
                        opened: Instant::now(),
                        nonce,
                        rbuf: Vec::new(),
                        out: VecDeque::new(),
                        out_pos: 0,
                        dead: false,
                        close_when_flushed: false,
                    };
                    let i = match self.conns.iter().position(Option::is_none) {
                        Some(i) => {
                            self.conns[i] = Some(conn);
                            i
                        }
                        None => {
                            self.conns.push(Some(conn));
                            self.conns.len() - 1
                        }
                    };
                    self.send(i, Bytes::from(wire::challenge(&nonce)));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)) => {
                    if !self.said_fds {
                        self.said_fds = true;
                        self.say(&format!(
                            "cannot accept a connection: {}",
                            sys::describe_io(&e)
                        ));
                    }
                    // A stranger that has had time to prove itself and hasn't gives its
                    // descriptor back (a fresh one may be a real process mid-handshake:
                    // closing it would only churn). Otherwise let the next readiness
                    // retry, not at once: the pending connection keeps the listener
                    // readable.
                    if self.close_oldest_stranger(STALE_STRANGER) {
                        continue;
                    }
                    std::thread::sleep(Duration::from_millis(10));
                    return;
                }
                // ECONNABORTED...: try again at the next readiness.
                Err(_) => return,
            }
        }
    }

    /// Keeps the connections that have not proven the secret under [`AUTH_CAP`], closing
    /// the oldest: a flood of idle connections then only churns among itself.
    fn make_room(&mut self) {
        let strangers = self
            .conns
            .iter()
            .flatten()
            .filter(|c| c.rank.is_none() && c.agent.is_none() && !c.dead)
            .count();
        if strangers >= AUTH_CAP {
            self.close_oldest_stranger(Duration::ZERO);
        }
    }

    /// Closes the oldest connection that has not proven the secret, if it is at least
    /// `age` old; false if none.
    fn close_oldest_stranger(&mut self, age: Duration) -> bool {
        let now = Instant::now();
        let oldest = self
            .conns
            .iter()
            .enumerate()
            .filter_map(|(i, c)| c.as_ref().map(|c| (i, c)))
            .filter(|(_, c)| c.rank.is_none() && c.agent.is_none())
            .filter(|(_, c)| now.duration_since(c.opened) >= age)
            .min_by_key(|(_, c)| c.opened)
            .map(|(i, _)| i);
        match oldest {
            // Nothing refers to a stranger's slot: it can go at once, freeing its fd.
            Some(i) => {
                self.conns[i] = None;
                true
            }
            None => false,
        }
    }

    fn read(&mut self, i: usize) {
        let mut tmp = [0u8; 64 * 1024];
        let mut eof = false;
        {
            let Some(c) = self.conns[i].as_mut() else {
                return;
            };
            loop {
                match c.stream.read(&mut tmp) {
                    Ok(0) => {
                        eof = true;
                        break;
                    }
                    Ok(n) => {
                        c.rbuf.extend_from_slice(&tmp[..n]);
                        if c.rank.is_none() && c.agent.is_none() && c.rbuf.len() > AUTH_BYTES {
                            // Far more than a HELLO: not one of ours. Dropped unanswered.
                            c.dead = true;
                            return;
                        }
                        if c.rbuf.len() > wire::MAX_FRAME + 4 {
                            break; // parse what we have before reading more
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(_) => {
                        eof = true;
                        break;
                    }
                }
            }
        }
        // Frames first: a FINISH just before the EOF counts.
        let mut frames = Vec::new();
        let mut bad = None;
        if let Some(c) = self.conns[i].as_mut() {
            let mut used = 0;
            loop {
                match wire::split_frame(&c.rbuf[used..]) {
                    Ok(Some((t, p, n))) => {
                        frames.push((t, p.to_vec()));
                        used += n;
                    }
                    Ok(None) => break,
                    Err(e) => {
                        bad = Some(e);
                        break;
                    }
                }
            }
            c.rbuf.drain(..used);
        }
        for (t, p) in frames {
            if self.conns[i].as_ref().is_none_or(|c| c.dead) {
                return;
            }
            self.on_frame(i, t, &p);
        }
        if let Some(e) = bad {
            return self.protocol_error(i, &e);
        }
        if eof && let Some(c) = self.conns[i].as_mut() {
            c.dead = true;
        }
    }

    fn protocol_error(&mut self, i: usize, what: &str) {
        let Some(c) = self.conns[i].as_mut() else {
            return;
        };
        c.dead = true;
        let (rank, peer, agent) = (c.rank, c.peer, c.agent);
        match (rank, agent) {
            (Some(r), _) => self.fail(Failure::Other {
                rank: Some(r),
                message: format!("broke the control protocol: {what}"),
            }),
            (None, Some(a)) => self.agent_lost(a, &format!("broke the control protocol: {what}")),
            (None, None) => self.say(&format!("dropped a connection from {peer}: {what}")),
        }
    }

    fn send(&mut self, i: usize, frame: Bytes) {
        if let Some(c) = self.conns[i].as_mut()
            && !c.dead
        {
            c.out.push_back(frame);
            self.flush(i);
        }
    }

    fn flush(&mut self, i: usize) {
        let Some(c) = self.conns[i].as_mut() else {
            return;
        };
        while let Some(f) = c.out.front() {
            match c.stream.write(&f[c.out_pos..]) {
                Ok(n) => {
                    c.out_pos += n;
                    if c.out_pos == f.len() {
                        c.out.pop_front();
                        c.out_pos = 0;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => {
                    c.dead = true;
                    return;
                }
            }
        }
        if c.close_when_flushed {
            c.dead = true;
        }
    }

    /// Refuses connection `i`, which did not prove the secret: it is told only
    /// [`NOT_ADMITTED`]; `why` is logged, once per peer address.
    fn not_admitted(&mut self, i: usize, why: &str) {
        let Some(peer) = self.conns[i].as_ref().map(|c| c.peer) else {
            return;
        };
        if self.logged.len() < MAX_LOGGED_PEERS && self.logged.insert(peer.ip()) {
            self.say(&format!(
                "refused a connection from {}: {why} (further refusals of this address are not logged)",
                peer.ip()
            ));
        }
        if !self.formed {
            if self.refused.len() >= 16 {
                self.refused.remove(0);
            }
            self.refused.push(format!(
                "a process from {} was not admitted ({why})",
                peer.ip()
            ));
        }
        self.refuse(i, NOT_ADMITTED, false);
    }

    /// Refuses connection `i` with `why` (printed when `say`).
    fn refuse(&mut self, i: usize, why: &str, say: bool) {
        if let Some(c) = self.conns[i].as_ref()
            && say
        {
            self.say(&format!(
                "rejected a process connecting from {}: {why}",
                c.peer
            ));
        }
        self.send(i, Bytes::from(wire::text_frame(wire::T_REJECT, why)));
        if let Some(c) = self.conns[i].as_mut() {
            c.close_when_flushed = true;
            if c.out.is_empty() {
                c.dead = true;
            }
        }
    }

    fn on_frame(&mut self, i: usize, t: u8, p: &[u8]) {
        if let Some(a) = self.conns[i].as_ref().and_then(|c| c.agent) {
            return self.on_agent_frame(i, a, t, p);
        }
        let Some(rank) = self.conns[i].as_ref().and_then(|c| c.rank) else {
            return match t {
                wire::T_HELLO => self.on_hello(i, p),
                wire::T_AGENT => self.on_agent_hello(i, p),
                _ => self.not_admitted(i, &format!("message type {t:#x} before hello")),
            };
        };
        match t {
            wire::T_EXCHANGE => self.on_exchange(i, rank, p),
            wire::T_ABORT => {
                let f = Failure::Aborted {
                    rank,
                    message: wire::text(p),
                };
                // Printed, then acknowledged, then told to the others: a notice to the
                // others can end the process this server runs in (rank 0's, under
                // mpiexec) before a later ack is written, and the aborter would then print
                // the message a second time.
                let first = self.fatal.is_none();
                if first {
                    self.say(&self.describe(&f));
                }
                self.send(i, Bytes::from(wire::ack(wire::ACK_ABORT)));
                if first {
                    self.spread(f);
                }
            }
            wire::T_FINISH => {
                let Some(status) = wire::Reader::new(p).i32() else {
                    return self.protocol_error(i, "malformed finish");
                };
                let slot = &mut self.slots[rank as usize];
                slot.finished = Some(status);
                let has_child = slot.child.is_some();
                self.send(i, Bytes::from(wire::ack(wire::ACK_FINISH)));
                if status != 0 && !has_child && self.fatal.is_none() {
                    // A remote process: its finish status is all we will learn of its exit.
                    self.nonfatal(Failure::Exited {
                        rank,
                        code: status,
                        joined: true,
                        finished: true,
                    });
                }
                if self.ncontrib > 0 && self.contrib[rank as usize].is_none() {
                    self.fail(self.round_stuck(rank));
                }
            }
            _ => self.protocol_error(i, &format!("unknown message type {t:#x}")),
        }
    }

    fn round_stuck(&self, finished: u32) -> Failure {
        Failure::Other {
            rank: Some(finished),
            message: format!(
                "finished while other ranks wait in exchange round {} (allgather) for it",
                self.round
            ),
        }
    }

    fn on_hello(&mut self, i: usize, p: &[u8]) {
        let Some(nonce) = self.conns[i].as_ref().map(|c| c.nonce) else {
            return;
        };
        let h = match Hello::decode(p) {
            Ok(h) => h,
            Err(why) => return self.not_admitted(i, &why),
        };
        let Some(tr) = wire::verify_member(&self.cfg.secret, &nonce, wire::T_HELLO, p) else {
            return self.not_admitted(i, "its proof does not match this job's secret");
        };
        let Err(why) = self.admit(i, &h, &tr) else {
            return;
        };
        // A process that knows the secret is one of this job's, and a refused one will not
        // join (or claims a rank someone else holds): the job can't form as it should.
        // Once formed, a duplicate is only refused: the job runs on with its members.
        if !self.formed && self.fatal.is_none() {
            self.refuse(i, &why, false);
            self.fail(Failure::Other {
                rank: Some(h.rank),
                message: format!("refused by the rendezvous, so the job cannot form ({why})"),
            });
        } else {
            self.refuse(i, &why, true);
        }
    }

    /// Admits the process of `h` (proven by the transcript `tr`) as its rank, or says why
    /// not.
    fn admit(&mut self, i: usize, h: &Hello, tr: &[u8]) -> Result<(), String> {
        let n = self.cfg.nprocs;
        if h.nprocs != n {
            return Err(format!(
                "rank {} thinks the job has {} processes, it has {n}",
                h.rank, h.nprocs
            ));
        }
        if h.rank >= n {
            return Err(format!("rank {} is out of range 0..{n}", h.rank));
        }
        let slot = &self.slots[h.rank as usize];
        if slot.joined {
            return Err(format!(
                "rank {} has already joined (pid {} on {})",
                h.rank, slot.pid, slot.host
            ));
        }
        if let Some(f) = &self.fatal {
            return Err(format!("the job has already failed: {f}"));
        }
        let slot = &mut self.slots[h.rank as usize];
        slot.joined = true;
        slot.conn = Some(i);
        slot.host = h.host.clone();
        slot.pid = h.pid;
        self.conns[i].as_mut().expect("present").rank = Some(h.rank);
        self.ever_joined = true;
        self.formed = self.slots.iter().all(|s| s.joined);
        let welcome = wire::welcome(self.cfg.host_rank, &self.cfg.secret, tr);
        self.send(i, Bytes::from(welcome));
        if let Some(r) = self.slots.iter().position(|s| s.exited_unjoined) {
            self.fail(Failure::Exited {
                rank: r as u32,
                code: 0,
                joined: false,
                finished: false,
            });
        }
        Ok(())
    }

    fn on_exchange(&mut self, i: usize, rank: u32, p: &[u8]) {
        if self.fatal.is_some() {
            return; // everyone has been told; the round will never complete
        }
        if p.len() < 4 {
            return self.protocol_error(i, "malformed exchange");
        }
        let round = u32::from_le_bytes(p[..4].try_into().expect("4 bytes"));
        if round != self.round {
            return self.protocol_error(
                i,
                &format!("exchange round {round}, the job is at round {}", self.round),
            );
        }
        let r = rank as usize;
        if self.contrib[r].is_some() || self.slots[r].finished.is_some() {
            return self.protocol_error(i, &format!("second contribution to round {round}"));
        }
        self.contrib[r] = Some(p[4..].to_vec());
        self.ncontrib += 1;
        if let Some(k) = self.slots.iter().position(|s| s.finished.is_some()) {
            return self.fail(self.round_stuck(k as u32));
        }
        if self.ncontrib < self.cfg.nprocs {
            return;
        }
        // Complete: each part encoded once and shared by every connection's queue.
        let parts: Vec<Bytes> = std::mem::replace(&mut self.contrib, vec![None; self.slots.len()])
            .into_iter()
            .enumerate()
            .map(|(k, b)| Bytes::from(wire::part(round, k as u32, &b.unwrap_or_default())))
            .collect();
        self.ncontrib = 0;
        self.round += 1;
        for s in 0..self.slots.len() {
            if let Some(ci) = self.slots[s].conn {
                for part in &parts {
                    self.send(ci, part.clone());
                }
            }
        }
    }

    /// A failure that ends the job: printed, sent to every process, terminations scheduled.
    fn fail(&mut self, f: Failure) {
        if self.fatal.is_some() {
            return;
        }
        self.say(&self.describe(&f));
        self.spread(f);
    }

    /// The job's first failure `f`, already printed: tells every process that has not
    /// finished, and sets the times to stop the job.
    fn spread(&mut self, f: Failure) {
        let frame = Bytes::from(wire::failed(&f));
        for s in 0..self.slots.len() {
            if let Some(ci) = self.slots[s].conn
                && self.slots[s].finished.is_none()
            {
                self.send(ci, frame.clone());
            }
        }
        let now = Instant::now();
        let urgent = matches!(f, Failure::TimedOut { .. });
        if self.children.iter().any(|c| c.exit.is_none()) {
            self.terminate_at = Some(if urgent {
                now
            } else {
                now + self.cfg.term_delay
            });
        }
        // Processes we can't signal get the same time to hang up before we stop waiting.
        self.give_up_at = Some(now + self.cfg.term_delay + self.cfg.kill_grace);
        self.fatal = Some(f.clone());
        self.failures.push(f);
    }

    /// A failure that doesn't stop the others (a non-zero exit after finishing).
    fn nonfatal(&mut self, f: Failure) {
        self.say(&self.describe(&f));
        self.failures.push(f);
    }

    /// A failure as printed: in a job spanning hosts, with the host of the rank at fault.
    fn describe(&self, f: &Failure) -> String {
        let text = f.to_string();
        match f.rank().and_then(|r| self.host_of(r)) {
            Some(h) if !self.agents.is_empty() && !text.contains(&format!("host {h}")) => {
                format!("{text} (on host {h})")
            }
            _ => text,
        }
    }

    /// The host rank `r` runs on, as the launcher named it.
    fn host_of(&self, r: u32) -> Option<String> {
        let c = self.slots.get(r as usize)?.child?;
        match self.children[c].proc {
            Proc::Remote { agent } => Some(self.agents[agent].host.clone()),
            Proc::Local { .. } => self.cfg.local_host.clone(),
        }
    }

    fn reap(&mut self, ci: usize) {
        let Proc::Local { pidfd, .. } = &self.children[ci].proc else {
            return;
        };
        let exit = match sys::pidfd_try_reap(pidfd) {
            Ok(Some(e)) => e,
            Ok(None) => return,
            // ECHILD: someone else reaped it (SIGCHLD ignored, or a waitpid(-1) elsewhere).
            Err(_) => ExitKind::Code(-1),
        };
        self.on_exit(ci, exit);
    }

    /// Child `ci` ended with `exit` (reaped here, or reported by its host's agent).
    fn on_exit(&mut self, ci: usize, exit: ExitKind) {
        let c = &mut self.children[ci];
        c.exit = Some(exit);
        let rank = c.rank;
        let slot = &mut self.slots[rank as usize];
        slot.lost_at = None;
        let (joined, finished) = (slot.joined, slot.finished.is_some());
        if let Some(conn) = slot.conn {
            // A forked grandchild may still hold the socket: the rank is gone all the same.
            if let Some(c) = self.conns[conn].as_mut() {
                c.dead = true;
            }
        }
        if self.fatal.is_some() {
            return; // a consequence of the failure (we probably terminated it)
        }
        if finished {
            if !exit.success() {
                self.nonfatal(Failure::from_exit(rank, exit, true, true));
            }
        } else if joined || !exit.success() {
            self.fail(Failure::from_exit(rank, exit, joined, false));
        } else if self.ever_joined {
            self.fail(Failure::from_exit(rank, exit, false, false));
        } else {
            // A program that doesn't use bulkwire at all (`bsprun -n 4 hostname`) is fine,
            // as long as nobody waits for it.
            self.slots[rank as usize].exited_unjoined = true;
        }
    }

    fn close_dead(&mut self) {
        for i in 0..self.conns.len() {
            if !self.conns[i].as_ref().is_some_and(|c| c.dead) {
                continue;
            }
            let c = self.conns[i].take().expect("present");
            if let Some(a) = c.agent {
                self.agent_closed(a);
                continue;
            }
            let Some(rank) = c.rank else {
                continue;
            };
            let slot = &mut self.slots[rank as usize];
            if slot.conn != Some(i) {
                continue;
            }
            slot.conn = None;
            slot.closed = true;
            if slot.finished.is_some() || self.fatal.is_some() {
                continue;
            }
            match slot.child {
                Some(ch) if self.children[ch].exit.is_none() => {
                    slot.lost_at = Some(Instant::now());
                }
                Some(_) => {} // reaped: already judged
                None => self.fail(Failure::Disconnected { rank }),
            }
        }
    }

    fn timers(&mut self) {
        let now = Instant::now();
        if let Some(t) = self.cfg.timeout
            && now >= self.started + t
            && self.fatal.is_none()
        {
            self.fail(Failure::TimedOut { after: t });
        }
        for r in 0..self.slots.len() {
            if let Some(t) = self.slots[r].lost_at
                && now >= t + EXIT_STATUS_WAIT
            {
                self.slots[r].lost_at = None;
                self.fail(Failure::Disconnected { rank: r as u32 });
            }
        }
        if self.terminate_at.is_some_and(|t| now >= t) {
            self.terminate_at = None;
            self.signal_children(libc::SIGTERM);
            self.kill_at = Some(now + self.cfg.kill_grace);
        }
        if self.kill_at.is_some_and(|t| now >= t) {
            self.kill_at = None;
            self.signal_children(libc::SIGKILL);
        }
        if let Some(t) = self.join_deadline()
            && now >= t
        {
            self.fail(self.not_formed());
        }
        self.agent_timers(now);
        if self.give_up_at.is_some_and(|t| now >= t) && self.terminate_at.is_none() {
            self.give_up_at = None;
            for c in self.conns.iter_mut().flatten() {
                c.dead = true;
            }
        }
        for c in self.conns.iter_mut().flatten() {
            if c.rank.is_none() && c.agent.is_none() && now >= c.opened + AUTH_TIMEOUT {
                c.dead = true;
            }
        }
    }

    fn signal_children(&mut self, sig: i32) {
        for c in &self.children {
            if let (
                None,
                Proc::Local {
                    pid,
                    pidfd,
                    own_group,
                },
            ) = (c.exit, &c.proc)
            {
                // The group for what the rank started; the pidfd for the rank itself, in
                // case it left the group.
                if *own_group {
                    sys::kill_group(*pid, sig);
                }
                sys::pidfd_kill(pidfd, sig);
            }
        }
        self.signal_agents(sig);
    }

    /// When the job must have formed: the join timeout after the start (with processes of
    /// our own, after the first join); `None` once formed or failed.
    fn join_deadline(&self) -> Option<Instant> {
        if self.formed || self.fatal.is_some() {
            return None;
        }
        if !self.children.is_empty() && !self.ever_joined {
            return None;
        }
        self.cfg.join_timeout.map(|t| self.started + t)
    }

    /// The failure of a job that did not form in time, naming who is missing.
    fn not_formed(&self) -> Failure {
        let missing: Vec<u32> = (0..self.slots.len() as u32)
            .filter(|&r| !self.slots[r as usize].joined)
            .collect();
        let t = self.cfg.join_timeout.unwrap_or_default().as_secs_f64();
        let t = if t.fract() == 0.0 {
            format!("{t:.0}")
        } else {
            format!("{t:.1}")
        };
        let who = match missing.as_slice() {
            [r] => format!("rank {r} has not joined"),
            many => format!("ranks {} have not joined", rank_list(many)),
        };
        let mut message = format!(
            "the job did not form within {t} s: {who} (not started, or cannot reach the \
             rendezvous at {})",
            self.addr
        );
        // The last stranger turned away: a process with a stale or wrong secret, maybe.
        if let Some(why) = self.refused.last() {
            message += &format!("; {why}");
        }
        Failure::Other {
            rank: None,
            message,
        }
    }

    fn on_signal(&mut self) {
        let mut buf = [0u8; 16];
        let n = match &self.signal_fd {
            Some(fd) => {
                // SAFETY: reads into a valid local buffer from a (non-blocking) pipe we own.
                unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) }
            }
            None => return,
        };
        for &sig in buf.iter().take(n.max(0) as usize) {
            let sig = i32::from(sig);
            self.signals_seen += 1;
            if self.signals_seen == 1 {
                if self.fatal.is_none() {
                    self.fail(Failure::Interrupted { signal: sig });
                }
                // Pass the signal on now (the processes are in their own groups, so the
                // terminal's Ctrl-C reached only us), and SIGKILL after the grace period.
                self.terminate_at = None;
                self.signal_children(sig);
                self.kill_at = Some(Instant::now() + self.cfg.kill_grace);
            } else {
                self.say("second signal: killing the job");
                self.signal_children(libc::SIGKILL);
            }
        }
    }
}

/// Ranks as a short list: `2, 5-7, 9` (sorted ranks).
pub fn rank_list(ranks: &[u32]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < ranks.len() {
        let mut j = i;
        while j + 1 < ranks.len() && ranks[j + 1] == ranks[j] + 1 {
            j += 1;
        }
        parts.push(if j > i {
            format!("{}-{}", ranks[i], ranks[j])
        } else {
            ranks[i].to_string()
        });
        i = j + 1;
    }
    parts.join(", ")
}
