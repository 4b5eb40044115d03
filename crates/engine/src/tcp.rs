//! The kernel-TCP baseline stack (the RMPP paper's TCP): the same [`Transport`] the upper layers
//! use over our protocols, implemented with one kernel TCP connection per pair of ranks.
//!
//! - **Connections are set up once, at start** ([`establish`]), not per message: each rank
//!   listens on one socket whose address it publishes in its rendezvous card; the lower
//!   rank of every pair connects to the higher one (so there is exactly one connection per
//!   pair). Each connection is authenticated both ways before it is used: the connecting
//!   rank sends its rank and a nonce, the accepting rank answers with its rank, its nonce
//!   and a proof of the job's secret over both, and the connecting rank answers with its
//!   own proof ([`bulkwire_launch::Secret::prove`]); a connection that fails is dropped.
//!   Seed 000's latency table likewise leaves TCP's connection setup out.
//! - Sockets are non-blocking with `TCP_NODELAY` (no Nagle delay on small messages), and
//!   keep-alive probes plus `TCP_USER_TIMEOUT` so that a peer whose host vanishes without a
//!   reset is detected within about `dead_after`, as the engine's pings do for UDP.
//! - **Framing**: each message is a 16-byte frame header (length u64, message id u32,
//!   magic u32, little-endian) followed by its bytes. Ids count per destination from 0,
//!   like the protocols' message ids. Writes gather frame headers and payloads with
//!   `writev`, so a payload goes from the caller's `Bytes` straight into the kernel; large
//!   incoming payloads are read straight into the message's buffer.
//! - **`Event::Sent`** for a `notify` send is reported once the whole frame has been
//!   written to the kernel: TCP gives no earlier cheap signal of the peer's receipt, and
//!   from then on the kernel, not the caller's buffer, holds the data.
//! - A connection closed or reset by the peer (a clean EOF included: a process that
//!   crashes closes its sockets just as one that finishes does), or one that breaks the
//!   framing, yields [`Event::PeerDead`] naming the peer; sending to it then fails.
//! - **Liveness, as the engine's pings do over a link**: a stopped process (SIGSTOP, a
//!   hung host's process whose kernel still runs) keeps its connections open and its
//!   kernel keeps acknowledging, so TCP alone never reports it. A peer we wait on (or
//!   whose connection holds output the kernel would not take) that has sent nothing for a
//!   ping interval (`dead_after / 10`, from 10 ms to 1 s) is sent a ping frame, which it
//!   answers with a pong from any call or its progress thread; any bytes from it count
//!   as heard. Silent for `dead_after` while we depend on it, it is reported dead with
//!   the same [`Event::PeerDead`] as over a link. Pings and pongs are frame headers with
//!   their own magic and no payload.
//! - Waiting spins, then blocks in `poll` on every connection (readable, and writable
//!   where output is pending), the waker's eventfd and the job's failure eventfd.
//! - Statistics: messages and payload bytes per peer, and from `TCP_INFO` the segments
//!   sent and received (as `data_sent` / `data_received`), retransmitted segments and the
//!   kernel's smoothed round trip.

use std::collections::VecDeque;
use std::io::{self, IoSlice, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bulkwire_launch::{JobState, Secret};
use bulkwire_link::Rank;
use bulkwire_protocol::{MsgId, PeerStats, ProtoError, SEC, Time};
use bytes::Bytes;

use crate::Error;
use crate::endpoint::{Event, Progress};
use crate::engine::{WaitPolicy, WakeFd};
use crate::transport::{Transport, Waker};

/// Magic of the connection hello: "BWTC".
const HELLO_MAGIC: u32 = u32::from_le_bytes(*b"BWTC");
/// Magic closing every frame header: a desynchronised stream is caught at once.
const FRAME_MAGIC: u32 = u32::from_le_bytes(*b"BWTF");
/// Magic of a liveness ping (a frame header with no payload), answered by a pong.
const PING_MAGIC: u32 = u32::from_le_bytes(*b"BWTP");
const PONG_MAGIC: u32 = u32::from_le_bytes(*b"BWTQ");
const FRAME_HEADER: usize = 16;
/// Staging buffer for small frames; a payload larger than half of it is read directly
/// into its message.
const RBUF: usize = 256 << 10;
/// Bytes read from one connection per step, so one busy peer cannot starve the others.
const READ_BUDGET: usize = 8 << 20;
/// Most slices gathered into one `writev`.
const MAX_IOV: usize = 64;

/// Settings of a [`TcpTransport`].
#[derive(Clone, Debug)]
pub struct TcpConfig {
    /// A peer unreachable this long is dead (keep-alive and user timeout).
    pub dead_after: Duration,
    /// Largest message accepted in a frame (a bigger length means a broken stream).
    pub max_message: u64,
    /// How long [`establish`] may take.
    pub connect_timeout: Duration,
}

impl Default for TcpConfig {
    fn default() -> Self {
        TcpConfig {
            dead_after: Duration::from_secs(30),
            max_message: 1 << 40,
            connect_timeout: Duration::from_secs(60),
        }
    }
}

/// A message being written: its frame header and payload, and how much has gone.
struct OutFrame {
    head: [u8; FRAME_HEADER],
    data: Bytes,
    written: usize,
    id: MsgId,
    notify: bool,
}

impl OutFrame {
    fn len(&self) -> usize {
        FRAME_HEADER + self.data.len()
    }
}

/// A message being read.
struct InFrame {
    id: MsgId,
    len: usize,
    buf: Vec<u8>,
}

struct Conn {
    sock: TcpStream,
    out: VecDeque<OutFrame>,
    rbuf: Box<[u8]>,
    rstart: usize,
    rend: usize,
    cur: Option<InFrame>,
    /// Pings received and not yet answered.
    pongs_due: u32,
    /// The kernel refused part of `out` at the last write.
    blocked: bool,
}

/// What we know of a peer's liveness (see the module's notes).
#[derive(Clone, Copy, Default)]
struct Live {
    /// When bytes last came from it.
    heard: Time,
    /// When we began to depend on it (silence counts from the later of this and `heard`).
    since: Option<Time>,
    last_ping: Time,
    waiting: bool,
}

/// A frame header with no payload: a ping or a pong.
fn control_frame(magic: u32) -> OutFrame {
    let mut head = [0u8; FRAME_HEADER];
    head[12..16].copy_from_slice(&magic.to_le_bytes());
    OutFrame {
        head,
        data: Bytes::new(),
        written: 0,
        id: 0,
        notify: false,
    }
}

/// Why a connection ended.
enum Broken {
    Closed,
    Io(io::Error),
    Framing(String),
}

impl Conn {
    fn new(sock: TcpStream) -> Conn {
        Conn {
            sock,
            out: VecDeque::new(),
            rbuf: vec![0; RBUF].into_boxed_slice(),
            rstart: 0,
            rend: 0,
            cur: None,
            pongs_due: 0,
            blocked: false,
        }
    }

    /// Writes what the kernel takes; returns bytes written and the frames completed.
    fn write(&mut self, done: &mut Vec<(MsgId, bool, usize)>) -> Result<usize, Broken> {
        let mut total = 0;
        while !self.out.is_empty() {
            let mut iov: Vec<IoSlice<'_>> = Vec::with_capacity(MAX_IOV);
            for f in self.out.iter() {
                if iov.len() + 2 > MAX_IOV {
                    break;
                }
                if f.written < FRAME_HEADER {
                    iov.push(IoSlice::new(&f.head[f.written..]));
                    if !f.data.is_empty() {
                        iov.push(IoSlice::new(&f.data));
                    }
                } else {
                    iov.push(IoSlice::new(&f.data[f.written - FRAME_HEADER..]));
                }
            }
            let n = match (&self.sock).write_vectored(&iov) {
                Ok(0) => return Err(Broken::Closed),
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(Broken::Io(e)),
            };
            total += n;
            let mut left = n;
            while left > 0 {
                let f = self
                    .out
                    .front_mut()
                    .expect("the kernel took no more than we gave");
                let take = (f.len() - f.written).min(left);
                f.written += take;
                left -= take;
                if f.written == f.len() {
                    let f = self.out.pop_front().expect("front exists");
                    done.push((f.id, f.notify, f.data.len()));
                }
            }
        }
        self.blocked = !self.out.is_empty();
        Ok(total)
    }

    /// Reads what has arrived (up to a budget) and cuts it into messages.
    fn read(&mut self, max_message: u64, got: &mut Vec<(MsgId, Vec<u8>)>) -> Result<usize, Broken> {
        let mut total = 0;
        loop {
            self.parse(max_message, got)?;
            if total >= READ_BUDGET {
                return Ok(total);
            }
            let fd = self.sock.as_raw_fd();
            let direct = self.rstart == self.rend
                && self
                    .cur
                    .as_ref()
                    .is_some_and(|m| m.len - m.buf.len() >= RBUF / 2);
            let r = if direct {
                let m = self.cur.as_mut().expect("checked above");
                let want = (m.len - m.buf.len()).min(READ_BUDGET);
                let at = m.buf.len();
                // SAFETY: `buf` has capacity `len` (reserved when the frame began) and
                // `at + want <= len`, so the kernel writes inside the allocation; the
                // length grows only by what it reports having written.
                let n = unsafe { libc::read(fd, m.buf.as_mut_ptr().add(at).cast(), want) };
                if n > 0 {
                    // SAFETY: the first `at + n` bytes are now initialised.
                    unsafe { m.buf.set_len(at + n as usize) };
                }
                n
            } else {
                if self.rstart > 0 {
                    self.rbuf.copy_within(self.rstart..self.rend, 0);
                    self.rend -= self.rstart;
                    self.rstart = 0;
                }
                let room = &mut self.rbuf[self.rend..];
                match (&self.sock).read(room) {
                    Ok(n) => {
                        self.rend += n;
                        n as isize
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(total),
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(Broken::Io(e)),
                }
            };
            match r {
                0 => return Err(Broken::Closed),
                n if n > 0 => total += n as usize,
                _ => {
                    let e = io::Error::last_os_error();
                    match e.kind() {
                        io::ErrorKind::WouldBlock => return Ok(total),
                        io::ErrorKind::Interrupted => continue,
                        _ => return Err(Broken::Io(e)),
                    }
                }
            }
        }
    }

    fn parse(&mut self, max_message: u64, got: &mut Vec<(MsgId, Vec<u8>)>) -> Result<(), Broken> {
        loop {
            if self.cur.is_none() {
                if self.rend - self.rstart < FRAME_HEADER {
                    return Ok(());
                }
                let h = &self.rbuf[self.rstart..self.rstart + FRAME_HEADER];
                let len = u64::from_le_bytes(h[0..8].try_into().unwrap_or_default());
                let id = u32::from_le_bytes(h[8..12].try_into().unwrap_or_default());
                let magic = u32::from_le_bytes(h[12..16].try_into().unwrap_or_default());
                if (magic == PING_MAGIC || magic == PONG_MAGIC) && len == 0 {
                    // Liveness only: its arrival has been counted as hearing the peer.
                    self.rstart += FRAME_HEADER;
                    if magic == PING_MAGIC {
                        self.pongs_due += 1;
                    }
                    continue;
                }
                if magic != FRAME_MAGIC {
                    return Err(Broken::Framing("bad frame magic".into()));
                }
                if len > max_message || len > usize::MAX as u64 {
                    return Err(Broken::Framing(format!("frame of {len} bytes")));
                }
                let mut buf = Vec::new();
                buf.try_reserve_exact(len as usize)
                    .map_err(|_| Broken::Framing(format!("no memory for {len} bytes")))?;
                self.rstart += FRAME_HEADER;
                self.cur = Some(InFrame {
                    id,
                    len: len as usize,
                    buf,
                });
            }
            let m = self.cur.as_mut().expect("set above");
            let take = (m.len - m.buf.len()).min(self.rend - self.rstart);
            m.buf
                .extend_from_slice(&self.rbuf[self.rstart..self.rstart + take]);
            self.rstart += take;
            if m.buf.len() < m.len {
                return Ok(());
            }
            let m = self.cur.take().expect("set above");
            got.push((m.id, m.buf));
        }
    }
}

/// Reliable messages over kernel TCP: the baseline stack.
pub struct TcpTransport {
    rank: Rank,
    nprocs: u32,
    cfg: TcpConfig,
    conns: Vec<Option<Conn>>,
    dead: Vec<bool>,
    next_id: Vec<MsgId>,
    stats: Vec<PeerStats>,
    events: VecDeque<Event>,
    epoch: Instant,
    policy: WaitPolicy,
    wake: Arc<WakeFd>,
    job: Option<Arc<JobState>>,
    done: Vec<(MsgId, bool, usize)>,
    got: Vec<(MsgId, Vec<u8>)>,
    live: Vec<Live>,
    /// A silent peer we depend on is pinged after this long (ns).
    ping_interval: Time,
    /// ... and declared dead after this long.
    dead_after: Time,
    /// When the liveness of the peers is next checked.
    next_live_check: Time,
}

/// Sets the options every connection gets.
fn tune(s: &TcpStream, cfg: &TcpConfig) -> io::Result<()> {
    s.set_nodelay(true)?;
    s.set_nonblocking(true)?;
    let sock = socket2::SockRef::from(s);
    // Probe an idle peer after a tenth of the deadline, then every tenth, giving up after
    // the deadline; data left unacknowledged that long also ends the connection.
    let tenth = (cfg.dead_after / 10).max(Duration::from_secs(1));
    let ka = socket2::TcpKeepalive::new()
        .with_time(tenth)
        .with_interval(tenth)
        .with_retries(9);
    sock.set_tcp_keepalive(&ka)?;
    sock.set_tcp_user_timeout(Some(cfg.dead_after))?;
    Ok(())
}

/// The purpose of the data-plane handshake's proofs.
const PROOF_CONTEXT: &str = "bulkwire 1 tcp hello";
const NONCE: usize = 32;
/// The connecting side's opening: magic, its rank, its nonce.
const OPEN: usize = 8 + NONCE;
/// The accepting side's answer: magic, its rank, its nonce, its proof.
const ANSWER: usize = 8 + NONCE + 32;
/// How long a handshake may take once connected (a peer of the job answers at once).
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

fn nonce() -> [u8; NONCE] {
    let mut n = [0u8; NONCE];
    // The engine has no random source of its own: a fresh secret's bytes are as good.
    n.copy_from_slice(&Secret::generate().derive("bulkwire 1 tcp nonce"));
    n
}

/// What both proofs cover: the opening and the answer's rank and nonce, and which side
/// proves (so one side's proof can't be reflected as the other's).
fn transcript(side: u8, open: &[u8], answer_head: &[u8]) -> Vec<u8> {
    let mut t = Vec::with_capacity(1 + open.len() + answer_head.len());
    t.push(side);
    t.extend_from_slice(open);
    t.extend_from_slice(answer_head);
    t
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn refused(why: String) -> io::Error {
    io::Error::new(io::ErrorKind::PermissionDenied, why)
}

/// The accepting side of a handshake on `s` (blocking, bounded by a read timeout): the
/// rank below `rank` that proved the job's secret, or why not.
fn accept_handshake(s: &TcpStream, secret: &Secret, rank: Rank) -> io::Result<Rank> {
    s.set_read_timeout(Some(HANDSHAKE_TIMEOUT))?;
    let mut open = [0u8; OPEN];
    (&*s).read_exact(&mut open)?;
    let q = u32_at(&open, 4);
    if u32_at(&open, 0) != HELLO_MAGIC || q >= rank {
        return Err(refused("not a lower rank of a bulkwire TCP job".into()));
    }
    let mut answer = Vec::with_capacity(ANSWER);
    answer.extend_from_slice(&HELLO_MAGIC.to_le_bytes());
    answer.extend_from_slice(&rank.to_le_bytes());
    answer.extend_from_slice(&nonce());
    let proof = secret.prove(PROOF_CONTEXT, &transcript(b'A', &open, &answer));
    let theirs = transcript(b'C', &open, &answer);
    answer.extend_from_slice(&proof);
    (&*s).write_all(&answer)?;
    let mut p = [0u8; 32];
    (&*s).read_exact(&mut p)?;
    if !secret.verify(PROOF_CONTEXT, &theirs, &p) {
        return Err(refused(format!(
            "a peer claiming rank {q} did not prove the job's secret"
        )));
    }
    s.set_read_timeout(None)?;
    Ok(q)
}

/// The connecting side of a handshake with rank `q` on `s`.
fn connect_handshake(s: &TcpStream, secret: &Secret, rank: Rank, q: Rank) -> io::Result<()> {
    s.set_read_timeout(Some(HANDSHAKE_TIMEOUT))?;
    let mut open = Vec::with_capacity(OPEN);
    open.extend_from_slice(&HELLO_MAGIC.to_le_bytes());
    open.extend_from_slice(&rank.to_le_bytes());
    open.extend_from_slice(&nonce());
    (&*s).write_all(&open)?;
    let mut answer = [0u8; ANSWER];
    (&*s).read_exact(&mut answer)?;
    let head = &answer[..8 + NONCE];
    let ok = u32_at(&answer, 0) == HELLO_MAGIC
        && u32_at(&answer, 4) == q
        && secret.verify(
            PROOF_CONTEXT,
            &transcript(b'A', &open, head),
            &answer[8 + NONCE..],
        );
    if !ok {
        return Err(refused(format!(
            "the peer at {} did not prove that it is rank {q} of this job",
            s.peer_addr().map_or_else(|_| "?".into(), |a| a.to_string())
        )));
    }
    let proof = secret.prove(PROOF_CONTEXT, &transcript(b'C', &open, head));
    (&*s).write_all(&proof)?;
    s.set_read_timeout(None)?;
    Ok(())
}

/// Connects rank `rank` to every other rank of the job: `listener` is this rank's bound
/// listening socket, `addrs[q]` rank q's. Rank r connects to every q > r and accepts a
/// connection from every q < r, each authenticated both ways with the job's `secret`
/// (a connection that fails the handshake is dropped, and accepting goes on). Collective:
/// every rank calls it at the same time. Returns one stream per peer (`None` for `rank`).
pub fn establish(
    rank: Rank,
    listener: TcpListener,
    addrs: &[SocketAddr],
    secret: &Secret,
    timeout: Duration,
) -> io::Result<Vec<Option<TcpStream>>> {
    let nprocs = addrs.len() as u32;
    let deadline = Instant::now() + timeout;
    let timed_out = || io::Error::new(io::ErrorKind::TimedOut, "TCP connection setup timed out");
    // Accept from the lower ranks on a thread while this one connects to the higher ones,
    // so that no order of calls among the ranks can deadlock.
    listener.set_nonblocking(true)?;
    let key = secret.clone();
    let acceptor = std::thread::spawn(move || -> io::Result<Vec<(Rank, TcpStream)>> {
        let mut got: Vec<(Rank, TcpStream)> = Vec::new();
        while got.len() < rank as usize {
            match listener.accept() {
                Ok((s, _)) => {
                    s.set_nonblocking(false)?;
                    match accept_handshake(&s, &key, rank) {
                        Ok(q) if !got.iter().any(|(r, _)| *r == q) => got.push((q, s)),
                        _ => continue,
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if Instant::now() >= deadline {
                        return Err(timed_out());
                    }
                    std::thread::sleep(Duration::from_micros(500));
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(got)
    });
    let mut streams: Vec<Option<TcpStream>> = (0..nprocs).map(|_| None).collect();
    let mut connect_err = None;
    for q in rank + 1..nprocs {
        let s = loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break Err(timed_out());
            }
            match TcpStream::connect_timeout(&addrs[q as usize], left.min(Duration::from_secs(5))) {
                Ok(s) => break Ok(s),
                // The peer's listener is bound before its address is published, but retry
                // a refusal anyway (a listen backlog overflowing under a large job).
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::ConnectionRefused | io::ErrorKind::TimedOut
                    ) =>
                {
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err(e) => break Err(e),
            }
        };
        match s.and_then(|s| connect_handshake(&s, secret, rank, q).map(|()| s)) {
            Ok(s) => streams[q as usize] = Some(s),
            Err(e) => {
                connect_err = Some(e);
                break;
            }
        }
    }
    let accepted = acceptor
        .join()
        .map_err(|_| io::Error::other("TCP acceptor thread panicked"))?;
    if let Some(e) = connect_err {
        return Err(e);
    }
    for (q, s) in accepted? {
        streams[q as usize] = Some(s);
    }
    Ok(streams)
}

impl TcpTransport {
    /// A transport over established connections (`streams[q]` to rank q, `None` for this
    /// rank; see [`establish`]).
    pub fn new(
        rank: Rank,
        streams: Vec<Option<TcpStream>>,
        cfg: TcpConfig,
        policy: WaitPolicy,
    ) -> io::Result<TcpTransport> {
        let nprocs = streams.len() as u32;
        let mut conns = Vec::with_capacity(streams.len());
        for (q, s) in streams.into_iter().enumerate() {
            match s {
                Some(s) if q as Rank != rank => {
                    tune(&s, &cfg)?;
                    conns.push(Some(Conn::new(s)));
                }
                Some(_) => {
                    return Err(io::Error::other("a connection to oneself"));
                }
                None if q as Rank == rank => conns.push(None),
                None => return Err(io::Error::other(format!("no connection to rank {q}"))),
            }
        }
        let dead_after = cfg.dead_after.as_nanos().min(Time::MAX as u128) as Time;
        Ok(TcpTransport {
            rank,
            nprocs,
            // As the engine's pings over a link (`EndpointConfig::with_deadline`).
            ping_interval: (dead_after / 10).clamp(SEC / 100, SEC),
            dead_after,
            next_live_check: 0,
            live: vec![Live::default(); nprocs as usize],
            cfg,
            conns,
            dead: vec![false; nprocs as usize],
            next_id: vec![0; nprocs as usize],
            stats: vec![PeerStats::default(); nprocs as usize],
            events: VecDeque::new(),
            epoch: Instant::now(),
            policy,
            wake: Arc::new(WakeFd::new()?),
            job: None,
            done: Vec::new(),
            got: Vec::new(),
        })
    }

    /// A job of `n` ranks in this process, connected over loopback (tests, benchmarks).
    pub fn loopback(n: u32, cfg: TcpConfig, policy: WaitPolicy) -> io::Result<Vec<TcpTransport>> {
        let listeners: Vec<TcpListener> = (0..n)
            .map(|_| TcpListener::bind("127.0.0.1:0"))
            .collect::<io::Result<_>>()?;
        let addrs: Vec<SocketAddr> = listeners
            .iter()
            .map(|l| l.local_addr())
            .collect::<io::Result<_>>()?;
        let timeout = cfg.connect_timeout;
        let secret = Secret::generate();
        let handles: Vec<_> = listeners
            .into_iter()
            .enumerate()
            .map(|(r, l)| {
                let (addrs, secret) = (addrs.clone(), secret.clone());
                std::thread::spawn(move || establish(r as Rank, l, &addrs, &secret, timeout))
            })
            .collect();
        let mut out = Vec::new();
        for (r, h) in handles.into_iter().enumerate() {
            let streams = h
                .join()
                .map_err(|_| io::Error::other("connection thread panicked"))??;
            out.push(TcpTransport::new(r as Rank, streams, cfg.clone(), policy)?);
        }
        Ok(out)
    }

    /// Ends every wait with an error once `job` records a failure, and wakes a blocked
    /// wait when it does.
    pub fn set_job(&mut self, job: Arc<JobState>) {
        self.job = Some(job);
    }

    /// Whether `peer`'s connection has ended.
    pub fn is_dead(&self, peer: Rank) -> bool {
        self.dead.get(peer as usize).copied().unwrap_or(false)
    }

    fn kill(&mut self, peer: Rank, silent_for: Time) {
        if !self.dead[peer as usize] {
            self.dead[peer as usize] = true;
            self.conns[peer as usize] = None;
            self.events.push_back(Event::PeerDead { peer, silent_for });
        }
    }

    /// Whether we depend on hearing from `q`: we wait on it, or its connection holds
    /// output the kernel has not taken (the peer is not reading).
    fn interested(&self, q: Rank) -> bool {
        self.live[q as usize].waiting
            || self.conns[q as usize]
                .as_ref()
                .is_some_and(|c| !c.out.is_empty())
    }

    /// Pings the silent peers we depend on and reports those silent for `dead_after`.
    fn check_liveness(&mut self, now: Time) {
        self.next_live_check = now + self.ping_interval / 2;
        for q in 0..self.nprocs {
            if q == self.rank || self.dead[q as usize] {
                continue;
            }
            if !self.interested(q) {
                self.live[q as usize].since = None;
                continue;
            }
            let l = &mut self.live[q as usize];
            let since = *l.since.get_or_insert(now);
            let silent = now.saturating_sub(since.max(l.heard));
            if silent >= self.dead_after {
                self.kill(q, silent);
            } else if silent >= self.ping_interval
                && now.saturating_sub(l.last_ping) >= self.ping_interval
            {
                l.last_ping = now;
                if let Some(c) = self.conns[q as usize].as_mut() {
                    c.out.push_back(control_frame(PING_MAGIC));
                }
            }
        }
    }

    /// Writes and reads what can be, on every connection.
    fn pump(&mut self) -> Progress {
        let mut prog = Progress::default();
        let max = self.cfg.max_message;
        let now = self.now();
        if now >= self.next_live_check {
            self.check_liveness(now);
        }
        for q in 0..self.nprocs {
            let Some(c) = self.conns[q as usize].as_mut() else {
                continue;
            };
            let mut broken = None;
            // Bytes the kernel takes after it refused some are room the peer made by
            // reading: heard, although a one-way stream brings nothing back.
            let heard = &mut self.live[q as usize].heard;
            for pass in 0..2 {
                if broken.is_none() && !c.out.is_empty() {
                    let was_blocked = c.blocked;
                    match c.write(&mut self.done) {
                        Ok(n) => {
                            prog.sent += usize::from(n > 0);
                            if n > 0 && was_blocked {
                                *heard = now;
                            }
                        }
                        Err(b) => broken = Some(b),
                    }
                }
                if pass == 1 || broken.is_some() {
                    break;
                }
                match c.read(max, &mut self.got) {
                    Ok(n) => {
                        prog.received += usize::from(n > 0);
                        if n > 0 {
                            *heard = now;
                        }
                    }
                    Err(b) => broken = Some(b),
                }
                // Answer the pings just read at once.
                if c.pongs_due == 0 {
                    break;
                }
                for _ in 0..std::mem::take(&mut c.pongs_due) {
                    c.out.push_back(control_frame(PONG_MAGIC));
                }
            }
            let s = &mut self.stats[q as usize];
            for (id, notify, len) in self.done.drain(..) {
                s.bytes_sent += len as u64;
                if notify {
                    self.events.push_back(Event::Sent { to: q, id });
                }
            }
            for (id, data) in self.got.drain(..) {
                s.messages_delivered += 1;
                s.bytes_received += data.len() as u64;
                self.events.push_back(Event::Message { from: q, id, data });
            }
            if let Some(b) = broken {
                match &b {
                    Broken::Closed => {}
                    Broken::Io(e) => tracing::debug!(peer = q, "tcp connection failed: {e}"),
                    Broken::Framing(why) => tracing::warn!(peer = q, "tcp stream broken: {why}"),
                }
                self.kill(q, 0);
            }
        }
        prog
    }
}

impl Transport for TcpTransport {
    fn rank(&self) -> Rank {
        self.rank
    }

    fn nprocs(&self) -> u32 {
        self.nprocs
    }

    fn protocol_name(&self) -> &'static str {
        "tcp"
    }

    #[inline]
    fn now(&self) -> Time {
        self.epoch.elapsed().as_nanos() as Time
    }

    fn send(&mut self, to: Rank, data: Bytes, notify: bool) -> Result<MsgId, Error> {
        if to >= self.nprocs {
            return Err(ProtoError::NoSuchPeer {
                peer: to,
                nprocs: self.nprocs,
            }
            .into());
        }
        if to == self.rank {
            return Err(ProtoError::SelfSend { peer: to }.into());
        }
        if data.len() as u64 > self.cfg.max_message {
            return Err(ProtoError::TooLarge {
                len: data.len() as u64,
                max: self.cfg.max_message,
            }
            .into());
        }
        let Some(c) = self.conns[to as usize].as_mut() else {
            return Err(Error::PeerDead(bulkwire_protocol::PeerDead {
                peer: to,
                silent_for: 0,
            }));
        };
        let id = self.next_id[to as usize];
        self.next_id[to as usize] = id.wrapping_add(1);
        let mut head = [0u8; FRAME_HEADER];
        head[0..8].copy_from_slice(&(data.len() as u64).to_le_bytes());
        head[8..12].copy_from_slice(&id.to_le_bytes());
        head[12..16].copy_from_slice(&FRAME_MAGIC.to_le_bytes());
        c.out.push_back(OutFrame {
            head,
            data,
            written: 0,
            id,
            notify,
        });
        self.stats[to as usize].messages_sent += 1;
        // Push it into the kernel at once: the caller may compute for long.
        let was_idle = c.out.len() == 1;
        if was_idle {
            let mut done = std::mem::take(&mut self.done);
            let r = c.write(&mut done);
            let s = &mut self.stats[to as usize];
            for (id, notify, len) in done.drain(..) {
                s.bytes_sent += len as u64;
                if notify {
                    self.events.push_back(Event::Sent { to, id });
                }
            }
            self.done = done;
            if r.is_err() {
                self.kill(to, 0);
            }
        }
        Ok(id)
    }

    fn step(&mut self) -> Result<Progress, Error> {
        Ok(self.pump())
    }

    fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    fn block(&mut self, timeout: Option<Duration>) -> Result<(), Error> {
        if !self.events.is_empty() {
            return Ok(());
        }
        let mut fds: Vec<libc::pollfd> = Vec::with_capacity(self.conns.len() + 2);
        for c in self.conns.iter().flatten() {
            let mut events = libc::POLLIN;
            if !c.out.is_empty() {
                events |= libc::POLLOUT;
            }
            fds.push(libc::pollfd {
                fd: c.sock.as_raw_fd(),
                events,
                revents: 0,
            });
        }
        // Wake in time to ping, or declare dead, a silent peer we depend on.
        let timeout = if (0..self.nprocs).any(|q| q != self.rank && self.interested(q)) {
            let check = Duration::from_nanos(self.ping_interval / 2);
            Some(timeout.map_or(check, |t| t.min(check)))
        } else {
            timeout
        };
        self.wake.sleep(fds, self.job.as_deref(), timeout)
    }

    /// Half the ping interval, as over a link: peers ping us after that much silence, and
    /// the keep-alive thread steps this transport at least this often to answer them.
    fn liveness_interval(&self) -> Option<Duration> {
        Some(Duration::from_nanos(self.ping_interval / 2))
    }

    fn waker(&self) -> Waker {
        let w = self.wake.clone();
        Arc::new(move || w.wake())
    }

    fn has_unsent(&self) -> bool {
        // Output waiting for room in the kernel does not stop a wait from blocking: the
        // blocking `poll` watches for the room too.
        false
    }

    fn busy(&self) -> bool {
        self.conns.iter().flatten().any(|c| !c.out.is_empty())
    }

    fn expect(&mut self, peer: Rank, waiting: bool) {
        let now = self.now();
        let Some(l) = self.live.get_mut(peer as usize) else {
            return;
        };
        l.waiting = waiting;
        // Silence counts from the start of this wait, not of an earlier one.
        l.since = waiting.then(|| l.since.unwrap_or(now));
    }

    fn peer_stats(&self, peer: Rank) -> PeerStats {
        let mut s = self.stats[peer as usize];
        if let Some(c) = self.conns.get(peer as usize).and_then(|c| c.as_ref())
            && let Some(i) = tcp_info(&c.sock)
        {
            s.data_sent = i.tcpi_segs_out as u64;
            s.data_received = i.tcpi_segs_in as u64;
            s.retransmits = i.tcpi_total_retrans as u64;
            s.srtt_ns = i.tcpi_rtt as u64 * 1000;
        }
        s
    }

    fn policy(&self) -> WaitPolicy {
        self.policy
    }

    fn check(&self) -> Result<(), Error> {
        match &self.job {
            Some(j) if j.is_failed() => Err(Error::JobFailed(
                j.failure()
                    .map_or_else(|| "the job failed".into(), |f| f.to_string()),
            )),
            _ => Ok(()),
        }
    }
}

/// The kernel's view of a connection.
fn tcp_info(s: &TcpStream) -> Option<libc::tcp_info> {
    // SAFETY: tcp_info is plain old data; all-zero is a valid value.
    let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: `info` is a writable tcp_info of `len` bytes; the kernel writes at most `len`.
    let r = unsafe {
        libc::getsockopt(
            s.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&mut info as *mut libc::tcp_info).cast(),
            &mut len,
        )
    };
    (r == 0).then_some(info)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair() -> (Vec<TcpListener>, Vec<SocketAddr>) {
        let ls: Vec<TcpListener> = (0..2)
            .map(|_| TcpListener::bind("127.0.0.1:0").unwrap())
            .collect();
        let addrs = ls.iter().map(|l| l.local_addr().unwrap()).collect();
        (ls, addrs)
    }

    #[test]
    fn connections_prove_the_job_secret_both_ways() {
        let t = Duration::from_secs(1);
        // Another job's secret: the connecting rank refuses the answer, the accepting rank
        // drops the stranger and times out waiting for its real peer.
        let (mut ls, addrs) = pair();
        let (l1, l0) = (ls.pop().unwrap(), ls.pop().unwrap());
        let a2 = addrs.clone();
        let other = Secret::generate();
        let r1 = std::thread::spawn(move || establish(1, l1, &a2, &other, t));
        let e = establish(0, l0, &addrs, &Secret::generate(), t).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::PermissionDenied, "{e}");
        assert!(e.to_string().contains("did not prove"), "{e}");
        assert_eq!(
            r1.join().unwrap().unwrap_err().kind(),
            io::ErrorKind::TimedOut
        );
        // The same secret: connected.
        let (mut ls, addrs) = pair();
        let (l1, l0) = (ls.pop().unwrap(), ls.pop().unwrap());
        let a2 = addrs.clone();
        let s = Secret::generate();
        let s2 = s.clone();
        let r1 = std::thread::spawn(move || establish(1, l1, &a2, &s2, t));
        let s0 = establish(0, l0, &addrs, &s, t).unwrap();
        let s1 = r1.join().unwrap().unwrap();
        assert!(s0[1].is_some() && s1[0].is_some());
    }
}
