//! `bsp_direct_get` (MulticoreBSP for C): a get that completes at once, outside the
//! superstep's exchange, reading the source as it is at that moment.
//!
//! On one host the reader copies straight out of the other process's registered area
//! with `process_vm_readv` (as point-to-point's single copy does), after checking once,
//! by the token it publishes, that the process it names is that peer. Elsewhere, or when
//! the kernel refuses, it is a round trip: a `DGET` request that the server answers from
//! whichever thread drives its transport (a wait loop, or the progress thread while the
//! program computes), so it never waits for the server to call the library.

use bulkwire_engine::vm::{self, Published};
use bytes::Bytes;

use crate::BspError;
use crate::core::{Core, Net, Poll};
use crate::error::misuse;
use crate::wire::{self, Reader};

/// Whether a peer's memory can be read in place.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum InPlace {
    /// Not known yet: the first round trip brings the peer's token.
    #[default]
    Unknown,
    /// On this host, readable: its process id.
    Pid(i32),
    /// Another host, or the kernel refuses.
    No,
}

/// A checked direct get: the registration and where the source lies in the server.
#[derive(Clone, Copy, Debug)]
pub struct DirectGet {
    pub pid: u32,
    pub slot: u32,
    pub offset: usize,
    pub len: usize,
    /// The source's address in the server (offset included), or this process's own
    /// address when it is the server.
    pub addr: u64,
}

impl Core {
    /// Checks `bsp_direct_get(pid, src, offset, _, len)` as a get (pid, registration,
    /// the remote bounds) and locates its source.
    pub fn direct_target(
        &self,
        call: &str,
        pid: u32,
        src: usize,
        offset: usize,
        len: usize,
    ) -> Result<DirectGet, BspError> {
        self.check_pid(call, pid)?;
        let slot = self.slot(call, src)?;
        self.check_bounds(call, pid, slot, src, offset, len)?;
        let reg = self.regs.get(slot).expect("lookup gives live slots");
        let base = if pid == self.pid() {
            reg.addr as u64
        } else {
            reg.addrs[pid as usize]
        };
        Ok(DirectGet {
            pid,
            slot,
            offset,
            len,
            addr: base.wrapping_add(offset as u64),
        })
    }
}

impl Net {
    /// The process id to read `peer`'s memory with, if this process may: `who` is what
    /// the peer published, checked the first time (its token read where it says), as a
    /// direct get's reply is.
    pub(crate) fn readable(&mut self, peer: usize, who: &Published) -> Option<i32> {
        if self.in_place[peer] == InPlace::Unknown {
            self.in_place[peer] = if who.verify() {
                InPlace::Pid(who.pid as i32)
            } else {
                InPlace::No
            };
        }
        match self.in_place[peer] {
            InPlace::Pid(os) if os as u32 == who.pid => Some(os),
            _ => None,
        }
    }

    /// Reads `pieces` (`(remote, dst, len)`) of `peer`'s memory, process `os` (from
    /// [`Net::readable`]). `Ok(false)` if the kernel refuses: `peer` is not read in place
    /// again. Any other error is a bad address.
    ///
    /// # Safety
    /// Every `dst` must be valid for writes of its `len` bytes.
    pub(crate) unsafe fn read_from(
        &mut self,
        peer: usize,
        os: i32,
        pieces: &[(u64, *mut u8, usize)],
    ) -> std::io::Result<bool> {
        // SAFETY: forwarded contract.
        match unsafe { vm::read_many(os, pieces) } {
            Ok(()) => Ok(true),
            Err(e) if vm::is_refusal(&e) => {
                self.in_place[peer] = InPlace::No;
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }

    /// Reads `g.len` bytes of `g` into `dst` now: in place if the server is on this host,
    /// else by a round trip.
    ///
    /// # Safety
    /// `dst` must be writable for `g.len` bytes.
    pub unsafe fn direct_get(
        &mut self,
        call: &str,
        g: DirectGet,
        dst: *mut u8,
    ) -> Result<(), BspError> {
        let peer = g.pid as usize;
        if let InPlace::Pid(os) = self.in_place[peer] {
            // Refused (from now on) or a bad address: the long way, where the server says
            // what is wrong.
            // SAFETY: the caller hands over `dst` for `g.len` bytes; the kernel checks the
            // remote range against the server's address space.
            if let Ok(true) = unsafe { self.read_from(peer, os, &[(g.addr, dst, g.len)]) } {
                return Ok(());
            }
        }
        let reply = self.round_trip(g)?;
        let bad = || BspError::Protocol(format!("pid {} sent a malformed direct get reply", g.pid));
        let mut r = Reader::at(&reply, wire::HEAD);
        let status = r.u8().ok_or_else(bad)?;
        let published = r.bytes(Published::LEN).and_then(Published::from_bytes);
        if self.in_place[peer] == InPlace::Unknown {
            self.in_place[peer] = match published {
                Some(p) if p.verify() => InPlace::Pid(p.pid as i32),
                _ => InPlace::No,
            };
        }
        match status {
            wire::DREPLY_OK => {
                let data = r.bytes(g.len).filter(|_| r.is_empty()).ok_or_else(bad)?;
                // SAFETY: the caller hands over `dst` for `g.len` bytes.
                unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), dst, g.len) };
                Ok(())
            }
            wire::DREPLY_UNREGISTERED => misuse(format!(
                "{call}: pid {} has no registration #{} any more (it popped it)",
                g.pid, g.slot
            )),
            _ => misuse(format!(
                "{call}: reading {} bytes at offset {} from pid {}'s area falls outside it",
                g.len, g.offset, g.pid
            )),
        }
    }

    /// Sends a `DGET` for `g` and waits for its `DREPLY`.
    fn round_trip(&mut self, g: DirectGet) -> Result<Vec<u8>, BspError> {
        let mut req = Vec::with_capacity(wire::HEAD + 30);
        wire::put_head(&mut req, wire::DGET, self.step);
        wire::put_var(&mut req, g.slot as u64);
        wire::put_var(&mut req, g.offset as u64);
        wire::put_var(&mut req, g.len as u64);
        self.t.send(g.pid, Bytes::from(req), false)?;
        self.t.expect(g.pid, true);
        let mut got = None;
        let r = self.wait(|n| {
            got = n.take(|from, k, _| from == g.pid && k == wire::DREPLY);
            Ok(if got.is_some() {
                Poll::Done
            } else {
                Poll::Wait(None)
            })
        });
        self.t.expect(g.pid, false);
        r?;
        Ok(got.expect("the wait ended with the reply").1)
    }

    /// A `DGET` arrived: answered now if it is of this superstep, else (the sender is a
    /// barrier ahead and may name registrations this process has not made effective yet)
    /// kept for [`Net::serve_pending_direct`].
    pub(crate) fn on_direct_request(
        &mut self,
        from: u32,
        step: u32,
        msg: Vec<u8>,
    ) -> Result<(), BspError> {
        if step == self.step {
            self.serve_direct(from, &msg)
        } else {
            self.pending_direct.push((from, msg));
            Ok(())
        }
    }

    /// Answers the direct gets of the superstep just begun.
    pub(crate) fn serve_pending_direct(&mut self) -> Result<(), BspError> {
        if self.pending_direct.is_empty() {
            return Ok(());
        }
        let step = self.step;
        for (from, msg) in std::mem::take(&mut self.pending_direct) {
            if wire::head(&msg).is_some_and(|(_, s)| s == step) {
                self.serve_direct(from, &msg)?;
            } else {
                self.pending_direct.push((from, msg));
            }
        }
        Ok(())
    }

    fn serve_direct(&mut self, from: u32, msg: &[u8]) -> Result<(), BspError> {
        let mut r = Reader::at(msg, wire::HEAD);
        let (slot, offset, len) = (|| Some((r.size()?, r.size()?, r.size()?)))()
            .filter(|_| r.is_empty())
            .ok_or_else(|| BspError::Protocol(format!("pid {from} sent a malformed direct get")))?;
        let area = self.local.get(slot).copied().flatten();
        let (status, src) = match area {
            None => (wire::DREPLY_UNREGISTERED, None),
            Some((addr, size)) if offset.checked_add(len).is_some_and(|e| e <= size) => {
                (wire::DREPLY_OK, Some(addr + offset))
            }
            Some(_) => (wire::DREPLY_BOUNDS, None),
        };
        let mut reply = Vec::with_capacity(wire::HEAD + 1 + Published::LEN + len);
        wire::put_head(&mut reply, wire::DREPLY, self.step);
        reply.push(status);
        reply.extend_from_slice(&Published::mine().to_bytes());
        if let Some(src) = src {
            let at = reply.len();
            // SAFETY: the range lies in an area this process registered, which the program
            // keeps valid while registered. The program may be writing it meanwhile: the
            // bytes are then torn, which is what bsp_direct_get documents.
            unsafe {
                std::ptr::copy_nonoverlapping(src as *const u8, reply.as_mut_ptr().add(at), len);
                reply.set_len(at + len);
            }
        }
        self.t.send(from, Bytes::from(reply), false)?;
        Ok(())
    }
}
