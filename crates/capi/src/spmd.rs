//! Which function the processes a program starts run: for several SPMD sections in one
//! program (`bsp_begin` again after `bsp_end`, as MulticoreBSP for C allows), and for a
//! program that names its SPMD function with `bsp_init` after code of its own (reading
//! input, as MulticoreBSP's examples do).
//!
//! After `bsp_end` only pid 0 is left, so a later `bsp_begin` starts a new job on this host
//! ([`bulkwire_bsp::Runtime::begin_section`]); a program started by itself does the same
//! for its first section once it has named its SPMD function. The processes are fresh
//! copies of the program, which would run `main` from the top; instead, at their first
//! call into the library (`bsp_init`, `bsp_begin` or `bsp_nprocs`, whichever `main` makes
//! first) they run the SPMD function pid 0 last gave to `bsp_init`, then exit. pid 0 names
//! that function by its module's position in the loader's list and its offset there,
//! which are the same in every copy of one executable whatever the address-space layout.

use std::ffi::{CStr, c_int, c_void};
use std::io::Write;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// The function the program last gave to `bsp_init` (0: none).
static SPMD: AtomicUsize = AtomicUsize::new(0);

/// This process is running its section's function (set once, before calling it).
static ENTERED: AtomicBool = AtomicBool::new(false);

pub(crate) type SpmdFn = extern "C" fn();

/// Records `f` as the SPMD function of the sections to come.
pub(crate) fn record(f: SpmdFn) {
    SPMD.store(f as usize, Ordering::SeqCst);
}

/// The function last given to `bsp_init`, encoded for the processes a section starts, if
/// the program named one.
pub(crate) fn entry() -> Option<String> {
    entry_for_next_section().ok()
}

/// The function last given to `bsp_init`, encoded for the processes of a later section;
/// `Err` says why there is none.
pub(crate) fn entry_for_next_section() -> Result<String, String> {
    let f = SPMD.load(Ordering::SeqCst);
    if f == 0 {
        return Err(
            "a new SPMD section (bsp_begin after bsp_end) starts processes that run \
                    the function last given to bsp_init, and this program called no \
                    bsp_init"
                .into(),
        );
    }
    let (index, name, base) = module_of(f)
        .ok_or_else(|| format!("the SPMD function at {f:#x} lies in no module the loader knows"))?;
    Ok(format!("{index}:{:x}:{name}", f - base))
}

/// The section's function, if this process was started for a later SPMD section and has
/// not entered it yet.
fn pending_entry() -> Option<&'static str> {
    static ENTRY: OnceLock<Option<String>> = OnceLock::new();
    let e = ENTRY.get_or_init(|| {
        crate::settings::get()
            .ok()
            .and_then(|s| s.launch.job.clone())
            .filter(|e| e.rank > 0)
            .and_then(|e| e.entry)
    });
    e.as_deref().filter(|_| !ENTERED.load(Ordering::SeqCst))
}

/// At the first call into the library of a process started for a later SPMD section: runs
/// the section's function instead of the rest of `main`, and exits.
pub(crate) fn divert(call: &str) {
    let Some(entry) = pending_entry() else {
        return;
    };
    ENTERED.store(true, Ordering::SeqCst);
    let f = resolve(entry).unwrap_or_else(|why| {
        let _ = writeln!(
            std::io::stderr(),
            "{call}: cannot find the SPMD function of this section ({why})"
        );
        std::process::exit(1)
    });
    f();
    // Its bsp_end ends this process; a function that returned without one had no section.
    let _ = writeln!(
        std::io::stderr(),
        "{call}: the SPMD function given to bsp_init returned without bsp_begin ... bsp_end"
    );
    std::process::exit(1)
}

/// Whether this process is running a later section's function (its `bsp_init` must not
/// run the function it is given).
pub(crate) fn entered() -> bool {
    ENTERED.load(Ordering::SeqCst)
}

fn resolve(entry: &str) -> Result<SpmdFn, String> {
    let bad = || format!("malformed entry {entry:?}");
    let mut it = entry.splitn(3, ':');
    let index: usize = it.next().and_then(|v| v.parse().ok()).ok_or_else(bad)?;
    let offset = it
        .next()
        .and_then(|v| usize::from_str_radix(v, 16).ok())
        .ok_or_else(bad)?;
    let name = it.next().ok_or_else(bad)?;
    let (base, found) = nth_module(index).ok_or_else(|| format!("no module #{index} here"))?;
    if found != name {
        return Err(format!(
            "module #{index} is {found:?} here but {name:?} in the process that began the \
             section"
        ));
    }
    let addr = base.wrapping_add(offset);
    match module_of(addr) {
        Some((i, _, _)) if i == index => {}
        _ => return Err(format!("offset {offset:#x} lies outside module {name:?}")),
    }
    // SAFETY: the address is the same function's in this copy of the same executable (same
    // module at the same offset; the module checked above).
    Ok(unsafe { std::mem::transmute::<usize, SpmdFn>(addr) })
}

/// What one walk over the loaded modules looks for.
struct Walk {
    /// Find the module holding this address...
    addr: usize,
    /// ... or the module at this position.
    index: usize,
    seen: usize,
    found: Option<(usize, String, usize)>,
}

/// The module holding `addr`: its position, name and load base.
fn module_of(addr: usize) -> Option<(usize, String, usize)> {
    walk(Walk {
        addr,
        index: usize::MAX,
        seen: 0,
        found: None,
    })
}

/// The load base and name of the module at position `index`.
fn nth_module(index: usize) -> Option<(usize, String)> {
    walk(Walk {
        addr: 0,
        index,
        seen: 0,
        found: None,
    })
    .map(|(_, name, base)| (base, name))
}

fn walk(mut w: Walk) -> Option<(usize, String, usize)> {
    // SAFETY: the callback only reads the loader's structures while the loader holds them.
    unsafe { libc::dl_iterate_phdr(Some(visit), (&mut w as *mut Walk).cast()) };
    w.found
}

unsafe extern "C" fn visit(info: *mut libc::dl_phdr_info, _: usize, data: *mut c_void) -> c_int {
    // SAFETY: dl_iterate_phdr hands over a valid info and the `Walk` passed to it.
    let (info, w) = unsafe { (&*info, &mut *(data as *mut Walk)) };
    let i = w.seen;
    w.seen += 1;
    let base = info.dlpi_addr as usize;
    let hit = i == w.index
        || (w.addr != 0
            && (0..info.dlpi_phnum as usize).any(|k| {
                // SAFETY: the loader gives dlpi_phnum program headers at dlpi_phdr.
                let ph = unsafe { &*info.dlpi_phdr.add(k) };
                let lo = base.wrapping_add(ph.p_vaddr as usize);
                ph.p_type == libc::PT_LOAD && (lo..lo + ph.p_memsz as usize).contains(&w.addr)
            }));
    if !hit {
        return 0;
    }
    let name = if info.dlpi_name.is_null() {
        String::new()
    } else {
        // SAFETY: a NUL-terminated name the loader owns.
        unsafe { CStr::from_ptr(info.dlpi_name) }
            .to_string_lossy()
            .into_owned()
    };
    w.found = Some((i, name, base));
    1
}

#[cfg(test)]
mod tests {
    use super::*;

    extern "C" fn probe() {}

    #[test]
    fn an_entry_names_the_same_function_again() {
        record(probe);
        let e = entry_for_next_section().unwrap();
        let f = resolve(&e).unwrap();
        assert_eq!(f as usize, probe as *const () as usize, "{e}");
        assert!(resolve("0:1:no such module").is_err());
        assert!(resolve("x").is_err());
        assert!(resolve("999999:0:").is_err());
    }
}
