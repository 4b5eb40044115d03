//! A running BSP process: the [`Core`] behind a progress thread, the job's control
//! connection, and what `bsp_begin`, `bsp_end` and `bsp_abort` do with them. The C ABI
//! keeps one `Runtime` per process; the safe Rust API ([`crate::Bsp`]) wraps one.

use std::cell::RefCell;
use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bulkwire_engine::Transport;
use bulkwire_engine::job;
use bulkwire_engine::progress::Shared;
use bulkwire_launch::{
    Control, Failure, JobState, LaunchConfig, LaunchError, self_spawn, spawn_job,
};
use bulkwire_link::HostGroup;
use bulkwire_protocol::mcast::McastConfig;

use crate::board::{self, Board};
use crate::config::Config;
use crate::core::{Core, Net};
use crate::lock::UserSide;
use crate::profile::Profiler;
use crate::{BspError, stats};

/// The sections this process is in (between `bsp_begin` and `bsp_end`; more than one
/// when sections nest): while any is, a failure notice ends the process even if it is
/// computing and never calls the library again.
static IN_JOB: AtomicUsize = AtomicUsize::new(0);

/// This process has left a section (its `bsp_end`); an outer one may still be running.
fn left_section() {
    let _ = IN_JOB.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
}

/// This process is about to exit: no section of it is running any more.
fn leaving() {
    IN_JOB.store(0, Ordering::SeqCst);
}

/// How long a process that learnt of a failure may take to stop on its own (it normally
/// does at its next call) before the watchdog ends it.
const WATCHDOG: Duration = Duration::from_secs(2);

/// The sync board of a job whose `p` processes are all of its ranks and share this host
/// over shared memory (`crate::board`), if every process's settings allow it. Collective
/// over the job: every rank reaches it with the same `info` and `p`, so all take part in
/// the same rendezvous rounds or none does. A board that cannot be made (no memfd, a
/// process that cannot map it) leaves the job on the transport's barrier; a failure of
/// the job is an error.
fn open_board(
    ctl: &mut Control,
    info: &job::JobInfo,
    p: u32,
    wanted: bool,
) -> Result<Option<Board>, BspError> {
    let usable = info.links == "shm"
        && ctl.nprocs() == p
        && (2..=board::MAX_PROCS).contains(&(p as usize))
        && info.local.iter().all(|&l| l);
    if !usable {
        return Ok(None);
    }
    let all = ctl.allgather(&[u8::from(wanted)])?;
    if !all.iter().all(|b| b[..] == [1]) {
        return Ok(None);
    }
    let group = HostGroup::new(ctl.rank(), &info.local)
        .map_err(|e| BspError::Protocol(format!("the sync board's group: {e}")))?;
    let mut rv = job::ControlRendezvous::new(ctl);
    match Board::create(&group, &mut rv) {
        Ok(b) => Ok(Some(b)),
        Err(_) => match rv.failed {
            Some(f) => Err(BspError::Protocol(format!(
                "the job failed while making the sync board: {f}"
            ))),
            None => Ok(None),
        },
    }
}

/// One process of a BSP computation.
pub struct Runtime {
    /// The user side: one thread's (see `crate::lock`), so a call takes no lock.
    core: UserSide<Core>,
    /// The transport side, shared with the progress thread; gone after `finish`.
    shared: RefCell<Option<Shared<Net>>>,
    /// The job's control connection (none over a given transport, or after `finish`).
    ctl: Mutex<Option<Control>>,
    /// `bsp_end` has begun: calls from now on are outside the computation.
    ended: AtomicBool,
    job: Option<Arc<JobState>>,
    pid: u32,
    p: u32,
    start: Instant,
    cfg: Config,
    protocol: &'static str,
    /// The cost profile's records, when `Config::profile` asks for them.
    profile: Option<Mutex<Profiler>>,
    /// The links pid 0's packets take (`shm`, `udp`, `shm+udp`, `tcp`); empty when the
    /// caller built the transport.
    links: &'static str,
}

impl Runtime {
    /// `bsp_begin(p)`: joins the job this process was launched in (`bsprun`, srun,
    /// mpirun), or starts one of `p` processes with itself as pid 0. Under a launcher of
    /// N processes the computation has min(p, N) processes; the others wait here for it
    /// to end and exit with status 0.
    ///
    /// Only pid 0's `p` counts: with `bsp_init` the other processes run the SPMD function
    /// before `main` has computed it (the standard's example reads it from input).
    pub fn begin(p: u32, launch: &LaunchConfig, cfg: Config) -> Result<Runtime, BspError> {
        Runtime::start(p, launch.is_spawned(), cfg, |n| self_spawn(n, launch))
    }

    /// `bsp_begin(p)` in the job `ctl` has joined (e.g. threads of one test, each a rank
    /// of a job served in the test): as [`Runtime::begin`] with the launcher's part done.
    pub fn join(ctl: Control, p: u32, cfg: Config) -> Result<Runtime, BspError> {
        Runtime::start(p, true, cfg, |_| Ok(ctl))
    }

    /// `bsp_begin(p)` that starts a new job of `p` processes on this host, whose processes
    /// run the SPMD function `entry` names ([`bulkwire_launch::JobEnv::entry`]): a later
    /// SPMD section, on the process that continued after the previous `bsp_end` (the
    /// previous job's other processes have ended), or the first one of a program that
    /// started by itself and named its SPMD function.
    pub fn begin_section(
        p: u32,
        entry: &str,
        launch: &LaunchConfig,
        cfg: Config,
    ) -> Result<Runtime, BspError> {
        Runtime::start(p, launch.is_spawned(), cfg, |n| {
            spawn_job(n, launch, Some(entry.to_string()))
        })
    }

    fn start(
        p: u32,
        spawned: bool,
        cfg: Config,
        spawn: impl FnOnce(u32) -> Result<Control, LaunchError>,
    ) -> Result<Runtime, BspError> {
        if p == 0 && !spawned {
            return Err(BspError::Misuse(
                "bsp_begin: the number of processes must be at least 1".into(),
            ));
        }
        let mut ctl = spawn(p.max(1))?;
        let asked = ctl.allgather(&p.to_le_bytes())?;
        let p0 = asked
            .first()
            .and_then(|b| <[u8; 4]>::try_from(b.as_slice()).ok())
            .map(u32::from_le_bytes)
            .filter(|&n| n > 0)
            .ok_or_else(|| BspError::Protocol("pid 0 sent no process count".into()))?;
        let p = p0.min(ctl.nprocs());
        // Any stack: a protocol over a link, or kernel TCP (`BULKWIRE_PROTOCOL=tcp`).
        let (engine, info) = job::connect_transport(&mut ctl, &cfg.job)?;
        let board = open_board(&mut ctl, &info, p, cfg.board)?;
        // Broadcasts of supersteps go over the job's multicast group when every member
        // takes part in them: not when some ranks wait outside the computation (the group
        // would wait for them), nor on the sync board (one host: no group but by
        // `BULKWIRE_MCAST=on`, and the board carries the barrier). Alike on every process.
        let mcfg = McastConfig::new(1);
        let mcast_max = usize::try_from(mcfg.max_message).unwrap_or(usize::MAX);
        let mcast = if board.is_none() && ctl.nprocs() == p && p >= 3 {
            job::mcast_group(&ctl, &cfg.job, &info, mcfg)?
        } else {
            None
        };
        let state = ctl.state();
        if ctl.rank() >= p {
            // Not in the computation: take part in the final exchange of bsp_end, leave.
            drop(engine);
            let code = match ctl.allgather(&[]) {
                Ok(_) => ctl.finish(0).map_or(1, |()| 0),
                Err(_) => state.failure().map_or(1, |f| f.exit_code()),
            };
            std::process::exit(code);
        }
        let waker = engine.waker();
        // A failure notice wakes a process blocked in the transport at once, and ends one
        // that is computing if it does not stop by itself soon.
        state.on_failure(move |f: &Failure| {
            waker();
            let code = f.exit_code().max(1);
            let _ = std::thread::Builder::new()
                .name("bulkwire-watchdog".into())
                .spawn(move || {
                    std::thread::sleep(WATCHDOG);
                    if IN_JOB.load(Ordering::SeqCst) > 0 {
                        // SAFETY: _exit ends the process without running anything else.
                        unsafe { libc::_exit(code) };
                    }
                });
        });
        IN_JOB.fetch_add(1, Ordering::SeqCst);
        // Our data to a process of this host goes over shared memory unless the links
        // are UDP or TCP for all: then large puts and get values may be lent to it.
        let lend_to: Vec<bool> = (0..p as usize)
            .map(|d| d != ctl.rank() as usize && info.local[d] && info.links.starts_with("shm"))
            .collect();
        let mut rt = Runtime::build(engine, p, cfg, board);
        if let Some(sh) = rt.shared.get_mut() {
            sh.with(|n| {
                n.lend_to = lend_to;
                n.mcast = mcast;
                n.mcast_max = mcast_max;
            });
        }
        if let Some(prof) = &rt.profile {
            lock(prof).create().map_err(BspError::Misuse)?;
        }
        rt.links = info.links;
        rt.ctl = Mutex::new(Some(ctl));
        rt.job = Some(state);
        Ok(rt)
    }

    /// A process over a transport built by the caller (threads of one program, tests,
    /// other launchers): no launcher, so `end` cannot wait for the others and `abort`
    /// only ends this process.
    pub fn over(t: Box<dyn Transport>, p: u32, cfg: Config) -> Runtime {
        Runtime::build(t, p, cfg, None)
    }

    /// [`Runtime::over`], synchronising through `board` (made by the caller for the same
    /// `p` processes, e.g. threads of one test with a thread rendezvous).
    pub fn over_on_board(t: Box<dyn Transport>, p: u32, cfg: Config, board: Board) -> Runtime {
        Runtime::build(t, p, cfg, Some(board))
    }

    fn build(t: Box<dyn Transport>, p: u32, cfg: Config, board: Option<Board>) -> Runtime {
        let waker = t.waker();
        let protocol = t.protocol_name();
        let (mut core, net) = Core::new(t, p, cfg.clone());
        if let Some(b) = board {
            core.set_board(b);
        }
        let pid = core.pid();
        let start = Instant::now();
        let profile = cfg
            .profile
            .as_ref()
            .map(|base| Mutex::new(Profiler::new(base, &core, &net, start)));
        Runtime {
            core: UserSide::new(core),
            shared: RefCell::new(Some(Shared::new(net, waker, cfg.progress))),
            ctl: Mutex::new(None),
            ended: AtomicBool::new(false),
            job: None,
            pid,
            p,
            start,
            cfg,
            protocol,
            profile,
            links: "",
        }
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    pub fn nprocs(&self) -> u32 {
        self.p
    }

    /// Seconds since `bsp_begin`.
    pub fn time(&self) -> f64 {
        self.start.elapsed().as_secs_f64()
    }

    /// Runs `f` on the process's user side (registrations, outgoing data, queue).
    #[inline]
    pub fn with<R>(&self, f: impl FnOnce(&mut Core) -> R) -> R {
        f(&mut self.core.lock())
    }

    /// Runs `f` on the transport, as a user call (the progress thread steps aside);
    /// `None` after `bsp_end`.
    pub fn with_transport<R>(&self, f: impl FnOnce(&mut dyn Transport) -> R) -> Option<R> {
        let g = self.shared.borrow();
        g.as_ref().map(|sh| sh.with(|n| f(n.transport_mut())))
    }

    /// The counters of the job's multicast group (the protocol's, and the datagrams it
    /// dropped), where the computation broadcasts over one; `None` otherwise or after
    /// `bsp_end`.
    pub fn mcast_stats(
        &self,
    ) -> Option<(
        bulkwire_protocol::mcast::McastStats,
        bulkwire_protocol::wire::DropCounts,
    )> {
        let g = self.shared.borrow();
        g.as_ref()?
            .with(|n| n.mcast.as_ref().map(|m| (m.stats(), m.drops())))
    }

    /// `bsp_direct_get` (MulticoreBSP for C): `n` bytes at `offset` of `pid`'s area
    /// registered as `src`, as they are now, copied to `dst` before returning.
    ///
    /// # Safety
    /// `dst` must be writable for `n` bytes.
    pub unsafe fn direct_get(
        &self,
        call: &str,
        pid: u32,
        src: usize,
        offset: usize,
        dst: *mut u8,
        n: usize,
    ) -> Result<(), BspError> {
        if n == 0 {
            return Ok(());
        }
        let g = self.core.lock().direct_target(call, pid, src, offset, n)?;
        if pid == self.pid {
            // SAFETY: the source lies in this process's registered area (checked); the
            // areas may overlap, hence `copy`.
            unsafe { std::ptr::copy(g.addr as usize as *const u8, dst, n) };
            return Ok(());
        }
        let guard = self.shared.borrow();
        let Some(sh) = guard.as_ref() else {
            return Err(BspError::Misuse(format!("{call}: called after bsp_end")));
        };
        // SAFETY: the caller hands over `dst` for `n` bytes.
        sh.with(|net| unsafe { net.direct_get(call, g, dst) })
            .map_err(|e| self.explain(e))
    }

    /// Whether `bsp_end` has begun.
    #[inline]
    pub fn ended(&self) -> bool {
        self.ended.load(Ordering::Relaxed)
    }

    fn sync_ending(&self, ending: bool) -> Result<(), BspError> {
        let mut core = self.core.lock();
        let g = self.shared.borrow();
        let Some(sh) = g.as_ref() else {
            return Err(BspError::Misuse("bsp_sync: called after bsp_end".into()));
        };
        let Some(prof) = &self.profile else {
            return sh.with(|n| core.sync(n, ending));
        };
        let called = Instant::now();
        sh.with(|n| {
            core.sync(n, ending)?;
            lock(prof).record(called, &core, n, ending);
            Ok(())
        })
    }

    /// `bsp_sync`.
    pub fn sync(&self) -> Result<(), BspError> {
        self.sync_ending(false).map_err(|e| self.explain(e))
    }

    /// `bsp_end`, first half: the last superstep ends (its communication is delivered)
    /// and every process checks that all the others are ending too. A misuse found here
    /// leaves the runtime intact, for [`Runtime::fail`].
    pub fn end_sync(&self) -> Result<(), BspError> {
        self.ended.store(true, Ordering::SeqCst);
        self.sync_ending(true).map_err(|e| self.explain(e))
    }

    /// `bsp_end`, second half (after [`Runtime::end_sync`]): waits until every process
    /// has passed the last barrier, writes this process's profile (`Config::profile`),
    /// prints the statistics (pid 0, `BULKWIRE_STATS=1`) and leaves the job. The caller
    /// decides what happens next (the C ABI exits all processes but pid 0).
    pub fn finish(&self) -> Result<(), BspError> {
        self.ended.store(true, Ordering::SeqCst);
        let Some(shared) = self.shared.borrow_mut().take() else {
            return Err(BspError::Misuse("bsp_end: called twice".into()));
        };
        let blob = if self.cfg.stats {
            let core = self.core.lock();
            shared.with(|n| stats::Snapshot::of(&core, n).encode())
        } else {
            Vec::new()
        };
        self.core.lock().release();
        if let Some(prof) = &self.profile
            && let Err(e) = lock(prof).write()
        {
            // The computation's results stand; only its profile is missing.
            say(&format!("bsp_end: pid {}: {e}", self.pid));
        }
        let ctl = lock(&self.ctl).take();
        match ctl {
            Some(mut ctl) => {
                // Once this exchange completes everyone has passed the last barrier, so
                // nobody needs our transport any more.
                let all = ctl
                    .allgather(&blob)
                    .map_err(|e| explain_with(&self.job, e.into()))?;
                drop(shared);
                left_section();
                if self.pid == 0 && self.cfg.stats {
                    let snaps: Vec<stats::Snapshot> = all
                        .iter()
                        .take(self.p as usize)
                        .filter_map(|b| stats::Snapshot::decode(b))
                        .collect();
                    let table = stats::table(self.protocol, self.links, &snaps);
                    let _ = std::io::stderr().lock().write_all(table.as_bytes());
                }
                ctl.finish(0).map_err(|e| explain_with(&self.job, e.into()))
            }
            None => {
                // Without a launcher, wait (briefly) for the transport to deliver the
                // last messages before it goes away.
                shared
                    .with(|n| n.flush(Duration::from_secs(1)))
                    .map_err(|e| explain_with(&self.job, e))
            }
        }
    }

    /// Reports an error of [`Runtime::finish`] (the job failed, or the launcher is gone)
    /// and exits with the job's status.
    pub fn finish_failed(e: BspError) -> ! {
        leaving();
        match e {
            BspError::JobFailed { exit_code, .. } => std::process::exit(exit_code.max(1)),
            e => {
                say(&format!("bsp_end: {e}"));
                std::process::exit(1)
            }
        }
    }

    /// Makes a failure of the job (another process died, aborted...) say so with the
    /// launcher's words and exit status.
    fn explain(&self, e: BspError) -> BspError {
        explain_with(&self.job, e)
    }

    /// `bsp_abort`: stops every process; the launcher prints `msg` once. Exits with
    /// status 1.
    pub fn abort(&self, msg: &str) -> ! {
        // try_lock: a thread stuck in bsp_end's final exchange must not stop an abort.
        let ctl = self.ctl.try_lock().ok();
        abort_job(ctl.as_ref().and_then(|g| g.as_ref()), self.pid, msg)
    }

    /// Ends this process after `e` met `call`: a misuse or another error aborts the job
    /// with a message naming the call; a failure elsewhere (already reported by the
    /// launcher) exits quietly with the job's status.
    pub fn fail(&self, call: &str, e: BspError) -> ! {
        match self.explain(e) {
            BspError::JobFailed { message, exit_code } => {
                leaving();
                // The launcher has printed the cause, unless it is the one that is gone:
                // then every survivor learns it at once, and one of them says it, so the
                // job prints it once (rank 0, or the rank after the one that ran the
                // rendezvous).
                let failure = self.job.as_ref().and_then(|j| j.failure());
                let sayer = match failure {
                    Some(Failure::ServerGone { rank, .. }) => Some((rank + 1) % self.p.max(1)),
                    Some(Failure::LauncherLost { .. }) => Some(0),
                    Some(_) => None,
                    None => Some(self.pid),
                };
                if sayer == Some(self.pid) {
                    say(&format!("{call}: {message}"));
                }
                std::process::exit(exit_code.max(1))
            }
            BspError::Misuse(m) => self.abort(&m),
            e => self.abort(&format!("{call}: {e}")),
        }
    }

    /// The protocol carrying this process's packets.
    pub fn protocol(&self) -> &'static str {
        self.protocol
    }
}

fn explain_with(job: &Option<Arc<JobState>>, e: BspError) -> BspError {
    let failure = job.as_ref().and_then(|j| j.failure());
    match (e, failure) {
        (BspError::JobFailed { .. }, Some(f))
        | (BspError::Launch(LaunchError::JobFailed(_)), Some(f))
        | (BspError::Launch(LaunchError::LauncherLost(_)), Some(f)) => BspError::JobFailed {
            message: f.to_string(),
            exit_code: f.exit_code(),
        },
        (BspError::Transport(_), Some(f)) => BspError::JobFailed {
            message: f.to_string(),
            exit_code: f.exit_code(),
        },
        (e, _) => e,
    }
}

/// Poison-tolerant lock: a panic elsewhere must not turn every later call into one.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Writes `line` and a newline to stderr in one write(2): stderr is unbuffered, and
/// `writeln!` writes each piece of its format separately, so the messages of processes
/// that share a terminal or pipe would interleave mid-line.
pub fn say(line: &str) {
    let mut buf = String::with_capacity(line.len() + 1);
    buf.push_str(line);
    buf.push('\n');
    let _ = std::io::stderr().lock().write_all(buf.as_bytes());
}

/// Aborts the job with `msg` (through the launcher when there is one) and exits 1.
pub fn abort_job(ctl: Option<&Control>, pid: u32, msg: &str) -> ! {
    leaving();
    let msg = msg.trim_end_matches('\n');
    match ctl {
        Some(c) => c.abort(msg),
        None => {
            say(&format!("pid {pid} aborted: {msg}"));
            std::process::exit(1)
        }
    }
}
