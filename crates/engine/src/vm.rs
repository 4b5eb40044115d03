//! Single-copy transfers between processes of one host with `process_vm_readv`: after
//! point-to-point's rendezvous handshake the receiver copies straight out of the sender's
//! buffer, one copy instead of two (sender to link, link to receiver) and no packets at
//! all; `bsp_direct_get` reads a peer's registered area the same way.
//!
//! The kernel allows it when the reader may ptrace the target (same user and a dumpable
//! target, or `CAP_SYS_PTRACE`; Yama's `ptrace_scope` may forbid it). The pid in a peer's
//! business card may also name another process (different PID namespaces on one host), so
//! each peer is verified once: its published random token is read at its published address
//! and must match. A refused or failed read falls back to the transport.

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};

/// This process's token: random, nonzero, its address published to the job.
static TOKEN: AtomicU64 = AtomicU64::new(0);

fn random_u64() -> u64 {
    let mut v = 0u64;
    // SAFETY: getrandom writes at most 8 bytes into the u64 we own.
    let n = unsafe { libc::getrandom((&mut v as *mut u64).cast(), 8, 0) };
    if n != 8 {
        // No entropy source: time and pid still make a foreign match unlikely.
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        v = t ^ (u64::from(std::process::id()) << 32);
    }
    v | 1
}

/// What a process publishes so that peers on its host may read its memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Published {
    pub pid: u32,
    pub token_addr: u64,
    pub token: u64,
}

impl Published {
    pub const LEN: usize = 20;

    /// This process's pid and token (created on first use).
    pub fn mine() -> Published {
        let mut t = TOKEN.load(Ordering::SeqCst);
        if t == 0 {
            let fresh = random_u64();
            t = match TOKEN.compare_exchange(0, fresh, Ordering::SeqCst, Ordering::SeqCst) {
                Ok(_) => fresh,
                Err(other) => other,
            };
        }
        Published {
            pid: std::process::id(),
            token_addr: TOKEN.as_ptr() as u64,
            token: t,
        }
    }

    pub fn to_bytes(self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        b[..4].copy_from_slice(&self.pid.to_le_bytes());
        b[4..12].copy_from_slice(&self.token_addr.to_le_bytes());
        b[12..].copy_from_slice(&self.token.to_le_bytes());
        b
    }

    pub fn from_bytes(b: &[u8]) -> Option<Published> {
        if b.len() != Self::LEN {
            return None;
        }
        let u = |r: std::ops::Range<usize>| {
            let mut a = [0u8; 8];
            a[..r.len()].copy_from_slice(&b[r]);
            u64::from_le_bytes(a)
        };
        Some(Published {
            pid: u(0..4) as u32,
            token_addr: u(4..12),
            token: u(12..20),
        })
    }

    /// Whether this process can read `self`'s memory: reads the token in place.
    pub fn verify(&self) -> bool {
        if self.pid == 0 || self.pid > i32::MAX as u32 {
            return false;
        }
        let mut got = [0u8; 8];
        // SAFETY: `got` is a valid, writable 8-byte buffer.
        let r = unsafe { read(self.pid as i32, self.token_addr, got.as_mut_ptr(), 8) };
        r.is_ok() && u64::from_le_bytes(got) == self.token
    }
}

/// Whether an error means "never try this peer again" (permissions, no such process)
/// rather than a bad address for this one transfer.
pub fn is_refusal(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EPERM) | Some(libc::ESRCH) | Some(libc::ENOSYS) | Some(libc::EACCES)
    )
}

/// Copies pieces of process `pid`'s memory, each `(remote, dst, len)`, with as few
/// system calls as the kernel's vector limit allows (1024 pieces per call): a BSP message
/// of puts read in place is one call, not one per put.
///
/// # Safety
/// Every `dst` must be valid for writes of its `len` bytes and not otherwise accessed
/// meanwhile.
pub unsafe fn read_many(pid: i32, pieces: &[(u64, *mut u8, usize)]) -> io::Result<()> {
    // SAFETY: forwarded contract; the kernel writes only into the `dst`s.
    unsafe { transfer(libc::process_vm_readv, pid, pieces) }
}

/// Copies `len` bytes at `remote` in process `pid` to `dst`.
///
/// # Safety
/// `dst` must be valid for writes of `len` bytes and not otherwise accessed meanwhile.
pub unsafe fn read(pid: i32, remote: u64, dst: *mut u8, len: usize) -> io::Result<()> {
    // SAFETY: forwarded contract; the kernel writes only into `dst`.
    unsafe { transfer(libc::process_vm_readv, pid, &[(remote, dst, len)]) }
}

/// Copies `len` bytes from `src` to `remote` in process `pid` (the split copy: the
/// sender writes part of a message into the receiver's buffer while the receiver reads
/// the rest). The kernel allows it on the same terms as [`read`].
///
/// # Safety
/// `src` must be valid for reads of `len` bytes.
pub unsafe fn write(pid: i32, remote: u64, src: *const u8, len: usize) -> io::Result<()> {
    // SAFETY: forwarded contract; the kernel only reads `src`.
    unsafe {
        transfer(
            libc::process_vm_writev,
            pid,
            &[(remote, src.cast_mut(), len)],
        )
    }
}

/// `process_vm_readv` and `process_vm_writev` have one signature.
type VmCall = unsafe extern "C" fn(
    libc::pid_t,
    *const libc::iovec,
    libc::c_ulong,
    *const libc::iovec,
    libc::c_ulong,
    libc::c_ulong,
) -> isize;

/// Pieces `(remote, local, len)` between here and process `pid`, in the direction of
/// `call`, up to the kernel's vector limit per call, resumed after partial transfers
/// (inside a piece) and interruptions.
///
/// # Safety
/// Every `local` must be valid for its `len` bytes in the direction `call` uses it.
unsafe fn transfer(call: VmCall, pid: i32, pieces: &[(u64, *mut u8, usize)]) -> io::Result<()> {
    // IOV_MAX on Linux.
    const BATCH: usize = 1024;
    // The next piece to move and how much of it has moved.
    let (mut i, mut done) = (0usize, 0usize);
    let mut here = Vec::with_capacity(pieces.len().min(BATCH));
    let mut far = Vec::with_capacity(pieces.len().min(BATCH));
    loop {
        while i < pieces.len() && pieces[i].2 == done {
            (i, done) = (i + 1, 0);
        }
        if i == pieces.len() {
            return Ok(());
        }
        here.clear();
        far.clear();
        for (k, &(remote, local, len)) in pieces[i..].iter().take(BATCH).enumerate() {
            let skip = if k == 0 { done } else { 0 };
            here.push(libc::iovec {
                // SAFETY: `skip` is within the piece the caller handed over.
                iov_base: unsafe { local.add(skip) }.cast(),
                iov_len: len - skip,
            });
            far.push(libc::iovec {
                iov_base: remote.wrapping_add(skip as u64) as usize as *mut libc::c_void,
                iov_len: len - skip,
            });
        }
        // SAFETY: the local vectors lie in the caller's buffers (usable by contract); the
        // kernel checks the remote ones against the target's address space.
        let n = unsafe {
            call(
                pid,
                here.as_ptr(),
                here.len() as libc::c_ulong,
                far.as_ptr(),
                far.len() as libc::c_ulong,
                0,
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            return Err(io::Error::from_raw_os_error(libc::EFAULT));
        }
        // A short count stops inside one piece: go on from there.
        let mut left = n as usize;
        while left > 0 {
            let rest = pieces[i].2 - done;
            if left < rest {
                done += left;
                left = 0;
            } else {
                left -= rest;
                (i, done) = (i + 1, 0);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_itself_and_verifies_its_own_token() {
        let me = Published::mine();
        assert_eq!(Published::from_bytes(&me.to_bytes()), Some(me));
        assert!(me.verify());
        let wrong = Published {
            token: me.token ^ 2,
            ..me
        };
        assert!(!wrong.verify());
        let src: Vec<u8> = (0..100_000u32).map(|i| (i * 7) as u8).collect();
        let mut dst = vec![0u8; src.len()];
        // SAFETY: dst is a writable buffer of src.len() bytes.
        unsafe {
            read(
                me.pid as i32,
                src.as_ptr() as u64,
                dst.as_mut_ptr(),
                src.len(),
            )
        }
        .unwrap();
        assert_eq!(src, dst);
        let mut back = vec![0u8; src.len()];
        // SAFETY: src is readable for its length; back is this process's own buffer.
        unsafe {
            write(
                me.pid as i32,
                back.as_mut_ptr() as u64,
                src.as_ptr(),
                src.len(),
            )
        }
        .unwrap();
        assert_eq!(src, back);
        // A bad address is an error, not a crash.
        // SAFETY: as above.
        let e = unsafe { read(me.pid as i32, 8, dst.as_mut_ptr(), 16) }.unwrap_err();
        assert!(!is_refusal(&e), "{e}");
        // SAFETY: as above.
        let e = unsafe { write(me.pid as i32, 8, src.as_ptr(), 16) }.unwrap_err();
        assert!(!is_refusal(&e), "{e}");
    }

    #[test]
    fn reads_many_pieces_past_the_vector_limit() {
        let pid = std::process::id() as i32;
        let src: Vec<u8> = (0..300_000u32).map(|i| (i * 13 + i / 251) as u8).collect();
        let mut dst = vec![0u8; src.len()];
        // 3000 pieces of varied lengths (empty ones too), read in reverse order of their
        // place in `dst`, so that a piece moved to the wrong place shows.
        let mut pieces = Vec::new();
        let (mut at, mut k) = (0usize, 0usize);
        while at < src.len() {
            let len = ((k * 37) % 200).min(src.len() - at);
            pieces.push((src.as_ptr() as u64 + at as u64, at, len));
            at += len;
            k += 1;
        }
        assert!(pieces.len() > 2048);
        let base = dst.as_mut_ptr();
        // SAFETY: each piece is a distinct range of `dst`, written only by the call.
        let list: Vec<_> = pieces
            .iter()
            .rev()
            .map(|&(r, at, len)| (r, unsafe { base.add(at) }, len))
            .collect();
        // SAFETY: as above.
        unsafe { read_many(pid, &list) }.unwrap();
        assert_eq!(src, dst);
        // SAFETY: as above; a bad remote address is an error.
        let e = unsafe { read_many(pid, &[(8, base, 16)]) }.unwrap_err();
        assert!(!is_refusal(&e), "{e}");
    }
}
