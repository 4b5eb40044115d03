//! Process topologies: Cartesian grids, graphs and distributed graphs attached to
//! communicators, and `MPI_Dims_create`. Ranks are never reordered (`reorder` is allowed
//! to be ignored). A distributed graph keeps only this process's own edges, in and out;
//! `MPI_Dist_graph_create`, where any process may name any edge, sends each edge to its
//! two ends with one all-to-all exchange over the old communicator.

use std::os::raw::c_int;
use std::sync::Arc;

use crate::comm::{self, Communicator};
use crate::error::*;
use crate::group::{Group, put, slice, tri};
use crate::handle::Raw;
use crate::predef::*;
use crate::runtime::fail;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Topo {
    Cart {
        dims: Vec<c_int>,
        periods: Vec<bool>,
    },
    Graph {
        index: Vec<c_int>,
        edges: Vec<c_int>,
    },
    /// This process's edges: the neighbours it receives from and sends to, in order, with
    /// their weights (`None`: created with `MPI_UNWEIGHTED`).
    DistGraph {
        sources: Vec<c_int>,
        source_weights: Option<Vec<c_int>>,
        dests: Vec<c_int>,
        dest_weights: Option<Vec<c_int>>,
    },
}

impl Topo {
    /// Coordinates of `rank` in a grid of `dims` (row-major: the last dimension varies
    /// fastest).
    pub fn coords(dims: &[c_int], mut rank: c_int) -> Vec<c_int> {
        let mut out = vec![0; dims.len()];
        for i in (0..dims.len()).rev() {
            out[i] = rank % dims[i];
            rank /= dims[i];
        }
        out
    }

    /// The rank at `coords`, wrapped in periodic dimensions; `None` outside the grid.
    pub fn rank(dims: &[c_int], periods: &[bool], coords: &[c_int]) -> Option<c_int> {
        let mut r = 0;
        for i in 0..dims.len() {
            let mut c = coords[i];
            if periods[i] {
                c = c.rem_euclid(dims[i]);
            } else if c < 0 || c >= dims[i] {
                return None;
            }
            r = r * dims[i] + c;
        }
        Some(r)
    }
}

/// Balanced factors of `n` into `nd` dimensions, filling the zeros of `dims`.
pub fn dims_create(n: c_int, dims: &mut [c_int]) -> Result<(), String> {
    let fixed: i64 = dims
        .iter()
        .filter(|&&d| d > 0)
        .map(|&d| i64::from(d))
        .product();
    if dims.iter().any(|&d| d < 0) {
        return Err("a dimension is negative".into());
    }
    let free = dims.iter().filter(|&&d| d == 0).count();
    if fixed == 0 || i64::from(n) % fixed != 0 {
        return Err(format!(
            "{n} processes do not divide into the fixed dimensions"
        ));
    }
    let rest = i64::from(n) / fixed;
    if free == 0 {
        return if rest == 1 {
            Ok(())
        } else {
            Err(format!("the dimensions multiply to {fixed}, not {n}"))
        };
    }
    // The factorisation of `rest` into `free` factors whose largest and smallest differ
    // least (the standard asks for dimensions as close to each other as possible).
    let f = balanced(rest, free);
    let mut it = f.into_iter();
    for d in dims.iter_mut().filter(|d| **d == 0) {
        *d = it.next().unwrap_or(1) as c_int;
    }
    Ok(())
}

/// `n` as `k` factors, largest first, with the least spread between the largest and the
/// smallest: an exhaustive search over divisors (their number is small).
fn balanced(n: i64, k: usize) -> Vec<i64> {
    type Best = Option<((i64, Vec<i64>), Vec<i64>)>;
    fn go(n: i64, k: usize, cap: i64, best: &mut Best, cur: &mut Vec<i64>) {
        if k == 1 {
            if n <= cap {
                cur.push(n);
                // Least spread, then the largest smallest factors (compared from the
                // smallest up), as MPICH chooses.
                let score = (
                    cur[0] - n,
                    cur.iter().rev().map(|&x| -x).collect::<Vec<i64>>(),
                );
                if best.as_ref().is_none_or(|b| score < b.0) {
                    *best = Some((score, cur.clone()));
                }
                cur.pop();
            }
            return;
        }
        // The next factor d: a divisor of n, at most cap, with d^k >= n (the rest must
        // fit under d), largest first.
        let mut divs = Vec::new();
        let mut i = 1;
        while i * i <= n {
            if n % i == 0 {
                divs.push(i);
                divs.push(n / i);
            }
            i += 1;
        }
        divs.sort_unstable_by(|a, b| b.cmp(a));
        divs.dedup();
        for d in divs {
            if d > cap {
                continue;
            }
            // d^k < n (an overflowing power is large enough).
            if i64::try_from(k)
                .ok()
                .and_then(|k| u32::try_from(k).ok())
                .and_then(|k| d.checked_pow(k))
                .is_some_and(|p| p < n)
            {
                break;
            }
            cur.push(d);
            go(n / d, k - 1, d, best, cur);
            cur.pop();
        }
    }
    let mut best = None;
    go(n, k, n, &mut best, &mut Vec::new());
    best.map_or_else(|| vec![1; k], |b| b.1)
}

/// # Safety
/// `dims` holds `ndims` ints.
#[unsafe(export_name = "PMPI_Dims_create")]
pub unsafe extern "C" fn MPI_Dims_create(nnodes: c_int, ndims: c_int, dims: *mut c_int) -> c_int {
    if ndims < 0 || nnodes < 1 || (ndims > 0 && dims.is_null()) {
        return fail(
            MPI_COMM_WORLD,
            MPI_ERR_DIMS,
            format!("MPI_Dims_create: {nnodes} processes in {ndims} dimensions"),
        );
    }
    if ndims == 0 {
        return MPI_SUCCESS;
    }
    // SAFETY: ndims ints at a non-null pointer by contract.
    let d = unsafe { std::slice::from_raw_parts_mut(dims, ndims as usize) };
    match dims_create(nnodes, d) {
        Ok(()) => MPI_SUCCESS,
        Err(e) => fail(
            MPI_COMM_WORLD,
            MPI_ERR_DIMS,
            format!("MPI_Dims_create: {e}"),
        ),
    }
}

/// # Safety
/// Pointers as in `mpi.h`.
#[unsafe(export_name = "PMPI_Cart_create")]
pub unsafe extern "C" fn MPI_Cart_create(
    comm_old: Raw,
    ndims: c_int,
    dims: *const c_int,
    periods: *const c_int,
    _reorder: c_int,
    comm_cart: *mut Raw,
) -> c_int {
    const CALL: &str = "MPI_Cart_create";
    let c = tri!(comm::get(CALL, comm_old));
    if ndims < 0 {
        return fail(comm_old, MPI_ERR_DIMS, format!("{CALL}: ndims is {ndims}"));
    }
    // SAFETY: the caller's contract.
    let (d, p) = unsafe { (slice(dims, ndims as usize), slice(periods, ndims as usize)) };
    if d.iter().any(|&x| x <= 0) {
        return fail(comm_old, MPI_ERR_DIMS, format!("{CALL}: dimensions {d:?}"));
    }
    let n: i64 = d.iter().map(|&x| i64::from(x)).product();
    if n > i64::from(c.size()) {
        return fail(
            comm_old,
            MPI_ERR_DIMS,
            format!(
                "{CALL}: a grid of {n} needs more than the {} processes",
                c.size()
            ),
        );
    }
    let topo = Topo::Cart {
        dims: d.to_vec(),
        periods: p.iter().map(|&x| x != 0).collect(),
    };
    let members = Group {
        ranks: c.group.ranks[..n as usize].to_vec(),
    };
    let h = tri!(comm::create_sub(
        CALL,
        &c,
        comm_old,
        Arc::new(members),
        Some(topo)
    ));
    // SAFETY: the caller's contract.
    unsafe { put(comm_cart, h) };
    MPI_SUCCESS
}

/// A Cartesian communicator with its dimensions and periods.
type Cart = (Arc<Communicator>, Vec<c_int>, Vec<bool>);

fn cart(call: &str, comm: Raw) -> Result<Cart, c_int> {
    let c = comm::get(call, comm)?;
    match &c.topo {
        Some(Topo::Cart { dims, periods }) => {
            let (d, p) = (dims.clone(), periods.clone());
            Ok((c, d, p))
        }
        _ => Err(fail(
            comm,
            MPI_ERR_TOPOLOGY,
            format!("{call}: the communicator has no Cartesian topology"),
        )),
    }
}

/// # Safety
/// `status` valid for a write.
#[unsafe(export_name = "PMPI_Topo_test")]
pub unsafe extern "C" fn MPI_Topo_test(comm: Raw, status: *mut c_int) -> c_int {
    let c = tri!(comm::get("MPI_Topo_test", comm));
    let t = match &c.topo {
        Some(Topo::Cart { .. }) => MPI_CART,
        Some(Topo::Graph { .. }) => MPI_GRAPH,
        Some(Topo::DistGraph { .. }) => MPI_DIST_GRAPH,
        None => MPI_UNDEFINED,
    };
    // SAFETY: the caller's contract.
    unsafe { put(status, t) };
    MPI_SUCCESS
}

/// # Safety
/// `ndims` valid for a write.
#[unsafe(export_name = "PMPI_Cartdim_get")]
pub unsafe extern "C" fn MPI_Cartdim_get(comm: Raw, ndims: *mut c_int) -> c_int {
    let (_, d, _) = tri!(cart("MPI_Cartdim_get", comm));
    // SAFETY: the caller's contract.
    unsafe { put(ndims, d.len() as c_int) };
    MPI_SUCCESS
}

/// # Safety
/// Arrays hold `maxdims` ints.
#[unsafe(export_name = "PMPI_Cart_get")]
pub unsafe extern "C" fn MPI_Cart_get(
    comm: Raw,
    maxdims: c_int,
    dims: *mut c_int,
    periods: *mut c_int,
    coords: *mut c_int,
) -> c_int {
    let (c, d, p) = tri!(cart("MPI_Cart_get", comm));
    let me = Topo::coords(&d, c.rank as c_int);
    for i in 0..d.len().min(maxdims.max(0) as usize) {
        // SAFETY: i < maxdims, by the caller's contract.
        unsafe {
            put(dims.wrapping_add(i), d[i]);
            put(periods.wrapping_add(i), c_int::from(p[i]));
            put(coords.wrapping_add(i), me[i]);
        }
    }
    MPI_SUCCESS
}

/// # Safety
/// `coords` holds `maxdims` ints.
#[unsafe(export_name = "PMPI_Cart_coords")]
pub unsafe extern "C" fn MPI_Cart_coords(
    comm: Raw,
    rank: c_int,
    maxdims: c_int,
    coords: *mut c_int,
) -> c_int {
    const CALL: &str = "MPI_Cart_coords";
    let (c, d, _) = tri!(cart(CALL, comm));
    if rank < 0 || rank as u32 >= c.size() {
        return fail(
            comm,
            MPI_ERR_RANK,
            format!("{CALL}: rank {rank} is outside the grid"),
        );
    }
    let xs = Topo::coords(&d, rank);
    for (i, x) in xs.iter().enumerate().take(maxdims.max(0) as usize) {
        // SAFETY: i < maxdims, by the caller's contract.
        unsafe { put(coords.add(i), *x) };
    }
    MPI_SUCCESS
}

/// # Safety
/// `coords` holds the grid's number of dimensions; `rank` valid for a write.
#[unsafe(export_name = "PMPI_Cart_rank")]
pub unsafe extern "C" fn MPI_Cart_rank(comm: Raw, coords: *const c_int, rank: *mut c_int) -> c_int {
    const CALL: &str = "MPI_Cart_rank";
    let (_, d, p) = tri!(cart(CALL, comm));
    // SAFETY: the caller's contract.
    let xs = unsafe { slice(coords, d.len()) };
    match Topo::rank(&d, &p, xs) {
        // SAFETY: the caller's contract.
        Some(r) => unsafe { put(rank, r) },
        None => {
            return fail(
                comm,
                MPI_ERR_ARG,
                format!("{CALL}: coordinates {xs:?} are outside the grid {d:?}"),
            );
        }
    }
    MPI_SUCCESS
}

/// # Safety
/// Pointers valid for writes.
#[unsafe(export_name = "PMPI_Cart_shift")]
pub unsafe extern "C" fn MPI_Cart_shift(
    comm: Raw,
    direction: c_int,
    disp: c_int,
    rank_source: *mut c_int,
    rank_dest: *mut c_int,
) -> c_int {
    const CALL: &str = "MPI_Cart_shift";
    let (c, d, p) = tri!(cart(CALL, comm));
    if direction < 0 || direction as usize >= d.len() {
        return fail(
            comm,
            MPI_ERR_DIMS,
            format!("{CALL}: direction {direction} of {} dimensions", d.len()),
        );
    }
    let me = Topo::coords(&d, c.rank as c_int);
    let at = |off: c_int| {
        let mut x = me.clone();
        x[direction as usize] += off;
        Topo::rank(&d, &p, &x).unwrap_or(MPI_PROC_NULL)
    };
    // SAFETY: the caller's contract.
    unsafe {
        put(rank_source, at(-disp));
        put(rank_dest, at(disp));
    }
    MPI_SUCCESS
}

/// # Safety
/// `remain_dims` holds the grid's number of dimensions; `newcomm` valid for a write.
#[unsafe(export_name = "PMPI_Cart_sub")]
pub unsafe extern "C" fn MPI_Cart_sub(
    comm: Raw,
    remain_dims: *const c_int,
    newcomm: *mut Raw,
) -> c_int {
    const CALL: &str = "MPI_Cart_sub";
    let (c, d, p) = tri!(cart(CALL, comm));
    // SAFETY: the caller's contract.
    let keep: Vec<bool> = unsafe { slice(remain_dims, d.len()) }
        .iter()
        .map(|&x| x != 0)
        .collect();
    // Processes that agree on the dropped coordinates form one sub-grid; ranks in it
    // follow the kept coordinates (row-major), as the rank order of the parent does.
    let me = Topo::coords(&d, c.rank as c_int);
    let mut color = 0;
    let mut key = 0;
    for i in 0..d.len() {
        if keep[i] {
            key = key * d[i] + me[i];
        } else {
            color = color * d[i] + me[i];
        }
    }
    let sub = Topo::Cart {
        dims: (0..d.len()).filter(|&i| keep[i]).map(|i| d[i]).collect(),
        periods: (0..d.len()).filter(|&i| keep[i]).map(|i| p[i]).collect(),
    };
    let h = tri!(comm::split(CALL, &c, comm, color, key, Some(sub)));
    // SAFETY: the caller's contract.
    unsafe { put(newcomm, h) };
    MPI_SUCCESS
}

/// # Safety
/// Pointers as in `mpi.h`.
#[unsafe(export_name = "PMPI_Cart_map")]
pub unsafe extern "C" fn MPI_Cart_map(
    comm: Raw,
    ndims: c_int,
    dims: *const c_int,
    _periods: *const c_int,
    newrank: *mut c_int,
) -> c_int {
    let c = tri!(comm::get("MPI_Cart_map", comm));
    // SAFETY: the caller's contract.
    let n: i64 = unsafe { slice(dims, ndims.max(0) as usize) }
        .iter()
        .map(|&x| i64::from(x))
        .product();
    let r = if i64::from(c.rank) < n {
        c.rank as c_int
    } else {
        MPI_UNDEFINED
    };
    // SAFETY: the caller's contract.
    unsafe { put(newrank, r) };
    MPI_SUCCESS
}

/// # Safety
/// Pointers as in `mpi.h`.
#[unsafe(export_name = "PMPI_Graph_create")]
pub unsafe extern "C" fn MPI_Graph_create(
    comm_old: Raw,
    nnodes: c_int,
    index: *const c_int,
    edges: *const c_int,
    _reorder: c_int,
    comm_graph: *mut Raw,
) -> c_int {
    const CALL: &str = "MPI_Graph_create";
    let c = tri!(comm::get(CALL, comm_old));
    if nnodes < 0 || nnodes as u32 > c.size() {
        return fail(
            comm_old,
            MPI_ERR_ARG,
            format!("{CALL}: {nnodes} nodes for {} processes", c.size()),
        );
    }
    // SAFETY: the caller's contract.
    let idx = unsafe { slice(index, nnodes as usize) }.to_vec();
    let ne = idx.last().copied().unwrap_or(0).max(0) as usize;
    // SAFETY: the caller's contract.
    let e = unsafe { slice(edges, ne) }.to_vec();
    if e.iter().any(|&x| x < 0 || x >= nnodes) {
        return fail(
            comm_old,
            MPI_ERR_ARG,
            format!("{CALL}: an edge leaves the graph"),
        );
    }
    let members = Group {
        ranks: c.group.ranks[..nnodes as usize].to_vec(),
    };
    let topo = Topo::Graph {
        index: idx,
        edges: e,
    };
    let h = tri!(comm::create_sub(
        CALL,
        &c,
        comm_old,
        Arc::new(members),
        Some(topo)
    ));
    // SAFETY: the caller's contract.
    unsafe { put(comm_graph, h) };
    MPI_SUCCESS
}

fn graph(call: &str, comm: Raw) -> Result<(Vec<c_int>, Vec<c_int>), c_int> {
    let c = comm::get(call, comm)?;
    match &c.topo {
        Some(Topo::Graph { index, edges }) => Ok((index.clone(), edges.clone())),
        _ => Err(fail(
            comm,
            MPI_ERR_TOPOLOGY,
            format!("{call}: the communicator has no graph topology"),
        )),
    }
}

/// # Safety
/// Pointers valid for writes.
#[unsafe(export_name = "PMPI_Graphdims_get")]
pub unsafe extern "C" fn MPI_Graphdims_get(
    comm: Raw,
    nnodes: *mut c_int,
    nedges: *mut c_int,
) -> c_int {
    let (i, e) = tri!(graph("MPI_Graphdims_get", comm));
    // SAFETY: the caller's contract.
    unsafe {
        put(nnodes, i.len() as c_int);
        put(nedges, e.len() as c_int);
    }
    MPI_SUCCESS
}

/// # Safety
/// Arrays hold `maxindex` and `maxedges` ints.
#[unsafe(export_name = "PMPI_Graph_get")]
pub unsafe extern "C" fn MPI_Graph_get(
    comm: Raw,
    maxindex: c_int,
    maxedges: c_int,
    index: *mut c_int,
    edges: *mut c_int,
) -> c_int {
    let (i, e) = tri!(graph("MPI_Graph_get", comm));
    for (k, v) in i.iter().enumerate().take(maxindex.max(0) as usize) {
        // SAFETY: k < maxindex.
        unsafe { put(index.add(k), *v) };
    }
    for (k, v) in e.iter().enumerate().take(maxedges.max(0) as usize) {
        // SAFETY: k < maxedges.
        unsafe { put(edges.add(k), *v) };
    }
    MPI_SUCCESS
}

fn neighbours(i: &[c_int], e: &[c_int], rank: c_int) -> Option<Vec<c_int>> {
    let r = usize::try_from(rank).ok().filter(|&r| r < i.len())?;
    let lo = if r == 0 { 0 } else { i[r - 1] as usize };
    Some(e[lo..i[r] as usize].to_vec())
}

/// # Safety
/// `nneighbors` valid for a write.
#[unsafe(export_name = "PMPI_Graph_neighbors_count")]
pub unsafe extern "C" fn MPI_Graph_neighbors_count(
    comm: Raw,
    rank: c_int,
    nneighbors: *mut c_int,
) -> c_int {
    const CALL: &str = "MPI_Graph_neighbors_count";
    let (i, e) = tri!(graph(CALL, comm));
    match neighbours(&i, &e, rank) {
        // SAFETY: the caller's contract.
        Some(v) => unsafe { put(nneighbors, v.len() as c_int) },
        None => {
            return fail(
                comm,
                MPI_ERR_RANK,
                format!("{CALL}: rank {rank} is not a node"),
            );
        }
    }
    MPI_SUCCESS
}

/// # Safety
/// `neighbors` holds `maxneighbors` ints.
#[unsafe(export_name = "PMPI_Graph_neighbors")]
pub unsafe extern "C" fn MPI_Graph_neighbors(
    comm: Raw,
    rank: c_int,
    maxneighbors: c_int,
    neighbors: *mut c_int,
) -> c_int {
    const CALL: &str = "MPI_Graph_neighbors";
    let (i, e) = tri!(graph(CALL, comm));
    let Some(v) = neighbours(&i, &e, rank) else {
        return fail(
            comm,
            MPI_ERR_RANK,
            format!("{CALL}: rank {rank} is not a node"),
        );
    };
    for (k, x) in v.iter().enumerate().take(maxneighbors.max(0) as usize) {
        // SAFETY: k < maxneighbors.
        unsafe { put(neighbors.add(k), *x) };
    }
    MPI_SUCCESS
}

/// # Safety
/// Pointers as in `mpi.h`.
#[unsafe(export_name = "PMPI_Graph_map")]
pub unsafe extern "C" fn MPI_Graph_map(
    comm: Raw,
    nnodes: c_int,
    _index: *const c_int,
    _edges: *const c_int,
    newrank: *mut c_int,
) -> c_int {
    let c = tri!(comm::get("MPI_Graph_map", comm));
    let r = if (c.rank as c_int) < nnodes {
        c.rank as c_int
    } else {
        MPI_UNDEFINED
    };
    // SAFETY: the caller's contract.
    unsafe { put(newrank, r) };
    MPI_SUCCESS
}

// ---- distributed graphs ----------------------------------------------------------------

/// `mpi.h`'s `MPI_UNWEIGHTED` and `MPI_WEIGHTS_EMPTY`: addresses no array has.
const UNWEIGHTED: usize = 10;
const WEIGHTS_EMPTY: usize = 11;
/// `MPI_INT`, for the exchange of `MPI_Dist_graph_create`.
const INT: Raw = 0x209;

/// `n` weights at `w`: `None` for `MPI_UNWEIGHTED`; an error for `MPI_WEIGHTS_EMPTY` (or
/// a null array) with edges to weigh.
///
/// # Safety
/// `w` holds `n` ints unless it is one of the special addresses.
unsafe fn weights(w: *const c_int, n: usize) -> Result<Option<Vec<c_int>>, String> {
    match w as usize {
        UNWEIGHTED => Ok(None),
        // A null array is taken as empty (MPICH's tests pass NULL for no edges).
        WEIGHTS_EMPTY | 0 if n > 0 => Err(format!("{n} edges have no weights")),
        WEIGHTS_EMPTY | 0 => Ok(Some(Vec::new())),
        // SAFETY: the caller's contract.
        _ => Ok(Some(unsafe { slice(w, n) }.to_vec())),
    }
}

/// The communicator of a distributed graph: every process of `comm_old`, with its own
/// edges.
fn dist_graph_comm(call: &str, comm_old: Raw, topo: Topo, out: *mut Raw) -> c_int {
    let c = tri!(comm::get(call, comm_old));
    let size = c.size() as c_int;
    if let Topo::DistGraph { sources, dests, .. } = &topo
        && let Some(r) = sources.iter().chain(dests).find(|&&r| r < 0 || r >= size)
    {
        return fail(
            comm_old,
            MPI_ERR_RANK,
            format!("{call}: neighbour {r} is outside the communicator (size {size})"),
        );
    }
    let h = tri!(comm::create_sub(
        call,
        &c,
        comm_old,
        c.group.clone(),
        Some(topo)
    ));
    // SAFETY: the caller's contract.
    unsafe { put(out, h) };
    MPI_SUCCESS
}

/// # Safety
/// Arrays hold `indegree` and `outdegree` ints (weights unless `MPI_UNWEIGHTED` or
/// `MPI_WEIGHTS_EMPTY`); `comm_dist_graph` valid for a write.
#[unsafe(export_name = "PMPI_Dist_graph_create_adjacent")]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn MPI_Dist_graph_create_adjacent(
    comm_old: Raw,
    indegree: c_int,
    sources: *const c_int,
    sourceweights: *const c_int,
    outdegree: c_int,
    destinations: *const c_int,
    destweights: *const c_int,
    _info: Raw,
    _reorder: c_int,
    comm_dist_graph: *mut Raw,
) -> c_int {
    const CALL: &str = "MPI_Dist_graph_create_adjacent";
    if indegree < 0 || outdegree < 0 {
        return fail(
            comm_old,
            MPI_ERR_ARG,
            format!("{CALL}: degrees {indegree} and {outdegree}"),
        );
    }
    let (ni, no) = (indegree as usize, outdegree as usize);
    // SAFETY: the caller's contract.
    let w = unsafe { (weights(sourceweights, ni), weights(destweights, no)) };
    let (source_weights, dest_weights) = match w {
        (Ok(s), Ok(d)) => (s, d),
        (Err(e), _) | (_, Err(e)) => return fail(comm_old, MPI_ERR_ARG, format!("{CALL}: {e}")),
    };
    let topo = Topo::DistGraph {
        // SAFETY: the caller's contract.
        sources: unsafe { slice(sources, ni) }.to_vec(),
        source_weights,
        // SAFETY: the caller's contract.
        dests: unsafe { slice(destinations, no) }.to_vec(),
        dest_weights,
    };
    dist_graph_comm(CALL, comm_old, topo, comm_dist_graph)
}

/// # Safety
/// `sources` and `degrees` hold `n` ints, `destinations` (and `weights`, unless special)
/// the sum of `degrees`; `comm_dist_graph` valid for a write.
#[unsafe(export_name = "PMPI_Dist_graph_create")]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn MPI_Dist_graph_create(
    comm_old: Raw,
    n: c_int,
    sources: *const c_int,
    degrees: *const c_int,
    destinations: *const c_int,
    weights_in: *const c_int,
    _info: Raw,
    _reorder: c_int,
    comm_dist_graph: *mut Raw,
) -> c_int {
    const CALL: &str = "MPI_Dist_graph_create";
    let c = tri!(comm::get(CALL, comm_old));
    let size = c.size() as usize;
    // SAFETY: the caller's contract.
    let (srcs, degs) = unsafe {
        (
            slice(sources, n.max(0) as usize),
            slice(degrees, n.max(0) as usize),
        )
    };
    if n < 0 || degs.iter().any(|&d| d < 0) {
        return fail(
            comm_old,
            MPI_ERR_ARG,
            format!("{CALL}: n {n}, degrees {degs:?}"),
        );
    }
    let total: usize = degs.iter().map(|&d| d as usize).sum();
    // SAFETY: the caller's contract.
    let dsts = unsafe { slice(destinations, total) };
    // SAFETY: the caller's contract.
    let w = match unsafe { weights(weights_in, total) } {
        Ok(w) => w,
        Err(e) => return fail(comm_old, MPI_ERR_ARG, format!("{CALL}: {e}")),
    };
    let weighted = w.is_some();
    let ends = srcs
        .iter()
        .zip(degs)
        .flat_map(|(&s, &d)| std::iter::repeat_n(s, d as usize));
    // Each edge goes to both its ends as (0: an edge out to, 1: an edge in from, peer,
    // weight).
    let mut to: Vec<Vec<c_int>> = vec![Vec::new(); size];
    for (k, (s, d)) in ends.zip(dsts.iter().copied()).enumerate() {
        if s < 0 || d < 0 || s as usize >= size || d as usize >= size {
            return fail(
                comm_old,
                MPI_ERR_RANK,
                format!("{CALL}: the edge {s} -> {d} leaves the communicator (size {size})"),
            );
        }
        let wt = w.as_ref().map_or(1, |w| w[k]);
        to[s as usize].extend([0, d, wt]);
        to[d as usize].extend([1, s, wt]);
    }
    let scounts: Vec<c_int> = to.iter().map(|v| v.len() as c_int).collect();
    let mut rcounts = vec![0; size];
    // SAFETY: both arrays hold one int per process.
    let rc = unsafe {
        crate::coll::MPI_Alltoall(
            scounts.as_ptr().cast(),
            1,
            INT,
            rcounts.as_mut_ptr().cast(),
            1,
            INT,
            comm_old,
        )
    };
    if rc != MPI_SUCCESS {
        return rc;
    }
    let displs = |counts: &[c_int]| -> Vec<c_int> {
        counts
            .iter()
            .scan(0, |at, &n| {
                let d = *at;
                *at += n;
                Some(d)
            })
            .collect()
    };
    let (sdispls, rdispls) = (displs(&scounts), displs(&rcounts));
    let sbuf: Vec<c_int> = to.concat();
    let mut rbuf = vec![0; rcounts.iter().map(|&n| n as usize).sum()];
    // SAFETY: counts and displacements describe the two buffers.
    let rc = unsafe {
        crate::coll::MPI_Alltoallv(
            sbuf.as_ptr().cast(),
            scounts.as_ptr(),
            sdispls.as_ptr(),
            INT,
            rbuf.as_mut_ptr().cast(),
            rcounts.as_ptr(),
            rdispls.as_ptr(),
            INT,
            comm_old,
        )
    };
    if rc != MPI_SUCCESS {
        return rc;
    }
    let (mut ins, mut outs) = ((Vec::new(), Vec::new()), (Vec::new(), Vec::new()));
    for e in rbuf.chunks_exact(3) {
        let side = if e[0] == 0 { &mut outs } else { &mut ins };
        side.0.push(e[1]);
        side.1.push(e[2]);
    }
    let topo = Topo::DistGraph {
        sources: ins.0,
        source_weights: weighted.then_some(ins.1),
        dests: outs.0,
        dest_weights: weighted.then_some(outs.1),
    };
    dist_graph_comm(CALL, comm_old, topo, comm_dist_graph)
}

/// This process's edges in a distributed graph.
fn dist_graph(call: &str, comm: Raw) -> Result<Topo, c_int> {
    let c = comm::get(call, comm)?;
    match &c.topo {
        Some(t @ Topo::DistGraph { .. }) => Ok(t.clone()),
        _ => Err(fail(
            comm,
            MPI_ERR_TOPOLOGY,
            format!("{call}: the communicator has no distributed graph topology"),
        )),
    }
}

/// # Safety
/// Pointers valid for writes.
#[unsafe(export_name = "PMPI_Dist_graph_neighbors_count")]
pub unsafe extern "C" fn MPI_Dist_graph_neighbors_count(
    comm: Raw,
    indegree: *mut c_int,
    outdegree: *mut c_int,
    weighted: *mut c_int,
) -> c_int {
    let Topo::DistGraph {
        sources,
        source_weights,
        dests,
        ..
    } = tri!(dist_graph("MPI_Dist_graph_neighbors_count", comm))
    else {
        unreachable!("dist_graph returns distributed graphs")
    };
    // SAFETY: the caller's contract.
    unsafe {
        put(indegree, sources.len() as c_int);
        put(outdegree, dests.len() as c_int);
        put(weighted, c_int::from(source_weights.is_some()));
    }
    MPI_SUCCESS
}

/// Up to `max` of `v` into `out`, unless `out` is `MPI_UNWEIGHTED` or null.
///
/// # Safety
/// `out` holds `max` ints unless special.
unsafe fn put_all(out: *mut c_int, max: c_int, v: &[c_int]) {
    if matches!(out as usize, 0 | UNWEIGHTED | WEIGHTS_EMPTY) {
        return;
    }
    for (k, x) in v.iter().enumerate().take(max.max(0) as usize) {
        // SAFETY: k < max.
        unsafe { put(out.add(k), *x) };
    }
}

/// # Safety
/// Arrays hold `maxindegree` and `maxoutdegree` ints (weights unless `MPI_UNWEIGHTED`).
#[unsafe(export_name = "PMPI_Dist_graph_neighbors")]
pub unsafe extern "C" fn MPI_Dist_graph_neighbors(
    comm: Raw,
    maxindegree: c_int,
    sources: *mut c_int,
    sourceweights: *mut c_int,
    maxoutdegree: c_int,
    destinations: *mut c_int,
    destweights: *mut c_int,
) -> c_int {
    let Topo::DistGraph {
        sources: s,
        source_weights: sw,
        dests: d,
        dest_weights: dw,
    } = tri!(dist_graph("MPI_Dist_graph_neighbors", comm))
    else {
        unreachable!("dist_graph returns distributed graphs")
    };
    // SAFETY: the caller's contract.
    unsafe {
        put_all(sources, maxindegree, &s);
        put_all(destinations, maxoutdegree, &d);
        put_all(
            sourceweights,
            maxindegree,
            sw.as_deref().unwrap_or_default(),
        );
        put_all(destweights, maxoutdegree, dw.as_deref().unwrap_or_default());
    }
    MPI_SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dims_are_balanced_and_keep_fixed_entries() {
        let mut d = [0, 0];
        dims_create(12, &mut d).unwrap();
        assert_eq!(d, [4, 3]);
        let mut d = [0, 0, 0];
        dims_create(8, &mut d).unwrap();
        assert_eq!(d, [2, 2, 2]);
        let mut d = [0, 3, 0];
        dims_create(12, &mut d).unwrap();
        assert_eq!(d, [2, 3, 2]);
        let mut d = [0, 5];
        assert!(dims_create(12, &mut d).is_err());
        let mut d = [7];
        dims_create(7, &mut d).unwrap();
        assert_eq!(d, [7]);
        // The closest pair, not the one prime factors dealt out give.
        let mut d = [0, 0];
        dims_create(72, &mut d).unwrap();
        assert_eq!(d, [9, 8]);
        let mut d = [0, 0];
        dims_create(240, &mut d).unwrap();
        assert_eq!(d, [16, 15]);
    }

    #[test]
    fn cartesian_ranks_and_coordinates_agree() {
        let dims = [2, 3];
        for r in 0..6 {
            let c = Topo::coords(&dims, r);
            assert_eq!(Topo::rank(&dims, &[false, false], &c), Some(r));
        }
        assert_eq!(Topo::rank(&dims, &[false, true], &[1, 3]), Some(3));
        assert_eq!(Topo::rank(&dims, &[false, false], &[2, 0]), None);
    }
}
