//! The control protocol between a job's processes and the rendezvous server.
//!
//! A TCP stream of frames: `len: u32 LE` (of what follows), `type: u8`, payload. Every
//! integer is little-endian. Decoding is total: a frame longer than [`MAX_FRAME`] or a
//! payload that doesn't parse is a protocol error for that connection, never a panic or an
//! unbounded allocation.
//!
//! | dir | type | payload |
//! |---|---|---|
//! | c→s | HELLO | magic, version u16, rank, nprocs, cookie, job u64, pid, host (u16-prefixed) |
//! | c→s | EXCHANGE | round u32, blob |
//! | c→s | ABORT | message |
//! | c→s | FINISH | status i32 |
//! | s→c | WELCOME | version u16 |
//! | s→c | REJECT | message |
//! | s→c | PART | round u32, rank u32, blob: one rank's contribution to a finished round |
//! | s→c | FAILED | a [`Failure`] |
//! | s→c | ACK | what (1: finish, 2: abort) |
//! | a→s | AGENT | magic, version u16, cookie, job u64, agent index, pid: a host agent joins |
//! | a→s | EXITED | rank, how (0: status, 1: signal, 2: signal with core), number |
//! | a→s | NOSTART | rank, message: the agent could not start that rank |
//! | both | BEAT | nothing: the agent and the launcher are alive and reachable |
//! | s→a | START | the host's ranks and how to start them ([`crate::agent::Start`]) |
//! | s→a | SIGNAL | signal i32, for every rank the agent started |
//!
//! WELCOME also carries the rank whose process runs the server (u32, `u32::MAX`: none), so
//! that a process that loses the server can name that rank.

use crate::state::Failure;

pub const MAGIC: u32 = u32::from_le_bytes(*b"BWJC");
pub const VERSION: u16 = 1;

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

/// What a process says when it connects.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hello {
    pub version: u16,
    pub rank: u32,
    pub nprocs: u32,
    pub cookie: u32,
    pub job_id: u64,
    pub pid: u32,
    pub host: String,
}

impl Hello {
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::frame(T_HELLO);
        w.u32(MAGIC);
        w.u16(self.version);
        w.u32(self.rank);
        w.u32(self.nprocs);
        w.u32(self.cookie);
        w.u64(self.job_id);
        w.u32(self.pid);
        w.str16(&self.host);
        w.finish_frame()
    }

    /// Decodes a HELLO payload; `Err` says why in words fit for a rejection.
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
            Some(Hello {
                version,
                rank: r.u32()?,
                nprocs: r.u32()?,
                cookie: r.u32()?,
                job_id: r.u64()?,
                pid: r.u32()?,
                host: r.str16(MAX_TEXT)?,
            })
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

/// `host_rank`: the rank whose process runs the server, if one does.
pub fn welcome(host_rank: Option<u32>) -> Vec<u8> {
    let mut w = Writer::frame(T_WELCOME);
    w.u16(VERSION);
    w.u32(host_rank.unwrap_or(u32::MAX));
    w.finish_frame()
}

/// The server's host rank from a WELCOME payload (absent in a short one).
pub fn welcome_host_rank(p: &[u8]) -> Option<u32> {
    let mut r = Reader::new(p);
    r.u16()?;
    r.u32().filter(|&k| k != u32::MAX)
}

/// A frame of type `t` with no payload.
pub fn empty(t: u8) -> Vec<u8> {
    Writer::frame(t).finish_frame()
}

/// What a host agent says when it connects.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AgentHello {
    pub cookie: u32,
    pub job_id: u64,
    pub index: u32,
    pub pid: u32,
}

impl AgentHello {
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::frame(T_AGENT);
        w.u32(MAGIC);
        w.u16(VERSION);
        w.u32(self.cookie);
        w.u64(self.job_id);
        w.u32(self.index);
        w.u32(self.pid);
        w.finish_frame()
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
            Some(AgentHello {
                cookie: r.u32()?,
                job_id: r.u64()?,
                index: r.u32()?,
                pid: r.u32()?,
            })
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
    fn hello_round_trip_and_truncation() {
        let h = Hello {
            version: VERSION,
            rank: 3,
            nprocs: 8,
            cookie: 0xabcd,
            job_id: 99,
            pid: 1234,
            host: "n/b".into(),
        };
        let f = h.encode();
        let (t, p, used) = split_frame(&f).unwrap().unwrap();
        assert_eq!((t, used), (T_HELLO, f.len()));
        assert_eq!(Hello::decode(p).unwrap(), h);
        for cut in 0..p.len() {
            assert!(Hello::decode(&p[..cut]).is_err());
        }
        assert!(split_frame(&f[..f.len() - 1]).unwrap().is_none());
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
