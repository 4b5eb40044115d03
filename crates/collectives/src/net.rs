//! Tagged exchanges over p2p for the point-to-point algorithms.
//!
//! Every collective call gets its own block of [`PHASES`] tags from the reserved range
//! (`bulkwire_p2p::envelope::coll_tag`), so its messages can never match those of another
//! call or of the user. Within a call, each algorithmic phase uses its own tag; within a
//! phase, messages of one pair are matched in the order both sides issue them (p2p's
//! non-overtaking rule).
//!
//! [`Net::run`] posts a set of sends and receives and returns only when every one of them
//! has completed, so borrowed buffers are safe. On the first failure it fails the job (so
//! every other process's waits end with an error naming the cause, instead of waiting
//! for messages this process will never send), then waits for the rest (which the job's
//! failure completes) before returning the first error.

use bulkwire_p2p::envelope::coll_tag;
use bulkwire_p2p::{Comm, Error as P2pError, ReqId};

use crate::Error;

/// Tags per collective call.
pub const PHASES: u32 = 64;

/// One operation of an exchange.
pub enum X<'b> {
    Send {
        to: u32,
        phase: u32,
        data: &'b [u8],
    },
    Recv {
        from: u32,
        phase: u32,
        buf: &'b mut [u8],
    },
}

/// The p2p side of one collective call.
pub struct Net<'a> {
    pub comm: &'a Comm,
    pub me: u32,
    pub p: u32,
    base: u32,
}

impl<'a> Net<'a> {
    /// The exchanges of collective call number `seq`.
    pub fn new(comm: &'a Comm, seq: u32) -> Net<'a> {
        Net {
            comm,
            me: comm.rank(),
            p: comm.size(),
            base: seq.wrapping_mul(PHASES),
        }
    }

    fn tag(&self, phase: u32) -> i32 {
        debug_assert!(phase < PHASES);
        coll_tag(self.base.wrapping_add(phase % PHASES))
    }

    /// Posts every operation (receives first, so data arriving meanwhile lands in place)
    /// and waits until all have completed. A receive must get exactly its buffer's length.
    pub fn run(&self, ops: &mut [X<'_>]) -> Result<(), Error> {
        let mut ids: Vec<Option<ReqId>> = Vec::with_capacity(ops.len());
        let mut want: Vec<Option<(u32, usize)>> = Vec::with_capacity(ops.len());
        let mut first: Option<Error> = None;
        // Receives, then sends.
        for pass in 0..2 {
            for op in ops.iter_mut() {
                let r = match (pass, op) {
                    (0, X::Recv { from, phase, buf }) => {
                        want.push(Some((*from, buf.len())));
                        // SAFETY: `buf` is borrowed mutably for this call, which returns
                        // only after the request has completed (below, also on errors).
                        unsafe {
                            self.comm.irecv_coll_raw(
                                *from,
                                self.tag(*phase),
                                buf.as_mut_ptr(),
                                buf.len(),
                            )
                        }
                    }
                    (1, X::Send { to, phase, data }) => {
                        want.push(None);
                        // SAFETY: `data` is borrowed for this call, which returns only after
                        // the request has completed.
                        unsafe {
                            self.comm.isend_coll_raw(
                                *to,
                                self.tag(*phase),
                                data.as_ptr(),
                                data.len(),
                            )
                        }
                    }
                    _ => continue,
                };
                match r {
                    Ok(id) => ids.push(Some(id)),
                    Err(e) => {
                        ids.push(None);
                        if first.is_none() {
                            first = Some(self.failed(e.into()));
                        }
                    }
                }
            }
            if first.is_some() {
                break;
            }
        }
        // Collect completions as they come: after a failure, the job's failure completes
        // what is left.
        while let Some((i, r)) = self.comm.wait_any_raw(&ids) {
            ids[i] = None;
            let e = match (r, want.get(i).copied().flatten()) {
                (Ok(st), Some((from, len))) if st.len != len => Error::Arg(format!(
                    "rank {from} sent {} bytes where {len} were expected: the processes \
                     passed different sizes to a collective",
                    st.len
                )),
                (Ok(_), _) => continue,
                (Err(P2pError::Truncated { peer, len, cap, .. }), _) => Error::Arg(format!(
                    "rank {peer} sent {len} bytes where {cap} were expected: the processes \
                     passed different sizes to a collective"
                )),
                (Err(e), _) => e.into(),
            };
            if first.is_none() {
                first = Some(self.failed(e));
            }
        }
        match first {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Fails the job because of `e` (unless the job's failure is what `e` is), so that
    /// no process waits for this one any longer; returns `e`.
    pub fn failed(&self, e: Error) -> Error {
        fail_job(self.comm, &e);
        e
    }

    pub fn send(&self, to: u32, phase: u32, data: &[u8]) -> Result<(), Error> {
        self.run(&mut [X::Send { to, phase, data }])
    }

    pub fn recv(&self, from: u32, phase: u32, buf: &mut [u8]) -> Result<(), Error> {
        self.run(&mut [X::Recv { from, phase, buf }])
    }

    /// Sends `data` to `to` while receiving `buf` from `from`.
    pub fn sendrecv(
        &self,
        to: u32,
        data: &[u8],
        from: u32,
        buf: &mut [u8],
        phase: u32,
    ) -> Result<(), Error> {
        self.run(&mut [X::Recv { from, phase, buf }, X::Send { to, phase, data }])
    }
}

/// Tells the launcher that a collective failed on this process, unless `e` is already the
/// job's failure.
pub fn fail_job(comm: &Comm, e: &Error) {
    if !matches!(e, Error::P2p(P2pError::JobFailed { .. })) {
        comm.fail_job(&format!("a collective failed: {e}"));
    }
}

/// A read-only and a mutable view of two disjoint ranges of `buf` (either may be empty).
pub fn split2(
    buf: &mut [u8],
    a: std::ops::Range<usize>,
    b: std::ops::Range<usize>,
) -> (&[u8], &mut [u8]) {
    if a.is_empty() {
        return (&[], &mut buf[b]);
    }
    if b.is_empty() {
        return (&buf[a], &mut []);
    }
    debug_assert!(a.end <= b.start || b.end <= a.start, "{a:?} {b:?}");
    if a.end <= b.start {
        let (x, y) = buf.split_at_mut(b.start);
        (&x[a], &mut y[..b.end - b.start])
    } else {
        let (x, y) = buf.split_at_mut(a.start);
        (&y[..a.end - a.start], &mut x[b])
    }
}
