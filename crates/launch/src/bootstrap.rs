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
//!
//! The job's secret: with a key-value service (PMI, PMIx), private to the job, rank 0
//! generates it and publishes it with the addresses. [`Derived`] has no private channel:
//! the secret is derived from the job's name with a key only the user can read (their
//! `BULKWIRE_SECRET`, or `~/.config/bulkwire/key`), so another user can compute the ports
//! but can neither join nor pass for the server.

mod pmi;
mod pmix;

use std::net::{IpAddr, SocketAddr, TcpListener};
use std::time::{Duration, Instant};

pub use pmi::{Pmi1, PmiAddr};
pub use pmix::Pmix;

use crate::LaunchError;
use crate::control::Control;
use crate::env::{JobEnv, LaunchConfig, Launcher};
use crate::job_id_from_name;
use crate::secret::Secret;
use crate::server::{Server, ServerConfig};

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
    /// The job's secret when every rank knows it already; `None`: rank 0 generates it and
    /// publishes it through [`Bootstrap::exchange`], which must then be private to the job.
    fn secret(&self) -> Option<Secret> {
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
    /// The user's key, from which a derived rendezvous derives the job's secret:
    /// `BULKWIRE_SECRET`, `BULKWIRE_SECRET_FILE` or `~/.config/bulkwire/key`. `None`: none
    /// is set up; `Some(Err)`: one is, but can't be used (why, naming the file).
    pub user_key: Option<Result<Secret, String>>,
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
    fn secret(&self) -> Option<Secret> {
        Some(self.0.secret.clone())
    }
    fn exchange(&mut self, _: Option<&str>) -> Result<String, LaunchError> {
        Ok(self.0.rendezvous.to_string())
    }
}

/// No service: rank 0 listens on `host` at one of [`Derived::PORTS`] ports derived from
/// the job's name; the others try them in order. The job's secret derives from the job's
/// name and the user's `key`: a server of another job (or another user's, on a port taken
/// first) can't prove it, so the others move on to the next port and send it nothing.
pub struct Derived {
    pub host: String,
    pub rank: u32,
    pub size: u32,
    pub job: String,
    pub key: Secret,
}

impl Derived {
    /// Candidate ports per job.
    pub const PORTS: u64 = 8;
    /// How a job's secret is derived from the user's key.
    pub const CONTEXT: &str = "bulkwire 1 derived job secret";

    /// What to do without a user key: the message of a derived rendezvous that can't start.
    pub fn no_key() -> String {
        "srun without PMI (--mpi=none) offers no private channel to pass a job secret, and \
         no user key is set up. Use srun --mpi=pmi2 or --mpi=pmix, or create a key once: \
         mkdir -p ~/.config/bulkwire && (umask 077; head -c 32 /dev/urandom | od -An -tx1 | \
         tr -d ' \\n' > ~/.config/bulkwire/key), or export BULKWIRE_SECRET (64 hex digits)"
            .into()
    }
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
    fn secret(&self) -> Option<Secret> {
        Some(self.key.derive_for(Derived::CONTEXT, &self.job))
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
            key: match &offer.user_key {
                Some(Ok(k)) => k.clone(),
                Some(Err(e)) => {
                    return Err(LaunchError::Usage(format!(
                        "a derived rendezvous needs the user's key: {e}"
                    )));
                }
                None => return Err(LaunchError::Usage(Derived::no_key())),
            },
        }),
    })
}

/// Forms the job through `boot` and joins it: rank 0 serves the rendezvous (unless one
/// runs already), everyone joins. Every rank must have joined within `cfg.join_timeout`.
pub fn form(boot: &mut dyn Bootstrap, cfg: &LaunchConfig) -> Result<Control, LaunchError> {
    let (rank, size) = (boot.rank(), boot.size());
    let known = boot.secret();
    let mut env = JobEnv {
        rank,
        nprocs: size,
        // Replaced by rank 0's below when the service carries it.
        secret: known.clone().unwrap_or_else(Secret::generate),
        job_id: job_id_from_name(&boot.job_name()),
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
    // Rank 0 publishes `SECRET;ADDRS` through a private service, its addresses alone
    // through one whose ranks know the secret already.
    let published = served.as_ref().map(|(_, addrs)| match &known {
        Some(_) => join_list(addrs),
        None => format!("{};{}", env.secret.to_hex(), join_list(addrs)),
    });
    let got = boot.exchange(published.as_deref());
    boot.finalize();
    let got = got?;
    let list = match (&known, got.split_once(';')) {
        (Some(_), _) => got.as_str(),
        (None, Some((hex, list))) => {
            env.secret = Secret::from_hex(hex).ok_or_else(|| {
                LaunchError::Protocol(format!(
                    "{}: rank 0 published no usable job secret (value hidden)",
                    boot.describe()
                ))
            })?;
            list
        }
        (None, None) => {
            return Err(LaunchError::Protocol(format!(
                "{}: rank 0 published no job secret (a bulkwire of another version?)",
                boot.describe()
            )));
        }
    };
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
    let mut scfg = ServerConfig::new(env.nprocs, env.secret.clone());
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
/// `deadline` (rank 0 may not be listening yet; a server of another job, or one that
/// can't prove the secret, is passed over).
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
                // Refused, or a server that can't prove the secret (another job's, or
                // something else on a port taken first): try the next candidate.
                Err(e @ LaunchError::Rejected(_)) => {
                    refused += 1;
                    last = Some(e);
                }
                // Not listening yet, silent, not a bulkwire server: the next, then again.
                Err(e) => last = Some(e),
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
            key: Secret::from_hex(&"11".repeat(32)).unwrap(),
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
        // The secret: the same everywhere for one user and job, different per job and key.
        assert_eq!(d("slurm:12.0").secret(), d("slurm:12.0").secret());
        assert_ne!(d("slurm:12.0").secret(), d("slurm:12.1").secret());
        let mut other = d("slurm:12.0");
        other.key = Secret::generate();
        assert_ne!(other.secret(), d("slurm:12.0").secret());
    }

    /// A key-value service in memory: rank 0's value, for every rank.
    struct Board {
        rank: u32,
        size: u32,
        value: std::sync::Arc<(std::sync::Mutex<Option<String>>, std::sync::Condvar)>,
    }

    impl Bootstrap for Board {
        fn describe(&self) -> String {
            "a test board".into()
        }
        fn rank(&self) -> u32 {
            self.rank
        }
        fn size(&self) -> u32 {
            self.size
        }
        fn job_name(&self) -> String {
            "board:1".into()
        }
        fn exchange(&mut self, mine: Option<&str>) -> Result<String, LaunchError> {
            let (m, cv) = &*self.value;
            let mut v = m.lock().unwrap();
            if let Some(x) = mine {
                *v = Some(x.to_string());
                cv.notify_all();
            }
            while v.is_none() {
                v = cv.wait(v).unwrap();
            }
            Ok(v.clone().unwrap())
        }
    }

    #[test]
    fn rank_0_publishes_a_fresh_secret_with_its_addresses() {
        let value = std::sync::Arc::new((std::sync::Mutex::new(None), std::sync::Condvar::new()));
        let cfg = LaunchConfig {
            join_timeout: Duration::from_secs(20),
            ..LaunchConfig::default()
        };
        let ranks: Vec<_> = (0..3)
            .map(|rank| {
                let (value, cfg) = (value.clone(), cfg.clone());
                std::thread::spawn(move || {
                    let mut b = Board {
                        rank,
                        size: 3,
                        value,
                    };
                    let mut c = form(&mut b, &cfg).unwrap();
                    let cookies = c.allgather(&c.cookie().to_le_bytes()).unwrap();
                    let hex = c.secret().to_hex();
                    c.finish(0).unwrap();
                    (hex, cookies)
                })
            })
            .collect();
        let got: Vec<_> = ranks.into_iter().map(|t| t.join().unwrap()).collect();
        let published = value.0.lock().unwrap().clone().unwrap();
        let (hex, addrs) = published.split_once(';').unwrap();
        assert_eq!(hex.len(), 64);
        assert!(addrs.contains(':'), "{published}");
        for (h, cookies) in &got {
            assert_eq!(h, hex);
            assert!(cookies.iter().all(|c| c == &cookies[0]));
        }
    }

    #[test]
    fn a_derived_rendezvous_without_a_user_key_says_how_to_make_one() {
        let mut offer = BootOffer {
            service: BootService::Derived {
                host: "node1".into(),
            },
            launcher: Launcher::Slurm,
            rank: Some(1),
            size: Some(4),
            job_name: Some("slurm:3.0".into()),
            user_key: None,
        };
        let e = open(&offer, Duration::from_secs(1))
            .err()
            .unwrap()
            .to_string();
        for want in [
            "--mpi=pmi2",
            "umask 077",
            ".config/bulkwire/key",
            "BULKWIRE_SECRET",
        ] {
            assert!(e.contains(want), "{e}");
        }
        offer.user_key = Some(Err("/home/u/.config/bulkwire/key has mode 0644".into()));
        let e = open(&offer, Duration::from_secs(1))
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("mode 0644"), "{e}");
    }

    #[test]
    fn a_port_taken_first_by_an_impostor_gets_no_card() {
        use std::io::Write;
        use std::sync::atomic::{AtomicBool, Ordering};
        let key = Secret::generate();
        let d = |rank| Derived {
            host: "127.0.0.1".into(),
            rank,
            size: 3,
            job: format!("slurm:{}.7", std::process::id()),
            key: key.clone(),
        };
        // Another user computed the ports and took the first: it challenges, accepts any
        // hello, and welcomes with a made-up proof, hoping for cards.
        let Ok(l) = TcpListener::bind(("0.0.0.0", d(0).ports()[0])) else {
            return; // the port is in use here: nothing to test
        };
        l.set_nonblocking(true).unwrap();
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        let impostor = std::thread::spawn(move || {
            let mut seen = Vec::new();
            while !stop2.load(Ordering::Relaxed) {
                let Ok((mut s, _)) = l.accept() else {
                    std::thread::sleep(Duration::from_millis(5));
                    continue;
                };
                s.set_nonblocking(false).unwrap();
                s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
                let mut ch = crate::wire::challenge(&[3u8; 32]);
                let _ = s.write_all(&ch);
                let mut buf = Vec::new();
                while let Ok(Some(t)) = crate::wire::read_frame(&mut s, &mut buf) {
                    seen.push(t);
                    if t == crate::wire::T_HELLO {
                        ch = crate::wire::welcome(Some(0), &Secret::generate(), b"x");
                        let _ = s.write_all(&ch);
                    }
                }
            }
            seen
        });
        let cfg = LaunchConfig {
            join_timeout: Duration::from_secs(20),
            ..LaunchConfig::default()
        };
        let ranks: Vec<_> = (0..3)
            .map(|rank| {
                let (mut b, cfg) = (d(rank), cfg.clone());
                std::thread::spawn(move || {
                    let mut c = form(&mut b, &cfg).unwrap();
                    let port = c.env().rendezvous.port();
                    c.allgather(b"card").unwrap();
                    c.finish(0).unwrap();
                    port
                })
            })
            .collect();
        let ports: Vec<u16> = ranks.into_iter().map(|t| t.join().unwrap()).collect();
        stop.store(true, Ordering::Relaxed);
        let seen = impostor.join().unwrap();
        assert!(ports.iter().all(|&p| p != d(0).ports()[0]), "{ports:?}");
        assert!(
            !seen.contains(&crate::wire::T_EXCHANGE),
            "the impostor got {seen:?}"
        );
    }

    #[test]
    fn host_addresses_put_loopback_last() {
        let a = host_addrs();
        assert!(!a.is_empty());
        let first_lo = a.iter().position(|x| x.is_loopback()).unwrap_or(a.len());
        assert!(a[first_lo..].iter().all(|x| x.is_loopback()), "{a:?}");
    }
}
