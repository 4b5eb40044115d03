//! Every stack on equal terms: seed 000's comparison framework. Each stack — a protocol
//! over the UDP link (`utopia`, `gbn`, `holefill`, `rmpp`) or kernel TCP (`tcp`) — is
//! built as a pair of ranks on loopback in this process and measured with the same
//! kernels: latency as seed 000's Table 1 (min / avg / max / std dev of the half round
//! trip, plus packets per message), bandwidth as a fraction of utopia's (its Figure 2).

use std::time::Duration;

use bulkwire_engine::{
    Endpoint, EndpointConfig, Engine, Error, TcpConfig, TcpTransport, Transport, WaitPolicy,
};
use bulkwire_link::{Link, UdpConfig, UdpLink};
use bulkwire_protocol::wire::HEADER_LEN;
use bulkwire_protocol::{Common, PeerStats};

use crate::kernels::{Role, pingpong, stream};
use crate::stats::Summary;

/// A boxed transport of either kind.
pub type BoxTransport = Box<dyn Transport>;

/// Every stack, in the order reports list them.
pub const STACKS: &[&str] = &["utopia", "gbn", "holefill", "rmpp", "tcp"];

/// Two connected ranks of `stack` on loopback (rank 0, rank 1).
pub fn loopback_pair(stack: &str) -> Result<(BoxTransport, BoxTransport), Error> {
    let policy = WaitPolicy::for_host(2);
    if stack == "tcp" {
        let mut v = TcpTransport::loopback(2, TcpConfig::default(), policy)?;
        let b = v.pop().expect("two ranks");
        let a = v.pop().expect("two ranks");
        return Ok((Box::new(a), Box::new(b)));
    }
    let cfg = UdpConfig::default();
    let bound = [
        UdpLink::bind("127.0.0.1:0".parse().expect("address"), &cfg)?,
        UdpLink::bind("127.0.0.1:0".parse().expect("address"), &cfg)?,
    ];
    let addrs = vec![bound[0].local_addr(), bound[1].local_addr()];
    let mut out = Vec::new();
    for (r, b) in bound.into_iter().enumerate() {
        let link = b.into_link(r as u32, addrs.clone())?;
        let mut common = Common::new(r as u32, 2, 1);
        common.max_payload = (0..2)
            .map(|p| link.max_datagram(p).saturating_sub(HEADER_LEN).max(1))
            .collect();
        let proto =
            bulkwire_protocol::by_name(stack, common).map_err(|e| Error::Config(e.to_string()))?;
        let ep = Endpoint::new(Box::new(link), proto, EndpointConfig::new(0xBE4C));
        out.push(Box::new(Engine::new(ep, policy)) as BoxTransport);
    }
    let b = out.pop().expect("two ranks");
    let a = out.pop().expect("two ranks");
    Ok((a, b))
}

/// One row of the latency table.
#[derive(Clone, Debug)]
pub struct LatencyRow {
    pub stack: String,
    pub size: usize,
    /// Half round trips, seconds.
    pub half_rtt: Summary,
    /// Packets (data and control, both directions; TCP segments for tcp) per message.
    pub packets_per_message: f64,
}

fn packets(s: &PeerStats) -> u64 {
    s.data_sent + s.control_sent
}

/// Runs `f` on rank 1 in a thread and `g` on rank 0 here; returns both results with the
/// transports.
fn run_pair<A: Send + 'static, B>(
    stack: &str,
    f: impl FnOnce(&mut BoxTransport) -> Result<A, Error> + Send + 'static,
    g: impl FnOnce(&mut BoxTransport) -> Result<B, Error>,
) -> Result<(B, A, BoxTransport, BoxTransport), Error> {
    let (mut a, b) = loopback_pair(stack)?;
    let h = std::thread::spawn(move || {
        let mut b = b;
        let r = f(&mut b);
        // Serve until rank 0 is done, so its last acknowledgements arrive.
        let _ = b.flush(Some(Duration::from_secs(5)));
        (r, b)
    });
    let rg = g(&mut a);
    let _ = a.flush(Some(Duration::from_secs(5)));
    let (rf, b) = h
        .join()
        .map_err(|_| Error::Io(std::io::Error::other("responder thread panicked")))?;
    Ok((rg?, rf?, a, b))
}

/// Seed 000's Table 1 for `stack`: ping-pong of `size`-byte messages, `warmup` untimed
/// and `iters` timed exchanges.
pub fn latency(stack: &str, size: usize, warmup: usize, iters: usize) -> Result<LatencyRow, Error> {
    let (lat, _, a, b) = run_pair(
        stack,
        move |b| pingpong(b, Role::Responder, 0, size, warmup, iters),
        |a| pingpong(a, Role::Initiator, 1, size, warmup, iters),
    )?;
    let msgs = (2 * (warmup + iters)) as f64;
    let pk = packets(&a.peer_stats(1)) + packets(&b.peer_stats(0));
    Ok(LatencyRow {
        stack: stack.to_string(),
        size,
        half_rtt: Summary::of(&lat),
        packets_per_message: pk as f64 / msgs,
    })
}

/// One bandwidth measurement.
#[derive(Clone, Debug)]
pub struct BandwidthRow {
    pub stack: String,
    pub size: usize,
    /// Delivered bytes per second, median of the repetitions.
    pub rate: f64,
    /// `rate` over utopia's at the same size, when utopia was measured.
    pub fraction_of_utopia: Option<f64>,
}

/// OSU-style streaming bandwidth of `stack` for `size`-byte messages, `window` per
/// repetition. Utopia loses what overflows and is measured on what it delivers.
pub fn bandwidth(
    stack: &str,
    size: usize,
    window: usize,
    warmup: usize,
    reps: usize,
) -> Result<BandwidthRow, Error> {
    let lossy = (stack == "utopia").then_some(Duration::from_millis(20));
    let (samples, _, _, _) = run_pair(
        stack,
        move |b| stream(b, Role::Responder, 0, size, window, warmup, reps, lossy),
        |a| stream(a, Role::Initiator, 1, size, window, warmup, reps, lossy),
    )?;
    let rates: Vec<f64> = samples.iter().map(|s| s.rate()).collect();
    Ok(BandwidthRow {
        stack: stack.to_string(),
        size,
        rate: Summary::of(&rates).median,
        fraction_of_utopia: None,
    })
}

/// What [`compare`] measures.
#[derive(Clone, Debug)]
pub struct CompareConfig {
    pub stacks: Vec<String>,
    pub latency_size: usize,
    pub latency_warmup: usize,
    pub latency_iters: usize,
    pub bandwidth_sizes: Vec<usize>,
    pub window: usize,
    pub bandwidth_warmup: usize,
    pub bandwidth_reps: usize,
}

impl Default for CompareConfig {
    fn default() -> Self {
        CompareConfig {
            stacks: STACKS.iter().map(|s| s.to_string()).collect(),
            latency_size: 8,
            latency_warmup: 200,
            latency_iters: 2000,
            bandwidth_sizes: vec![4 << 10, 64 << 10, 1 << 20],
            window: 64,
            bandwidth_warmup: 2,
            bandwidth_reps: 10,
        }
    }
}

/// The whole comparison.
#[derive(Clone, Debug, Default)]
pub struct Comparison {
    pub latency: Vec<LatencyRow>,
    pub bandwidth: Vec<BandwidthRow>,
}

/// Measures every stack of `cfg` with the same kernels; a stack that fails is reported
/// as an error naming it.
pub fn compare(cfg: &CompareConfig) -> Result<Comparison, Error> {
    let mut out = Comparison::default();
    let named = |stack: &str, e: Error| Error::Config(format!("{stack}: {e}"));
    for s in &cfg.stacks {
        out.latency.push(
            latency(s, cfg.latency_size, cfg.latency_warmup, cfg.latency_iters)
                .map_err(|e| named(s, e))?,
        );
    }
    for &size in &cfg.bandwidth_sizes {
        for s in &cfg.stacks {
            out.bandwidth.push(
                bandwidth(
                    s,
                    size,
                    cfg.window,
                    cfg.bandwidth_warmup,
                    cfg.bandwidth_reps,
                )
                .map_err(|e| named(s, e))?,
            );
        }
    }
    for i in 0..out.bandwidth.len() {
        let size = out.bandwidth[i].size;
        let utopia = out
            .bandwidth
            .iter()
            .find(|r| r.size == size && r.stack == "utopia")
            .map(|r| r.rate);
        out.bandwidth[i].fraction_of_utopia = utopia
            .filter(|&u| u > 0.0)
            .map(|u| out.bandwidth[i].rate / u);
    }
    Ok(out)
}

impl Comparison {
    /// The tables as text (seed 000's Table 1, then bandwidth and fraction of utopia).
    pub fn to_text(&self) -> String {
        let mut s =
            String::from("stack      size   min us   avg us   max us  std dev  packets/msg\n");
        for r in &self.latency {
            let h = &r.half_rtt;
            s += &format!(
                "{:8} {:6} {:8.2} {:8.2} {:8.2} {:8.3} {:12.2}\n",
                r.stack,
                r.size,
                h.min * 1e6,
                h.mean * 1e6,
                h.max * 1e6,
                h.std_dev * 1e6,
                r.packets_per_message
            );
        }
        s += "\nstack      size        MB/s  of utopia\n";
        for r in &self.bandwidth {
            s += &format!(
                "{:8} {:8} {:10.1} {:>10}\n",
                r.stack,
                r.size,
                r.rate / 1e6,
                r.fraction_of_utopia
                    .map_or("-".to_string(), |f| format!("{:.0} %", f * 100.0))
            );
        }
        s
    }
}
