//! The stacks `bwbench` measures, as typed values: which protocol over which link, at which
//! layer, with which faults. A job's worker processes learn their stack from one function,
//! [`env()`]; the serialised forms (lower-case names) are those of `BULKWIRE_PROTOCOL` and
//! `BULKWIRE_TRANSPORT`.

use std::fmt;

use bulkwire_engine::job::{JobConfig, LinkKind};
use bulkwire_link::FaultConfig;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A transport protocol of bulkwire's, or kernel TCP under bulkwire's upper layers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    Utopia,
    Gbn,
    Holefill,
    Rmpp,
    /// Kernel TCP (`bulkwire_engine::job::TCP`): bulkwire's upper layers over sockets.
    Tcp,
}

impl Protocol {
    /// The protocols over datagrams, in `bulkwire_protocol::PROTOCOLS` order.
    pub const DATAGRAM: [Protocol; 4] = [
        Protocol::Utopia,
        Protocol::Gbn,
        Protocol::Holefill,
        Protocol::Rmpp,
    ];

    /// The protocols that recover losses (utopia sends and trusts).
    pub const RELIABLE: [Protocol; 3] = [Protocol::Gbn, Protocol::Holefill, Protocol::Rmpp];

    /// The name `BULKWIRE_PROTOCOL` takes.
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Utopia => "utopia",
            Protocol::Gbn => "gbn",
            Protocol::Holefill => "holefill",
            Protocol::Rmpp => "rmpp",
            Protocol::Tcp => bulkwire_engine::job::TCP,
        }
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What carries a protocol's datagrams (`BULKWIRE_TRANSPORT`), or kernel TCP's sockets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Link {
    Udp,
    Shm,
    /// Shared memory to the processes of this host, UDP to the others.
    Auto,
    /// Kernel TCP's own sockets: the only link of [`Protocol::Tcp`].
    Tcp,
}

impl Link {
    pub fn name(self) -> &'static str {
        match self {
            Link::Udp => "udp",
            Link::Shm => "shm",
            Link::Auto => "auto",
            Link::Tcp => "tcp",
        }
    }
}

/// A bulkwire transport: a protocol over a link, or kernel TCP.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Transport {
    pub protocol: Protocol,
    pub link: Link,
}

impl Transport {
    /// `protocol` over UDP.
    pub fn udp(protocol: Protocol) -> Transport {
        Transport {
            protocol,
            link: Link::Udp,
        }
    }

    /// `protocol` over shared memory.
    pub fn shm(protocol: Protocol) -> Transport {
        Transport {
            protocol,
            link: Link::Shm,
        }
    }

    /// bulkwire's upper layers over kernel TCP.
    pub fn kernel_tcp() -> Transport {
        Transport {
            protocol: Protocol::Tcp,
            link: Link::Tcp,
        }
    }

    /// Kernel TCP takes no other link, and no protocol but kernel TCP runs over it.
    pub fn check(self) -> Result<Transport, String> {
        if (self.protocol == Protocol::Tcp) == (self.link == Link::Tcp) {
            Ok(self)
        } else {
            Err(format!(
                "{} over {}: kernel TCP is protocol tcp with link tcp, and only that",
                self.protocol,
                self.link.name()
            ))
        }
    }

    /// How reports name it: `holefill/udp`, `bulkwire/tcp`.
    pub fn label(self) -> String {
        match self.protocol {
            Protocol::Tcp => "bulkwire/tcp".into(),
            p => format!("{p}/{}", self.link.name()),
        }
    }

    /// `base` (the environment's job configuration) with this protocol and link.
    pub fn job_config(self, mut base: JobConfig) -> Result<JobConfig, String> {
        self.check()?;
        base.protocol = Some(self.protocol.name().to_string());
        base.link = match self.link {
            Link::Udp => LinkKind::Udp,
            Link::Shm => LinkKind::Shm,
            Link::Auto | Link::Tcp => LinkKind::Auto,
        };
        Ok(base)
    }
}

/// The raw baselines: datagrams or a byte stream straight on a socket.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RawLink {
    Udp,
    Tcp,
}

/// How the collectives are carried (`BULKWIRE_COLL`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CollAlgo {
    /// The shared network cache of the processes of one host.
    Netcache,
    /// Point-to-point algorithms over the transport.
    P2p,
}

/// Everything a job's processes run, from the socket up to the layer measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Stack {
    /// Bare datagrams or bytes over a socket: no header, no recovery (the baseline).
    Raw { link: RawLink },
    /// A bulkwire transport, driven directly.
    Proto(Transport),
    /// The point-to-point library (`Comm`) over a transport, with or without its progress
    /// thread.
    P2p {
        #[serde(flatten)]
        over: Transport,
        progress: bool,
    },
    /// BSPlib over a transport.
    Bsp(Transport),
    /// The collectives, by `algo`, over a transport.
    Coll {
        #[serde(flatten)]
        over: Transport,
        algo: CollAlgo,
    },
}

impl Stack {
    /// The transport under the stack, if it is bulkwire's.
    pub fn transport(&self) -> Option<Transport> {
        match *self {
            Stack::Raw { .. } => None,
            Stack::Proto(t) | Stack::P2p { over: t, .. } | Stack::Bsp(t) => Some(t),
            Stack::Coll { over, .. } => Some(over),
        }
    }

    /// How reports name it.
    pub fn label(&self) -> String {
        match *self {
            Stack::Raw { link: RawLink::Udp } => "raw UDP".into(),
            Stack::Raw { link: RawLink::Tcp } => "raw TCP".into(),
            Stack::Proto(t) => t.label(),
            Stack::P2p { over, progress } => {
                let thread = if progress { "" } else { ", no progress thread" };
                format!("p2p over {}{thread}", over.label())
            }
            Stack::Bsp(t) => format!("BSP over {}", t.label()),
            Stack::Coll {
                algo: CollAlgo::Netcache,
                ..
            } => "netcache".into(),
            Stack::Coll {
                over,
                algo: CollAlgo::P2p,
            } => format!("p2p over {}", over.label()),
        }
    }

    /// Whether lost messages are simply lost (the receiver must not wait forever): raw
    /// sockets, and utopia where its link can lose them. Clean shared memory loses nothing
    /// (a full ring holds the sender back), so utopia there is waited for like the others.
    pub fn lossy(&self, faults: &Faults) -> bool {
        match self.transport() {
            None => true,
            Some(t) => {
                t.protocol == Protocol::Utopia && (t.link != Link::Shm || faults.0.is_active())
            }
        }
    }
}

/// Faults injected on receive, in `BULKWIRE_FAULTS` syntax when serialised ("" for none).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Faults(pub FaultConfig);

impl Faults {
    pub fn none() -> Faults {
        Faults::default()
    }

    /// Each datagram lost with probability `p`, drawn from a generator seeded with `seed`.
    pub fn loss(p: f64, seed: u64) -> Faults {
        Faults(FaultConfig {
            loss: p,
            seed,
            ..FaultConfig::default()
        })
    }

    /// The `BULKWIRE_FAULTS` value: empty when nothing is injected.
    pub fn spec(&self) -> String {
        if self.0.is_active() {
            self.0.to_string()
        } else {
            String::new()
        }
    }
}

impl Serialize for Faults {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.spec())
    }
}

impl<'de> Deserialize<'de> for Faults {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Faults, D::Error> {
        let s = String::deserialize(d)?;
        FaultConfig::parse(&s)
            .map(Faults)
            .map_err(serde::de::Error::custom)
    }
}

/// The environment of a job's worker processes running `stack` with `faults`: the one place
/// a stack becomes `BULKWIRE_*` settings. Everything it sets overrides the caller's
/// environment, so a report measures the stacks it names whatever the shell exports;
/// settings it leaves out (spin budget, buffer sizes, ...) are inherited.
pub fn env(stack: &Stack, faults: &Faults) -> Vec<(&'static str, String)> {
    let mut v = vec![("BULKWIRE_FAULTS", faults.spec())];
    if let Some(t) = stack.transport() {
        v.push(("BULKWIRE_PROTOCOL", t.protocol.name().into()));
        if t.protocol != Protocol::Tcp {
            v.push(("BULKWIRE_TRANSPORT", t.link.name().into()));
        }
    }
    match stack {
        Stack::P2p {
            progress: false, ..
        } => v.push(("BULKWIRE_PROGRESS_US", "0".into())),
        Stack::Coll { algo, .. } => v.push((
            "BULKWIRE_COLL",
            match algo {
                CollAlgo::Netcache => "netcache",
                CollAlgo::P2p => "p2p",
            }
            .into(),
        )),
        _ => {}
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn protocols_are_the_engines() {
        let names: Vec<&str> = Protocol::DATAGRAM.iter().map(|p| p.name()).collect();
        assert_eq!(names, bulkwire_protocol::PROTOCOLS);
        let mut all = names.clone();
        all.push(Protocol::Tcp.name());
        assert_eq!(all, bulkwire_engine::job::stacks());
        for p in Protocol::RELIABLE {
            assert!(Protocol::DATAGRAM.contains(&p) && p != Protocol::Utopia);
        }
    }

    #[test]
    fn stacks_turn_into_the_environment_they_name() {
        let get = |s: &Stack, f: &Faults| {
            let mut v: Vec<String> = env(s, f).iter().map(|(k, v)| format!("{k}={v}")).collect();
            v.sort();
            v.join(" ")
        };
        let none = Faults::none();
        assert_eq!(
            get(&Stack::Raw { link: RawLink::Udp }, &none),
            "BULKWIRE_FAULTS="
        );
        assert_eq!(
            get(&Stack::Proto(Transport::udp(Protocol::Holefill)), &none),
            "BULKWIRE_FAULTS= BULKWIRE_PROTOCOL=holefill BULKWIRE_TRANSPORT=udp"
        );
        assert_eq!(
            get(&Stack::Proto(Transport::kernel_tcp()), &none),
            "BULKWIRE_FAULTS= BULKWIRE_PROTOCOL=tcp"
        );
        let p2p = Stack::P2p {
            over: Transport::udp(Protocol::Holefill),
            progress: false,
        };
        assert_eq!(
            get(&p2p, &Faults::loss(0.01, 11)),
            "BULKWIRE_FAULTS=loss=0.01,corrupt=0,corrupt_bytes=1,dup=0,reorder=0,reorder_us=1000,\
             delay=0,delay_us=1000,seed=11 BULKWIRE_PROGRESS_US=0 BULKWIRE_PROTOCOL=holefill \
             BULKWIRE_TRANSPORT=udp"
        );
        let netcache = Stack::Coll {
            over: Transport::shm(Protocol::Utopia),
            algo: CollAlgo::Netcache,
        };
        assert_eq!(
            get(&netcache, &none),
            "BULKWIRE_COLL=netcache BULKWIRE_FAULTS= BULKWIRE_PROTOCOL=utopia BULKWIRE_TRANSPORT=shm"
        );
        assert_eq!(
            get(&Stack::Bsp(Transport::shm(Protocol::Utopia)), &none),
            "BULKWIRE_FAULTS= BULKWIRE_PROTOCOL=utopia BULKWIRE_TRANSPORT=shm"
        );
    }

    #[test]
    fn what_the_environment_gets_parses_back() {
        // The worker side parses what `env` writes: the fault spec round-trips, and every
        // protocol is a name the job configuration knows.
        let f = Faults::loss(0.01, 11);
        assert_eq!(FaultConfig::parse(&f.spec()).unwrap(), f.0);
        for p in Protocol::DATAGRAM.into_iter().chain([Protocol::Tcp]) {
            assert!(bulkwire_engine::job::stacks().contains(&p.name()));
        }
        assert!(Transport::kernel_tcp().check().is_ok());
        let bad = Transport {
            protocol: Protocol::Tcp,
            link: Link::Udp,
        };
        assert!(bad.check().unwrap_err().contains("tcp over udp"));
        assert!(Transport::udp(Protocol::Gbn).check().is_ok());
    }

    #[test]
    fn pair_specs_keep_their_json_form() {
        // Commands in the docs and the briefs of other experiments pass stacks as JSON.
        let s: Stack =
            serde_json::from_str(r#"{"Proto":{"protocol":"utopia","link":"shm"}}"#).unwrap();
        assert_eq!(s, Stack::Proto(Transport::shm(Protocol::Utopia)));
        let p = Stack::P2p {
            over: Transport::kernel_tcp(),
            progress: true,
        };
        assert_eq!(
            serde_json::to_string(&p).unwrap(),
            r#"{"P2p":{"protocol":"tcp","link":"tcp","progress":true}}"#
        );
        assert_eq!(
            serde_json::to_string(&Stack::Raw { link: RawLink::Udp }).unwrap(),
            r#"{"Raw":{"link":"udp"}}"#
        );
        let f: Faults = serde_json::from_str(r#""loss=0.01,seed=11""#).unwrap();
        assert_eq!(f, Faults::loss(0.01, 11));
        assert_eq!(serde_json::to_string(&Faults::none()).unwrap(), r#""""#);
        assert!(serde_json::from_str::<Faults>(r#""loss=2""#).is_err());
    }

    #[test]
    fn labels() {
        assert_eq!(Stack::Raw { link: RawLink::Tcp }.label(), "raw TCP");
        assert_eq!(
            Stack::Proto(Transport::kernel_tcp()).label(),
            "bulkwire/tcp"
        );
        let p = Stack::P2p {
            over: Transport::udp(Protocol::Holefill),
            progress: false,
        };
        assert_eq!(p.label(), "p2p over holefill/udp, no progress thread");
        let (none, loss) = (Faults::none(), Faults::loss(0.01, 1));
        assert!(!p.lossy(&loss) && Stack::Raw { link: RawLink::Udp }.lossy(&none));
        assert!(Stack::Proto(Transport::udp(Protocol::Utopia)).lossy(&none));
        let shm = Stack::Proto(Transport::shm(Protocol::Utopia));
        assert!(!shm.lossy(&none) && shm.lossy(&loss));
    }
}
