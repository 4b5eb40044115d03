//! PMIx, the bootstrap service of Open MPI's `mpirun` and of `srun --mpi=pmix`, through the
//! system's `libpmix` loaded at run time (`dlopen`): a program that never runs under PMIx
//! needs no PMIx installed. Only a handful of calls are used (`PMIx_Init`, `PMIx_Get` of
//! the job size, `PMIx_Put`/`PMIx_Commit` of rank 0's rendezvous address, `PMIx_Fence`,
//! `PMIx_Get` of that address, `PMIx_Finalize`), with the structures laid out as
//! `pmix_common.h` has them: `pmix_proc_t` is a 256-byte namespace and a u32 rank;
//! `pmix_value_t` a u16 type and, 8 bytes in, a union (a string pointer or a u32 here).

use std::ffi::{CStr, CString, c_char, c_int, c_void};

use super::Bootstrap;
use crate::LaunchError;

/// The libraries tried, the runtime package's name first.
const LIBS: [&str; 2] = ["libpmix.so.2", "libpmix.so"];

const NSLEN: usize = 256;
const PMIX_SUCCESS: c_int = 0;
const PMIX_STRING: u16 = 3;
const PMIX_UINT32: u16 = 14;
const PMIX_GLOBAL: u8 = 3;
const PMIX_RANK_WILDCARD: u32 = u32::MAX - 1;
const JOB_SIZE: &CStr = c"pmix.job.size";
const KEY: &CStr = c"bulkwire.rendezvous";

#[repr(C)]
#[derive(Clone, Copy)]
struct Proc {
    nspace: [c_char; NSLEN],
    rank: u32,
}

/// `pmix_value_t`: 32 bytes in PMIx 3 and 4; only the leading type and the union's first
/// word are touched.
#[repr(C)]
struct Value {
    kind: u16,
    data: [u64; 3],
}

type Init = unsafe extern "C" fn(*mut Proc, *mut c_void, usize) -> c_int;
type Get = unsafe extern "C" fn(
    *const Proc,
    *const c_char,
    *const c_void,
    usize,
    *mut *mut Value,
) -> c_int;
type Put = unsafe extern "C" fn(u8, *const c_char, *mut Value) -> c_int;
type Commit = unsafe extern "C" fn() -> c_int;
type Fence = unsafe extern "C" fn(*const Proc, usize, *const c_void, usize) -> c_int;
type Finalize = unsafe extern "C" fn(*const c_void, usize) -> c_int;

/// A PMIx client session.
pub struct Pmix {
    me: Proc,
    size: u32,
    get: Get,
    put: Put,
    commit: Commit,
    fence: Fence,
    finalize: Finalize,
    finalized: bool,
}

fn err(msg: impl std::fmt::Display) -> LaunchError {
    LaunchError::Protocol(format!("PMIx: {msg}"))
}

/// `dlsym` of `name` in `lib`, as a function of type `T`.
///
/// # Safety
/// `T` must be the function's true signature.
unsafe fn sym<T: Copy>(lib: *mut c_void, name: &CStr) -> Result<T, LaunchError> {
    // SAFETY: lib is a live handle from dlopen; name is NUL-terminated.
    let p = unsafe { libc::dlsym(lib, name.as_ptr()) };
    if p.is_null() {
        return Err(err(format!("libpmix has no {}", name.to_string_lossy())));
    }
    // SAFETY: a function pointer of the caller-guaranteed type, the size of a pointer.
    Ok(unsafe { std::mem::transmute_copy::<*mut c_void, T>(&p) })
}

impl Pmix {
    /// Loads libpmix and initialises the client (the launcher's server is found from the
    /// `PMIX_*` variables it set).
    pub fn connect() -> Result<Pmix, LaunchError> {
        let lib = LIBS
            .iter()
            .map(|n| CString::new(*n).expect("no NUL"))
            // SAFETY: dlopen with a valid NUL-terminated name; the library stays loaded
            // for the life of the process (never closed), so its symbols stay valid.
            .map(|n| unsafe { libc::dlopen(n.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) })
            .find(|h| !h.is_null())
            .ok_or_else(|| {
                err(
                    "libpmix is not installed (the library libpmix.so.2, e.g. Debian's \
                     libpmix2): install it, or start a rendezvous with bsprun --serve",
                )
            })?;
        // SAFETY: the signatures are those of pmix.h.
        let (init, get, put, commit, fence, finalize) = unsafe {
            (
                sym::<Init>(lib, c"PMIx_Init")?,
                sym::<Get>(lib, c"PMIx_Get")?,
                sym::<Put>(lib, c"PMIx_Put")?,
                sym::<Commit>(lib, c"PMIx_Commit")?,
                sym::<Fence>(lib, c"PMIx_Fence")?,
                sym::<Finalize>(lib, c"PMIx_Finalize")?,
            )
        };
        let mut me = Proc {
            nspace: [0; NSLEN],
            rank: 0,
        };
        // SAFETY: me is a valid pmix_proc_t to fill; no info array.
        let rc = unsafe { init(&mut me, std::ptr::null_mut(), 0) };
        if rc != PMIX_SUCCESS {
            return Err(err(format!(
                "PMIx_Init failed ({rc}): not started by a PMIx launcher?"
            )));
        }
        let mut p = Pmix {
            me,
            size: 0,
            get,
            put,
            commit,
            fence,
            finalize,
            finalized: false,
        };
        let job = Proc {
            nspace: me.nspace,
            rank: PMIX_RANK_WILDCARD,
        };
        let v = p.value(&job, JOB_SIZE)?;
        p.size = match v {
            Fetched::U32(n) => n,
            Fetched::Str(s) => s.parse().map_err(|_| err("job size is not a number"))?,
        };
        Ok(p)
    }

    fn value(&self, of: &Proc, key: &CStr) -> Result<Fetched, LaunchError> {
        let mut out: *mut Value = std::ptr::null_mut();
        // SAFETY: valid proc and key; PMIx allocates the value and hands it to us.
        let rc = unsafe { (self.get)(of, key.as_ptr(), std::ptr::null(), 0, &mut out) };
        if rc != PMIX_SUCCESS || out.is_null() {
            return Err(err(format!(
                "PMIx_Get({}) failed ({rc})",
                key.to_string_lossy()
            )));
        }
        // SAFETY: out points to a pmix_value_t PMIx filled; we read its type and first
        // union word. (It is left allocated: one small value per process.)
        let v = unsafe { &*out };
        match v.kind {
            PMIX_UINT32 => Ok(Fetched::U32(v.data[0] as u32)),
            PMIX_STRING => {
                let p = v.data[0] as usize as *const c_char;
                if p.is_null() {
                    return Err(err("empty string value"));
                }
                // SAFETY: a PMIX_STRING value holds a NUL-terminated string.
                Ok(Fetched::Str(
                    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned(),
                ))
            }
            k => Err(err(format!("{} has type {k}", key.to_string_lossy()))),
        }
    }

    fn namespace(&self) -> String {
        // SAFETY: PMIx NUL-terminates the namespace within its 256 bytes.
        unsafe { CStr::from_ptr(self.me.nspace.as_ptr()) }
            .to_string_lossy()
            .into_owned()
    }
}

enum Fetched {
    U32(u32),
    Str(String),
}

impl Bootstrap for Pmix {
    fn describe(&self) -> String {
        format!("PMIx (namespace {})", self.namespace())
    }
    fn rank(&self) -> u32 {
        self.me.rank
    }
    fn size(&self) -> u32 {
        self.size
    }
    fn job_name(&self) -> String {
        format!("pmix:{}", self.namespace())
    }
    fn exchange(&mut self, mine: Option<&str>) -> Result<String, LaunchError> {
        if let Some(v) = mine {
            let s = CString::new(v).map_err(|_| err("address with a NUL"))?;
            let mut val = Value {
                kind: PMIX_STRING,
                data: [s.as_ptr() as usize as u64, 0, 0],
            };
            // SAFETY: a PMIX_STRING value pointing at a live string; PMIx copies it.
            let rc = unsafe { (self.put)(PMIX_GLOBAL, KEY.as_ptr(), &mut val) };
            // SAFETY: no arguments.
            let rc2 = unsafe { (self.commit)() };
            if rc != PMIX_SUCCESS || rc2 != PMIX_SUCCESS {
                return Err(err(format!("PMIx_Put/Commit failed ({rc}, {rc2})")));
            }
        }
        // SAFETY: no procs (the whole namespace) and no info.
        let rc = unsafe { (self.fence)(std::ptr::null(), 0, std::ptr::null(), 0) };
        if rc != PMIX_SUCCESS {
            return Err(err(format!("PMIx_Fence failed ({rc})")));
        }
        if let Some(v) = mine {
            return Ok(v.to_string());
        }
        let rank0 = Proc {
            nspace: self.me.nspace,
            rank: 0,
        };
        match self.value(&rank0, KEY)? {
            Fetched::Str(s) => Ok(s),
            Fetched::U32(_) => Err(err("rank 0 published a number")),
        }
    }
    fn finalize(&mut self) {
        if !self.finalized {
            self.finalized = true;
            // SAFETY: no info array.
            unsafe { (self.finalize)(std::ptr::null(), 0) };
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn structures_have_pmix_layout() {
        assert_eq!(std::mem::size_of::<super::Proc>(), 260);
        assert_eq!(std::mem::size_of::<super::Value>(), 32);
        assert_eq!(std::mem::offset_of!(super::Value, data), 8);
    }
}
