//! The raw baselines, measured by the same harness as the protocols: bare UDP datagrams
//! (messages cut at the link's largest datagram, no header, no acknowledgement, no
//! recovery) and a bare kernel TCP connection. Waiting follows the engine's policy (spin
//! for a budget, then block), so a difference in the tables is the stack's cost and
//! nothing else.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use bulkwire_engine::WaitPolicy;
use bulkwire_link::{Link, Rank, RxBatch, Tx};

use crate::kernels::{Role, StreamSample};

/// A byte channel to one peer, with no protocol of ours on it.
pub trait RawChannel {
    /// Sends `data` as one message.
    fn send_msg(&mut self, data: &[u8]) -> io::Result<()>;

    /// Receives until `size` bytes have arrived, or nothing arrives for `idle`. Returns
    /// the bytes counted (at most `size`; any surplus is kept for the next call) and
    /// whether anything arrived at all.
    fn recv_bytes(&mut self, size: usize, idle: Duration) -> io::Result<(usize, bool)>;

    /// Receives an 8-byte little-endian count (a stream acknowledgement).
    fn recv_u64(&mut self, idle: Duration) -> io::Result<Option<u64>>;
}

/// Spins for the policy's budget, then sleeps in `block` until `idle` has passed since
/// `last`. Returns false once `idle` has passed.
fn pause(policy: &WaitPolicy, last: Instant, idle: Duration, block: impl FnOnce(Duration)) -> bool {
    let quiet = last.elapsed();
    if quiet >= idle {
        return false;
    }
    if quiet < policy.spin {
        // The same discipline as the library's waits, so that the baseline is not the
        // one left spinning on a shared core.
        if policy.yields(quiet) {
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
    } else {
        block(idle - quiet);
    }
    true
}

/// Bare datagrams to one peer over a link.
pub struct RawUdp<L: Link> {
    link: L,
    peer: Rank,
    /// Largest datagram to `peer`.
    max: usize,
    rx: RxBatch,
    policy: WaitPolicy,
    carry: usize,
    last: Vec<u8>,
}

impl<L: Link> RawUdp<L> {
    pub fn new(link: L, peer: Rank, policy: WaitPolicy) -> RawUdp<L> {
        // Sized like the engine's, so the baseline gets the same cache-friendly batches.
        let caps = link.capabilities();
        let rx = RxBatch::cache_sized(64, caps.recv_slot.max(1));
        RawUdp {
            link,
            peer,
            max: caps.max_to(peer).max(1),
            rx,
            policy,
            carry: 0,
            last: Vec::new(),
        }
    }
}

impl<L: Link> RawChannel for RawUdp<L> {
    fn send_msg(&mut self, data: &[u8]) -> io::Result<()> {
        let max = self.max;
        let mut chunks: Vec<&[u8]> = data.chunks(max).collect();
        if chunks.is_empty() {
            chunks.push(&[]);
        }
        let mut i = 0;
        while i < chunks.len() {
            let batch: Vec<Tx<'_>> = chunks[i..]
                .iter()
                .take(64)
                .map(|c| Tx {
                    dst: self.peer,
                    head: &[],
                    body: c,
                })
                .collect();
            let n = self.link.send(&batch)?;
            i += n;
            if n == 0 {
                std::thread::yield_now();
            }
        }
        Ok(())
    }

    fn recv_bytes(&mut self, size: usize, idle: Duration) -> io::Result<(usize, bool)> {
        let mut got = std::mem::take(&mut self.carry);
        let mut any = got > 0;
        let mut last = Instant::now();
        loop {
            if any && got >= size {
                self.carry = got - size;
                return Ok((size, true));
            }
            let n = self.link.recv(&mut self.rx)?;
            if n > 0 {
                any = true;
                got += self.rx.iter().map(|d| d.len()).sum::<usize>();
                if let Some(d) = self.rx.iter().last() {
                    self.last.clear();
                    self.last.extend_from_slice(d);
                }
                last = Instant::now();
                continue;
            }
            let mut err = None;
            let link = &mut self.link;
            if !pause(&self.policy, last, idle, |t| err = link.wait(Some(t)).err()) {
                return Ok((got, any));
            }
            if let Some(e) = err {
                return Err(e);
            }
        }
    }

    fn recv_u64(&mut self, idle: Duration) -> io::Result<Option<u64>> {
        self.carry = 0;
        let (_, any) = self.recv_bytes(8, idle)?;
        self.carry = 0;
        Ok(any.then(|| {
            self.last
                .get(..8)
                .map_or(0, |b| u64::from_le_bytes(b.try_into().unwrap()))
        }))
    }
}

/// A bare kernel TCP connection (`TCP_NODELAY`, non-blocking, spin then `poll`).
pub struct RawTcp {
    s: TcpStream,
    policy: WaitPolicy,
    buf: Vec<u8>,
    /// Bytes received beyond what the last call counted.
    carry: usize,
}

impl RawTcp {
    pub fn new(s: TcpStream, policy: WaitPolicy) -> io::Result<RawTcp> {
        s.set_nodelay(true)?;
        s.set_nonblocking(true)?;
        Ok(RawTcp {
            s,
            policy,
            buf: vec![0; 1 << 20],
            carry: 0,
        })
    }

    fn poll(&self, events: i16, t: Duration) {
        let mut p = libc::pollfd {
            fd: self.s.as_raw_fd(),
            events,
            revents: 0,
        };
        let ms = t.as_millis().clamp(1, i32::MAX as u128) as i32;
        // SAFETY: one valid pollfd.
        unsafe { libc::poll(&mut p, 1, ms) };
    }

    fn read_some(&mut self, max: usize) -> io::Result<usize> {
        let n = max.min(self.buf.len());
        match self.s.read(&mut self.buf[..n]) {
            Ok(0) => Err(io::Error::new(io::ErrorKind::UnexpectedEof, "peer closed")),
            Ok(k) => Ok(k),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(0),
            Err(e) => Err(e),
        }
    }
}

impl RawChannel for RawTcp {
    fn send_msg(&mut self, mut data: &[u8]) -> io::Result<()> {
        while !data.is_empty() {
            match self.s.write(data) {
                Ok(n) => data = &data[n..],
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.poll(libc::POLLOUT, Duration::from_millis(10))
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    fn recv_bytes(&mut self, size: usize, idle: Duration) -> io::Result<(usize, bool)> {
        let mut got = std::mem::take(&mut self.carry);
        let mut last = Instant::now();
        loop {
            if got >= size && (size > 0 || got > 0) {
                self.carry = got - size;
                return Ok((size, true));
            }
            let n = self.read_some(size.saturating_sub(got).max(1))?;
            if n > 0 {
                got += n;
                last = Instant::now();
                continue;
            }
            let (policy, me) = (self.policy, &*self);
            if !pause(&policy, last, idle, |t| me.poll(libc::POLLIN, t)) {
                return Ok((got, got > 0));
            }
        }
    }

    fn recv_u64(&mut self, idle: Duration) -> io::Result<Option<u64>> {
        let mut b = [0u8; 8];
        let mut have = 0;
        let mut last = Instant::now();
        while have < 8 {
            match self.s.read(&mut b[have..]) {
                Ok(0) => return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "peer closed")),
                Ok(k) => {
                    have += k;
                    last = Instant::now();
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    let (policy, me) = (self.policy, &*self);
                    if !pause(&policy, last, idle, |t| me.poll(libc::POLLIN, t)) {
                        return Ok(None);
                    }
                }
                Err(e) => return Err(e),
            }
        }
        Ok(Some(u64::from_le_bytes(b)))
    }
}

/// How long a raw receiver waits for data before declaring it lost.
const LOST: Duration = Duration::from_secs(5);

/// Raw ping-pong: same shape as [`crate::kernels::pingpong`].
pub fn pingpong(
    r: &mut dyn RawChannel,
    role: Role,
    size: usize,
    warmup: usize,
    iters: usize,
) -> io::Result<Vec<f64>> {
    let msg = vec![0xA5u8; size];
    let mut out = Vec::with_capacity(iters);
    for i in 0..warmup + iters {
        match role {
            Role::Initiator => {
                let t0 = Instant::now();
                r.send_msg(&msg)?;
                let (got, any) = r.recv_bytes(size, LOST)?;
                let dt = t0.elapsed();
                if got < size || !any {
                    return Err(io::Error::other(format!(
                        "raw channel lost data of a {size}-byte ping-pong"
                    )));
                }
                if i >= warmup {
                    out.push(dt.as_secs_f64() / 2.0);
                }
            }
            Role::Responder => {
                r.recv_bytes(size, LOST)?;
                r.send_msg(&msg)?;
            }
        }
    }
    Ok(out)
}

/// Raw streaming: same shape as [`crate::kernels::stream`]. The responder counts what
/// arrives until the whole window is in or nothing comes for `idle`, then answers with
/// the byte count; datagram losses show up as missing bytes.
pub fn stream(
    r: &mut dyn RawChannel,
    role: Role,
    size: usize,
    window: usize,
    warmup: usize,
    reps: usize,
    idle: Duration,
) -> io::Result<Vec<StreamSample>> {
    let msg = vec![0x5Au8; size];
    let mut out = Vec::with_capacity(reps);
    for i in 0..warmup + reps {
        match role {
            Role::Initiator => {
                let t0 = Instant::now();
                for _ in 0..window {
                    r.send_msg(&msg)?;
                }
                let ack = r
                    .recv_u64(LOST)?
                    .ok_or_else(|| io::Error::other("raw channel lost a stream acknowledgement"))?;
                if i >= warmup {
                    out.push(StreamSample {
                        bytes: ack,
                        seconds: t0.elapsed().as_secs_f64(),
                    });
                }
            }
            Role::Responder => {
                let (got, _) = r.recv_bytes(size * window, idle)?;
                r.send_msg(&(got as u64).to_le_bytes())?;
            }
        }
    }
    Ok(out)
}
