//! Groups: ordered sets of the job's processes (world ranks), and every `MPI_Group_*`
//! call. A group is immutable once made, shared by the communicators built on it.

use std::collections::HashSet;
use std::os::raw::c_int;
use std::sync::{Arc, Mutex};

use crate::error::*;
use crate::handle::{Kind, Raw, Table};
use crate::predef::*;
use crate::runtime::{fail, world_rank};

/// An ordered set of processes.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Group {
    /// World ranks, in group order.
    pub ranks: Vec<u32>,
}

impl Group {
    pub fn size(&self) -> u32 {
        self.ranks.len() as u32
    }

    /// The group rank of world rank `w`.
    pub fn rank_of(&self, w: u32) -> Option<u32> {
        self.ranks.iter().position(|&r| r == w).map(|i| i as u32)
    }

    /// `MPI_IDENT` (same members, same order), `MPI_SIMILAR` (same members) or
    /// `MPI_UNEQUAL`.
    pub fn compare(&self, other: &Group) -> c_int {
        if self.ranks == other.ranks {
            return MPI_IDENT;
        }
        let a: HashSet<u32> = self.ranks.iter().copied().collect();
        let b: HashSet<u32> = other.ranks.iter().copied().collect();
        if self.ranks.len() == other.ranks.len() && a == b {
            MPI_SIMILAR
        } else {
            MPI_UNEQUAL
        }
    }
}

static GROUPS: Mutex<Table<Arc<Group>>> = Mutex::new(Table::new(Kind::Group));

fn empty() -> Arc<Group> {
    static EMPTY: std::sync::OnceLock<Arc<Group>> = std::sync::OnceLock::new();
    EMPTY.get_or_init(|| Arc::new(Group::default())).clone()
}

/// The group of a handle (`MPI_GROUP_EMPTY` included).
pub fn lookup(h: Raw) -> Result<Arc<Group>, c_int> {
    if h == MPI_GROUP_EMPTY {
        return Ok(empty());
    }
    let t = GROUPS.lock().unwrap_or_else(|e| e.into_inner());
    t.get(h).cloned().ok_or(MPI_ERR_GROUP)
}

/// A new handle for `g` (the empty group's predefined handle if it is empty).
pub fn insert(g: Arc<Group>) -> Raw {
    if g.ranks.is_empty() {
        return MPI_GROUP_EMPTY;
    }
    GROUPS.lock().unwrap_or_else(|e| e.into_inner()).insert(g)
}

/// Writes `v` through `p` if `p` is not null.
///
/// # Safety
/// `p` null or valid for a write.
pub(crate) unsafe fn put<T>(p: *mut T, v: T) {
    if !p.is_null() {
        // SAFETY: non-null, valid for writes by the caller's contract.
        unsafe { p.write(v) };
    }
}

/// `n` values at `p` (none if `n` is 0).
///
/// # Safety
/// `p` valid for `n` reads when `n > 0`.
pub(crate) unsafe fn slice<'a, T>(p: *const T, n: usize) -> &'a [T] {
    if n == 0 || p.is_null() {
        &[]
    } else {
        // SAFETY: forwarded contract.
        unsafe { std::slice::from_raw_parts(p, n) }
    }
}

fn get(call: &str, h: Raw) -> Result<Arc<Group>, c_int> {
    lookup(h).map_err(|e| {
        fail(
            MPI_COMM_WORLD,
            e,
            format!("{call}: invalid group handle {h:#x}"),
        )
    })
}

macro_rules! tri {
    ($e:expr) => {
        match $e {
            Ok(v) => v,
            Err(code) => return code,
        }
    };
}
pub(crate) use tri;

/// # Safety
/// Pointers as in `mpi.h`.
#[unsafe(export_name = "PMPI_Group_size")]
pub unsafe extern "C" fn MPI_Group_size(group: Raw, size: *mut c_int) -> c_int {
    let g = tri!(get("MPI_Group_size", group));
    // SAFETY: the caller's contract.
    unsafe { put(size, g.size() as c_int) };
    MPI_SUCCESS
}

/// # Safety
/// Pointers as in `mpi.h`.
#[unsafe(export_name = "PMPI_Group_rank")]
pub unsafe extern "C" fn MPI_Group_rank(group: Raw, rank: *mut c_int) -> c_int {
    let g = tri!(get("MPI_Group_rank", group));
    let r = g
        .rank_of(world_rank())
        .map_or(MPI_UNDEFINED, |r| r as c_int);
    // SAFETY: the caller's contract.
    unsafe { put(rank, r) };
    MPI_SUCCESS
}

/// # Safety
/// Pointers as in `mpi.h`.
#[unsafe(export_name = "PMPI_Group_free")]
pub unsafe extern "C" fn MPI_Group_free(group: *mut Raw) -> c_int {
    if group.is_null() {
        return fail(
            MPI_COMM_WORLD,
            MPI_ERR_ARG,
            "MPI_Group_free: null handle pointer",
        );
    }
    // SAFETY: non-null by the check, valid by contract.
    let h = unsafe { *group };
    if h != MPI_GROUP_EMPTY {
        let gone = GROUPS.lock().unwrap_or_else(|e| e.into_inner()).remove(h);
        if gone.is_none() {
            return fail(
                MPI_COMM_WORLD,
                MPI_ERR_GROUP,
                format!("MPI_Group_free: invalid group handle {h:#x}"),
            );
        }
    }
    // SAFETY: as above.
    unsafe { *group = MPI_GROUP_NULL };
    MPI_SUCCESS
}

/// # Safety
/// Pointers as in `mpi.h`.
#[unsafe(export_name = "PMPI_Group_translate_ranks")]
pub unsafe extern "C" fn MPI_Group_translate_ranks(
    group1: Raw,
    n: c_int,
    ranks1: *const c_int,
    group2: Raw,
    ranks2: *mut c_int,
) -> c_int {
    const CALL: &str = "MPI_Group_translate_ranks";
    let a = tri!(get(CALL, group1));
    let b = tri!(get(CALL, group2));
    if n < 0 {
        return fail(MPI_COMM_WORLD, MPI_ERR_ARG, format!("{CALL}: n is {n}"));
    }
    // SAFETY: the caller's contract.
    let src = unsafe { slice(ranks1, n as usize) };
    for (i, &r) in src.iter().enumerate() {
        let v = if r == MPI_PROC_NULL {
            MPI_PROC_NULL
        } else if r < 0 || r as u32 >= a.size() {
            return fail(
                MPI_COMM_WORLD,
                MPI_ERR_RANK,
                format!("{CALL}: rank {r} is outside the group (size {})", a.size()),
            );
        } else {
            b.rank_of(a.ranks[r as usize])
                .map_or(MPI_UNDEFINED, |x| x as c_int)
        };
        // SAFETY: ranks2 holds n ints by contract.
        unsafe { ranks2.add(i).write(v) };
    }
    MPI_SUCCESS
}

/// # Safety
/// Pointers as in `mpi.h`.
#[unsafe(export_name = "PMPI_Group_compare")]
pub unsafe extern "C" fn MPI_Group_compare(group1: Raw, group2: Raw, result: *mut c_int) -> c_int {
    let a = tri!(get("MPI_Group_compare", group1));
    let b = tri!(get("MPI_Group_compare", group2));
    // SAFETY: the caller's contract.
    unsafe { put(result, a.compare(&b)) };
    MPI_SUCCESS
}

/// Makes a group from two by `f` and stores its handle.
///
/// # Safety
/// `out` valid for a write.
unsafe fn combine(
    call: &str,
    g1: Raw,
    g2: Raw,
    out: *mut Raw,
    f: impl Fn(&Group, &Group) -> Vec<u32>,
) -> c_int {
    let a = tri!(get(call, g1));
    let b = tri!(get(call, g2));
    let g = Arc::new(Group { ranks: f(&a, &b) });
    // SAFETY: the caller's contract.
    unsafe { put(out, insert(g)) };
    MPI_SUCCESS
}

/// # Safety
/// Pointers as in `mpi.h`.
#[unsafe(export_name = "PMPI_Group_union")]
pub unsafe extern "C" fn MPI_Group_union(group1: Raw, group2: Raw, newgroup: *mut Raw) -> c_int {
    // SAFETY: the caller's contract.
    unsafe {
        combine("MPI_Group_union", group1, group2, newgroup, |a, b| {
            let mut v = a.ranks.clone();
            v.extend(b.ranks.iter().filter(|r| !a.ranks.contains(r)));
            v
        })
    }
}

/// # Safety
/// Pointers as in `mpi.h`.
#[unsafe(export_name = "PMPI_Group_intersection")]
pub unsafe extern "C" fn MPI_Group_intersection(
    group1: Raw,
    group2: Raw,
    newgroup: *mut Raw,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe {
        combine(
            "MPI_Group_intersection",
            group1,
            group2,
            newgroup,
            |a, b| {
                a.ranks
                    .iter()
                    .copied()
                    .filter(|r| b.ranks.contains(r))
                    .collect()
            },
        )
    }
}

/// # Safety
/// Pointers as in `mpi.h`.
#[unsafe(export_name = "PMPI_Group_difference")]
pub unsafe extern "C" fn MPI_Group_difference(
    group1: Raw,
    group2: Raw,
    newgroup: *mut Raw,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe {
        combine("MPI_Group_difference", group1, group2, newgroup, |a, b| {
            a.ranks
                .iter()
                .copied()
                .filter(|r| !b.ranks.contains(r))
                .collect()
        })
    }
}

/// The group ranks `ranks` names, checked: in range, no repeats.
fn checked(call: &str, g: &Group, ranks: &[c_int]) -> Result<Vec<u32>, c_int> {
    let mut seen = vec![false; g.ranks.len()];
    ranks
        .iter()
        .map(|&r| {
            if r < 0 || r as u32 >= g.size() {
                return Err(fail(
                    MPI_COMM_WORLD,
                    MPI_ERR_RANK,
                    format!("{call}: rank {r} is outside the group (size {})", g.size()),
                ));
            }
            if std::mem::replace(&mut seen[r as usize], true) {
                return Err(fail(
                    MPI_COMM_WORLD,
                    MPI_ERR_RANK,
                    format!("{call}: rank {r} is named twice"),
                ));
            }
            Ok(r as u32)
        })
        .collect()
}

/// # Safety
/// Pointers as in `mpi.h`.
#[unsafe(export_name = "PMPI_Group_incl")]
pub unsafe extern "C" fn MPI_Group_incl(
    group: Raw,
    n: c_int,
    ranks: *const c_int,
    newgroup: *mut Raw,
) -> c_int {
    const CALL: &str = "MPI_Group_incl";
    let g = tri!(get(CALL, group));
    // SAFETY: the caller's contract.
    let rs = unsafe { slice(ranks, n.max(0) as usize) };
    let idx = tri!(checked(CALL, &g, rs));
    let ng = Group {
        ranks: idx.iter().map(|&i| g.ranks[i as usize]).collect(),
    };
    // SAFETY: the caller's contract.
    unsafe { put(newgroup, insert(Arc::new(ng))) };
    MPI_SUCCESS
}

/// # Safety
/// Pointers as in `mpi.h`.
#[unsafe(export_name = "PMPI_Group_excl")]
pub unsafe extern "C" fn MPI_Group_excl(
    group: Raw,
    n: c_int,
    ranks: *const c_int,
    newgroup: *mut Raw,
) -> c_int {
    const CALL: &str = "MPI_Group_excl";
    let g = tri!(get(CALL, group));
    // SAFETY: the caller's contract.
    let rs = unsafe { slice(ranks, n.max(0) as usize) };
    let idx = tri!(checked(CALL, &g, rs));
    let ng = Group {
        ranks: (0..g.size())
            .filter(|i| !idx.contains(i))
            .map(|i| g.ranks[i as usize])
            .collect(),
    };
    // SAFETY: the caller's contract.
    unsafe { put(newgroup, insert(Arc::new(ng))) };
    MPI_SUCCESS
}

/// The ranks of `n` (first, last, stride) triplets.
///
/// # Safety
/// `ranges` holds `n` triplets.
unsafe fn expand(
    call: &str,
    g: &Group,
    n: c_int,
    ranges: *const [c_int; 3],
) -> Result<Vec<c_int>, c_int> {
    // SAFETY: forwarded contract.
    let rs = unsafe { slice(ranges, n.max(0) as usize) };
    let mut out = Vec::new();
    for &[first, last, stride] in rs {
        if stride == 0 {
            return Err(fail(
                MPI_COMM_WORLD,
                MPI_ERR_ARG,
                format!("{call}: stride 0"),
            ));
        }
        let mut r = first;
        while (stride > 0 && r <= last) || (stride < 0 && r >= last) {
            out.push(r);
            if out.len() > g.ranks.len() {
                return Err(fail(
                    MPI_COMM_WORLD,
                    MPI_ERR_RANK,
                    format!("{call}: the ranges name more ranks than the group has"),
                ));
            }
            r += stride;
        }
    }
    Ok(out)
}

/// # Safety
/// Pointers as in `mpi.h`.
#[unsafe(export_name = "PMPI_Group_range_incl")]
pub unsafe extern "C" fn MPI_Group_range_incl(
    group: Raw,
    n: c_int,
    ranges: *const [c_int; 3],
    newgroup: *mut Raw,
) -> c_int {
    const CALL: &str = "MPI_Group_range_incl";
    let g = tri!(get(CALL, group));
    // SAFETY: the caller's contract.
    let rs = tri!(unsafe { expand(CALL, &g, n, ranges) });
    // SAFETY: rs is a live vector.
    unsafe { MPI_Group_incl(group, rs.len() as c_int, rs.as_ptr(), newgroup) }
}

/// # Safety
/// Pointers as in `mpi.h`.
#[unsafe(export_name = "PMPI_Group_range_excl")]
pub unsafe extern "C" fn MPI_Group_range_excl(
    group: Raw,
    n: c_int,
    ranges: *const [c_int; 3],
    newgroup: *mut Raw,
) -> c_int {
    const CALL: &str = "MPI_Group_range_excl";
    let g = tri!(get(CALL, group));
    // SAFETY: the caller's contract.
    let rs = tri!(unsafe { expand(CALL, &g, n, ranges) });
    // SAFETY: rs is a live vector.
    unsafe { MPI_Group_excl(group, rs.len() as c_int, rs.as_ptr(), newgroup) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compare_tells_order_from_membership() {
        let a = Group {
            ranks: vec![0, 1, 2],
        };
        let b = Group {
            ranks: vec![2, 1, 0],
        };
        let c = Group { ranks: vec![0, 1] };
        assert_eq!(a.compare(&a.clone()), MPI_IDENT);
        assert_eq!(a.compare(&b), MPI_SIMILAR);
        assert_eq!(a.compare(&c), MPI_UNEQUAL);
        assert_eq!(b.rank_of(0), Some(2));
        assert_eq!(c.rank_of(2), None);
    }
}
