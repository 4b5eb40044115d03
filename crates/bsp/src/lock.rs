//! The user side of a process ([`crate::core::Core`]) as one thread's: a BSP process is a
//! single thread of control (the BSPlib standard's, and every toolset's), so its calls
//! need no lock, only a guard against reentry. `bsp_put` reaches it once per call, and an
//! atomic read-modify-write there cost as much as recording the put; a plain flag costs a
//! load and a store.
//!
//! The type is `Send` but not `Sync`: the Rust API's [`crate::Bsp`] can move to another
//! thread but never be shared, and the C ABI, whose runtime is a global, lets only the
//! thread that called `bsp_begin` reach it.

use std::cell::{Cell, UnsafeCell};
use std::ops::{Deref, DerefMut};

pub struct UserSide<T> {
    held: Cell<bool>,
    value: UnsafeCell<T>,
}

impl<T> UserSide<T> {
    pub fn new(value: T) -> UserSide<T> {
        UserSide {
            held: Cell::new(false),
            value: UnsafeCell::new(value),
        }
    }

    /// The value, until the guard is dropped. Panics on reentry (a call made from inside
    /// another, which no BSPlib call does).
    #[inline]
    pub fn lock(&self) -> Guard<'_, T> {
        if self.held.replace(true) {
            reentered();
        }
        Guard { side: self }
    }
}

#[cold]
#[inline(never)]
fn reentered() -> ! {
    panic!("a BSPlib call was made while another was in progress on the same process")
}

/// Access to the value; dropping it (a panic included) gives the value back.
pub struct Guard<'a, T> {
    side: &'a UserSide<T>,
}

impl<T> Deref for Guard<'_, T> {
    type Target = T;

    #[inline]
    fn deref(&self) -> &T {
        // SAFETY: `held` admits one guard at a time and the type is not `Sync`, so this
        // guard is the only access to the value.
        unsafe { &*self.side.value.get() }
    }
}

impl<T> DerefMut for Guard<'_, T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as in `deref`; the guard is borrowed mutably here.
        unsafe { &mut *self.side.value.get() }
    }
}

impl<T> Drop for Guard<'_, T> {
    #[inline]
    fn drop(&mut self) {
        self.side.held.set(false);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reentry_is_refused_and_a_panic_gives_the_value_back() {
        let side = UserSide::new(1);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _g = side.lock();
            let _h = side.lock();
        }));
        assert!(r.is_err());
        *side.lock() += 1;
        assert_eq!(*side.lock(), 2);
    }

    #[test]
    fn it_moves_between_threads() {
        let side = UserSide::new(vec![1u8]);
        let side = std::thread::spawn(move || {
            side.lock().push(2);
            side
        })
        .join()
        .unwrap();
        assert_eq!(*side.lock(), [1, 2]);
    }
}
