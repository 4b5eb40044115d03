//! The control protocol between a job's processes and the rendezvous server.
//!
//! A TCP stream of frames: `len: u32 LE` (of what follows), `type: u8`, payload. Every
//! integer is little-endian. Decoding is total: a frame longer than [`MAX_FRAME`] or a
//! payload that doesn't parse is a protocol error for that connection, never a panic or an
//! unbounded allocation.
//!
//! | dir | type | payload |
//! |---|---|---|
//! | s→c | CHALLENGE | magic, version u16, server nonce (32 bytes): the first frame on every connection |
//! | c→s | HELLO | magic, version u16, rank, nprocs, pid, host (u16-prefixed), nonce (32), proof (32) |
//! | c→s | EXCHANGE | round u32, blob |
//! | c→s | ABORT | message |
//! | c→s | FINISH | status i32 |
//! | s→c | WELCOME | version u16, host rank u32, proof (32) |
//! | s→c | REJECT | message ("not admitted" to anyone who did not prove the secret) |
//! | s→c | PART | round u32, rank u32, blob: one rank's contribution to a finished round |
//! | s→c | FAILED | a [`Failure`] |
//! | s→c | ACK | what (1: finish, 2: abort) |
//! | a→s | AGENT | magic, version u16, agent index, pid, nonce (32), proof (32): a host agent joins |
//! | a→s | EXITED | rank, how (0: status, 1: signal, 2: signal with core), number |
//! | a→s | NOSTART | rank, message: the agent could not start that rank |
//! | both | BEAT | nothing: the agent and the launcher are alive and reachable |
//! | s→a | START | the host's ranks and how to start them ([`crate::agent::Start`]) |
//! | s→a | SIGNAL | signal i32, for every rank the agent started |
//!
//! WELCOME also carries the rank whose process runs the server (u32, `u32::MAX`: none), so
//! that a process that loses the server can name that rank. An agent gets a WELCOME before
//! its START.
//!
//! Mutual authentication: a member's proof is `secret.prove(CTX_HELLO, server nonce ||
//! type || payload before the proof)`, so it covers every field and both nonces and can't
//! be replayed on another connection; the WELCOME's proof is `secret.prove(CTX_WELCOME,
//! that transcript || WELCOME fields)`, so a process tells the job's server from an
//! impostor before it sends anything else.

use crate::secret::Secret;
use crate::state::Failure;

pub const MAGIC: u32 = u32::from_le_bytes(*b"BWJC");
/// 2: the CHALLENGE and the proofs (a version 1 peer is refused, never half-understood).
pub const VERSION: u16 = 2;

/// Largest blob one process may contribute to an exchange round.
pub const MAX_BLOB: usize = 1 << 20;
/// Largest frame: a blob plus its header.
pub const MAX_FRAME: usize = MAX_BLOB + 64;
/// Messages (abort text, rejections) are cut to this many bytes.
pub const MAX_TEXT: usize = 4096;

pub const T_HELLO: u8 = 1;
pub const T_EXCHANGE: u8 = 2;
pub const T_ABORT: u8 = 3;
pub const T_FINISH: u8 = 4;
pub const T_AGENT: u8 = 5;
pub const T_EXITED: u8 = 6;
pub const T_BEAT: u8 = 7;
pub const T_NOSTART: u8 = 8;
pub const T_WELCOME: u8 = 0x81;
pub const T_REJECT: u8 = 0x82;
pub const T_PART: u8 = 0x83;
pub const T_FAILED: u8 = 0x84;
pub const T_ACK: u8 = 0x85;
pub const T_START: u8 = 0x86;
pub const T_SIGNAL: u8 = 0x87;
pub const T_CHALLENGE: u8 = 0x88;

pub const ACK_FINISH: u8 = 1;
pub const ACK_ABORT: u8 = 2;

/// Little-endian encoder.
#[derive(Default)]
pub struct Writer(Vec<u8>);

impl Writer {
    /// A frame of type `t`: the length is patched in by [`Writer::finish_frame`].
    pub fn frame(t: u8) -> Writer {
        let mut v = Vec::with_capacity(64);
        v.extend_from_slice(&[0, 0, 0, 0, t]);
        Writer(v)
    }
    pub fn u8(&mut self, x: u8) {
        self.0.push(x);
    }
    pub fn u16(&mut self, x: u16) {
        self.0.extend_from_slice(&x.to_le_bytes());
    }
    pub fn u32(&mut self, x: u32) {
        self.0.extend_from_slice(&x.to_le_bytes());
    }
    pub fn i32(&mut self, x: i32) {
        self.0.extend_from_slice(&x.to_le_bytes());
    }
    pub fn u64(&mut self, x: u64) {
        self.0.extend_from_slice(&x.to_le_bytes());
    }
    pub fn bytes(&mut self, b: &[u8]) {
        self.0.extend_from_slice(b);
    }
    /// A string with a u16 length, cut (at a char boundary) to [`MAX_TEXT`].
    pub fn str16(&mut self, s: &str) {
        let s = truncate(s, MAX_TEXT);
        self.u16(s.len() as u16);
        self.bytes(s.as_bytes());
    }
    /// Bytes with a u32 length (the caller keeps the frame within [`MAX_FRAME`]).
    pub fn blob32(&mut self, b: &[u8]) {
        self.u32(b.len() as u32);
        self.bytes(b);
    }
    pub fn into_vec(self) -> Vec<u8> {
        self.0
    }
    /// The finished frame, length filled in.
    pub fn finish_frame(mut self) -> Vec<u8> {
        let len = (self.0.len() - 4) as u32;
        self.0[..4].copy_from_slice(&len.to_le_bytes());
        self.0
    }
}

/// `s` cut to at most `max` bytes at a char boundary.
pub fn truncate(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// Little-endian decoder; every read is checked.
pub struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    pub fn new(b: &'a [u8]) -> Reader<'a> {
        Reader(b)
    }
    pub fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Some(a)
    }
    pub fn u8(&mut self) -> Option<u8> {
        Some(self.take(1)?[0])
    }
    pub fn u16(&mut self) -> Option<u16> {
        Some(u16::from_le_bytes(self.take(2)?.try_into().ok()?))
    }
    pub fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }
    pub fn i32(&mut self) -> Option<i32> {
        Some(i32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }
    pub fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
    pub fn str16(&mut self, max: usize) -> Option<String> {
        let n = self.u16()? as usize;
        if n > max {
            return None;
        }
        Some(String::from_utf8_lossy(self.take(n)?).into_owned())
    }
    pub fn blob32(&mut self) -> Option<&'a [u8]> {
        let n = self.u32()? as usize;
        self.take(n)
    }
    pub fn rest(&mut self) -> &'a [u8] {
        std::mem::take(&mut self.0)
    }
}

/// Bytes of a nonce (each side's fresh random contribution to a handshake).
pub const NONCE: usize = 32;
/// Bytes of a proof ([`Secret::prove`]).
pub const PROOF: usize = 32;
/// The purpose of a member's proof (HELLO, AGENT).
pub const CTX_HELLO: &str = "bulkwire 1 hello";
/// The purpose of the server's proof (WELCOME): distinct, so a member's proof can never be
/// reflected back as the server's.
pub const CTX_WELCOME: &str = "bulkwire 1 welcome";

/// A fresh nonce from the kernel's random source.
pub fn nonce() -> [u8; NONCE] {
    let mut n = [0u8; NONCE];
    crate::sys::random_bytes(&mut n);
    n
}

/// The server's first frame on every connection: magic, version, its nonce.
pub fn challenge(nonce: &[u8; NONCE]) -> Vec<u8> {
    let mut w = Writer::frame(T_CHALLENGE);
    w.u32(MAGIC);
    w.u16(VERSION);
    w.bytes(nonce);
    w.finish_frame()
}

/// The server's nonce from a CHALLENGE payload; `Err` says why in words.
pub fn decode_challenge(p: &[u8]) -> Result<[u8; NONCE], String> {
    let mut r = Reader::new(p);
    if r.u32() != Some(MAGIC) {
        return Err("not a bulkwire rendezvous server (bad magic)".into());
    }
    match r.u16() {
        Some(VERSION) => {}
        Some(v) => {
            return Err(format!(
                "the rendezvous server speaks control protocol version {v}, this process \
                 {VERSION}: mixed bulkwire versions?"
            ));
        }
        None => return Err("truncated challenge".into()),
    }
    r.take(NONCE)
        .and_then(|n| n.try_into().ok())
        .ok_or_else(|| "truncated challenge".into())
}

/// What a proof covers: the server's nonce, the frame type, and every byte of the payload
/// before the proof (which includes the member's own nonce).
pub fn transcript(server_nonce: &[u8], t: u8, signed: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(server_nonce.len() + 1 + signed.len());
    v.extend_from_slice(server_nonce);
    v.push(t);
    v.extend_from_slice(signed);
    v
}

/// Finishes a HELLO or AGENT frame whose payload so far is `w`: appends the proof over
/// [`transcript`]; returns the frame and the transcript (for checking the WELCOME).
fn seal(mut w: Writer, secret: &Secret, server_nonce: &[u8]) -> (Vec<u8>, Vec<u8>) {
    let t = w.0[4];
    let tr = transcript(server_nonce, t, &w.0[5..]);
    w.bytes(&secret.prove(CTX_HELLO, &tr));
    (w.finish_frame(), tr)
}

/// Checks the proof at the end of a HELLO or AGENT payload `p` of type `t`: the transcript
/// when it holds, `None` otherwise.
pub fn verify_member(secret: &Secret, server_nonce: &[u8], t: u8, p: &[u8]) -> Option<Vec<u8>> {
    let cut = p.len().checked_sub(PROOF)?;
    let tr = transcript(server_nonce, t, &p[..cut]);
    secret.verify(CTX_HELLO, &tr, &p[cut..]).then_some(tr)
}

/// What a process says when it connects (after the server's CHALLENGE).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hello {
    pub version: u16,
    pub rank: u32,
    pub nprocs: u32,
    pub pid: u32,
    pub host: String,
}

impl Hello {
    /// The HELLO frame with this process's fresh nonce and its proof; also the transcript
    /// the server's WELCOME must prove.
    pub fn encode(&self, secret: &Secret, server_nonce: &[u8]) -> (Vec<u8>, Vec<u8>) {
        let mut w = Writer::frame(T_HELLO);
        w.u32(MAGIC);
        w.u16(self.version);
        w.u32(self.rank);
        w.u32(self.nprocs);
        w.u32(self.pid);
        w.str16(&self.host);
        w.bytes(&nonce());
        seal(w, secret, server_nonce)
    }

    /// Decodes a HELLO payload (the proof is checked apart, [`verify_member`]); `Err` says
    /// why in words.
    pub fn decode(p: &[u8]) -> Result<Hello, String> {
        let mut r = Reader::new(p);
        if r.u32() != Some(MAGIC) {
            return Err("not a bulkwire job process (bad magic)".into());
        }
        let version = r.u16().ok_or("truncated hello")?;
        if version != VERSION {
            return Err(format!(
                "control protocol version {version}, the launcher speaks {VERSION}: \
                 mixed bulkwire versions?"
            ));
        }
        let mut f = || -> Option<Hello> {
            let h = Hello {
                version,
                rank: r.u32()?,
                nprocs: r.u32()?,
                pid: r.u32()?,
                host: printable(&r.str16(MAX_TEXT)?),
            };
            r.take(NONCE + PROOF)?;
            Some(h)
        };
        f().ok_or_else(|| "truncated hello".into())
    }
}

pub fn exchange(round: u32, blob: &[u8]) -> Vec<u8> {
    let mut w = Writer::frame(T_EXCHANGE);
    w.u32(round);
    w.bytes(blob);
    w.finish_frame()
}

pub fn text_frame(t: u8, msg: &str) -> Vec<u8> {
    let mut w = Writer::frame(t);
    w.bytes(truncate(msg, MAX_TEXT).as_bytes());
    w.finish_frame()
}

pub fn finish(status: i32) -> Vec<u8> {
    let mut w = Writer::frame(T_FINISH);
    w.i32(status);
    w.finish_frame()
}

/// The server's admission: `host_rank` (the rank whose process runs the server, if one
/// does), and the server's proof over the member's transcript `tr` and these fields.
pub fn welcome(host_rank: Option<u32>, secret: &Secret, tr: &[u8]) -> Vec<u8> {
    let mut w = Writer::frame(T_WELCOME);
    w.u16(VERSION);
    w.u32(host_rank.unwrap_or(u32::MAX));
    let mut all = tr.to_vec();
    all.extend_from_slice(&w.0[5..]);
    w.bytes(&secret.prove(CTX_WELCOME, &all));
    w.finish_frame()
}

/// Checks a WELCOME payload against the transcript `tr` of our HELLO: `Ok(host rank)` when
/// the server proved it knows the secret, `Err` otherwise (an impostor).
pub fn verify_welcome(secret: &Secret, tr: &[u8], p: &[u8]) -> Result<Option<u32>, ()> {
    let cut = p.len().checked_sub(PROOF).ok_or(())?;
    let mut all = tr.to_vec();
    all.extend_from_slice(&p[..cut]);
    if !secret.verify(CTX_WELCOME, &all, &p[cut..]) {
        return Err(());
    }
    let mut r = Reader::new(&p[..cut]);
    r.u16().ok_or(())?;
    Ok(r.u32().ok_or(())?).map(|k| Some(k).filter(|&k| k != u32::MAX))
}

/// A frame of type `t` with no payload.
pub fn empty(t: u8) -> Vec<u8> {
    Writer::frame(t).finish_frame()
}

/// What a host agent says when it connects (after the server's CHALLENGE).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AgentHello {
    pub index: u32,
    pub pid: u32,
}

impl AgentHello {
    /// The AGENT frame with the agent's nonce and proof, and the transcript.
    pub fn encode(&self, secret: &Secret, server_nonce: &[u8]) -> (Vec<u8>, Vec<u8>) {
        let mut w = Writer::frame(T_AGENT);
        w.u32(MAGIC);
        w.u16(VERSION);
        w.u32(self.index);
        w.u32(self.pid);
        w.bytes(&nonce());
        seal(w, secret, server_nonce)
    }

    pub fn decode(p: &[u8]) -> Result<AgentHello, String> {
        let mut r = Reader::new(p);
        if r.u32() != Some(MAGIC) {
            return Err("not a bulkwire host agent (bad magic)".into());
        }
        match r.u16() {
            Some(VERSION) => {}
            Some(v) => {
                return Err(format!(
                    "host agent speaks control protocol version {v}, the launcher {VERSION}: \
                     mixed bulkwire versions on the hosts?"
                ));
            }
            None => return Err("truncated agent hello".into()),
        }
        let mut f = || {
            let h = AgentHello {
                index: r.u32()?,
                pid: r.u32()?,
            };
            r.take(NONCE + PROOF)?;
            Some(h)
        };
        f().ok_or_else(|| "truncated agent hello".into())
    }
}

/// An agent's report of how one of its ranks ended.
pub fn exited(rank: u32, exit: crate::sys::ExitKind) -> Vec<u8> {
    use crate::sys::ExitKind;
    let mut w = Writer::frame(T_EXITED);
    w.u32(rank);
    match exit {
        ExitKind::Code(c) => {
            w.u8(0);
            w.i32(c);
        }
        ExitKind::Signal { signal, core } => {
            w.u8(if core { 2 } else { 1 });
            w.i32(signal);
        }
    }
    w.finish_frame()
}

pub fn decode_exited(p: &[u8]) -> Option<(u32, crate::sys::ExitKind)> {
    use crate::sys::ExitKind;
    let mut r = Reader::new(p);
    let rank = r.u32()?;
    let how = r.u8()?;
    let n = r.i32()?;
    let exit = match how {
        0 => ExitKind::Code(n),
        1 | 2 => ExitKind::Signal {
            signal: n,
            core: how == 2,
        },
        _ => return None,
    };
    Some((rank, exit))
}

/// An agent could not start `rank`.
pub fn nostart(rank: u32, why: &str) -> Vec<u8> {
    let mut w = Writer::frame(T_NOSTART);
    w.u32(rank);
    w.str16(why);
    w.finish_frame()
}

pub fn signal(sig: i32) -> Vec<u8> {
    let mut w = Writer::frame(T_SIGNAL);
    w.i32(sig);
    w.finish_frame()
}

pub fn part(round: u32, rank: u32, blob: &[u8]) -> Vec<u8> {
    let mut w = Writer::frame(T_PART);
    w.u32(round);
    w.u32(rank);
    w.bytes(blob);
    w.finish_frame()
}

pub fn ack(what: u8) -> Vec<u8> {
    let mut w = Writer::frame(T_ACK);
    w.u8(what);
    w.finish_frame()
}

pub fn failed(f: &Failure) -> Vec<u8> {
    let mut w = Writer::frame(T_FAILED);
    f.encode(&mut w);
    w.finish_frame()
}

/// `s` with control characters (a peer's text: escapes, newlines) shown as `?`, so that
/// what a peer sent can't forge or garble lines of a log.
pub fn printable(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect()
}

/// Text of a text frame (abort, reject), decoded leniently and bounded.
pub fn text(p: &[u8]) -> String {
    String::from_utf8_lossy(&p[..p.len().min(MAX_TEXT)]).into_owned()
}

/// A frame found in a buffer: type, payload, bytes it takes in the buffer.
pub type Frame<'a> = (u8, &'a [u8], usize);

/// The first complete frame in `buf`: `Ok(Some((type, payload, bytes used)))`, `Ok(None)`
/// when more bytes are needed, `Err` on an impossible length.
pub fn split_frame(buf: &[u8]) -> Result<Option<Frame<'_>>, String> {
    if buf.len() < 4 {
        return Ok(None);
    }
    let len = u32::from_le_bytes(buf[..4].try_into().expect("4 bytes")) as usize;
    if len == 0 || len > MAX_FRAME {
        return Err(format!("control frame of {len} bytes (limit {MAX_FRAME})"));
    }
    if buf.len() < 4 + len {
        return Ok(None);
    }
    Ok(Some((buf[4], &buf[5..4 + len], 4 + len)))
}

/// Reads one frame from a blocking stream into `buf` (reused): `Ok(None)` at a clean EOF
/// between frames.
pub fn read_frame(r: &mut impl std::io::Read, buf: &mut Vec<u8>) -> std::io::Result<Option<u8>> {
    use std::io::{Error, ErrorKind};
    let mut hdr = [0u8; 5];
    let mut got = 0;
    while got < hdr.len() {
        match r.read(&mut hdr[got..]) {
            Ok(0) if got == 0 => return Ok(None),
            Ok(0) => return Err(ErrorKind::UnexpectedEof.into()),
            Ok(n) => got += n,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    let len = u32::from_le_bytes([hdr[0], hdr[1], hdr[2], hdr[3]]) as usize;
    if len == 0 || len > MAX_FRAME {
        return Err(Error::new(
            ErrorKind::InvalidData,
            format!("control frame of {len} bytes (limit {MAX_FRAME})"),
        ));
    }
    buf.clear();
    buf.resize(len - 1, 0);
    r.read_exact(buf)?;
    Ok(Some(hdr[4]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hello_round_trip_truncation_and_proofs() {
        let h = Hello {
            version: VERSION,
            rank: 3,
            nprocs: 8,
            pid: 1234,
            host: "n/b".into(),
        };
        let secret = Secret::generate();
        let sn = nonce();
        let (f, tr) = h.encode(&secret, &sn);
        let (t, p, used) = split_frame(&f).unwrap().unwrap();
        assert_eq!((t, used), (T_HELLO, f.len()));
        assert_eq!(Hello::decode(p).unwrap(), h);
        for cut in 0..p.len() {
            assert!(Hello::decode(&p[..cut]).is_err());
            assert!(verify_member(&secret, &sn, T_HELLO, &p[..cut]).is_none());
        }
        assert!(split_frame(&f[..f.len() - 1]).unwrap().is_none());
        assert_eq!(verify_member(&secret, &sn, T_HELLO, p), Some(tr.clone()));
        // Another job's secret, another connection's nonce, another frame type: refused.
        assert!(verify_member(&Secret::generate(), &sn, T_HELLO, p).is_none());
        assert!(verify_member(&secret, &nonce(), T_HELLO, p).is_none());
        assert!(verify_member(&secret, &sn, T_AGENT, p).is_none());
        // The server's answer proves itself against the same transcript only.
        let w = welcome(Some(0), &secret, &tr);
        let (t, wp, _) = split_frame(&w).unwrap().unwrap();
        assert_eq!(t, T_WELCOME);
        assert_eq!(verify_welcome(&secret, &tr, wp), Ok(Some(0)));
        assert!(verify_welcome(&Secret::generate(), &tr, wp).is_err());
        assert!(verify_welcome(&secret, &tr[1..], wp).is_err());
        // A member's proof is no server proof.
        let mut reflected = wp[..6].to_vec();
        reflected.extend_from_slice(&p[p.len() - PROOF..]);
        assert!(verify_welcome(&secret, &tr, &reflected).is_err());
        assert_eq!(
            decode_challenge(split_frame(&challenge(&sn)).unwrap().unwrap().1),
            Ok(sn)
        );
    }

    #[test]
    fn oversized_frames_are_errors() {
        let mut b = ((MAX_FRAME + 1) as u32).to_le_bytes().to_vec();
        b.extend([T_PART, 0, 0]);
        assert!(split_frame(&b).is_err());
        assert!(read_frame(&mut &b[..], &mut Vec::new()).is_err());
        assert!(split_frame(&[0, 0, 0, 0, 1]).is_err());
    }

    #[test]
    fn read_frame_reads_what_was_written() {
        let mut s = part(2, 1, b"card");
        s.extend(ack(ACK_FINISH));
        let mut r = &s[..];
        let mut buf = Vec::new();
        assert_eq!(read_frame(&mut r, &mut buf).unwrap(), Some(T_PART));
        assert_eq!(&buf[8..], b"card");
        assert_eq!(read_frame(&mut r, &mut buf).unwrap(), Some(T_ACK));
        assert_eq!(buf, [ACK_FINISH]);
        assert_eq!(read_frame(&mut r, &mut buf).unwrap(), None);
    }

    #[test]
    fn truncate_respects_chars() {
        assert_eq!(truncate("héllo", 2), "h");
        assert_eq!(truncate("abc", 10), "abc");
    }
}
