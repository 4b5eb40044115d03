//! Job identity from the environment: ours (`BULKWIRE_*`), Slurm's, or Open MPI's.

use std::net::{SocketAddr, ToSocketAddrs};

use crate::LaunchError;
use crate::sys::{fnv1a64, splitmix64};

/// This process's rank (0..nprocs).
pub const ENV_RANK: &str = "BULKWIRE_RANK";
/// The job size.
pub const ENV_NPROCS: &str = "BULKWIRE_NPROCS";
/// `host:port` of the rendezvous server.
pub const ENV_RENDEZVOUS: &str = "BULKWIRE_RENDEZVOUS";
/// The job's cookie, a u32 (decimal or `0x` hex), carried by every packet.
pub const ENV_COOKIE: &str = "BULKWIRE_COOKIE";
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
}

/// The identity of a process in a job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobEnv {
    pub rank: u32,
    pub nprocs: u32,
    /// Carried by every data packet of the job; packets with another cookie are dropped.
    pub cookie: u32,
    pub job_id: u64,
    /// The rendezvous server (run by the launcher).
    pub rendezvous: SocketAddr,
    pub launcher: Launcher,
    /// A job started for a later SPMD section: the function its processes run
    /// ([`ENV_SPMD_ENTRY`]).
    pub entry: Option<String>,
}

impl JobEnv {
    /// The environment a launcher gives rank `rank` of this job (`self.rank` is ignored).
    pub fn vars_for(&self, rank: u32) -> Vec<(&'static str, String)> {
        let mut v = vec![
            (ENV_RANK, rank.to_string()),
            (ENV_NPROCS, self.nprocs.to_string()),
            (ENV_RENDEZVOUS, self.rendezvous.to_string()),
            (ENV_COOKIE, format!("{:#010x}", self.cookie)),
            (ENV_JOB, self.job_id.to_string()),
        ];
        if let Some(e) = &self.entry {
            v.push((ENV_SPMD_ENTRY, e.clone()));
        }
        v
    }

    /// Reads the job identity through `var` (the process environment in [`job_env`]; a
    /// map in tests). `Ok(None)`: this process was not started as part of a job.
    ///
    /// Rank and size are taken from one source, first found of: `BULKWIRE_RANK` (then
    /// `BULKWIRE_NPROCS` is required), `SLURM_PROCID` + `SLURM_NTASKS`,
    /// `OMPI_COMM_WORLD_RANK` + `OMPI_COMM_WORLD_SIZE`. The rendezvous address always comes
    /// from `BULKWIRE_RENDEZVOUS`; a one-task Slurm or mpirun job without it counts as not
    /// launched (a batch script running `./program`, which may then self-spawn). The cookie
    /// is `BULKWIRE_COOKIE`, else derived from the job id (`BULKWIRE_JOB`, else Slurm's
    /// job and step ids, else Open MPI's job id).
    pub fn from_lookup(
        var: impl Fn(&str) -> Option<String>,
    ) -> Result<Option<JobEnv>, LaunchError> {
        let get = |name: &str| var(name).filter(|v| !v.trim().is_empty());
        let bad = |msg: String| Err(LaunchError::Env(msg));

        let source = if get(ENV_RANK).is_some() {
            if get(ENV_NPROCS).is_none() {
                return bad(format!("{ENV_RANK} is set but {ENV_NPROCS} is not"));
            }
            Some((Launcher::Bulkwire, ENV_RANK, ENV_NPROCS))
        } else if get("SLURM_PROCID").is_some() && get("SLURM_NTASKS").is_some() {
            Some((Launcher::Slurm, "SLURM_PROCID", "SLURM_NTASKS"))
        } else if get("OMPI_COMM_WORLD_RANK").is_some() && get("OMPI_COMM_WORLD_SIZE").is_some() {
            Some((
                Launcher::OpenMpi,
                "OMPI_COMM_WORLD_RANK",
                "OMPI_COMM_WORLD_SIZE",
            ))
        } else {
            None
        };
        let Some((launcher, rank_var, size_var)) = source else {
            if let Some(r) = get(ENV_RENDEZVOUS) {
                return bad(format!(
                    "{ENV_RENDEZVOUS}={r} is set but no rank is ({ENV_RANK}, SLURM_PROCID or \
                     OMPI_COMM_WORLD_RANK)"
                ));
            }
            return Ok(None);
        };

        let parse_u32 = |name: &str| -> Result<u32, LaunchError> {
            let v = get(name).unwrap_or_default();
            v.trim().parse::<u32>().map_err(|_| {
                LaunchError::Env(format!("{name}={v:?} is not a non-negative integer"))
            })
        };
        let rank = parse_u32(rank_var)?;
        let nprocs = parse_u32(size_var)?;
        if nprocs == 0 {
            return bad(format!("{size_var}=0: a job has at least one process"));
        }
        if rank >= nprocs {
            return bad(format!(
                "{rank_var}={rank} is out of range for {size_var}={nprocs}"
            ));
        }
        if launcher != Launcher::Bulkwire
            && let Some(v) = get(ENV_NPROCS)
            && v.trim() != nprocs.to_string()
        {
            return bad(format!(
                "{ENV_NPROCS}={v} disagrees with {size_var}={nprocs} (rank {rank})"
            ));
        }

        let Some(rv) = get(ENV_RENDEZVOUS) else {
            if launcher != Launcher::Bulkwire && nprocs == 1 {
                return Ok(None);
            }
            return bad(format!(
                "started as rank {rank} of {nprocs} ({rank_var}, {size_var}) but \
                 {ENV_RENDEZVOUS} is not set: start a rendezvous server (bsprun --serve) and \
                 export its host:port"
            ));
        };
        let rendezvous = resolve(&rv)?;

        let job_name = match get(ENV_JOB) {
            Some(j) => Some(j),
            None => match launcher {
                Launcher::Bulkwire => None,
                // The step id tells apart the sruns of one allocation.
                Launcher::Slurm => get("SLURM_JOB_ID").map(|j| match get("SLURM_STEP_ID") {
                    Some(s) => format!("slurm:{j}.{s}"),
                    None => format!("slurm:{j}"),
                }),
                Launcher::OpenMpi => get("OMPI_MCA_ess_base_jobid")
                    .or_else(|| get("PMIX_NAMESPACE"))
                    .or_else(|| get("OMPI_MCA_orte_ess_jobid"))
                    .map(|j| format!("ompi:{j}")),
            },
        };
        let job_id = job_name.as_deref().map(job_id_from_name);
        let cookie = match get(ENV_COOKIE) {
            Some(c) => Some(parse_cookie(&c)?),
            None => job_id.map(cookie_from_job),
        };
        let (cookie, job_id) = match (cookie, job_id) {
            (Some(c), Some(j)) => (c, j),
            (Some(c), None) => (c, u64::from(c)),
            (None, _) => {
                return bad(format!(
                    "no job cookie: set {ENV_COOKIE} or {ENV_JOB} (the same for all ranks)"
                ));
            }
        };
        Ok(Some(JobEnv {
            rank,
            nprocs,
            cookie,
            job_id,
            rendezvous,
            launcher,
            entry: get(ENV_SPMD_ENTRY),
        }))
    }
}

/// The job identity of this process, from its environment. `Ok(None)`: not started as part
/// of a job (no rank variable), e.g. a user running `./program`.
pub fn job_env() -> Result<Option<JobEnv>, LaunchError> {
    JobEnv::from_lookup(|k| std::env::var(k).ok())
}

/// The number of processes a job started now would have: the job's size when this process
/// is part of one (or `BULKWIRE_NPROCS` is set), else the CPUs this process may run on. This
/// is what `bsp_nprocs()` returns before `bsp_begin`.
pub fn available_processors() -> u32 {
    if let Ok(Some(env)) = job_env() {
        return env.nprocs;
    }
    if let Some(n) = std::env::var(ENV_NPROCS)
        .ok()
        .and_then(|v| v.trim().parse::<u32>().ok())
        .filter(|&n| n > 0)
    {
        return n;
    }
    std::thread::available_parallelism().map_or(1, |n| n.get() as u32)
}

/// The job id of a job name: the number itself if it is one, else a stable hash of it.
pub fn job_id_from_name(name: &str) -> u64 {
    let j = name.trim();
    j.parse::<u64>().unwrap_or_else(|_| fnv1a64(j))
}

/// The cookie every rank derives from a job id when the launcher gave none.
pub fn cookie_from_job(job_id: u64) -> u32 {
    let h = splitmix64(job_id);
    (h ^ (h >> 32)) as u32
}

fn parse_cookie(v: &str) -> Result<u32, LaunchError> {
    let t = v.trim();
    let r = match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        Some(hex) => u32::from_str_radix(hex, 16),
        None => t.parse::<u32>(),
    };
    r.map_err(|_| {
        LaunchError::Env(format!(
            "{ENV_COOKIE}={v:?} is not a u32 (decimal or 0x hex)"
        ))
    })
}

/// Resolves `host:port` (a name is looked up; the first address wins).
pub fn resolve(hostport: &str) -> Result<SocketAddr, LaunchError> {
    let err = |why: String| LaunchError::Env(format!("{ENV_RENDEZVOUS}={hostport:?}: {why}"));
    hostport
        .trim()
        .to_socket_addrs()
        .map_err(|e| err(format!("not a reachable host:port ({e})")))?
        .next()
        .ok_or_else(|| err("the name has no address".into()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn parse(vars: &[(&str, &str)]) -> Result<Option<JobEnv>, LaunchError> {
        let m: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        JobEnv::from_lookup(|k| m.get(k).cloned())
    }

    fn err(vars: &[(&str, &str)]) -> String {
        parse(vars).unwrap_err().to_string()
    }

    const RV: (&str, &str) = (ENV_RENDEZVOUS, "127.0.0.1:4567");

    #[test]
    fn nothing_set_means_not_launched() {
        assert_eq!(parse(&[]).unwrap(), None);
        // BULKWIRE_NPROCS alone only sets the size for self-spawn.
        assert_eq!(parse(&[(ENV_NPROCS, "4")]).unwrap(), None);
    }

    #[test]
    fn bulkwire_vars() {
        let e = parse(&[
            (ENV_RANK, "2"),
            (ENV_NPROCS, "4"),
            RV,
            (ENV_COOKIE, "0xdeadbeef"),
            (ENV_JOB, "77"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!(
            (e.rank, e.nprocs, e.cookie, e.job_id),
            (2, 4, 0xdead_beef, 77)
        );
        assert_eq!(e.rendezvous, "127.0.0.1:4567".parse().unwrap());
        assert_eq!(e.launcher, Launcher::Bulkwire);
        // Round trip through the variables a launcher sets.
        let back = parse(
            &e.vars_for(3)
                .iter()
                .map(|(k, v)| (*k, v.as_str()))
                .collect::<Vec<_>>(),
        )
        .unwrap()
        .unwrap();
        assert_eq!(back, JobEnv { rank: 3, ..e });
    }

    #[test]
    fn cookie_derived_from_job_id() {
        let a = parse(&[(ENV_RANK, "0"), (ENV_NPROCS, "2"), RV, (ENV_JOB, "job-x")])
            .unwrap()
            .unwrap();
        let b = parse(&[(ENV_RANK, "1"), (ENV_NPROCS, "2"), RV, (ENV_JOB, "job-x")])
            .unwrap()
            .unwrap();
        assert_eq!(a.cookie, b.cookie);
        assert_eq!(a.job_id, fnv1a64("job-x"));
        assert_eq!(a.cookie, cookie_from_job(a.job_id));
        let c = parse(&[(ENV_RANK, "0"), (ENV_NPROCS, "2"), RV, (ENV_COOKIE, "12")])
            .unwrap()
            .unwrap();
        assert_eq!((c.cookie, c.job_id), (12, 12));
    }

    #[test]
    fn slurm_vars() {
        let v = [
            ("SLURM_PROCID", "3"),
            ("SLURM_NTASKS", "8"),
            ("SLURM_JOB_ID", "1234"),
            ("SLURM_STEP_ID", "0"),
            RV,
        ];
        let e = parse(&v).unwrap().unwrap();
        assert_eq!((e.rank, e.nprocs, e.launcher), (3, 8, Launcher::Slurm));
        assert_eq!(e.job_id, fnv1a64("slurm:1234.0"));
        assert_eq!(e.cookie, cookie_from_job(e.job_id));
        // Another step of the same allocation is another job.
        let mut w = v;
        w[3] = ("SLURM_STEP_ID", "1");
        assert_ne!(parse(&w).unwrap().unwrap().cookie, e.cookie);
    }

    #[test]
    fn ompi_vars() {
        let e = parse(&[
            ("OMPI_COMM_WORLD_RANK", "1"),
            ("OMPI_COMM_WORLD_SIZE", "2"),
            ("OMPI_MCA_ess_base_jobid", "3735552001"),
            RV,
        ])
        .unwrap()
        .unwrap();
        assert_eq!((e.rank, e.nprocs, e.launcher), (1, 2, Launcher::OpenMpi));
        assert_eq!(e.job_id, fnv1a64("ompi:3735552001"));
    }

    #[test]
    fn bulkwire_wins_over_slurm() {
        // bsprun inside a Slurm batch script: the batch step's variables are stale.
        let e = parse(&[
            (ENV_RANK, "1"),
            (ENV_NPROCS, "4"),
            (ENV_COOKIE, "5"),
            ("SLURM_PROCID", "0"),
            ("SLURM_NTASKS", "1"),
            RV,
        ])
        .unwrap()
        .unwrap();
        assert_eq!((e.rank, e.nprocs, e.launcher), (1, 4, Launcher::Bulkwire));
    }

    #[test]
    fn single_task_batch_step_is_not_a_job() {
        assert_eq!(
            parse(&[("SLURM_PROCID", "0"), ("SLURM_NTASKS", "1")]).unwrap(),
            None
        );
    }

    #[test]
    fn incomplete_or_inconsistent() {
        assert!(err(&[(ENV_RANK, "0")]).contains("BULKWIRE_NPROCS is not"));
        assert!(
            err(&[(ENV_RANK, "4"), (ENV_NPROCS, "4"), RV, (ENV_COOKIE, "1")])
                .contains("out of range")
        );
        assert!(err(&[(ENV_RANK, "x"), (ENV_NPROCS, "4")]).contains("BULKWIRE_RANK=\"x\""));
        assert!(err(&[(ENV_RANK, "0"), (ENV_NPROCS, "0")]).contains("at least one"));
        assert!(
            err(&[(ENV_RANK, "0"), (ENV_NPROCS, "2"), (ENV_COOKIE, "1")])
                .contains("BULKWIRE_RENDEZVOUS is not set")
        );
        assert!(
            err(&[("SLURM_PROCID", "0"), ("SLURM_NTASKS", "4")])
                .contains("BULKWIRE_RENDEZVOUS is not set")
        );
        assert!(err(&[(ENV_RANK, "0"), (ENV_NPROCS, "2"), RV]).contains("no job cookie"));
        assert!(err(&[RV]).contains("no rank"));
        assert!(
            err(&[(ENV_RANK, "0"), (ENV_NPROCS, "2"), RV, (ENV_COOKIE, "0xzz")])
                .contains("not a u32")
        );
        assert!(
            err(&[
                ("SLURM_PROCID", "0"),
                ("SLURM_NTASKS", "4"),
                (ENV_NPROCS, "8"),
                ("SLURM_JOB_ID", "1"),
                RV
            ])
            .contains("disagrees")
        );
        assert!(
            err(&[
                (ENV_RANK, "0"),
                (ENV_NPROCS, "2"),
                (ENV_COOKIE, "1"),
                (ENV_RENDEZVOUS, "no-port-here")
            ])
            .contains("host:port")
        );
    }
}
