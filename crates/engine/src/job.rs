//! From a launched job to a [`Transport`]: choose the link (`BULKWIRE_TRANSPORT`), wrap it
//! in faults (`BULKWIRE_FAULTS`), choose the protocol (`BULKWIRE_PROTOCOL`), exchange
//! addresses through the rendezvous, and hand back an engine that ends its waits when
//! another process of the job fails. Every layer above starts here.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bulkwire_launch::{Card, Control};
use bulkwire_link::{FaultConfig, Faulty, Link, UdpConfig, UdpLink};
use bulkwire_protocol::wire::HEADER_LEN;
use bulkwire_protocol::{Common, SEC, Time};

use std::net::TcpListener;

use crate::tcp::{self, TcpConfig, TcpTransport};
use crate::{Endpoint, EndpointConfig, Engine, Error, Transport, WaitPolicy};

/// Which link carries the job's packets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkKind {
    /// UDP sockets for every peer.
    Udp,
    /// The best link per peer: shared memory on this host where available, UDP otherwise.
    Auto,
}

impl LinkKind {
    fn parse(s: &str) -> Result<LinkKind, Error> {
        match s {
            "udp" => Ok(LinkKind::Udp),
            "auto" | "" => Ok(LinkKind::Auto),
            other => Err(Error::Config(format!(
                "BULKWIRE_TRANSPORT={other:?}: expected udp or auto"
            ))),
        }
    }
}

/// How a job's transport is built.
#[derive(Clone, Debug)]
pub struct JobConfig {
    pub link: LinkKind,
    /// Protocol name (see `bulkwire_protocol::PROTOCOLS`).
    pub protocol: String,
    /// Faults injected on every datagram received (none by default).
    pub faults: FaultConfig,
    pub udp: UdpConfig,
    /// A peer silent this long while we depend on it is declared dead.
    pub dead_after: Time,
}

impl JobConfig {
    /// The defaults, overridden by `BULKWIRE_TRANSPORT`, `BULKWIRE_PROTOCOL` (default
    /// `holefill`; `tcp` for kernel TCP, see [`connect_transport`]), `BULKWIRE_FAULTS`, `BULKWIRE_DEAD_AFTER_MS` and the UDP variables.
    pub fn from_env() -> Result<JobConfig, Error> {
        let var = |k: &str| std::env::var(k).ok();
        let link = LinkKind::parse(&var("BULKWIRE_TRANSPORT").unwrap_or_default())?;
        let protocol = var("BULKWIRE_PROTOCOL")
            .filter(|p| !p.is_empty())
            .unwrap_or_else(|| "holefill".into());
        if protocol != TCP && !bulkwire_protocol::PROTOCOLS.contains(&protocol.as_str()) {
            return Err(Error::Config(format!(
                "BULKWIRE_PROTOCOL={protocol:?}: known protocols are {} and {TCP}",
                bulkwire_protocol::PROTOCOLS.join(", ")
            )));
        }
        let faults = FaultConfig::from_env().map_err(|e| Error::Config(e.to_string()))?;
        let udp = UdpConfig::from_env().map_err(|e| Error::Config(e.to_string()))?;
        let dead_after = match var("BULKWIRE_DEAD_AFTER_MS") {
            None => 30 * SEC,
            Some(v) => v.parse::<u64>().map(|ms| ms * 1_000_000).map_err(|_| {
                Error::Config(format!(
                    "BULKWIRE_DEAD_AFTER_MS={v:?}: expected milliseconds"
                ))
            })?,
        };
        Ok(JobConfig {
            link,
            protocol,
            faults,
            udp,
            dead_after,
        })
    }
}

/// `BULKWIRE_PROTOCOL` value choosing the kernel-TCP baseline stack ([`TcpTransport`])
/// instead of a protocol over a link.
pub const TCP: &str = "tcp";

/// Every stack `BULKWIRE_PROTOCOL` may name: the protocols, then kernel TCP.
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
}

impl JobInfo {
    /// Number of the job's processes on this host (this one included).
    pub fn local_count(&self) -> usize {
        self.local.iter().filter(|&&l| l).count()
    }
}

/// Builds this process's transport for the job `ctl` belongs to, whatever the stack:
/// a protocol over a link ([`Engine`], as [`connect`]) or, for `BULKWIRE_PROTOCOL=tcp`,
/// kernel TCP connections to every peer, set up here once ([`TcpTransport`]).
/// Collective, like [`connect`].
pub fn connect_transport(
    ctl: &mut Control,
    cfg: &JobConfig,
) -> Result<(Box<dyn Transport>, JobInfo), Error> {
    if cfg.protocol != TCP {
        let (e, info) = connect(ctl, cfg)?;
        return Ok((Box::new(e), info));
    }
    let rank = ctl.rank();
    let listener = TcpListener::bind((ctl.local_ip(), 0))?;
    let me = Card::local(rank, vec![listener.local_addr()?]);
    let (cards, local) = exchange_cards(ctl, &me)?;
    let addrs: Vec<_> = cards.iter().map(|c| c.addrs[0]).collect();
    let tcfg = TcpConfig {
        dead_after: Duration::from_nanos(cfg.dead_after),
        ..TcpConfig::default()
    };
    let streams = tcp::establish(rank, listener, &addrs, ctl.cookie(), tcfg.connect_timeout)?;
    let info = JobInfo { cards, local };
    let mut t = TcpTransport::new(
        rank,
        streams,
        tcfg,
        WaitPolicy::for_host(info.local_count()),
    )?;
    t.set_job(ctl.state());
    Ok((Box::new(t), info))
}

/// Publishes `me` and collects every rank's card, checked.
fn exchange_cards(ctl: &mut Control, me: &Card) -> Result<(Vec<Card>, Vec<bool>), Error> {
    let cards: Vec<Card> = ctl
        .allgather(&me.to_bytes())
        .map_err(|e| Error::JobFailed(e.to_string()))?
        .iter()
        .enumerate()
        .map(|(r, b)| {
            Card::from_bytes(b)
                .filter(|c| c.rank == r as u32 && !c.addrs.is_empty())
                .ok_or_else(|| Error::Config(format!("rank {r} published an unusable card")))
        })
        .collect::<Result<_, _>>()?;
    let local = cards.iter().map(|c| c.same_host(me)).collect();
    Ok((cards, local))
}

/// Builds this process's engine for the job `ctl` belongs to. Collective: every process
/// of the job calls it once, in the same order as other rendezvous exchanges. The
/// kernel-TCP stack is no [`Engine`]: with `BULKWIRE_PROTOCOL=tcp` use
/// [`connect_transport`].
pub fn connect(ctl: &mut Control, cfg: &JobConfig) -> Result<(Engine, JobInfo), Error> {
    if cfg.protocol == TCP {
        return Err(Error::Config(
            "BULKWIRE_PROTOCOL=tcp is the kernel-TCP stack, not an engine: build the job's \
             transport with job::connect_transport"
                .into(),
        ));
    }
    let rank = ctl.rank();
    let nprocs = ctl.nprocs();
    let bound = UdpLink::bind((ctl.local_ip(), 0).into(), &cfg.udp)?;
    let me = Card::local(rank, vec![bound.local_addr()]);
    let (cards, local) = exchange_cards(ctl, &me)?;
    let addrs = cards.iter().map(|c| c.addrs[0]).collect();
    let udp = bound.into_link(rank, addrs)?;
    let link: Box<dyn Link> = if cfg.faults.is_active() {
        Box::new(Faulty::new(udp, cfg.faults.clone()))
    } else {
        Box::new(udp)
    };
    let mut common = Common::new(rank, nprocs, 1);
    common.max_payload = (0..nprocs)
        .map(|p| link.max_datagram(p).saturating_sub(HEADER_LEN).max(1))
        .collect();
    let proto = bulkwire_protocol::by_name(&cfg.protocol, common)
        .map_err(|e| Error::Config(e.to_string()))?;
    let ep = Endpoint::new(
        link,
        proto,
        EndpointConfig::with_deadline(ctl.cookie(), cfg.dead_after),
    );
    let info = JobInfo { cards, local };
    let mut engine = Engine::new(ep, WaitPolicy::for_host(info.local_count()));
    engine.set_job(ctl.state());
    Ok((engine, info))
}

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
                    Err(Error::Timeout(_)) => {}
                    Err(e) => return Err(e),
                    Ok(()) => {}
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
