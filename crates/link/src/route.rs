//! One link per peer: a composite that sends to each rank through the link chosen for it
//! (shared memory to the processes of this host, UDP to the others) and receives from both.
//!
//! - `send` splits the batch into runs of consecutive datagrams that take the same route and
//!   hands each run to its link, stopping at the first run a link does not take whole, so the
//!   count returned is still a prefix of the batch (what [`Link::send`] promises).
//! - `recv` alternates which link it asks first, and asks the second only when the first had
//!   nothing: both write into the caller's batch, which each link clears, so one batch holds
//!   one link's datagrams (the engine calls again while batches come back full).
//! - `poll_fd` is an epoll descriptor watching both links' descriptors: readable when either
//!   is. [`Link::prepare_sleep`] and [`Link::end_sleep`] go to both links.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

use crate::{Link, LinkCaps, Rank, RxBatch, Tx, poll_readable};

/// Which link a peer is reached through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    /// The first link (`near`: shared memory).
    Near,
    /// The second link (`far`: the network).
    Far,
}

/// Two links and the route of every peer. See the module documentation.
pub struct RouteLink<N: Link, F: Link> {
    near: N,
    far: F,
    routes: Vec<Route>,
    epoll: OwnedFd,
    /// Whether the next `recv` asks `far` first.
    far_first: bool,
}

impl<N: Link, F: Link> std::fmt::Debug for RouteLink<N, F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RouteLink")
            .field("rank", &self.near.rank())
            .field("routes", &self.routes)
            .finish()
    }
}

impl<N: Link, F: Link> RouteLink<N, F> {
    /// The two links in the order the next receive asks them: each goes first every
    /// other time, so neither starves the other.
    fn turns(&mut self) -> (&mut dyn Link, &mut dyn Link) {
        self.far_first = !self.far_first;
        if self.far_first {
            (&mut self.far, &mut self.near)
        } else {
            (&mut self.near, &mut self.far)
        }
    }

    /// Joins `near` and `far` (same rank and job size); `routes[r]` says which reaches
    /// rank `r`. Both links must have a [`Link::poll_fd`].
    pub fn new(near: N, far: F, routes: Vec<Route>) -> io::Result<RouteLink<N, F>> {
        let bad = |m: String| Err(io::Error::new(io::ErrorKind::InvalidInput, m));
        if near.rank() != far.rank() || near.nprocs() != far.nprocs() {
            return bad(format!(
                "links disagree: rank {}/{} of {}/{}",
                near.rank(),
                far.rank(),
                near.nprocs(),
                far.nprocs()
            ));
        }
        if routes.len() != near.nprocs() as usize {
            return bad(format!(
                "{} routes for {} ranks",
                routes.len(),
                near.nprocs()
            ));
        }
        let (Some(nfd), Some(ffd)) = (near.poll_fd(), far.poll_fd()) else {
            return bad("both links need a pollable descriptor".into());
        };
        // SAFETY: plain system call; the result is checked.
        let ep = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if ep < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a fresh descriptor we own.
        let epoll = unsafe { OwnedFd::from_raw_fd(ep) };
        for fd in [nfd, ffd] {
            let mut ev = libc::epoll_event {
                events: libc::EPOLLIN as u32,
                u64: fd as u64,
            };
            // SAFETY: valid epoll and target descriptors and a valid event (level-triggered:
            // the epoll descriptor stays readable while either link is).
            let r = unsafe { libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, fd, &mut ev) };
            if r < 0 {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(RouteLink {
            near,
            far,
            routes,
            epoll,
            far_first: false,
        })
    }

    /// The route to `peer`.
    pub fn route(&self, peer: Rank) -> Option<Route> {
        self.routes.get(peer as usize).copied()
    }

    pub fn near(&self) -> &N {
        &self.near
    }

    pub fn far(&self) -> &F {
        &self.far
    }

    #[inline]
    fn route_of(&self, t: &Tx<'_>) -> Route {
        // Unknown ranks go far: the network link reports them as errors.
        self.routes
            .get(t.dst as usize)
            .copied()
            .unwrap_or(Route::Far)
    }
}

impl<N: Link, F: Link> Link for RouteLink<N, F> {
    fn rank(&self) -> Rank {
        self.near.rank()
    }

    fn nprocs(&self) -> u32 {
        self.near.nprocs()
    }

    fn capabilities(&self) -> LinkCaps {
        let (near, far) = (self.near.capabilities(), self.far.capabilities());
        let max_datagram = (0..self.nprocs())
            .map(|p| match self.route(p) {
                Some(Route::Near) => near.max_to(p),
                Some(Route::Far) => far.max_to(p),
                None => 0,
            })
            .collect();
        LinkCaps {
            max_datagram,
            recv_slot: near.recv_slot.max(far.recv_slot),
            reliable: near.reliable && far.reliable,
            intact: near.intact && far.intact,
            private: near.private && far.private,
        }
    }

    fn send(&mut self, batch: &[Tx<'_>]) -> io::Result<usize> {
        let mut pos = 0;
        while pos < batch.len() {
            let route = self.route_of(&batch[pos]);
            let mut end = pos + 1;
            while end < batch.len() && self.route_of(&batch[end]) == route {
                end += 1;
            }
            let run = &batch[pos..end];
            let r = match route {
                Route::Near => self.near.send(run),
                Route::Far => self.far.send(run),
            };
            let n = match r {
                Ok(n) => n,
                // What went before is sent; the error returns with the next call.
                Err(_) if pos > 0 => return Ok(pos),
                Err(e) => return Err(e),
            };
            pos += n;
            if n < run.len() {
                break;
            }
        }
        Ok(pos)
    }

    fn recv(&mut self, batch: &mut RxBatch) -> io::Result<usize> {
        let (a, b) = self.turns();
        match a.recv(batch)? {
            0 => b.recv(batch),
            n => Ok(n),
        }
    }

    fn recv_each(&mut self, batch: &mut RxBatch, f: &mut dyn FnMut(&[u8])) -> io::Result<usize> {
        let (a, b) = self.turns();
        match a.recv_each(batch, f)? {
            0 => b.recv_each(batch, f),
            n => Ok(n),
        }
    }

    fn wait(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        let r = if self.prepare_sleep() {
            poll_readable(self.epoll.as_raw_fd(), timeout)
        } else {
            Ok(())
        };
        self.end_sleep();
        r
    }

    fn poll_fd(&self) -> Option<RawFd> {
        Some(self.epoll.as_raw_fd())
    }

    fn prepare_sleep(&mut self) -> bool {
        // Both are asked (each is ended in end_sleep), even when the first says no.
        let a = self.near.prepare_sleep();
        let b = self.far.prepare_sleep();
        a && b
    }

    fn end_sleep(&mut self) {
        self.near.end_sleep();
        self.far.end_sleep();
    }
}
