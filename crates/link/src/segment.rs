//! Shared-memory segments among the processes of a job that run on one host.
//!
//! One process per host (the lowest rank there, the *leader*) creates the segment; the others
//! attach after a rendezvous round carries where it is; a second round tells the leader that
//! everyone has mapped it, and the leader then drops the last name it had. Every process of
//! the job takes part in both rounds (the rendezvous is job-wide), even those alone on their
//! host.
//!
//! # Why memfd and not `shm_open`
//!
//! The segment is an anonymous `memfd_create` file, never a name in `/dev/shm`:
//!
//! - **Nothing can leak.** A `shm_open` name lives until someone unlinks it; a process killed
//!   between creating and unlinking leaves it in `/dev/shm` until reboot. A memfd is freed by
//!   the kernel when the last descriptor and mapping go, whatever kills the processes.
//! - **No SIGBUS from a peer.** The leader seals the file (`F_SEAL_SHRINK | F_SEAL_GROW |
//!   F_SEAL_SEAL`) before publishing it, and attachers check the seals: nobody, hostile or
//!   buggy, can `ftruncate` the file under our mapping (with `shm_open` anyone holding it can,
//!   and every process touching the lost pages dies of SIGBUS).
//!
//! Attachers open the leader's descriptor through `/proc/<pid>/fd/<fd>` (the leader keeps it
//! open until the second round). That needs what `/proc` needs: same user and PID namespace
//! as the leader (the processes of a job on one host have both). The round-one blob carries
//! the pid, the descriptor number, the size and a random nonce that the segment header
//! repeats, so a reused pid or descriptor is detected instead of mapped.
//!
//! # Trust
//!
//! Nothing read from the segment decides an offset or a length here: the layout is computed
//! by each process from the group size and its own configuration, and the header is only
//! compared with what the process expects. Layers that read peer-written words (rings,
//! sequence numbers) validate them before use; see [`crate::shm`] and [`crate::netcache`].

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64};

use crate::Rank;

/// The job-wide exchange that segment creation needs: every rank contributes a blob and gets
/// everyone's, in rank order (`bulkwire_launch::Control::allgather`, or an in-process
/// stand-in in tests). Every rank of the job must make the same sequence of calls.
pub trait Rendezvous {
    fn allgather(&mut self, blob: &[u8]) -> io::Result<Vec<Vec<u8>>>;
}

impl<F: FnMut(&[u8]) -> io::Result<Vec<Vec<u8>>>> Rendezvous for F {
    fn allgather(&mut self, blob: &[u8]) -> io::Result<Vec<Vec<u8>>> {
        self(blob)
    }
}

/// The job's processes that share this host, in rank order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostGroup {
    /// This process's rank in the job.
    pub rank: Rank,
    /// The job size.
    pub nprocs: u32,
    /// Ranks on this host, ascending (this process's included).
    pub ranks: Vec<Rank>,
    /// This process's index in `ranks`.
    pub me: usize,
}

impl HostGroup {
    /// The group of `rank` given, for every rank of the job, whether it runs on this host
    /// (`local[rank]` must be true).
    pub fn new(rank: Rank, local: &[bool]) -> io::Result<HostGroup> {
        if local.get(rank as usize) != Some(&true) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("rank {rank} is not marked local to itself"),
            ));
        }
        if local.len() > u32::MAX as usize {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "job too large"));
        }
        let ranks: Vec<Rank> = (0..local.len() as u32)
            .filter(|&r| local[r as usize])
            .collect();
        let me = ranks
            .iter()
            .position(|&r| r == rank)
            .expect("rank is local");
        Ok(HostGroup {
            rank,
            nprocs: local.len() as u32,
            ranks,
            me,
        })
    }

    /// Number of processes on this host.
    pub fn len(&self) -> usize {
        self.ranks.len()
    }

    /// Never true: the group holds at least this process.
    pub fn is_empty(&self) -> bool {
        self.ranks.is_empty()
    }

    /// The rank that creates the host's segments.
    pub fn leader(&self) -> Rank {
        self.ranks[0]
    }

    /// Whether this process is the leader.
    pub fn is_leader(&self) -> bool {
        self.me == 0
    }
}

/// Bytes before the caller's region: the header below, padded so that the region starts on
/// its own cache lines (128 bytes: adjacent-line prefetchers pair 64-byte lines).
pub const HEADER_BYTES: usize = 256;

/// Alignment of the caller's region and of the offsets layers use within it.
pub const LINE: usize = 128;

const MAGIC: u64 = u64::from_le_bytes(*b"bwireSEG");
const VERSION: u32 = 1;
const BLOB_MAGIC: u32 = u32::from_le_bytes(*b"BWSG");
/// Round-two status codes.
const ATTACHED: u8 = 1;
const FAILED: u8 = 2;
/// Largest segment we agree to create or map (a sanity bound on a peer's blob).
pub const MAX_SEGMENT: usize = 1 << 40;

/// Header at offset 0, written by the leader before anyone else can see the segment.
#[repr(C)]
struct Header {
    magic: u64,
    version: u32,
    members: u32,
    data_len: u64,
    nonce: u64,
    tag: u64,
}

/// A shared mapping among the processes of one host. Dropping it unmaps it; the memory is
/// freed once every process has done so (or died).
pub struct Segment {
    base: NonNull<u8>,
    len: usize,
    data_len: usize,
    nonce: u64,
    group: HostGroup,
}

// SAFETY: the mapping is owned by the Segment and lives as long as it; all access through it
// goes through raw pointers or atomics whose users document their own synchronisation.
unsafe impl Send for Segment {}
// SAFETY: as above; &Segment hands out only atomics and raw pointers.
unsafe impl Sync for Segment {}

impl std::fmt::Debug for Segment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Segment")
            .field("len", &self.len)
            .field("nonce", &format_args!("{:#018x}", self.nonce))
            .field("group", &self.group)
            .finish()
    }
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg)
}

/// FNV-1a of a name: the tag that tells segments of different purposes apart.
fn tag_of(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

fn random_u64() -> u64 {
    let mut v = [0u8; 8];
    // SAFETY: getrandom writes at most 8 bytes into our 8-byte buffer.
    let r = unsafe { libc::getrandom(v.as_mut_ptr().cast(), 8, 0) };
    if r != 8 {
        // Uniqueness, not secrecy, is what the nonce is for: time and pid will do.
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        return t ^ ((std::process::id() as u64) << 32);
    }
    u64::from_le_bytes(v)
}

fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// What the leader publishes in round one.
struct Offer {
    pid: u32,
    fd: i32,
    len: u64,
    nonce: u64,
}

impl Offer {
    fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(28);
        v.extend_from_slice(&BLOB_MAGIC.to_le_bytes());
        v.extend_from_slice(&self.pid.to_le_bytes());
        v.extend_from_slice(&self.fd.to_le_bytes());
        v.extend_from_slice(&self.len.to_le_bytes());
        v.extend_from_slice(&self.nonce.to_le_bytes());
        v
    }

    fn decode(b: &[u8]) -> Option<Offer> {
        if b.len() != 28 || b[0..4] != BLOB_MAGIC.to_le_bytes() {
            return None;
        }
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().unwrap());
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap());
        Some(Offer {
            pid: u32_at(4),
            fd: u32_at(8) as i32,
            len: u64_at(12),
            nonce: u64_at(20),
        })
    }
}

impl Segment {
    /// Creates (leader) or attaches to (others) a segment of `data_len` bytes for the
    /// caller, shared by `group`, and returns it with the `extra` blob of every member of the
    /// group (in group order), carried by the second round.
    ///
    /// Collective over the whole job: every rank calls it, in the same order relative to
    /// other exchanges, with the same `name` (which tells segments of different purposes
    /// apart) and, on one host, the same `data_len`. Two rendezvous rounds. When any member
    /// of the group fails to attach, every member gets an error naming it.
    pub fn create(
        group: &HostGroup,
        name: &str,
        data_len: usize,
        extra: &[u8],
        rv: &mut dyn Rendezvous,
    ) -> io::Result<(Segment, Vec<Vec<u8>>)> {
        let len = HEADER_BYTES
            .checked_add(data_len.next_multiple_of(LINE))
            .filter(|&l| l <= MAX_SEGMENT)
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("segment of {data_len} bytes is too large"),
                )
            })?;
        let tag = tag_of(name);
        // Round one: the leader offers the segment. It keeps the descriptor open until
        // round two, so that the others can open it through /proc.
        let mut leader_fd: Option<OwnedFd> = None;
        let mut made: Option<Segment> = None;
        let mut offer = Vec::new();
        if group.is_leader() {
            match Self::make(group, name, len, data_len, tag) {
                Ok((fd, seg)) => {
                    offer = Offer {
                        pid: std::process::id(),
                        fd: fd.as_raw_fd(),
                        len: len as u64,
                        nonce: seg.nonce,
                    }
                    .encode();
                    leader_fd = Some(fd);
                    made = Some(seg);
                }
                // Tell the others (an empty blob is "no segment"), then fail.
                Err(e) => {
                    rv.allgather(&[])?;
                    rv.allgather(&[FAILED])?;
                    return Err(e);
                }
            }
        }
        let offers = rv.allgather(&offer)?;
        if offers.len() != group.nprocs as usize {
            return Err(invalid(format!(
                "rendezvous returned {} blobs for {} ranks",
                offers.len(),
                group.nprocs
            )));
        }
        // Attach (or keep what we made), then round two: everyone's status and extra blob.
        let attached = match made {
            Some(seg) => Ok(seg),
            None => Self::attach(group, &offers[group.leader() as usize], len, data_len, tag),
        };
        let mut status = Vec::with_capacity(1 + extra.len());
        match &attached {
            Ok(_) => {
                status.push(ATTACHED);
                status.extend_from_slice(extra);
            }
            Err(e) => {
                status.push(FAILED);
                status.extend_from_slice(e.to_string().as_bytes());
            }
        }
        let statuses = rv.allgather(&status)?;
        // Everyone of the host has mapped it (or given up): the leader's descriptor, the
        // last way to reach the file by name, goes now.
        drop(leader_fd);
        let seg = attached?;
        if statuses.len() != group.nprocs as usize {
            return Err(invalid(format!(
                "rendezvous returned {} blobs for {} ranks",
                statuses.len(),
                group.nprocs
            )));
        }
        let mut extras = Vec::with_capacity(group.len());
        for &r in &group.ranks {
            let s = &statuses[r as usize];
            match s.first() {
                Some(&ATTACHED) => extras.push(s[1..].to_vec()),
                Some(&FAILED) => {
                    return Err(io::Error::other(format!(
                        "shared memory segment {name:?}: rank {r} could not attach: {}",
                        String::from_utf8_lossy(&s[1..])
                    )));
                }
                _ => {
                    return Err(invalid(format!(
                        "shared memory segment {name:?}: rank {r} sent a malformed status"
                    )));
                }
            }
        }
        Ok((seg, extras))
    }

    /// The leader's part: a sealed memfd with the header written, and its mapping.
    fn make(
        group: &HostGroup,
        name: &str,
        len: usize,
        data_len: usize,
        tag: u64,
    ) -> io::Result<(OwnedFd, Segment)> {
        let cname = CString::new(format!("bulkwire-{name}"))
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in segment name"))?;
        // SAFETY: cname is a valid C string; the flags are plain constants.
        let fd = cvt(unsafe {
            libc::memfd_create(cname.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING)
        })?;
        // SAFETY: fd is a fresh descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: plain system call on our descriptor.
        cvt(unsafe { libc::ftruncate(fd.as_raw_fd(), len as libc::off_t) })?;
        // Sealed before anyone else can open it: nobody can shrink it under a mapping.
        // SAFETY: plain fcntl on our descriptor.
        cvt(unsafe {
            libc::fcntl(
                fd.as_raw_fd(),
                libc::F_ADD_SEALS,
                libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL,
            )
        })?;
        let seg = Segment::map(&fd, len, data_len, random_u64(), group.clone())?;
        let h = Header {
            magic: MAGIC,
            version: VERSION,
            members: group.len() as u32,
            data_len: data_len as u64,
            nonce: seg.nonce,
            tag,
        };
        // SAFETY: the mapping is at least HEADER_BYTES long and page-aligned; nobody else
        // has it yet.
        unsafe { seg.base.as_ptr().cast::<Header>().write(h) };
        Ok((fd, seg))
    }

    /// The others' part: open the leader's descriptor, check it, map it, check the header.
    fn attach(
        group: &HostGroup,
        blob: &[u8],
        len: usize,
        data_len: usize,
        tag: u64,
    ) -> io::Result<Segment> {
        let offer = Offer::decode(blob).ok_or_else(|| {
            invalid(format!(
                "rank {} (the host's leader) offered no usable segment",
                group.leader()
            ))
        })?;
        if offer.len != len as u64 {
            return Err(invalid(format!(
                "the leader's segment has {} bytes, this process expects {len} \
                 (different shared-memory settings on one host?)",
                offer.len
            )));
        }
        let path = format!("/proc/{}/fd/{}", offer.pid, offer.fd);
        let cpath = CString::new(path.clone()).expect("no NUL");
        // SAFETY: cpath is a valid C string.
        let fd = unsafe { libc::open(cpath.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
        if fd < 0 {
            let e = io::Error::last_os_error();
            return Err(io::Error::new(e.kind(), format!("opening {path}: {e}")));
        }
        // SAFETY: fd is a fresh descriptor we own.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: plain fcntl on our descriptor.
        let seals = cvt(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GET_SEALS) })
            .map_err(|e| invalid(format!("{path} is not a sealed memfd: {e}")))?;
        if seals & libc::F_SEAL_SHRINK == 0 {
            return Err(invalid(format!("{path} may shrink under us (not sealed)")));
        }
        // SAFETY: an all-zero stat is a valid value for fstat to overwrite.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: st is a valid, writable stat.
        cvt(unsafe { libc::fstat(fd.as_raw_fd(), &mut st) })?;
        if (st.st_size as u64) < len as u64 {
            return Err(invalid(format!(
                "{path} has {} bytes, expected {len}",
                st.st_size
            )));
        }
        let seg = Segment::map(&fd, len, data_len, offer.nonce, group.clone())?;
        // SAFETY: the mapping is at least HEADER_BYTES long and page-aligned; reading plain
        // integers that a peer may be writing gives some value, which is only compared.
        let h = unsafe { seg.base.as_ptr().cast::<Header>().read_volatile() };
        if h.magic != MAGIC
            || h.version != VERSION
            || h.members != group.len() as u32
            || h.data_len != data_len as u64
            || h.nonce != offer.nonce
            || h.tag != tag
        {
            return Err(invalid(format!(
                "{path} is not the segment the leader offered (header mismatch: \
                 {} members, {} bytes, nonce {:#x}, expected {}, {data_len}, {:#x})",
                h.members,
                h.data_len,
                h.nonce,
                group.len(),
                offer.nonce
            )));
        }
        Ok(seg)
    }

    fn map(
        fd: &OwnedFd,
        len: usize,
        data_len: usize,
        nonce: u64,
        group: HostGroup,
    ) -> io::Result<Segment> {
        // SAFETY: a fresh shared mapping of a file we checked is at least `len` long and
        // sealed against shrinking, so every page of it stays backed.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Segment {
            base: NonNull::new(p.cast()).expect("mmap never returns null on success"),
            len,
            data_len,
            nonce,
            group,
        })
    }

    /// The processes sharing the segment.
    pub fn group(&self) -> &HostGroup {
        &self.group
    }

    /// A random value unique to this segment (the same in every process).
    pub fn nonce(&self) -> u64 {
        self.nonce
    }

    /// Start of the caller's region (aligned to [`LINE`]).
    pub fn data(&self) -> *mut u8 {
        // SAFETY: HEADER_BYTES < len, so the result stays inside the mapping.
        unsafe { self.base.as_ptr().add(HEADER_BYTES) }
    }

    /// Length of the caller's region.
    pub fn data_len(&self) -> usize {
        self.data_len
    }

    /// The 64-bit word at byte `off` of the caller's region, as an atomic; `None` when out
    /// of bounds or misaligned.
    pub fn u64_at(&self, off: usize) -> Option<&AtomicU64> {
        if !off.is_multiple_of(8) || off.checked_add(8)? > self.data_len {
            return None;
        }
        // SAFETY: in bounds and 8-aligned (the region is page-aligned + HEADER_BYTES); the
        // mapping lives as long as &self; AtomicU64 has the layout of u64 and any bit
        // pattern is valid.
        Some(unsafe { &*self.data().add(off).cast::<AtomicU64>() })
    }

    /// The 32-bit word at byte `off` of the caller's region, as an atomic.
    pub fn u32_at(&self, off: usize) -> Option<&AtomicU32> {
        if !off.is_multiple_of(4) || off.checked_add(4)? > self.data_len {
            return None;
        }
        // SAFETY: as in u64_at, for 4 bytes.
        Some(unsafe { &*self.data().add(off).cast::<AtomicU32>() })
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        // SAFETY: base/len describe a mapping that this Segment alone owns.
        unsafe { libc::munmap(self.base.as_ptr().cast(), self.len) };
    }
}

/// An in-process [`Rendezvous`] among `n` threads, for tests and for ranks run as threads:
/// each call is an allgather over a shared table, fenced by a barrier on both sides.
pub fn thread_rendezvous(n: usize) -> Vec<ThreadRendezvous> {
    let shared = std::sync::Arc::new((
        std::sync::Mutex::new(vec![Vec::new(); n]),
        std::sync::Barrier::new(n),
    ));
    (0..n)
        .map(|rank| ThreadRendezvous {
            rank,
            shared: shared.clone(),
        })
        .collect()
}

/// One thread's end of [`thread_rendezvous`].
pub struct ThreadRendezvous {
    rank: usize,
    #[allow(clippy::type_complexity)]
    shared: std::sync::Arc<(std::sync::Mutex<Vec<Vec<u8>>>, std::sync::Barrier)>,
}

impl Rendezvous for ThreadRendezvous {
    fn allgather(&mut self, blob: &[u8]) -> io::Result<Vec<Vec<u8>>> {
        let (table, barrier) = &*self.shared;
        table.lock().unwrap_or_else(|e| e.into_inner())[self.rank] = blob.to_vec();
        barrier.wait();
        let all = table.lock().unwrap_or_else(|e| e.into_inner()).clone();
        // Nobody overwrites the table for the next round before everyone has read it.
        barrier.wait();
        Ok(all)
    }
}
