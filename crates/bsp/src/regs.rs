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
//!
//! A pop of NULL names no registration by itself (processes without the data register
//! NULL, often more than once): it pops the registration the processes that name an
//! address pop, as BSPonMPI and MulticoreBSP do; when every process pops NULL, the
//! newest registration that every process made with NULL. The sync resolves it
//! ([`Regs::commit`] takes the resolved slots).

use std::cell::Cell;
use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::BspError;
use crate::error::misuse;
use crate::wire::RegOp;

/// One registered area.
#[derive(Clone, Debug)]
pub struct Reg {
    pub addr: usize,
    /// Its size here, in bytes.
    pub size: usize,
    /// Its size on every process (what each registered), for bounds checks at the caller.
    pub sizes: Box<[u64]>,
    /// Its address on every process, for `bsp_direct_get` (0: NULL was registered).
    pub addrs: Box<[u64]>,
}

impl Reg {
    /// Every process registered NULL here.
    pub fn all_null(&self) -> bool {
        self.addrs.iter().all(|&a| a == 0)
    }
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
    /// Slots popped this superstep; `None`: a pop of NULL, resolved at the sync.
    pops: Vec<Option<u32>>,
    /// The calls of this superstep, for the other processes to compare.
    ops: Vec<RegOp>,
    /// Slots handed out this superstep beyond `slots.len()`.
    grown: u32,
    /// The last address `lookup` found and its slot: programs put to one area many times
    /// in a row. Cleared whenever `by_addr` changes.
    last: Cell<Option<(usize, u32)>>,
}

impl Regs {
    /// The slot a put or get naming `addr` means: the newest effective registration.
    #[inline]
    pub fn lookup(&self, addr: usize) -> Result<u32, Unregistered> {
        if let Some((a, s)) = self.last.get()
            && a == addr
        {
            return Ok(s);
        }
        if let Some(&s) = self.by_addr.get(&addr).and_then(|v| v.last()) {
            self.last.set(Some((addr, s)));
            return Ok(s);
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

    /// The slot of `addr` if it is the address `lookup` found last: the fast path of a
    /// put, which checks nothing else.
    #[inline]
    pub fn last_slot(&self, addr: usize) -> Option<u32> {
        self.last.get().filter(|l| l.0 == addr).map(|l| l.1)
    }

    #[inline]
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
        self.ops.push(RegOp::Push {
            size: size as u64,
            addr: addr as u64,
        });
    }

    /// Stages a pop of the newest registration of `addr` (pending pushes included); false
    /// if there is none. A pop of NULL (0) is staged unresolved and always accepted.
    pub fn pop(&mut self, addr: usize) -> bool {
        if addr == 0 {
            self.pops.push(None);
            self.ops.push(RegOp::PopNull);
            return true;
        }
        let by_addr = &self.by_addr;
        let stack = self
            .staged
            .entry(addr)
            .or_insert_with(|| by_addr.get(&addr).cloned().unwrap_or_default());
        match stack.pop() {
            Some(slot) => {
                self.pops.push(Some(slot));
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

    /// The slots of this superstep's pushes, in call order.
    pub fn pushed_slots(&self) -> impl Iterator<Item = u32> + '_ {
        self.pushes.iter().map(|&(slot, _, _)| slot)
    }

    /// Effective registrations that every process made with NULL, oldest first.
    pub fn all_null_slots(&self) -> Vec<u32> {
        let Some(stack) = self.by_addr.get(&0) else {
            return Vec::new();
        };
        stack
            .iter()
            .copied()
            .filter(|&s| self.get(s).is_some_and(Reg::all_null))
            .collect()
    }

    /// This process's registrations by slot (address and size), for serving
    /// `bsp_direct_get` while the program computes.
    pub fn local_view(&self) -> Vec<Option<(usize, usize)>> {
        self.slots
            .iter()
            .map(|r| r.as_ref().map(|r| (r.addr, r.size)))
            .collect()
    }

    /// The slot each pop of this superstep removes, in call order. `ops` are the calls
    /// every process made (checked to agree), with a pop of NULL left only where every
    /// process popped NULL; `all_null(k)` tells whether every process pushed NULL in the
    /// superstep's k-th push. Such a pop takes the newest registration that every process
    /// made with NULL.
    pub fn resolve_pops(
        &self,
        ops: &[RegOp],
        all_null: impl Fn(usize) -> bool,
        step: u32,
    ) -> Result<Vec<u32>, BspError> {
        if ops.is_empty() {
            return Ok(Vec::new());
        }
        let mut nulls = self.all_null_slots();
        let mut pushed = self.pushed_slots().enumerate();
        let mut popped: Vec<u32> = Vec::new();
        for (k, op) in ops.iter().enumerate() {
            let slot = match *op {
                RegOp::Push { .. } => {
                    let (i, slot) = pushed.next().expect("one slot per push");
                    if all_null(i) {
                        nulls.push(slot);
                    }
                    continue;
                }
                RegOp::Pop(slot) => slot,
                RegOp::PopNull => nulls.pop().ok_or_else(|| {
                    BspError::Misuse(format!(
                        "bsp_pop_reg: in superstep {step} every process popped NULL (call \
                         {}), but no registration that every process made with NULL is \
                         left to pop",
                        k + 1
                    ))
                })?,
            };
            if popped.contains(&slot) {
                return misuse(format!(
                    "bsp_pop_reg: in superstep {step} registration #{slot} was popped twice \
                     (call {}): a pop of NULL on some processes and of an address on others \
                     name it both times",
                    k + 1
                ));
            }
            nulls.retain(|&s| s != slot);
            popped.push(slot);
        }
        Ok(popped)
    }

    /// Makes this superstep's calls effective. `pushed(k)` gives, for the k-th push,
    /// every process's size and address (the barrier checked that all made the same
    /// calls); `popped[k]` is the slot the k-th pop removes, as the sync resolved it
    /// (this process's own pops of an address are among them).
    pub fn commit(
        &mut self,
        mut pushed: impl FnMut(usize) -> (Box<[u64]>, Box<[u64]>),
        popped: &[u32],
    ) {
        if self.ops.is_empty() {
            return;
        }
        let grow = self.slots.len() + self.grown as usize;
        self.slots.resize(grow, None);
        for (k, &(slot, addr, size)) in self.pushes.iter().enumerate() {
            let (sizes, addrs) = pushed(k);
            self.slots[slot as usize] = Some(Reg {
                addr,
                size,
                sizes,
                addrs,
            });
        }
        for (k, &slot) in popped.iter().enumerate() {
            if self.pops.get(k) == Some(&None) {
                self.unstack(slot);
            }
        }
        for &slot in popped {
            self.slots[slot as usize] = None;
            self.free.insert(slot);
        }
        self.last.set(None);
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

    /// Takes `slot` off the stack of the address it has here (a pop of NULL resolved to
    /// it: here it may be NULL or any address).
    fn unstack(&mut self, slot: u32) {
        let Some(addr) = self.slots[slot as usize].as_ref().map(|r| r.addr) else {
            return;
        };
        let by_addr = &self.by_addr;
        let stack = self
            .staged
            .entry(addr)
            .or_insert_with(|| by_addr.get(&addr).cloned().unwrap_or_default());
        if let Some(i) = stack.iter().rposition(|&s| s == slot) {
            stack.remove(i);
        }
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

    /// Commits as if every process made this process's calls; pops of NULL resolve to
    /// `null_pops`, in order.
    fn commit_with(r: &mut Regs, p: usize, null_pops: &[u32]) {
        let pushed: Vec<(u64, u64)> = r
            .pushes
            .iter()
            .map(|&(_, a, s)| (s as u64, a as u64))
            .collect();
        let mut nulls = null_pops.iter();
        let popped: Vec<u32> = r
            .pops
            .iter()
            .map(|s| s.unwrap_or_else(|| *nulls.next().expect("a slot for each NULL pop")))
            .collect();
        r.commit(
            |k| (vec![pushed[k].0; p].into(), vec![pushed[k].1; p].into()),
            &popped,
        );
    }

    fn commit(r: &mut Regs, p: usize) {
        commit_with(r, p, &[]);
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
        assert_eq!(
            r.ops(),
            &[
                RegOp::Pop(1),
                RegOp::Push {
                    size: 4,
                    addr: 0x30
                }
            ]
        );
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

    #[test]
    fn a_pop_of_null_takes_the_slot_the_sync_resolved() {
        let mut r = Regs::default();
        r.push(0, 0);
        r.push(0x10, 8);
        r.push(0, 0);
        commit(&mut r, 2);
        assert_eq!(r.all_null_slots(), vec![0, 2]);
        // Another process popped its area in slot 1, which is 0x10 here: the NULL pop
        // takes slot 1 off 0x10's stack, and the NULL registrations stay.
        assert!(r.pop(0));
        assert_eq!(r.ops(), &[RegOp::PopNull]);
        assert_eq!(r.lookup(0x10), Ok(1), "the pop takes effect at the sync");
        commit_with(&mut r, 2, &[1]);
        assert_eq!(r.lookup(0x10), Err(Unregistered::Unknown));
        assert_eq!(r.lookup(0), Ok(2));
        // Then a NULL pop resolved to the newest all-NULL registration.
        assert!(r.pop(0));
        commit_with(&mut r, 2, &[2]);
        assert_eq!(r.lookup(0), Ok(0));
        assert_eq!(r.all_null_slots(), vec![0]);
    }
}
