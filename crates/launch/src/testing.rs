//! For tests of job programs (the `*-probe` binaries of the crates above): run a program
//! with a time limit in a clean job environment, collect its output, and check that none
//! of the processes it started outlives it. A hang then fails the test instead of the CI
//! run, and a leaked process is named and killed.

use std::io::{BufReader, Read};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// The variable every process of a test carries (children inherit it), which is how
/// [`leftovers`] finds them in /proc.
pub const MARK_VAR: &str = "BWTEST_MARK";

/// A mark unique to this call in this machine's lifetime.
pub fn mark() -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    format!(
        "{}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos())
    )
}

/// Removes the job variables the test runner may have (a test run under `bsprun`, Slurm
/// or `mpirun` must not join that job), and marks the command's processes with `mark`.
pub fn clean(c: &mut Command, mark: &str) {
    c.env(MARK_VAR, mark);
    for (k, _) in std::env::vars() {
        if k.starts_with("BULKWIRE_") || k.starts_with("SLURM_") || k.starts_with("OMPI_") {
            c.env_remove(k);
        }
    }
}

/// A finished command.
#[derive(Debug)]
pub struct Out {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    pub elapsed: Duration,
}

impl Out {
    /// The stdout lines starting with `prefix`.
    pub fn lines(&self, prefix: &str) -> Vec<&str> {
        self.stdout
            .lines()
            .filter(|l| l.starts_with(prefix))
            .collect()
    }
}

/// `key=value` of a line, parsed; panics naming the line when absent or malformed.
pub fn field<T: std::str::FromStr>(line: &str, key: &str) -> T {
    let k = format!("{key}=");
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(k.as_str()))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {key}= in {line:?}"))
}

fn drain(r: impl Read + Send + 'static) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut s = String::new();
        let _ = BufReader::new(r).read_to_string(&mut s);
        s
    })
}

/// Runs `cmd` to its end, killing it if it takes longer than `limit` (a launcher's death
/// takes its processes along: PR_SET_PDEATHSIG), and then panicking with its output.
pub fn run(cmd: &mut Command, limit: Duration) -> Out {
    let start = Instant::now();
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {:?}: {e}", cmd.get_program()));
    let o = drain(child.stdout.take().expect("piped stdout"));
    let e = drain(child.stderr.take().expect("piped stderr"));
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait for the child") {
            break s;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "{cmd:?} timed out after {limit:?}\nstdout:\n{}\nstderr:\n{}",
                o.join().unwrap_or_default(),
                e.join().unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    Out {
        code: status.code(),
        stdout: o.join().unwrap_or_default(),
        stderr: e.join().unwrap_or_default(),
        elapsed: start.elapsed(),
    }
}

/// Runs the job program `exe` with `args` and extra environment `env` in a clean, marked
/// environment (see [`clean`]), bounded by `limit` (see [`run`]); then asserts that none
/// of its processes is left.
pub fn probe(exe: &str, args: &[&str], env: &[(&str, &str)], limit: Duration) -> Out {
    let m = mark();
    let mut c = Command::new(exe);
    c.args(args);
    clean(&mut c, &m);
    c.envs(env.iter().copied());
    let out = run(&mut c, limit);
    assert_no_leftovers(&m);
    out
}

/// Pids of live processes carrying `mark`, after giving them `grace` to go away.
pub fn leftovers(mark: &str, grace: Duration) -> Vec<u32> {
    let needle = format!("{MARK_VAR}={mark}");
    let deadline = Instant::now() + grace;
    loop {
        let mut found = Vec::new();
        for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            if pid == std::process::id() {
                continue;
            }
            // A zombie's environ reads empty, so only live processes match.
            if let Ok(env) = std::fs::read(e.path().join("environ"))
                && env.split(|&b| b == 0).any(|v| v == needle.as_bytes())
            {
                found.push(pid);
            }
        }
        if found.is_empty() || Instant::now() >= deadline {
            return found;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Panics if a process carrying `mark` is still alive after a few seconds, killing it.
pub fn assert_no_leftovers(mark: &str) {
    let left = leftovers(mark, Duration::from_secs(5));
    if !left.is_empty() {
        for &p in &left {
            // SAFETY: kill(2) with a pid and a signal number has no memory effects; these
            // are processes this test started.
            unsafe { libc::kill(p as i32, libc::SIGKILL) };
        }
        panic!("processes left behind: {left:?}");
    }
}

/// Drops CAP_SYS_PTRACE from the calling thread's effective capabilities (root has it), so
/// that the kernel refuses this thread's reads of a peer that is not dumpable. Probes use
/// it, with [`make_undumpable`] in the peer, to play a kernel that refuses single copy.
/// Capabilities belong to threads: other threads keep theirs.
pub fn drop_ptrace_capability() {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    #[repr(C)]
    #[derive(Clone, Copy, Default)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    let mut h = Header {
        version: 0x2008_0522, // _LINUX_CAPABILITY_VERSION_3
        pid: 0,
    };
    let mut d = [Data::default(); 2];
    // SAFETY: capget/capset with a version-3 header and two data structs, as the ABI says.
    unsafe {
        if libc::syscall(libc::SYS_capget, &mut h as *mut Header, d.as_mut_ptr()) != 0 {
            return;
        }
        d[0].effective &= !(1 << 19); // CAP_SYS_PTRACE
        libc::syscall(libc::SYS_capset, &mut h as *mut Header, d.as_ptr());
    }
}

/// Makes this process non-dumpable: only processes with CAP_SYS_PTRACE may then read its
/// memory (see [`drop_ptrace_capability`]).
pub fn make_undumpable() {
    // SAFETY: prctl with constant arguments.
    unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) };
}

mod fabric;

/// The network namespaces of this machine (`ip netns list`), so that a test can check
/// that none of its beds is left behind.
pub fn namespaces() -> Vec<String> {
    Command::new("ip")
        .args(["netns", "list"])
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .filter_map(|l| l.split_whitespace().next().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

pub use fabric::{
    CPU_BOUND, CpuTimes, CpuUse, DEFAULT_BUFFER, Fabric, FabricSpec, HOST_QUEUE, MAX_HOSTS,
    PortCounters, in_netns, namespaces_missing, parse_qdisc,
};

/// A test bed of two "hosts" on one machine: a [`Fabric`] of two network namespaces on an
/// unshaped switch at a given MTU, as two machines on one Ethernet segment. Needs root and
/// `ip`. Dropping it kills whatever still runs in the namespaces and deletes them, so a
/// failing test leaves nothing behind.
pub struct Testbed {
    /// The namespaces' names (`ip netns exec NAME ...`).
    pub names: [String; 2],
    /// Each namespace's address on the segment.
    pub addrs: [String; 2],
    pub mtu: u32,
    fabric: Fabric,
}

impl Testbed {
    /// Makes the pair; `Err` says why (not root, no `ip`), and what was made is removed.
    pub fn new(mtu: u32) -> Result<Testbed, String> {
        let fabric = Fabric::new(FabricSpec::unshaped(2, mtu))?;
        Ok(Testbed {
            names: [fabric.names[0].clone(), fabric.names[1].clone()],
            addrs: [fabric.addrs[0].clone(), fabric.addrs[1].clone()],
            mtu,
            fabric,
        })
    }

    /// The fabric underneath.
    pub fn fabric(&self) -> &Fabric {
        &self.fabric
    }

    /// `program` to be run inside namespace `i`.
    pub fn command(&self, i: usize, program: impl AsRef<std::ffi::OsStr>) -> Command {
        self.fabric.command(i, program)
    }

    /// Cuts host `i` off the segment (its veth goes down), as a cable pulled out.
    pub fn unplug(&self, i: usize) -> Result<(), String> {
        self.fabric.unplug(i)
    }

    /// Pids of the processes in namespace `i`.
    pub fn pids(&self, i: usize) -> Vec<u32> {
        self.fabric.pids(i)
    }
}
