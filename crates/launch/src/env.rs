//! What a process knows about the job it runs in ([`JobEnv`]) and about how it would start
//! one itself ([`LaunchConfig`]). Launchers hand these over in environment variables
//! (`BULKWIRE_*`, or Slurm's and Open MPI's own); `bulkwire-config` reads them at the edge.

use std::net::SocketAddr;

use crate::bind::Placement;
use crate::secret::Secret;
use crate::sys::fnv1a64;

/// This process's rank (0..nprocs).
pub const ENV_RANK: &str = "BULKWIRE_RANK";
/// The job size.
pub const ENV_NPROCS: &str = "BULKWIRE_NPROCS";
/// `host:port` of the rendezvous server.
pub const ENV_RENDEZVOUS: &str = "BULKWIRE_RENDEZVOUS";
/// The job's secret, 64 hex digits ([`Secret`]).
pub const ENV_SECRET: &str = "BULKWIRE_SECRET";
/// A file holding the job's secret (64 hex digits, private to its owner).
pub const ENV_SECRET_FILE: &str = "BULKWIRE_SECRET_FILE";
/// The job id (decimal u64, or any string, which is hashed).
pub const ENV_JOB: &str = "BULKWIRE_JOB";
/// Overrides [`crate::host_id`] (tests that pretend to be several hosts on one machine).
pub const ENV_HOST_ID: &str = "BULKWIRE_HOST_ID";
/// Set by a process that starts a job for a later SPMD section of a BSPlib program
/// (`bsp_begin` after `bsp_end`): which function the started processes run, as the C
/// library encodes it (see `bulkwire-capi`).
pub const ENV_SPMD_ENTRY: &str = "BULKWIRE_SPMD_ENTRY";

/// Who started this process (where rank and size came from).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Launcher {
    /// `bsprun`, self-spawn, or a user setting `BULKWIRE_RANK`/`BULKWIRE_NPROCS`.
    Bulkwire,
    /// `srun`: `SLURM_PROCID`, `SLURM_NTASKS`.
    Slurm,
    /// Open MPI's `mpirun`: `OMPI_COMM_WORLD_RANK`, `OMPI_COMM_WORLD_SIZE`.
    OpenMpi,
    /// A launcher speaking PMI (MPICH's Hydra `mpiexec`): `PMI_RANK`, `PMI_SIZE`.
    Pmi,
}

/// The identity of a process in a job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobEnv {
    pub rank: u32,
    pub nprocs: u32,
    /// The job's credential: a process proves it to join, the server proves it back, and
    /// the packet cookie and keys derive from it.
    pub secret: Secret,
    pub job_id: u64,
    /// The rendezvous server (run by the launcher).
    pub rendezvous: SocketAddr,
    pub launcher: Launcher,
    /// Overrides [`crate::host_id`] (tests that pretend to be several hosts).
    pub host_id: Option<String>,
    /// The CPUs the job's processes on this host share, as the launcher that bound them
    /// saw them (a bound process sees only its share).
    pub host_cpus: Option<usize>,
    /// A job started for a later SPMD section: the function its processes run
    /// ([`ENV_SPMD_ENTRY`]).
    pub entry: Option<String>,
}

impl JobEnv {
    /// Rank `rank` of a job of `nprocs` that bulkwire's own rendezvous at `rendezvous`
    /// forms, with nothing overridden (host, CPUs, SPMD entry).
    pub fn bulkwire(
        rank: u32,
        nprocs: u32,
        secret: crate::Secret,
        job_id: u64,
        rendezvous: SocketAddr,
    ) -> JobEnv {
        JobEnv {
            rank,
            nprocs,
            secret,
            job_id,
            rendezvous,
            launcher: Launcher::Bulkwire,
            host_id: None,
            host_cpus: None,
            entry: None,
        }
    }

    /// The identity of this process's host: the override, else [`crate::host_id`].
    pub fn host(&self) -> String {
        self.host_id.clone().unwrap_or_else(crate::host_id)
    }

    /// The CPUs of this host the job's processes share: what the launcher said, else the
    /// CPUs this process may run on.
    pub fn cpus(&self) -> usize {
        self.host_cpus.unwrap_or_else(available_cpus)
    }

    /// Carried by every data packet of the job; packets with another cookie are dropped
    /// (derived from the secret: a public tag, not a credential).
    pub fn cookie(&self) -> u32 {
        self.secret.cookie()
    }

    /// The environment a launcher gives rank `rank` of this job (`self.rank` is ignored).
    pub fn vars_for(&self, rank: u32) -> Vec<(&'static str, String)> {
        let mut v = vec![
            (ENV_RANK, rank.to_string()),
            (ENV_NPROCS, self.nprocs.to_string()),
            (ENV_RENDEZVOUS, self.rendezvous.to_string()),
            // The environment, never the command line: /proc/PID/environ is readable by
            // the process's owner and root only.
            (ENV_SECRET, self.secret.to_hex()),
            (ENV_JOB, self.job_id.to_string()),
        ];
        if let Some(e) = &self.entry {
            v.push((ENV_SPMD_ENTRY, e.clone()));
        }
        v
    }
}

/// The job id of a job name: the number itself if it is one, else a stable hash of it.
pub fn job_id_from_name(name: &str) -> u64 {
    let j = name.trim();
    j.parse::<u64>().unwrap_or_else(|_| fnv1a64(j))
}

/// The CPUs this process may run on.
pub fn available_cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// How this process takes part in jobs: the job its launcher started it in, and how it
/// starts one itself when it was not launched (self-spawn: `bsp_begin(P)`,
/// `bw_init_spawn`). Built at the edge by `bulkwire-config`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LaunchConfig {
    /// The job this process was started in, with its rendezvous; `None`: not launched,
    /// or launched by another launcher whose bootstrap service forms the job ([`boot`]).
    ///
    /// [`boot`]: LaunchConfig::boot
    pub job: Option<JobEnv>,
    /// Started by `srun`, `mpirun` or `mpiexec` with no rendezvous given: the job forms
    /// through that launcher's bootstrap service ([`crate::bootstrap`]).
    pub boot: Option<crate::bootstrap::BootOffer>,
    /// Every process must have joined its job within this time.
    pub join_timeout: std::time::Duration,
    /// The remote shell a multi-host launch starts each other host's agent with, called
    /// as `RSH... HOST COMMAND...` (default `ssh`).
    pub rsh: Vec<String>,
    /// A job size given without a job (`BULKWIRE_NPROCS` alone): what a job started now
    /// would have, for `bsp_nprocs()` before `bsp_begin`.
    pub nprocs: Option<u32>,
    /// How the processes this one starts are placed on the cores.
    pub placement: Placement,
    /// Overrides [`crate::host_id`] for a job this process starts.
    pub host_id: Option<String>,
    /// The CPUs of this host the job's processes share, when a launcher said so.
    pub host_cpus: Option<usize>,
}

impl Default for LaunchConfig {
    fn default() -> LaunchConfig {
        LaunchConfig {
            job: None,
            boot: None,
            join_timeout: crate::DEFAULT_JOIN_TIMEOUT,
            rsh: vec!["ssh".into()],
            nprocs: None,
            placement: Placement::default(),
            host_id: None,
            host_cpus: None,
        }
    }
}

impl LaunchConfig {
    /// This process's rank when it was launched as part of a job (under another launcher,
    /// as far as its environment says before the job forms).
    pub fn rank(&self) -> Option<u32> {
        match (&self.job, &self.boot) {
            (Some(j), _) => Some(j.rank),
            (None, Some(b)) => b.rank,
            (None, None) => None,
        }
    }

    /// Whether this process was started by a job's launcher as a rank other than 0 (such a
    /// process runs the SPMD part only).
    pub fn is_spawned(&self) -> bool {
        self.rank().is_some_and(|r| r > 0)
    }

    /// The number of processes a job started now would have: the job's size when this
    /// process is part of one, else [`LaunchConfig::nprocs`], else the CPUs this process
    /// may run on. This is what `bsp_nprocs()` returns before `bsp_begin`.
    pub fn available_processors(&self) -> u32 {
        match (
            &self.job,
            self.boot.as_ref().and_then(|b| b.size),
            self.nprocs,
        ) {
            (Some(j), _, _) => j.nprocs,
            (None, Some(n), _) | (None, None, Some(n)) => n,
            (None, None, None) => available_cpus() as u32,
        }
    }
}
