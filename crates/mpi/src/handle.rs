//! Handles: what C programs hold for MPI objects.
//!
//! A handle is pointer-sized (the MPI 5.0 ABI makes every handle type a pointer to an
//! incomplete struct). The ABI reserves the values 1 to 4095 for predefined handles
//! (`MPI_COMM_WORLD` is 0x101, `MPI_INT` 0x209, `MPI_SUM` 0x21); handles made at run time
//! are `BASE + (index << KIND_BITS | kind)`, never in that range and never 0, so a handle of
//! the wrong kind (a datatype passed as a communicator) is caught, not misread.

/// A C handle's value.
pub type Raw = usize;

/// The first value of a handle made at run time.
pub const BASE: Raw = 0x10000;
const KIND_BITS: u32 = 4;

/// Which table a run-time handle belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    Comm = 1,
    Group = 2,
    Datatype = 3,
    Op = 4,
    Request = 5,
    Errhandler = 6,
    Info = 7,
    Message = 8,
    Win = 9,
    Keyval = 10,
}

/// An object found by its handle: a predefined one (`MPI_COMM_WORLD`, `MPI_INT`) lent
/// from its static slot, others shared. A lookup of a predefined object then touches no
/// reference count: two atomic operations fewer per handle and call on the path of every
/// small message.
pub enum Ref<T: 'static> {
    Static(&'static std::sync::Arc<T>),
    Shared(std::sync::Arc<T>),
}

impl<T> Clone for Ref<T> {
    fn clone(&self) -> Self {
        match self {
            Ref::Static(a) => Ref::Static(a),
            Ref::Shared(a) => Ref::Shared(a.clone()),
        }
    }
}

impl<T> Ref<T> {
    /// A shared handle on the object, for what outlives the call (a request).
    pub fn arc(&self) -> std::sync::Arc<T> {
        match self {
            Ref::Static(a) => std::sync::Arc::clone(a),
            Ref::Shared(a) => a.clone(),
        }
    }
}

impl<T> std::ops::Deref for Ref<T> {
    type Target = T;
    fn deref(&self) -> &T {
        match self {
            Ref::Static(a) => a,
            Ref::Shared(a) => a,
        }
    }
}

/// Objects of one kind, by handle. Freed slots are reused (MPICH's tests create and free
/// communicators and datatypes by the thousand).
pub struct Table<T> {
    kind: Kind,
    slots: Vec<Option<T>>,
    free: Vec<usize>,
}

impl<T> Table<T> {
    pub const fn new(kind: Kind) -> Table<T> {
        Table {
            kind,
            slots: Vec::new(),
            free: Vec::new(),
        }
    }

    /// Stores `v`; its new handle.
    pub fn insert(&mut self, v: T) -> Raw {
        let i = match self.free.pop() {
            Some(i) => {
                self.slots[i] = Some(v);
                i
            }
            None => {
                self.slots.push(Some(v));
                self.slots.len() - 1
            }
        };
        BASE + ((i << KIND_BITS) | self.kind as usize)
    }

    fn index(&self, h: Raw) -> Option<usize> {
        let v = h.checked_sub(BASE)?;
        (v & ((1 << KIND_BITS) - 1) == self.kind as usize).then_some(v >> KIND_BITS)
    }

    pub fn get(&self, h: Raw) -> Option<&T> {
        self.slots.get(self.index(h)?)?.as_ref()
    }

    pub fn get_mut(&mut self, h: Raw) -> Option<&mut T> {
        let i = self.index(h)?;
        self.slots.get_mut(i)?.as_mut()
    }

    /// Takes the object out; its handle becomes invalid (and may be reused later).
    pub fn remove(&mut self, h: Raw) -> Option<T> {
        let i = self.index(h)?;
        let v = self.slots.get_mut(i)?.take()?;
        self.free.push(i);
        Some(v)
    }

    /// Live objects.
    pub fn len(&self) -> usize {
        self.slots.len() - self.free.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Whether `h` is one of the ABI's predefined handle values.
pub fn is_predefined(h: Raw) -> bool {
    (1..4096).contains(&h)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_are_checked_by_kind_and_reused() {
        let mut a: Table<u32> = Table::new(Kind::Comm);
        let mut b: Table<u32> = Table::new(Kind::Datatype);
        let h = a.insert(7);
        let g = b.insert(9);
        assert!(!is_predefined(h) && h != 0);
        assert_eq!(a.get(h), Some(&7));
        assert_eq!(a.get(g), None, "a datatype handle is not a communicator");
        assert_eq!(a.remove(h), Some(7));
        assert_eq!(a.get(h), None);
        assert_eq!(a.remove(h), None, "freed twice");
        assert_eq!(a.insert(8), h, "the slot is reused");
        assert_eq!(a.len(), 1);
        assert_eq!(a.get(0x101), None);
    }
}
