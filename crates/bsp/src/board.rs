//! The sync board: `bsp_sync`'s barrier and its exchange of counts in shared memory, for a
//! computation whose processes all share one host over shared memory (as MulticoreBSP
//! synchronises its threads), with the superstep's small messages carried in it too.
//!
//! Over the transport, a superstep at p = 2 costs a message each way (the dissemination
//! barrier of [`crate::core`]): an encoded header, a copy into the link's ring, a doorbell,
//! a decode and a copy out. On one host the same facts fit in a few cache lines: each
//! process writes its row of the communication matrix into its own part of a segment,
//! raises its arrival count, and waits until every other count has reached the superstep;
//! the barrier is then passed and every row is readable.
//!
//! # Layout (per process `i`, a part of `stride` bytes)
//!
//! ```text
//! +0          asleep: i sleeps on this word (a futex), wake it        (set by i, cleared by
//!             whoever wakes it)
//! +LINE       half 0, then half 1 (superstep parity), each:
//!               the barrier this half was posted for, flags, then the row: two words
//!               per destination (transport bytes | gets << 63, message offset |
//!               length << 32 | gets << 63), rounded up to LINE;
//!               then the message area
//! ```
//!
//! The arrival count sits in the same cache line as the flags and, up to p = 7, the whole
//! row: at p = 2 the one line a waiter spins on brings all it needs to read once the
//! barrier is passed.
//!
//! # Why two halves are enough
//!
//! Process `i` writes half `s mod 2` in superstep `s` and reads everyone's half `s mod 2`
//! after barrier `s`. It next writes that half in superstep `s + 2`, which it reaches only
//! past barrier `s + 1`, which no process passes before every process has arrived there,
//! that is, has finished reading half `s mod 2`.
//!
//! # Trust
//!
//! Offsets and lengths read from a peer's row are checked against the area before any
//! copy; a lying peer can make us read its own garbage, never memory outside its part.

use std::io;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use bulkwire_link::segment::{HostGroup, LINE, Rendezvous, Segment};

/// Largest computation the board serves: its rows grow with p squared.
pub const MAX_PROCS: usize = 256;

/// Bytes of small messages each process may post per superstep.
pub const AREA: usize = 64 << 10;

const SEGMENT_NAME: &str = "bsp-board";
const OFF_ASLEEP: usize = 0;
const OFF_HALVES: usize = LINE;
/// Words before a half's row: the barrier it was posted for, and the flags.
const ROW: usize = 16;
/// Flag word of a half: this process's superstep needs the messages' barrier.
const COMPLEX: u64 = 1;
const GETS: u64 = 1 << 63;

/// One process's view of the board. See the module documentation.
pub struct Board {
    seg: Segment,
    p: usize,
    me: usize,
    stride: usize,
    /// Bytes of a half's flags and row, rounded to `LINE`.
    head: usize,
    /// Supersteps this process has arrived at.
    epoch: u64,
    /// Bytes of the message area used this superstep.
    used: usize,
}

impl std::fmt::Debug for Board {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Board")
            .field("p", &self.p)
            .field("me", &self.me)
            .field("epoch", &self.epoch)
            .finish()
    }
}

/// What a peer posted for this process in the superstep just passed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Entry {
    /// Bytes it sends over the transport, and whether they hold get requests.
    pub net: u64,
    pub net_gets: bool,
    /// Its message in the board (offset in its area, length), and whether it holds gets.
    pub msg: Option<(usize, usize)>,
    pub msg_gets: bool,
}

impl Board {
    /// Creates the board of the `p` processes of `group` (the whole job, on this host).
    /// Collective over the job, like [`Segment::create`].
    pub fn create(group: &HostGroup, rv: &mut dyn Rendezvous) -> io::Result<Board> {
        let p = group.len();
        if group.nprocs as usize != p || !(2..=MAX_PROCS).contains(&p) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("the sync board needs every process on one host, 2 to {MAX_PROCS} of them"),
            ));
        }
        let head = (ROW + 16 * p).next_multiple_of(LINE);
        let stride = OFF_HALVES + 2 * (head + AREA);
        let (seg, _) = Segment::create(group, SEGMENT_NAME, stride * p, &[], rv)?;
        Ok(Board {
            seg,
            p,
            me: group.me,
            stride,
            head,
            epoch: 0,
            used: 0,
        })
    }

    pub fn nprocs(&self) -> usize {
        self.p
    }

    /// This process's index (its pid).
    pub fn me(&self) -> usize {
        self.me
    }

    /// Bytes the message area can still take this superstep.
    pub fn room(&self) -> usize {
        AREA - self.used
    }

    /// Start of process `part`'s half for the barrier that follows `epoch` arrivals.
    fn half(&self, part: usize, epoch: u64) -> usize {
        part * self.stride + OFF_HALVES + (epoch % 2) as usize * (self.head + AREA)
    }

    fn half_word(&self, part: usize, epoch: u64, k: usize) -> &AtomicU64 {
        self.seg
            .u64_at(self.half(part, epoch) + 8 * k)
            .expect("half words lie inside the segment")
    }

    fn row_word(&self, part: usize, epoch: u64, dst: usize, k: usize) -> &AtomicU64 {
        let off = self.half(part, epoch) + ROW + 16 * dst + 8 * k;
        self.seg
            .u64_at(off)
            .expect("row words lie inside the segment")
    }

    /// Starts posting this superstep's row: everything empty, no message.
    pub fn begin(&mut self) {
        self.used = 0;
        for d in 0..self.p {
            for k in 0..2 {
                self.row_word(self.me, self.epoch, d, k)
                    .store(0, Ordering::Relaxed);
            }
        }
    }

    /// Posts `msg` for `dst` in the message area if it fits; false if it does not.
    pub fn post_message(&mut self, dst: usize, msg: &[u8], gets: bool) -> bool {
        if msg.len() > AREA - self.used || dst >= self.p {
            return false;
        }
        let at = self.used;
        let base = self.half(self.me, self.epoch) + self.head + at;
        // SAFETY: `base .. base + len` lies in this process's own area of the current
        // half (checked above against AREA), which no other process writes and none reads
        // before our arrival is published (module documentation).
        unsafe {
            std::ptr::copy_nonoverlapping(msg.as_ptr(), self.seg.data().add(base), msg.len())
        };
        self.used += msg.len();
        let w = at as u64 | (msg.len() as u64) << 32 | if gets { GETS } else { 0 };
        self.row_word(self.me, self.epoch, dst, 1)
            .store(w, Ordering::Relaxed);
        true
    }

    /// Posts the bytes this process sends `dst` over the transport this superstep.
    pub fn post_net(&mut self, dst: usize, bytes: u64, gets: bool) {
        let w = bytes & !GETS | if gets { GETS } else { 0 };
        self.row_word(self.me, self.epoch, dst, 0)
            .store(w, Ordering::Relaxed);
    }

    /// Publishes the row and arrives at the barrier; `complex` asks every process to
    /// run the barrier over messages as well (registrations, tag sizes, `bsp_end`).
    /// Wakes the processes asleep at the barrier.
    pub fn arrive(&mut self, complex: bool) {
        self.half_word(self.me, self.epoch, 1)
            .store(if complex { COMPLEX } else { 0 }, Ordering::Relaxed);
        // SeqCst, with the sleeper's SeqCst store of `asleep` and load of our arrival: one
        // of the two sees the other, so no sleeper misses its wake.
        self.half_word(self.me, self.epoch, 0)
            .store(self.epoch + 1, Ordering::SeqCst);
        self.epoch += 1;
        for j in (0..self.p).filter(|&j| j != self.me) {
            let w = self.asleep(j);
            // Cleared before the wake: a sleeper that has not entered the kernel yet then
            // finds the word changed and returns at once.
            if w.load(Ordering::SeqCst) != 0 && w.swap(0, Ordering::SeqCst) != 0 {
                futex_wake(w);
            }
        }
    }

    fn asleep(&self, part: usize) -> &AtomicU32 {
        self.seg
            .u32_at(part * self.stride + OFF_ASLEEP)
            .expect("the asleep word lies inside the segment")
    }

    /// The lowest process from `from` on that has not reached the barrier this process
    /// arrived at last, if any (those below `from` are known to have).
    pub fn missing_from(&self, from: usize) -> Option<usize> {
        let e = self.epoch - 1;
        (from..self.p).find(|&j| self.half_word(j, e, 0).load(Ordering::Acquire) < self.epoch)
    }

    /// Says this process is about to sleep (true; then check [`Board::missing_from`]
    /// once more before [`Board::sleep`]) or no longer sleeps.
    pub fn set_asleep(&self, asleep: bool) {
        self.asleep(self.me)
            .store(u32::from(asleep), Ordering::SeqCst);
    }

    /// Sleeps at most `timeout`, or until a process that arrives wakes this one (or has
    /// already: the word was cleared).
    pub fn sleep(&self, timeout: Duration) {
        let w = self.asleep(self.me);
        let ts = libc::timespec {
            tv_sec: timeout.as_secs() as libc::time_t,
            tv_nsec: timeout.subsec_nanos() as libc::c_long,
        };
        // SAFETY: FUTEX_WAIT on a 4-byte aligned word of a shared mapping that lives as
        // long as `self`, with a valid timespec; it only reads the word. Not the private
        // variant: the wakers are other processes.
        unsafe {
            libc::syscall(
                libc::SYS_futex,
                w.as_ptr(),
                libc::FUTEX_WAIT,
                1u32,
                &ts as *const libc::timespec,
                std::ptr::null::<u32>(),
                0u32,
            )
        };
    }

    /// Past the barrier: whether any process asked for the barrier over messages.
    pub fn any_complex(&self) -> bool {
        let e = self.epoch - 1;
        (0..self.p).any(|j| self.half_word(j, e, 1).load(Ordering::Relaxed) & COMPLEX != 0)
    }

    /// Past the barrier: what `src` posted for this process.
    pub fn entry(&self, src: usize) -> Entry {
        let e = self.epoch - 1;
        let w0 = self.row_word(src, e, self.me, 0).load(Ordering::Relaxed);
        let w1 = self.row_word(src, e, self.me, 1).load(Ordering::Relaxed);
        let (at, len) = ((w1 & 0xffff_ffff) as usize, ((w1 & !GETS) >> 32) as usize);
        Entry {
            net: w0 & !GETS,
            net_gets: w0 & GETS != 0,
            msg: (len > 0).then_some((at, len)),
            msg_gets: w1 & GETS != 0,
        }
    }

    /// Past the barrier: a copy of the message `src` posted at `(at, len)` of its area,
    /// or None if that lies outside the area.
    #[cfg(test)]
    fn read_message(&self, src: usize, at: (usize, usize)) -> Option<Vec<u8>> {
        let mut v = Vec::new();
        self.read_message_into(src, at, &mut v).then_some(v)
    }

    /// [`Board::read_message`] into `v` (its memory reused); false if outside the area.
    pub fn read_message_into(
        &self,
        src: usize,
        (at, len): (usize, usize),
        v: &mut Vec<u8>,
    ) -> bool {
        if src >= self.p || at.checked_add(len).is_none_or(|end| end > AREA) {
            return false;
        }
        let base = self.half(src, self.epoch - 1) + self.head + at;
        v.clear();
        v.reserve(len);
        // SAFETY: in `src`'s area of the half just passed (checked above), which `src`
        // does not write again before this process arrives at the next barrier; `v` has
        // room for `len` bytes.
        unsafe {
            std::ptr::copy_nonoverlapping(self.seg.data().add(base), v.as_mut_ptr(), len);
            v.set_len(len);
        }
        true
    }
}

/// Wakes one process sleeping on `w` (see [`Board::sleep`]).
fn futex_wake(w: &AtomicU32) {
    // SAFETY: FUTEX_WAKE on a 4-byte aligned word of a shared mapping; it touches no
    // memory.
    unsafe { libc::syscall(libc::SYS_futex, w.as_ptr(), libc::FUTEX_WAKE, 1u32) };
}

#[cfg(test)]
mod tests {
    use super::*;
    use bulkwire_link::segment::thread_rendezvous;

    fn boards(p: usize) -> Vec<Board> {
        let local = vec![true; p];
        let hs: Vec<_> = thread_rendezvous(p)
            .into_iter()
            .enumerate()
            .map(|(r, mut rv)| {
                let g = HostGroup::new(r as u32, &local).unwrap();
                std::thread::spawn(move || Board::create(&g, &mut rv).unwrap())
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    }

    #[test]
    fn rows_and_messages_cross_the_barrier_and_halves_alternate() {
        let p = 3;
        let hs: Vec<_> = boards(p)
            .into_iter()
            .map(|mut b| {
                std::thread::spawn(move || {
                    let me = b.me;
                    for step in 0..200u64 {
                        b.begin();
                        for d in (0..p).filter(|&d| d != me) {
                            let msg: Vec<u8> = (0..(step as usize % 7) * (d + 1))
                                .map(|i| (i as u64 ^ step ^ me as u64) as u8)
                                .collect();
                            if !msg.is_empty() {
                                assert!(b.post_message(d, &msg, step % 2 == 0));
                            }
                            b.post_net(d, step * 10 + me as u64, d == 0);
                        }
                        b.arrive(step % 5 == me as u64);
                        while b.missing_from(0).is_some() {
                            std::hint::spin_loop();
                        }
                        assert_eq!(b.any_complex(), (0..p as u64).any(|j| step % 5 == j));
                        for s in (0..p).filter(|&s| s != me) {
                            let e = b.entry(s);
                            assert_eq!(e.net, step * 10 + s as u64);
                            assert_eq!(e.net_gets, me == 0);
                            let want: Vec<u8> = (0..(step as usize % 7) * (me + 1))
                                .map(|i| (i as u64 ^ step ^ s as u64) as u8)
                                .collect();
                            match e.msg {
                                None => assert!(want.is_empty()),
                                Some(m) => {
                                    assert_eq!(b.read_message(s, m).unwrap(), want);
                                    assert_eq!(e.msg_gets, step % 2 == 0);
                                }
                            }
                        }
                    }
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
    }

    #[test]
    fn a_message_that_does_not_fit_is_refused_and_a_bad_entry_is_not_read() {
        let mut bs = boards(2);
        let b = &mut bs[0];
        b.begin();
        assert!(b.post_message(1, &vec![1u8; AREA - 10], false));
        assert!(!b.post_message(1, &[0u8; 11], false));
        assert!(b.post_message(1, &[0u8; 10], false));
        b.epoch = 1;
        assert_eq!(b.read_message(1, (AREA - 4, 8)), None);
        assert_eq!(b.read_message(1, (usize::MAX, 2)), None);
        assert_eq!(b.read_message(5, (0, 2)), None);
    }
}
