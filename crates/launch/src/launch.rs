//! Starting the processes of a job on this host: [`launch`] (what `bsprun` does) and
//! [`self_spawn`] (what `./program` does when its rank 0 begins a parallel part).

use std::ffi::{OsStr, OsString};
use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::mpsc;
use std::time::Duration;

use crate::LaunchError;
use crate::agent::{Start, agent_args, secret_preamble};
use crate::bind::{self, CpuSet, Placement, Plan};
use crate::control::Control;
use crate::env::{JobEnv, LaunchConfig};
use crate::hosts::{self, HostRanks, HostSlots};
use crate::secret::Secret;
use crate::server::{JobOutcome, Server, ServerConfig};
use crate::sys;

/// How [`launch`] runs a job.
#[derive(Clone, Debug)]
pub struct LaunchOpts {
    /// Prefix every line a process prints with its rank, `[3] ...`.
    pub tag_output: bool,
    /// Limit on the whole job; past it the job fails (exit status 124).
    pub timeout: Option<Duration>,
    /// After a failure notice, how long processes get to exit on their own before SIGTERM.
    pub term_delay: Duration,
    /// After SIGTERM, how long before SIGKILL.
    pub kill_grace: Duration,
    /// Every process must have joined the job this long after the first one did.
    pub join_timeout: Option<Duration>,
    /// Prefix of the failure lines printed to stderr (`"bsprun"`); `None`: print nothing.
    pub report: Option<String>,
    /// Where the rendezvous server listens: `None` chooses (loopback for one host; with
    /// other hosts, the address of this machine on the route to them, or all addresses
    /// when the routes differ).
    pub listen: Option<SocketAddr>,
    /// Extra environment for the processes (on top of the launcher's own, which they
    /// inherit on this host, and the `BULKWIRE_*` job variables).
    pub env: Vec<(OsString, OsString)>,
    /// Variables of the launcher's own environment that ranks on other hosts get too
    /// (there they can't inherit it): the `BULKWIRE_*` settings, `-x NAME`.
    pub forward_env: Vec<(OsString, OsString)>,
    /// Give rank 0 the launcher's standard input (the others get /dev/null), as mpirun
    /// does. A terminal is relayed through a pipe, since the processes are not in the
    /// terminal's foreground process group.
    pub stdin_to_rank0: bool,
    /// Catch SIGINT, SIGTERM and SIGHUP while the job runs and pass them to the processes
    /// (a second one kills them). For a launcher program; a library caller may not want
    /// its handlers replaced.
    pub forward_signals: bool,
    /// Bind each process to an equal share of its host's cores (see [`crate::bind`]).
    pub placement: Placement,
    /// The hosts and their slots; empty: every process on this host.
    pub hosts: Vec<HostSlots>,
    /// The remote shell, called as `RSH... HOST COMMAND...` (default `ssh`).
    pub rsh: Vec<OsString>,
    /// The host agent's command on the other hosts, before its arguments
    /// ([`crate::agent::agent_args`]): e.g. `/usr/local/bin/bsprun --agent`.
    pub agent: Vec<OsString>,
    /// The launcher's working directory, where the ranks on other hosts start (when they
    /// have it).
    pub cwd: OsString,
}

impl Default for LaunchOpts {
    fn default() -> Self {
        LaunchOpts {
            tag_output: false,
            timeout: None,
            term_delay: Duration::from_millis(250),
            kill_grace: Duration::from_secs(2),
            join_timeout: Some(crate::DEFAULT_JOIN_TIMEOUT),
            report: None,
            listen: None,
            env: Vec::new(),
            forward_env: Vec::new(),
            stdin_to_rank0: false,
            forward_signals: false,
            placement: Placement::Share,
            hosts: Vec::new(),
            rsh: vec!["ssh".into()],
            agent: Vec::new(),
            cwd: OsString::from("/"),
        }
    }
}

/// Starts `n` processes of `program args` as one job, runs its rendezvous server, and waits
/// for the job to end. Without hosts, every process runs here; with hosts, each host gets
/// its slots' worth of ranks in order, those of other hosts started by their host agent
/// through the remote shell. The processes here inherit this process's environment plus
/// `opts.env` and the job variables (`BULKWIRE_RANK`...), each in its own process group
/// and killed if this launcher dies (`PR_SET_PDEATHSIG`). When one fails, the failure is
/// printed once (with `opts.report`), the others are notified, then terminated.
///
/// Runs the server on the calling thread: the processes' death signal is tied to it.
pub fn launch(
    n: u32,
    program: impl AsRef<OsStr>,
    args: &[OsString],
    opts: &LaunchOpts,
) -> Result<JobOutcome, LaunchError> {
    let program = program.as_ref();
    if n == 0 {
        return Err(LaunchError::Usage(
            "a job needs at least one process".into(),
        ));
    }
    let layout = if opts.hosts.is_empty() {
        vec![HostRanks {
            name: crate::hostname(),
            ranks: (0..n).collect(),
            addr: None,
            local: true,
        }]
    } else {
        hosts::place(n, &opts.hosts)?
    };
    if layout.iter().any(|h| !h.local) && opts.agent.is_empty() {
        return Err(LaunchError::Usage(
            "ranks on other hosts need a host agent command (LaunchOpts::agent)".into(),
        ));
    }
    let routes = Routes::choose(&layout, opts.listen)?;
    let cfg = ServerConfig {
        nprocs: n,
        // A fresh secret per job: the ranks here get it in their environment, the agents
        // of other hosts on their standard input.
        secret: Secret::generate(),
        report: opts.report.clone(),
        timeout: opts.timeout,
        term_delay: opts.term_delay,
        kill_grace: opts.kill_grace,
        join_timeout: opts.join_timeout,
        host_rank: None,
        local_host: layout.iter().find(|h| h.local).map(|h| h.name.clone()),
    };
    let (mut server, mut env) = new_job(n, routes.bind, cfg)?;
    let port = server.local_addr().port();
    let signals = if opts.forward_signals {
        let g = SignalGuard::install()?;
        server.set_signal_fd(g.read_end()?);
        Some(g)
    } else {
        None
    };
    let mut output = OutputForwarder::default();
    for h in &layout {
        let started = if h.local {
            env.rendezvous = SocketAddr::new(routes.local, port);
            start_local(&mut server, &env, h, program, args, opts, &mut output)
        } else {
            let reach = SocketAddr::new(routes.toward(h), port);
            start_remote(
                &mut server,
                &env,
                h,
                reach,
                (program, args),
                opts,
                &mut output,
            )
        };
        if let Err(e) = started {
            server.kill_children_now();
            return Err(e);
        }
    }
    let forwarder = (!output.is_empty()).then(|| output.start()).transpose()?;
    let outcome = server.run();
    if let Some(f) = forwarder {
        // Processes are gone; a grandchild holding a pipe open mustn't hold us.
        f.finish(Duration::from_secs(1));
    }
    drop(signals);
    Ok(outcome)
}

/// Where the server listens and which of its addresses each host uses.
struct Routes {
    bind: SocketAddr,
    /// What this host's ranks connect to: an address the other hosts reach them at too,
    /// since their data sockets are bound on the address their connection comes from.
    local: IpAddr,
    /// Per remote host (by address), the address of ours on the route to it.
    toward: Vec<(IpAddr, IpAddr)>,
}

impl Routes {
    fn choose(layout: &[HostRanks], listen: Option<SocketAddr>) -> Result<Routes, LaunchError> {
        let mut toward = Vec::new();
        for h in layout.iter().filter(|h| !h.local) {
            let dest = h.addr.expect("a remote host has an address");
            let src = hosts::source_toward(dest).ok_or_else(|| {
                LaunchError::Usage(format!("host {} ({dest}): no route to it", h.name))
            })?;
            toward.push((dest, src));
        }
        let loopback = IpAddr::from([127, 0, 0, 1]);
        if let Some(l) = listen {
            let ip = if l.ip().is_unspecified() {
                toward.first().map_or(loopback, |t| t.1)
            } else {
                l.ip()
            };
            if !l.ip().is_unspecified() {
                for t in &mut toward {
                    t.1 = ip;
                }
            }
            return Ok(Routes {
                bind: l,
                local: ip,
                toward,
            });
        }
        let first = toward.first().map(|t| t.1);
        let all_same = toward.iter().all(|t| Some(t.1) == first);
        let bind = match first {
            None => SocketAddr::new(loopback, 0),
            Some(ip) if all_same => SocketAddr::new(ip, 0),
            Some(_) => SocketAddr::from(([0, 0, 0, 0], 0)),
        };
        Ok(Routes {
            bind,
            local: first.unwrap_or(loopback),
            toward,
        })
    }

    fn toward(&self, h: &HostRanks) -> IpAddr {
        let dest = h.addr.expect("a remote host has an address");
        self.toward
            .iter()
            .find(|t| t.0 == dest)
            .map_or(self.local, |t| t.1)
    }
}

/// Starts the ranks of this host.
fn start_local(
    server: &mut Server,
    env: &JobEnv,
    h: &HostRanks,
    program: &OsStr,
    args: &[OsString],
    opts: &LaunchOpts,
    output: &mut OutputForwarder,
) -> Result<(), LaunchError> {
    let plan = bind::plan(h.ranks.len() as u32, opts.placement);
    for (i, &rank) in h.ranks.iter().enumerate() {
        let mut cmd = Command::new(program);
        cmd.args(args)
            .envs(opts.env.iter().map(|(k, v)| (k, v)))
            .envs(env.vars_for(rank))
            // Its own group, so terminating a rank also ends what it started (a wrapper
            // script's program, a pipeline).
            .process_group(0);
        die_with_parent(&mut cmd);
        if let Some(p) = &plan {
            bind_child(&mut cmd, p, i as u32);
        }
        cmd.stdin(if rank == 0 && opts.stdin_to_rank0 {
            rank0_stdin()?
        } else {
            Stdio::null()
        });
        if opts.tag_output {
            cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        }
        let mut child = cmd.spawn().map_err(|e| LaunchError::Spawn {
            rank,
            program: program.to_string_lossy().into_owned(),
            source: e,
        })?;
        if let Some(o) = child.stdout.take() {
            output.add(rank, OwnedFd::from(o), false);
        }
        if let Some(e) = child.stderr.take() {
            output.add(rank, OwnedFd::from(e), true);
        }
        if let Err(e) = server.add_child(rank, child.id(), true) {
            let _ = child.kill();
            let _ = child.wait();
            return Err(LaunchError::Io(e));
        }
        // `child` is dropped without waiting: the server reaps it through its pidfd.
    }
    Ok(())
}

/// Starts the agent of host `h` through the remote shell; the agent starts its ranks.
fn start_remote(
    server: &mut Server,
    env: &JobEnv,
    h: &HostRanks,
    reach: SocketAddr,
    (program, args): (&OsStr, &[OsString]),
    opts: &LaunchOpts,
    output: &mut OutputForwarder,
) -> Result<(), LaunchError> {
    let has_rank0 = h.ranks.first() == Some(&0);
    let start = Start {
        host: h.name.clone(),
        ranks: h.ranks.clone(),
        nprocs: env.nprocs,
        job_id: env.job_id,
        rendezvous: reach,
        program: program.to_os_string(),
        args: args.to_vec(),
        env: opts.forward_env.iter().chain(&opts.env).cloned().collect(),
        cwd: opts.cwd.clone(),
        tag_output: opts.tag_output,
        stdin_rank: (has_rank0 && opts.stdin_to_rank0).then_some(0),
        placement: opts.placement,
    };
    let a = server.add_agent(&h.name, &h.ranks, start.encode());
    let mut remote: Vec<String> = opts
        .agent
        .iter()
        .map(|w| w.to_string_lossy().into_owned())
        .collect();
    remote.extend(agent_args(reach, a));
    let (rsh, rsh_args) = opts
        .rsh
        .split_first()
        .ok_or_else(|| LaunchError::Usage("the remote shell command is empty".into()))?;
    let mut cmd = Command::new(rsh);
    cmd.args(rsh_args)
        .arg(&h.name)
        .args(remote.iter().map(|w| hosts::shell_quote(w)))
        // Its own group: a Ctrl-C at the terminal reaches bsprun, which passes it on to
        // the ranks through the agents, not the remote shell (which would drop them).
        .process_group(0);
    die_with_parent(&mut cmd);
    cmd.stdin(agent_stdin(&env.secret, start.stdin_rank.is_some())?);
    if opts.tag_output {
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    }
    let mut child = cmd.spawn().map_err(|e| {
        LaunchError::Usage(format!(
            "cannot run the remote shell {:?} for host {}: {e}",
            rsh, h.name
        ))
    })?;
    // Tagged already by the agent: relayed whole lines only, so hosts never mix in a line.
    if let Some(o) = child.stdout.take() {
        output.add_prefixed(Vec::new(), OwnedFd::from(o), false);
    }
    if let Some(e) = child.stderr.take() {
        output.add_prefixed(Vec::new(), OwnedFd::from(e), true);
    }
    server.add_agent_shell(a, child.id())?;
    Ok(())
}

/// A server for a new job (its secret in `cfg`) with a fresh random id, and the job's
/// environment.
fn new_job(n: u32, bind: SocketAddr, cfg: ServerConfig) -> Result<(Server, JobEnv), LaunchError> {
    let job_id = sys::random_u64();
    let secret = cfg.secret.clone();
    let server = Server::bind(bind, cfg)?;
    let env = JobEnv::bulkwire(0, n, secret, job_id, server.local_addr());
    Ok((server, env))
}

/// The child gets SIGKILL when the thread that spawned it ends (this launcher dies), so a
/// killed launcher leaves no orphans on this host.
pub(crate) fn die_with_parent(cmd: &mut Command) {
    let parent = std::process::id();
    // SAFETY: the closure runs between fork and exec and calls only async-signal-safe
    // functions (prctl, getppid).
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(
                libc::PR_SET_PDEATHSIG,
                libc::SIGKILL as libc::c_ulong,
                0,
                0,
                0,
            ) != 0
            {
                return Err(io::Error::last_os_error());
            }
            // The parent may have died before prctl: then nothing would ever kill us.
            if libc::getppid() as u32 != parent {
                return Err(io::Error::other("the launcher died during spawn"));
            }
            Ok(())
        });
    }
}

/// The child runs on its share of `plan` and learns how many CPUs the job has here.
pub(crate) fn bind_child(cmd: &mut Command, plan: &Plan, index: u32) {
    let (k, v) = plan.env();
    cmd.env(k, v);
    let share = plan.shares[index as usize];
    // SAFETY: the closure runs between fork and exec and makes one system call. A refused
    // binding (a cpuset changed meanwhile) leaves the process where it is: binding is an
    // optimisation, not a reason to fail the job.
    unsafe {
        cmd.pre_exec(move || {
            let _ = share.apply();
            Ok(())
        });
    }
}

/// Rank 0's standard input: ours, or for a terminal a pipe fed by a relay thread. The
/// relay is detached: it ends when rank 0 closes the pipe (write error) or at our exit.
fn rank0_stdin() -> Result<Stdio, LaunchError> {
    if !sys::isatty(0) {
        return Ok(Stdio::inherit());
    }
    let (r, w) = sys::pipe()?;
    relay_stdin(std::fs::File::from(w))?;
    Ok(Stdio::from(r))
}

/// A remote shell's standard input: a pipe that carries the job's secret first (ssh
/// encrypts it; a command line would show it to every user of both hosts), then, for the
/// host of rank 0, this process's standard input, relayed. The relay is detached: it ends
/// at EOF, when the shell closes the pipe (write error), or at our exit.
fn agent_stdin(secret: &Secret, relay: bool) -> Result<Stdio, LaunchError> {
    let (r, w) = sys::pipe()?;
    let mut w = std::fs::File::from(w);
    // One line fits the pipe's buffer: this never blocks.
    w.write_all(&secret_preamble(secret))?;
    if relay {
        relay_stdin(w)?;
    }
    Ok(Stdio::from(r))
}

/// Copies this process's standard input into `w` on a detached thread, until EOF or until
/// the reader goes away.
fn relay_stdin(mut w: std::fs::File) -> io::Result<()> {
    std::thread::Builder::new()
        .name("bulkwire-stdin".into())
        .spawn(move || {
            let mut buf = [0u8; 8192];
            let mut stdin = io::stdin().lock();
            while let Ok(n) = stdin.read(&mut buf) {
                if n == 0 || w.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
        })
        .map(drop)
}

/// Joins the job this process belongs to or, if it belongs to none, starts one of `n`
/// processes with itself as rank 0. This is what `bsp_begin(P)` calls, so that running
/// `./program` behaves like `bsprun -n P ./program`:
///
/// - started by a launcher (`BULKWIRE_RANK`... or Slurm/mpirun with
///   `BULKWIRE_RENDEZVOUS`): joins that job (`n` is not checked against the job's size:
///   the caller decides what a mismatch means);
/// - otherwise: runs the rendezvous server on a background thread, re-executes
///   `/proc/self/exe` with this process's arguments as ranks 1..n-1 (they find the job
///   variables and join instead of spawning again), and joins as rank 0.
///
/// The spawned processes share this process's process group (a Ctrl-C reaches them all),
/// stdout and stderr; they die if rank 0 does. Rank 0 must call [`Control::finish`], which
/// waits for the others to end.
pub fn self_spawn(n: u32, cfg: &LaunchConfig) -> Result<Control, LaunchError> {
    if let Some(env) = &cfg.job {
        return Control::join_timeout(env, cfg.join_timeout);
    }
    if let Some(offer) = &cfg.boot {
        let mut boot = crate::bootstrap::open(offer, cfg.join_timeout)?;
        return crate::bootstrap::form(boot.as_mut(), cfg);
    }
    spawn_job(n, cfg, None)
}

/// Starts a new job of `n` processes on this host with this process as rank 0, whether
/// or not this process belongs to another job: the rest of [`self_spawn`]. `entry` goes
/// to the started processes as [`JobEnv::entry`] (a later SPMD section of a BSPlib
/// program names the function they run). Jobs nest: a rank of a running job may start one
/// of its own (a nested SPMD section); each job has its own server thread, and its
/// processes are watched through their pidfds, so neither job reaps the other's.
pub fn spawn_job(
    n: u32,
    cfg: &LaunchConfig,
    entry: Option<String>,
) -> Result<Control, LaunchError> {
    let n = n.max(1);
    let plan = bind::plan(n, cfg.placement);
    let mut scfg = ServerConfig::new(n, Secret::generate());
    scfg.report = Some(program_name());
    scfg.host_rank = Some(0);
    scfg.join_timeout = Some(cfg.join_timeout);
    let (mut server, mut env) = new_job(n, SocketAddr::from(([127, 0, 0, 1], 0)), scfg)?;
    // The children inherit the host override from this process's environment; rank 0
    // takes it, and the CPUs it shared out, from here.
    env.host_id = cfg.host_id.clone();
    env.host_cpus = plan.as_ref().map(|p| p.cpus).or(cfg.host_cpus);
    env.entry = entry;
    let mut argv = std::env::args_os();
    let arg0 = argv
        .next()
        .unwrap_or_else(|| OsString::from("bulkwire-rank"));
    let rest: Vec<OsString> = argv.collect();
    let (tx, rx) = mpsc::channel::<Result<(), LaunchError>>();
    let env_c = env.clone();
    let plan_c = plan.clone();
    // The processes are spawned on the server thread: PR_SET_PDEATHSIG follows the thread
    // that spawned a child, and this one lives until every process has ended.
    let server_thread = std::thread::Builder::new()
        .name("bulkwire-rendezvous".into())
        .spawn(move || {
            for rank in 1..n {
                let mut cmd = Command::new("/proc/self/exe");
                cmd.arg0(&arg0)
                    .args(&rest)
                    .envs(env_c.vars_for(rank))
                    .stdin(Stdio::null());
                die_with_parent(&mut cmd);
                if let Some(p) = &plan_c {
                    bind_child(&mut cmd, p, rank);
                }
                let started = cmd.spawn().map_err(|e| LaunchError::Spawn {
                    rank,
                    program: "/proc/self/exe".into(),
                    source: e,
                });
                let added = started.and_then(|c| {
                    server
                        .add_child(rank, c.id(), false)
                        .map_err(LaunchError::Io)
                });
                if let Err(e) = added {
                    server.kill_children_now();
                    let _ = tx.send(Err(e));
                    return JobOutcome::default();
                }
            }
            let _ = tx.send(Ok(()));
            server.run()
        })?;
    match rx.recv() {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return Err(e),
        Err(_) => {
            return Err(LaunchError::Protocol(
                "the rendezvous server thread ended while starting the processes".into(),
            ));
        }
    }
    // Rank 0 is this thread, and the threads it starts from now on (the rendezvous
    // server's stays free); the program gets its CPUs back after the job.
    let before = plan.as_ref().and_then(|p| {
        CpuSet::current()
            .ok()
            .filter(|_| p.shares[0].apply().is_ok())
    });
    let mut c = match Control::join(&env) {
        Ok(c) => c,
        Err(e) => {
            if let Some(cpus) = before {
                let _ = cpus.apply();
            }
            return Err(e);
        }
    };
    c.set_server(server_thread);
    if let Some(cpus) = before {
        c.restore_affinity_at_finish(cpus);
    }
    Ok(c)
}

pub(crate) fn program_name() -> String {
    std::env::args_os()
        .next()
        .map(|a| {
            std::path::Path::new(&a)
                .file_name()
                .unwrap_or(&a)
                .to_string_lossy()
                .into_owned()
        })
        .unwrap_or_else(|| "bulkwire".into())
}

/// Catches SIGINT, SIGTERM and SIGHUP into a self-pipe for the server loop, and restores
/// the previous handlers when dropped.
struct SignalGuard {
    read: OwnedFd,
    /// Kept open for the handler (SIGNAL_PIPE holds its number).
    _write: OwnedFd,
    old: Vec<(i32, libc::sigaction)>,
}

/// The write end for the handler (a handler can't reach anything but a static).
static SIGNAL_PIPE: AtomicI32 = AtomicI32::new(-1);
const FORWARDED: [i32; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

extern "C" fn on_signal(sig: libc::c_int) {
    let fd = SIGNAL_PIPE.load(Ordering::Relaxed);
    if fd >= 0 {
        let b = sig as u8;
        // SAFETY: write(2) is async-signal-safe; the pipe is non-blocking.
        unsafe {
            libc::write(fd, (&b as *const u8).cast(), 1);
        }
    }
}

impl SignalGuard {
    fn install() -> Result<SignalGuard, LaunchError> {
        let (read, write) = sys::pipe()?;
        sys::set_nonblocking(read.as_raw_fd())?;
        sys::set_nonblocking(write.as_raw_fd())?;
        if SIGNAL_PIPE
            .compare_exchange(-1, write.as_raw_fd(), Ordering::SeqCst, Ordering::SeqCst)
            .is_err()
        {
            return Err(LaunchError::Usage(
                "another launch in this process already forwards signals".into(),
            ));
        }
        let mut old = Vec::new();
        for sig in FORWARDED {
            // SAFETY: sigaction structs are plain data; the handler is an extern "C" fn
            // that only does async-signal-safe work.
            unsafe {
                let mut sa: libc::sigaction = std::mem::zeroed();
                sa.sa_sigaction = on_signal as *const () as libc::sighandler_t;
                sa.sa_flags = libc::SA_RESTART;
                libc::sigemptyset(&mut sa.sa_mask);
                let mut prev: libc::sigaction = std::mem::zeroed();
                if libc::sigaction(sig, &sa, &mut prev) == 0 {
                    old.push((sig, prev));
                }
            }
        }
        Ok(SignalGuard {
            read,
            _write: write,
            old,
        })
    }

    fn read_end(&self) -> Result<OwnedFd, LaunchError> {
        Ok(self.read.try_clone()?)
    }
}

impl Drop for SignalGuard {
    fn drop(&mut self) {
        for (sig, prev) in &self.old {
            // SAFETY: restores a disposition sigaction gave us.
            unsafe {
                libc::sigaction(*sig, prev, std::ptr::null_mut());
            }
        }
        SIGNAL_PIPE.store(-1, Ordering::SeqCst);
    }
}

/// Relays the processes' stdout and stderr line by line with a `[rank] ` prefix. Only whole
/// lines are written, each batch in one write, so lines of different ranks never mix.
#[derive(Default)]
pub(crate) struct OutputForwarder {
    streams: Vec<Stream>,
}

struct Stream {
    fd: OwnedFd,
    prefix: Vec<u8>,
    to_stderr: bool,
    buf: Vec<u8>,
    open: bool,
}

/// A line longer than this is cut (and continued on the next tagged line) to bound memory.
const MAX_LINE: usize = 64 * 1024;

pub(crate) struct ForwarderHandle {
    stop: OwnedFd,
    done: mpsc::Receiver<()>,
}

impl OutputForwarder {
    pub(crate) fn add(&mut self, rank: u32, fd: OwnedFd, to_stderr: bool) {
        self.add_prefixed(format!("[{rank}] ").into_bytes(), fd, to_stderr);
    }

    /// A stream relayed line by line with `prefix` (empty: lines another forwarder tagged
    /// already, kept whole).
    pub(crate) fn add_prefixed(&mut self, prefix: Vec<u8>, fd: OwnedFd, to_stderr: bool) {
        self.streams.push(Stream {
            fd,
            prefix,
            to_stderr,
            buf: Vec::new(),
            open: true,
        });
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.streams.is_empty()
    }

    pub(crate) fn start(mut self) -> Result<ForwarderHandle, LaunchError> {
        let (stop_r, stop_w) = sys::pipe()?;
        for s in &self.streams {
            sys::set_nonblocking(s.fd.as_raw_fd())?;
        }
        let (tx, rx) = mpsc::channel();
        std::thread::Builder::new()
            .name("bulkwire-output".into())
            .spawn(move || {
                self.run(&stop_r);
                let _ = tx.send(());
            })?;
        Ok(ForwarderHandle {
            stop: stop_w,
            done: rx,
        })
    }

    fn run(&mut self, stop: &OwnedFd) {
        let mut chunk = vec![0u8; 64 * 1024];
        loop {
            let mut pfds: Vec<libc::pollfd> = self
                .streams
                .iter()
                .filter(|s| s.open)
                .map(|s| libc::pollfd {
                    fd: s.fd.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                })
                .collect();
            if pfds.is_empty() {
                return;
            }
            pfds.push(libc::pollfd {
                fd: stop.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            });
            if sys::poll(&mut pfds, None).is_err() {
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
            if pfds.last().is_some_and(|p| p.revents != 0) {
                for s in &mut self.streams {
                    if s.open {
                        s.open = false;
                        emit(s, true);
                    }
                }
                return;
            }
            let ready: Vec<i32> = pfds
                .iter()
                .filter(|p| p.revents != 0)
                .map(|p| p.fd)
                .collect();
            for s in self
                .streams
                .iter_mut()
                .filter(|s| ready.contains(&s.fd.as_raw_fd()))
            {
                loop {
                    // SAFETY: reads into a valid buffer from a non-blocking pipe we own.
                    let n = unsafe {
                        libc::read(s.fd.as_raw_fd(), chunk.as_mut_ptr().cast(), chunk.len())
                    };
                    if n > 0 {
                        s.buf.extend_from_slice(&chunk[..n as usize]);
                        emit(s, false);
                        continue;
                    }
                    let e = io::Error::last_os_error();
                    if n < 0 && e.kind() == io::ErrorKind::Interrupted {
                        continue;
                    }
                    if n == 0 || e.kind() != io::ErrorKind::WouldBlock {
                        s.open = false;
                        emit(s, true);
                    }
                    break;
                }
            }
        }
    }
}

/// Writes the complete lines of `s.buf` (all of it when `all`), tagged, in one write.
fn emit(s: &mut Stream, all: bool) {
    let mut out = Vec::new();
    let mut start = 0;
    while let Some(nl) = s.buf[start..].iter().position(|&b| b == b'\n') {
        out.extend_from_slice(&s.prefix);
        out.extend_from_slice(&s.buf[start..start + nl + 1]);
        start += nl + 1;
    }
    let rest = s.buf.len() - start;
    if rest > 0 && (all || rest >= MAX_LINE) {
        out.extend_from_slice(&s.prefix);
        out.extend_from_slice(&s.buf[start..]);
        out.push(b'\n');
        start = s.buf.len();
    }
    s.buf.drain(..start);
    if out.is_empty() {
        return;
    }
    let _ = if s.to_stderr {
        io::stderr().lock().write_all(&out)
    } else {
        let mut o = io::stdout().lock();
        o.write_all(&out).and_then(|()| o.flush())
    };
}

impl ForwarderHandle {
    /// Waits for the relay to drain (every pipe closed), at most `wait`; then stops it.
    pub(crate) fn finish(self, wait: Duration) {
        if self.done.recv_timeout(wait).is_ok() {
            return;
        }
        let b = 1u8;
        // SAFETY: one byte from a valid local to a pipe we own.
        unsafe {
            libc::write(self.stop.as_raw_fd(), (&b as *const u8).cast(), 1);
        }
        let _ = self.done.recv_timeout(wait);
    }
}
