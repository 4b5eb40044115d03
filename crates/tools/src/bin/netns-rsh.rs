//! `netns-rsh`: a remote shell for a test bed of hosts made of network namespaces. Called
//! as ssh is, `netns-rsh HOST COMMAND...`, it runs `sh -c "COMMAND..."` inside the network
//! namespace (of those under /var/run/netns, as `ip netns add` makes them) that owns
//! HOST's address. With it, `bsprun --rsh netns-rsh -H 10.0.0.1:2,10.0.0.2:2 ./prog` and
//! `mpirun --mca plm_rsh_agent netns-rsh` start their ranks on namespace "hosts" as they
//! would on machines over ssh. Needs root (setns).
//!
//! The command also gets a hostname of its own (a UTS namespace named after the network
//! namespace), as a machine has: Open MPI keys its session directories and PMIx's shared
//! store by hostname, and its daemons on "hosts" that all answered to this machine's name
//! collided in one directory (`mkdir: File exists`, a segmentation fault in PMIx).

use std::ffi::CString;
use std::fs::File;
use std::net::{IpAddr, ToSocketAddrs};
use std::os::fd::AsRawFd;
use std::process::ExitCode;

const NETNS_DIR: &str = "/var/run/netns";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    // ssh's options that launchers pass (-x: no X11 forwarding, -n: no stdin) mean
    // nothing here.
    let args: Vec<&String> = args
        .iter()
        .skip_while(|a| matches!(a.as_str(), "-x" | "-n" | "-T" | "-q"))
        .collect();
    let Some((host, command)) = args.split_first() else {
        eprintln!("usage: netns-rsh HOST COMMAND...");
        return ExitCode::from(2);
    };
    if command.is_empty() {
        eprintln!("netns-rsh: no command (an interactive shell is not offered)");
        return ExitCode::from(2);
    }
    let name = match enter(host) {
        Ok(name) => name,
        Err(e) => {
            eprintln!("netns-rsh: {host}: {e}");
            return ExitCode::from(255);
        }
    };
    if let Err(e) = own_hostname(&name) {
        eprintln!("netns-rsh: {host}: cannot give it the hostname {name}: {e}");
        return ExitCode::from(255);
    }
    let line = command
        .iter()
        .map(|s| s.as_str())
        .collect::<Vec<_>>()
        .join(" ");
    let argv = [c"/bin/sh".to_owned(), c"-c".to_owned(), cstr(&line)];
    let ptrs: Vec<*const libc::c_char> = argv
        .iter()
        .map(|a| a.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect();
    // SAFETY: a NULL-terminated argv of valid C strings; execv returns only on failure.
    unsafe { libc::execv(ptrs[0], ptrs.as_ptr()) };
    eprintln!(
        "netns-rsh: cannot run /bin/sh: {}",
        std::io::Error::last_os_error()
    );
    ExitCode::from(255)
}

fn cstr(s: &str) -> CString {
    CString::new(s.replace('\0', "")).expect("no NUL left")
}

/// Puts this process in a UTS namespace of its own named `name`.
fn own_hostname(name: &str) -> std::io::Result<()> {
    // SAFETY: unshare with one flag; this process has one thread.
    if unsafe { libc::unshare(libc::CLONE_NEWUTS) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let name = &name.as_bytes()[..name.len().min(64)];
    // SAFETY: a pointer and length of a live byte slice.
    if unsafe { libc::sethostname(name.as_ptr().cast(), name.len()) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Moves this process into the namespace that owns `host`'s address: its name.
fn enter(host: &str) -> Result<String, String> {
    let ip: IpAddr = (host, 0)
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve ({e})"))?
        .map(|a| a.ip())
        .next()
        .ok_or("no address")?;
    let dir = std::fs::read_dir(NETNS_DIR)
        .map_err(|e| format!("no network namespaces ({NETNS_DIR}: {e})"))?;
    // A namespace being made or removed (by another user of the machine) can't be
    // entered: skip it, and say so only if no namespace has the address.
    let mut refused = None;
    for e in dir.flatten() {
        let Ok(ns) = File::open(e.path()) else {
            continue;
        };
        // SAFETY: setns on a namespace fd we opened; this process has one thread.
        if unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
            refused = Some(format!(
                "; cannot enter {}: {}",
                e.path().display(),
                std::io::Error::last_os_error()
            ));
            continue;
        }
        if owns(ip) {
            return Ok(e.file_name().to_string_lossy().into_owned());
        }
    }
    Err(format!(
        "no namespace in {NETNS_DIR} has the address {ip} on a link that is up{}",
        refused.unwrap_or_default()
    ))
}

/// Whether an interface of the current network namespace that is up and has a carrier
/// holds `ip` (a host whose link is down is as unreachable as a machine unplugged).
fn owns(ip: IpAddr) -> bool {
    if ip.is_loopback() {
        return false;
    }
    let mut found = false;
    let mut ifa: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills a list we free below; we only read it in between.
    if unsafe { libc::getifaddrs(&mut ifa) } != 0 {
        return false;
    }
    let mut p = ifa;
    while !p.is_null() {
        // SAFETY: p is a node of the list getifaddrs returned.
        let i = unsafe { &*p };
        let live = libc::IFF_UP as u32 | libc::IFF_RUNNING as u32;
        if i.ifa_flags & live == live && !i.ifa_addr.is_null() {
            // SAFETY: ifa_addr points to a sockaddr; its family says which kind.
            let fam = i32::from(unsafe { (*i.ifa_addr).sa_family });
            let addr = match fam {
                // SAFETY: an AF_INET address is a sockaddr_in.
                libc::AF_INET => Some(IpAddr::from(
                    u32::from_be(unsafe {
                        (*(i.ifa_addr as *const libc::sockaddr_in)).sin_addr.s_addr
                    })
                    .to_be_bytes(),
                )),
                // SAFETY: an AF_INET6 address is a sockaddr_in6.
                libc::AF_INET6 => Some(IpAddr::from(unsafe {
                    (*(i.ifa_addr as *const libc::sockaddr_in6))
                        .sin6_addr
                        .s6_addr
                })),
                _ => None,
            };
            found |= addr == Some(ip);
        }
        p = i.ifa_next;
    }
    // SAFETY: the list from getifaddrs, freed once.
    unsafe { libc::freeifaddrs(ifa) };
    found
}
