//! The link layer ("packet module" of the RMPP paper): unreliable datagrams between the ranks of
//! a job. Every transport is one type behind the [`Link`] trait:
//!
//! - [`inproc`]: in-process queues, for unit tests;
//! - [`udp`]: UDP sockets with `sendmmsg`/`recvmmsg` batching and GSO/GRO;
//! - [`sim`]: a deterministic simulated network with virtual time;
//! - [`shm`]: shared-memory rings between the processes of a job on one host;
//! - [`route`]: one link per peer (shared memory on this host, UDP to the others);
//! - [`mcast`]: the job's IP multicast group, for reliable multicast collectives;
//! - [`faults`]: a wrapper over any link that loses, corrupts, duplicates, reorders and delays.
//!
//! [`segment`] creates the shared-memory segments of a host (the rings' and others), and
//! [`netcache`] partitions one among the host's processes for collectives.
//!
//! Links carry opaque bytes; the wire format and everything above live in
//! `bulkwire-protocol` and `bulkwire-engine`.

pub mod batch;
pub mod faults;
pub mod inproc;
pub mod mcast;
pub mod netcache;
pub mod route;
pub mod segment;
pub mod shm;
pub mod sim;
pub mod udp;

pub use batch::{RX_BATCH_BYTES, RxBatch, Tx};
pub use faults::{FaultConfig, FaultStats, Faulty};
pub use mcast::{McastLink, McastMode, McastSettings};
pub use netcache::NetCache;
pub use route::RouteLink;
pub use segment::{HostGroup, Rendezvous, Segment, thread_rendezvous};
pub use shm::{ShmConfig, ShmLink, ShmSizes, ShmStats};
pub use udp::{UdpBinding, UdpConfig, UdpLink, UdpStats};

use std::io;
use std::time::Duration;

/// A process's index in its job, 0..nprocs.
pub type Rank = u32;

/// Unreliable datagrams between ranks: what a protocol needs from the network.
///
/// All calls are non-blocking except [`Link::wait`]. A datagram may be lost, duplicated,
/// reordered or corrupted; it is never split (a datagram arrives whole or not at all, though
/// its bytes may be damaged).
pub trait Link: Send {
    /// This endpoint's rank.
    fn rank(&self) -> Rank;

    /// Number of ranks reachable (the job size).
    fn nprocs(&self) -> u32;

    /// What the link can carry and promises, for the engine to size its packets and
    /// batches and to choose its checks. Built on each call: ask once and keep it.
    fn capabilities(&self) -> LinkCaps;

    /// Sends as many of `batch` as the link accepts now, in order, and returns how many.
    /// A return smaller than `batch.len()` means the link is momentarily full (the caller
    /// retries the rest later); a datagram that cannot be delivered at all (peer gone) is
    /// counted as sent and lost, as the network would.
    fn send(&mut self, batch: &[Tx<'_>]) -> io::Result<usize>;

    /// Receives whatever has arrived, up to the batch's capacity, without blocking.
    /// Returns the number of datagrams now in `batch` (it is cleared first).
    fn recv(&mut self, batch: &mut RxBatch) -> io::Result<usize>;

    /// Blocks until a datagram may be ready or `timeout` passes (`None`: no limit).
    /// Spurious wake-ups are allowed.
    fn wait(&mut self, timeout: Option<Duration>) -> io::Result<()>;

    /// Hands each waiting datagram to `f` (at most `batch.slots()` of them) and returns how
    /// many. A slice is valid only during its call. By default the datagrams are received
    /// into `batch` first; a link whose datagrams already lie in memory this process can
    /// read (shared memory) passes them in place and saves that copy.
    fn recv_each(&mut self, batch: &mut RxBatch, f: &mut dyn FnMut(&[u8])) -> io::Result<usize> {
        let n = self.recv(batch)?;
        for i in 0..n {
            f(batch.get(i));
        }
        Ok(n)
    }

    /// File descriptor to poll for readability, if the link has one (lets an engine
    /// sleep on several links, or a progress thread on this one).
    fn poll_fd(&self) -> Option<std::os::fd::RawFd> {
        None
    }

    /// The caller is about to sleep on [`Link::poll_fd`]. Links whose senders only make the
    /// descriptor readable when asked to (shared memory rings a doorbell only for a receiver
    /// that said it sleeps) advertise it here. Returns false when datagrams may already be
    /// waiting: the caller must then not sleep. Always followed by [`Link::end_sleep`].
    fn prepare_sleep(&mut self) -> bool {
        true
    }

    /// The sleep announced by [`Link::prepare_sleep`] is over (whether or not it happened).
    fn end_sleep(&mut self) {}
}

/// What a link can carry and what it promises ([`Link::capabilities`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LinkCaps {
    /// Largest datagram, in bytes, that may be sent to each peer in one piece, by rank
    /// (0 for a peer the link does not reach).
    pub max_datagram: Vec<usize>,
    /// Size of receive slots a caller should give [`Link::recv`]: the largest datagram,
    /// or more where the link coalesces datagrams (UDP GRO needs 64 KiB slots).
    pub recv_slot: usize,
    /// The link itself never loses, corrupts or reorders, and carries nothing but this
    /// job's datagrams (in-process queues; shared memory among the job's processes,
    /// without injected faults). Protocols still work over it; a job over such a link
    /// runs `utopia` unless a protocol is named.
    pub reliable: bool,
    /// A datagram arrives exactly as sent or not at all: the link may lose, duplicate or
    /// reorder, but never alters bytes and carries nothing but datagrams from this host
    /// (UDP between addresses of one host goes through the kernel's memory, never a
    /// wire). The engine skips the CRC on such a link; the job's cookie still screens
    /// foreign datagrams. Every process of a job must reach the same answer, so it may
    /// only depend on job-wide facts (the address table, the fault settings). True
    /// whenever `reliable` is.
    pub intact: bool,
    /// Only this job's processes can put a datagram on the link: in-process queues, the
    /// shared memory the job created (its processes' own, mapped by no one else), the
    /// simulated network. A socket is not private: anyone who reaches its address can
    /// send to it, another user of the host included. Where a link is not private, a job
    /// authenticates every datagram with its secret (the engine's packet MAC).
    pub private: bool,
}

impl LinkCaps {
    /// A link that may lose, damage and reorder, with datagrams of up to `max` bytes to
    /// each of `nprocs` ranks and receive slots of that size.
    pub fn lossy(nprocs: u32, max: usize) -> LinkCaps {
        LinkCaps {
            max_datagram: vec![max; nprocs as usize],
            recv_slot: max,
            reliable: false,
            intact: false,
            private: false,
        }
    }

    /// Largest datagram to `peer` (0 for a rank the link does not reach or know).
    pub fn max_to(&self, peer: Rank) -> usize {
        self.max_datagram.get(peer as usize).copied().unwrap_or(0)
    }
}

impl<L: Link + ?Sized> Link for Box<L> {
    fn rank(&self) -> Rank {
        (**self).rank()
    }
    fn nprocs(&self) -> u32 {
        (**self).nprocs()
    }
    fn capabilities(&self) -> LinkCaps {
        (**self).capabilities()
    }
    fn send(&mut self, batch: &[Tx<'_>]) -> io::Result<usize> {
        (**self).send(batch)
    }
    fn recv(&mut self, batch: &mut RxBatch) -> io::Result<usize> {
        (**self).recv(batch)
    }
    fn wait(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        (**self).wait(timeout)
    }
    fn recv_each(&mut self, batch: &mut RxBatch, f: &mut dyn FnMut(&[u8])) -> io::Result<usize> {
        (**self).recv_each(batch, f)
    }
    fn poll_fd(&self) -> Option<std::os::fd::RawFd> {
        (**self).poll_fd()
    }
    fn prepare_sleep(&mut self) -> bool {
        (**self).prepare_sleep()
    }
    fn end_sleep(&mut self) {
        (**self).end_sleep()
    }
}

/// Blocks in `ppoll` until one of `fds` is ready (see their `revents`) or `timeout` passes
/// (`None`: no limit; nanosecond resolution, where `poll` has milliseconds). A signal
/// (`EINTR`) ends the wait early like a spurious wake-up; other failures are errors.
pub fn poll_fds(fds: &mut [libc::pollfd], timeout: Option<Duration>) -> io::Result<()> {
    let ts = timeout.map(|t| libc::timespec {
        tv_sec: t.as_secs().min(i32::MAX as u64) as _,
        tv_nsec: t.subsec_nanos() as _,
    });
    let tsp = ts
        .as_ref()
        .map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: `fds` is a valid, initialised array of `fds.len()` pollfd structures (a
    // negative fd is ignored by the kernel), `tsp` a valid timespec or null, no signal mask.
    let r = unsafe {
        libc::ppoll(
            fds.as_mut_ptr(),
            fds.len() as libc::nfds_t,
            tsp,
            std::ptr::null(),
        )
    };
    if r < 0 {
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
    Ok(())
}

/// Waits for `fd` to be readable, at most `timeout` ([`poll_fds`] on one descriptor).
pub fn poll_readable(fd: std::os::fd::RawFd, timeout: Option<Duration>) -> io::Result<()> {
    poll_fds(
        &mut [libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        }],
        timeout,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn poll_waits_for_readable_or_timeout() {
        let mut fds = [0; 2];
        // SAFETY: a valid array of two descriptors for pipe to fill.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        let t = std::time::Instant::now();
        poll_readable(fds[0], Some(Duration::from_millis(20))).unwrap();
        assert!(t.elapsed() >= Duration::from_millis(20), "times out");
        // SAFETY: writes one byte from a valid buffer to our pipe.
        assert_eq!(unsafe { libc::write(fds[1], [1u8].as_ptr().cast(), 1) }, 1);
        let mut p = [libc::pollfd {
            fd: fds[0],
            events: libc::POLLIN,
            revents: 0,
        }];
        poll_fds(&mut p, None).unwrap();
        assert_eq!(p[0].revents, libc::POLLIN);
        assert!(
            poll_readable(-5, Some(Duration::ZERO)).is_ok(),
            "ignored fd"
        );
        // SAFETY: closes the two descriptors pipe gave us, once.
        unsafe {
            libc::close(fds[0]);
            libc::close(fds[1]);
        }
    }
}
