//! Batches of datagrams, so that links can move many per system call.

/// One outgoing datagram, gathered from a header and a body so that payloads are sent
/// straight from the message they belong to (no copy into a packet buffer).
#[derive(Clone, Copy, Debug)]
pub struct Tx<'a> {
    pub dst: crate::Rank,
    pub head: &'a [u8],
    pub body: &'a [u8],
}

impl Tx<'_> {
    /// Total datagram length.
    #[inline]
    pub fn len(&self) -> usize {
        self.head.len() + self.body.len()
    }

    /// True for an empty datagram.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The datagram as one contiguous buffer (for links that must copy anyway).
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.len());
        v.extend_from_slice(self.head);
        v.extend_from_slice(self.body);
        v
    }
}

/// Receive buffers: `slots` buffers of `slot_size` bytes in one allocation, and the
/// datagrams found in them. A slot may hold several datagrams when the link coalesces
/// (UDP GRO), so datagrams are kept as (start, len) ranges into the storage.
pub struct RxBatch {
    storage: Vec<u8>,
    slot_size: usize,
    slots: usize,
    dgrams: Vec<(usize, usize)>,
}

/// Most bytes of receive slots worth filling in one call ([`RxBatch::cache_sized`]). What
/// the kernel writes into a batch is read again at once (decoded, copied into messages),
/// and that is fast only while the batch is still in the core's cache: over loopback,
/// 1 MiB streaming ran at 3.7 GB/s with 32 slots of 64 KiB (2 MiB, this machine's L2 per
/// core) and at 5.9 GB/s with 4 (docs/performance.md).
pub const RX_BATCH_BYTES: usize = 256 << 10;

impl RxBatch {
    /// Up to `slots` buffers of `slot_size` bytes, fewer where they would exceed
    /// [`RX_BATCH_BYTES`], but at least two.
    pub fn cache_sized(slots: usize, slot_size: usize) -> RxBatch {
        RxBatch::new(
            slots.min(RX_BATCH_BYTES / slot_size.max(1)).max(2),
            slot_size,
        )
    }

    /// A batch of `slots` buffers of `slot_size` bytes each.
    pub fn new(slots: usize, slot_size: usize) -> RxBatch {
        assert!(slots > 0 && slot_size > 0);
        RxBatch {
            storage: vec![0; slots * slot_size],
            slot_size,
            slots,
            dgrams: Vec::with_capacity(slots),
        }
    }

    /// Number of slots.
    pub fn slots(&self) -> usize {
        self.slots
    }

    /// Size of each slot.
    pub fn slot_size(&self) -> usize {
        self.slot_size
    }

    /// Forgets all datagrams.
    pub fn clear(&mut self) {
        self.dgrams.clear();
    }

    /// Number of datagrams held.
    pub fn len(&self) -> usize {
        self.dgrams.len()
    }

    /// True when no datagram is held.
    pub fn is_empty(&self) -> bool {
        self.dgrams.is_empty()
    }

    /// Datagram `i`.
    #[inline]
    pub fn get(&self, i: usize) -> &[u8] {
        let (s, l) = self.dgrams[i];
        &self.storage[s..s + l]
    }

    /// Datagram `i`, mutable (fault injection corrupts in place).
    #[inline]
    pub fn get_mut(&mut self, i: usize) -> &mut [u8] {
        let (s, l) = self.dgrams[i];
        &mut self.storage[s..s + l]
    }

    /// Iterates over the datagrams.
    pub fn iter(&self) -> impl Iterator<Item = &[u8]> + '_ {
        self.dgrams.iter().map(|&(s, l)| &self.storage[s..s + l])
    }

    /// The whole storage and the slot size, for links that fill several slots in one
    /// system call (`recvmmsg`). Record what arrived with [`RxBatch::push_range`].
    pub fn storage_mut(&mut self) -> &mut [u8] {
        &mut self.storage
    }

    /// Slot `i` for a link to receive into; record what arrived with
    /// [`RxBatch::push_range`] or [`RxBatch::push_slot`].
    pub fn slot_mut(&mut self, i: usize) -> &mut [u8] {
        let s = i * self.slot_size;
        &mut self.storage[s..s + self.slot_size]
    }

    /// Records a datagram of `len` bytes at the start of slot `slot`.
    pub fn push_slot(&mut self, slot: usize, len: usize) {
        self.push_range(slot * self.slot_size, len);
    }

    /// Records a datagram at `start..start + len` of the storage.
    pub fn push_range(&mut self, start: usize, len: usize) {
        assert!(start + len <= self.storage.len());
        self.dgrams.push((start, len));
    }

    /// Removes datagram `i` (order of the rest is kept).
    pub fn remove(&mut self, i: usize) {
        self.dgrams.remove(i);
    }

    /// Swaps datagrams `i` and `j` (fault injection reorders).
    pub fn swap(&mut self, i: usize, j: usize) {
        self.dgrams.swap(i, j);
    }

    /// Copies `data` into the next free slot and records it; false when the batch is full
    /// or the datagram is larger than a slot.
    pub fn push_copy(&mut self, data: &[u8]) -> bool {
        let slot = self.dgrams.len();
        if slot >= self.slots || data.len() > self.slot_size {
            return false;
        }
        let s = slot * self.slot_size;
        self.storage[s..s + data.len()].copy_from_slice(data);
        self.dgrams.push((s, data.len()));
        true
    }

    /// Whether another datagram fits with [`RxBatch::push_copy`].
    pub fn is_full(&self) -> bool {
        self.dgrams.len() >= self.slots
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn push_and_read() {
        let mut b = RxBatch::new(2, 8);
        assert!(b.push_copy(b"abc"));
        assert!(b.push_copy(b"defgh"));
        assert!(!b.push_copy(b"x"));
        assert_eq!(b.get(0), b"abc");
        assert_eq!(
            b.iter().collect::<Vec<_>>(),
            vec![&b"abc"[..], &b"defgh"[..]]
        );
        b.swap(0, 1);
        assert_eq!(b.get(0), b"defgh");
        b.clear();
        assert!(b.is_empty());
        let big = [0u8; 9];
        assert!(!b.push_copy(&big));
    }
}
