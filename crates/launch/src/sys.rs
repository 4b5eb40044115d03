//! Thin, safe wrappers over the few Linux calls std does not offer: pidfds (to watch children
//! in the same poll loop as the sockets), `poll`, `eventfd`, signals to process groups, and
//! the kernel's random source.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

/// How a process ended, as `waitid` reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExitKind {
    /// Exited normally with this status.
    Code(i32),
    /// Killed by this signal (`core`: it dumped core).
    Signal { signal: i32, core: bool },
}

impl ExitKind {
    pub fn success(self) -> bool {
        self == ExitKind::Code(0)
    }
}

impl std::fmt::Display for ExitKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            ExitKind::Code(c) => write!(f, "status {c}"),
            ExitKind::Signal { signal, core } => {
                write!(f, "signal {signal}")?;
                if let Some(name) = signal_name(signal) {
                    write!(f, ", {name}")?;
                }
                if core {
                    write!(f, ", core dumped")?;
                }
                Ok(())
            }
        }
    }
}

/// The usual name of a signal, for messages.
pub fn signal_name(sig: i32) -> Option<&'static str> {
    Some(match sig {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGTRAP => "SIGTRAP",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGUSR1 => "SIGUSR1",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGUSR2 => "SIGUSR2",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGALRM => "SIGALRM",
        libc::SIGTERM => "SIGTERM",
        libc::SIGXCPU => "SIGXCPU",
        libc::SIGSYS => "SIGSYS",
        _ => return None,
    })
}

fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// A pidfd for `pid`: readable once the process has exited. Works on a zombie too, so it
/// may be opened after spawning without a race (only we reap our children).
pub fn pidfd_open(pid: u32) -> io::Result<OwnedFd> {
    // SAFETY: plain syscall with integer arguments; a non-negative result is a new fd we own.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd was just returned by the kernel and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// Reaps the process behind `pidfd` if it has exited (`Ok(None)`: still running).
pub fn pidfd_try_reap(pidfd: &OwnedFd) -> io::Result<Option<ExitKind>> {
    // SAFETY: siginfo_t is plain data; waitid fills it.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    // SAFETY: valid pidfd and a valid siginfo pointer.
    cvt(unsafe {
        libc::waitid(
            libc::P_PIDFD,
            pidfd.as_raw_fd() as libc::id_t,
            &mut info,
            libc::WEXITED | libc::WNOHANG,
        )
    })?;
    // SAFETY: after a successful waitid, si_pid and si_status are the valid union members.
    let (pid, status) = unsafe { (info.si_pid(), info.si_status()) };
    if pid == 0 {
        return Ok(None);
    }
    Ok(Some(match info.si_code {
        libc::CLD_EXITED => ExitKind::Code(status),
        libc::CLD_DUMPED => ExitKind::Signal {
            signal: status,
            core: true,
        },
        _ => ExitKind::Signal {
            signal: status,
            core: false,
        },
    }))
}

/// Sends `sig` to the process group `pgid` (best effort: an empty group is not an error).
pub fn kill_group(pgid: u32, sig: i32) {
    // SAFETY: killpg with integer arguments has no memory-safety preconditions.
    unsafe {
        libc::killpg(pgid as libc::pid_t, sig);
    }
}

/// Sends `sig` to the pidfd's process: unlike a pid, a pidfd can't name a recycled process.
pub fn pidfd_kill(pidfd: &OwnedFd, sig: i32) {
    // SAFETY: plain syscall on a pidfd we own; a null siginfo is allowed.
    unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_raw_fd(),
            sig,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        );
    }
}

/// `poll(2)` over `fds`; an interruption by a signal counts as a timeout.
pub fn poll(fds: &mut [libc::pollfd], timeout: Option<Duration>) -> io::Result<usize> {
    let ms = match timeout {
        None => -1,
        // Round up so a 0.4 ms deadline doesn't spin with a 0 ms timeout.
        Some(t) => t.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32,
    };
    // SAFETY: fds is a valid, exclusively borrowed slice of pollfd.
    let r = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
    if r >= 0 {
        return Ok(r as usize);
    }
    let e = io::Error::last_os_error();
    if e.kind() == io::ErrorKind::Interrupted {
        // A signal (ours, forwarded through the self-pipe) interrupted: the caller's loop
        // recomputes its deadlines, so "nothing ready" is the right answer.
        return Ok(0);
    }
    Err(e)
}

/// A non-blocking, close-on-exec eventfd.
pub fn eventfd() -> io::Result<OwnedFd> {
    // SAFETY: plain syscall; a non-negative result is a new fd we own.
    let fd = cvt(unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) })?;
    // SAFETY: fresh fd from the kernel.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Makes an eventfd readable (adds 1 to its counter).
pub fn eventfd_signal(fd: &OwnedFd) {
    let one: u64 = 1;
    // SAFETY: writes 8 bytes from a valid u64 to an fd we own. A full counter (EAGAIN) still
    // leaves it readable, which is all we need.
    unsafe {
        libc::write(fd.as_raw_fd(), (&one as *const u64).cast(), 8);
    }
}

/// A close-on-exec pipe: (read end, write end).
pub fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: fds points to two writable ints.
    cvt(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) })?;
    // SAFETY: both fds are fresh from the kernel.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

pub fn set_nonblocking(fd: RawFd) -> io::Result<()> {
    // SAFETY: fcntl on an fd the caller owns, integer arguments.
    unsafe {
        let fl = cvt(libc::fcntl(fd, libc::F_GETFL))?;
        cvt(libc::fcntl(fd, libc::F_SETFL, fl | libc::O_NONBLOCK))?;
    }
    Ok(())
}

/// Fills `buf` from the kernel's random source (`getrandom(2)`, which blocks only until the
/// pool is initialised at boot). Aborts the process if the kernel refuses: a secret or nonce
/// must never fall back on anything guessable.
pub fn random_bytes(buf: &mut [u8]) {
    let mut got = 0;
    while got < buf.len() {
        // SAFETY: writes at most buf.len() - got bytes into buf[got..].
        let n = unsafe { libc::getrandom(buf[got..].as_mut_ptr().cast(), buf.len() - got, 0) };
        if n > 0 {
            got += n as usize;
        } else if io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
            eprintln!(
                "bulkwire: the kernel's random source failed: {}",
                io::Error::last_os_error()
            );
            std::process::abort();
        }
    }
}

/// 64 random bits from the kernel (job ids and cookies need uniqueness, not secrecy, but the
/// kernel source is the simplest way to avoid two concurrent jobs picking the same one).
pub fn random_u64() -> u64 {
    let mut v = 0u64;
    // SAFETY: writes at most 8 bytes into v.
    let n = unsafe { libc::getrandom((&mut v as *mut u64).cast(), 8, 0) };
    if n == 8 {
        return v;
    }
    // getrandom can't really fail for 8 bytes; fall back on time and pid all the same.
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    splitmix64(t ^ (u64::from(std::process::id()) << 32))
}

/// A good 64-bit mixer (Steele et al.), used to turn job ids into cookies.
pub fn splitmix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// FNV-1a over a string: stable across processes and hosts (unlike std's hasher), so every
/// rank derives the same job id from a launcher's job name.
pub fn fnv1a64(s: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in s.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// `isatty(fd)`.
pub fn isatty(fd: RawFd) -> bool {
    // SAFETY: isatty only inspects the fd.
    unsafe { libc::isatty(fd) == 1 }
}

/// An I/O error in words, naming descriptor exhaustion plainly (EMFILE: this process's
/// limit, `ulimit -n`; ENFILE: the whole system's), which otherwise surfaces much later as a
/// connection that never answers.
pub fn describe_io(e: &io::Error) -> String {
    match e.raw_os_error() {
        Some(libc::EMFILE) => {
            format!("this process is out of file descriptors (EMFILE, {e}): raise ulimit -n")
        }
        Some(libc::ENFILE) => {
            format!("the system is out of file descriptors (ENFILE, {e})")
        }
        _ => e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn descriptor_exhaustion_is_named() {
        let e = std::io::Error::from_raw_os_error(libc::EMFILE);
        let t = super::describe_io(&e);
        assert!(t.contains("EMFILE") && t.contains("ulimit -n"), "{t}");
        let t = super::describe_io(&std::io::Error::from_raw_os_error(libc::ENFILE));
        assert!(t.contains("ENFILE"), "{t}");
        let t = crate::LaunchError::Connect {
            addr: "127.0.0.1:1".parse().unwrap(),
            source: e,
        }
        .to_string();
        assert!(t.contains("EMFILE"), "{t}");
    }
}
