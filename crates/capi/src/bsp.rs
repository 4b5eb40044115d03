//! BSPlib's C functions (`include/bsp.h`, the `int` dialect of the Oxford BSP toolset and
//! BSPonMPI) over [`bulkwire_bsp::Runtime`]. One runtime per process, between
//! `bsp_begin` and `bsp_end`. Every argument is checked before it is used: a misuse
//! aborts the job with a message naming the call, never corrupts memory that the
//! program did not hand over. (`bsp_abort` and `bsp_vabort` are in `csrc/bsp_abort.c`:
//! they are variadic.)

use std::ffi::{CStr, c_char, c_int, c_void};
use std::io::Write;
use std::sync::Mutex;
use std::sync::atomic::{AtomicPtr, Ordering};

use bulkwire_bsp::bench::{BenchConfig, measure};
use bulkwire_bsp::{BspError, Runtime};

/// The process's runtime, from `bsp_begin` on. It is leaked, never freed: `bsp_end`
/// empties it and marks it ended, so a call from another thread at any moment finds
/// either a live runtime or an ended one, never freed memory, and the hot path is one
/// atomic load.
static RT: AtomicPtr<Runtime> = AtomicPtr::new(std::ptr::null_mut());

/// Serialises `bsp_begin` (two threads beginning at once).
static BEGIN: Mutex<()> = Mutex::new(());

/// The runtime if the computation is running.
#[inline]
fn current() -> Option<&'static Runtime> {
    // SAFETY: a non-null pointer came from Box::into_raw and is never freed.
    let rt = unsafe { RT.load(Ordering::Acquire).as_ref()? };
    (!rt.ended()).then_some(rt)
}

/// Ends the process for a call made outside `bsp_begin` ... `bsp_end`.
#[cold]
fn outside(call: &str) -> ! {
    let _ = writeln!(
        std::io::stderr(),
        "{call}: called outside bsp_begin ... bsp_end"
    );
    std::process::exit(1)
}

/// Runs `f` on the runtime; an error ends the job (see [`Runtime::fail`]).
#[inline]
fn with<R>(call: &str, f: impl FnOnce(&Runtime) -> Result<R, BspError>) -> R {
    let Some(rt) = current() else { outside(call) };
    match f(rt) {
        Ok(r) => r,
        Err(e) => rt.fail(call, e),
    }
}

fn misuse<T>(msg: String) -> Result<T, BspError> {
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

fn fit_int(call: &str, what: &str, v: u64) -> Result<c_int, BspError> {
    c_int::try_from(v).or_else(|_| misuse(format!("{call}: {what} ({v}) does not fit an int")))
}

fn out<T>(call: &str, what: &str, p: *mut T) -> Result<*mut T, BspError> {
    if p.is_null() {
        return misuse(format!("{call}: {what} is NULL"));
    }
    Ok(p)
}

#[unsafe(no_mangle)]
pub extern "C" fn bsp_begin(maxprocs: c_int) {
    let fatal = |msg: String| -> ! {
        let _ = writeln!(std::io::stderr(), "bsp_begin: {msg}");
        std::process::exit(1)
    };
    let settings = crate::settings::or_exit("bsp_begin");
    // Processes a job spawned may pass anything: only pid 0's count is used.
    if maxprocs < 1 && !settings.launch.is_spawned() {
        fatal(format!(
            "the number of processes must be at least 1, got {maxprocs}"
        ));
    }
    let _g = BEGIN.lock().unwrap_or_else(|e| e.into_inner());
    if !RT.load(Ordering::Acquire).is_null() {
        if current().is_some() {
            with("bsp_begin", |_| {
                misuse::<()>("bsp_begin: called twice".into())
            });
        }
        fatal("called again after bsp_end".into());
    }
    match Runtime::begin(
        maxprocs.max(0) as u32,
        &settings.launch,
        settings.bsp.clone(),
    ) {
        Ok(rt) => RT.store(Box::into_raw(Box::new(rt)), Ordering::Release),
        // Another process failed while this one joined: the launcher has said why.
        Err(BspError::JobFailed { exit_code, .. }) => std::process::exit(exit_code.max(1)),
        Err(bulkwire_bsp::BspError::Launch(bulkwire_launch::LaunchError::JobFailed(f))) => {
            std::process::exit(f.exit_code().max(1))
        }
        Err(e) => fatal(e.to_string()),
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn bsp_end() {
    let Some(rt) = current() else {
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
}

/// # Safety
/// `spmd_part` must be a function the program may call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn bsp_init(
    spmd_part: Option<extern "C" fn()>,
    _argc: c_int,
    _argv: *mut *mut c_char,
) {
    // The spawned processes of a job (not pid 0) run the SPMD part at once and leave;
    // pid 0 goes on with main and calls it after its sequential start.
    if crate::settings::or_exit("bsp_init").launch.is_spawned() {
        match spmd_part {
            Some(f) => f(),
            None => {
                let _ = writeln!(std::io::stderr(), "bsp_init: the SPMD function is NULL");
                std::process::exit(1)
            }
        }
        std::process::exit(0);
    }
}

/// Called by `bsp_abort`/`bsp_vabort` (C) with the formatted message.
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
    match current() {
        Some(rt) => rt.abort(&text),
        None => bulkwire_bsp::abort_job(None, 0, &text),
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn bsp_nprocs() -> c_int {
    match current() {
        Some(rt) => rt.nprocs() as c_int,
        None => crate::settings::or_exit("bsp_nprocs")
            .launch
            .available_processors()
            .min(c_int::MAX as u32) as c_int,
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn bsp_pid() -> c_int {
    current().map_or(0, |rt| rt.pid() as c_int)
}

#[unsafe(no_mangle)]
pub extern "C" fn bsp_time() -> f64 {
    current().map_or(0.0, |rt| rt.time())
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

fn put(
    call: &str,
    hp: bool,
    p: c_int,
    src: *const c_void,
    dst: *mut c_void,
    offset: c_int,
    nbytes: c_int,
) {
    with(call, |rt| {
        let p = pid(call, p)?;
        let off = size(call, "offset", offset)?;
        let n = size(call, "nbytes", nbytes)?;
        // SAFETY: bsp_put's caller hands over n readable bytes at src (for hpput, until
        // the sync); NULL is refused unless n is 0.
        let s = unsafe { bytes(call, "the source", src, n)? };
        if hp {
            // SAFETY: as above; hpput's source stays readable until the sync.
            unsafe { rt.with(|c| c.hpput(call, p, s.as_ptr() as usize, dst as usize, off, n)) }
        } else {
            rt.with(|c| c.put(call, p, s, dst as usize, off))
        }
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
    put("bsp_put", false, pid, src, dst, offset, nbytes)
}

#[unsafe(no_mangle)]
pub extern "C" fn bsp_hpput(
    pid: c_int,
    src: *const c_void,
    dst: *mut c_void,
    offset: c_int,
    nbytes: c_int,
) {
    put("bsp_hpput", true, pid, src, dst, offset, nbytes)
}

fn get(call: &str, p: c_int, src: *const c_void, offset: c_int, dst: *mut c_void, nbytes: c_int) {
    with(call, |rt| {
        let p = pid(call, p)?;
        let off = size(call, "offset", offset)?;
        let n = size(call, "nbytes", nbytes)?;
        if n > 0 && dst.is_null() {
            return misuse(format!(
                "{call}: the destination is NULL but {n} bytes are to be written to it"
            ));
        }
        rt.with(|c| c.get(call, p, src as usize, off, dst as usize, n))
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
    get("bsp_get", pid, src, offset, dst, nbytes)
}

#[unsafe(no_mangle)]
pub extern "C" fn bsp_hpget(
    pid: c_int,
    src: *const c_void,
    offset: c_int,
    dst: *mut c_void,
    nbytes: c_int,
) {
    get("bsp_hpget", pid, src, offset, dst, nbytes)
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

fn send(call: &str, hp: bool, p: c_int, tag: *const c_void, payload: *const c_void, nbytes: c_int) {
    with(call, |rt| {
        let p = pid(call, p)?;
        let n = size(call, "payload_nbytes", nbytes)?;
        rt.with(|c| {
            // SAFETY: the caller hands over tagsize readable bytes at tag and n at
            // payload (for hpsend, until the sync); NULL is refused unless empty.
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
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn bsp_send(
    pid: c_int,
    tag: *const c_void,
    payload: *const c_void,
    payload_nbytes: c_int,
) {
    send("bsp_send", false, pid, tag, payload, payload_nbytes)
}

#[unsafe(no_mangle)]
pub extern "C" fn bsp_hpsend(
    pid: c_int,
    tag: *const c_void,
    payload: *const c_void,
    payload_nbytes: c_int,
) {
    send("bsp_hpsend", true, pid, tag, payload, payload_nbytes)
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

/// # Safety
/// `status` must point to an `int`, `tag` to the tag size of writable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn bsp_get_tag(status: *mut c_int, tag: *mut c_void) {
    const CALL: &str = "bsp_get_tag";
    with(CALL, |rt| {
        let st = out(CALL, "the status pointer", status)?;
        rt.with(|c| {
            let v = match c.first_message() {
                None => -1,
                Some((t, p)) => {
                    let len = fit_int(CALL, "the payload size", p.len() as u64)?;
                    if !t.is_empty() {
                        let dst = out(CALL, "the tag buffer", tag)?;
                        // SAFETY: the caller hands over a buffer of the tag size (that of
                        // the superstep the message was sent in, which it set).
                        unsafe { std::ptr::copy_nonoverlapping(t.as_ptr(), dst.cast(), t.len()) };
                    }
                    len
                }
            };
            // SAFETY: checked non-NULL.
            unsafe { *st = v };
            Ok(())
        })
    })
}

/// # Safety
/// `payload` must be writable for `reception_nbytes` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn bsp_move(payload: *mut c_void, reception_nbytes: c_int) {
    const CALL: &str = "bsp_move";
    with(CALL, |rt| {
        let room = size(CALL, "reception_nbytes", reception_nbytes)?;
        rt.with(|c| {
            let Some((_, p)) = c.first_message() else {
                return misuse(format!("{CALL}: the message queue is empty"));
            };
            let k = p.len().min(room);
            if k > 0 {
                let dst = out(CALL, "the payload buffer", payload)?;
                // SAFETY: the caller hands over reception_nbytes >= k writable bytes.
                unsafe { std::ptr::copy_nonoverlapping(p.as_ptr(), dst.cast(), k) };
            }
            c.pop_message();
            Ok(())
        })
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
    with(CALL, |rt| {
        let tp = out(CALL, "the tag pointer", tag_ptr)?;
        let pp = out(CALL, "the payload pointer", payload_ptr)?;
        rt.with(|c| {
            let Some((t, p)) = c.first_message() else {
                return Ok(-1);
            };
            let len = fit_int(CALL, "the payload size", p.len() as u64)?;
            // SAFETY: checked non-NULL. The bytes stay valid until the next sync, which
            // is all bsp_hpmove promises.
            unsafe {
                *tp = t.as_ptr() as *mut c_void;
                *pp = p.as_ptr() as *mut c_void;
            }
            c.pop_message();
            Ok(len)
        })
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
