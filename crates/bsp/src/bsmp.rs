//! The BSMP queue: messages sent to this process in the previous superstep. They stay in
//! the chunks they arrived in (no copy); the queue holds ranges into them. Everything is
//! dropped at the next sync, which is what keeps `bsp_hpmove`'s pointers valid until then.

use std::collections::VecDeque;
use std::ops::Range;

struct Msg {
    buf: usize,
    tag: Range<usize>,
    payload: Range<usize>,
}

#[derive(Default)]
pub struct Queue {
    bufs: Vec<Vec<u8>>,
    msgs: VecDeque<Msg>,
    bytes: u64,
}

impl Queue {
    /// Keeps `buf` for messages that live in it; returns its index for [`Queue::push`].
    pub fn hold(&mut self, buf: Vec<u8>) -> usize {
        self.bufs.push(buf);
        self.bufs.len() - 1
    }

    /// A buffer kept by [`Queue::hold`].
    pub fn buf(&self, at: usize) -> &[u8] {
        &self.bufs[at]
    }

    pub fn push(&mut self, buf: usize, tag: Range<usize>, payload: Range<usize>) {
        self.bytes += payload.len() as u64;
        self.msgs.push_back(Msg { buf, tag, payload });
    }

    /// Messages and payload bytes not yet moved.
    pub fn size(&self) -> (usize, u64) {
        (self.msgs.len(), self.bytes)
    }

    /// Tag and payload of the first message.
    pub fn first(&self) -> Option<(&[u8], &[u8])> {
        let m = self.msgs.front()?;
        let b = &self.bufs[m.buf];
        Some((&b[m.tag.clone()], &b[m.payload.clone()]))
    }

    /// Drops the first message (its bytes stay valid until the queue is replaced).
    pub fn pop(&mut self) {
        if let Some(m) = self.msgs.pop_front() {
            self.bytes -= m.payload.len() as u64;
        }
    }
}
