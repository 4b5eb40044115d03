//! Which function the processes a program starts run: for several SPMD sections in one
//! program (`bsp_begin` again after `bsp_end`, as MulticoreBSP for C allows), and for a
//! program that names its SPMD function with `bsp_init` after code of its own (reading
//! input, as MulticoreBSP's examples do).
//!
//! After `bsp_end` only pid 0 is left, so a later `bsp_begin` starts a new job on this host
//! ([`bulkwire_bsp::Runtime::begin_section`]); a program started by itself does the same
//! for its first section once it has named its SPMD function, and so does a process that
//! begins a nested section (MulticoreBSP's hierarchical runs) after naming its function
//! with `bsp_init` inside the running one. The processes are fresh
//! copies of the program, which would run `main` from the top; instead, at their first
//! call into the library (`bsp_init`, `bsp_begin` or `bsp_nprocs`, whichever `main` makes
//! first) they run the SPMD function pid 0 last gave to `bsp_init`, then exit. pid 0 names
//! that function by its module's position in the loader's list and its offset there,
//! which are the same in every copy of one executable whatever the address-space layout,
//! in `BULKWIRE_SPMD_ENTRY` as `MODULE:OFFSET:CHECK:NAME`.
//!
//! A process jumps to that address, so a value that points anywhere else (into the ELF
//! header, as one did, or into data) must be refused before the jump: the address must
//! lie in an executable segment of the named module, and `CHECK` (a hash of the module's
//! position and name, the offset and the first code bytes there, computed by the process
//! that began the section) must match what this copy finds there, so that a value edited
//! by hand, cut short or made for another build of the program is refused too.

use bulkwire_bsp::say;
use std::ffi::{CStr, c_int, c_void};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// The function the program last gave to `bsp_init` (0: none).
static SPMD: AtomicUsize = AtomicUsize::new(0);

/// This process is running its section's function (set once, before calling it).
static ENTERED: AtomicBool = AtomicBool::new(false);

pub(crate) type SpmdFn = extern "C" fn();

/// `bsp_init` was called inside a running section: a `bsp_begin` there begins a nested
/// section rather than being a second `bsp_begin` by mistake.
static NAMED_INSIDE: AtomicBool = AtomicBool::new(false);

/// Records `f` as the SPMD function of the sections to come (`inside`: named inside a
/// running section, for a nested one).
pub(crate) fn record(f: SpmdFn, inside: bool) {
    SPMD.store(f as usize, Ordering::SeqCst);
    if inside {
        NAMED_INSIDE.store(true, Ordering::SeqCst);
    }
}

/// Whether the program named a function with `bsp_init` inside a running section.
pub(crate) fn named_inside_a_section() -> bool {
    NAMED_INSIDE.load(Ordering::SeqCst)
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
    let end = exec_end(index, f).ok_or_else(|| {
        format!("the SPMD function at {f:#x} lies in no executable segment of {name:?}")
    })?;
    let offset = f - base;
    let check = checksum(index, offset, &name, f, end);
    Ok(format!("{index}:{offset:x}:{check:016x}:{name}"))
}

/// What `BULKWIRE_SPMD_ENTRY` accepts, for the messages that refuse a value.
const ACCEPTED: &str = "the value bsp_begin sets for the processes of a later SPMD section \
                        (MODULE:OFFSET:CHECK:NAME), naming a function in an executable \
                        segment of this program";

/// Code bytes at the function that go into its checksum.
const CHECKED_CODE: usize = 16;

/// FNV-1a over the module's position and name, the offset, and up to [`CHECKED_CODE`]
/// bytes of code at `addr` (fewer if the executable segment ends first at `end`).
fn checksum(index: usize, offset: usize, name: &str, addr: usize, end: usize) -> u64 {
    let n = CHECKED_CODE.min(end.saturating_sub(addr));
    // SAFETY: [addr, addr + n) lies inside an executable segment the loader mapped (the
    // callers found it with `exec_end`); such segments are mapped readable.
    let code = unsafe { std::slice::from_raw_parts(addr as *const u8, n) };
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let parts: [&[u8]; 4] = [
        &(index as u64).to_le_bytes(),
        &(offset as u64).to_le_bytes(),
        name.as_bytes(),
        code,
    ];
    for b in parts.iter().flat_map(|p| p.iter()) {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// An entry's fields: module position, offset, check, module name.
fn parse_entry(entry: &str) -> Option<(usize, usize, u64, &str)> {
    let mut it = entry.splitn(4, ':');
    let index = it.next()?.parse().ok()?;
    let offset = usize::from_str_radix(it.next()?, 16).ok()?;
    let check = it.next().filter(|c| c.len() == 16)?;
    let check = u64::from_str_radix(check, 16).ok()?;
    Some((index, offset, check, it.next()?))
}

/// The section's function, if this process was started for a later SPMD section and has
/// not entered it yet.
fn pending_entry(call: &str) -> Option<&'static str> {
    static ENTRY: OnceLock<Option<String>> = OnceLock::new();
    let e = ENTRY.get_or_init(|| {
        // Settings that cannot be used end the process here: a process started for a
        // later section must not run `main` from the top instead.
        let s = crate::settings::or_exit(call);
        s.launch
            .job
            .clone()
            .filter(|e| e.rank > 0)
            .and_then(|e| e.entry)
    });
    e.as_deref().filter(|_| !ENTERED.load(Ordering::SeqCst))
}

/// At the first call into the library of a process started for a later SPMD section: runs
/// the section's function instead of the rest of `main`, and exits.
pub(crate) fn divert(call: &str) {
    let Some(entry) = pending_entry(call) else {
        return;
    };
    ENTERED.store(true, Ordering::SeqCst);
    let f = resolve(entry).unwrap_or_else(|why| {
        say(&format!(
            "{call}: BULKWIRE_SPMD_ENTRY={entry:?} is not accepted ({why}): expected {ACCEPTED}"
        ));
        std::process::exit(1)
    });
    f();
    // Its bsp_end ends this process; a function that returned without one had no section.
    say(&format!(
        "{call}: the SPMD function given to bsp_init returned without bsp_begin ... bsp_end"
    ));
    std::process::exit(1)
}

/// Whether this process is running a later section's function (its `bsp_init` must not
/// run the function it is given).
pub(crate) fn entered() -> bool {
    ENTERED.load(Ordering::SeqCst)
}

/// The function `entry` names in this process, or why it names none: checked before
/// anything jumps there (see the module's notes).
fn resolve(entry: &str) -> Result<SpmdFn, String> {
    let (index, offset, check, name) =
        parse_entry(entry).ok_or_else(|| "not of the form MODULE:OFFSET:CHECK:NAME".to_string())?;
    let (base, found) = nth_module(index).ok_or_else(|| format!("no module #{index} here"))?;
    if found != name {
        return Err(format!(
            "module #{index} is {found:?} here but {name:?} in the process that began the \
             section"
        ));
    }
    let addr = base.wrapping_add(offset);
    let end = exec_end(index, addr).ok_or_else(|| {
        format!("offset {offset:#x} lies in no executable segment of module {name:?}")
    })?;
    if checksum(index, offset, name, addr, end) != check {
        return Err(format!(
            "the check does not match the code at offset {offset:#x} of module {name:?}: \
             the value was not made by this program's bsp_begin"
        ));
    }
    // SAFETY: the address is the start of the same function as in the process that began
    // the section: same module, same offset, inside an executable segment, and the same
    // code bytes there (the check above).
    Ok(unsafe { std::mem::transmute::<usize, SpmdFn>(addr) })
}

/// The end of the executable segment of module `index` that holds `addr`, if one does.
fn exec_end(index: usize, addr: usize) -> Option<usize> {
    struct Find {
        index: usize,
        addr: usize,
        seen: usize,
        end: Option<usize>,
    }
    unsafe extern "C" fn visit_exec(
        info: *mut libc::dl_phdr_info,
        _: usize,
        data: *mut c_void,
    ) -> c_int {
        // SAFETY: dl_iterate_phdr hands over a valid info and the `Find` passed to it.
        let (info, w) = unsafe { (&*info, &mut *(data as *mut Find)) };
        let i = w.seen;
        w.seen += 1;
        if i != w.index {
            return 0;
        }
        let base = info.dlpi_addr as usize;
        for k in 0..info.dlpi_phnum as usize {
            // SAFETY: the loader gives dlpi_phnum program headers at dlpi_phdr.
            let ph = unsafe { &*info.dlpi_phdr.add(k) };
            let lo = base.wrapping_add(ph.p_vaddr as usize);
            let hi = lo.wrapping_add(ph.p_memsz as usize);
            if ph.p_type == libc::PT_LOAD
                && ph.p_flags & libc::PF_X != 0
                && (lo..hi).contains(&w.addr)
            {
                w.end = Some(hi);
            }
        }
        1
    }
    let mut w = Find {
        index,
        addr,
        seen: 0,
        end: None,
    };
    // SAFETY: the callback only reads the loader's structures while the loader holds them.
    unsafe { libc::dl_iterate_phdr(Some(visit_exec), (&mut w as *mut Find).cast()) };
    w.end
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
        record(probe, false);
        let e = entry_for_next_section().unwrap();
        let f = resolve(&e).unwrap();
        assert_eq!(f as usize, probe as *const () as usize, "{e}");
        assert!(resolve("0:1:0000000000000000:no such module").is_err());
        assert!(resolve("x").is_err());
        assert!(resolve("999999:0:0000000000000000:").is_err());
    }

    /// Values that point nowhere are refused before any jump: offset 0 (the ELF header,
    /// where a rank once jumped and crashed) even with a check computed for it, data, a
    /// check that does not match, and the form of earlier builds.
    #[test]
    fn entries_that_point_nowhere_are_refused() {
        record(probe, false);
        let e = entry_for_next_section().unwrap();
        let (index, offset, check, name) = parse_entry(&e).unwrap();
        let (base, _) = nth_module(index).unwrap();
        // The header: readable, not executable.
        let header = format!(
            "{index}:0:{:016x}:{name}",
            checksum(index, 0, name, base, base + CHECKED_CODE)
        );
        let why = resolve(&header).unwrap_err();
        assert!(why.contains("no executable segment"), "{why}");
        // Data of the same module.
        static DATA: [u8; 64] = [0; 64];
        let data = DATA.as_ptr() as usize - base;
        let why = resolve(&format!("{index}:{data:x}:{check:016x}:{name}")).unwrap_err();
        assert!(why.contains("no executable segment"), "{why}");
        // Inside the code, but not where the check says (one byte into the function).
        let why = resolve(&format!("{index}:{:x}:{check:016x}:{name}", offset + 1)).unwrap_err();
        assert!(why.contains("does not match"), "{why}");
        let why = resolve(&format!("{index}:{offset:x}:{:016x}:{name}", check ^ 1)).unwrap_err();
        assert!(why.contains("does not match"), "{why}");
        // The three-field form: no check.
        let why = resolve(&format!("{index}:{offset:x}:{name}")).unwrap_err();
        assert!(why.contains("MODULE:OFFSET:CHECK:NAME"), "{why}");
    }
}
