//! The job identity a launcher hands a process: ours (`BULKWIRE_*`), Slurm's, or Open
//! MPI's.

use std::net::{SocketAddr, ToSocketAddrs};

use bulkwire_launch::{JobEnv, Launcher, cookie_from_job, job_id_from_name};

use crate::parse::{Lookup, bad, int};
use crate::vars::{COOKIE, JOB, NPROCS, RANK, RENDEZVOUS, Var};
use crate::{ConfigError, vars};

/// The job this process was started in. `Ok(None)`: not started as part of a job (no rank
/// variable), e.g. a user running `./program`.
///
/// Rank and size are taken from one source, first found of: `BULKWIRE_RANK` (then
/// `BULKWIRE_NPROCS` is required), `SLURM_PROCID` + `SLURM_NTASKS`,
/// `OMPI_COMM_WORLD_RANK` + `OMPI_COMM_WORLD_SIZE`. The rendezvous address always comes
/// from `BULKWIRE_RENDEZVOUS`; a one-task Slurm or mpirun job without it counts as not
/// launched (a batch script running `./program`, which may then self-spawn). The cookie
/// is `BULKWIRE_COOKIE`, else derived from the job id (`BULKWIRE_JOB`, else Slurm's
/// job and step ids, else Open MPI's job id).
pub fn job_env(l: &Lookup) -> Result<Option<JobEnv>, ConfigError> {
    let invalid = |reason: String| ConfigError::Invalid {
        vars: "the job's environment".into(),
        reason,
    };
    let ours = l.raw(&RANK).is_some();
    let size_ours = l.raw(&NPROCS);
    let (cookie_var, job_var) = (l.raw(&COOKIE), l.raw(&JOB));
    let source = if ours {
        if size_ours.is_none() {
            return Err(invalid(format!(
                "{} is set but {} is not",
                RANK.name, NPROCS.name
            )));
        }
        Some((Launcher::Bulkwire, RANK.name, NPROCS.name))
    } else if l.foreign("SLURM_PROCID").is_some() && l.foreign("SLURM_NTASKS").is_some() {
        Some((Launcher::Slurm, "SLURM_PROCID", "SLURM_NTASKS"))
    } else if l.foreign("OMPI_COMM_WORLD_RANK").is_some()
        && l.foreign("OMPI_COMM_WORLD_SIZE").is_some()
    {
        Some((
            Launcher::OpenMpi,
            "OMPI_COMM_WORLD_RANK",
            "OMPI_COMM_WORLD_SIZE",
        ))
    } else {
        None
    };
    let Some((launcher, rank_var, size_var)) = source else {
        if let Some(r) = l.raw(&RENDEZVOUS) {
            return Err(invalid(format!(
                "{}={r} is set but no rank is ({}, SLURM_PROCID or OMPI_COMM_WORLD_RANK)",
                RENDEZVOUS.name, RANK.name
            )));
        }
        return Ok(None);
    };

    let number = |name: &'static str, lo: u64| -> Result<u32, ConfigError> {
        let v = l.foreign(name).unwrap_or_default();
        let var = vars::find(name).unwrap_or(&FOREIGN_COUNT);
        match int(&v, lo, u32::MAX as u64) {
            Some(n) => Ok(n as u32),
            None => Err(ConfigError::Bad {
                var: name,
                value: v,
                accepted: var.accepted,
            }),
        }
    };
    let nprocs = number(size_var, 1)?;
    let rank = number(rank_var, 0)?;
    if rank >= nprocs {
        return Err(invalid(format!(
            "{rank_var}={rank} is out of range for {size_var}={nprocs}"
        )));
    }
    if launcher != Launcher::Bulkwire
        && let Some(v) = size_ours
        && v != nprocs.to_string()
    {
        return Err(invalid(format!(
            "{}={v} disagrees with {size_var}={nprocs} (rank {rank})",
            NPROCS.name
        )));
    }

    let Some(rv) = l.raw(&RENDEZVOUS) else {
        if launcher != Launcher::Bulkwire && nprocs == 1 {
            return Ok(None);
        }
        return Err(invalid(format!(
            "started as rank {rank} of {nprocs} ({rank_var}, {size_var}) but {} is not \
             set: start a rendezvous server (bsprun --serve) and export its host:port",
            RENDEZVOUS.name
        )));
    };
    let rendezvous = resolve(&RENDEZVOUS, &rv)?;

    let job_name = match job_var {
        Some(j) => Some(j),
        None => match launcher {
            Launcher::Bulkwire => None,
            // The step id tells apart the sruns of one allocation.
            Launcher::Slurm => {
                l.foreign("SLURM_JOB_ID")
                    .map(|j| match l.foreign("SLURM_STEP_ID") {
                        Some(s) => format!("slurm:{j}.{s}"),
                        None => format!("slurm:{j}"),
                    })
            }
            Launcher::OpenMpi => l
                .foreign("OMPI_MCA_ess_base_jobid")
                .or_else(|| l.foreign("PMIX_NAMESPACE"))
                .or_else(|| l.foreign("OMPI_MCA_orte_ess_jobid"))
                .map(|j| format!("ompi:{j}")),
        },
    };
    let job_id = job_name.as_deref().map(job_id_from_name);
    let cookie = match cookie_var {
        Some(c) => Some(parse_cookie(&c).ok_or_else(|| bad(&COOKIE, &c))?),
        None => job_id.map(cookie_from_job),
    };
    let (cookie, job_id) = match (cookie, job_id) {
        (Some(c), Some(j)) => (c, j),
        (Some(c), None) => (c, u64::from(c)),
        (None, _) => {
            return Err(invalid(format!(
                "no job cookie: set {} or {} (the same for all ranks)",
                COOKIE.name, JOB.name
            )));
        }
    };
    Ok(Some(JobEnv {
        rank,
        nprocs,
        cookie,
        job_id,
        rendezvous,
        launcher,
        host_id: None,
        host_cpus: None,
        entry: None,
    }))
}

/// What another launcher's rank and size variables accept.
const FOREIGN_COUNT: Var = Var {
    name: "",
    section: vars::Section::Launch,
    accepted: "a non-negative integer",
    default: "",
    about: "",
};

/// A u32 in decimal or `0x` hex.
fn parse_cookie(v: &str) -> Option<u32> {
    match v.strip_prefix("0x").or_else(|| v.strip_prefix("0X")) {
        Some(hex) => u32::from_str_radix(hex, 16).ok(),
        None => int(v, 0, u32::MAX as u64).map(|n| n as u32),
    }
}

/// `host:port` resolved (a name is looked up; the first address wins).
fn resolve(var: &'static Var, hostport: &str) -> Result<SocketAddr, ConfigError> {
    let err = |why: String| ConfigError::Invalid {
        vars: format!("{}={hostport:?}", var.name),
        reason: why,
    };
    hostport
        .to_socket_addrs()
        .map_err(|e| err(format!("not a reachable host:port ({e})")))?
        .next()
        .ok_or_else(|| err("the name has no address".into()))
}
