//! The MPI environment: init and finalize (joining the job as `bulkwire.h` programs do),
//! abort, clocks, versions, thread levels, error handlers and error strings, attribute
//! keys, info objects, and the Fortran handle conversions.
//!
//! `MPI_Init` is the layer's edge: it reads the settings from the environment once
//! (`bulkwire_config::Settings::from_env`), so that `bsprun -n P`, Slurm's `srun`, Open
//! MPI's `mpirun` and MPICH's `mpiexec` start MPI programs as they start `bulkwire.h`
//! programs.
//!
//! Threads: every table is behind its own lock, held only for a lookup or an update,
//! never while a call waits (waits run in `bulkwire_p2p`, whose state admits one thread
//! at a time per round). `MPI_THREAD_MULTIPLE` is provided.

use std::collections::BTreeMap;
use std::ffi::{CStr, c_char, c_double, c_void};
use std::fmt::Display;
use std::os::raw::c_int;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicPtr, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

use bulkwire_config::Settings;
use bulkwire_p2p::Comm;

use crate::comm;
use crate::error::*;
use crate::group::{put, tri};
use crate::handle::{Kind, Raw, Table};
use crate::predef::*;

static WORLD: AtomicPtr<Comm> = AtomicPtr::new(std::ptr::null_mut());
static SETTINGS: OnceLock<Settings> = OnceLock::new();
static INITIALIZED: AtomicBool = AtomicBool::new(false);
static FINALIZED: AtomicBool = AtomicBool::new(false);
/// Serialises init and finalize.
static LIFECYCLE: Mutex<()> = Mutex::new(());
static THREAD_LEVEL: AtomicI32 = AtomicI32::new(MPI_THREAD_SINGLE);
static MAIN_THREAD: OnceLock<std::thread::ThreadId> = OnceLock::new();
static EPOCH: OnceLock<Instant> = OnceLock::new();

/// The job's world communicator (p2p), once `MPI_Init` has joined the job.
pub fn p2p() -> Result<&'static Comm, c_int> {
    let p = WORLD.load(Ordering::Acquire);
    if p.is_null() {
        return Err(MPI_ERR_OTHER);
    }
    // SAFETY: set from Box::into_raw by init and only reclaimed by MPI_Finalize, after
    // which MPI calls are erroneous (as in the standard).
    Ok(unsafe { &*p })
}

/// The collectives' settings, read by `MPI_Init` (the defaults before it).
pub fn coll_config() -> &'static bulkwire_collectives::Config {
    static DEFAULT: OnceLock<bulkwire_collectives::Config> = OnceLock::new();
    match SETTINGS.get() {
        Some(s) => &s.coll,
        None => DEFAULT.get_or_init(Default::default),
    }
}

/// This process's rank in `MPI_COMM_WORLD` (0 before init).
pub fn world_rank() -> u32 {
    p2p().map_or(0, |c| c.rank())
}

/// Reports an error of a call on `comm` through its error handler. `what` starts with
/// the call's name and a colon (`"MPI_Send: destination 9 is outside the communicator
/// (size 4)"`). With `MPI_ERRORS_ARE_FATAL` (the default) or `MPI_ERRORS_ABORT` this
/// prints one line naming the call, this process's rank and the problem, and aborts the
/// job; with `MPI_ERRORS_RETURN` it returns `code`; a user's handler is called first.
pub fn fail(comm: Raw, code: c_int, what: impl Display) -> c_int {
    fail_on(comm, comm, code, what)
}

/// [`fail`] for an error of `object` (a window) whose handler is `comm`'s: a user's
/// handler is given `object`'s handle, as MPI asks of `MPI_Win_call_errhandler`.
pub fn fail_on(comm: Raw, object: Raw, code: c_int, what: impl Display) -> c_int {
    let eh = comm::errhandler_of(comm);
    match eh {
        MPI_ERRORS_RETURN => code,
        MPI_ERRORS_ARE_FATAL | MPI_ERRORS_ABORT => fatal(code, &what.to_string()),
        h => {
            let f = ERRHANDLERS
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(h)
                .copied();
            match f {
                Some(f) => {
                    let (mut c, mut k) = (object, code);
                    // SAFETY: a function the program registered for this purpose.
                    unsafe { f(&mut c, &mut k) };
                    code
                }
                None => fatal(code, &what.to_string()),
            }
        }
    }
}

fn fatal(code: c_int, what: &str) -> ! {
    let rank = world_rank();
    let line = match what.split_once(": ") {
        Some((call, rest)) => format!("{call}: rank {rank}: {rest}"),
        None => format!("rank {rank}: {what}"),
    };
    let line = format!("{line} ({})", class_text(code));
    match p2p() {
        // The job has failed already (another process aborted first): that process's
        // report is the one to read; this one's is a consequence.
        Ok(c) if c.job_failure().is_some() => {
            eprintln!("{line}");
            std::process::exit(1)
        }
        Ok(c) => c.abort(&line),
        Err(_) => {
            eprintln!("{line}");
            std::process::exit(1)
        }
    }
}

// ---- init and finalize ----------------------------------------------------------------

fn init(required: c_int) -> c_int {
    let _g = LIFECYCLE.lock().unwrap_or_else(|e| e.into_inner());
    if INITIALIZED.load(Ordering::Acquire) {
        return fail(
            MPI_COMM_WORLD,
            MPI_ERR_OTHER,
            "MPI_Init: MPI is already initialized",
        );
    }
    let _ = EPOCH.get_or_init(Instant::now);
    let s = match Settings::from_env() {
        Ok(s) => s,
        Err(e) => fatal(MPI_ERR_OTHER, &format!("MPI_Init: {e}")),
    };
    let s = SETTINGS.get_or_init(|| s);
    let c = match Comm::init(&s.launch, s.p2p.clone()) {
        Ok(c) => c,
        Err(e) => fatal(
            MPI_ERR_OTHER,
            &format!("MPI_Init: cannot join the job: {e}"),
        ),
    };
    if c.rank() == 0 {
        for w in &s.warnings {
            eprintln!("bulkwire: warning: {w}");
        }
    }
    comm::init_world(c.size(), c.rank());
    WORLD.store(Box::into_raw(Box::new(c)), Ordering::Release);
    let _ = MAIN_THREAD.set(std::thread::current().id());
    THREAD_LEVEL.store(
        required.clamp(MPI_THREAD_SINGLE, MPI_THREAD_MULTIPLE),
        Ordering::Release,
    );
    INITIALIZED.store(true, Ordering::Release);
    MPI_SUCCESS
}

/// # Safety
/// `argc`/`argv` are the program's or null (unused).
#[unsafe(export_name = "PMPI_Init")]
pub unsafe extern "C" fn MPI_Init(_argc: *mut c_int, _argv: *mut *mut *mut c_char) -> c_int {
    init(MPI_THREAD_SINGLE)
}

/// Every level is provided, up to `MPI_THREAD_MULTIPLE` (see the module's doc).
///
/// # Safety
/// `provided` valid for a write.
#[unsafe(export_name = "PMPI_Init_thread")]
pub unsafe extern "C" fn MPI_Init_thread(
    _argc: *mut c_int,
    _argv: *mut *mut *mut c_char,
    required: c_int,
    provided: *mut c_int,
) -> c_int {
    let r = init(required);
    if r == MPI_SUCCESS {
        // SAFETY: the caller's contract.
        unsafe { put(provided, THREAD_LEVEL.load(Ordering::Acquire)) };
    }
    r
}

/// # Safety
/// `flag` valid for a write.
#[unsafe(export_name = "PMPI_Initialized")]
pub unsafe extern "C" fn MPI_Initialized(flag: *mut c_int) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { put(flag, c_int::from(INITIALIZED.load(Ordering::Acquire))) };
    MPI_SUCCESS
}

/// # Safety
/// `flag` valid for a write.
#[unsafe(export_name = "PMPI_Finalized")]
pub unsafe extern "C" fn MPI_Finalized(flag: *mut c_int) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { put(flag, c_int::from(FINALIZED.load(Ordering::Acquire))) };
    MPI_SUCCESS
}

#[unsafe(export_name = "PMPI_Finalize")]
pub extern "C" fn MPI_Finalize() -> c_int {
    let _g = LIFECYCLE.lock().unwrap_or_else(|e| e.into_inner());
    if !INITIALIZED.load(Ordering::Acquire) || FINALIZED.load(Ordering::Acquire) {
        return fail(
            MPI_COMM_WORLD,
            MPI_ERR_OTHER,
            "MPI_Finalize: MPI is not initialized",
        );
    }
    // Buffered sends still in flight are delivered first (MPI-3.1 §8.7).
    crate::pt2pt::drain_buffered();
    // Attributes on MPI_COMM_SELF are deleted first, as MPI-3.1 §8.7.1 asks (libraries
    // hook their cleanup there).
    comm::delete_all_attrs(MPI_COMM_SELF);
    let p = WORLD.swap(std::ptr::null_mut(), Ordering::AcqRel);
    FINALIZED.store(true, Ordering::Release);
    // SAFETY: p came from Box::into_raw in init and was just taken out of WORLD.
    let c = unsafe { Box::from_raw(p) };
    match c.finalize() {
        Ok(()) => MPI_SUCCESS,
        Err(e) => {
            eprintln!("MPI_Finalize: {e}");
            MPI_ERR_OTHER
        }
    }
}

/// Aborts the whole job. The launcher reports the failure; the exit status is 1.
#[unsafe(export_name = "PMPI_Abort")]
pub extern "C" fn MPI_Abort(_comm: Raw, errorcode: c_int) -> c_int {
    let msg = format!(
        "MPI_Abort: rank {} aborts the job with code {errorcode}",
        world_rank()
    );
    match p2p() {
        Ok(c) => c.abort(&msg),
        Err(_) => {
            eprintln!("{msg}");
            std::process::exit(if errorcode == 0 { 1 } else { errorcode & 0xff })
        }
    }
}

#[unsafe(export_name = "PMPI_Wtime")]
pub extern "C" fn MPI_Wtime() -> c_double {
    EPOCH.get_or_init(Instant::now).elapsed().as_secs_f64()
}

/// `Instant` counts nanoseconds.
#[unsafe(export_name = "PMPI_Wtick")]
pub extern "C" fn MPI_Wtick() -> c_double {
    1e-9
}

/// Copies `s` into a C buffer of `cap` bytes (NUL-terminated, cut if longer); its length.
///
/// # Safety
/// `buf` valid for `cap` bytes of writes.
pub(crate) unsafe fn put_str(buf: *mut c_char, cap: usize, s: &str) -> c_int {
    if buf.is_null() || cap == 0 {
        return 0;
    }
    let n = s.len().min(cap - 1);
    // SAFETY: n + 1 <= cap bytes, by the caller's contract.
    unsafe {
        std::ptr::copy_nonoverlapping(s.as_ptr(), buf.cast::<u8>(), n);
        buf.add(n).write(0);
    }
    n as c_int
}

/// # Safety
/// `name` holds `MPI_MAX_PROCESSOR_NAME` bytes; `len` valid for a write.
#[unsafe(export_name = "PMPI_Get_processor_name")]
pub unsafe extern "C" fn MPI_Get_processor_name(name: *mut c_char, len: *mut c_int) -> c_int {
    let host = bulkwire_launch::hostname();
    // SAFETY: the caller's contract.
    unsafe { put(len, put_str(name, MPI_MAX_PROCESSOR_NAME, &host)) };
    MPI_SUCCESS
}

/// # Safety
/// Pointers valid for writes.
#[unsafe(export_name = "PMPI_Get_version")]
pub unsafe extern "C" fn MPI_Get_version(version: *mut c_int, subversion: *mut c_int) -> c_int {
    // SAFETY: the caller's contract.
    unsafe {
        put(version, 3);
        put(subversion, 1);
    }
    MPI_SUCCESS
}

/// # Safety
/// `version` holds `MPI_MAX_LIBRARY_VERSION_STRING` bytes; `len` valid for a write.
#[unsafe(export_name = "PMPI_Get_library_version")]
pub unsafe extern "C" fn MPI_Get_library_version(version: *mut c_char, len: *mut c_int) -> c_int {
    let v = format!(
        "bulkwire MPI {} (MPI 3.1 over bulkwire's point-to-point and collective layers)",
        env!("CARGO_PKG_VERSION")
    );
    // SAFETY: the caller's contract.
    unsafe { put(len, put_str(version, MPI_MAX_LIBRARY_VERSION_STRING, &v)) };
    MPI_SUCCESS
}

/// # Safety
/// `provided` valid for a write.
#[unsafe(export_name = "PMPI_Query_thread")]
pub unsafe extern "C" fn MPI_Query_thread(provided: *mut c_int) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { put(provided, THREAD_LEVEL.load(Ordering::Acquire)) };
    MPI_SUCCESS
}

/// # Safety
/// `flag` valid for a write.
#[unsafe(export_name = "PMPI_Is_thread_main")]
pub unsafe extern "C" fn MPI_Is_thread_main(flag: *mut c_int) -> c_int {
    let main = MAIN_THREAD.get() == Some(&std::thread::current().id());
    // SAFETY: the caller's contract.
    unsafe { put(flag, c_int::from(main)) };
    MPI_SUCCESS
}

/// Profiling control: nothing to control.
#[unsafe(export_name = "PMPI_Pcontrol")]
pub extern "C" fn MPI_Pcontrol(_level: c_int) -> c_int {
    MPI_SUCCESS
}

/// # Safety
/// `baseptr` points to a pointer to write.
#[unsafe(export_name = "PMPI_Alloc_mem")]
pub unsafe extern "C" fn MPI_Alloc_mem(size: isize, _info: Raw, baseptr: *mut c_void) -> c_int {
    if size < 0 {
        return fail(
            MPI_COMM_WORLD,
            MPI_ERR_ARG,
            format!("MPI_Alloc_mem: size {size}"),
        );
    }
    // SAFETY: malloc of a non-negative size (at least one byte, so the pointer is unique).
    let p = unsafe { libc::malloc((size as usize).max(1)) };
    if p.is_null() {
        return fail(
            MPI_COMM_WORLD,
            MPI_ERR_NO_MEM,
            format!("MPI_Alloc_mem: {size} bytes are not available"),
        );
    }
    // SAFETY: baseptr is a `void **` in disguise, by the standard's contract.
    unsafe { put(baseptr.cast::<*mut c_void>(), p) };
    MPI_SUCCESS
}

/// # Safety
/// `base` came from `MPI_Alloc_mem`.
#[unsafe(export_name = "PMPI_Free_mem")]
pub unsafe extern "C" fn MPI_Free_mem(base: *mut c_void) -> c_int {
    // SAFETY: the caller's contract: malloc'd by MPI_Alloc_mem.
    unsafe { libc::free(base) };
    MPI_SUCCESS
}

// ---- error handlers -------------------------------------------------------------------

/// `MPI_Comm_errhandler_function`: the variadic tail is never used.
pub type ErrFn = unsafe extern "C" fn(comm: *mut Raw, code: *mut c_int);

static ERRHANDLERS: Mutex<Table<ErrFn>> = Mutex::new(Table::new(Kind::Errhandler));

fn errhandler_ok(h: Raw) -> bool {
    matches!(
        h,
        MPI_ERRORS_ARE_FATAL | MPI_ERRORS_ABORT | MPI_ERRORS_RETURN
    ) || ERRHANDLERS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(h)
        .is_some()
}

/// # Safety
/// `f` a function of the right type; `errhandler` valid for a write.
#[unsafe(export_name = "PMPI_Comm_create_errhandler")]
pub unsafe extern "C" fn MPI_Comm_create_errhandler(
    f: Option<ErrFn>,
    errhandler: *mut Raw,
) -> c_int {
    let Some(f) = f else {
        return fail(
            MPI_COMM_WORLD,
            MPI_ERR_ARG,
            "MPI_Comm_create_errhandler: null function",
        );
    };
    let h = ERRHANDLERS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(f);
    // SAFETY: the caller's contract.
    unsafe { put(errhandler, h) };
    MPI_SUCCESS
}

#[unsafe(export_name = "PMPI_Comm_set_errhandler")]
pub extern "C" fn MPI_Comm_set_errhandler(comm: Raw, errhandler: Raw) -> c_int {
    let c = tri!(comm::get("MPI_Comm_set_errhandler", comm));
    if !errhandler_ok(errhandler) {
        return fail(
            comm,
            MPI_ERR_ARG,
            format!("MPI_Comm_set_errhandler: invalid error handler {errhandler:#x}"),
        );
    }
    *c.errhandler.lock().unwrap_or_else(|e| e.into_inner()) = errhandler;
    MPI_SUCCESS
}

/// # Safety
/// `errhandler` valid for a write.
#[unsafe(export_name = "PMPI_Comm_get_errhandler")]
pub unsafe extern "C" fn MPI_Comm_get_errhandler(comm: Raw, errhandler: *mut Raw) -> c_int {
    let c = tri!(comm::get("MPI_Comm_get_errhandler", comm));
    let h = *c.errhandler.lock().unwrap_or_else(|e| e.into_inner());
    // SAFETY: the caller's contract.
    unsafe { put(errhandler, h) };
    MPI_SUCCESS
}

/// Freeing a handler in use is allowed: communicators keep calling it (the function
/// stays registered; only predefined handles are refused).
///
/// # Safety
/// `errhandler` valid for reads and writes.
#[unsafe(export_name = "PMPI_Errhandler_free")]
pub unsafe extern "C" fn MPI_Errhandler_free(errhandler: *mut Raw) -> c_int {
    if errhandler.is_null() {
        return fail(
            MPI_COMM_WORLD,
            MPI_ERR_ARG,
            "MPI_Errhandler_free: null pointer",
        );
    }
    // SAFETY: non-null, valid by contract.
    let h = unsafe { *errhandler };
    if !errhandler_ok(h) {
        return fail(
            MPI_COMM_WORLD,
            MPI_ERR_ARG,
            format!("MPI_Errhandler_free: invalid error handler {h:#x}"),
        );
    }
    // SAFETY: as above.
    unsafe { *errhandler = MPI_ERRHANDLER_NULL };
    MPI_SUCCESS
}

#[unsafe(export_name = "PMPI_Comm_call_errhandler")]
pub extern "C" fn MPI_Comm_call_errhandler(comm: Raw, errorcode: c_int) -> c_int {
    let _ = tri!(comm::get("MPI_Comm_call_errhandler", comm));
    fail(
        comm,
        errorcode,
        format!("MPI_Comm_call_errhandler: error code {errorcode}"),
    );
    MPI_SUCCESS
}

// ---- error classes and strings ---------------------------------------------------------

/// Classes and codes added by the program: code -> (class, text).
static USER_CODES: Mutex<BTreeMap<c_int, (c_int, String)>> = Mutex::new(BTreeMap::new());
/// The last code in use (`MPI_LASTUSEDCODE`); 0 until one is added.
static LAST_CODE: AtomicI32 = AtomicI32::new(MPI_ERR_ABI);

fn class_text(code: c_int) -> String {
    let t = match code {
        MPI_SUCCESS => "no error",
        MPI_ERR_BUFFER => "invalid buffer pointer or buffer space exhausted",
        MPI_ERR_COUNT => "invalid count",
        MPI_ERR_TYPE => "invalid datatype",
        MPI_ERR_TAG => "invalid tag",
        MPI_ERR_COMM => "invalid communicator",
        MPI_ERR_RANK => "invalid rank",
        MPI_ERR_REQUEST => "invalid request",
        MPI_ERR_ROOT => "invalid root",
        MPI_ERR_GROUP => "invalid group",
        MPI_ERR_OP => "invalid operation",
        MPI_ERR_TOPOLOGY => "invalid topology",
        MPI_ERR_DIMS => "invalid dimensions",
        MPI_ERR_ARG => "invalid argument",
        MPI_ERR_UNKNOWN => "unknown error",
        MPI_ERR_TRUNCATE => "message truncated",
        MPI_ERR_OTHER => "other error",
        MPI_ERR_INTERN => "internal error",
        MPI_ERR_PENDING => "pending request",
        MPI_ERR_IN_STATUS => "error code in status",
        MPI_ERR_ACCESS => "permission denied",
        MPI_ERR_AMODE => "invalid file access mode",
        MPI_ERR_ASSERT => "invalid assertion",
        MPI_ERR_BAD_FILE => "invalid file name",
        MPI_ERR_BASE => "invalid base address",
        MPI_ERR_CONVERSION => "data conversion failed",
        MPI_ERR_DISP => "invalid displacement",
        MPI_ERR_DUP_DATAREP => "data representation already defined",
        MPI_ERR_FILE_EXISTS => "file exists",
        MPI_ERR_FILE_IN_USE => "file in use",
        MPI_ERR_FILE => "invalid file",
        MPI_ERR_INFO_KEY => "info key too long",
        MPI_ERR_INFO_NOKEY => "no such info key",
        MPI_ERR_INFO_VALUE => "info value too long",
        MPI_ERR_INFO => "invalid info object",
        MPI_ERR_IO => "I/O error",
        MPI_ERR_KEYVAL => "invalid attribute key",
        MPI_ERR_LOCKTYPE => "invalid lock type",
        MPI_ERR_NAME => "name not found",
        MPI_ERR_NO_MEM => "out of memory",
        MPI_ERR_NOT_SAME => "arguments differ between processes",
        MPI_ERR_NO_SPACE => "out of space",
        MPI_ERR_NO_SUCH_FILE => "no such file",
        MPI_ERR_PORT => "invalid port",
        MPI_ERR_QUOTA => "quota exceeded",
        MPI_ERR_READ_ONLY => "read-only file",
        MPI_ERR_RMA_ATTACH => "memory cannot be attached",
        MPI_ERR_RMA_CONFLICT => "conflicting accesses to a window",
        MPI_ERR_RMA_RANGE => "target memory outside the window",
        MPI_ERR_RMA_SHARED => "memory cannot be shared",
        MPI_ERR_RMA_SYNC => "wrong synchronisation of RMA calls",
        MPI_ERR_SERVICE => "invalid service name",
        MPI_ERR_SIZE => "invalid size",
        MPI_ERR_SPAWN => "spawn failed",
        MPI_ERR_UNSUPPORTED_DATAREP => "unsupported data representation",
        MPI_ERR_UNSUPPORTED_OPERATION => "unsupported operation",
        MPI_ERR_WIN => "invalid window",
        MPI_ERR_RMA_FLAVOR => "wrong window flavor",
        MPI_ERR_PROC_ABORTED => "a process aborted",
        MPI_ERR_VALUE_TOO_LARGE => "value too large",
        MPI_ERR_SESSION => "invalid session",
        MPI_ERR_ERRHANDLER => "invalid error handler",
        MPI_ERR_ABI => "ABI mismatch",
        _ => {
            let u = USER_CODES.lock().unwrap_or_else(|e| e.into_inner());
            return match u.get(&code) {
                Some((_, s)) => s.clone(),
                None => format!("unknown error code {code}"),
            };
        }
    };
    t.to_string()
}

/// # Safety
/// `string` holds `MPI_MAX_ERROR_STRING` bytes; `resultlen` valid for a write.
#[unsafe(export_name = "PMPI_Error_string")]
pub unsafe extern "C" fn MPI_Error_string(
    errorcode: c_int,
    string: *mut c_char,
    resultlen: *mut c_int,
) -> c_int {
    let known = (0..=MPI_ERR_ABI).contains(&errorcode)
        || USER_CODES
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains_key(&errorcode);
    if !known {
        return fail(
            MPI_COMM_WORLD,
            MPI_ERR_ARG,
            format!("MPI_Error_string: {errorcode} is not an error code"),
        );
    }
    // SAFETY: the caller's contract.
    unsafe {
        put(
            resultlen,
            put_str(string, MPI_MAX_ERROR_STRING, &class_text(errorcode)),
        )
    };
    MPI_SUCCESS
}

/// # Safety
/// `errorclass` valid for a write.
#[unsafe(export_name = "PMPI_Error_class")]
pub unsafe extern "C" fn MPI_Error_class(errorcode: c_int, errorclass: *mut c_int) -> c_int {
    let class = if (0..=MPI_ERR_ABI).contains(&errorcode) {
        errorcode
    } else {
        match USER_CODES
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&errorcode)
        {
            Some(&(c, _)) => c,
            None => {
                return fail(
                    MPI_COMM_WORLD,
                    MPI_ERR_ARG,
                    format!("MPI_Error_class: {errorcode} is not an error code"),
                );
            }
        }
    };
    // SAFETY: the caller's contract.
    unsafe { put(errorclass, class) };
    MPI_SUCCESS
}

fn new_code(class: Option<c_int>) -> c_int {
    let mut u = USER_CODES.lock().unwrap_or_else(|e| e.into_inner());
    let c = LAST_CODE.fetch_add(1, Ordering::AcqRel) + 1;
    u.insert(c, (class.unwrap_or(c), String::new()));
    c
}

/// # Safety
/// `errorclass` valid for a write.
#[unsafe(export_name = "PMPI_Add_error_class")]
pub unsafe extern "C" fn MPI_Add_error_class(errorclass: *mut c_int) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { put(errorclass, new_code(None)) };
    MPI_SUCCESS
}

/// # Safety
/// `errorcode` valid for a write.
#[unsafe(export_name = "PMPI_Add_error_code")]
pub unsafe extern "C" fn MPI_Add_error_code(errorclass: c_int, errorcode: *mut c_int) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { put(errorcode, new_code(Some(errorclass))) };
    MPI_SUCCESS
}

/// # Safety
/// `string` a NUL-terminated string.
#[unsafe(export_name = "PMPI_Add_error_string")]
pub unsafe extern "C" fn MPI_Add_error_string(errorcode: c_int, string: *const c_char) -> c_int {
    if string.is_null() {
        return fail(
            MPI_COMM_WORLD,
            MPI_ERR_ARG,
            "MPI_Add_error_string: null string",
        );
    }
    // SAFETY: NUL-terminated by contract.
    let s = unsafe { CStr::from_ptr(string) }
        .to_string_lossy()
        .into_owned();
    let mut u = USER_CODES.lock().unwrap_or_else(|e| e.into_inner());
    match u.get_mut(&errorcode) {
        Some(e) => {
            e.1 = s;
            MPI_SUCCESS
        }
        None => {
            drop(u);
            fail(
                MPI_COMM_WORLD,
                MPI_ERR_ARG,
                format!("MPI_Add_error_string: {errorcode} was not added by the program"),
            )
        }
    }
}

/// The value of `MPI_LASTUSEDCODE`.
pub(crate) fn last_used_code() -> c_int {
    LAST_CODE.load(Ordering::Acquire)
}

// ---- info objects ---------------------------------------------------------------------

type Info = Vec<(String, String)>;
static INFOS: Mutex<Table<Info>> = Mutex::new(Table::new(Kind::Info));

fn with_info<R>(call: &str, h: Raw, f: impl FnOnce(&mut Info) -> R) -> Result<R, c_int> {
    let mut t = INFOS.lock().unwrap_or_else(|e| e.into_inner());
    if h == MPI_INFO_ENV {
        // The environment's info is empty (nothing the standard lists is known here).
        let mut empty = Vec::new();
        return Ok(f(&mut empty));
    }
    match t.get_mut(h) {
        Some(i) => Ok(f(i)),
        None => {
            drop(t);
            Err(fail(
                MPI_COMM_WORLD,
                MPI_ERR_INFO,
                format!("{call}: invalid info handle {h:#x}"),
            ))
        }
    }
}

/// # Safety
/// A NUL-terminated string or null.
unsafe fn cstr(p: *const c_char) -> Option<String> {
    // SAFETY: forwarded contract.
    (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
}

/// # Safety
/// `info` valid for a write.
#[unsafe(export_name = "PMPI_Info_create")]
pub unsafe extern "C" fn MPI_Info_create(info: *mut Raw) -> c_int {
    let h = INFOS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(Vec::new());
    // SAFETY: the caller's contract.
    unsafe { put(info, h) };
    MPI_SUCCESS
}

/// # Safety
/// NUL-terminated strings.
#[unsafe(export_name = "PMPI_Info_set")]
pub unsafe extern "C" fn MPI_Info_set(
    info: Raw,
    key: *const c_char,
    value: *const c_char,
) -> c_int {
    const CALL: &str = "MPI_Info_set";
    // SAFETY: the caller's contract.
    let (Some(k), Some(v)) = (unsafe { cstr(key) }, unsafe { cstr(value) }) else {
        return fail(
            MPI_COMM_WORLD,
            MPI_ERR_ARG,
            format!("{CALL}: null key or value"),
        );
    };
    if k.is_empty() || k.len() >= MPI_MAX_INFO_KEY {
        return fail(
            MPI_COMM_WORLD,
            MPI_ERR_INFO_KEY,
            format!("{CALL}: key of {} bytes", k.len()),
        );
    }
    if v.len() >= MPI_MAX_INFO_VAL {
        return fail(
            MPI_COMM_WORLD,
            MPI_ERR_INFO_VALUE,
            format!("{CALL}: value of {} bytes", v.len()),
        );
    }
    tri!(with_info(CALL, info, |i| {
        match i.iter_mut().find(|e| e.0 == k) {
            Some(e) => e.1 = v,
            None => i.push((k, v)),
        }
    }));
    MPI_SUCCESS
}

/// # Safety
/// Pointers as in `mpi.h`.
#[unsafe(export_name = "PMPI_Info_get")]
pub unsafe extern "C" fn MPI_Info_get(
    info: Raw,
    key: *const c_char,
    valuelen: c_int,
    value: *mut c_char,
    flag: *mut c_int,
) -> c_int {
    // SAFETY: the caller's contract.
    let k = unsafe { cstr(key) }.unwrap_or_default();
    let v = tri!(with_info("MPI_Info_get", info, |i| i
        .iter()
        .find(|e| e.0 == k)
        .map(|e| e.1.clone())));
    // SAFETY: the caller's contract: value holds valuelen + 1 bytes.
    unsafe {
        put(flag, c_int::from(v.is_some()));
        if let Some(v) = v {
            put_str(value, valuelen.max(0) as usize + 1, &v);
        }
    }
    MPI_SUCCESS
}

/// # Safety
/// Pointers as in `mpi.h`.
#[unsafe(export_name = "PMPI_Info_get_valuelen")]
pub unsafe extern "C" fn MPI_Info_get_valuelen(
    info: Raw,
    key: *const c_char,
    valuelen: *mut c_int,
    flag: *mut c_int,
) -> c_int {
    // SAFETY: the caller's contract.
    let k = unsafe { cstr(key) }.unwrap_or_default();
    let v = tri!(with_info("MPI_Info_get_valuelen", info, |i| i
        .iter()
        .find(|e| e.0 == k)
        .map(|e| e.1.len())));
    // SAFETY: the caller's contract.
    unsafe {
        put(flag, c_int::from(v.is_some()));
        if let Some(n) = v {
            put(valuelen, n as c_int);
        }
    }
    MPI_SUCCESS
}

/// # Safety
/// `key` NUL-terminated.
#[unsafe(export_name = "PMPI_Info_delete")]
pub unsafe extern "C" fn MPI_Info_delete(info: Raw, key: *const c_char) -> c_int {
    // SAFETY: the caller's contract.
    let k = unsafe { cstr(key) }.unwrap_or_default();
    let found = tri!(with_info("MPI_Info_delete", info, |i| {
        let n = i.len();
        i.retain(|e| e.0 != k);
        i.len() != n
    }));
    if !found {
        return fail(
            MPI_COMM_WORLD,
            MPI_ERR_INFO_NOKEY,
            format!("MPI_Info_delete: no key {k:?}"),
        );
    }
    MPI_SUCCESS
}

/// # Safety
/// `newinfo` valid for a write.
#[unsafe(export_name = "PMPI_Info_dup")]
pub unsafe extern "C" fn MPI_Info_dup(info: Raw, newinfo: *mut Raw) -> c_int {
    let copy = tri!(with_info("MPI_Info_dup", info, |i| i.clone()));
    let h = INFOS.lock().unwrap_or_else(|e| e.into_inner()).insert(copy);
    // SAFETY: the caller's contract.
    unsafe { put(newinfo, h) };
    MPI_SUCCESS
}

/// # Safety
/// `info` valid for reads and writes.
#[unsafe(export_name = "PMPI_Info_free")]
pub unsafe extern "C" fn MPI_Info_free(info: *mut Raw) -> c_int {
    if info.is_null() {
        return fail(MPI_COMM_WORLD, MPI_ERR_ARG, "MPI_Info_free: null pointer");
    }
    // SAFETY: non-null, valid by contract.
    let h = unsafe { *info };
    if INFOS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .remove(h)
        .is_none()
    {
        return fail(
            MPI_COMM_WORLD,
            MPI_ERR_INFO,
            format!("MPI_Info_free: invalid info handle {h:#x}"),
        );
    }
    // SAFETY: as above.
    unsafe { *info = MPI_INFO_NULL };
    MPI_SUCCESS
}

/// # Safety
/// `nkeys` valid for a write.
#[unsafe(export_name = "PMPI_Info_get_nkeys")]
pub unsafe extern "C" fn MPI_Info_get_nkeys(info: Raw, nkeys: *mut c_int) -> c_int {
    let n = tri!(with_info("MPI_Info_get_nkeys", info, |i| i.len()));
    // SAFETY: the caller's contract.
    unsafe { put(nkeys, n as c_int) };
    MPI_SUCCESS
}

/// # Safety
/// `key` holds `MPI_MAX_INFO_KEY` bytes.
#[unsafe(export_name = "PMPI_Info_get_nthkey")]
pub unsafe extern "C" fn MPI_Info_get_nthkey(info: Raw, n: c_int, key: *mut c_char) -> c_int {
    let k = tri!(with_info("MPI_Info_get_nthkey", info, |i| usize::try_from(
        n
    )
    .ok()
    .and_then(|n| i.get(n))
    .map(|e| e.0.clone())));
    let Some(k) = k else {
        return fail(
            MPI_COMM_WORLD,
            MPI_ERR_ARG,
            format!("MPI_Info_get_nthkey: no key {n}"),
        );
    };
    // SAFETY: the caller's contract.
    unsafe { put_str(key, MPI_MAX_INFO_KEY, &k) };
    MPI_SUCCESS
}

/// Whether `h` is a live info object or `MPI_INFO_NULL` (for calls taking hints).
pub(crate) fn info_ok(h: Raw) -> bool {
    h == MPI_INFO_NULL
        || h == MPI_INFO_ENV
        || INFOS
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(h)
            .is_some()
}

// ---- Fortran handles ------------------------------------------------------------------

macro_rules! c2f {
    ($($c2f:ident $f2c:ident),* $(,)?) => {$(
        #[unsafe(export_name = concat!("P", stringify!($c2f)))]
        pub extern "C" fn $c2f(h: Raw) -> c_int {
            h as c_int
        }
        #[unsafe(export_name = concat!("P", stringify!($f2c)))]
        pub extern "C" fn $f2c(f: c_int) -> Raw {
            f as u32 as Raw
        }
    )*};
}

c2f!(
    MPI_Comm_c2f MPI_Comm_f2c,
    MPI_Type_c2f MPI_Type_f2c,
    MPI_Group_c2f MPI_Group_f2c,
    MPI_Op_c2f MPI_Op_f2c,
    MPI_Request_c2f MPI_Request_f2c,
    MPI_Info_c2f MPI_Info_f2c,
    MPI_Win_c2f MPI_Win_f2c,
    MPI_Errhandler_c2f MPI_Errhandler_f2c,
    MPI_Message_c2f MPI_Message_f2c,
);

/// The MPI error class of a p2p error.
pub fn code_of(e: &bulkwire_p2p::Error) -> c_int {
    use bulkwire_p2p::Error as E;
    match e {
        E::Truncated { .. } => MPI_ERR_TRUNCATE,
        E::PeerDead(_) | E::JobFailed { .. } => MPI_ERR_PROC_ABORTED,
        E::InvalidRank { .. } => MPI_ERR_RANK,
        E::InvalidTag(_) => MPI_ERR_TAG,
        E::InvalidRequest => MPI_ERR_REQUEST,
        E::TooLarge { .. } => MPI_ERR_COUNT,
        _ => MPI_ERR_OTHER,
    }
}
