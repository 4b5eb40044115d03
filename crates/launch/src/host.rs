//! Host identity and business cards.

use std::net::SocketAddr;

use crate::wire::{Reader, Writer};

/// This machine's name, as the kernel has it.
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "localhost".into())
}

/// An identity that two processes share exactly when they run on the same machine (same
/// kernel instance) and see the same network: `hostname/boot_id/netns`. Hostnames alone
/// repeat across clusters' containers and the boot id alone is unreadable to people; the
/// network namespace tells apart the containers of one machine, and the hosts of a test
/// bed made of namespaces, which reach each other only over their network. A job may
/// override it ([`crate::JobEnv::host_id`]), so a test can make processes of one machine
/// look like different hosts (and not use shared memory between them).
pub fn host_id() -> String {
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    // "net:[4026531992]": the namespace's inode, the same for every process in it.
    let net = std::fs::read_link("/proc/self/ns/net")
        .map(|p| {
            p.to_string_lossy()
                .trim_start_matches("net:[")
                .trim_end_matches(']')
                .to_string()
        })
        .unwrap_or_default();
    format!("{}/{}/{}", hostname(), boot, net)
}

/// A process's business card: what its peers need to reach it. The rendezvous treats cards
/// as opaque bytes; this is the layout the bulkwire layers use, with room for more.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Card {
    pub rank: u32,
    /// [`host_id`]: equal cards' hosts mean shared memory is possible.
    pub host: String,
    pub pid: u32,
    /// Data sockets this process bound (UDP), in order of preference.
    pub addrs: Vec<SocketAddr>,
    /// Anything else a layer wants to publish (e.g. a shared-memory segment name).
    pub extra: Vec<u8>,
}

/// Limits that keep a decoded card small whatever the bytes say.
const MAX_HOST: usize = 1024;
const MAX_ADDRS: usize = 64;

impl Card {
    /// The card of this process, `rank` on `host`, with the given data addresses (see
    /// [`crate::Control::card`]).
    pub fn local(rank: u32, host: String, addrs: Vec<SocketAddr>) -> Card {
        Card {
            rank,
            host,
            pid: std::process::id(),
            addrs,
            extra: Vec::new(),
        }
    }

    /// True when `other` runs on the same machine as this card's process.
    pub fn same_host(&self, other: &Card) -> bool {
        self.host == other.host
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        let mut w = Writer::default();
        w.u8(1); // layout version
        w.u32(self.rank);
        w.u32(self.pid);
        w.str16(&self.host);
        let n = self.addrs.len().min(MAX_ADDRS);
        w.u8(n as u8);
        for a in &self.addrs[..n] {
            match a {
                SocketAddr::V4(v4) => {
                    w.u8(4);
                    w.bytes(&v4.ip().octets());
                    w.u16(v4.port());
                }
                SocketAddr::V6(v6) => {
                    w.u8(6);
                    w.bytes(&v6.ip().octets());
                    w.u16(v6.port());
                    w.u32(v6.scope_id());
                }
            }
        }
        w.bytes(&self.extra);
        w.into_vec()
    }

    /// Decodes a card; `None` for anything malformed.
    pub fn from_bytes(b: &[u8]) -> Option<Card> {
        let mut r = Reader::new(b);
        if r.u8()? != 1 {
            return None;
        }
        let rank = r.u32()?;
        let pid = r.u32()?;
        let host = r.str16(MAX_HOST)?;
        let n = r.u8()? as usize;
        if n > MAX_ADDRS {
            return None;
        }
        let mut addrs = Vec::with_capacity(n);
        for _ in 0..n {
            let a = match r.u8()? {
                4 => {
                    let ip: [u8; 4] = r.take(4)?.try_into().ok()?;
                    SocketAddr::from((ip, r.u16()?))
                }
                6 => {
                    let ip: [u8; 16] = r.take(16)?.try_into().ok()?;
                    let port = r.u16()?;
                    let scope = r.u32()?;
                    SocketAddr::V6(std::net::SocketAddrV6::new(ip.into(), port, 0, scope))
                }
                _ => return None,
            };
            addrs.push(a);
        }
        let extra = r.rest().to_vec();
        Some(Card {
            rank,
            host,
            pid,
            addrs,
            extra,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_id_has_boot_id() {
        let h = host_id();
        assert!(h.contains('/'), "{h}");
        assert_eq!(h, host_id());
    }

    #[test]
    fn card_round_trip_and_garbage() {
        let c = Card {
            rank: 5,
            host: "node1/abc".into(),
            pid: 42,
            addrs: vec![
                "10.0.0.1:5000".parse().unwrap(),
                "[fe80::1%2]:6000".parse().unwrap(),
            ],
            extra: b"/bw-shm-1".to_vec(),
        };
        let b = c.to_bytes();
        assert_eq!(Card::from_bytes(&b), Some(c));
        for cut in 0..b.len() - b"/bw-shm-1".len() {
            assert!(Card::from_bytes(&b[..cut]).is_none(), "cut {cut}");
        }
        assert!(Card::from_bytes(&[2, 0, 0]).is_none());
    }
}
