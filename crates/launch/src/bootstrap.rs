//! Forming a job under a launcher that is not ours (`srun`, `mpirun`, `mpiexec`), with no
//! extra step: the processes find each other through the launcher's own bootstrap service,
//! one [`Bootstrap`] implementation each, chosen from what the environment offers:
//!
//! - [`Given`]: our rendezvous, already running (`BULKWIRE_RENDEZVOUS`: `bsprun --serve`);
//! - [`Pmi1`]: the PMI-1 wire protocol (MPICH's Hydra, Slurm's pmi2 plugin);
//! - [`Pmix`]: PMIx through the system's libpmix (Open MPI's mpirun, `srun --mpi=pmix`);
//! - [`Derived`]: no service at all: rank 0 serves at a host every rank can name (the
//!   first host of Slurm's node list) on ports derived from the job's name.
//!
//! Without a running server, rank 0 runs the rendezvous server in a thread of its own
//! process (as a self-spawned rank 0 does) and publishes its addresses through the
//! service; the others read them and join. From then on the job is like any other: the
//! control connections carry the exchanges and the failure notices.

mod pmi;
mod pmix;

use std::net::{IpAddr, SocketAddr, TcpListener};
use std::time::{Duration, Instant};

pub use pmi::{Pmi1, PmiAddr};
pub use pmix::Pmix;

use crate::LaunchError;
use crate::control::Control;
use crate::env::{JobEnv, LaunchConfig, Launcher};
use crate::server::{Server, ServerConfig};
use crate::{cookie_from_job, job_id_from_name};

/// A launcher's service through which the processes of a job find each other.
pub trait Bootstrap {
    /// What it is, for messages ("the launcher's PMI-1 service on fd 6").
    fn describe(&self) -> String;
    fn rank(&self) -> u32;
    fn size(&self) -> u32;
    /// The job's name, the same in every process (the job id and cookie derive from it).
    fn job_name(&self) -> String;
    /// The rendezvous server already running, if there is one (then nobody serves).
    fn server(&self) -> Option<SocketAddr> {
        None
    }
    /// Rank 0 ports to try listening on (empty: any free port).
    fn ports(&self) -> Vec<u16> {
        Vec::new()
    }
    /// Rank 0 passes where its server listens (`host:port` list, comma-separated); every
    /// rank gets rank 0's list back. Collective.
    fn exchange(&mut self, mine: Option<&str>) -> Result<String, LaunchError>;
    /// Leaves the service (the job needs it no more).
    fn finalize(&mut self) {}
}

/// What the environment offers for forming a job, read at the edge by `bulkwire-config`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BootService {
    /// The PMI-1 wire protocol.
    Pmi(PmiAddr),
    /// PMIx through libpmix.
    Pmix,
    /// Rank 0 serves on `host` (every rank can name it) at ports derived from the job.
    Derived { host: String },
}

/// A foreign launcher's job, before it has formed: the service and what the environment
/// already says of rank, size and job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BootOffer {
    pub service: BootService,
    pub launcher: Launcher,
    pub rank: Option<u32>,
    pub size: Option<u32>,
    /// The job's name when the environment gives one (Slurm's `slurm:JOB.STEP`).
    pub job_name: Option<String>,
}

/// Our rendezvous, already running: nothing to exchange.
pub struct Given(pub JobEnv);

impl Bootstrap for Given {
    fn describe(&self) -> String {
        format!("the rendezvous server at {}", self.0.rendezvous)
    }
    fn rank(&self) -> u32 {
        self.0.rank
    }
    fn size(&self) -> u32 {
        self.0.nprocs
    }
    fn job_name(&self) -> String {
        self.0.job_id.to_string()
    }
    fn server(&self) -> Option<SocketAddr> {
        Some(self.0.rendezvous)
    }
    fn exchange(&mut self, _: Option<&str>) -> Result<String, LaunchError> {
        Ok(self.0.rendezvous.to_string())
    }
}

/// No service: rank 0 listens on `host` at one of [`Derived::PORTS`] ports derived from
/// the job's name; the others try them in order (a server of another job there refuses
/// them: its cookie differs).
pub struct Derived {
    pub host: String,
    pub rank: u32,
    pub size: u32,
    pub job: String,
}

impl Derived {
    /// Candidate ports per job.
    pub const PORTS: u64 = 8;
}

impl Bootstrap for Derived {
    fn describe(&self) -> String {
        format!(
            "rank 0's rendezvous on {} (derived from the job)",
            self.host
        )
    }
    fn rank(&self) -> u32 {
        self.rank
    }
    fn size(&self) -> u32 {
        self.size
    }
    fn job_name(&self) -> String {
        self.job.clone()
    }
    fn ports(&self) -> Vec<u16> {
        let id = job_id_from_name(&self.job);
        (0..Derived::PORTS)
            .map(|i| 20_000 + (crate::sys::splitmix64(id.wrapping_add(i)) % 30_000) as u16)
            .collect()
    }
    fn exchange(&mut self, mine: Option<&str>) -> Result<String, LaunchError> {
        if let Some(v) = mine {
            return Ok(v.to_string());
        }
        Ok(self
            .ports()
            .iter()
            .map(|p| format!("{}:{p}", self.host))
            .collect::<Vec<_>>()
            .join(","))
    }
}

/// Opens the service `offer` names.
pub fn open(offer: &BootOffer, timeout: Duration) -> Result<Box<dyn Bootstrap>, LaunchError> {
    let missing = |what: &str| {
        LaunchError::Usage(format!(
            "the launcher gave no {what}: cannot form the job through {:?}",
            offer.service
        ))
    };
    Ok(match &offer.service {
        BootService::Pmi(addr) => Box::new(Pmi1::connect(addr, offer.rank, offer.size, timeout)?),
        BootService::Pmix => Box::new(Pmix::connect()?),
        BootService::Derived { host } => Box::new(Derived {
            host: host.clone(),
            rank: offer.rank.ok_or_else(|| missing("rank"))?,
            size: offer.size.ok_or_else(|| missing("job size"))?,
            job: offer.job_name.clone().ok_or_else(|| missing("job name"))?,
        }),
    })
}

/// Forms the job through `boot` and joins it: rank 0 serves the rendezvous (unless one
/// runs already), everyone joins. Every rank must have joined within `cfg.join_timeout`.
pub fn form(boot: &mut dyn Bootstrap, cfg: &LaunchConfig) -> Result<Control, LaunchError> {
    let (rank, size) = (boot.rank(), boot.size());
    let job_id = job_id_from_name(&boot.job_name());
    let mut env = JobEnv {
        rank,
        nprocs: size,
        cookie: cookie_from_job(job_id),
        job_id,
        rendezvous: SocketAddr::from(([127, 0, 0, 1], 0)),
        launcher: Launcher::Bulkwire,
        host_id: cfg.host_id.clone(),
        host_cpus: cfg.host_cpus,
        entry: None,
    };
    let deadline = Instant::now() + cfg.join_timeout;
    if let Some(addr) = boot.server() {
        env.rendezvous = addr;
        return Control::join_timeout(&env, cfg.join_timeout);
    }
    let served = if rank == 0 {
        Some(serve(&env, boot.ports(), cfg)?)
    } else {
        None
    };
    let published = served.as_ref().map(|(_, addrs)| join_list(addrs));
    let list = boot.exchange(published.as_deref());
    boot.finalize();
    let list = list?;
    let addrs: Vec<SocketAddr> = list
        .split(',')
        .filter_map(|a| {
            use std::net::ToSocketAddrs;
            a.to_socket_addrs().ok()?.next()
        })
        .collect();
    if addrs.is_empty() {
        return Err(LaunchError::Protocol(format!(
            "{}: rank 0 published no usable address ({list:?})",
            boot.describe()
        )));
    }
    let mut ctl = join_any(&mut env, &addrs, deadline)?;
    if let Some((server, _)) = served {
        ctl.set_server(server);
    }
    Ok(ctl)
}

fn join_list(addrs: &[SocketAddr]) -> String {
    addrs
        .iter()
        .map(|a| a.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

type Served = (std::thread::JoinHandle<crate::JobOutcome>, Vec<SocketAddr>);

/// Rank 0: runs the job's server on a thread, listening on every address; returns the
/// addresses to publish (this host's, those other hosts reach first).
fn serve(env: &JobEnv, ports: Vec<u16>, cfg: &LaunchConfig) -> Result<Served, LaunchError> {
    let mut scfg = ServerConfig::new(env.nprocs);
    scfg.job = Some((env.cookie, env.job_id));
    scfg.report = Some(crate::launch::program_name());
    scfg.host_rank = Some(0);
    scfg.join_timeout = Some(cfg.join_timeout);
    let any = |p: u16| SocketAddr::from(([0, 0, 0, 0], p));
    let server = if ports.is_empty() {
        Server::bind(any(0), scfg)?
    } else {
        // The first free candidate (another job may hold one): the others try them all.
        let port = ports
            .iter()
            .copied()
            .find(|&p| TcpListener::bind(any(p)).is_ok())
            .ok_or_else(|| {
                LaunchError::Usage(format!(
                    "none of the job's rendezvous ports {ports:?} is free on this host"
                ))
            })?;
        Server::bind(any(port), scfg)?
    };
    let port = server.local_addr().port();
    let addrs = host_addrs()
        .into_iter()
        .map(|ip| SocketAddr::new(ip, port))
        .collect();
    let h = std::thread::Builder::new()
        .name("bulkwire-rendezvous".into())
        .spawn(move || server.run())?;
    Ok((h, addrs))
}

/// This host's IPv4 addresses of interfaces that are up, loopback last.
pub fn host_addrs() -> Vec<IpAddr> {
    let mut out = Vec::new();
    let mut ifa: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills a list we free below; we only read it in between.
    if unsafe { libc::getifaddrs(&mut ifa) } == 0 {
        let mut p = ifa;
        while !p.is_null() {
            // SAFETY: p is a node of the list getifaddrs returned.
            let i = unsafe { &*p };
            let up = i.ifa_flags & libc::IFF_UP as u32 != 0;
            if up && !i.ifa_addr.is_null() {
                // SAFETY: ifa_addr points to a sockaddr; its family says which.
                let fam = unsafe { (*i.ifa_addr).sa_family } as i32;
                if fam == libc::AF_INET {
                    // SAFETY: an AF_INET address is a sockaddr_in.
                    let sin = unsafe { &*(i.ifa_addr as *const libc::sockaddr_in) };
                    out.push(IpAddr::from(
                        u32::from_be(sin.sin_addr.s_addr).to_be_bytes(),
                    ));
                }
            }
            p = i.ifa_next;
        }
        // SAFETY: the list from getifaddrs, freed once.
        unsafe { libc::freeifaddrs(ifa) };
    }
    out.sort_by_key(|a| a.is_loopback());
    out.dedup();
    if out.is_empty() {
        out.push(IpAddr::from([127, 0, 0, 1]));
    }
    out
}

/// Joins through the first of `addrs` that admits us, trying them in turn until
/// `deadline` (rank 0 may not be listening yet; a server of another job refuses us).
fn join_any(
    env: &mut JobEnv,
    addrs: &[SocketAddr],
    deadline: Instant,
) -> Result<Control, LaunchError> {
    let mut last = None;
    while Instant::now() < deadline {
        let mut refused = 0;
        for &a in addrs {
            env.rendezvous = a;
            match Control::join_timeout(env, Duration::from_millis(500)) {
                Ok(c) => return Ok(c),
                Err(e @ LaunchError::Connect { .. }) => last = Some(e),
                Err(e @ LaunchError::Rejected(_)) => {
                    refused += 1;
                    last = Some(e);
                }
                Err(e) => return Err(e),
            }
        }
        if refused == addrs.len() {
            break; // every server there refused us: waiting won't change that
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Err(last.unwrap_or_else(|| LaunchError::Usage("no rendezvous address to try".into())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derived_ports_are_the_same_everywhere_and_differ_by_job() {
        let d = |job: &str| Derived {
            host: "node1".into(),
            rank: 1,
            size: 4,
            job: job.into(),
        };
        assert_eq!(d("slurm:12.0").ports(), d("slurm:12.0").ports());
        assert_ne!(d("slurm:12.0").ports(), d("slurm:12.1").ports());
        assert!(
            d("x")
                .ports()
                .iter()
                .all(|&p| (20_000..50_000).contains(&p))
        );
        let list = d("slurm:12.0").exchange(None).unwrap();
        assert_eq!(list.split(',').count(), Derived::PORTS as usize);
        assert!(list.starts_with("node1:"));
    }

    #[test]
    fn host_addresses_put_loopback_last() {
        let a = host_addrs();
        assert!(!a.is_empty());
        let first_lo = a.iter().position(|x| x.is_loopback()).unwrap_or(a.len());
        assert!(a[first_lo..].iter().all(|x| x.is_loopback()), "{a:?}");
    }
}
