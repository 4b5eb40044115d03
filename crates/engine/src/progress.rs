//! Progress that does not depend on the user calling into the library.
//!
//! A user thread that computes for a long time still needs its process to acknowledge
//! data, answer liveness pings, match arriving messages to posted receives and serve
//! RMPP's clear-to-send (the RMPP paper's overlap benchmark). [`Shared`] holds the state of an
//! upper layer behind a mutex; a background thread takes it over when no user thread has
//! been inside the library for a while, and hands it back the moment one enters.
//!
//! The user's fast path pays one atomic increment besides the (uncontended) mutex: the
//! thread never polls the network while the user is active, and it wakes only every
//! `interval` to look.
//!
//! With the progress thread turned off the process must still answer for itself: a peer
//! that waits on it pings it and, hearing nothing for the dead-peer deadline, declares
//! it dead, even though it is only computing. So [`Shared`] then runs a keep-alive
//! thread instead, if the state asks for one ([`Service::keep_alive_interval`]): as
//! rarely as liveness allows (the engine's ping interval), and only while the user has
//! stayed away for a whole interval, it takes the state and makes one
//! [`Service::keep_alive`] step. That step drives the transport alone (receiving,
//! acknowledging, answering pings, retransmitting) and never the upper layer: nothing is
//! matched, delivered or written to the user's buffers; what arrives waits in the
//! transport until the user calls in.

use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, Mutex, MutexGuard, TryLockError};
use std::thread::JoinHandle;
use std::time::Duration;

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use crate::transport::{WaitHandle, Waker};

/// What a progress thread can drive.
pub trait Service: Send + 'static {
    /// Advances everything that can advance without waiting; true if anything moved.
    fn progress(&mut self) -> bool;
    /// Sleeps until input may be ready or `timeout` passes (the waker ends it early).
    fn block(&mut self, timeout: Duration);
    /// Whether communication is in flight (the thread then stays attentive).
    fn busy(&self) -> bool;
    /// How to sleep until input may be ready without holding the state (see
    /// [`crate::Transport::wait_handle`]). With it the thread sleeps unlocked, so a user
    /// who comes back takes the state at once instead of waking the thread and waiting for
    /// it to let go; without it the thread sleeps in [`Service::block`], holding the state.
    fn wait_handle(&mut self) -> Option<WaitHandle> {
        None
    }
    /// One step of the transport alone, for the keep-alive thread (see the module
    /// documentation): it must not touch the upper layer's state. Default: nothing.
    fn keep_alive(&mut self) {}
    /// How often [`Service::keep_alive`] must run for peers to hear from this process in
    /// time, when no progress thread runs (`None`: never needed, the default).
    fn keep_alive_interval(&self) -> Option<Duration> {
        None
    }
}

struct Inner<S> {
    state: Mutex<S>,
    /// Entries into the library by user threads. The progress thread takes over only when
    /// it has not moved for a whole interval, and gives the state back as soon as it moves.
    entries: AtomicU64,
    /// User threads that found the state held and wait for the lock. The thread never
    /// takes the state while one waits (its entry may predate the takeover, so the entry
    /// count alone would not tell), and gives it back as soon as one does.
    waiting: AtomicU64,
    stop: AtomicBool,
    /// Readable once `stop` is set: ends the thread's unlocked sleep.
    stop_fd: Option<OwnedFd>,
    waker: Waker,
    /// Times the thread took over (for tests and statistics).
    takeovers: AtomicU64,
    /// Steps of the keep-alive thread (for tests and statistics).
    keep_alives: AtomicU64,
}

impl<S> Inner<S> {
    fn lock(&self) -> MutexGuard<'_, S> {
        // A panic in user code while holding the state must not wedge the progress thread.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn try_lock(&self) -> Option<MutexGuard<'_, S>> {
        match self.state.try_lock() {
            Ok(g) => Some(g),
            Err(TryLockError::Poisoned(e)) => Some(e.into_inner()),
            Err(TryLockError::WouldBlock) => None,
        }
    }
}

/// The progress thread's interval unless configured otherwise.
pub const DEFAULT_INTERVAL: Duration = Duration::from_millis(2);

/// An upper layer's state, shared between user threads and an optional progress thread.
pub struct Shared<S: Service> {
    inner: Arc<Inner<S>>,
    thread: Option<JoinHandle<()>>,
}

/// A user thread's hold on the state (see [`Shared::lock`]).
pub struct Access<'a, S> {
    guard: MutexGuard<'a, S>,
}

impl<S> Deref for Access<'_, S> {
    type Target = S;
    fn deref(&self) -> &S {
        &self.guard
    }
}

impl<S> DerefMut for Access<'_, S> {
    fn deref_mut(&mut self) -> &mut S {
        &mut self.guard
    }
}

impl<S: Service> Shared<S> {
    /// Wraps `state`. With `interval`, a progress thread looks every `interval` whether the
    /// user has been away that long, and if so drives the state until the user returns.
    /// Without, a keep-alive thread keeps the transport answering peers if the state asks
    /// for one ([`Service::keep_alive_interval`]). `waker` must end a concurrent
    /// [`Service::block`].
    pub fn new(state: S, waker: Waker, interval: Option<Duration>) -> Shared<S> {
        let keep_alive = state.keep_alive_interval().filter(|k| !k.is_zero());
        let inner = Arc::new(Inner {
            state: Mutex::new(state),
            entries: AtomicU64::new(0),
            waiting: AtomicU64::new(0),
            stop: AtomicBool::new(false),
            stop_fd: eventfd(),
            waker,
            takeovers: AtomicU64::new(0),
            keep_alives: AtomicU64::new(0),
        });
        let spawn = |name: &str, f: fn(&Inner<S>, Duration), every: Duration| {
            let inner = inner.clone();
            std::thread::Builder::new()
                .name(name.into())
                .spawn(move || f(&inner, every))
                .expect("spawn the library's thread")
        };
        let thread = match interval.filter(|i| !i.is_zero()) {
            Some(i) => Some(spawn("bulkwire-progress", run, i)),
            None => keep_alive.map(|k| spawn("bulkwire-alive", keep_alive_loop, k)),
        };
        Shared { inner, thread }
    }

    /// Takes the state as a user call, until the returned guard is dropped.
    ///
    /// The fast path is one atomic increment (the user is active: the thread stays away)
    /// and an uncontended `try_lock`. Only when the state is held, by the progress thread
    /// or another user thread, possibly asleep in [`Service::block`], does the caller wake
    /// the holder (the waker's system call) and wait for the lock. A holder that sleeps
    /// must therefore be one that gives the state back when woken: the progress thread
    /// does, because the entry count has moved; a user thread that blocks while holding
    /// the state should drop its guard after each [`Service::block`].
    pub fn lock(&self) -> Access<'_, S> {
        let i = &*self.inner;
        i.entries.fetch_add(1, SeqCst);
        let guard = match i.try_lock() {
            Some(g) => g,
            None => {
                i.waiting.fetch_add(1, SeqCst);
                (i.waker)();
                let g = i.lock();
                i.waiting.fetch_sub(1, SeqCst);
                g
            }
        };
        Access { guard }
    }

    /// Whether another user thread waits for the state: a thread looping over
    /// [`Shared::lock`] should yield between rounds so that it gets in.
    pub fn contended(&self) -> bool {
        self.inner.waiting.load(SeqCst) > 0
    }

    /// Runs `f` on the state as a user call.
    pub fn with<R>(&self, f: impl FnOnce(&mut S) -> R) -> R {
        f(&mut self.lock())
    }

    /// How many times the progress thread has taken over.
    pub fn takeovers(&self) -> u64 {
        self.inner.takeovers.load(SeqCst)
    }

    /// How many keep-alive steps the keep-alive thread has made.
    pub fn keep_alives(&self) -> u64 {
        self.inner.keep_alives.load(SeqCst)
    }
}

impl<S: Service> Drop for Shared<S> {
    fn drop(&mut self) {
        self.inner.stop.store(true, SeqCst);
        (self.inner.waker)();
        if let Some(fd) = &self.inner.stop_fd {
            let one: u64 = 1;
            // SAFETY: writes 8 bytes from a valid u64 to our own eventfd.
            unsafe { libc::write(fd.as_raw_fd(), (&one as *const u64).cast(), 8) };
        }
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}

fn run<S: Service>(i: &Inner<S>, interval: Duration) {
    let mut seen = i.entries.load(SeqCst);
    loop {
        std::thread::park_timeout(interval);
        if i.stop.load(SeqCst) {
            return;
        }
        // The user entered during the last interval: it is active, stay away.
        let now = i.entries.load(SeqCst);
        if now != seen {
            seen = now;
            continue;
        }
        // Paired with the user's increment then `try_lock` (SeqCst): either we see the
        // increment and leave, or the user finds the state held, counts itself as waiting
        // and wakes us.
        let user_wants_in = || i.entries.load(SeqCst) != seen || i.waiting.load(SeqCst) > 0;
        // A user inside (a long wait) holds the state: it progresses by itself.
        let mut g = match i.try_lock() {
            Some(g) if !user_wants_in() => g,
            _ => continue,
        };
        i.takeovers.fetch_add(1, SeqCst);
        loop {
            if user_wants_in() || i.stop.load(SeqCst) {
                break;
            }
            if g.progress() {
                continue;
            }
            // Attentive while something is in flight, drowsy otherwise.
            let nap = if g.busy() {
                Duration::from_micros(500)
            } else {
                interval * 4
            };
            match g.wait_handle() {
                Some(h) => {
                    // Sleep without the state: a user coming back takes it at once.
                    drop(g);
                    sleep_on(
                        h.fd,
                        i.stop_fd.as_ref(),
                        h.timeout.map_or(nap, |t| t.min(nap)),
                    );
                    if user_wants_in() || i.stop.load(SeqCst) {
                        break;
                    }
                    match i.try_lock() {
                        Some(x) => g = x,
                        None => break,
                    }
                }
                // A user entering wakes us (the waker ends `block`).
                None => g.block(nap),
            }
        }
        seen = i.entries.load(SeqCst);
    }
}

/// The keep-alive thread (no progress thread): every `every`, if no user entered the
/// library meanwhile and nobody holds or waits for the state, one keep-alive step.
fn keep_alive_loop<S: Service>(i: &Inner<S>, every: Duration) {
    let mut seen = i.entries.load(SeqCst);
    loop {
        std::thread::park_timeout(every);
        if i.stop.load(SeqCst) {
            return;
        }
        let now = i.entries.load(SeqCst);
        if now != seen {
            seen = now;
            continue;
        }
        // A user inside holds the state and drives the transport itself.
        if i.waiting.load(SeqCst) > 0 {
            continue;
        }
        if let Some(mut g) = i.try_lock() {
            g.keep_alive();
            i.keep_alives.fetch_add(1, SeqCst);
        }
    }
}

fn eventfd() -> Option<OwnedFd> {
    // SAFETY: eventfd has no memory-safety preconditions; the result is checked.
    let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
    // SAFETY: a fresh descriptor we own.
    (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Sleeps until `fd` (or `stop`) is readable or `timeout` passes. Never drains anything:
/// the transport reads its input when the state is next driven.
fn sleep_on(fd: RawFd, stop: Option<&OwnedFd>, timeout: Duration) {
    let mut fds = [
        libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        },
        libc::pollfd {
            fd: stop.map_or(-1, |s| s.as_raw_fd()),
            events: libc::POLLIN,
            revents: 0,
        },
    ];
    // Not shorter than 20 us, so a timer already due cannot make this a busy loop. A
    // failed sleep is a spurious wake-up: the caller looks again.
    let _ = bulkwire_link::poll_fds(&mut fds, Some(timeout.max(Duration::from_micros(20))));
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Condvar;
    use std::sync::atomic::AtomicU32;
    use std::time::Instant;

    struct Counter {
        moved: Arc<AtomicU32>,
        work: u32,
    }

    impl Service for Counter {
        fn progress(&mut self) -> bool {
            if self.work > 0 {
                self.work -= 1;
                self.moved.fetch_add(1, SeqCst);
                true
            } else {
                false
            }
        }
        fn block(&mut self, timeout: Duration) {
            std::thread::sleep(timeout.min(Duration::from_millis(1)));
        }
        fn busy(&self) -> bool {
            self.work > 0
        }
    }

    #[test]
    fn thread_works_while_user_is_away_and_yields_to_user() {
        let moved = Arc::new(AtomicU32::new(0));
        let s = Shared::new(
            Counter {
                moved: moved.clone(),
                work: 0,
            },
            Arc::new(|| {}),
            Some(Duration::from_millis(1)),
        );
        s.with(|c| c.work = 1000);
        let t0 = Instant::now();
        while moved.load(SeqCst) < 1000 && t0.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(moved.load(SeqCst), 1000, "the thread did the work");
        assert!(s.takeovers() >= 1);
        // A user call gets the state back promptly even while the thread holds it.
        let t1 = Instant::now();
        s.with(|c| assert_eq!(c.work, 0));
        assert!(t1.elapsed() < Duration::from_secs(1));
    }

    #[test]
    fn no_thread_means_no_progress() {
        let moved = Arc::new(AtomicU32::new(0));
        let s = Shared::new(
            Counter {
                moved: moved.clone(),
                work: 5,
            },
            Arc::new(|| {}),
            None,
        );
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(moved.load(SeqCst), 0);
        s.with(|c| while c.progress() {});
        assert_eq!(moved.load(SeqCst), 5);
    }

    /// Sleeps in `block` until woken through its waker (a condition variable).
    struct Sleeper {
        bell: Arc<(Mutex<bool>, Condvar)>,
        blocks: Arc<AtomicU32>,
    }

    impl Service for Sleeper {
        fn progress(&mut self) -> bool {
            false
        }
        fn block(&mut self, timeout: Duration) {
            self.blocks.fetch_add(1, SeqCst);
            let (m, c) = &*self.bell;
            let g = m.lock().unwrap();
            let (mut g, _) = c.wait_timeout_while(g, timeout, |rung| !*rung).unwrap();
            *g = false;
        }
        fn busy(&self) -> bool {
            false
        }
    }

    #[test]
    fn entering_user_wakes_a_sleeping_thread_and_gets_the_state() {
        let bell = Arc::new((Mutex::new(false), Condvar::new()));
        let blocks = Arc::new(AtomicU32::new(0));
        let b = bell.clone();
        let waker: Waker = Arc::new(move || {
            *b.0.lock().unwrap() = true;
            b.1.notify_all();
        });
        // The thread's nap is 4 intervals: 2 s. Without the wake a user would wait that.
        let s = Shared::new(
            Sleeper {
                bell,
                blocks: blocks.clone(),
            },
            waker,
            Some(Duration::from_millis(500)),
        );
        for _ in 0..3 {
            let t0 = Instant::now();
            while blocks.load(SeqCst) == 0 && t0.elapsed() < Duration::from_secs(10) {
                std::thread::sleep(Duration::from_millis(5));
            }
            assert!(blocks.load(SeqCst) > 0, "the thread took over and slept");
            std::thread::sleep(Duration::from_millis(20));
            let t1 = Instant::now();
            s.with(|_| ());
            assert!(
                t1.elapsed() < Duration::from_millis(400),
                "user waited {:?}",
                t1.elapsed()
            );
            blocks.store(0, SeqCst);
        }
        assert!(s.takeovers() >= 3);
    }

    /// Sleeps without the state on a descriptor that never becomes readable.
    struct Unlocked {
        fd: OwnedFd,
        handles: Arc<AtomicU32>,
    }

    impl Service for Unlocked {
        fn progress(&mut self) -> bool {
            false
        }
        fn block(&mut self, _: Duration) {
            panic!("must sleep unlocked");
        }
        fn busy(&self) -> bool {
            false
        }
        fn wait_handle(&mut self) -> Option<WaitHandle> {
            self.handles.fetch_add(1, SeqCst);
            Some(WaitHandle {
                fd: self.fd.as_raw_fd(),
                timeout: Some(Duration::from_secs(5)),
            })
        }
    }

    #[test]
    fn a_thread_sleeping_unlocked_never_delays_the_user() {
        let handles = Arc::new(AtomicU32::new(0));
        let wakes = Arc::new(AtomicU32::new(0));
        let w = wakes.clone();
        let s = Shared::new(
            Unlocked {
                fd: eventfd().unwrap(),
                handles: handles.clone(),
            },
            Arc::new(move || {
                w.fetch_add(1, SeqCst);
            }),
            Some(Duration::from_millis(1)),
        );
        let t0 = Instant::now();
        while handles.load(SeqCst) == 0 && t0.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(handles.load(SeqCst) > 0, "the thread went to sleep");
        let t1 = Instant::now();
        s.with(|_| ());
        assert!(
            t1.elapsed() < Duration::from_millis(100),
            "{:?}",
            t1.elapsed()
        );
        assert_eq!(wakes.load(SeqCst), 0, "nobody had to be woken");
        // Dropping ends the 5 s sleep at once (the stop descriptor).
        let t2 = Instant::now();
        drop(s);
        assert!(t2.elapsed() < Duration::from_secs(2), "{:?}", t2.elapsed());
    }
}
