//! Where the processes a launcher starts on this host run: each gets an equal share of the
//! cores the launcher itself may use, as Open MPI binds ranks to cores (it does so by
//! default for two processes, the case that matters most on a small machine).
//!
//! Why bind at all: the engine's waits spin, then sleep. Waking a process that slept often
//! puts it on its waker's core (the scheduler's wake-affine placement), and two processes
//! that then spin in turn on one core while the other core idles pay up to a spin budget
//! per message (measured: 1-2 ms instead of 3 us for an 8-byte exchange between two
//! processes of a 2-core VM, after one of them computed for 50 ms). With a share each,
//! that cannot happen.
//!
//! - Shares are whole cores (all the hardware threads of one, from sysfs) while there are
//!   at least as many cores as processes, then single hardware threads.
//! - Nothing is bound when the processes outnumber the CPUs (the scheduler must then move
//!   them around), for a job of one process, or with [`Placement::Free`].
//! - The share is taken from the launcher's own affinity, so `taskset` or a cgroup around
//!   the launcher is respected.
//! - The processes learn how many CPUs the job had before binding from
//!   `BULKWIRE_HOST_CPUS` ([`crate::JobEnv::cpus`]): a bound process sees only its share,
//!   which would make every job look oversubscribed to a wait policy.

use std::io;

/// The CPUs the job's processes on this host share, as the launcher saw them.
pub const ENV_HOST_CPUS: &str = "BULKWIRE_HOST_CPUS";

/// How a launcher places the processes it starts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Placement {
    /// Each process gets an equal share of the launcher's cores (see the module docs).
    #[default]
    Share,
    /// The processes run wherever the scheduler puts them.
    Free,
}

impl Placement {
    /// `share` or `none`.
    pub fn parse(s: &str) -> Option<Placement> {
        match s.trim() {
            "share" => Some(Placement::Share),
            "none" => Some(Placement::Free),
            _ => None,
        }
    }
}

/// A set of CPUs, as `sched_setaffinity` takes it.
#[derive(Clone, Copy)]
pub struct CpuSet(libc::cpu_set_t);

impl std::fmt::Debug for CpuSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.cpus()).finish()
    }
}

impl CpuSet {
    /// The CPUs the calling thread may run on.
    pub fn current() -> io::Result<CpuSet> {
        // SAFETY: an all-zero cpu_set_t is a valid empty set; the kernel writes at most
        // its size.
        let mut s: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        // SAFETY: valid pointer and size.
        let r = unsafe { libc::sched_getaffinity(0, size_of::<libc::cpu_set_t>(), &mut s) };
        if r != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(CpuSet(s))
    }

    /// The set of `cpus` (numbers past the set's capacity are left out).
    pub fn of(cpus: &[usize]) -> CpuSet {
        // SAFETY: as above.
        let mut s: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        for &c in cpus.iter().filter(|&&c| c < Self::CAPACITY) {
            // SAFETY: c is below the set's capacity.
            unsafe { libc::CPU_SET(c, &mut s) };
        }
        CpuSet(s)
    }

    const CAPACITY: usize = 8 * size_of::<libc::cpu_set_t>();

    /// The CPU numbers in the set, ascending.
    pub fn cpus(&self) -> Vec<usize> {
        (0..Self::CAPACITY)
            // SAFETY: c is below the set's capacity.
            .filter(|&c| unsafe { libc::CPU_ISSET(c, &self.0) })
            .collect()
    }

    /// Restricts the calling thread, and the threads and processes it starts from now on,
    /// to this set. Only a system call: fit for a child between fork and exec.
    pub fn apply(&self) -> io::Result<()> {
        // SAFETY: valid pointer and size; sched_setaffinity is async-signal-safe.
        let r = unsafe { libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &self.0) };
        if r != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

/// Where the processes a launcher starts go.
#[derive(Clone, Debug)]
pub struct Plan {
    /// Each process's share, by its index among the processes started here.
    pub shares: Vec<CpuSet>,
    /// The CPUs shared out (what [`crate::JobEnv::cpus`] answers in the processes).
    pub cpus: usize,
}

impl Plan {
    /// The environment that tells a bound process how many CPUs the job has here.
    pub fn env(&self) -> (&'static str, String) {
        (ENV_HOST_CPUS, self.cpus.to_string())
    }
}

/// The shares of the `n` processes a launcher is about to start here, or `None` when they
/// are not to be bound (see the module docs).
pub fn plan(n: u32, placement: Placement) -> Option<Plan> {
    if placement == Placement::Free || n < 2 {
        return None;
    }
    let allowed = CpuSet::current().ok()?.cpus();
    let shares = split(&cores_of(&allowed, &read_siblings), n as usize)?;
    Some(Plan {
        shares: shares.iter().map(|s| CpuSet::of(s)).collect(),
        cpus: allowed.len(),
    })
}

/// The CPUs of `allowed` grouped by physical core (as `siblings` of a CPU reports its
/// core's hardware threads), cores in the order of their first CPU.
fn cores_of(allowed: &[usize], siblings: &dyn Fn(usize) -> Option<Vec<usize>>) -> Vec<Vec<usize>> {
    let mut cores: Vec<Vec<usize>> = Vec::new();
    let mut seen = vec![false; allowed.iter().max().map_or(0, |&m| m + 1)];
    for &c in allowed {
        if seen[c] {
            continue;
        }
        let mut core: Vec<usize> = siblings(c)
            .unwrap_or_default()
            .into_iter()
            .filter(|s| allowed.contains(s) && !seen[*s])
            .collect();
        if !core.contains(&c) {
            core.push(c);
        }
        core.sort_unstable();
        for &s in &core {
            seen[s] = true;
        }
        cores.push(core);
    }
    cores
}

/// Equal, contiguous shares of `cores` for `n` processes: whole cores while there are
/// enough, else single CPUs; `None` when the CPUs are fewer than the processes.
fn split(cores: &[Vec<usize>], n: usize) -> Option<Vec<Vec<usize>>> {
    let cpus: Vec<usize> = cores.iter().flatten().copied().collect();
    if n == 0 || cpus.len() < n {
        return None;
    }
    let share = |len: usize, i: usize| (i * len / n)..((i + 1) * len / n);
    Some(if cores.len() >= n {
        (0..n)
            .map(|i| cores[share(cores.len(), i)].concat())
            .collect()
    } else {
        (0..n)
            .map(|i| cpus[share(cpus.len(), i)].to_vec())
            .collect()
    })
}

/// The hardware threads of `cpu`'s core, from sysfs.
fn read_siblings(cpu: usize) -> Option<Vec<usize>> {
    let dir = format!("/sys/devices/system/cpu/cpu{cpu}/topology");
    let text = std::fs::read_to_string(format!("{dir}/core_cpus_list"))
        .or_else(|_| std::fs::read_to_string(format!("{dir}/thread_siblings_list")))
        .ok()?;
    parse_list(&text)
}

/// A kernel CPU list: `0-3,8,10-11`.
fn parse_list(s: &str) -> Option<Vec<usize>> {
    let mut out = Vec::new();
    for part in s.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (a.parse::<usize>().ok()?, b.parse::<usize>().ok()?);
                if a > b || b - a > 1 << 16 {
                    return None;
                }
                out.extend(a..=b);
            }
            None => out.push(part.parse().ok()?),
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_cpu_lists_parse() {
        assert_eq!(
            parse_list("0-3,8,10-11\n"),
            Some(vec![0, 1, 2, 3, 8, 10, 11])
        );
        assert_eq!(parse_list("5"), Some(vec![5]));
        assert_eq!(parse_list("3-1"), None);
        assert_eq!(parse_list("x"), None);
    }

    /// Four cores of two threads numbered the usual way: core k is CPUs k and k+4.
    fn smt(c: usize) -> Option<Vec<usize>> {
        Some(vec![c % 4, c % 4 + 4])
    }

    #[test]
    fn hardware_threads_of_a_core_stay_together() {
        let all: Vec<usize> = (0..8).collect();
        let cores = cores_of(&all, &smt);
        assert_eq!(cores, vec![vec![0, 4], vec![1, 5], vec![2, 6], vec![3, 7]]);
        assert_eq!(
            split(&cores, 2).unwrap(),
            vec![vec![0, 4, 1, 5], vec![2, 6, 3, 7]]
        );
        // More processes than cores: single threads, siblings next to each other.
        assert_eq!(
            split(&cores, 8).unwrap(),
            (0..8)
                .map(|i| vec![[0, 4, 1, 5, 2, 6, 3, 7][i]])
                .collect::<Vec<_>>()
        );
        // A launcher restricted to some CPUs (taskset): only those are shared out.
        let some = cores_of(&[1, 2, 5], &smt);
        assert_eq!(some, vec![vec![1, 5], vec![2]]);
        assert_eq!(split(&some, 2).unwrap(), vec![vec![1, 5], vec![2]]);
    }

    #[test]
    fn shares_are_equal_and_cover_everything_once() {
        for ncpu in 1..=12 {
            let cores: Vec<Vec<usize>> = (0..ncpu).map(|c| vec![c]).collect();
            for n in 1..=ncpu {
                let s = split(&cores, n).unwrap();
                assert_eq!(s.len(), n);
                let sizes: Vec<usize> = s.iter().map(Vec::len).collect();
                let (lo, hi) = (sizes.iter().min().unwrap(), sizes.iter().max().unwrap());
                assert!(hi - lo <= 1, "{ncpu} cpus, {n} procs: {sizes:?}");
                assert_eq!(s.concat(), (0..ncpu).collect::<Vec<_>>());
            }
            assert!(split(&cores, ncpu + 1).is_none(), "oversubscribed");
        }
    }

    #[test]
    fn without_topology_every_cpu_is_a_core() {
        assert_eq!(
            cores_of(&[0, 1, 2], &|_| None),
            vec![vec![0], vec![1], vec![2]]
        );
    }

    #[test]
    fn placement_names() {
        assert_eq!(Placement::parse("share"), Some(Placement::Share));
        assert_eq!(Placement::parse(""), None);
        assert_eq!(Placement::parse("none"), Some(Placement::Free));
        assert_eq!(Placement::parse("core"), None);
    }

    #[test]
    fn a_set_round_trips_and_binds_this_thread() {
        let now = CpuSet::current().unwrap();
        let cpus = now.cpus();
        assert!(!cpus.is_empty());
        assert_eq!(CpuSet::of(&cpus).cpus(), cpus);
        // On a thread of its own, so the test binary's other threads stay free.
        let first = cpus[0];
        std::thread::spawn(move || {
            CpuSet::of(&[first]).apply().unwrap();
            assert_eq!(CpuSet::current().unwrap().cpus(), vec![first]);
        })
        .join()
        .unwrap();
    }
}
