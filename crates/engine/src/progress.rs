//! Progress that does not depend on the user calling into the library.
//!
//! A user thread that computes for a long time still needs its process to acknowledge
//! data, answer liveness pings, match arriving messages to posted receives and serve
//! RMPP's clear-to-send (seed 000's overlap benchmark). [`Shared`] holds the state of an
//! upper layer behind a mutex; a background thread takes it over when no user thread has
//! been inside the library for a while, and hands it back the moment one enters.
//!
//! The user's fast path pays one atomic increment and one load: the thread never polls
//! the network while the user is active, and it wakes only every `interval` to look.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::transport::Waker;

/// What a progress thread can drive.
pub trait Service: Send + 'static {
    /// Advances everything that can advance without waiting; true if anything moved.
    fn progress(&mut self) -> bool;
    /// Sleeps until input may be ready or `timeout` passes (the waker ends it early).
    fn block(&mut self, timeout: Duration);
    /// Whether communication is in flight (the thread then stays attentive).
    fn busy(&self) -> bool;
}

struct Inner<S> {
    state: Mutex<S>,
    /// User threads inside [`Shared::with`].
    in_call: AtomicUsize,
    /// When the last user call returned, ns since `epoch`.
    last_exit: AtomicU64,
    /// The progress thread holds the state.
    takeover: AtomicBool,
    stop: AtomicBool,
    waker: Waker,
    epoch: Instant,
    /// Times the thread took over (for tests and statistics).
    takeovers: AtomicU64,
}

impl<S> Inner<S> {
    fn lock(&self) -> MutexGuard<'_, S> {
        // A panic in user code while holding the state must not wedge the progress thread.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn now(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }
}

/// An upper layer's state, shared between user threads and an optional progress thread.
pub struct Shared<S: Service> {
    inner: Arc<Inner<S>>,
    thread: Option<JoinHandle<()>>,
}

impl<S: Service> Shared<S> {
    /// Wraps `state`. With `interval`, a progress thread looks every `interval` whether the
    /// user has been away that long, and if so drives the state until the user returns.
    /// `waker` must end a concurrent [`Service::block`].
    pub fn new(state: S, waker: Waker, interval: Option<Duration>) -> Shared<S> {
        let inner = Arc::new(Inner {
            state: Mutex::new(state),
            in_call: AtomicUsize::new(0),
            last_exit: AtomicU64::new(0),
            takeover: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            waker,
            epoch: Instant::now(),
            takeovers: AtomicU64::new(0),
        });
        let thread = interval.filter(|i| !i.is_zero()).map(|interval| {
            let inner = inner.clone();
            std::thread::Builder::new()
                .name("bulkwire-progress".into())
                .spawn(move || run(&inner, interval))
                .expect("spawn progress thread")
        });
        Shared { inner, thread }
    }

    /// The interval from `BULKWIRE_PROGRESS_US` (0 turns the thread off), default 2 ms.
    pub fn interval_from_env() -> Option<Duration> {
        let us = std::env::var("BULKWIRE_PROGRESS_US")
            .ok()
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(2000);
        (us > 0).then(|| Duration::from_micros(us))
    }

    /// Runs `f` on the state as a user call.
    pub fn with<R>(&self, f: impl FnOnce(&mut S) -> R) -> R {
        let i = &*self.inner;
        i.in_call.fetch_add(1, SeqCst);
        // Paired with the thread's store of `takeover` then load of `in_call` (both
        // SeqCst): either it sees us and leaves, or we see it and wake it.
        if i.takeover.load(SeqCst) {
            (i.waker)();
        }
        let r = {
            let mut g = i.lock();
            f(&mut g)
        };
        i.last_exit.store(i.now(), SeqCst);
        i.in_call.fetch_sub(1, SeqCst);
        r
    }

    /// How many times the progress thread has taken over.
    pub fn takeovers(&self) -> u64 {
        self.inner.takeovers.load(SeqCst)
    }
}

impl<S: Service> Drop for Shared<S> {
    fn drop(&mut self) {
        self.inner.stop.store(true, SeqCst);
        (self.inner.waker)();
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}

fn run<S: Service>(i: &Inner<S>, interval: Duration) {
    let interval_ns = interval.as_nanos() as u64;
    loop {
        std::thread::park_timeout(interval);
        if i.stop.load(SeqCst) {
            return;
        }
        if i.in_call.load(SeqCst) > 0
            || i.now().saturating_sub(i.last_exit.load(SeqCst)) < interval_ns
        {
            continue;
        }
        let Ok(mut g) = i.state.try_lock() else {
            continue;
        };
        i.takeover.store(true, SeqCst);
        i.takeovers.fetch_add(1, SeqCst);
        while i.in_call.load(SeqCst) == 0 && !i.stop.load(SeqCst) {
            if g.progress() {
                continue;
            }
            if i.in_call.load(SeqCst) > 0 {
                break;
            }
            // Attentive while something is in flight, drowsy otherwise; a user entering
            // wakes us either way.
            let nap = if g.busy() {
                Duration::from_micros(500)
            } else {
                interval * 4
            };
            g.block(nap);
        }
        i.takeover.store(false, SeqCst);
        drop(g);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU32;

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
}
