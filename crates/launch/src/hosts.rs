//! The hosts of a job, as mpirun takes them: `--host a:4,b:4` (`-H`), or a hostfile in Open
//! MPI's format (`host slots=N`, comments, blank lines), each host with a number of slots.
//! Ranks fill the slots in order (ranks 0-3 on `a`, 4-7 on `b`), as mpirun's default
//! by-slot mapping does. A host whose address is one of this machine's (or `localhost`)
//! runs its ranks directly; the others through the remote shell.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, ToSocketAddrs, UdpSocket};

use crate::LaunchError;

/// A host and how many ranks it takes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostSlots {
    pub name: String,
    pub slots: u32,
}

/// Parses `--host` lists: `a:4,b:4`, `a,b` (one slot each); a repeated name adds slots.
pub fn parse_host_list(list: &str) -> Result<Vec<HostSlots>, LaunchError> {
    let mut hosts = Vec::new();
    for item in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        // An IPv6 address has colons of its own: `[addr]:N` then gives its slots.
        let (name, slots) = match item.strip_prefix('[').and_then(|r| r.split_once(']')) {
            Some((addr, "")) => (addr, 1),
            Some((addr, rest)) => match rest.strip_prefix(':') {
                Some(n) => (addr, parse_slots(n, item)?),
                None => return Err(LaunchError::Usage(format!("--host {item:?}: bad entry"))),
            },
            None => match item.split_once(':') {
                Some((n, k)) if !n.is_empty() && !k.contains(':') => (n, parse_slots(k, item)?),
                Some(_) if item.matches(':').count() > 1 => (item, 1),
                Some(_) => return Err(LaunchError::Usage(format!("--host {item:?}: bad entry"))),
                None => (item, 1),
            },
        };
        add(&mut hosts, name, slots);
    }
    if hosts.is_empty() {
        return Err(LaunchError::Usage(format!(
            "--host {list:?}: no host named"
        )));
    }
    Ok(hosts)
}

/// Parses a hostfile: `host [slots=N] [max_slots=M]` per line, `#` comments, blank lines.
pub fn parse_hostfile(text: &str, path: &str) -> Result<Vec<HostSlots>, LaunchError> {
    let mut hosts = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        let mut words = line.split_whitespace();
        let Some(name) = words.next() else {
            continue;
        };
        let mut slots = 1;
        for w in words {
            let bad = || {
                LaunchError::Usage(format!(
                    "{path}:{}: {w:?}: expected slots=N or max_slots=N",
                    i + 1
                ))
            };
            match w.split_once('=') {
                Some(("slots", n)) => slots = parse_slots(n, w).map_err(|_| bad())?,
                Some(("max_slots" | "max-slots", n)) => {
                    parse_slots(n, w).map_err(|_| bad())?;
                }
                _ => return Err(bad()),
            }
        }
        add(&mut hosts, name, slots);
    }
    if hosts.is_empty() {
        return Err(LaunchError::Usage(format!("hostfile {path} names no host")));
    }
    Ok(hosts)
}

fn parse_slots(s: &str, item: &str) -> Result<u32, LaunchError> {
    s.parse::<u32>()
        .ok()
        .filter(|&n| (1..=1024).contains(&n))
        .ok_or_else(|| LaunchError::Usage(format!("{item:?}: slots must be from 1 to 1024")))
}

fn add(hosts: &mut Vec<HostSlots>, name: &str, slots: u32) {
    match hosts.iter_mut().find(|h| h.name == name) {
        Some(h) => h.slots += slots,
        None => hosts.push(HostSlots {
            name: name.to_string(),
            slots,
        }),
    }
}

/// Total slots of `hosts`.
pub fn total_slots(hosts: &[HostSlots]) -> u32 {
    hosts.iter().map(|h| h.slots).sum()
}

/// Where a job's ranks run: one entry per host that gets ranks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostRanks {
    pub name: String,
    pub ranks: Vec<u32>,
    /// The host's address (resolved), `None` for this host by name.
    pub addr: Option<IpAddr>,
    /// This machine (its ranks are started directly).
    pub local: bool,
}

/// Places `n` ranks on `hosts` slot by slot, resolving each host that gets ranks.
pub fn place(n: u32, hosts: &[HostSlots]) -> Result<Vec<HostRanks>, LaunchError> {
    let total = total_slots(hosts);
    if n > total {
        return Err(LaunchError::Usage(format!(
            "-n {n}: the hosts given have {total} slots ({}); give more slots (a:4) or fewer \
             processes",
            hosts
                .iter()
                .map(|h| format!("{}:{}", h.name, h.slots))
                .collect::<Vec<_>>()
                .join(",")
        )));
    }
    let mut out = Vec::new();
    let mut next = 0;
    for h in hosts {
        if next == n {
            break;
        }
        let k = h.slots.min(n - next);
        let addr = resolve(&h.name)?;
        out.push(HostRanks {
            name: h.name.clone(),
            ranks: (next..next + k).collect(),
            local: addr.is_none_or(is_local),
            addr,
        });
        next += k;
    }
    Ok(out)
}

/// The host's first address (IPv4 preferred); `None` for `localhost`.
fn resolve(name: &str) -> Result<Option<IpAddr>, LaunchError> {
    if name == "localhost" {
        return Ok(None);
    }
    let addrs: Vec<IpAddr> = (name, 0)
        .to_socket_addrs()
        .map_err(|e| LaunchError::Usage(format!("host {name:?}: cannot resolve it ({e})")))?
        .map(|a| a.ip())
        .collect();
    let ip = addrs
        .iter()
        .find(|a| a.is_ipv4())
        .or(addrs.first())
        .copied()
        .ok_or_else(|| LaunchError::Usage(format!("host {name:?} has no address")))?;
    Ok(Some(ip))
}

/// Whether `ip` belongs to this machine (network namespace): only then can a socket be
/// bound to it.
pub fn is_local(ip: IpAddr) -> bool {
    ip.is_loopback() || UdpSocket::bind((ip, 0)).is_ok()
}

/// The address of this machine that the kernel would send from to reach `dest` (a
/// connected UDP socket sends nothing): what a host there can reach us at.
pub fn source_toward(dest: IpAddr) -> Option<IpAddr> {
    let any: IpAddr = match dest {
        IpAddr::V4(_) => Ipv4Addr::UNSPECIFIED.into(),
        IpAddr::V6(_) => std::net::Ipv6Addr::UNSPECIFIED.into(),
    };
    let s = UdpSocket::bind((any, 0)).ok()?;
    s.connect(SocketAddr::new(dest, 9)).ok()?;
    s.local_addr().ok().map(|a| a.ip())
}

/// `s` quoted for a POSIX shell (the remote shell joins its arguments into one command
/// line, as ssh does).
pub fn shell_quote(s: &str) -> String {
    let plain = !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_./:=+-,@%".contains(&b));
    if plain {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_lists() {
        let h = parse_host_list("a:4,b:4").unwrap();
        assert_eq!(
            h[0],
            HostSlots {
                name: "a".into(),
                slots: 4
            }
        );
        assert_eq!(total_slots(&h), 8);
        let h = parse_host_list("a,b,a").unwrap();
        assert_eq!((h.len(), h[0].slots, h[1].slots), (2, 2, 1));
        let h = parse_host_list("fe80::1,[::1]:2").unwrap();
        assert_eq!((h[0].name.as_str(), h[0].slots), ("fe80::1", 1));
        assert_eq!((h[1].name.as_str(), h[1].slots), ("::1", 2));
        assert!(parse_host_list("a:x").is_err());
        assert!(parse_host_list("a:0").is_err());
        assert!(parse_host_list(",").is_err());
    }

    #[test]
    fn hostfiles() {
        let text = "# the cluster\nnode1 slots=2\n\n  node2 slots=4 max_slots=8 # big\nnode3\n";
        let h = parse_hostfile(text, "hf").unwrap();
        let got: Vec<(&str, u32)> = h.iter().map(|h| (h.name.as_str(), h.slots)).collect();
        assert_eq!(got, [("node1", 2), ("node2", 4), ("node3", 1)]);
        let e = parse_hostfile("node1 cpus=2\n", "hf")
            .unwrap_err()
            .to_string();
        assert!(e.contains("hf:1") && e.contains("cpus=2"), "{e}");
        assert!(parse_hostfile("# nothing\n", "hf").is_err());
    }

    #[test]
    fn placement_fills_slots_in_order() {
        let hosts = parse_host_list("localhost:2,127.0.0.1:3").unwrap();
        let p = place(4, &hosts).unwrap();
        assert_eq!(p[0].ranks, [0, 1]);
        assert_eq!(p[1].ranks, [2, 3]);
        assert!(p.iter().all(|h| h.local));
        let e = place(6, &hosts).unwrap_err().to_string();
        assert!(e.contains("5 slots"), "{e}");
        assert_eq!(place(1, &hosts).unwrap().len(), 1);
    }

    #[test]
    fn quoting() {
        assert_eq!(shell_quote("/usr/bin/prog"), "/usr/bin/prog");
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's"), "'it'\\''s'");
        assert_eq!(shell_quote(""), "''");
    }

    #[test]
    fn loopback_is_local_and_routes_exist() {
        assert!(is_local("127.0.0.1".parse().unwrap()));
        assert_eq!(
            source_toward("127.0.0.1".parse().unwrap()),
            Some("127.0.0.1".parse().unwrap())
        );
    }
}
