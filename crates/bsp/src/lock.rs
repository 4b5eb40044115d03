//! The lock of a process's user side ([`crate::core::Core`]). Only the program's calls
//! take it, one at a time in a BSPlib program, so it is never contended in practice, and
//! `bsp_put` takes it once per call: an uncontended `std::sync::Mutex` costs two atomic
//! read-modify-writes (lock, and the unlock that checks for sleepers), about as much as
//! recording a put. This lock takes one to acquire and a plain store to release; a
//! second thread that finds it held yields until it is free.

use std::cell::UnsafeCell;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, Ordering};

pub struct UserLock<T> {
    held: AtomicBool,
    value: UnsafeCell<T>,
}

// SAFETY: the value is reached only through a `Guard`, and `held` admits one guard at a
// time, so moving the lock or sharing it between threads only needs `T: Send`, as for
// `std::sync::Mutex`.
unsafe impl<T: Send> Sync for UserLock<T> {}

impl<T> UserLock<T> {
    pub fn new(value: T) -> UserLock<T> {
        UserLock {
            held: AtomicBool::new(false),
            value: UnsafeCell::new(value),
        }
    }

    #[inline]
    pub fn lock(&self) -> Guard<'_, T> {
        while self.held.swap(true, Ordering::Acquire) {
            self.wait();
        }
        Guard { lock: self }
    }

    #[cold]
    fn wait(&self) {
        while self.held.load(Ordering::Relaxed) {
            std::thread::yield_now();
        }
    }
}

/// Access to the value while the lock is held; dropping it (a panic included) releases
/// the lock, as the runtime's other locks recover from poisoning.
pub struct Guard<'a, T> {
    lock: &'a UserLock<T>,
}

impl<T> Deref for Guard<'_, T> {
    type Target = T;

    #[inline]
    fn deref(&self) -> &T {
        // SAFETY: this guard is the only one (`held`), so no `&mut` to the value exists.
        unsafe { &*self.lock.value.get() }
    }
}

impl<T> DerefMut for Guard<'_, T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: this guard is the only one, and it is borrowed mutably here.
        unsafe { &mut *self.lock.value.get() }
    }
}

impl<T> Drop for Guard<'_, T> {
    #[inline]
    fn drop(&mut self) {
        self.lock.held.store(false, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threads_take_turns() {
        let lock = UserLock::new(0u64);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..10_000 {
                        // A read, a yield and a write: lost updates if two held it at once.
                        let mut g = lock.lock();
                        let v = *g;
                        if v.is_multiple_of(1000) {
                            std::thread::yield_now();
                        }
                        *g = v + 1;
                    }
                });
            }
        });
        assert_eq!(*lock.lock(), 40_000);
    }

    #[test]
    fn a_panic_releases_the_lock() {
        let lock = UserLock::new(1);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _g = lock.lock();
            panic!("inside");
        }));
        assert!(r.is_err());
        assert_eq!(*lock.lock(), 1);
    }
}
