//! What the collectives need from a communicator: its size, this process's rank in it, and
//! a channel of its own (the communicator's collective context, which no point-to-point
//! receive and no other communicator's collective can match).
//!
//! Each collective call takes the next 16-bit sequence number of its communicator as the
//! tag of all its messages; the transport keeps the messages between two processes in
//! order, so the messages of one call need no further tags, and non-blocking collectives
//! in flight at once (up to 65536 per communicator) never take each other's messages.

use std::os::raw::c_int;

pub use bulkwire_p2p::ReqId;

/// A communicator as the collectives see it. Ranks are the communicator's (0..size).
pub trait Net {
    fn rank(&self) -> u32;
    fn size(&self) -> u32;

    /// Starts sending `len` bytes at `ptr` to `to`, tagged `tag` in the collective context.
    ///
    /// # Safety
    /// `ptr` must be valid for reads of `len` bytes, unmodified until the request completes.
    unsafe fn isend(&self, to: u32, tag: u16, ptr: *const u8, len: usize) -> Result<ReqId, c_int>;

    /// Posts a receive of at most `cap` bytes from `from`, tagged `tag`.
    ///
    /// # Safety
    /// `ptr` must be valid for writes of `cap` bytes, untouched until the request completes.
    unsafe fn irecv(&self, from: u32, tag: u16, ptr: *mut u8, cap: usize) -> Result<ReqId, c_int>;

    /// `Some` with the bytes moved once the request has completed (the id is spent then);
    /// drives progress.
    fn test(&self, id: ReqId) -> Option<Result<usize, c_int>>;

    /// Waits for the request; the bytes moved.
    fn wait(&self, id: ReqId) -> Result<usize, c_int>;

    /// Waits for all of `ids`: the first error, once all have completed.
    fn wait_all(&self, ids: &[ReqId]) -> Result<(), c_int> {
        let mut res = Ok(());
        for &id in ids {
            if let Err(e) = self.wait(id)
                && res.is_ok()
            {
                res = Err(e);
            }
        }
        res
    }
}
