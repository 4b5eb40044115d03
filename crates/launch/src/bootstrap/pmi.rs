//! The PMI-1 wire protocol, client side: what MPICH's Hydra (`mpiexec`) and Slurm's pmi2
//! plugin (`srun --mpi=pmi2`, which answers PMI-1 clients too) serve on the descriptor in
//! `PMI_FD`, or at `PMI_PORT` for a process that announces itself with `PMI_ID`. Commands
//! are single lines of `key=value` words: `cmd=init pmi_version=1 pmi_subversion=1`,
//! `cmd=get_maxes`, `cmd=get_my_kvsname`, `cmd=put`, `cmd=barrier_in`, `cmd=get`,
//! `cmd=finalize`; each is answered by one line (the barrier once everyone has entered).

use std::io::{self, BufRead, BufReader, Write};
use std::net::TcpStream;
use std::os::fd::{FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

use super::Bootstrap;
use crate::LaunchError;

/// Where the launcher's PMI service is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PmiAddr {
    /// A descriptor the launcher left open (`PMI_FD`).
    Fd(i32),
    /// `host:port` (`PMI_PORT`), with the id the launcher expects (`PMI_ID`).
    Port { addr: String, id: Option<u32> },
}

/// A process's PMI-1 session.
pub struct Pmi1 {
    rd: BufReader<std::fs::File>,
    wr: std::fs::File,
    rank: u32,
    size: u32,
    kvs: String,
    key_max: usize,
    val_max: usize,
    what: String,
}

fn err(what: &str, msg: impl std::fmt::Display) -> LaunchError {
    LaunchError::Protocol(format!("PMI ({what}): {msg}"))
}

/// `key=value` of a reply line.
fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
}

impl Pmi1 {
    /// Opens the session: `rank` and `size` from the environment (`PMI_RANK`, `PMI_SIZE`)
    /// where the launcher set them; a `PMI_PORT` session learns them from the launcher.
    pub fn connect(
        addr: &PmiAddr,
        rank: Option<u32>,
        size: Option<u32>,
        timeout: Duration,
    ) -> Result<Pmi1, LaunchError> {
        let (fd, what) = match addr {
            PmiAddr::Fd(fd) => {
                // SAFETY: the launcher left this descriptor open for us to own; nothing
                // else in the process uses it.
                let owned = unsafe { OwnedFd::from_raw_fd(*fd) };
                (owned, format!("fd {fd}"))
            }
            PmiAddr::Port { addr, .. } => {
                let s = TcpStream::connect(addr.as_str()).map_err(|e| err(addr, e))?;
                (OwnedFd::from(s), addr.clone())
            }
        };
        set_timeout(&fd, timeout);
        let file = std::fs::File::from(fd);
        let mut p = Pmi1 {
            rd: BufReader::new(file.try_clone().map_err(|e| err(&what, e))?),
            wr: file,
            rank: rank.unwrap_or(0),
            size: size.unwrap_or(0),
            kvs: String::new(),
            key_max: 64,
            val_max: 256,
            what,
        };
        if let PmiAddr::Port { id: Some(id), .. } = addr {
            p.initack(*id)?;
        }
        let r = p.call("cmd=init pmi_version=1 pmi_subversion=1")?;
        if field(&r, "rc") != Some("0") {
            return Err(err(&p.what, format!("init refused: {r}")));
        }
        let r = p.call("cmd=get_maxes")?;
        p.key_max = field(&r, "keylen_max")
            .and_then(|v| v.parse().ok())
            .unwrap_or(64);
        p.val_max = field(&r, "vallen_max")
            .and_then(|v| v.parse().ok())
            .unwrap_or(256);
        let r = p.call("cmd=get_my_kvsname")?;
        p.kvs = field(&r, "kvsname")
            .ok_or_else(|| err(&p.what, format!("no kvsname in {r:?}")))?
            .to_string();
        if p.size == 0 {
            return Err(err(&p.what, "the launcher gave no job size (PMI_SIZE)"));
        }
        Ok(p)
    }

    /// A `PMI_PORT` process says who it is and is told its rank and size.
    fn initack(&mut self, id: u32) -> Result<(), LaunchError> {
        self.send(&format!("cmd=initack pmiid={id}"))?;
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            let l = self.line()?;
            if let Some(v) = field(&l, "size").filter(|_| l.contains("cmd=set")) {
                self.size = v.parse().map_err(|_| err(&self.what, &l))?;
            } else if let Some(v) = field(&l, "rank").filter(|_| l.contains("cmd=set")) {
                self.rank = v.parse().map_err(|_| err(&self.what, &l))?;
            } else if l.contains("cmd=set debug") {
                return Ok(());
            }
        }
        Err(err(&self.what, "no rank and size after initack"))
    }

    fn send(&mut self, cmd: &str) -> Result<(), LaunchError> {
        self.wr
            .write_all(format!("{cmd}\n").as_bytes())
            .map_err(|e| err(&self.what, e))
    }

    fn line(&mut self) -> Result<String, LaunchError> {
        let mut l = String::new();
        match self.rd.read_line(&mut l) {
            Ok(0) => Err(err(&self.what, "the launcher closed the connection")),
            Ok(_) => Ok(l.trim_end().to_string()),
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                Err(err(&self.what, "no answer in time (a rank never arrived?)"))
            }
            Err(e) => Err(err(&self.what, e)),
        }
    }

    fn call(&mut self, cmd: &str) -> Result<String, LaunchError> {
        self.send(cmd)?;
        self.line()
    }

    fn put(&mut self, key: &str, value: &str) -> Result<(), LaunchError> {
        if key.len() > self.key_max || value.len() > self.val_max {
            return Err(err(
                &self.what,
                format!("value of {} bytes too long", value.len()),
            ));
        }
        let r = self.call(&format!(
            "cmd=put kvsname={} key={key} value={value}",
            self.kvs
        ))?;
        match field(&r, "rc") {
            Some("0") => Ok(()),
            _ => Err(err(&self.what, format!("put refused: {r}"))),
        }
    }

    fn get(&mut self, key: &str) -> Result<String, LaunchError> {
        let r = self.call(&format!("cmd=get kvsname={} key={key}", self.kvs))?;
        match (field(&r, "rc"), field(&r, "value")) {
            (Some("0"), Some(v)) => Ok(v.to_string()),
            _ => Err(err(&self.what, format!("no value for {key}: {r}"))),
        }
    }

    fn barrier(&mut self) -> Result<(), LaunchError> {
        let r = self.call("cmd=barrier_in")?;
        if r.contains("barrier_out") {
            Ok(())
        } else {
            Err(err(
                &self.what,
                format!("unexpected answer to barrier: {r}"),
            ))
        }
    }
}

/// Read timeout on the PMI descriptor, so a barrier that never completes ends.
fn set_timeout(fd: &OwnedFd, t: Duration) {
    let tv = libc::timeval {
        tv_sec: t.as_secs() as libc::time_t,
        tv_usec: t.subsec_micros() as libc::suseconds_t,
    };
    // SAFETY: setsockopt with a valid timeval on a descriptor we own; on a descriptor that
    // is not a socket it fails harmlessly (ENOTSOCK).
    unsafe {
        libc::setsockopt(
            std::os::fd::AsRawFd::as_raw_fd(fd),
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            (&tv as *const libc::timeval).cast(),
            std::mem::size_of::<libc::timeval>() as libc::socklen_t,
        );
    }
}

const KEY: &str = "bulkwire-rendezvous";

impl Bootstrap for Pmi1 {
    fn describe(&self) -> String {
        format!("the launcher's PMI-1 service on {}", self.what)
    }
    fn rank(&self) -> u32 {
        self.rank
    }
    fn size(&self) -> u32 {
        self.size
    }
    fn job_name(&self) -> String {
        format!("pmi:{}", self.kvs)
    }
    fn exchange(&mut self, mine: Option<&str>) -> Result<String, LaunchError> {
        if let Some(v) = mine {
            self.put(KEY, v)?;
        }
        self.barrier()?;
        match mine {
            Some(v) => Ok(v.to_string()),
            None => self.get(KEY),
        }
    }
    fn finalize(&mut self) {
        let _ = self.call("cmd=finalize");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::IntoRawFd;
    use std::os::unix::net::UnixStream;

    /// A PMI-1 server for one process, answering as Hydra does.
    fn serve(s: UnixStream) -> std::thread::JoinHandle<Vec<String>> {
        std::thread::spawn(move || {
            let mut seen = Vec::new();
            let mut w = s.try_clone().unwrap();
            let mut kv = std::collections::HashMap::new();
            for l in BufReader::new(s).lines() {
                let l = l.unwrap();
                seen.push(l.clone());
                let reply = match field(&l, "cmd").unwrap() {
                    "init" => "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0".into(),
                    "get_maxes" => {
                        "cmd=maxes kvsname_max=256 keylen_max=64 vallen_max=1024 rc=0".into()
                    }
                    "get_my_kvsname" => "cmd=my_kvsname kvsname=kvs_42_0 rc=0".into(),
                    "put" => {
                        kv.insert(
                            field(&l, "key").unwrap().to_string(),
                            field(&l, "value").unwrap().to_string(),
                        );
                        "cmd=put_result rc=0".to_string()
                    }
                    "barrier_in" => "cmd=barrier_out".into(),
                    "get" => match kv.get(field(&l, "key").unwrap()) {
                        Some(v) => format!("cmd=get_result rc=0 value={v}"),
                        None => "cmd=get_result rc=-1 msg=key_not_found".into(),
                    },
                    "finalize" => "cmd=finalize_ack".into(),
                    other => panic!("unexpected {other}"),
                };
                writeln!(w, "{reply}").unwrap();
            }
            seen
        })
    }

    #[test]
    fn a_session_over_an_inherited_descriptor() {
        let (a, b) = UnixStream::pair().unwrap();
        let server = serve(b);
        let fd = a.into_raw_fd();
        let mut p =
            Pmi1::connect(&PmiAddr::Fd(fd), Some(0), Some(1), Duration::from_secs(5)).unwrap();
        assert_eq!(
            (p.rank(), p.size(), p.job_name().as_str()),
            (0, 1, "pmi:kvs_42_0")
        );
        assert_eq!(p.exchange(Some("10.0.0.1:5000")).unwrap(), "10.0.0.1:5000");
        assert!(p.get("missing").is_err());
        p.finalize();
        drop(p);
        let seen = server.join().unwrap();
        assert_eq!(seen[0], "cmd=init pmi_version=1 pmi_subversion=1");
        assert!(seen.contains(
            &"cmd=put kvsname=kvs_42_0 key=bulkwire-rendezvous value=10.0.0.1:5000".to_string()
        ));
        assert_eq!(seen.last().unwrap(), "cmd=finalize");
    }

    #[test]
    fn a_silent_launcher_times_out() {
        let (a, _b) = UnixStream::pair().unwrap();
        let fd = a.into_raw_fd();
        let t0 = Instant::now();
        let e = Pmi1::connect(
            &PmiAddr::Fd(fd),
            Some(0),
            Some(2),
            Duration::from_millis(200),
        );
        let e = e.err().expect("no answer").to_string();
        assert!(e.contains("no answer in time"), "{e}");
        assert!(t0.elapsed() < Duration::from_secs(5));
    }
}
