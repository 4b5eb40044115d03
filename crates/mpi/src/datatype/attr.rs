//! Attributes of datatypes (`MPI_Type_set_attr`, ...): keys with the program's copy and
//! delete callbacks, values stored per object. The callbacks have the C types
//! `MPI_Type_copy_attr_function` and `MPI_Type_delete_attr_function`: the object's handle
//! first.

use std::collections::BTreeMap;
use std::ffi::c_void;
use std::os::raw::c_int;
use std::sync::Mutex;

use crate::error::*;
use crate::handle::{Kind, Raw, Table};

type CopyFn =
    unsafe extern "C" fn(Raw, c_int, *mut c_void, *mut c_void, *mut c_void, *mut c_int) -> c_int;
type DeleteFn = unsafe extern "C" fn(Raw, c_int, *mut c_void, *mut c_void) -> c_int;

/// A key: its callbacks (0: the null function; copy 1: `MPI_TYPE_DUP_FN`) and the
/// program's extra state.
#[derive(Clone, Copy)]
pub struct Keyval {
    copy: usize,
    delete: usize,
    extra: usize,
}

/// The keys of one kind of object.
pub struct Keys(Mutex<Table<Keyval>>);

impl Keys {
    pub const fn new() -> Keys {
        Keys(Mutex::new(Table::new(Kind::Keyval)))
    }

    pub fn create(&self, copy: usize, delete: usize, extra: *mut c_void) -> c_int {
        let k = Keyval {
            copy,
            delete,
            extra: extra as usize,
        };
        self.0.lock().unwrap_or_else(|e| e.into_inner()).insert(k) as c_int
    }

    pub fn get(&self, k: c_int) -> Option<Keyval> {
        let t = self.0.lock().unwrap_or_else(|e| e.into_inner());
        t.get(k as u32 as Raw).copied()
    }

    /// Forgets the key (attributes set with it keep their callbacks).
    pub fn free(&self, k: c_int) -> Result<(), c_int> {
        let mut t = self.0.lock().unwrap_or_else(|e| e.into_inner());
        t.remove(k as u32 as Raw).map(drop).ok_or(MPI_ERR_KEYVAL)
    }
}

impl Default for Keys {
    fn default() -> Keys {
        Keys::new()
    }
}

/// The attributes of one object: key, value and the key's callbacks.
#[derive(Default)]
pub struct Attrs(Mutex<BTreeMap<c_int, (usize, Keyval)>>);

impl Attrs {
    pub fn get(&self, k: c_int) -> Option<usize> {
        let m = self.0.lock().unwrap_or_else(|e| e.into_inner());
        m.get(&k).map(|v| v.0)
    }

    /// Sets `k` to `v`, deleting an old value first (its delete callback).
    pub fn set(&self, h: Raw, k: c_int, kv: Keyval, v: usize) -> Result<(), c_int> {
        self.delete(h, k)?;
        let mut m = self.0.lock().unwrap_or_else(|e| e.into_inner());
        m.insert(k, (v, kv));
        Ok(())
    }

    /// Deletes `k` through its delete callback; whether it was set.
    pub fn delete(&self, h: Raw, k: c_int) -> Result<bool, c_int> {
        let old = self.0.lock().unwrap_or_else(|e| e.into_inner()).remove(&k);
        let Some((v, kv)) = old else { return Ok(false) };
        if kv.delete != 0 {
            // SAFETY: a delete callback the program registered with this key.
            let f: DeleteFn = unsafe { std::mem::transmute::<usize, DeleteFn>(kv.delete) };
            // SAFETY: the callback's contract: the object, the key, the value, the state.
            let rc = unsafe { f(h, k, v as *mut c_void, kv.extra as *mut c_void) };
            if rc != MPI_SUCCESS {
                return Err(rc);
            }
        }
        Ok(true)
    }

    /// Deletes every attribute (the object is freed); the first failure.
    pub fn delete_all(&self, h: Raw) -> Result<(), c_int> {
        let keys: Vec<c_int> = self
            .0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .keys()
            .copied()
            .collect();
        let mut res = Ok(());
        for k in keys {
            if let Err(e) = self.delete(h, k)
                && res.is_ok()
            {
                res = Err(e);
            }
        }
        res
    }

    /// Copies the attributes of object `h` to `to` through their copy callbacks.
    pub fn copy_to(&self, h: Raw, to: &Attrs) -> Result<(), c_int> {
        let all: Vec<(c_int, (usize, Keyval))> = self
            .0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|(&k, &v)| (k, v))
            .collect();
        for (k, (v, kv)) in all {
            let copied = match kv.copy {
                0 => None,
                1 => Some(v),
                f => {
                    // SAFETY: a copy callback the program registered with this key.
                    let f: CopyFn = unsafe { std::mem::transmute::<usize, CopyFn>(f) };
                    let (mut out, mut flag) = (0usize, 0);
                    // SAFETY: the callback's contract.
                    let rc = unsafe {
                        f(
                            h,
                            k,
                            kv.extra as *mut c_void,
                            v as *mut c_void,
                            (&mut out as *mut usize).cast(),
                            &mut flag,
                        )
                    };
                    if rc != MPI_SUCCESS {
                        return Err(rc);
                    }
                    (flag != 0).then_some(out)
                }
            };
            if let Some(v) = copied {
                to.0.lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(k, (v, kv));
            }
        }
        Ok(())
    }
}
