//! The BSP cost profile (`BULKWIRE_PROFILE=FILE`): one fixed-size [`Record`] per superstep
//! and process, what the superstep cost (time computing, time in `bsp_sync`), what it
//! moved (h in bytes and messages) and what the protocol did for it (packets of the
//! BSPlib paper's Table 5).
//!
//! Records are appended in memory at the end of every `bsp_sync` and written at `bsp_end`,
//! each process to its own file, `FILE.<pid>`: no process's records pass through another
//! or through the launcher, the processes write at once, and a process over a given
//! transport (threads of one program) profiles the same way. [`read_set`] reads the files
//! of a run back; `bwbench profile FILE` turns them into tables, a timeline and the BSP
//! cost `W + H g + S l`.
//!
//! File layout (little-endian): the magic `bwprof1\n`, pid (u32), p (u32), the wall-clock
//! time of `bsp_begin` in nanoseconds since the Unix epoch (u64), the fields per record
//! (u32), the protocol's name (u32 length, bytes), the number of records (u64), then the
//! records, each that many u64 fields in the order of [`Record::fields`].

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use bulkwire_protocol::{PeerStats, Stats};

use crate::core::{Core, Counters, Net};

const MAGIC: &[u8; 8] = b"bwprof1\n";

/// Fields of a record on file.
pub const FIELDS: usize = 19;

/// One superstep of one process. Times in nanoseconds; counts are what happened from the
/// end of the previous `bsp_sync` (or `bsp_begin`) to the end of this one, so what the
/// progress thread did while the process computed counts in the superstep it belongs to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Record {
    /// Index of the superstep (0 for the one `bsp_begin` starts).
    pub step: u64,
    /// When the superstep began (the previous sync returned), since `bsp_begin`.
    pub start_ns: u64,
    /// From the start to the call of `bsp_sync` (or `bsp_end`).
    pub compute_ns: u64,
    /// Inside `bsp_sync`: the barrier, the data and waiting for the others.
    pub sync_ns: u64,
    /// Bytes of the superstep's DATA and REPLY messages handed to the transport /
    /// received (puts, gets, sends with their records' headers).
    pub bytes_out: u64,
    pub bytes_in: u64,
    /// Bytes of puts and gets within the process.
    pub bytes_local: u64,
    /// DATA and REPLY messages sent / received (the barrier's are not counted).
    pub messages_out: u64,
    pub messages_in: u64,
    /// The protocol's data packets (first sends and retransmissions) sent / received (every
    /// arrival). Over kernel TCP: segments.
    pub data_sent: u64,
    pub data_received: u64,
    /// Explicit (stand-alone) acknowledgements sent.
    pub acks_sent: u64,
    /// Packets freed by the superstep-colour rule rather than an acknowledgement.
    pub implicit_acks: u64,
    /// Acknowledgements that rode on data packets.
    pub piggybacked_acks: u64,
    pub retransmits: u64,
    /// Data packets dropped as already received.
    pub duplicates: u64,
    /// Other drops: outside the window, no buffer, damaged or foreign datagrams.
    pub drops: u64,
    /// Control packets sent (acknowledgements, nacks, prods, rmpp's control).
    pub control_sent: u64,
    /// The last superstep, ended by `bsp_end`.
    pub ending: bool,
}

impl Record {
    /// The fields in file order.
    pub fn fields(&self) -> [u64; FIELDS] {
        [
            self.step,
            self.start_ns,
            self.compute_ns,
            self.sync_ns,
            self.bytes_out,
            self.bytes_in,
            self.bytes_local,
            self.messages_out,
            self.messages_in,
            self.data_sent,
            self.data_received,
            self.acks_sent,
            self.implicit_acks,
            self.piggybacked_acks,
            self.retransmits,
            self.duplicates,
            self.drops,
            self.control_sent,
            u64::from(self.ending),
        ]
    }

    fn from_fields(f: &[u64; FIELDS]) -> Record {
        Record {
            step: f[0],
            start_ns: f[1],
            compute_ns: f[2],
            sync_ns: f[3],
            bytes_out: f[4],
            bytes_in: f[5],
            bytes_local: f[6],
            messages_out: f[7],
            messages_in: f[8],
            data_sent: f[9],
            data_received: f[10],
            acks_sent: f[11],
            implicit_acks: f[12],
            piggybacked_acks: f[13],
            retransmits: f[14],
            duplicates: f[15],
            drops: f[16],
            control_sent: f[17],
            ending: f[18] != 0,
        }
    }
}

/// One process's profile, as written at `bsp_end`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Profile {
    pub pid: u32,
    pub p: u32,
    /// Wall-clock time of `bsp_begin`, nanoseconds since the Unix epoch (puts the
    /// processes of a host on one time line).
    pub epoch_ns: u64,
    pub protocol: String,
    pub records: Vec<Record>,
}

/// The file process `pid` writes for the profile named `base`: `base.<pid>`.
pub fn path_of(base: &Path, pid: u32) -> PathBuf {
    let mut s = base.as_os_str().to_owned();
    s.push(format!(".{pid}"));
    s.into()
}

impl Profile {
    /// The file's bytes, in memory.
    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(64 + self.records.len() * FIELDS * 8);
        self.write_to(&mut v).expect("writing into memory");
        v
    }

    /// Writes the file's bytes to `w` (at `bsp_end`, through a buffer: the records go
    /// straight to the file rather than through a copy of them in memory).
    pub fn write_to(&self, w: &mut impl Write) -> std::io::Result<()> {
        w.write_all(MAGIC)?;
        w.write_all(&self.pid.to_le_bytes())?;
        w.write_all(&self.p.to_le_bytes())?;
        w.write_all(&self.epoch_ns.to_le_bytes())?;
        w.write_all(&(FIELDS as u32).to_le_bytes())?;
        w.write_all(&(self.protocol.len() as u32).to_le_bytes())?;
        w.write_all(self.protocol.as_bytes())?;
        w.write_all(&(self.records.len() as u64).to_le_bytes())?;
        for r in &self.records {
            for f in r.fields() {
                w.write_all(&f.to_le_bytes())?;
            }
        }
        Ok(())
    }

    /// Parses a profile file; `Err` says what is wrong with it. Fields past those this
    /// version knows are skipped.
    pub fn decode(b: &[u8]) -> Result<Profile, String> {
        let mut r = Bytes(b);
        if r.take(8)? != MAGIC {
            return Err("not a bulkwire profile (bad magic)".into());
        }
        let pid = r.u32()?;
        let p = r.u32()?;
        let epoch_ns = r.u64()?;
        let nfields = r.u32()? as usize;
        if nfields < FIELDS {
            return Err(format!(
                "records of {nfields} fields, fewer than the {FIELDS} this version reads"
            ));
        }
        let len = r.u32()? as usize;
        let protocol = String::from_utf8_lossy(r.take(len)?).into_owned();
        let count = r.u64()?;
        let size = (nfields as u64).saturating_mul(8);
        if count.saturating_mul(size) != r.0.len() as u64 {
            return Err(format!(
                "{count} records of {nfields} fields announced, {} bytes follow",
                r.0.len()
            ));
        }
        if p == 0 || pid >= p {
            return Err(format!("pid {pid} of p = {p}"));
        }
        let records =
            r.0.chunks_exact(nfields * 8)
                .map(|c| {
                    let mut f = [0u64; FIELDS];
                    for (i, x) in f.iter_mut().enumerate() {
                        *x = u64::from_le_bytes(c[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
                    }
                    Record::from_fields(&f)
                })
                .collect();
        Ok(Profile {
            pid,
            p,
            epoch_ns,
            protocol,
            records,
        })
    }

    /// Reads the file at `path`.
    pub fn read(path: &Path) -> Result<Profile, String> {
        let b = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
        Profile::decode(&b).map_err(|e| format!("{}: {e}", path.display()))
    }
}

/// Reads the profile of a run named `base`: `base.0` says how many processes there were,
/// then `base.1` ... are read; every file must belong to the same run.
pub fn read_set(base: &Path) -> Result<Vec<Profile>, String> {
    let first = Profile::read(&path_of(base, 0))?;
    let mut all = vec![first];
    for pid in 1..all[0].p {
        let path = path_of(base, pid);
        let x = Profile::read(&path)?;
        if x.pid != pid || x.p != all[0].p {
            return Err(format!(
                "{}: pid {} of p = {}, expected pid {pid} of p = {}",
                path.display(),
                x.pid,
                x.p,
                all[0].p
            ));
        }
        all.push(x);
    }
    Ok(all)
}

/// A cursor over a file's bytes.
struct Bytes<'a>(&'a [u8]);

impl<'a> Bytes<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        if self.0.len() < n {
            return Err("the file ends early".into());
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Ok(a)
    }

    fn u32(&mut self) -> Result<u32, String> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4")))
    }

    fn u64(&mut self) -> Result<u64, String> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8")))
    }
}

/// The counters a record is the difference of.
#[derive(Clone, Copy, Default)]
struct Totals {
    bsp: Counters,
    proto: PeerStats,
    link_drops: u64,
}

impl Totals {
    fn of(c: &Core, n: &Net) -> Totals {
        let t = n.transport();
        let mut proto = PeerStats::default();
        for r in (0..t.nprocs()).filter(|&r| r != t.rank()) {
            proto += &t.peer_stats(r);
        }
        Totals {
            bsp: c.counters,
            proto,
            link_drops: t.drops().total(),
        }
    }
}

/// A running process's profile: the records so far, and where they go.
pub(crate) struct Profiler {
    path: PathBuf,
    /// Created at `bsp_begin` (so a path that cannot be written fails the job at once);
    /// over a given transport, at `bsp_end`.
    file: Option<std::fs::File>,
    start: Instant,
    epoch_ns: u64,
    /// When the current superstep began.
    last: Instant,
    prev: Totals,
    pid: u32,
    p: u32,
    protocol: &'static str,
    records: Vec<Record>,
}

fn ns(d: std::time::Duration) -> u64 {
    d.as_nanos().min(u64::MAX as u128) as u64
}

impl Profiler {
    /// A profile of the process `c` over `n`, which began at `start`, written to
    /// `base.<pid>`. Counts start from here: what setting up the job sent is not in it.
    pub fn new(base: &Path, c: &Core, n: &Net, start: Instant) -> Profiler {
        let epoch_ns = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, ns)
            .saturating_sub(ns(start.elapsed()));
        Profiler {
            path: path_of(base, c.pid()),
            file: None,
            start,
            epoch_ns,
            last: start,
            prev: Totals::of(c, n),
            pid: c.pid(),
            p: c.nprocs(),
            protocol: n.transport().protocol_name(),
            records: Vec::with_capacity(1024),
        }
    }

    /// Creates the file now, so that a path that cannot be written is found at start.
    pub fn create(&mut self) -> Result<(), String> {
        // Never through a link or into another user's file: profiles go to paths a user
        // names, often in shared directories, and jobs may run as root.
        let f = bulkwire_launch::files::create_private(&self.path)
            .map_err(|e| format!("cannot create the profile file (BULKWIRE_PROFILE): {e}"))?;
        self.file = Some(f);
        Ok(())
    }

    /// The superstep that began at `self.last` called `bsp_sync` at `called` and it has
    /// just returned.
    pub fn record(&mut self, called: Instant, c: &Core, n: &Net, ending: bool) {
        let now = Instant::now();
        let t = Totals::of(c, n);
        let (a, b) = (&t, &self.prev);
        let (pa, pb) = (&a.proto, &b.proto);
        let d = |x: u64, y: u64| x.saturating_sub(y);
        let drops = |s: &PeerStats| s.drop_out_of_window + s.drop_no_buffer;
        self.records.push(Record {
            step: self.records.len() as u64,
            start_ns: ns(self.last - self.start),
            compute_ns: ns(called - self.last),
            sync_ns: ns(now - called),
            bytes_out: d(a.bsp.bytes_out, b.bsp.bytes_out),
            bytes_in: d(a.bsp.bytes_in, b.bsp.bytes_in),
            bytes_local: d(a.bsp.bytes_local, b.bsp.bytes_local),
            messages_out: d(a.bsp.messages_out, b.bsp.messages_out),
            messages_in: d(a.bsp.messages_in, b.bsp.messages_in),
            data_sent: d(pa.data_sent, pb.data_sent),
            data_received: d(pa.data_received, pb.data_received),
            acks_sent: d(pa.acks_sent, pb.acks_sent),
            implicit_acks: d(pa.implicit_acks, pb.implicit_acks),
            piggybacked_acks: d(pa.piggybacked_acks, pb.piggybacked_acks),
            retransmits: d(pa.retransmits, pb.retransmits),
            duplicates: d(pa.drop_duplicate, pb.drop_duplicate),
            drops: d(drops(pa) + a.link_drops, drops(pb) + b.link_drops),
            control_sent: d(pa.control_sent, pb.control_sent),
            ending,
        });
        self.prev = t;
        self.last = now;
    }

    /// Writes the profile (at `bsp_end`); `Err` names the file.
    pub fn write(&mut self) -> Result<(), String> {
        let prof = Profile {
            pid: self.pid,
            p: self.p,
            epoch_ns: self.epoch_ns,
            protocol: self.protocol.to_string(),
            records: std::mem::take(&mut self.records),
        };
        if self.file.is_none() {
            self.create()?;
        }
        let mut f = std::io::BufWriter::new(self.file.take().expect("created above"));
        let path = &self.path;
        let fail = |e: std::io::Error| {
            format!(
                "the profile could not be written to {}: {e}",
                path.display()
            )
        };
        prof.write_to(&mut f).map_err(fail)?;
        f.flush().map_err(fail)
    }
}

/// The packet figures of the BSPlib paper's Table 5 over `records`, as [`Stats`] gives
/// them for the statistics of `BULKWIRE_STATS`.
pub fn packet_stats(records: &[Record]) -> Stats {
    let mut s = PeerStats::default();
    for r in records {
        s.data_sent += r.data_sent;
        s.data_received += r.data_received;
        s.acks_sent += r.acks_sent;
        s.implicit_acks += r.implicit_acks;
        s.retransmits += r.retransmits;
        s.drop_duplicate += r.duplicates;
        s.drop_out_of_window += r.drops;
    }
    Stats { total: s }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Profile {
        let mut r = Record {
            step: 0,
            start_ns: 5,
            compute_ns: 1000,
            sync_ns: 300,
            bytes_out: 80,
            bytes_in: 96,
            messages_out: 1,
            messages_in: 1,
            data_sent: 2,
            data_received: 3,
            implicit_acks: 2,
            ..Record::default()
        };
        let mut records = vec![r];
        r.step = 1;
        r.ending = true;
        r.retransmits = 7;
        records.push(r);
        Profile {
            pid: 1,
            p: 2,
            epoch_ns: 1_700_000_000_000_000_000,
            protocol: "holefill".into(),
            records,
        }
    }

    #[test]
    fn profiles_round_trip() {
        let p = sample();
        let b = p.encode();
        assert_eq!(Profile::decode(&b), Ok(p.clone()));
        assert_eq!(b.len(), 8 + 4 + 4 + 8 + 4 + 4 + 8 + 8 + 2 * FIELDS * 8);
    }

    #[test]
    fn damaged_files_are_refused_with_a_reason() {
        let b = sample().encode();
        for cut in [0, 7, 20, b.len() - 1] {
            assert!(Profile::decode(&b[..cut]).is_err(), "cut at {cut}");
        }
        let mut bad = b.clone();
        bad[0] = b'x';
        assert!(Profile::decode(&bad).unwrap_err().contains("magic"));
        let mut bad = b.clone();
        bad[8..12].copy_from_slice(&5u32.to_le_bytes());
        assert!(
            Profile::decode(&bad)
                .unwrap_err()
                .contains("pid 5 of p = 2")
        );
        let mut longer = b.clone();
        longer.extend_from_slice(&[0; 8]);
        assert!(
            Profile::decode(&longer)
                .unwrap_err()
                .contains("bytes follow")
        );
    }

    #[test]
    fn newer_files_with_more_fields_are_read() {
        let p = sample();
        let mut b = p.encode();
        // Rewrite with one more field per record.
        let head = 8 + 4 + 4 + 8;
        b[head..head + 4].copy_from_slice(&((FIELDS + 1) as u32).to_le_bytes());
        let body_at = b.len() - p.records.len() * FIELDS * 8;
        let mut out = b[..body_at].to_vec();
        for r in &p.records {
            for f in r.fields() {
                out.extend_from_slice(&f.to_le_bytes());
            }
            out.extend_from_slice(&99u64.to_le_bytes());
        }
        assert_eq!(Profile::decode(&out), Ok(p));
    }

    #[test]
    fn files_are_named_by_pid() {
        assert_eq!(
            path_of(Path::new("/tmp/cg.prof"), 3),
            PathBuf::from("/tmp/cg.prof.3")
        );
        let s = packet_stats(&sample().records);
        assert_eq!(s.total.retransmits, 7);
        assert_eq!(s.total.data_received, 6);
    }
}
