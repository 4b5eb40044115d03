//! The job identity a launcher hands a process: ours (`BULKWIRE_*`), Slurm's, Open MPI's
//! or a PMI launcher's (MPICH's Hydra); and, when no rendezvous was given, the bootstrap
//! service through which the job forms ([`BootOffer`]).

use std::net::{SocketAddr, ToSocketAddrs};

use bulkwire_launch::bootstrap::{BootOffer, BootService, PmiAddr};
use bulkwire_launch::{JobEnv, Launcher, Secret, job_id_from_name, read_key_file};

use crate::parse::{Lookup, int, word};
use crate::vars::{BOOTSTRAP, COOKIE, JOB, NPROCS, RANK, RENDEZVOUS, SECRET, SECRET_FILE, Var};
use crate::{ConfigError, vars};

/// How a process launched by someone else joins its job.
#[derive(Debug, Default)]
pub struct Joining {
    /// A rendezvous server is given.
    pub job: Option<JobEnv>,
    /// No rendezvous: the job forms through the launcher's bootstrap service.
    pub boot: Option<BootOffer>,
}

/// The job this process was started in. `Ok(None)`: not started as part of a job (no rank
/// variable), e.g. a user running `./program`.
///
/// Rank and size are taken from one source, first found of: `BULKWIRE_RANK` (then
/// `BULKWIRE_NPROCS` is required), `SLURM_PROCID` + `SLURM_NTASKS`,
/// `OMPI_COMM_WORLD_RANK` + `OMPI_COMM_WORLD_SIZE`. The rendezvous address always comes
/// from `BULKWIRE_RENDEZVOUS`; a one-task Slurm or mpirun job without it counts as not
/// launched (a batch script running `./program`, which may then self-spawn). The job's
/// secret is `BULKWIRE_SECRET`, else read from `BULKWIRE_SECRET_FILE`; the job id comes
/// from `BULKWIRE_JOB`, else Slurm's job and step ids, else Open MPI's job id.
pub fn job_env(l: &Lookup) -> Result<Joining, ConfigError> {
    let invalid = |reason: String| ConfigError::Invalid {
        vars: "the job's environment".into(),
        reason,
    };
    let ours = l.raw(&RANK).is_some();
    let size_ours = l.raw(&NPROCS);
    if l.raw(&COOKIE).is_some() {
        return Err(ConfigError::Invalid {
            vars: COOKIE.name.into(),
            reason: format!(
                "is no longer read: it was replaced by {} (64 hex digits, which bsprun and \
                 the bootstraps generate; the packet cookie derives from it). Unset {}",
                SECRET.name, COOKIE.name
            ),
        });
    }
    let secret = Given {
        hex: l.raw(&SECRET),
        file: l.raw(&SECRET_FILE),
    };
    let job_var = l.raw(&JOB);
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
    } else if l.foreign("PMI_RANK").is_some() && l.foreign("PMI_SIZE").is_some() {
        Some((Launcher::Pmi, "PMI_RANK", "PMI_SIZE"))
    } else {
        None
    };
    let bootstrap = l.get(&BOOTSTRAP, |v| {
        word(
            v,
            &[
                ("auto", Boot::Auto),
                ("pmi", Boot::Pmi),
                ("pmix", Boot::Pmix),
                ("derived", Boot::Derived),
            ],
        )
    })?;
    let Some((launcher, rank_var, size_var)) = source else {
        if let Some(r) = l.raw(&RENDEZVOUS) {
            return Err(invalid(format!(
                "{}={r} is set but no rank is ({}, SLURM_PROCID or OMPI_COMM_WORLD_RANK)",
                RENDEZVOUS.name, RANK.name
            )));
        }
        // A PMIx launcher that set no rank variables of its own: PMIx tells.
        if l.foreign("PMIX_RANK").is_some() && offers_pmix(l) {
            let boot = offer(l, bootstrap, Launcher::OpenMpi, None, None, None, &secret)?;
            return Ok(Joining { job: None, boot });
        }
        return Ok(Joining::default());
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

    let job_name = match job_var {
        Some(j) => Some(j),
        None => match launcher {
            Launcher::Bulkwire | Launcher::Pmi => None,
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
    let Some(rv) = l.raw(&RENDEZVOUS) else {
        if launcher != Launcher::Bulkwire && nprocs == 1 {
            return Ok(Joining::default());
        }
        let boot = match launcher {
            Launcher::Bulkwire => None,
            _ => offer(
                l,
                bootstrap,
                launcher,
                Some(rank),
                Some(nprocs),
                job_name,
                &secret,
            )?,
        };
        if boot.is_some() {
            return Ok(Joining { job: None, boot });
        }
        return Err(invalid(format!(
            "started as rank {rank} of {nprocs} ({rank_var}, {size_var}) but {} is not \
             set, and the launcher offers no bootstrap service (PMI, PMIx, Slurm's node \
             list): start a rendezvous server (bsprun --serve) and export its host:port",
            RENDEZVOUS.name
        )));
    };
    let rendezvous = resolve(&RENDEZVOUS, &rv)?;
    let Some(secret) = secret.read()? else {
        return Err(invalid(format!(
            "no job secret: set {} (64 hex digits) or {} (a file holding them), the same \
             for all ranks; bsprun sets it for the processes it starts, bsprun --serve \
             writes one to a file",
            SECRET.name, SECRET_FILE.name
        )));
    };
    // Without a job name, an id that is the same in every rank and differs per secret.
    let job_id = job_name.as_deref().map_or_else(
        || {
            let k = secret.derive("bulkwire 1 job id");
            u64::from_le_bytes([k[0], k[1], k[2], k[3], k[4], k[5], k[6], k[7]])
        },
        job_id_from_name,
    );
    let job = JobEnv {
        rank,
        nprocs,
        secret,
        job_id,
        rendezvous,
        launcher,
        host_id: None,
        host_cpus: None,
        entry: None,
    };
    Ok(Joining {
        job: Some(job),
        boot: None,
    })
}

/// The job secret the environment gives, read only when needed (a file may not exist for
/// a process that never joins a job).
struct Given {
    hex: Option<String>,
    file: Option<String>,
}

impl Given {
    /// `BULKWIRE_SECRET`, else the content of `BULKWIRE_SECRET_FILE`; `Ok(None)`: neither
    /// is set. Errors name the variable but never show a secret's value.
    fn read(&self) -> Result<Option<Secret>, ConfigError> {
        if self.hex.is_some() && self.file.is_some() {
            return Err(ConfigError::Invalid {
                vars: format!("{}, {}", SECRET.name, SECRET_FILE.name),
                reason: "both are set: set one (they could disagree)".into(),
            });
        }
        if let Some(h) = &self.hex {
            return Secret::from_hex(h)
                .map(Some)
                .ok_or_else(|| ConfigError::Invalid {
                    vars: format!("{}=(value hidden)", SECRET.name),
                    reason: format!("not accepted: expected {}", SECRET.accepted),
                });
        }
        match &self.file {
            Some(f) => read_key_file(std::path::Path::new(f))
                .map(Some)
                .map_err(|why| ConfigError::Invalid {
                    vars: SECRET_FILE.name.into(),
                    reason: format!("{why} (expected {})", SECRET_FILE.accepted),
                }),
            None => Ok(None),
        }
    }

    /// The user's key for a derived rendezvous: what [`Given::read`] finds, else the
    /// key file `~/.config/bulkwire/key` when it exists.
    fn user_key(&self, l: &Lookup) -> Result<Option<Result<Secret, String>>, ConfigError> {
        if let Some(s) = self.read()? {
            return Ok(Some(Ok(s)));
        }
        let Some(home) = l.foreign("HOME") else {
            return Ok(None);
        };
        let path = std::path::Path::new(&home).join(".config/bulkwire/key");
        if std::fs::symlink_metadata(&path).is_err() {
            return Ok(None);
        }
        Ok(Some(read_key_file(&path)))
    }
}

/// `BULKWIRE_BOOTSTRAP`.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Boot {
    Auto,
    Pmi,
    Pmix,
    Derived,
}

fn offers_pmix(l: &Lookup) -> bool {
    [
        "PMIX_NAMESPACE",
        "PMIX_SERVER_URI4",
        "PMIX_SERVER_URI3",
        "PMIX_SERVER_URI2",
    ]
    .iter()
    .any(|v| l.foreign(v).is_some())
}

/// The bootstrap service the environment offers (or `BULKWIRE_BOOTSTRAP` asks for):
/// PMI-1 on `PMI_FD`/`PMI_PORT`, else PMIx, else Slurm's node list for a derived
/// rendezvous. `None` when there is none.
fn offer(
    l: &Lookup,
    want: Option<Boot>,
    launcher: Launcher,
    rank: Option<u32>,
    size: Option<u32>,
    job_name: Option<String>,
    secret: &Given,
) -> Result<Option<BootOffer>, ConfigError> {
    let pmi = || -> Result<Option<PmiAddr>, ConfigError> {
        if let Some(fd) = l.foreign("PMI_FD") {
            let n = int(&fd, 0, i32::MAX as u64).ok_or_else(|| foreign_bad("PMI_FD", &fd))?;
            // Speaking PMI on a standard stream would corrupt it, and closing it when the
            // session ends would take this process's stderr (or output) with it.
            if n <= 2 {
                return Err(ConfigError::Invalid {
                    vars: format!("PMI_FD={n}"),
                    reason: "descriptors 0, 1 and 2 are standard input, output and error, \
                             not a launcher's PMI connection: expected a descriptor from 3 up"
                        .into(),
                });
            }
            return Ok(Some(PmiAddr::Fd(n as i32)));
        }
        let Some(addr) = l.foreign("PMI_PORT") else {
            return Ok(None);
        };
        let id = match l.foreign("PMI_ID") {
            Some(v) => {
                Some(int(&v, 0, u32::MAX as u64).ok_or_else(|| foreign_bad("PMI_ID", &v))? as u32)
            }
            None => None,
        };
        Ok(Some(PmiAddr::Port { addr, id }))
    };
    let derived = || {
        l.foreign("SLURM_STEP_NODELIST")
            .or_else(|| l.foreign("SLURM_JOB_NODELIST"))
            .and_then(|list| first_host(&list))
            .map(|host| BootService::Derived { host })
    };
    let want = want.unwrap_or(Boot::Auto);
    let service = match want {
        Boot::Pmi => pmi()?.map(BootService::Pmi),
        Boot::Pmix => offers_pmix(l).then_some(BootService::Pmix),
        Boot::Derived => derived(),
        Boot::Auto => match pmi()? {
            Some(a) => Some(BootService::Pmi(a)),
            None if offers_pmix(l) => Some(BootService::Pmix),
            None => derived(),
        },
    };
    if service.is_none() && want != Boot::Auto {
        return Err(ConfigError::Invalid {
            vars: BOOTSTRAP.name.into(),
            reason: "the launcher does not offer the service asked for (PMI: PMI_FD or \
                     PMI_PORT; PMIx: PMIX_NAMESPACE; derived: SLURM_STEP_NODELIST)"
                .into(),
        });
    }
    let Some(service) = service else {
        return Ok(None);
    };
    // Only a derived rendezvous needs the user's key; the others pass a fresh secret.
    let user_key = match service {
        BootService::Derived { .. } => secret.user_key(l)?,
        _ => None,
    };
    Ok(Some(BootOffer {
        service,
        launcher,
        rank,
        size,
        job_name,
        user_key,
    }))
}

fn foreign_bad(name: &'static str, v: &str) -> ConfigError {
    ConfigError::Bad {
        var: name,
        value: v.to_string(),
        accepted: FOREIGN_COUNT.accepted,
    }
}

/// The first host of a Slurm node list (`node[01-04,07],login1` -> `node01`): the host of
/// rank 0 in a step, whatever the distribution.
pub fn first_host(list: &str) -> Option<String> {
    let first = {
        let mut depth = 0;
        let end = list
            .char_indices()
            .find(|&(_, c)| {
                match c {
                    '[' => depth += 1,
                    ']' => depth -= 1,
                    _ => {}
                }
                c == ',' && depth == 0
            })
            .map_or(list.len(), |(i, _)| i);
        list[..end].trim()
    };
    let host = match first.split_once('[') {
        None => first.to_string(),
        Some((prefix, rest)) => {
            let (ranges, suffix) = rest.split_once(']')?;
            let lo = ranges.split([',', '-']).next()?;
            format!("{prefix}{lo}{suffix}")
        }
    };
    (!host.is_empty()).then_some(host)
}

/// What another launcher's rank and size variables accept.
const FOREIGN_COUNT: Var = Var {
    name: "",
    section: vars::Section::Launch,
    accepted: "a non-negative integer",
    default: "",
    about: "",
};

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
