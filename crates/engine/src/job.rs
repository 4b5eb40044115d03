//! From a launched job to a [`Transport`]: choose the link, wrap it in faults, choose the
//! protocol (all from a [`JobConfig`]), exchange addresses through the rendezvous, and hand
//! back an engine that ends its waits when another process of the job fails. Every layer
//! above starts here.

use std::io;
use std::net::TcpListener;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bulkwire_launch::{Card, Control};
use bulkwire_link::mcast::{self, McastLink, McastMode, McastSettings};
use bulkwire_link::route::{Route, RouteLink};
use bulkwire_link::{FaultConfig, Faulty, Link, Rendezvous, ShmLink, ShmSizes, UdpConfig, UdpLink};
use bulkwire_protocol::wire::{
    self, Cover, Filter, HEADER_LEN, Header, Integrity, Kind, PacketKey,
};
use bulkwire_protocol::{Common, ProtocolConfigs, SEC, Time};

use crate::tcp::{self, TcpConfig, TcpTransport};
use crate::{DEFAULT_SPIN, Endpoint, EndpointConfig, Engine, Error, Transport, WaitPolicy};

/// Which link carries the job's packets.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LinkKind {
    /// UDP sockets for every peer.
    Udp,
    /// Shared memory for every peer; an error if any runs on another host.
    Shm,
    /// The best link per peer: shared memory to the processes of this host, UDP to the
    /// others (the default).
    #[default]
    Auto,
}

impl LinkKind {
    pub fn name(self) -> &'static str {
        match self {
            LinkKind::Udp => "udp",
            LinkKind::Shm => "shm",
            LinkKind::Auto => "auto",
        }
    }

    /// The byte published in every card, so that ranks started with different settings
    /// fail at once with a clear message instead of disagreeing on rendezvous rounds.
    fn code(self) -> u8 {
        match self {
            LinkKind::Udp => b'u',
            LinkKind::Shm => b's',
            LinkKind::Auto => b'a',
        }
    }
}

// The smallest shared-memory datagram the configuration accepts must carry a packet: the
// header and at least one byte (see `bulkwire_link::shm::MIN_DATAGRAM`).
const _: () = assert!(bulkwire_link::shm::MIN_DATAGRAM > HEADER_LEN);

/// The protocol when the configuration names none and the link is not a clean
/// shared-memory one.
pub const DEFAULT_PROTOCOL: &str = "holefill";

/// How a job's transport is built.
#[derive(Clone, Debug, PartialEq)]
pub struct JobConfig {
    pub link: LinkKind,
    /// Protocol name (see `bulkwire_protocol::PROTOCOLS`), or [`TCP`] for kernel TCP (see
    /// [`connect_transport`]); `None` chooses: `utopia` when every peer is reached over
    /// shared memory without injected faults (the link is reliable, so acknowledgements
    /// and timers would be pure overhead), otherwise [`DEFAULT_PROTOCOL`].
    pub protocol: Option<String>,
    /// Settings of each protocol (the one in use is taken).
    pub protocols: ProtocolConfigs,
    /// Faults injected on every datagram received (none by default).
    pub faults: FaultConfig,
    pub udp: UdpConfig,
    /// The job's IP multicast group (`BULKWIRE_MCAST`): see [`JobInfo::mcast`].
    pub mcast: McastSettings,
    /// Shared-memory ring and datagram sizes (defaults depend on the processes per host).
    pub shm: ShmSizes,
    /// A peer silent this long while we depend on it is declared dead.
    pub dead_after: Time,
    /// How long a wait spins before it sleeps.
    pub spin: Duration,
    /// Keep large freed allocations in the process (default on): see [`tune_malloc`].
    pub tune_malloc: bool,
    /// CRC every datagram even on a link that cannot alter bytes (the default skips it
    /// there: see `LinkCaps::intact`).
    pub always_checksum: bool,
    /// Settings every process of the job must share, as (variable, value): those that
    /// change what goes on the wire, which the configuration lists (see
    /// `bulkwire_config`). Published in every card and compared when the job forms
    /// ([`connect`], [`connect_transport`]): a difference fails the job at once, naming
    /// the variable, the values and the ranks.
    pub agree: Vec<(&'static str, String)>,
    /// Authenticate every checked datagram with a MAC keyed by the job's secret (default
    /// on); off, a cookie and a CRC screen them, which stops no one who learns the cookie.
    pub authenticate: bool,
    /// Across hosts, the MAC covers the payload (default); false: the header and the
    /// payload's CRC32C (`BULKWIRE_AUTH=header`; see `wire::Cover::HeaderCrc`).
    pub mac_payload: bool,
}

impl Default for JobConfig {
    fn default() -> JobConfig {
        JobConfig {
            link: LinkKind::Auto,
            protocol: None,
            protocols: ProtocolConfigs::default(),
            faults: FaultConfig::none(),
            udp: UdpConfig::default(),
            mcast: McastSettings::default(),
            shm: ShmSizes::default(),
            dead_after: DEFAULT_DEAD_AFTER,
            spin: DEFAULT_SPIN,
            tune_malloc: true,
            always_checksum: false,
            agree: Vec::new(),
            authenticate: true,
            mac_payload: true,
        }
    }
}

impl JobConfig {
    /// The protocol named `p`: one of [`stacks`], or [`TCP`] for kernel TCP.
    pub fn with_protocol(mut self, p: &str) -> JobConfig {
        self.protocol = Some(p.to_string());
        self
    }

    pub fn with_link(mut self, link: LinkKind) -> JobConfig {
        self.link = link;
        self
    }

    pub fn with_faults(mut self, faults: FaultConfig) -> JobConfig {
        self.faults = faults;
        self
    }
}

/// A peer silent this long while we depend on it is declared dead, unless configured
/// otherwise.
pub const DEFAULT_DEAD_AFTER: Time = 30 * SEC;

/// What to warn about when `faults` are injected under the protocol `protocol` names
/// (`None`: the default choice, which recovers whenever faults are injected): utopia cannot recover from any of them, so the first datagram lost,
/// corrupted, duplicated, reordered or delayed ends the job. `None` when there is
/// nothing to warn about.
pub fn faults_warning(protocol: Option<&str>, faults: &FaultConfig) -> Option<String> {
    let p = protocol?;
    (faults.is_active()
        && bulkwire_protocol::PROTOCOLS.contains(&p)
        && !bulkwire_protocol::recovers(p))
    .then(|| {
        format!(
            "faults are injected, but {p} has no recovery: the first datagram lost, \
             corrupted, duplicated, reordered or delayed ends the job; {} recover from them",
            bulkwire_protocol::RECOVERING.join(", ")
        )
    })
}

/// The protocol name that chooses the kernel-TCP baseline stack ([`TcpTransport`])
/// instead of a protocol over a link.
pub const TCP: &str = "tcp";

/// Every stack a [`JobConfig`] may name: the protocols, then kernel TCP.
pub fn stacks() -> Vec<&'static str> {
    let mut v = bulkwire_protocol::PROTOCOLS.to_vec();
    v.push(TCP);
    v
}

/// What [`connect`] learnt about the job besides the transport.
#[derive(Clone, Debug)]
pub struct JobInfo {
    /// Every rank's card, by rank.
    pub cards: Vec<Card>,
    /// For each rank, whether it runs on this host.
    pub local: Vec<bool>,
    /// The links in use: `"shm"`, `"udp"`, `"shm+udp"`, or `"tcp"` for kernel TCP.
    pub links: &'static str,
    /// The job's multicast group, opened and found to reach every member
    /// (`BULKWIRE_MCAST`); every process has it or none does.
    pub mcast: Option<Arc<Mutex<McastLink>>>,
    /// Why the group is not in use, where it was tried (`BULKWIRE_MCAST=auto`): the one
    /// line rank 0 printed.
    pub mcast_off: Option<String>,
}

impl JobInfo {
    /// Number of the job's processes on this host (this one included).
    pub fn local_count(&self) -> usize {
        self.local.iter().filter(|&&l| l).count()
    }
}

/// The job's rendezvous as the link layer's [`Rendezvous`] (shared-memory segments, the
/// network cache). The first failure is kept in `failed` so that callers can report it as
/// the job's failure rather than as an I/O error.
pub struct ControlRendezvous<'a> {
    pub ctl: &'a mut Control,
    pub failed: Option<String>,
}

impl<'a> ControlRendezvous<'a> {
    pub fn new(ctl: &'a mut Control) -> ControlRendezvous<'a> {
        ControlRendezvous { ctl, failed: None }
    }

    /// `e` as the engine's error: the job's failure if the rendezvous failed.
    pub fn error(&self, e: io::Error) -> Error {
        match &self.failed {
            Some(f) => Error::JobFailed(f.clone()),
            None => Error::Config(e.to_string()),
        }
    }
}

impl Rendezvous for ControlRendezvous<'_> {
    fn allgather(&mut self, blob: &[u8]) -> io::Result<Vec<Vec<u8>>> {
        self.ctl.allgather(blob).map_err(|e| {
            let m = e.to_string();
            self.failed.get_or_insert(m.clone());
            io::Error::other(m)
        })
    }
}

/// Raises glibc's thresholds for returning freed memory to the kernel, once per process.
///
/// Every message above one packet is reassembled into a buffer of its own, handed to the
/// caller and freed there. glibc serves such sizes (above 128 KiB at first) by `mmap` and
/// unmaps them on free, so each large message costs fresh pages: a page fault and zeroing
/// per 4 KiB, which halved streaming bandwidth at 1 MiB on the machine of
/// `docs/performance.md`. Like MPI libraries that tune malloc for the same reason, keep
/// allocations up to 32 MiB (glibc's largest mmap threshold) on the heap and trim it only
/// above 256 MiB free. The price is memory kept after large messages are freed.
pub fn tune_malloc() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        #[cfg(all(target_os = "linux", target_env = "gnu"))]
        // SAFETY: mallopt only changes allocator parameters; it is documented as safe to
        // call at any time.
        unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
            libc::mallopt(libc::M_TRIM_THRESHOLD, 256 << 20);
        }
    });
}

/// Builds this process's engine for the job `ctl` belongs to. Collective: every process
/// of the job calls it once, in the same order as other rendezvous exchanges, with the same
/// [`LinkKind`] (checked).
pub fn connect(ctl: &mut Control, cfg: &JobConfig) -> Result<(Engine, JobInfo), Error> {
    if cfg.tune_malloc {
        tune_malloc();
    }
    if cfg.protocol.as_deref() == Some(TCP) {
        return Err(Error::Config(
            "protocol tcp is the kernel-TCP stack, not an engine: build the job's \
             transport with job::connect_transport"
                .into(),
        ));
    }
    let rank = ctl.rank();
    let nprocs = ctl.nprocs();
    // Shared memory alone needs no socket; otherwise the card must say where UDP reaches us
    // (which peers are remote is only known from the cards).
    let bound = match cfg.link {
        LinkKind::Shm => None,
        LinkKind::Udp | LinkKind::Auto => {
            Some(UdpLink::bind((ctl.local_ip(), 0).into(), &cfg.udp)?)
        }
    };
    let me = ctl.card(bound.iter().map(|b| b.local_addr()).collect());
    // Sender and receiver must agree on whether datagrams carry a CRC: what decides it
    // beyond the address table (forced, or bytes corrupted on purpose) goes in the card.
    let crc_forced = cfg.always_checksum || cfg.faults.corrupt > 0.0;
    let code = cfg.link.code() | if crc_forced { 0x80 } else { 0 };
    let (cards, local) = exchange_cards(ctl, me.clone(), code, cfg.link.name(), &cfg.agree)?;
    let (mcast, mcast_off) = check_group(ctl, cfg, &local)?;
    let local_count = local.iter().filter(|&&l| l).count();
    if cfg.link == LinkKind::Shm
        && let Some(c) = cards.iter().find(|c| !c.same_host(&me))
    {
        return Err(Error::Config(format!(
            "BULKWIRE_TRANSPORT=shm, but rank {} runs on host {:?} and rank {rank} on {:?}: \
             shared memory reaches only one host (use auto or udp)",
            c.rank, c.host, me.host
        )));
    }
    // Every rank takes part in creating the shared-memory segments (collective, one per
    // host), even those alone on their host.
    let shm = match cfg.link {
        LinkKind::Udp => None,
        LinkKind::Shm | LinkKind::Auto => {
            let shm_cfg = cfg
                .shm
                .resolve(local_count)
                .map_err(|e| Error::Config(e.to_string()))?;
            let mut rv = ControlRendezvous::new(ctl);
            let l = ShmLink::create(rank, &local, &shm_cfg, &mut rv).map_err(|e| rv.error(e))?;
            Some(l)
        }
    };
    let udp = match bound {
        // A UDP link only when some peer is on another host (or UDP is forced).
        Some(b) if cfg.link == LinkKind::Udp || local_count < nprocs as usize => {
            let addrs = cards.iter().map(|c| c.addrs[0]).collect();
            Some(b.into_link(rank, addrs)?)
        }
        _ => None,
    };
    let (inner, links): (Box<dyn Link>, &'static str) = match (shm, udp) {
        (Some(s), None) => (Box::new(s), "shm"),
        (None, Some(u)) => (Box::new(u), "udp"),
        // Alone on this host: nothing to share.
        (Some(_), Some(u)) if local_count == 1 => (Box::new(u), "udp"),
        (Some(s), Some(u)) => {
            let routes = local
                .iter()
                .map(|&l| if l { Route::Near } else { Route::Far })
                .collect();
            (Box::new(RouteLink::new(s, u, routes)?), "shm+udp")
        }
        (None, None) => unreachable!("every kind builds at least one link"),
    };
    let link: Box<dyn Link> = if cfg.faults.is_active() {
        Box::new(Faulty::new(inner, cfg.faults.clone()))
    } else {
        inner
    };
    let caps = link.capabilities();
    let protocol = match &cfg.protocol {
        Some(p) => p.as_str(),
        // A reliable link (clean shared memory to every peer) needs no recovery.
        None if caps.reliable => "utopia",
        None => DEFAULT_PROTOCOL,
    };
    let mut common = Common::new(rank, nprocs, 1);
    common.max_payload = (0..nprocs)
        .map(|p| caps.max_to(p).saturating_sub(HEADER_LEN).max(1))
        .collect();
    let common = cfg.protocols.timers(common);
    let proto = bulkwire_protocol::by_name(protocol, common, &cfg.protocols)
        .map_err(|e| Error::Config(e.to_string()))?;
    let mut ep_cfg = EndpointConfig::with_deadline(ctl.cookie(), cfg.dead_after);
    ep_cfg.always_checksum = cfg.always_checksum;
    ep_cfg.mac = cfg.authenticate.then(|| packet_key(ctl));
    ep_cfg.mac_payload = cfg.mac_payload;
    let ep = Endpoint::new(link, proto, ep_cfg);
    let info = JobInfo {
        cards,
        local,
        links,
        mcast,
        mcast_off,
    };
    let policy = WaitPolicy::new(cfg.spin, info.local_count(), ctl.host_cpus());
    let mut engine = Engine::new(ep, policy);
    engine.set_job(ctl.state());
    Ok((engine, info))
}

/// Builds this process's transport for the job `ctl` belongs to, whatever the stack:
/// a protocol over a link ([`Engine`], as [`connect`]) or, for protocol [`TCP`],
/// kernel TCP connections to every peer, set up here once ([`TcpTransport`]).
/// Collective, like [`connect`].
pub fn connect_transport(
    ctl: &mut Control,
    cfg: &JobConfig,
) -> Result<(Box<dyn Transport>, JobInfo), Error> {
    if cfg.protocol.as_deref() != Some(TCP) {
        let (e, info) = connect(ctl, cfg)?;
        return Ok((Box::new(e), info));
    }
    if cfg.tune_malloc {
        tune_malloc();
    }
    let rank = ctl.rank();
    let listener = TcpListener::bind((ctl.local_ip(), 0))?;
    let me = ctl.card(vec![listener.local_addr()?]);
    let (cards, local) = exchange_cards(ctl, me, b't', "tcp", &cfg.agree)?;
    let (mcast, mcast_off) = check_group(ctl, cfg, &local)?;
    let addrs: Vec<_> = cards.iter().map(|c| c.addrs[0]).collect();
    let tcfg = TcpConfig {
        dead_after: Duration::from_nanos(cfg.dead_after),
        // The same limit as the protocols': a frame is held whole until it is complete.
        max_message: TcpConfig::default()
            .max_message
            .min(cfg.protocols.peer_budget),
        ..TcpConfig::default()
    };
    let streams = tcp::establish(rank, listener, &addrs, ctl.secret(), tcfg.connect_timeout)?;
    let info = JobInfo {
        cards,
        local,
        links: "tcp",
        mcast,
        mcast_off,
    };
    let policy = WaitPolicy::new(cfg.spin, info.local_count(), ctl.host_cpus());
    let mut t = TcpTransport::new(rank, streams, tcfg, policy)?;
    t.set_job(ctl.state());
    Ok((Box::new(t), info))
}

/// What must be alike on every process beyond `agree` (the configuration's list): the
/// packet format, which another build of bulkwire may not share.
fn must_agree(agree: &[(&'static str, String)]) -> Vec<(String, String)> {
    let mut v = vec![(
        "the wire version (another build of bulkwire)".to_string(),
        bulkwire_protocol::wire::VERSION.to_string(),
    )];
    v.extend(agree.iter().map(|(k, val)| (k.to_string(), val.clone())));
    v
}

/// `settings` as bytes for a card: a count, then each name and value with a length byte
/// (longer texts are cut; they are compared, not used).
fn encode_settings(settings: &[(String, String)]) -> Vec<u8> {
    let mut b = vec![settings.len().min(255) as u8];
    for (k, v) in settings.iter().take(255) {
        for s in [k, v] {
            let s = &s.as_bytes()[..s.len().min(255)];
            b.push(s.len() as u8);
            b.extend_from_slice(s);
        }
    }
    b
}

/// The settings a card's bytes after the code carry; an empty list if they are not
/// readable (a build that publishes none, or another layout: its wire version differs).
fn decode_settings(mut b: &[u8]) -> Vec<(String, String)> {
    let take = |b: &mut &[u8]| -> Option<String> {
        let (&n, rest) = b.split_first()?;
        let s = rest.get(..n as usize)?;
        *b = &rest[n as usize..];
        Some(String::from_utf8_lossy(s).into_owned())
    };
    let Some((&n, rest)) = b.split_first() else {
        return Vec::new();
    };
    b = rest;
    let mut v = Vec::with_capacity(n as usize);
    for _ in 0..n {
        match (take(&mut b), take(&mut b)) {
            (Some(k), Some(val)) => v.push((k, val)),
            _ => return Vec::new(),
        }
    }
    v
}

/// Ranks as a short list: `2, 5-7, 9`, after "rank" or "ranks".
fn ranks_text(ranks: &[u32]) -> String {
    let word = if ranks.len() == 1 { "rank" } else { "ranks" };
    format!("{word} {}", bulkwire_launch::rank_list(ranks))
}

/// The settings of `mine` that the ranks' `theirs` (by rank) do not all share, each as
/// "VAR differs: ranks 0-1 use a, rank 2 uses b"; `None` when they agree. A setting some
/// rank does not publish is left out (it belongs to a protocol that rank does not use,
/// which is the difference reported), unless that rank published none at all (another
/// build: its wire version is reported).
fn disagreement(mine: &[(String, String)], theirs: &[Vec<(String, String)>]) -> Option<String> {
    let mut found = Vec::new();
    'names: for (name, _) in mine {
        // Values in order of first appearance, with the ranks holding each.
        let mut groups: Vec<(String, Vec<u32>)> = Vec::new();
        for (r, s) in theirs.iter().enumerate() {
            let v = match s.iter().find(|(k, _)| k == name) {
                Some((_, v)) => v.clone(),
                None if s.is_empty() => "none".to_string(),
                None => continue 'names,
            };
            match groups.iter_mut().find(|(g, _)| *g == v) {
                Some((_, ranks)) => ranks.push(r as u32),
                None => groups.push((v, vec![r as u32])),
            }
        }
        if groups.len() > 1 {
            let parts: Vec<String> = groups
                .iter()
                .map(|(v, ranks)| {
                    let verb = if ranks.len() == 1 { "uses" } else { "use" };
                    format!("{} {verb} {v}", ranks_text(ranks))
                })
                .collect();
            found.push(format!("{name} differs: {}", parts.join(", ")));
        }
    }
    (!found.is_empty()).then(|| found.join("; "))
}

/// Publishes `me` (tagged with this process's transport choice `code`, named `what` in
/// errors, and the settings that must agree: `agree` and the wire version) and collects
/// every rank's card, checked: ranks in order, an address wherever `me` has one, and the
/// same settings and choice everywhere, so that processes started with different settings
/// fail at once with a clear message instead of disagreeing on later rounds or packets.
fn exchange_cards(
    ctl: &mut Control,
    mut me: Card,
    code: u8,
    what: &str,
    agree: &[(&'static str, String)],
) -> Result<(Vec<Card>, Vec<bool>), Error> {
    let mine = must_agree(agree);
    me.extra = vec![code];
    me.extra.extend(encode_settings(&mine));
    let need_addr = !me.addrs.is_empty();
    let rank = me.rank;
    let cards: Vec<Card> = ctl
        .allgather(&me.to_bytes())
        .map_err(|e| Error::JobFailed(e.to_string()))?
        .iter()
        .enumerate()
        .map(|(r, b)| {
            Card::from_bytes(b)
                .filter(|c| c.rank == r as u32)
                .filter(|c| !need_addr || !c.addrs.is_empty())
                .ok_or_else(|| Error::Config(format!("rank {r} published an unusable card")))
        })
        .collect::<Result<_, _>>()?;
    let theirs: Vec<_> = cards
        .iter()
        .map(|c| decode_settings(c.extra.get(1..).unwrap_or_default()))
        .collect();
    if let Some(d) = disagreement(&mine, &theirs) {
        return Err(Error::Config(format!(
            "the job's processes were started with different settings: {d}; set them alike \
             for every process"
        )));
    }
    if let Some(c) = cards.iter().find(|c| c.extra.first() != Some(&code)) {
        return Err(Error::Config(format!(
            "rank {} was started with another BULKWIRE_TRANSPORT, BULKWIRE_PROTOCOL, \
             BULKWIRE_CHECKSUM or corruption in BULKWIRE_FAULTS than rank {rank} ({what}): \
             set them alike for every process",
            c.rank
        )));
    }
    let local = cards.iter().map(|c| c.same_host(&me)).collect();
    Ok((cards, local))
}

/// The job's multicast group, joined by this member.
/// `None` where the settings rule it out for the whole job (off, or a job of one);
/// `Some(Err)` says why this process could not join.
fn open_group(ctl: &Control, s: &McastSettings) -> Option<Result<McastLink, String>> {
    if s.mode == McastMode::Off || ctl.nprocs() < 2 {
        return None;
    }
    let group = s
        .group
        .unwrap_or_else(|| mcast::group_for(&ctl.secret().derive(MCAST_GROUP)));
    let std::net::IpAddr::V4(iface) = ctl.local_ip() else {
        return Some(Err(format!(
            "rank {} reaches the job over IPv6 ({}), and the multicast group is IPv4",
            ctl.rank(),
            ctl.local_ip()
        )));
    };
    Some(
        McastLink::open(group, iface, ctl.rank(), ctl.nprocs(), s)
            .map_err(|e| format!("rank {} could not join {group} on {iface}: {e}", ctl.rank())),
    )
}

/// Detection, after the cards: unless the job is all on one host under `auto` (then no
/// member opens a socket for the group), every member joins the group, the members wait
/// for each other over the launcher's connection (a probe sent before a member joined
/// would be lost to it), every member probes the group, the members compare what they
/// heard, and all keep the group or all drop it. Under `auto` rank 0 prints one line
/// saying why it is dropped; under `on` every member fails with it.
#[allow(clippy::type_complexity)]
fn check_group(
    ctl: &mut Control,
    cfg: &JobConfig,
    local: &[bool],
) -> Result<(Option<Arc<Mutex<McastLink>>>, Option<String>), Error> {
    let s = &cfg.mcast;
    if s.mode == McastMode::Auto && local.iter().all(|&l| l) {
        // One host: the network cache of shared memory serves the collectives.
        return Ok((None, None));
    }
    // The settings and the cards are the same for every member, so all take this branch
    // or none does, and the wait below is collective.
    let Some(group) = open_group(ctl, s) else {
        return Ok((None, None));
    };
    ctl.allgather(&[])
        .map_err(|e| Error::JobFailed(e.to_string()))?;
    let (rank, nprocs) = (ctl.rank(), ctl.nprocs());
    let integrity = integrity(ctl, cfg);
    let filter = Filter {
        cookie: ctl.cookie(),
        me: rank,
        nprocs,
    };
    let mut probe = Header::new(Kind::Ping);
    probe.src = rank;
    probe.dst = wire::GROUP;
    probe.cookie = filter.cookie;
    probe.msg = MCAST_PROBE;
    let hello = integrity.encode(&probe, &[]);
    let mut who = |d: &[u8]| match integrity.decode_group(d, &filter) {
        Ok((h, _)) if h.kind == Kind::Ping && h.msg == MCAST_PROBE => Some(h.src),
        _ => None,
    };
    // Note: 0 = heard, 1 = not; then this member's own failure, if any.
    let (mut link, mut note) = (None, Vec::new());
    match group {
        Ok(mut l) => match l.probe(&hello, &mut who, s.probe_for) {
            Ok(heard) => {
                note = heard.iter().map(|&h| u8::from(!h)).collect();
                link = Some(l);
            }
            Err(e) => {
                note.extend_from_slice(format!("rank {rank} could not probe: {e}").as_bytes())
            }
        },
        Err(e) => note.extend_from_slice(e.as_bytes()),
    }
    let notes = ctl
        .allgather(&note)
        .map_err(|e| Error::JobFailed(e.to_string()))?;
    let group_addr = link.as_ref().map(|l| l.group());
    let verdict = match notes
        .iter()
        .find(|n| n.len() != nprocs as usize || n.iter().any(|&b| b > 1))
    {
        Some(failed) => Err(String::from_utf8_lossy(failed).into_owned()),
        None => {
            let heard: Vec<Vec<bool>> = notes
                .iter()
                .map(|n| n.iter().map(|&b| b == 0).collect())
                .collect();
            mcast::decide(
                &heard,
                group_addr.unwrap_or(std::net::SocketAddrV4::new(
                    std::net::Ipv4Addr::UNSPECIFIED,
                    0,
                )),
            )
        }
    };
    match verdict {
        Ok(()) => Ok((link.map(|l| Arc::new(Mutex::new(l))), None)),
        Err(why) if s.mode == McastMode::On => Err(Error::Config(format!(
            "BULKWIRE_MCAST=on, but {why} (use auto to go on without it)"
        ))),
        Err(why) => {
            let line = format!("multicast off: {why}; collectives use point-to-point algorithms");
            if rank == 0 {
                eprintln!("bulkwire: {line}");
            }
            Ok((None, Some(line)))
        }
    }
}

/// Broadcasts over the job's multicast group, if [`connect`] kept one (see
/// [`crate::mcast`]), checked as the probes were and with the job's faults injected on
/// receive. Every process of the job gets one or none.
pub fn mcast_group(
    ctl: &Control,
    cfg: &JobConfig,
    info: &JobInfo,
    mcfg: bulkwire_protocol::mcast::McastConfig,
) -> Result<Option<crate::mcast::McastGroup>, Error> {
    let Some(link) = &info.mcast else {
        return Ok(None);
    };
    let mut mcfg = mcfg;
    mcfg.dead_after = cfg.dead_after;
    crate::mcast::McastGroup::new(
        link.clone(),
        integrity(ctl, cfg),
        ctl.cookie(),
        &cfg.faults,
        mcfg,
    )
    .map(Some)
}

/// How the group's datagrams are checked: the job's MAC over header and payload, or
/// cookie and CRC where the job authenticates nothing.
fn integrity(ctl: &Control, cfg: &JobConfig) -> Integrity {
    if cfg.authenticate {
        Integrity::Mac(packet_key(ctl), Cover::Payload)
    } else {
        Integrity::Crc
    }
}

/// The context of the multicast group's derivation from the secret.
const MCAST_GROUP: &str = "bulkwire 1 multicast group";
/// The message number of a multicast probe.
const MCAST_PROBE: u32 = 0x4d43_5052;

/// The job's packet key, derived from its secret for this one purpose.
fn packet_key(ctl: &Control) -> PacketKey {
    PacketKey::new(ctl.secret().derive(PACKET_MAC))
}

/// The context of the packet key's derivation: no other use of the secret derives it.
const PACKET_MAC: &str = "bulkwire 1 packet mac";

/// Leaves the job cleanly: waits until everything this process sent is acknowledged
/// (serving peers meanwhile), then meets every other process at a barrier on the control
/// connection while a thread keeps the transport answering, so that no peer is left
/// waiting for an acknowledgement from a process that has gone. Then tells the launcher
/// this process finished with `status`.
pub fn finish<T: Transport>(t: &mut T, mut ctl: Control, status: i32) -> Result<(), Error> {
    t.flush(Some(FINISH_TIMEOUT))?;
    let stop = AtomicBool::new(false);
    let barrier = std::thread::scope(|s| {
        let server = s.spawn(|| {
            while !stop.load(Ordering::Acquire) {
                match t.wait_for(Some(Duration::from_millis(2)), |_| None::<()>) {
                    Err(Error::Timeout(_)) | Ok(()) => {}
                    Err(e) => return Err(e),
                }
            }
            Ok(())
        });
        let r = ctl.allgather(&[]);
        stop.store(true, Ordering::Release);
        let served = server.join().unwrap_or(Ok(()));
        r.map_err(|e| Error::JobFailed(e.to_string())).and(served)
    });
    barrier?;
    ctl.finish(status)
        .map_err(|e| Error::JobFailed(e.to_string()))
}

/// How long [`finish`] waits for this process's data to be acknowledged.
pub const FINISH_TIMEOUT: Duration = Duration::from_secs(60);

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(protocol: &str) -> Vec<(String, String)> {
        must_agree(&[
            ("BULKWIRE_TRANSPORT", "auto".into()),
            ("BULKWIRE_PROTOCOL", protocol.into()),
        ])
    }

    #[test]
    fn settings_that_differ_are_named_with_their_values_and_ranks() {
        let hf = settings("holefill");
        let gbn = settings("gbn");
        let round = decode_settings(&encode_settings(&hf));
        assert_eq!(round, hf);
        assert_eq!(
            disagreement(&hf, &[hf.clone(), hf.clone(), hf.clone()]),
            None
        );
        let d = disagreement(&hf, &[hf.clone(), hf.clone(), gbn.clone()]).unwrap();
        assert_eq!(
            d,
            "BULKWIRE_PROTOCOL differs: ranks 0-1 use holefill, rank 2 uses gbn"
        );
        let d = disagreement(&gbn, &[gbn.clone(), hf.clone(), gbn.clone(), gbn.clone()]).unwrap();
        assert_eq!(
            d,
            "BULKWIRE_PROTOCOL differs: ranks 0, 2-3 use gbn, rank 1 uses holefill"
        );
        // A card without settings (another build) differs in the wire version first.
        let d = disagreement(&hf, &[hf.clone(), decode_settings(&[])]).unwrap();
        assert!(
            d.starts_with("the wire version (another build of bulkwire) differs: rank 0 uses"),
            "{d}"
        );
        assert!(d.ends_with("rank 1 uses none"), "{d}");
        // A setting of a protocol one rank does not use is not reported beside it.
        let mut hf_bits = hf.clone();
        hf_bits.push(("BULKWIRE_HOLEFILL_SEQ_BITS".into(), "32".into()));
        let d = disagreement(&hf_bits, &[hf_bits.clone(), gbn.clone()]).unwrap();
        assert_eq!(
            d,
            "BULKWIRE_PROTOCOL differs: rank 0 uses holefill, rank 1 uses gbn"
        );
    }

    #[test]
    fn faults_under_utopia_are_warned_about() {
        let lossy = FaultConfig::parse("loss=0.01").unwrap();
        let none = FaultConfig::none();
        let w = faults_warning(Some("utopia"), &lossy).expect("a warning");
        for part in [
            "faults are injected",
            "utopia has no recovery",
            "holefill, gbn, rmpp",
        ] {
            assert!(w.contains(part), "{w}");
        }
        assert_eq!(faults_warning(Some("utopia"), &none), None);
        for p in [
            None,
            Some("holefill"),
            Some("gbn"),
            Some("rmpp"),
            Some("tcp"),
        ] {
            assert_eq!(faults_warning(p, &lossy), None, "{p:?}");
        }
        let delayed = FaultConfig::parse("delay=0.5").unwrap();
        assert!(faults_warning(Some("utopia"), &delayed).is_some());
    }
}
