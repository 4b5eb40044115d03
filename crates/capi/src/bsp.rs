//! BSPlib's C functions over [`bulkwire_bsp::Runtime`]: the `int` dialect of the Oxford
//! BSP toolset and BSPonMPI (`bsp_*`, this module) and MulticoreBSP for C's (`mcbsp_*`,
//! [`crate::mcbsp`]), both on the helpers here. One runtime per process and SPMD section,
//! between `bsp_begin` and `bsp_end`. Every argument is checked before it is used: a
//! misuse aborts the job with a message naming the call, never corrupts memory that the
//! program did not hand over. (`bsp_abort` and its variants are in `csrc/bsp_abort.c`:
//! they are variadic.)

use std::cell::Cell;
use std::ffi::{CStr, c_char, c_int, c_void};
use std::sync::Mutex;
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};

use bulkwire_bsp::bench::{BenchConfig, measure};
use bulkwire_bsp::{BspError, Runtime, say};

use crate::spmd;

/// The process's runtime of the current (or last) SPMD section. It is leaked, never
/// freed: `bsp_end` empties it and marks it ended, so a call at any moment finds either a
/// live runtime or an ended one, never freed memory, and the hot path is two plain loads.
/// A later section's `bsp_begin` installs a new one.
static RT: AtomicPtr<Runtime> = AtomicPtr::new(std::ptr::null_mut());

/// The thread that called `bsp_begin` (its [`thread_token`]): a BSP process is one thread
/// of control, and the runtime's user side is that thread's alone (it takes no lock).
static OWNER: AtomicU64 = AtomicU64::new(0);

/// Serialises `bsp_begin` (two threads beginning at once).
static BEGIN: Mutex<()> = Mutex::new(());

/// The runtimes of the sections this process is pid 0 of a nested section in, innermost
/// last: `bsp_end` of the nested section makes the one it began in current again.
static OUTER: Mutex<Vec<usize>> = Mutex::new(Vec::new());

/// A number of this thread's, never 0 and never another thread's.
#[inline]
fn thread_token() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    thread_local! {
        static TOKEN: Cell<u64> = const { Cell::new(0) };
    }
    TOKEN.with(|t| {
        if t.get() == 0 {
            t.set(NEXT.fetch_add(1, Ordering::Relaxed));
        }
        t.get()
    })
}

/// The runtime if the computation is running, for a call (`call`) from the thread that
/// began it; a call from another thread ends the process, naming the call.
#[inline]
pub(crate) fn current(call: &str) -> Option<&'static Runtime> {
    let ptr = RT.load(Ordering::Acquire);
    if ptr.is_null() {
        return None;
    }
    if OWNER.load(Ordering::Relaxed) != thread_token() {
        other_thread(call);
    }
    // SAFETY: a non-null pointer came from Box::into_raw and is never freed; only the
    // owning thread gets here, so the runtime, which is not `Sync`, is never shared.
    let rt = unsafe { &*ptr };
    (!rt.ended()).then_some(rt)
}

#[cold]
fn other_thread(call: &str) -> ! {
    say(&format!(
        "{call}: called from a thread other than the one that called bsp_begin (a BSP \
         process is one thread of control: make every BSPlib call from that thread)"
    ));
    std::process::exit(1)
}

/// Ends the process for a call made outside `bsp_begin` ... `bsp_end`.
#[cold]
pub(crate) fn outside(call: &str) -> ! {
    say(&format!("{call}: called outside bsp_begin ... bsp_end"));
    std::process::exit(1)
}

/// Runs `f` on the runtime; an error ends the job (see [`Runtime::fail`]).
#[inline]
pub(crate) fn with<R>(call: &str, f: impl FnOnce(&Runtime) -> Result<R, BspError>) -> R {
    let Some(rt) = current(call) else {
        outside(call)
    };
    match f(rt) {
        Ok(r) => r,
        Err(e) => rt.fail(call, e),
    }
}

pub(crate) fn misuse<T>(msg: String) -> Result<T, BspError> {
    Err(BspError::Misuse(msg))
}

/// A non-negative `int` argument as a size.
#[inline]
fn size(call: &str, what: &str, v: c_int) -> Result<usize, BspError> {
    usize::try_from(v).or_else(|_| misuse(format!("{call}: {what} is negative ({v})")))
}

/// A process id argument (the core checks the upper bound).
#[inline]
fn pid(call: &str, v: c_int) -> Result<u32, BspError> {
    u32::try_from(v).or_else(|_| {
        misuse(format!(
            "{call}: pid {v} is not a process of this computation"
        ))
    })
}

/// `n` bytes at `p`, which may be NULL only when `n` is 0.
///
/// # Safety
/// A non-NULL `p` must be readable for `n` bytes for the lifetime the caller uses.
#[inline]
unsafe fn bytes<'a>(
    call: &str,
    what: &str,
    p: *const c_void,
    n: usize,
) -> Result<&'a [u8], BspError> {
    if n == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return misuse(format!(
            "{call}: {what} is NULL but {n} bytes are to be read from it"
        ));
    }
    // SAFETY: the caller of the C function hands over n readable bytes at p.
    Ok(unsafe { std::slice::from_raw_parts(p.cast(), n) })
}

pub(crate) fn fit_int(call: &str, what: &str, v: u64) -> Result<c_int, BspError> {
    c_int::try_from(v).or_else(|_| misuse(format!("{call}: {what} ({v}) does not fit an int")))
}

pub(crate) fn out<T>(call: &str, what: &str, p: *mut T) -> Result<*mut T, BspError> {
    if p.is_null() {
        return misuse(format!("{call}: {what} is NULL"));
    }
    Ok(p)
}

/// `bsp_begin(maxprocs)` in either dialect (`None`: a count that fits no `u32`).
pub(crate) fn begin(call: &str, maxprocs: Option<u32>, shown: &dyn std::fmt::Display) {
    let fatal = |msg: String| -> ! {
        say(&format!("{call}: {msg}"));
        std::process::exit(1)
    };
    spmd::divert(call);
    let settings = crate::settings::or_exit(call);
    // Processes a job spawned may pass anything: only pid 0's count is used.
    let p = match maxprocs {
        Some(p) if p >= 1 => p,
        _ if settings.launch.is_spawned() => 0,
        _ => fatal(format!(
            "the number of processes must be at least 1, got {shown}"
        )),
    };
    let _g = BEGIN.lock().unwrap_or_else(|e| e.into_inner());
    let later = !RT.load(Ordering::Acquire).is_null();
    let nested = later && current(call).is_some();
    if nested && !spmd::named_inside_a_section() {
        with(call, |_| {
            misuse::<()>(format!(
                "{call}: called twice (a nested SPMD section needs its function named \
                 with bsp_init inside the running one: its new processes run it)"
            ))
        });
    }
    let (launch, cfg) = (&settings.launch, settings.bsp.clone());
    let started = if nested {
        // MulticoreBSP's nested section: this process is its pid 0, the others are new
        // processes on this host running the function bsp_init named last; the outer
        // section waits in this process until the nested one's bsp_end.
        let q = match maxprocs {
            Some(q) if q >= 1 => q,
            _ => with(call, |_| {
                misuse(format!(
                    "{call}: the number of processes of a nested section must be at least \
                     1, got {shown}"
                ))
            }),
        };
        let entry = spmd::entry_for_next_section().unwrap_or_else(|why| fatal(why));
        Runtime::begin_section(q, &entry, launch, cfg)
    } else if later {
        // pid 0 after bsp_end: a new section, with new processes.
        let entry = spmd::entry_for_next_section().unwrap_or_else(|why| fatal(why));
        Runtime::begin_section(p, &entry, launch, cfg)
    } else if let Some(entry) =
        spmd::entry().filter(|_| launch.job.is_none() && launch.boot.is_none())
    {
        // Started by itself, with its SPMD function named: the processes it starts run
        // that function at once, not main's code before bsp_init (MulticoreBSP's own
        // examples read their input first). A job that srun, mpirun or mpiexec started
        // (`boot`: it forms through their PMI, PMIx or a derived rendezvous) is joined
        // instead, below: every task runs the function, none starts a job of its own.
        Runtime::begin_section(p, &entry, launch, cfg)
    } else {
        Runtime::begin(p, launch, cfg)
    };
    match started {
        Ok(rt) => {
            if nested {
                let outer = RT.load(Ordering::Acquire);
                OUTER
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(outer as usize);
            }
            OWNER.store(thread_token(), Ordering::Relaxed);
            RT.store(Box::into_raw(Box::new(rt)), Ordering::Release)
        }
        // Another process failed while this one joined: the launcher has said why.
        Err(BspError::JobFailed { exit_code, .. }) => std::process::exit(exit_code.max(1)),
        Err(BspError::Launch(bulkwire_launch::LaunchError::JobFailed(f))) => {
            std::process::exit(f.exit_code().max(1))
        }
        Err(e) => fatal(e.to_string()),
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn bsp_begin(maxprocs: c_int) {
    begin("bsp_begin", u32::try_from(maxprocs).ok(), &maxprocs)
}

#[unsafe(no_mangle)]
pub extern "C" fn bsp_end() {
    let Some(rt) = current("bsp_end") else {
        outside("bsp_end")
    };
    if let Err(e) = rt.end_sync() {
        rt.fail("bsp_end", e);
    }
    let me = rt.pid();
    if let Err(e) = rt.finish() {
        Runtime::finish_failed(e);
    }
    if me != 0 {
        std::process::exit(0);
    }
    // pid 0 of a nested section goes back to the section it began it in.
    let outer = OUTER.lock().unwrap_or_else(|e| e.into_inner()).pop();
    if let Some(outer) = outer {
        RT.store(outer as *mut Runtime, Ordering::Release);
    }
}

/// `bsp_init` in either dialect.
pub(crate) fn init(call: &str, spmd_part: Option<spmd::SpmdFn>) {
    spmd::divert(call);
    let Some(f) = spmd_part else {
        say(&format!("{call}: the SPMD function is NULL"));
        std::process::exit(1)
    };
    // Inside a running section it names the function of a nested section (MulticoreBSP's
    // hierarchical runs), and nothing is run here.
    let inside = current(call).is_some();
    spmd::record(f, inside);
    // The started processes of a job (not pid 0) run the SPMD part at once and leave;
    // pid 0 goes on with main and calls it after its sequential start.
    if !inside && !spmd::entered() && crate::settings::or_exit(call).launch.is_spawned() {
        f();
        std::process::exit(0);
    }
}

/// # Safety
/// `spmd_part` must be a function the program may call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn bsp_init(
    spmd_part: Option<extern "C" fn()>,
    _argc: c_int,
    _argv: *mut *mut c_char,
) {
    init("bsp_init", spmd_part)
}

/// Called by `bsp_abort` and its variants (C) with the formatted message.
///
/// # Safety
/// `msg` must be a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn bulkwire_bsp_abort_message(msg: *const c_char) -> ! {
    let text = if msg.is_null() {
        "bsp_abort".into()
    } else {
        // SAFETY: the C shim passes a NUL-terminated buffer.
        unsafe { CStr::from_ptr(msg) }.to_string_lossy()
    };
    match current("bsp_abort") {
        Some(rt) => rt.abort(&text),
        None => bulkwire_bsp::abort_job(None, 0, &text),
    }
}

/// `bsp_nprocs`: the computation's processes; outside it, how many a computation begun
/// now would have.
pub(crate) fn nprocs(call: &str) -> u32 {
    match current(call) {
        Some(rt) => rt.nprocs(),
        None => {
            spmd::divert(call);
            crate::settings::or_exit(call).launch.available_processors()
        }
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn bsp_nprocs() -> c_int {
    nprocs("bsp_nprocs").min(c_int::MAX as u32) as c_int
}

#[unsafe(no_mangle)]
pub extern "C" fn bsp_pid() -> c_int {
    match current("bsp_pid") {
        Some(rt) => rt.pid() as c_int,
        None => outside("bsp_pid"),
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn bsp_time() -> f64 {
    match current("bsp_time") {
        Some(rt) => rt.time(),
        None => outside("bsp_time"),
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn bsp_sync() {
    with("bsp_sync", |rt| rt.sync())
}

#[unsafe(no_mangle)]
pub extern "C" fn bsp_push_reg(ident: *const c_void, nbytes: c_int) {
    const CALL: &str = "bsp_push_reg";
    with(CALL, |rt| {
        let n = size(CALL, "size", nbytes)?;
        rt.with(|c| c.push_reg(ident as usize, n));
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn bsp_pop_reg(ident: *const c_void) {
    const CALL: &str = "bsp_pop_reg";
    with(CALL, |rt| rt.with(|c| c.pop_reg(CALL, ident as usize)))
}

/// A put of `n` bytes in either dialect (the core ignores 0-byte ones before any check).
#[allow(clippy::too_many_arguments)]
pub(crate) fn put(
    rt: &Runtime,
    call: &str,
    hp: bool,
    p: u32,
    src: *const c_void,
    dst: *mut c_void,
    off: usize,
    n: usize,
) -> Result<(), BspError> {
    // SAFETY: bsp_put's caller hands over n readable bytes at src (for hpput, until the
    // sync); NULL is refused unless n is 0.
    let s = unsafe { bytes(call, "the source", src, n)? };
    if hp {
        // SAFETY: as above; hpput's source stays readable until the sync.
        unsafe { rt.with(|c| c.hpput(call, p, s.as_ptr() as usize, dst as usize, off, n)) }
    } else {
        rt.with(|c| c.put(call, p, s, dst as usize, off))
    }
}

/// The `int` dialect's put: a 0-byte put is a no-op before any check, as in BSPonMPI.
fn put_int(
    call: &str,
    hp: bool,
    p: c_int,
    src: *const c_void,
    dst: *mut c_void,
    offset: c_int,
    nbytes: c_int,
) {
    with(call, |rt| {
        if nbytes == 0 {
            return Ok(());
        }
        let (p, off) = (pid(call, p)?, size(call, "offset", offset)?);
        let n = size(call, "nbytes", nbytes)?;
        put(rt, call, hp, p, src, dst, off, n)
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn bsp_put(
    pid: c_int,
    src: *const c_void,
    dst: *mut c_void,
    offset: c_int,
    nbytes: c_int,
) {
    put_int("bsp_put", false, pid, src, dst, offset, nbytes)
}

#[unsafe(no_mangle)]
pub extern "C" fn bsp_hpput(
    pid: c_int,
    src: *const c_void,
    dst: *mut c_void,
    offset: c_int,
    nbytes: c_int,
) {
    put_int("bsp_hpput", true, pid, src, dst, offset, nbytes)
}

/// A get of `n` bytes in either dialect.
pub(crate) fn get(
    rt: &Runtime,
    call: &str,
    p: u32,
    src: *const c_void,
    off: usize,
    dst: *mut c_void,
    n: usize,
) -> Result<(), BspError> {
    if n > 0 && dst.is_null() {
        return misuse(format!(
            "{call}: the destination is NULL but {n} bytes are to be written to it"
        ));
    }
    rt.with(|c| c.get(call, p, src as usize, off, dst as usize, n))
}

fn get_int(
    call: &str,
    p: c_int,
    src: *const c_void,
    offset: c_int,
    dst: *mut c_void,
    nbytes: c_int,
) {
    with(call, |rt| {
        if nbytes == 0 {
            return Ok(());
        }
        let (p, off) = (pid(call, p)?, size(call, "offset", offset)?);
        let n = size(call, "nbytes", nbytes)?;
        get(rt, call, p, src, off, dst, n)
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn bsp_get(
    pid: c_int,
    src: *const c_void,
    offset: c_int,
    dst: *mut c_void,
    nbytes: c_int,
) {
    get_int("bsp_get", pid, src, offset, dst, nbytes)
}

#[unsafe(no_mangle)]
pub extern "C" fn bsp_hpget(
    pid: c_int,
    src: *const c_void,
    offset: c_int,
    dst: *mut c_void,
    nbytes: c_int,
) {
    get_int("bsp_hpget", pid, src, offset, dst, nbytes)
}

/// # Safety
/// `tag_nbytes` must point to an `int`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn bsp_set_tagsize(tag_nbytes: *mut c_int) {
    const CALL: &str = "bsp_set_tagsize";
    with(CALL, |rt| {
        let p = out(CALL, "the size pointer", tag_nbytes)?;
        // SAFETY: checked non-NULL; the caller hands over an int.
        let n = size(CALL, "the tag size", unsafe { *p })?;
        let prev = rt.with(|c| c.set_tagsize(n));
        // SAFETY: as above.
        unsafe { *p = fit_int(CALL, "the previous tag size", prev as u64)? };
        Ok(())
    })
}

/// A send of `n` payload bytes (and a tag of the tag size) in either dialect.
pub(crate) fn send(
    rt: &Runtime,
    call: &str,
    hp: bool,
    p: u32,
    tag: *const c_void,
    payload: *const c_void,
    n: usize,
) -> Result<(), BspError> {
    rt.with(|c| {
        // SAFETY: the caller hands over tagsize readable bytes at tag and n at payload
        // (for hpsend, until the sync); NULL is refused unless empty.
        let t = unsafe { bytes(call, "the tag", tag, c.tagsize())? };
        // SAFETY: as above.
        let d = unsafe { bytes(call, "the payload", payload, n)? };
        if hp {
            // SAFETY: as above.
            unsafe { c.hpsend(call, p, t, d.as_ptr() as usize, n) }
        } else {
            c.send(call, p, t, d)
        }
    })
}

fn send_int(
    call: &str,
    hp: bool,
    p: c_int,
    tag: *const c_void,
    payload: *const c_void,
    nbytes: c_int,
) {
    with(call, |rt| {
        let p = pid(call, p)?;
        let n = size(call, "payload_nbytes", nbytes)?;
        send(rt, call, hp, p, tag, payload, n)
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn bsp_send(
    pid: c_int,
    tag: *const c_void,
    payload: *const c_void,
    payload_nbytes: c_int,
) {
    send_int("bsp_send", false, pid, tag, payload, payload_nbytes)
}

#[unsafe(no_mangle)]
pub extern "C" fn bsp_hpsend(
    pid: c_int,
    tag: *const c_void,
    payload: *const c_void,
    payload_nbytes: c_int,
) {
    send_int("bsp_hpsend", true, pid, tag, payload, payload_nbytes)
}

/// # Safety
/// Both pointers must point to `int`s.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn bsp_qsize(nmessages: *mut c_int, accum_nbytes: *mut c_int) {
    const CALL: &str = "bsp_qsize";
    with(CALL, |rt| {
        let (n, b) = rt.with(|c| c.qsize());
        let m = out(CALL, "the message count pointer", nmessages)?;
        let a = out(CALL, "the byte count pointer", accum_nbytes)?;
        let (n, b) = (
            fit_int(CALL, "the message count", n as u64)?,
            fit_int(CALL, "the byte count", b)?,
        );
        // SAFETY: checked non-NULL; the caller hands over two ints.
        unsafe {
            *m = n;
            *a = b;
        }
        Ok(())
    })
}

/// `bsp_get_tag` in either dialect: copies the first message's tag to `tag` (which may be
/// NULL when nothing is copied) and returns its payload length; `None` if the queue is
/// empty.
pub(crate) fn get_tag(
    call: &str,
    rt: &Runtime,
    tag: *mut c_void,
) -> Result<Option<usize>, BspError> {
    rt.with(|c| {
        let Some((t, p)) = c.first_message() else {
            return Ok(None);
        };
        if !t.is_empty() {
            let dst = out(call, "the tag buffer", tag)?;
            // SAFETY: the caller hands over a buffer of the tag size (that of the
            // superstep the message was sent in, which it set).
            unsafe { std::ptr::copy_nonoverlapping(t.as_ptr(), dst.cast(), t.len()) };
        }
        Ok(Some(p.len()))
    })
}

/// # Safety
/// `status` must point to an `int`, `tag` to the tag size of writable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn bsp_get_tag(status: *mut c_int, tag: *mut c_void) {
    const CALL: &str = "bsp_get_tag";
    with(CALL, |rt| {
        let st = out(CALL, "the status pointer", status)?;
        let v = match get_tag(CALL, rt, tag)? {
            None => -1,
            Some(len) => fit_int(CALL, "the payload size", len as u64)?,
        };
        // SAFETY: checked non-NULL.
        unsafe { *st = v };
        Ok(())
    })
}

/// `bsp_move` in either dialect: copies at most `room` bytes of the first message's
/// payload and removes it; false if the queue is empty.
pub(crate) fn move_first(
    call: &str,
    rt: &Runtime,
    payload: *mut c_void,
    room: usize,
) -> Result<bool, BspError> {
    rt.with(|c| {
        let Some((_, p)) = c.first_message() else {
            return Ok(false);
        };
        let k = p.len().min(room);
        if k > 0 {
            let dst = out(call, "the payload buffer", payload)?;
            // SAFETY: the caller hands over room >= k writable bytes.
            unsafe { std::ptr::copy_nonoverlapping(p.as_ptr(), dst.cast(), k) };
        }
        c.pop_message();
        Ok(true)
    })
}

/// # Safety
/// `payload` must be writable for `reception_nbytes` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn bsp_move(payload: *mut c_void, reception_nbytes: c_int) {
    const CALL: &str = "bsp_move";
    with(CALL, |rt| {
        let room = size(CALL, "reception_nbytes", reception_nbytes)?;
        if !move_first(CALL, rt, payload, room)? {
            return misuse(format!("{CALL}: the message queue is empty"));
        }
        Ok(())
    })
}

/// `bsp_hpmove` in either dialect: the first message's tag and payload, removed from the
/// queue; `None` if it is empty.
pub(crate) fn hpmove(
    call: &str,
    rt: &Runtime,
    tag_ptr: *mut *mut c_void,
    payload_ptr: *mut *mut c_void,
) -> Result<Option<usize>, BspError> {
    let tp = out(call, "the tag pointer", tag_ptr)?;
    let pp = out(call, "the payload pointer", payload_ptr)?;
    rt.with(|c| {
        let Some((t, p)) = c.first_message() else {
            return Ok(None);
        };
        // SAFETY: checked non-NULL. The bytes stay valid until the next sync, which is
        // all bsp_hpmove promises.
        unsafe {
            *tp = t.as_ptr() as *mut c_void;
            *pp = p.as_ptr() as *mut c_void;
        }
        let len = p.len();
        c.pop_message();
        Ok(Some(len))
    })
}

/// # Safety
/// Both pointers must point to writable `void *`s.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn bsp_hpmove(
    tag_ptr: *mut *mut c_void,
    payload_ptr: *mut *mut c_void,
) -> c_int {
    const CALL: &str = "bsp_hpmove";
    with(CALL, |rt| match hpmove(CALL, rt, tag_ptr, payload_ptr)? {
        None => Ok(-1),
        Some(len) => fit_int(CALL, "the payload size", len as u64),
    })
}

/// # Safety
/// Each pointer must be NULL or point to a writable `double`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn bulkwire_bsp_bench(
    hmax: c_int,
    iters: c_int,
    g_us: *mut f64,
    l_us: *mut f64,
    empty_us: *mut f64,
) {
    const CALL: &str = "bulkwire_bsp_bench";
    with(CALL, |rt| {
        let cfg = BenchConfig {
            hmax: size(CALL, "hmax", hmax)?,
            iters: size(CALL, "iters", iters)?.max(1),
            ..BenchConfig::default()
        };
        let r = measure(rt, &cfg)?;
        for (p, v) in [(g_us, r.g_us), (l_us, r.l_us), (empty_us, r.empty_us)] {
            if !p.is_null() {
                // SAFETY: non-NULL pointers are writable doubles.
                unsafe { *p = v };
            }
        }
        Ok(())
    })
}
