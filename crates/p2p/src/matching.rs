//! The two queues of MPI matching, with MPI's rules:
//!
//! - an arriving message goes to the *earliest posted* receive that matches its
//!   (source, tag), wildcards included;
//! - a posted receive takes the *earliest arrived* unexpected message that matches it.
//!
//! Together with the transport's per-pair order this gives non-overtaking order per
//! (source, tag). Both sides are indexed so that the common cases are O(1): posted
//! receives sit in one of four bucket families (exact, any source, any tag, both), so
//! an arrival compares at most four queue fronts; unexpected messages sit in buckets per
//! (source, tag), so an exact receive takes a front, a wildcard one compares fronts.
//!
//! A wildcard tag matches only user tags (>= 0): p2p's own traffic (negative tags) is
//! never taken by a user's `ANY_TAG` receive. A context wildcard ([`Sel::In`]) matches the
//! 65536 tags `c << 16 ..= c << 16 | 0xffff` of one context `c`: an MPI communicator's
//! `MPI_ANY_TAG`, which must not take another communicator's messages.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};

use bulkwire_link::Rank;

/// Order of posting or arrival.
type Seq = u64;

/// A multiplicative hasher for the posted-receive maps, whose keys (ranks and tags) come
/// from this process's own posts: no hostile input, so no need for SipHash's cost.
#[derive(Default, Clone, Copy)]
pub struct FastHasher(u64);

impl Hasher for FastHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }
    fn write_u32(&mut self, i: u32) {
        self.write_u64(u64::from(i));
    }
    fn write_i32(&mut self, i: i32) {
        self.write_u64(u64::from(i as u32));
    }
    fn write_u64(&mut self, i: u64) {
        self.0 = (self.0.rotate_left(5) ^ i).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

type Fast = BuildHasherDefault<FastHasher>;

/// Empty buckets are kept (a stream of messages on one (source, tag) would otherwise
/// allocate and free a queue per message) until there are this many, then swept.
const EMPTY_BUCKETS: usize = 256;

/// Which tags a receive accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sel {
    Is(i32),
    /// Any user tag (>= 0).
    Any,
    /// Any tag of context `c`: `c << 16 ..= c << 16 | 0xffff` (`c` < 32768).
    In(u16),
}

impl From<Option<i32>> for Sel {
    fn from(t: Option<i32>) -> Sel {
        t.map_or(Sel::Any, Sel::Is)
    }
}

impl From<i32> for Sel {
    fn from(t: i32) -> Sel {
        Sel::Is(t)
    }
}

impl Sel {
    /// The one tag this selector accepts, if it names one.
    pub fn exact(self) -> Option<i32> {
        match self {
            Sel::Is(t) => Some(t),
            _ => None,
        }
    }

    pub fn matches(self, tag: i32) -> bool {
        match self {
            Sel::Is(t) => t == tag,
            Sel::Any => tag >= 0,
            Sel::In(c) => tag >= 0 && ctx_of(tag) == c,
        }
    }
}

/// The context of a (non-negative) tag, as [`Sel::In`] reads it.
fn ctx_of(tag: i32) -> u16 {
    (tag >> 16) as u16
}

/// The tags of context `c`.
fn ctx_range(c: u16) -> (i32, i32) {
    let lo = i32::from(c) << 16;
    (lo, lo | 0xffff)
}

/// Posted receives, in posting order, by what they match.
#[derive(Default)]
pub struct Posted<K> {
    seq: Seq,
    exact: HashMap<(Rank, i32), VecDeque<(Seq, K)>, Fast>,
    any_src: HashMap<i32, VecDeque<(Seq, K)>, Fast>,
    any_tag: HashMap<Rank, VecDeque<(Seq, K)>, Fast>,
    any: VecDeque<(Seq, K)>,
    /// Context wildcards: (source, context) and any source.
    ctx_tag: HashMap<(Rank, u16), VecDeque<(Seq, K)>, Fast>,
    ctx_any: HashMap<u16, VecDeque<(Seq, K)>, Fast>,
    len: usize,
    /// Receives posted with a wildcard (empty buckets outlive them, see EMPTY_BUCKETS).
    wild: usize,
    /// Buckets emptied since the last sweep.
    emptied: usize,
}

#[derive(Clone, Copy)]
enum Family {
    Exact(Rank, i32),
    AnySrc(i32),
    AnyTag(Rank),
    Any,
    CtxTag(Rank, u16),
    CtxAny(u16),
}

impl Family {
    fn of(src: Option<Rank>, tag: Sel) -> Family {
        match (src, tag) {
            (Some(r), Sel::Is(t)) => Family::Exact(r, t),
            (None, Sel::Is(t)) => Family::AnySrc(t),
            (Some(r), Sel::Any) => Family::AnyTag(r),
            (None, Sel::Any) => Family::Any,
            (Some(r), Sel::In(c)) => Family::CtxTag(r, c),
            (None, Sel::In(c)) => Family::CtxAny(c),
        }
    }
}

impl<K: Copy + PartialEq> Posted<K> {
    pub fn new() -> Posted<K> {
        Posted {
            seq: 0,
            exact: HashMap::default(),
            any_src: HashMap::default(),
            any_tag: HashMap::default(),
            any: VecDeque::new(),
            ctx_tag: HashMap::default(),
            ctx_any: HashMap::default(),
            len: 0,
            wild: 0,
            emptied: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Posts a receive for `src` (None: any) and `tag` (`None` or [`Sel::Any`]: any user
    /// tag).
    pub fn post(&mut self, src: Option<Rank>, tag: impl Into<Sel>, k: K) {
        let s = self.seq;
        self.seq += 1;
        self.len += 1;
        let f = Family::of(src, tag.into());
        if !matches!(f, Family::Exact(..)) {
            self.wild += 1;
        }
        let q = match f {
            Family::Exact(r, t) => self.exact.entry((r, t)).or_default(),
            Family::AnySrc(t) => self.any_src.entry(t).or_default(),
            Family::AnyTag(r) => self.any_tag.entry(r).or_default(),
            Family::Any => &mut self.any,
            Family::CtxTag(r, c) => self.ctx_tag.entry((r, c)).or_default(),
            Family::CtxAny(c) => self.ctx_any.entry(c).or_default(),
        };
        q.push_back((s, k));
    }

    fn queue(&mut self, f: Family) -> Option<&mut VecDeque<(Seq, K)>> {
        // Most programs use one or two families: an empty map costs no hashing.
        match f {
            Family::Exact(r, t) if !self.exact.is_empty() => self.exact.get_mut(&(r, t)),
            Family::AnySrc(t) if !self.any_src.is_empty() => self.any_src.get_mut(&t),
            Family::AnyTag(r) if !self.any_tag.is_empty() => self.any_tag.get_mut(&r),
            Family::Any => Some(&mut self.any),
            Family::CtxTag(r, c) if !self.ctx_tag.is_empty() => self.ctx_tag.get_mut(&(r, c)),
            Family::CtxAny(c) if !self.ctx_any.is_empty() => self.ctx_any.get_mut(&c),
            _ => None,
        }
    }

    /// Notes that a bucket of family `f` may have emptied; sweeps empty buckets when many.
    fn drop_if_empty(&mut self, f: Family) {
        if matches!(f, Family::Any) || !self.queue(f).is_some_and(|q| q.is_empty()) {
            return;
        }
        self.emptied_one();
    }

    /// Counts a bucket that emptied; sweeps empty buckets when many.
    fn emptied_one(&mut self) {
        self.emptied += 1;
        if self.emptied >= EMPTY_BUCKETS {
            self.emptied = 0;
            self.exact.retain(|_, q| !q.is_empty());
            self.any_src.retain(|_, q| !q.is_empty());
            self.any_tag.retain(|_, q| !q.is_empty());
            self.ctx_tag.retain(|_, q| !q.is_empty());
            self.ctx_any.retain(|_, q| !q.is_empty());
        }
    }

    /// Takes the earliest posted receive matching a message from `src` with `tag`.
    pub fn take(&mut self, src: Rank, tag: i32) -> Option<K> {
        // Only receives naming their source and tag are posted (most programs): one
        // lookup, where the general path below makes three (~40 ns on every message).
        if self.wild == 0 {
            let q = self.exact.get_mut(&(src, tag))?;
            let (_, k) = q.pop_front()?;
            if q.is_empty() {
                self.emptied_one();
            }
            self.len -= 1;
            return Some(k);
        }
        let mut cands = [
            Family::Exact(src, tag),
            Family::AnySrc(tag),
            Family::Any,
            Family::Any,
            Family::Any,
            Family::Any,
        ];
        let mut n = 2;
        if tag >= 0 {
            let c = ctx_of(tag);
            cands[2] = Family::AnyTag(src);
            cands[3] = Family::Any;
            cands[4] = Family::CtxTag(src, c);
            cands[5] = Family::CtxAny(c);
            n = 6;
        }
        let mut best: Option<(Seq, Family)> = None;
        for &f in &cands[..n] {
            if let Some(&(s, _)) = self.queue(f).and_then(|q| q.front())
                && best.is_none_or(|(b, _)| s < b)
            {
                best = Some((s, f));
            }
        }
        let (_, f) = best?;
        let k = self.queue(f)?.pop_front().map(|(_, k)| k);
        self.drop_if_empty(f);
        self.len -= 1;
        if !matches!(f, Family::Exact(..)) {
            self.wild -= 1;
        }
        k
    }

    /// Removes a posted receive (cancelled, or failed with its source).
    pub fn remove(&mut self, src: Option<Rank>, tag: impl Into<Sel>, k: K) -> bool {
        let f = Family::of(src, tag.into());
        let Some(q) = self.queue(f) else {
            return false;
        };
        let Some(i) = q.iter().position(|&(_, x)| x == k) else {
            return false;
        };
        q.remove(i);
        self.drop_if_empty(f);
        self.len -= 1;
        if !matches!(f, Family::Exact(..)) {
            self.wild -= 1;
        }
        true
    }

    /// Removes every receive naming `src` (not the wildcards), in posting order.
    pub fn drain_source(&mut self, src: Rank) -> Vec<K> {
        let mut got: Vec<(Seq, K)> = Vec::new();
        let keys: Vec<(Rank, i32)> = self.exact.keys().filter(|k| k.0 == src).copied().collect();
        for key in keys {
            got.extend(self.exact.remove(&key).unwrap_or_default());
        }
        let mut wild = self.any_tag.remove(&src).unwrap_or_default();
        let keys: Vec<(Rank, u16)> = self
            .ctx_tag
            .keys()
            .filter(|k| k.0 == src)
            .copied()
            .collect();
        for key in keys {
            wild.extend(self.ctx_tag.remove(&key).unwrap_or_default());
        }
        self.wild -= wild.len();
        got.extend(wild);
        got.sort_by_key(|&(s, _)| s);
        self.len -= got.len();
        got.into_iter().map(|(_, k)| k).collect()
    }
}

/// A message that arrived before any receive matched it.
pub struct Arrived<T> {
    pub src: Rank,
    pub tag: i32,
    pub item: T,
}

/// Unexpected messages, in arrival order, bucketed by (source, tag).
pub struct Unexpected<T> {
    seq: Seq,
    buckets: BTreeMap<(Rank, i32), VecDeque<(Seq, T)>>,
    nprocs: u32,
    len: usize,
    /// Buckets emptied since the last sweep.
    emptied: usize,
}

impl<T> Unexpected<T> {
    pub fn new(nprocs: u32) -> Unexpected<T> {
        Unexpected {
            seq: 0,
            buckets: BTreeMap::new(),
            nprocs,
            len: 0,
            emptied: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn push(&mut self, src: Rank, tag: i32, item: T) {
        let s = self.seq;
        self.seq += 1;
        self.len += 1;
        self.buckets
            .entry((src, tag))
            .or_default()
            .push_back((s, item));
    }

    /// The bucket holding the earliest message matching (`src`, `tag`). Any message a
    /// receive matches is preceded in its bucket only by messages it also matches, so the
    /// answer is always a bucket's front.
    fn find(&self, src: Option<Rank>, tag: Sel) -> Option<(Rank, i32)> {
        let front = |k: &(Rank, i32)| self.buckets.get(k).and_then(|q| q.front()).map(|f| f.0);
        let mut best: Option<(Seq, (Rank, i32))> = None;
        let mut consider = |s: Seq, k: (Rank, i32)| {
            if best.is_none_or(|(b, _)| s < b) {
                best = Some((s, k));
            }
        };
        match (src, tag) {
            (Some(r), Sel::Is(t)) => return front(&(r, t)).map(|_| (r, t)),
            (Some(r), Sel::Any) => {
                for (k, q) in self.buckets.range((r, 0)..=(r, i32::MAX)) {
                    if let Some(f) = q.front() {
                        consider(f.0, *k);
                    }
                }
            }
            (Some(r), Sel::In(c)) => {
                let (lo, hi) = ctx_range(c);
                for (k, q) in self.buckets.range((r, lo)..=(r, hi)) {
                    if let Some(f) = q.front() {
                        consider(f.0, *k);
                    }
                }
            }
            (None, Sel::In(c)) => {
                let (lo, hi) = ctx_range(c);
                for r in 0..self.nprocs {
                    for (k, q) in self.buckets.range((r, lo)..=(r, hi)) {
                        if let Some(f) = q.front() {
                            consider(f.0, *k);
                        }
                    }
                }
            }
            (None, Sel::Is(t)) => {
                for r in 0..self.nprocs {
                    if let Some(s) = front(&(r, t)) {
                        consider(s, (r, t));
                    }
                }
            }
            (None, Sel::Any) => {
                for (k, q) in &self.buckets {
                    if Sel::Any.matches(k.1)
                        && let Some(f) = q.front()
                    {
                        consider(f.0, *k);
                    }
                }
            }
        }
        best.map(|(_, k)| k)
    }

    /// Takes the earliest arrived message matching (`src`, `tag`).
    pub fn take(&mut self, src: Option<Rank>, tag: impl Into<Sel>) -> Option<Arrived<T>> {
        let key = self.find(src, tag.into())?;
        let q = self.buckets.get_mut(&key)?;
        let (_, item) = q.pop_front()?;
        if q.is_empty() {
            self.emptied += 1;
            if self.emptied >= EMPTY_BUCKETS {
                self.emptied = 0;
                self.buckets.retain(|_, q| !q.is_empty());
            }
        }
        self.len -= 1;
        Some(Arrived {
            src: key.0,
            tag: key.1,
            item,
        })
    }

    /// The earliest arrived message matching (`src`, `tag`), left in place.
    pub fn peek(&self, src: Option<Rank>, tag: impl Into<Sel>) -> Option<(Rank, i32, &T)> {
        let key = self.find(src, tag.into())?;
        self.buckets
            .get(&key)
            .and_then(|q| q.front())
            .map(|f| (key.0, key.1, &f.1))
    }

    /// Every message still waiting, mutably (to fail those of a dead peer in place).
    pub fn iter_mut(&mut self) -> impl Iterator<Item = (Rank, &mut T)> {
        self.buckets
            .iter_mut()
            .flat_map(|(k, q)| q.iter_mut().map(move |(_, t)| (k.0, t)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arrival_takes_the_earliest_matching_post() {
        let mut p: Posted<u32> = Posted::new();
        p.post(Some(1), Some(5), 0);
        p.post(None, None, 1);
        p.post(None, Some(5), 2);
        p.post(Some(1), None, 3);
        p.post(Some(1), Some(5), 4);
        assert_eq!(p.take(1, 5), Some(0));
        assert_eq!(p.take(2, 9), Some(1));
        assert_eq!(p.take(3, 5), Some(2));
        assert_eq!(p.take(1, 5), Some(3));
        assert_eq!(p.take(1, 5), Some(4));
        assert_eq!(p.take(1, 5), None);
        assert_eq!(p.len(), 0);
        // Wildcard tags never take internal (negative) tags.
        p.post(None, None, 7);
        p.post(Some(0), None, 8);
        assert_eq!(p.take(0, -2), None);
        p.post(Some(0), Some(-2), 9);
        assert_eq!(p.take(0, -2), Some(9));
        assert!(p.remove(None, None, 7));
        assert!(!p.remove(None, None, 7));
        assert_eq!(p.drain_source(0), vec![8]);
        assert_eq!(p.len(), 0);
    }

    #[test]
    fn post_takes_the_earliest_matching_arrival() {
        let mut u: Unexpected<u32> = Unexpected::new(4);
        u.push(2, 1, 0);
        u.push(1, 7, 1);
        u.push(2, 7, 2);
        u.push(1, 1, 3);
        u.push(3, -4, 4);
        assert_eq!(u.peek(None, Some(7)).map(|x| *x.2), Some(1));
        assert_eq!(u.take(Some(2), None).map(|a| a.item), Some(0));
        assert_eq!(u.take(None, Some(7)).map(|a| a.item), Some(1));
        assert_eq!(
            u.take(None, None).map(|a| (a.src, a.tag, a.item)),
            Some((2, 7, 2))
        );
        assert_eq!(u.take(Some(1), Some(1)).map(|a| a.item), Some(3));
        // Only an exact receive takes an internal tag.
        assert!(u.take(None, None).is_none());
        assert!(u.take(Some(3), None).is_none());
        assert_eq!(u.take(Some(3), Some(-4)).map(|a| a.item), Some(4));
        assert_eq!(u.len(), 0);
    }

    #[test]
    fn a_context_wildcard_takes_only_its_context() {
        let mut u: Unexpected<u32> = Unexpected::new(2);
        u.push(0, 5, 0); // context 0
        u.push(1, (1 << 16) | 5, 1); // context 1
        u.push(0, (1 << 16) | 9, 2);
        assert_eq!(u.peek(None, Sel::In(1)).map(|x| *x.2), Some(1));
        assert_eq!(u.take(Some(0), Sel::In(1)).map(|a| a.item), Some(2));
        assert!(u.take(Some(0), Sel::In(2)).is_none());
        assert_eq!(u.take(None, Sel::In(0)).map(|a| a.item), Some(0));
        let mut p: Posted<u32> = Posted::new();
        p.post(None, Sel::In(1), 0);
        p.post(Some(0), Sel::In(0), 1);
        p.post(None, Sel::Any, 2);
        assert_eq!(p.take(0, 3), Some(1), "context 0 from rank 0");
        assert_eq!(p.take(1, (1 << 16) | 3), Some(0));
        assert_eq!(p.take(1, 3), Some(2));
        assert_eq!(p.take(0, (2 << 16) | 3), None);
        p.post(Some(1), Sel::In(3), 3);
        assert_eq!(p.drain_source(1), vec![3]);
        assert!(p.is_empty());
    }

    /// Random posts and arrivals against a linear-scan model of MPI matching.
    #[test]
    fn agrees_with_a_linear_model() {
        let mut x: u64 = 12345;
        let mut rnd = |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        // Wildcards often, and rarely: the one-lookup path for exact receives alone and
        // the general one take turns.
        for round in 0..100 {
            let wild_one_in = if round % 2 == 0 { 4 } else { 40 };
            let mut posted: Posted<u32> = Posted::new();
            let mut unexp: Unexpected<u32> = Unexpected::new(3);
            let mut m_posted: Vec<(Option<Rank>, Sel, u32)> = Vec::new();
            let mut m_unexp: Vec<(Rank, i32, u32)> = Vec::new();
            for id in 0..300u32 {
                if rnd(2) == 0 {
                    let src = (rnd(wild_one_in) != 0).then(|| rnd(3) as Rank);
                    // Tags of two contexts; wildcards over all of them or over one.
                    let tag = match rnd(wild_one_in) {
                        0 => Sel::Any,
                        1 => Sel::In(rnd(2) as u16),
                        _ => Sel::Is(((rnd(2) as i32) << 16) | rnd(3) as i32),
                    };
                    let model = m_unexp
                        .iter()
                        .position(|&(s, t, _)| src.is_none_or(|r| r == s) && tag.matches(t))
                        .map(|i| m_unexp.remove(i).2);
                    let got = unexp.take(src, tag).map(|a| a.item);
                    assert_eq!(got, model);
                    if got.is_none() {
                        posted.post(src, tag, id);
                        m_posted.push((src, tag, id));
                    }
                } else {
                    let (s, t) = (rnd(3) as Rank, ((rnd(2) as i32) << 16) | rnd(3) as i32);
                    let model = m_posted
                        .iter()
                        .position(|&(src, tag, _)| src.is_none_or(|r| r == s) && tag.matches(t))
                        .map(|i| m_posted.remove(i).2);
                    let got = posted.take(s, t);
                    assert_eq!(got, model);
                    if got.is_none() {
                        unexp.push(s, t, id);
                        m_unexp.push((s, t, id));
                    }
                }
            }
        }
    }
}
