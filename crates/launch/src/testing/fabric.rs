//! An emulated switched cluster on one machine: hosts as network namespaces, each joined
//! by a veth pair to a port of one Linux bridge (the switch, in a namespace of its own so
//! that nothing of the machine's own network is touched). Each switch port's egress
//! (towards its host) is shaped by `tc tbf` to the link rate with a finite output buffer,
//! as a commodity switch's share of packet memory; each host's egress is shaped to the
//! same line rate with a deep queue, so that a host's own sends are held back by its
//! socket buffers (as by a NIC's ring) and only the switch drops. Offloads can be turned
//! off so that every frame is at most the MTU, as on a wire.
//!
//! Needs root, `ip` and `tc` (and `ethtool` to turn the offloads off). Dropping a
//! [`Fabric`] kills whatever still runs in its namespaces and deletes them, so a failed
//! run leaves nothing behind.

use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

/// The most hosts on one fabric (one /24, and one letter each in the names).
pub const MAX_HOSTS: usize = 16;

/// Ethernet's bytes around an IP packet on the wire: header and frame check sequence
/// (tbf counts the frame from the destination address on).
const FRAME: u32 = 14;

/// What a fabric is made of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FabricSpec {
    pub hosts: usize,
    pub mtu: u32,
    /// Each link's rate in bits per second; `None`: unshaped (as fast as the CPUs go).
    pub rate: Option<u64>,
    /// Bytes of each switch port's output buffer (frames beyond it are dropped).
    pub buffer: u32,
    /// Turn segmentation and receive offloads off, so that frames are MTU-sized.
    pub offloads_off: bool,
}

impl FabricSpec {
    /// `hosts` on an unshaped switch at `mtu`, offloads as the kernel sets them.
    pub fn unshaped(hosts: usize, mtu: u32) -> FabricSpec {
        FabricSpec {
            hosts,
            mtu,
            rate: None,
            buffer: DEFAULT_BUFFER,
            offloads_off: false,
        }
    }

    /// `hosts` on ports of `rate` bits per second with `buffer` bytes each, offloads off.
    pub fn shaped(hosts: usize, mtu: u32, rate: u64, buffer: u32) -> FabricSpec {
        FabricSpec {
            hosts,
            mtu,
            rate: Some(rate),
            buffer,
            offloads_off: true,
        }
    }
}

/// A switch port's output buffer unless given: 64 KiB, within a commodity switch's
/// per-port share of its packet memory (32-256 KiB).
pub const DEFAULT_BUFFER: u32 = 64 * 1024;

/// A host's own egress queue: deep enough that the sockets' send buffers fill first (the
/// kernel charges a datagram waiting in the qdisc to its socket), so the host's sends are
/// held back, not dropped, as a NIC's ring holds them back on a real machine.
pub const HOST_QUEUE: u32 = 16 << 20;

/// One port's counters, from `tc -s -j qdisc`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PortCounters {
    /// Frames and bytes the port's queue passed on.
    pub packets: u64,
    pub bytes: u64,
    /// Frames dropped because the queue was full.
    pub drops: u64,
}

impl PortCounters {
    /// The sum over `ports`.
    pub fn sum(ports: &[PortCounters]) -> PortCounters {
        ports
            .iter()
            .fold(PortCounters::default(), |a, p| PortCounters {
                packets: a.packets + p.packets,
                bytes: a.bytes + p.bytes,
                drops: a.drops + p.drops,
            })
    }

    /// What was counted since `earlier` (counters of the same port).
    pub fn since(&self, earlier: &PortCounters) -> PortCounters {
        PortCounters {
            packets: self.packets.saturating_sub(earlier.packets),
            bytes: self.bytes.saturating_sub(earlier.bytes),
            drops: self.drops.saturating_sub(earlier.drops),
        }
    }
}

/// N hosts on one switch. See the module's documentation.
pub struct Fabric {
    pub spec: FabricSpec,
    /// The switch's namespace (the bridge `br0` and the ports `p0`, `p1`, ...).
    pub switch: String,
    /// The hosts' namespaces (`ip netns exec NAME ...`).
    pub names: Vec<String>,
    /// Each host's address on the switch's subnet.
    pub addrs: Vec<String>,
    /// What was set up but could not be (e.g. `ethtool` missing), in words.
    pub warnings: Vec<String>,
}

pub(crate) fn ip_ok(args: &[&str]) -> Result<(), String> {
    run_ok("ip", args)
}

fn run_ok(tool: &str, args: &[&str]) -> Result<(), String> {
    let out = Command::new(tool)
        .args(args)
        .output()
        .map_err(|e| format!("{tool}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{tool} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// A number unique to this fabric among those of concurrent processes (as far as a pid
/// modulo 1000 is), for its names and subnet.
fn next_id() -> u32 {
    static N: AtomicU32 = AtomicU32::new(0);
    // Room for a hundred beds per process: with ten, the eleventh test bed of one test
    // binary took the first one's names, and the first one's drop killed its processes.
    std::process::id() % 1000 * 100 + N.fetch_add(1, Ordering::SeqCst) % 100
}

/// `tbf` arguments for `rate` bits per second with `limit` bytes of queue: a token bucket
/// of 1 ms at the rate, and at least two frames (a smaller bucket than a frame passes
/// nothing).
fn tbf(rate: u64, limit: u32, mtu: u32) -> Vec<String> {
    let burst = (rate / 8 / 1000).max(u64::from(2 * (mtu + FRAME)));
    vec![
        "tbf".into(),
        "rate".into(),
        format!("{rate}bit"),
        "burst".into(),
        burst.to_string(),
        "limit".into(),
        limit.to_string(),
        // tbf's own per-packet size table at the frame size: without it, a jumbo frame's
        // tokens are miscounted at high rates.
        "mtu".into(),
        (mtu + FRAME).max(2048).to_string(),
    ]
}

impl Fabric {
    /// Makes the fabric; `Err` says why (not root, no `ip` or `tc`), and what was made is
    /// removed.
    pub fn new(spec: FabricSpec) -> Result<Fabric, String> {
        if !(2..=MAX_HOSTS).contains(&spec.hosts) {
            return Err(format!(
                "a fabric has 2 to {MAX_HOSTS} hosts, not {}",
                spec.hosts
            ));
        }
        let id = next_id();
        // 10.236.0.0/14 by pid and count: fabrics of concurrent runs get apart subnets
        // (netns-rsh finds a host by its address among every namespace of the machine).
        let net = format!("10.{}.{}", 236 + id / 256 % 4, id % 256);
        let letters = b"abcdefghijklmnop";
        let mut f = Fabric {
            spec,
            switch: format!("bwt{id}s"),
            names: (0..spec.hosts)
                .map(|i| format!("bwt{id}{}", letters[i] as char))
                .collect(),
            addrs: (0..spec.hosts)
                .map(|i| format!("{net}.{}", i + 1))
                .collect(),
            warnings: Vec::new(),
        };
        // On an error, dropping `f` removes what was made.
        f.build()?;
        Ok(f)
    }

    fn build(&mut self) -> Result<(), String> {
        let sw = self.switch.clone();
        let m = self.spec.mtu.to_string();
        ip_ok(&["netns", "add", &sw])?;
        ip_ok(&["-n", &sw, "link", "set", "lo", "up"])?;
        // No spanning tree (the ports forward at once) and no multicast snooping: a plain
        // learning switch.
        ip_ok(&[
            "-n",
            &sw,
            "link",
            "add",
            "br0",
            "type",
            "bridge",
            "stp_state",
            "0",
        ])?;
        for i in 0..self.spec.hosts {
            let (ns, dev, port) = (self.names[i].clone(), self.dev(i), format!("p{i}"));
            ip_ok(&["netns", "add", &ns])?;
            ip_ok(&[
                "link", "add", &dev, "netns", &ns, "type", "veth", "peer", "name", &port, "netns",
                &sw,
            ])?;
            ip_ok(&["-n", &ns, "link", "set", "lo", "up"])?;
            ip_ok(&["-n", &ns, "link", "set", &dev, "mtu", &m, "up"])?;
            let cidr = format!("{}/24", self.addrs[i]);
            ip_ok(&["-n", &ns, "addr", "add", &cidr, "dev", &dev])?;
            ip_ok(&["-n", &sw, "link", "set", &port, "mtu", &m, "master", "br0"])?;
            ip_ok(&["-n", &sw, "link", "set", &port, "up"])?;
        }
        ip_ok(&["-n", &sw, "link", "set", "br0", "mtu", &m, "up"])?;
        if self.spec.offloads_off {
            for i in 0..self.spec.hosts {
                let (host, dev) = (self.names[i].clone(), self.dev(i));
                self.offloads_off(&host, &dev);
                self.offloads_off(&sw, &format!("p{i}"));
            }
            self.offloads_off(&sw, "br0");
        }
        if let Some(rate) = self.spec.rate {
            let (mtu, buf) = (self.spec.mtu, self.spec.buffer);
            for i in 0..self.spec.hosts {
                let port = format!("p{i}");
                tc(&sw, &port, &tbf(rate, buf, mtu))?;
                tc(&self.names[i], &self.dev(i), &tbf(rate, HOST_QUEUE, mtu))?;
            }
        }
        Ok(())
    }

    /// Turns a device's segmentation and receive offloads off (a warning if it cannot).
    fn offloads_off(&mut self, ns: &str, dev: &str) {
        let mut args = vec!["netns", "exec", ns, "ethtool", "-K", dev];
        for k in ["tso", "gso", "gro", "tx-udp-segmentation", "rx-gro-list"] {
            args.extend([k, "off"]);
        }
        // ethtool refuses the whole line when one feature is fixed on a device: then each
        // feature by itself.
        if run_ok("ip", &args).is_ok() {
            return;
        }
        for k in ["tso", "gso", "gro", "tx-udp-segmentation"] {
            let one = ["netns", "exec", ns, "ethtool", "-K", dev, k, "off"];
            if let Err(e) = run_ok("ip", &one) {
                self.warnings
                    .push(format!("offload {k} of {dev} stays on ({e})"));
            }
        }
    }

    /// Host `i`'s device on the switch.
    pub fn dev(&self, i: usize) -> String {
        format!("{}v", self.names[i])
    }

    /// The subnet of the fabric, as `10.x.y.0/24`.
    pub fn subnet(&self) -> String {
        self.addrs[0]
            .rsplit_once('.')
            .map_or_else(String::new, |(net, _)| format!("{net}.0/24"))
    }

    /// `program` to be run inside host `i`.
    pub fn command(&self, i: usize, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.names[i]]).arg(program);
        c
    }

    /// Cuts host `i` off the switch (its veth goes down), as a cable pulled out.
    pub fn unplug(&self, i: usize) -> Result<(), String> {
        ip_ok(&["-n", &self.names[i], "link", "set", &self.dev(i), "down"])
    }

    /// Drops each frame that reaches a host from the switch with probability `p` (0 to 1),
    /// whatever it carries, as a lossy link between the switch and every host: an
    /// `iptables` rule of the `statistic` match in each host's INPUT chain (frames the
    /// host's sockets would receive: unicast and multicast, UDP and TCP alike). Needs
    /// `iptables`; the rules go with the namespaces.
    pub fn drop_on_arrival(&self, p: f64) -> Result<(), String> {
        if !(0.0..=1.0).contains(&p) {
            return Err(format!("a drop probability is 0 to 1, not {p}"));
        }
        let p = format!("{p:.6}");
        for i in 0..self.spec.hosts {
            let dev = self.dev(i);
            let rule = [
                "netns",
                "exec",
                &self.names[i],
                "iptables",
                "-A",
                "INPUT",
                "-i",
                &dev,
                "-m",
                "statistic",
                "--mode",
                "random",
                "--probability",
                &p,
                "-j",
                "DROP",
            ];
            ip_ok(&rule)?;
        }
        Ok(())
    }

    /// Frames [`Fabric::drop_on_arrival`] dropped so far, summed over the hosts (0 where
    /// it was not called).
    pub fn dropped_on_arrival(&self) -> Result<u64, String> {
        let mut sum = 0;
        for ns in &self.names {
            let out = Command::new("ip")
                .args([
                    "netns", "exec", ns, "iptables", "-n", "-v", "-x", "-L", "INPUT",
                ])
                .output()
                .map_err(|e| format!("iptables: {e}"))?;
            if !out.status.success() {
                // No iptables, or no rules were ever added in this host.
                continue;
            }
            sum += parse_iptables_drops(&String::from_utf8_lossy(&out.stdout));
        }
        Ok(sum)
    }

    /// Pids of the processes in host `i`.
    pub fn pids(&self, i: usize) -> Vec<u32> {
        netns_pids(&self.names[i])
    }

    /// The counters of the switch's port towards host `i` (its output queue).
    pub fn port(&self, i: usize) -> Result<PortCounters, String> {
        qdisc_counters(&self.switch, &format!("p{i}"))
    }

    /// The counters of every switch port, in host order.
    pub fn ports(&self) -> Result<Vec<PortCounters>, String> {
        (0..self.spec.hosts).map(|i| self.port(i)).collect()
    }

    /// The counters of host `i`'s own egress queue (drops there mean its queue was too
    /// short for its sockets' buffers).
    pub fn host_queue(&self, i: usize) -> Result<PortCounters, String> {
        qdisc_counters(&self.names[i], &self.dev(i))
    }
}

fn tc(ns: &str, dev: &str, qdisc: &[String]) -> Result<(), String> {
    let mut args: Vec<&str> = vec!["-n", ns, "qdisc", "replace", "dev", dev, "root"];
    args.extend(qdisc.iter().map(String::as_str));
    run_ok("tc", &args)
}

fn netns_pids(name: &str) -> Vec<u32> {
    Command::new("ip")
        .args(["netns", "pids", name])
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// The root qdisc's counters of `dev` in namespace `ns`.
fn qdisc_counters(ns: &str, dev: &str) -> Result<PortCounters, String> {
    let out = Command::new("tc")
        .args(["-n", ns, "-s", "-j", "qdisc", "show", "dev", dev])
        .output()
        .map_err(|e| format!("tc: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "tc -s qdisc show dev {dev}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(parse_qdisc(&String::from_utf8_lossy(&out.stdout)))
}

/// The counters of the first qdisc (the root, which `tc` lists first) in `tc -s -j`'s
/// JSON: its numbers are the first of each name. A device without a qdisc counts zero.
pub fn parse_qdisc(json: &str) -> PortCounters {
    let first = json.split("},{").next().unwrap_or("");
    let num = |key: &str| -> u64 {
        let k = format!("\"{key}\":");
        first
            .find(&k)
            .map(|at| {
                first[at + k.len()..]
                    .chars()
                    .skip_while(|c| c.is_whitespace())
                    .take_while(char::is_ascii_digit)
                    .collect::<String>()
            })
            .and_then(|s| s.parse().ok())
            .unwrap_or(0)
    };
    PortCounters {
        packets: num("packets"),
        bytes: num("bytes"),
        drops: num("drops"),
    }
}

/// The packets of the DROP rules in `iptables -n -v -x -L CHAIN`'s listing (a rule's
/// line starts with its packet and byte counts, then its target).
pub fn parse_iptables_drops(listing: &str) -> u64 {
    listing
        .lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            let pkts = w.next()?.parse::<u64>().ok()?;
            w.next()?.parse::<u64>().ok()?;
            (w.next()? == "DROP").then_some(pkts)
        })
        .sum()
}

impl Drop for Fabric {
    fn drop(&mut self) {
        let all: Vec<String> = self
            .names
            .iter()
            .chain(std::iter::once(&self.switch))
            .cloned()
            .collect();
        for n in &all {
            for p in netns_pids(n) {
                // SAFETY: kill(2) with a pid and a signal; these processes run in the
                // fabric's namespaces, which exist only for this fabric.
                unsafe { libc::kill(p as i32, libc::SIGKILL) };
            }
        }
        for n in &all {
            let _ = ip_ok(&["netns", "del", n]);
        }
    }
}

/// The machine's CPU time by `/proc/stat`'s first line, in clock ticks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuTimes {
    pub total: u64,
    /// Idle and waiting for I/O.
    pub idle: u64,
    /// Taken by the hypervisor for other guests.
    pub steal: u64,
}

/// The CPU use between two [`CpuTimes`].
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CpuUse {
    /// Fraction of all CPUs' time not idle (steal included: a stolen tick is not ours).
    pub busy: f64,
    /// Fraction stolen by the hypervisor.
    pub steal: f64,
}

/// Busier than this, a run measured the CPUs, not the wire.
pub const CPU_BOUND: f64 = 0.85;

impl CpuUse {
    pub fn cpu_bound(&self) -> bool {
        self.busy > CPU_BOUND
    }
}

impl CpuTimes {
    /// Now; zero if `/proc/stat` cannot be read.
    pub fn read() -> CpuTimes {
        std::fs::read_to_string("/proc/stat")
            .ok()
            .and_then(|s| CpuTimes::parse(&s))
            .unwrap_or_default()
    }

    /// From the text of `/proc/stat` (user nice system idle iowait irq softirq steal ...;
    /// guest time is already in user).
    pub fn parse(stat: &str) -> Option<CpuTimes> {
        let line = stat.lines().find(|l| l.starts_with("cpu "))?;
        let v: Vec<u64> = line
            .split_whitespace()
            .skip(1)
            .take(8)
            .map(|x| x.parse().unwrap_or(0))
            .collect();
        if v.len() < 5 {
            return None;
        }
        Some(CpuTimes {
            total: v.iter().sum(),
            idle: v[3] + v[4],
            steal: v.get(7).copied().unwrap_or(0),
        })
    }

    /// The use from `earlier` to `self`.
    pub fn since(&self, earlier: &CpuTimes) -> CpuUse {
        let total = self.total.saturating_sub(earlier.total);
        if total == 0 {
            return CpuUse::default();
        }
        let idle = self.idle.saturating_sub(earlier.idle);
        let steal = self.steal.saturating_sub(earlier.steal);
        CpuUse {
            busy: (total - idle.min(total)) as f64 / total as f64,
            steal: steal as f64 / total as f64,
        }
    }
}

/// Why network namespaces can't be made here (they need root and `ip`), or `None`.
pub fn namespaces_missing() -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("network namespaces need root".into());
    }
    let ok = Command::new("ip")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success());
    (!ok).then(|| "no `ip`".into())
}

/// Runs `f` on a thread of its own inside the network namespace `ns` (a host of a
/// [`Fabric`]): setns moves only that thread, so a test's threads can be several hosts.
pub fn in_netns<T: Send + 'static>(
    ns: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> std::thread::JoinHandle<T> {
    use std::os::fd::AsRawFd;
    let path = format!("/var/run/netns/{ns}");
    std::thread::spawn(move || {
        let file = std::fs::File::open(&path).expect("the namespace's file");
        // SAFETY: setns on a namespace descriptor we opened; it moves only this thread.
        let r = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
        assert_eq!(r, 0, "setns {path}: {}", std::io::Error::last_os_error());
        f()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_root_qdisc_counters() {
        let j = r#"[{"kind":"tbf","handle":"8001:","root":true,"refcnt":2,"options":{"rate":12500000,"burst":12500,"lat":5000},"bytes":9120,"packets":60,"drops":7,"overlimits":3,"requeues":0,"backlog":0,"qlen":0},{"kind":"bfifo","handle":"0:","parent":"8001:1","bytes":1,"packets":1,"drops":1}]"#;
        assert_eq!(
            parse_qdisc(j),
            PortCounters {
                packets: 60,
                bytes: 9120,
                drops: 7
            }
        );
        assert_eq!(parse_qdisc("[]"), PortCounters::default());
        let a = PortCounters {
            packets: 5,
            bytes: 50,
            drops: 1,
        };
        let b = PortCounters {
            packets: 8,
            bytes: 90,
            drops: 4,
        };
        assert_eq!(PortCounters::sum(&[a, b]).drops, 5);
        assert_eq!(b.since(&a).packets, 3);
    }

    #[test]
    fn counts_the_drop_rules_packets() {
        let l = "Chain INPUT (policy ACCEPT 5000 packets, 140000 bytes)\n    pkts      bytes target     prot opt in     out     source               destination\n      52     1508 DROP       0    --  v   *       0.0.0.0/0            0.0.0.0/0            statistic mode random probability 0.01\n       3       90 ACCEPT     0    --  *   *       0.0.0.0/0            0.0.0.0/0\n";
        assert_eq!(parse_iptables_drops(l), 52);
        assert_eq!(parse_iptables_drops(""), 0);
    }

    #[test]
    fn cpu_use_from_proc_stat() {
        let a = CpuTimes::parse("cpu  100 0 100 700 100 0 0 0 0 0\ncpu0 1 2 3 4\n").unwrap();
        let b = CpuTimes::parse("cpu  250 0 150 750 100 0 0 50 0 0\n").unwrap();
        let u = b.since(&a);
        // 300 ticks: 50 idle, 250 busy of which 50 stolen.
        assert!((u.busy - 250.0 / 300.0).abs() < 1e-12, "{u:?}");
        assert!((u.steal - 50.0 / 300.0).abs() < 1e-12);
        assert!(!u.cpu_bound());
        assert_eq!(a.since(&a), CpuUse::default());
        assert!(CpuTimes::parse("intr 1 2").is_none());
    }

    #[test]
    fn tbf_bucket_holds_two_frames_at_least() {
        let a = tbf(100_000_000, 65536, 1500);
        assert_eq!(a[2], "100000000bit");
        assert_eq!(a[4], "12500");
        let b = tbf(1_000_000, 65536, 9000);
        assert_eq!(b[4], (2 * 9014).to_string());
    }
}
