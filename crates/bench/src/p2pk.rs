//! Kernels over the point-to-point library (`bulkwire_p2p::Comm`), the layer users call:
//! ping-pong, OSU streaming with pre-posted receives, and Riesen & Maccabe's overlap benchmark
//! (pre-post a receive, compute, then wait: how long the wait takes).

use std::time::{Duration, Instant};

use bulkwire_p2p::{Comm, Error};

use crate::kernels::{Role, StreamSample};

const TAG: i32 = 7;
const ACK: i32 = 8;
const GO: i32 = 9;

/// Ping-pong half round trips, seconds.
pub fn pingpong(
    c: &Comm,
    role: Role,
    peer: u32,
    size: usize,
    warmup: usize,
    iters: usize,
) -> Result<Vec<f64>, Error> {
    let mut buf = vec![0xA5u8; size];
    let mut out = Vec::with_capacity(iters);
    for i in 0..warmup + iters {
        match role {
            Role::Initiator => {
                let t0 = Instant::now();
                c.send(peer, TAG, &buf)?;
                c.recv(peer, TAG, &mut buf)?;
                if i >= warmup {
                    out.push(t0.elapsed().as_secs_f64() / 2.0);
                }
            }
            Role::Responder => {
                c.recv(peer, TAG, &mut buf)?;
                c.send(peer, TAG, &buf)?;
            }
        }
    }
    Ok(out)
}

/// OSU streaming: the receiver pre-posts a window of receives into buffers it keeps, the
/// sender starts a window of sends of one buffer, then a one-byte acknowledgement.
#[allow(clippy::too_many_arguments)]
pub fn stream(
    c: &Comm,
    role: Role,
    peer: u32,
    size: usize,
    window: usize,
    warmup: usize,
    reps: usize,
) -> Result<Vec<StreamSample>, Error> {
    let data = bytes::Bytes::from(vec![0x5Au8; size]);
    let mut bufs: Vec<Vec<u8>> = match role {
        Role::Responder => (0..window).map(|_| vec![0u8; size]).collect(),
        Role::Initiator => Vec::new(),
    };
    let mut ack = [0u8; 1];
    let mut out = Vec::with_capacity(reps);
    for i in 0..warmup + reps {
        match role {
            Role::Initiator => {
                let t0 = Instant::now();
                let mut reqs = (0..window)
                    .map(|_| c.isend(peer, TAG, data.clone()))
                    .collect::<Result<Vec<_>, _>>()?;
                c.wait_all(&mut reqs)?;
                c.recv(peer, ACK, &mut ack)?;
                if i >= warmup {
                    out.push(StreamSample {
                        bytes: (size * window) as u64,
                        seconds: t0.elapsed().as_secs_f64(),
                    });
                }
            }
            Role::Responder => {
                let mut reqs = bufs
                    .drain(..)
                    .map(|b| c.irecv_into(peer, TAG, b))
                    .collect::<Result<Vec<_>, _>>()?;
                c.wait_all(&mut reqs)?;
                bufs = reqs.iter_mut().filter_map(|r| r.take_data()).collect();
                // A message shorter than its buffer comes back cut; restore the length.
                for b in &mut bufs {
                    b.resize(size, 0);
                }
                c.send(peer, ACK, &ack)?;
            }
        }
    }
    Ok(out)
}

/// Riesen & Maccabe's overlap benchmark: the initiator pre-posts a receive of `size` bytes, tells
/// the responder to send, computes for `compute`, then waits. Returns the waits, seconds.
pub fn overlap(
    c: &Comm,
    role: Role,
    peer: u32,
    size: usize,
    compute: Duration,
    reps: usize,
) -> Result<Vec<f64>, Error> {
    let mut out = Vec::with_capacity(reps);
    let mut buf = vec![0u8; size];
    let mut go = [0u8; 1];
    for _ in 0..reps {
        match role {
            Role::Initiator => {
                let mut r = c.irecv_into(peer, TAG, std::mem::take(&mut buf))?;
                c.send(peer, GO, &go)?;
                let t0 = Instant::now();
                let mut x = 0u64;
                while t0.elapsed() < compute {
                    // Work that touches no library state.
                    x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
                }
                let t1 = Instant::now();
                r.wait()?;
                out.push(t1.elapsed().as_secs_f64());
                buf = r.take_data().unwrap_or_default();
                buf.resize(size, 0);
            }
            Role::Responder => {
                c.recv(peer, GO, &mut go)?;
                c.send(peer, TAG, &buf)?;
            }
        }
    }
    Ok(out)
}
