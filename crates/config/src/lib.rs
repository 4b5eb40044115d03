//! bulkwire's configuration, read once at the edge.
//!
//! Every `BULKWIRE_*` variable is read here, and only here: the C ABI, the launchers, the
//! tools and Rust programs call [`Settings::from_env`] once and hand each layer its typed
//! configuration (`bulkwire_p2p::Config`, `bulkwire_bsp::Config`, ...). The layers below
//! read no environment. Every value goes through one set of parsers ([`parse`]), and a
//! value that is not accepted is an error naming the variable, the value and what is
//! accepted ([`ConfigError`]), never a silent default. The variables, with what they
//! accept and their defaults, are one table ([`vars`]), from which `docs/configuration.md`
//! and `bsprun --help-env` are generated.
//!
//! ```no_run
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let settings = bulkwire_config::Settings::from_env()?;
//! let mut bsp = bulkwire_bsp::Bsp::begin(4, &settings.launch, settings.bsp.clone())?;
//! # bsp.end()?; Ok(()) }
//! ```

mod job;
pub mod parse;
pub mod vars;

use std::time::Duration;

use bulkwire_bsp::Schedule;
use bulkwire_collectives::{Family, Mode};
use bulkwire_engine::job::{JobConfig, LinkKind};
use bulkwire_launch::{LaunchConfig, Placement};
use bulkwire_link::{FaultConfig, McastMode, McastSettings, ShmSizes, UdpConfig};
use bulkwire_p2p::SingleCopy;
use bulkwire_protocol::gbn::GbnConfig;
use bulkwire_protocol::holefill::HolefillConfig;
use bulkwire_protocol::rmpp::RmppConfig;
use bulkwire_protocol::{MS, ProtocolConfigs, US};

use parse::{Lookup, decimal, flag, int, size, word};
use vars::*;

/// A setting that cannot be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// One variable's value is not accepted.
    #[error("{var}={value:?} is not accepted: expected {accepted}")]
    Bad {
        var: &'static str,
        value: String,
        accepted: &'static str,
    },
    /// Values that are each accepted do not work together, or a launcher's variables
    /// contradict each other.
    #[error("{vars}: {reason}")]
    Invalid { vars: String, reason: String },
}

impl ConfigError {
    fn invalid(vars: &[&Var], reason: impl std::fmt::Display) -> ConfigError {
        ConfigError::Invalid {
            vars: vars.iter().map(|v| v.name).collect::<Vec<_>>().join(", "),
            reason: reason.to_string(),
        }
    }
}

/// Everything the environment configures, one typed value per layer.
#[derive(Clone, Debug, PartialEq)]
pub struct Settings {
    /// The job this process runs in, and how it starts one itself.
    pub launch: LaunchConfig,
    /// Point-to-point messaging (`bw_init`, `bulkwire_p2p::Comm`), with the job's
    /// transport and progress settings.
    pub p2p: bulkwire_p2p::Config,
    /// BSPlib (`bsp_begin`), with the same transport and progress settings.
    pub bsp: bulkwire_bsp::Config,
    /// The collectives.
    pub coll: bulkwire_collectives::Config,
    /// Something the user should know that is not an error (e.g. faults injected under a
    /// protocol without recovery); the edge prints these.
    pub warnings: Vec<String>,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings::from_lookup(|_| None).expect("the defaults are valid")
    }
}

impl Settings {
    /// The settings of this process's environment.
    pub fn from_env() -> Result<Settings, ConfigError> {
        Settings::from_lookup(|k| std::env::var(k).ok())
    }

    /// The settings with variables looked up through `get` (a map in tests).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Settings, ConfigError> {
        Settings::read(&Lookup::new(get))
    }

    fn read(l: &Lookup) -> Result<Settings, ConfigError> {
        let job = job_config(l)?;
        let progress = l
            .get(&PROGRESS_US, |v| int(v, 0, 10_000_000))?
            .map_or(Some(bulkwire_engine::progress::DEFAULT_INTERVAL), |us| {
                (us > 0).then(|| Duration::from_micros(us))
            });
        let p2p = p2p_config(l, job.clone(), progress)?;
        let bsp = bsp_config(l, job.clone(), progress)?;
        let coll = coll_config(l, &job)?;
        let launch = launch_config(l)?;
        let warnings = bulkwire_engine::job::faults_warning(job.protocol.as_deref(), &job.faults)
            .map(|w| format!("{} and {}: {w}", PROTOCOL.name, FAULTS.name))
            .into_iter()
            .collect();
        Ok(Settings {
            launch,
            p2p,
            bsp,
            coll,
            warnings,
        })
    }

    /// The job's transport settings (the same in [`Settings::p2p`] and
    /// [`Settings::bsp`]).
    pub fn job(&self) -> &JobConfig {
        &self.p2p.job
    }

    /// The variables [`Settings::from_lookup`] looks up, to check the table against.
    pub fn variables_read() -> std::collections::BTreeSet<&'static str> {
        let l = Lookup::new(|_| None);
        Settings::read(&l).expect("the defaults are valid");
        l.read()
    }
}

fn job_config(l: &Lookup) -> Result<JobConfig, ConfigError> {
    let d = JobConfig::default();
    let stacks = bulkwire_engine::job::stacks();
    let protocol = l.get(&PROTOCOL, |v| stacks.contains(&v).then(|| v.to_string()))?;
    let link = l
        .get(&TRANSPORT, |v| {
            word(
                v,
                &[
                    ("auto", LinkKind::Auto),
                    ("shm", LinkKind::Shm),
                    ("udp", LinkKind::Udp),
                ],
            )
        })?
        .unwrap_or(d.link);
    let faults = l
        .get(&FAULTS, |v| v.parse::<FaultConfig>().ok())?
        .unwrap_or(d.faults);
    let always_checksum = l
        .get(&CHECKSUM, |v| word(v, &[("auto", false), ("always", true)]))?
        .unwrap_or(d.always_checksum);
    let (authenticate, mac_payload) = l
        .get(&AUTH, |v| {
            word(
                v,
                &[
                    ("mac", (true, true)),
                    ("header", (true, false)),
                    ("off", (false, true)),
                ],
            )
        })?
        .unwrap_or((d.authenticate, d.mac_payload));
    let dead_after = l
        .get(&DEAD_AFTER_MS, |v| int(v, 100, 7 * 24 * 3_600_000))?
        .map_or(d.dead_after, |ms| ms * MS);
    let spin = l
        .get(&SPIN_US, |v| int(v, 0, 10_000_000))?
        .map_or(d.spin, Duration::from_micros);
    let tune_malloc = l.get(&MALLOC_TUNE, flag)?.unwrap_or(d.tune_malloc);
    let protocols = protocol_configs(l)?;
    let agree = must_agree(
        mcast_mode(l)?,
        link,
        protocol.as_deref(),
        always_checksum,
        match (authenticate, mac_payload) {
            (false, _) => "off",
            (true, true) => "mac",
            (true, false) => "header",
        },
        &protocols,
    );
    Ok(JobConfig {
        link,
        protocol,
        protocols,
        faults,
        udp: udp_config(l)?,
        mcast: mcast_settings(l)?,
        shm: shm_sizes(l)?,
        dead_after,
        spin,
        tune_malloc,
        always_checksum,
        agree,
        authenticate,
        mac_payload,
    })
}

/// The settings that change what goes on the wire, which every process of a job must
/// share (compared when the job forms: see `JobConfig::agree`). Those of one protocol
/// count only when it may be in use. The others are one process's own business (windows,
/// timers and eager limits are the sender's; the receiver takes what comes), or are
/// agreed where they are used (shared-memory sizes when the segments are made, the BSP
/// sync board, the collectives' settings).
fn must_agree(
    mcast: McastMode,
    link: LinkKind,
    protocol: Option<&str>,
    always_checksum: bool,
    auth: &str,
    p: &ProtocolConfigs,
) -> Vec<(&'static str, String)> {
    let mut v = vec![
        (TRANSPORT.name, link.name().to_string()),
        (PROTOCOL.name, protocol.unwrap_or("the default").to_string()),
        (
            CHECKSUM.name,
            if always_checksum { "always" } else { "auto" }.to_string(),
        ),
        (AUTH.name, auth.to_string()),
        // Members that would open the group and those that would not disagree on the
        // rounds of the job's start.
        (MCAST.name, mcast.name().to_string()),
        // One sender without congestion control takes a shared port from the others.
        (
            CC.name,
            match (p.cc, p.cc_all) {
                (false, _) => "off",
                (true, false) => "on",
                (true, true) => "all",
            }
            .to_string(),
        ),
    ];
    // Sequence numbers wrap at 2^bits: both ends must count alike.
    match protocol {
        Some("gbn") => v.push((GBN_SEQ_BITS.name, p.gbn.seq_bits.to_string())),
        Some("holefill") | None => {
            v.push((HOLEFILL_SEQ_BITS.name, p.holefill.seq_bits.to_string()))
        }
        _ => {}
    }
    v
}

fn mcast_mode(l: &Lookup) -> Result<McastMode, ConfigError> {
    Ok(l.get(&MCAST, |v| {
        word(
            v,
            &[
                ("auto", McastMode::Auto),
                ("on", McastMode::On),
                ("off", McastMode::Off),
            ],
        )
    })?
    .unwrap_or_default())
}

fn mcast_settings(l: &Lookup) -> Result<McastSettings, ConfigError> {
    let d = McastSettings::default();
    let udp = udp_config(l)?;
    Ok(McastSettings {
        mode: mcast_mode(l)?,
        ttl: l
            .get(&MCAST_TTL, |v| int(v, 1, 255))?
            .map_or(d.ttl, |t| t as u32),
        mtu: udp.mtu.unwrap_or(d.mtu),
        sockbuf: udp.sockbuf,
        group: l
            .get(&MCAST_GROUP, |v| {
                v.parse::<std::net::SocketAddrV4>()
                    .ok()
                    .filter(|a| a.ip().is_multicast() && a.port() != 0)
                    .map(Some)
            })?
            .unwrap_or(d.group),
        ..d
    })
}

fn udp_config(l: &Lookup) -> Result<UdpConfig, ConfigError> {
    let d = UdpConfig::default();
    Ok(UdpConfig {
        gso: l.get(&GSO, flag)?.unwrap_or(d.gso),
        gro: l.get(&GRO, flag)?.unwrap_or(d.gro),
        // setsockopt takes an int, and the kernel doubles it.
        sockbuf: l
            .get(&SOCKBUF, |v| size(v, 1, 1 << 30))?
            .map_or(d.sockbuf, |b| b as usize),
        mtu: l
            .get(&MTU, |v| int(v, 576, 65536))?
            .map(|m| m as usize)
            .or(d.mtu),
        batch: d.batch,
    })
}

fn shm_sizes(l: &Lookup) -> Result<ShmSizes, ConfigError> {
    let ring = l.get(&SHM_RING, |v| {
        size(
            v,
            bulkwire_link::shm::MIN_RING as u64,
            bulkwire_link::shm::MAX_RING as u64,
        )
        .filter(|r| r.is_power_of_two())
    })?;
    let dgram = l.get(&SHM_DGRAM, |v| {
        size(v, bulkwire_link::shm::MIN_DATAGRAM as u64, 1 << 28)
    })?;
    let sizes = ShmSizes {
        ring_bytes: ring.map(|r| r as usize),
        max_datagram: dgram.map(|d| d as usize),
    };
    // The ring's default depends on the processes per host; an explicit datagram must fit
    // the ring it is paired with (checked again once that is known).
    if let Err(e) = sizes.resolve(1) {
        return Err(ConfigError::invalid(&[&SHM_RING, &SHM_DGRAM], e));
    }
    Ok(sizes)
}

fn protocol_configs(l: &Lookup) -> Result<ProtocolConfigs, ConfigError> {
    let num = |var: &'static Var| l.get(var, |v| int(v, 0, u32::MAX as u64));
    let u32_of = |v: u64| v as u32;

    let jobs = ProtocolConfigs::default();
    let backoff = |var: &'static Var, hi: u64| l.get(var, |v| int(v, 0, hi));
    let d = jobs.gbn;
    let gbn = GbnConfig {
        window: num(&GBN_WINDOW)?.map_or(d.window, u32_of),
        seq_bits: num(&GBN_SEQ_BITS)?.map_or(d.seq_bits, u32_of),
        rx_slots: num(&GBN_RX_SLOTS)?.map_or(d.rx_slots, u32_of),
        cumulative_acks: l
            .get(&GBN_CUMULATIVE_ACKS, flag)?
            .unwrap_or(d.cumulative_acks),
        backoff_after: backoff(&GBN_BACKOFF_AFTER, 20)?.map_or(d.backoff_after, u32_of),
        max_backoff: backoff(&GBN_MAX_BACKOFF, 20)?.map_or(d.max_backoff, u32_of),
    };
    gbn.validate()
        .map_err(|e| ConfigError::invalid(&[&GBN_WINDOW, &GBN_SEQ_BITS, &GBN_RX_SLOTS], e))?;

    let d = HolefillConfig::default();
    let us = |var: &'static Var| l.get(var, |v| int(v, 1, 60_000_000));
    let mut holefill = HolefillConfig {
        buffers: num(&HOLEFILL_BUFFERS)?.map_or(d.buffers, u32_of),
        seq_bits: num(&HOLEFILL_SEQ_BITS)?.map_or(d.seq_bits, u32_of),
        burst: num(&HOLEFILL_BURST)?.map_or(d.burst, |v| v as usize),
        prod_min: us(&HOLEFILL_PROD_MIN_US)?.map_or(d.prod_min, |v| v * US),
        prod_max: us(&HOLEFILL_PROD_MAX_US)?.map_or(d.prod_max, |v| v * US),
        inflight_bytes: l
            .get(&HOLEFILL_INFLIGHT_KB, |v| int(v, 1, 4 << 20))?
            .map_or(d.inflight_bytes, |kb| kb << 10),
        window: d.window,
    };
    holefill.window = match num(&HOLEFILL_WINDOW)? {
        Some(w) => u32_of(w),
        // Fewer buffers or sequence numbers alone shrink the default window to fit them.
        None => d.window.min(holefill.max_window()).max(1),
    };
    holefill.validate().map_err(|e| {
        ConfigError::invalid(
            &[
                &HOLEFILL_BUFFERS,
                &HOLEFILL_SEQ_BITS,
                &HOLEFILL_WINDOW,
                &HOLEFILL_BURST,
                &HOLEFILL_PROD_MIN_US,
                &HOLEFILL_PROD_MAX_US,
            ],
            e,
        )
    })?;

    let d = jobs.rmpp;
    let rmpp = RmppConfig {
        backoff_after: backoff(&RMPP_BACKOFF_AFTER, 20)?.map_or(d.backoff_after, u32_of),
        max_backoff: backoff(&RMPP_MAX_BACKOFF, 16)?.map_or(d.max_backoff, u32_of),
        window: l
            .get(&RMPP_WINDOW, |v| int(v, 1, 1 << 30))?
            .map_or(d.window, u32_of),
        burst: l
            .get(&RMPP_BURST, |v| int(v, 1, u32::MAX as u64))?
            .map_or(d.burst, |v| v as usize),
        auto_accept: l.get(&RMPP_AUTO_ACCEPT, flag)?.unwrap_or(d.auto_accept),
        announce_bytes: l
            .get(&RMPP_ANNOUNCE_KIB, |v| int(v, 1, 1 << 30))?
            .map_or(d.announce_bytes, |kb| kb << 10),
    };
    rmpp.validate()
        .map_err(|e| ConfigError::invalid(&[&RMPP_WINDOW, &RMPP_BURST, &RMPP_ANNOUNCE_KIB], e))?;
    let timer = |var: &'static Var| l.get(var, |v| int(v, 1, 1_000_000));
    // (on, all): `all` adds holefill's window and rmpp's pacing.
    let cc = l.get(&CC, |v| {
        if v.eq_ignore_ascii_case("all") {
            Some((true, true))
        } else {
            flag(v).map(|on| (on, false))
        }
    })?;
    Ok(ProtocolConfigs {
        gbn,
        holefill,
        rmpp,
        rto_initial: timer(&RTO_INITIAL_US)?.map_or(jobs.rto_initial, |v| v * US),
        rto_min: timer(&RTO_MIN_US)?.map_or(jobs.rto_min, |v| v * US),
        peer_budget: l
            .get(&PEER_BUDGET, |v| size(v, 1 << 20, 1 << 40))?
            .unwrap_or(jobs.peer_budget),
        cc: cc.map_or(jobs.cc, |(on, _)| on),
        cc_all: cc.map_or(jobs.cc_all, |(_, all)| all),
    })
}

/// A threshold in bytes, or `off` for one never reached.
fn size_or_off(v: &str) -> Option<usize> {
    if v == "off" {
        Some(usize::MAX)
    } else {
        size(v, 0, u64::MAX).map(|b| b.min(usize::MAX as u64) as usize)
    }
}

fn p2p_config(
    l: &Lookup,
    job: JobConfig,
    progress: Option<Duration>,
) -> Result<bulkwire_p2p::Config, ConfigError> {
    let d = bulkwire_p2p::Config::default();
    let limit = |var: &'static Var| l.get(var, |v| size(v, 0, 1 << 30));
    let both = limit(&EAGER)?;
    let single_copy = l
        .get(&SINGLE_COPY, |v| {
            word(
                v,
                &[
                    ("on", SingleCopy::On),
                    ("off", SingleCopy::Off),
                    ("refuse", SingleCopy::Refuse),
                ],
            )
            .or_else(|| flag(v).map(|on| if on { SingleCopy::On } else { SingleCopy::Off }))
        })?
        .unwrap_or(d.single_copy);
    let split = l.get(&SPLIT_COPY, size_or_off)?.unwrap_or(d.split);
    Ok(bulkwire_p2p::Config {
        eager: both.map_or(d.eager, |b| b as usize),
        eager_local: limit(&EAGER_LOCAL)?
            .or(both)
            .map_or(d.eager_local, |b| b as usize),
        single_copy,
        split,
        progress,
        job,
    })
}

fn bsp_config(
    l: &Lookup,
    job: JobConfig,
    progress: Option<Duration>,
) -> Result<bulkwire_bsp::Config, ConfigError> {
    let mut c = bulkwire_bsp::Config {
        job,
        progress,
        ..bulkwire_bsp::Config::default()
    };
    if let Some(s) = l.get(&BSP_SCHEDULE, |v| {
        word(
            v,
            &[
                ("latin", Schedule::Latin),
                ("pid", Schedule::Pid),
                ("random", Schedule::Random),
            ],
        )
    })? {
        c.schedule = s;
    }
    c.chunk = l
        .get(&BSP_CHUNK, |v| size(v, 1, 1 << 30))?
        .map(|b| b as usize);
    if let Some(rate) = l.get(&BSP_RATE, |v| decimal(v, 1, u64::MAX))? {
        c = c.with_rate(rate);
    }
    c.board = l.get(&BSP_BOARD, flag)?.unwrap_or(true);
    c.lend = l.get(&BSP_LEND, size_or_off)?.unwrap_or(c.lend);
    c.mcast_min = l.get(&BSP_MCAST_MIN, size_or_off)?.unwrap_or(c.mcast_min);
    c.stats = l.get(&STATS, flag)?.unwrap_or(false);
    c.profile = l.raw(&PROFILE).map(std::path::PathBuf::from);
    Ok(c)
}

fn coll_config(l: &Lookup, job: &JobConfig) -> Result<bulkwire_collectives::Config, ConfigError> {
    let mut c = bulkwire_collectives::Config {
        dead_after: Duration::from_nanos(job.dead_after),
        ..bulkwire_collectives::Config::default()
    };
    if let Some(m) = l.get(&COLL, |v| {
        word(
            v,
            &[
                ("auto", Mode::Auto),
                ("netcache", Mode::NetCache),
                ("p2p", Mode::P2p),
            ],
        )
    })? {
        c.mode = m;
    }
    if let Some(b) = l.get(&COLL_MCAST_MIN, size_or_off)? {
        c.mcast_min = b;
    }
    if let Some(b) = l.get(&COLL_PART, |v| size(v, 1, 1 << 30))? {
        c.part_bytes = b as usize;
    }
    if let Some(f) = l.get(&COLL_ALG, |v| {
        word(
            v,
            &[
                ("auto", Family::Auto),
                ("small", Family::Small),
                ("large", Family::Large),
            ],
        )
    })? {
        c.family = f;
    }
    if let Some(t) = l.get(&COLL_DIRECT, size_or_off)? {
        c.thresholds.netcache_direct = t;
    }
    Ok(c)
}

/// The form of `BULKWIRE_SPMD_ENTRY` (`MODULE:OFFSET:CHECK:NAME`: decimal, hex, 16 hex
/// digits, any text). Whether it names a function of this program is checked where it
/// is used, against the loaded program (the C library's `spmd` module), before any jump.
fn spmd_entry(v: &str) -> Option<String> {
    let mut it = v.splitn(4, ':');
    let index = it.next()?;
    let offset = it.next()?;
    let check = it.next()?;
    it.next()?;
    let digits = |s: &str, radix: u32| !s.is_empty() && s.chars().all(|c| c.is_digit(radix));
    (digits(index, 10) && index.len() <= 9 && digits(offset, 16) && offset.len() <= 16)
        .then_some(())
        .filter(|()| check.len() == 16 && digits(check, 16))
        .map(|()| v.to_string())
}

fn launch_config(l: &Lookup) -> Result<LaunchConfig, ConfigError> {
    let host_id = l.raw(&HOST_ID);
    let host_cpus = l.get(&HOST_CPUS, |v| int(v, 1, 65536))?.map(|n| n as usize);
    let entry = l.get(&SPMD_ENTRY, spmd_entry)?;
    let job::Joining { mut job, boot } = job::job_env(l)?;
    if let Some(j) = &mut job {
        j.host_id = host_id.clone();
        j.host_cpus = host_cpus;
        j.entry = entry;
    }
    let join_timeout = l
        .get(&JOIN_TIMEOUT, |v| int(v, 1, 86_400))?
        .map_or(bulkwire_launch::DEFAULT_JOIN_TIMEOUT, Duration::from_secs);
    let rsh = match l.raw(&RSH) {
        Some(v) => v.split_whitespace().map(Into::into).collect(),
        None => LaunchConfig::default().rsh,
    };
    let nprocs = l
        .get(&NPROCS, |v| int(v, 1, u32::MAX as u64))?
        .map(|n| n as u32);
    let placement = l
        .get(&BIND, |v| {
            word(
                v,
                &[
                    ("share", Placement::Share),
                    ("auto", Placement::Share),
                    ("none", Placement::Free),
                    ("off", Placement::Free),
                ],
            )
        })?
        .unwrap_or_default();
    Ok(LaunchConfig {
        job,
        boot,
        join_timeout,
        rsh,
        nprocs,
        placement,
        host_id,
        host_cpus,
    })
}

#[cfg(test)]
mod tests;

/// The Rust snippets of the documents, compiled as doctests (`cargo test -p
/// bulkwire-config --doc`), so a snippet that does not match the API fails the tests.
/// This crate depends on every layer a snippet uses; `build.rs` keeps only the
/// documents' Rust blocks.
#[cfg(doctest)]
mod docs {
    #[doc = include_str!(concat!(env!("OUT_DIR"), "/p2p.md"))]
    struct P2p;
    #[doc = include_str!(concat!(env!("OUT_DIR"), "/collectives.md"))]
    struct Collectives;
    #[doc = include_str!(concat!(env!("OUT_DIR"), "/bsp.md"))]
    struct Bsp;
    #[doc = include_str!(concat!(env!("OUT_DIR"), "/configuration.md"))]
    struct Configuration;
    #[doc = include_str!(concat!(env!("OUT_DIR"), "/launch.md"))]
    struct Launch;
}
