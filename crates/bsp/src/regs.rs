//! The registration table: which local areas remote puts and gets may name.
//!
//! Registration is collective: the k-th registration of every process denotes the same
//! logical area, so a put names the area by a *slot* number that means the same thing
//! everywhere. Slots are allocated deterministically (lowest free first, never reusing a
//! slot freed in the same superstep), so processes that make the same calls in the same
//! order agree on every slot without talking; the barrier compares the calls to catch
//! those that don't.
//!
//! Pushes and pops take effect at the next sync. Until then they are *pending*: a put
//! may not name a pending push, and a pending pop still accepts puts in this superstep.
//! A newer registration of an address shadows older ones until popped.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::wire::RegOp;

/// One registered area.
#[derive(Clone, Debug)]
pub struct Reg {
    pub addr: usize,
    /// Its size here, in bytes.
    pub size: usize,
    /// Its size on every process (what each registered), for bounds checks at the caller.
    pub sizes: Box<[u64]>,
}

/// Why an address names no registered area.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Unregistered {
    /// It was pushed in this superstep; the push takes effect at the next sync.
    Pending,
    /// It lies `offset` bytes inside the area registered at `base`.
    Inside { base: usize, offset: usize },
    /// Nothing registered there.
    Unknown,
}

#[derive(Default)]
pub struct Regs {
    slots: Vec<Option<Reg>>,
    /// Free slots below `slots.len()`.
    free: BTreeSet<u32>,
    /// Effective registrations by address: slots, newest last.
    by_addr: BTreeMap<usize, Vec<u32>>,
    /// Stacks of the addresses touched this superstep, as they will be after the sync.
    staged: HashMap<usize, Vec<u32>>,
    /// Pushes of this superstep: slot, address, size.
    pushes: Vec<(u32, usize, usize)>,
    /// Slots popped this superstep.
    pops: Vec<u32>,
    /// The calls of this superstep, for the other processes to compare.
    ops: Vec<RegOp>,
    /// Slots handed out this superstep beyond `slots.len()`.
    grown: u32,
}

impl Regs {
    /// The slot a put or get naming `addr` means: the newest effective registration.
    #[inline]
    pub fn lookup(&self, addr: usize) -> Result<u32, Unregistered> {
        if let Some(s) = self.by_addr.get(&addr).and_then(|v| v.last()) {
            return Ok(*s);
        }
        Err(self.why_unregistered(addr))
    }

    #[cold]
    fn why_unregistered(&self, addr: usize) -> Unregistered {
        if self.pushes.iter().any(|&(_, a, _)| a == addr) {
            return Unregistered::Pending;
        }
        if let Some((&base, stack)) = self.by_addr.range(..addr).next_back()
            && let Some(reg) = stack.last().and_then(|&s| self.get(s))
            && addr - base < reg.size
        {
            return Unregistered::Inside {
                base,
                offset: addr - base,
            };
        }
        Unregistered::Unknown
    }

    pub fn get(&self, slot: u32) -> Option<&Reg> {
        self.slots.get(slot as usize)?.as_ref()
    }

    /// Stages a push of `size` bytes at `addr`.
    pub fn push(&mut self, addr: usize, size: usize) {
        let slot = match self.free.pop_first() {
            Some(s) => s,
            None => {
                self.grown += 1;
                self.slots.len() as u32 + self.grown - 1
            }
        };
        let by_addr = &self.by_addr;
        self.staged
            .entry(addr)
            .or_insert_with(|| by_addr.get(&addr).cloned().unwrap_or_default())
            .push(slot);
        self.pushes.push((slot, addr, size));
        self.ops.push(RegOp::Push(size as u64));
    }

    /// Stages a pop of the newest registration of `addr` (pending pushes included); false
    /// if there is none.
    pub fn pop(&mut self, addr: usize) -> bool {
        let by_addr = &self.by_addr;
        let stack = self
            .staged
            .entry(addr)
            .or_insert_with(|| by_addr.get(&addr).cloned().unwrap_or_default());
        match stack.pop() {
            Some(slot) => {
                self.pops.push(slot);
                self.ops.push(RegOp::Pop(slot));
                true
            }
            None => false,
        }
    }

    /// The registration calls of this superstep.
    pub fn ops(&self) -> &[RegOp] {
        &self.ops
    }

    /// Makes this superstep's calls effective. `sizes(k)` gives, for the k-th push, every
    /// process's size (the barrier checked that all made the same calls).
    pub fn commit(&mut self, mut sizes: impl FnMut(usize) -> Box<[u64]>) {
        if self.ops.is_empty() {
            return;
        }
        let grow = self.slots.len() + self.grown as usize;
        self.slots.resize(grow, None);
        for (k, &(slot, addr, size)) in self.pushes.iter().enumerate() {
            self.slots[slot as usize] = Some(Reg {
                addr,
                size,
                sizes: sizes(k),
            });
        }
        for &slot in &self.pops {
            self.slots[slot as usize] = None;
            self.free.insert(slot);
        }
        for (addr, stack) in self.staged.drain() {
            if stack.is_empty() {
                self.by_addr.remove(&addr);
            } else {
                self.by_addr.insert(addr, stack);
            }
        }
        // Trailing free slots need no numbers: shrink so the table follows what is live.
        while let Some(None) = self.slots.last() {
            let s = self.slots.len() as u32 - 1;
            self.slots.pop();
            self.free.remove(&s);
        }
        self.pushes.clear();
        self.pops.clear();
        self.ops.clear();
        self.grown = 0;
    }

    /// Number of effective registrations.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.slots.iter().flatten().count()
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn commit(r: &mut Regs, p: usize) {
        let sizes: Vec<u64> = r.pushes.iter().map(|&(_, _, s)| s as u64).collect();
        r.commit(|k| vec![sizes[k]; p].into());
    }

    #[test]
    fn pushes_take_effect_at_commit_and_shadow() {
        let mut r = Regs::default();
        r.push(0x1000, 64);
        assert_eq!(r.lookup(0x1000), Err(Unregistered::Pending));
        commit(&mut r, 2);
        let a = r.lookup(0x1000).unwrap();
        assert_eq!(r.get(a).unwrap().size, 64);
        assert_eq!(
            r.lookup(0x1010),
            Err(Unregistered::Inside {
                base: 0x1000,
                offset: 16
            })
        );
        r.push(0x1000, 8);
        commit(&mut r, 2);
        let b = r.lookup(0x1000).unwrap();
        assert_ne!(a, b);
        assert_eq!(r.get(b).unwrap().size, 8);
        // The pop still leaves puts to b valid until the sync.
        assert!(r.pop(0x1000));
        assert_eq!(r.lookup(0x1000), Ok(b));
        commit(&mut r, 2);
        assert_eq!(r.lookup(0x1000), Ok(a), "the older registration is back");
        assert!(r.pop(0x1000));
        assert!(!r.pop(0x1000), "nothing left to pop");
        commit(&mut r, 2);
        assert_eq!(r.lookup(0x1000), Err(Unregistered::Unknown));
        assert!(r.is_empty());
    }

    #[test]
    fn slots_are_deterministic_and_not_reused_within_a_superstep() {
        let mut r = Regs::default();
        r.push(0, 0);
        r.push(0x10, 4);
        r.push(0x20, 4);
        commit(&mut r, 1);
        assert_eq!(r.lookup(0x10), Ok(1));
        assert!(r.pop(0x10));
        r.push(0x30, 4);
        assert_eq!(r.ops(), &[RegOp::Pop(1), RegOp::Push(4)]);
        commit(&mut r, 1);
        assert_eq!(
            r.lookup(0x30),
            Ok(3),
            "slot 1 was freed in the same superstep"
        );
        r.push(0x40, 4);
        commit(&mut r, 1);
        assert_eq!(r.lookup(0x40), Ok(1), "then it is the lowest free");
        // Push and pop of the same address in one superstep: nothing remains.
        r.push(0x50, 1);
        assert!(r.pop(0x50));
        commit(&mut r, 1);
        assert_eq!(r.lookup(0x50), Err(Unregistered::Unknown));
        assert_eq!(r.lookup(0), Ok(0), "NULL with size 0 is a registration too");
    }
}
