//! The raw baselines, measured by the same harness as the protocols: messages cut into
//! datagrams of the link's largest size and sent with no header, no acknowledgement and
//! no recovery. The receiver counts bytes. Waiting follows the engine's policy (spin for a
//! budget, then block), so a difference in the tables is the protocol's cost and nothing
//! else.

use std::io;
use std::time::{Duration, Instant};

use bulkwire_engine::WaitPolicy;
use bulkwire_link::{Link, Rank, RxBatch, Tx};

use crate::kernels::{Role, StreamSample};

/// A link used bare, with the engine's wait policy.
pub struct Raw<L: Link> {
    link: L,
    rx: RxBatch,
    policy: WaitPolicy,
    /// Bytes received but not yet counted toward a message.
    carry: usize,
}

impl<L: Link> Raw<L> {
    pub fn new(link: L, policy: WaitPolicy) -> Raw<L> {
        let rx = RxBatch::new(64, link.recv_slot_size().max(1));
        Raw {
            link,
            rx,
            policy,
            carry: 0,
        }
    }

    /// Sends `size` bytes to `peer` as datagrams of the largest size, retrying while the
    /// socket is full.
    fn send_msg(&mut self, peer: Rank, data: &[u8]) -> io::Result<()> {
        let max = self.link.max_datagram(peer).max(1);
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
                    dst: peer,
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

    /// Receives until `size` bytes and at least one datagram have arrived, or nothing
    /// arrives for `idle`. Returns the bytes counted (at most `size`; the rest is kept for
    /// the next call) and whether anything arrived at all.
    fn recv_bytes(&mut self, size: usize, idle: Duration) -> io::Result<(usize, bool)> {
        let mut got = std::mem::take(&mut self.carry);
        let mut any = got > 0;
        let spin = self.policy.spin;
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
                last = Instant::now();
                continue;
            }
            let quiet = last.elapsed();
            if quiet >= idle {
                return Ok((got, any));
            }
            if quiet < spin {
                if self.policy.yield_cpu {
                    std::thread::yield_now();
                } else {
                    std::hint::spin_loop();
                }
            } else {
                self.link.wait(Some(idle - quiet))?;
            }
        }
    }
}

/// How long a raw receiver waits for a datagram before declaring it lost.
const LOST: Duration = Duration::from_secs(5);

/// Raw ping-pong: same shape as [`crate::kernels::pingpong`].
pub fn pingpong<L: Link>(
    r: &mut Raw<L>,
    role: Role,
    peer: Rank,
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
                r.send_msg(peer, &msg)?;
                let (got, any) = r.recv_bytes(size, LOST)?;
                let dt = t0.elapsed();
                if got < size || !any {
                    return Err(io::Error::other(format!(
                        "raw UDP lost a datagram of a {size}-byte ping-pong"
                    )));
                }
                if i >= warmup {
                    out.push(dt.as_secs_f64() / 2.0);
                }
            }
            Role::Responder => {
                r.recv_bytes(size, LOST)?;
                r.send_msg(peer, &msg)?;
            }
        }
    }
    Ok(out)
}

/// Raw streaming: same shape as [`crate::kernels::stream`]. The responder counts what
/// arrives until the whole window is in or nothing comes for `idle`, then answers with
/// the byte count in an 8-byte datagram; losses show up as missing bytes.
#[allow(clippy::too_many_arguments)]
pub fn stream<L: Link>(
    r: &mut Raw<L>,
    role: Role,
    peer: Rank,
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
                    r.send_msg(peer, &msg)?;
                }
                r.carry = 0;
                // The acknowledgement is one 8-byte datagram carrying the count.
                let (_, any) = r.recv_bytes(8, LOST)?;
                if !any || r.rx.is_empty() {
                    return Err(io::Error::other("raw UDP lost a stream acknowledgement"));
                }
                r.carry = 0;
                let ack =
                    r.rx.get(r.rx.len() - 1)
                        .get(..8)
                        .map_or(0, |b| u64::from_le_bytes(b.try_into().unwrap()));
                let dt = t0.elapsed();
                if i >= warmup {
                    out.push(StreamSample {
                        bytes: ack,
                        seconds: dt.as_secs_f64(),
                    });
                }
            }
            Role::Responder => {
                let (got, _) = r.recv_bytes(size * window, idle)?;
                r.carry = 0;
                r.send_msg(peer, &(got as u64).to_le_bytes())?;
            }
        }
    }
    Ok(out)
}
