//! The two measurement kernels of every latency and bandwidth table, over any
//! [`Transport`]: ping-pong (half round trip per iteration) and OSU-style streaming (a
//! window of messages, then one short acknowledgement). Both sides of a pair call the
//! same function with their role.

use std::time::Duration;

use bulkwire_engine::{Error, Event, PeerDead, Transport};
use bulkwire_link::Rank;
use bytes::Bytes;

/// Which side of a pair this process plays.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Starts each exchange and takes the measurements.
    Initiator,
    /// Answers.
    Responder,
}

/// How long one message may take before a kernel gives up.
pub const TIMEOUT: Duration = Duration::from_secs(30);

/// Waits for the next message from `from`. An rmpp announcement is accepted at once (a
/// kernel always has its receive posted); other events are skipped; a death of `from` is
/// an error. With `idle`, gives up (returning `None`) after that long with
/// nothing arriving: lossy transports (utopia) may never deliver.
pub fn recv_msg<T: Transport>(
    t: &mut T,
    from: Rank,
    idle: Option<Duration>,
) -> Result<Option<Vec<u8>>, Error> {
    t.expect(from, true);
    let r = t.wait_for(Some(idle.unwrap_or(TIMEOUT)), |t| {
        loop {
            match t.poll_event() {
                Some(Event::Message { from: f, data, .. }) if f == from => {
                    return Some(Ok(Some(data)));
                }
                Some(Event::PeerDead { peer, silent_for }) if peer == from => {
                    return Some(Err(Error::PeerDead(PeerDead { peer, silent_for })));
                }
                Some(Event::Announce { from: f, id, .. }) => t.accept(f, id),
                Some(_) => continue,
                None => return None,
            }
        }
    });
    t.expect(from, false);
    match r {
        Ok(x) => x,
        Err(Error::Timeout(_)) if idle.is_some() => Ok(None),
        Err(e) => Err(e),
    }
}

/// Ping-pong of `size`-byte messages with `peer`: `warmup` untimed exchanges, then
/// `iters` timed ones. The initiator returns each exchange's half round trip in seconds;
/// the responder returns nothing.
pub fn pingpong<T: Transport>(
    t: &mut T,
    role: Role,
    peer: Rank,
    size: usize,
    warmup: usize,
    iters: usize,
) -> Result<Vec<f64>, Error> {
    let msg = Bytes::from(vec![0xA5u8; size]);
    let mut out = Vec::with_capacity(iters);
    for i in 0..warmup + iters {
        match role {
            Role::Initiator => {
                let t0 = t.now();
                t.send(peer, msg.clone(), false)?;
                let got = recv_msg(t, peer, None)?.unwrap_or_default();
                let t1 = t.now();
                if got.len() != size {
                    return Err(Error::Io(std::io::Error::other(format!(
                        "ping-pong reply of {} bytes, expected {size}",
                        got.len()
                    ))));
                }
                if i >= warmup {
                    out.push((t1 - t0) as f64 / 2e9);
                }
            }
            Role::Responder => {
                recv_msg(t, peer, None)?;
                t.send(peer, msg.clone(), false)?;
            }
        }
    }
    Ok(out)
}

/// One streaming measurement: bytes the receiver got and the seconds it took.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StreamSample {
    pub bytes: u64,
    pub seconds: f64,
}

impl StreamSample {
    /// Delivered bandwidth, bytes per second.
    pub fn rate(&self) -> f64 {
        self.bytes as f64 / self.seconds
    }
}

/// OSU-style streaming bandwidth: per repetition, the initiator sends `window` messages
/// of `size` bytes back to back and waits for a short acknowledgement carrying the bytes
/// received. With `lossy`, the responder acknowledges after `idle` without arrivals
/// instead of waiting for every message (for protocols that do not recover losses).
#[allow(clippy::too_many_arguments)]
pub fn stream<T: Transport>(
    t: &mut T,
    role: Role,
    peer: Rank,
    size: usize,
    window: usize,
    warmup: usize,
    reps: usize,
    lossy: Option<Duration>,
) -> Result<Vec<StreamSample>, Error> {
    let msg = Bytes::from(vec![0x5Au8; size]);
    let mut out = Vec::with_capacity(reps);
    for i in 0..warmup + reps {
        match role {
            Role::Initiator => {
                let t0 = t.now();
                for _ in 0..window {
                    t.send(peer, msg.clone(), false)?;
                }
                let ack = recv_msg(t, peer, None)?.unwrap_or_default();
                let t1 = t.now();
                let bytes = ack
                    .get(..8)
                    .map_or(0, |b| u64::from_le_bytes(b.try_into().unwrap()));
                if i >= warmup {
                    out.push(StreamSample {
                        bytes,
                        seconds: (t1 - t0) as f64 / 1e9,
                    });
                }
            }
            Role::Responder => {
                let mut bytes = 0u64;
                for _ in 0..window {
                    match recv_msg(t, peer, lossy)? {
                        Some(m) => bytes += m.len() as u64,
                        None => break,
                    }
                }
                t.send(peer, Bytes::copy_from_slice(&bytes.to_le_bytes()), false)?;
            }
        }
    }
    if role == Role::Initiator {
        // Let the last acknowledgements settle so the next measurement starts clean.
        t.flush(Some(TIMEOUT))?;
    }
    Ok(out)
}
