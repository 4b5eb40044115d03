//! The server's side of host agents ([`crate::agent`]): the ranks of another host are
//! started there by an agent that the launcher starts through the remote shell. The agent
//! connects back, gets its START, reports each rank's exit and passes signals on; the
//! remote-shell process itself is watched here too, so an agent that never starts (ssh
//! refused, no such program) fails the job with the shell's status.

use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

use bytes::Bytes;

use super::{Child, Proc, Server, rank_list};
use crate::agent::{BEAT_EVERY, SILENCE};
use crate::state::Failure;
use crate::sys::{self, ExitKind};
use crate::wire::{self, AgentHello};

/// How long an agent may take to connect back once its remote shell started before the
/// user is told: an ssh connection and the start of a program take a second or two, so a
/// host silent this long is named within seconds. It is declared unreachable only at the
/// join timeout: a host that is slow (a loaded node, a home directory mounted on first
/// login) is not called dead for being slow.
pub(crate) const AGENT_CONNECT: Duration = Duration::from_secs(10);

/// One host's agent, as the server tracks it.
pub(super) struct Agent {
    /// The host as the user named it.
    pub(super) host: String,
    ranks: Vec<u32>,
    /// The START frame it gets when it connects.
    start: Bytes,
    conn: Option<usize>,
    /// It connected once: its ranks were started (or their start failure reported).
    connected: bool,
    /// The user was told that it has not connected within [`AGENT_CONNECT`].
    warned: bool,
    heard: Instant,
    said: Instant,
    /// The remote-shell process that runs it, when this server's process started one.
    shell: Option<Shell>,
    /// It has ended: every rank reported, or it is unreachable.
    pub(super) gone: bool,
}

struct Shell {
    pid: u32,
    pidfd: OwnedFd,
    exit: Option<ExitKind>,
}

impl Server {
    /// Registers the agent that will start `ranks` on `host`: they count as this server's
    /// processes, known through the agent once it connects and sends `start` its way.
    /// Returns the agent's index (its argument on the command line).
    pub fn add_agent(&mut self, host: &str, ranks: &[u32], start: Vec<u8>) -> usize {
        let a = self.agents.len();
        for &r in ranks {
            if let Some(slot) = self.slots.get_mut(r as usize) {
                slot.child = Some(self.children.len());
                self.children.push(Child {
                    rank: r,
                    proc: Proc::Remote { agent: a },
                    exit: None,
                });
            }
        }
        let now = Instant::now();
        self.agents.push(Agent {
            host: host.to_string(),
            ranks: ranks.to_vec(),
            start: Bytes::from(start),
            conn: None,
            connected: false,
            warned: false,
            heard: now,
            said: now,
            shell: None,
            gone: false,
        });
        a
    }

    /// Watches the remote-shell process `pid` that runs agent `a`: if it ends before the
    /// agent connects, the agent never will.
    pub fn add_agent_shell(&mut self, a: usize, pid: u32) -> std::io::Result<()> {
        let pidfd = sys::pidfd_open(pid)?;
        self.agents[a].shell = Some(Shell {
            pid,
            pidfd,
            exit: None,
        });
        Ok(())
    }

    pub(super) fn helper_fds(&self) -> Vec<(usize, RawFd)> {
        self.agents
            .iter()
            .enumerate()
            .filter_map(|(i, a)| match &a.shell {
                Some(s) if s.exit.is_none() => Some((i, s.pidfd.as_raw_fd())),
                _ => None,
            })
            .collect()
    }

    pub(super) fn reap_helper(&mut self, a: usize) {
        let Some(sh) = self.agents[a].shell.as_mut() else {
            return;
        };
        let exit = match sys::pidfd_try_reap(&sh.pidfd) {
            Ok(Some(e)) => e,
            Ok(None) => return,
            Err(_) => ExitKind::Code(-1),
        };
        sh.exit = Some(exit);
        let agent = &self.agents[a];
        if agent.conn.is_none() && !agent.gone && self.fatal.is_none() {
            let msg = format!(
                "cannot start ranks {} on host {}: the remote shell ended ({exit}) before \
                 the host's agent connected",
                rank_list(&agent.ranks),
                agent.host
            );
            let first = agent.ranks.first().copied();
            self.agents[a].gone = true;
            self.fail(Failure::Other {
                rank: first,
                message: msg,
            });
        }
    }

    /// At the end: the remote shells get a moment to end by themselves (an agent exits once
    /// its ranks have, and its shell may still be relaying their last output), then
    /// SIGTERM, then SIGKILL; all are reaped.
    pub(super) fn end_helpers(&mut self) {
        for (sig, wait) in [
            (0, Duration::from_secs(2)),
            (libc::SIGTERM, Duration::from_secs(1)),
            (libc::SIGKILL, Duration::from_secs(5)),
        ] {
            let deadline = Instant::now() + wait;
            for sh in self.agents.iter_mut().filter_map(|a| a.shell.as_mut()) {
                if sh.exit.is_none() && sig != 0 {
                    sys::kill_group(sh.pid, sig);
                    sys::pidfd_kill(&sh.pidfd, sig);
                }
            }
            for sh in self.agents.iter_mut().filter_map(|a| a.shell.as_mut()) {
                while sh.exit.is_none() && Instant::now() < deadline {
                    match sys::pidfd_try_reap(&sh.pidfd) {
                        Ok(Some(e)) => sh.exit = Some(e),
                        Ok(None) => std::thread::sleep(Duration::from_millis(2)),
                        Err(_) => break,
                    }
                }
            }
        }
    }

    pub(super) fn kill_helpers_now(&mut self) {
        for sh in self.agents.iter_mut().filter_map(|a| a.shell.as_mut()) {
            if sh.exit.is_none() {
                sys::kill_group(sh.pid, libc::SIGKILL);
                sys::pidfd_kill(&sh.pidfd, libc::SIGKILL);
            }
        }
        self.end_helpers();
    }

    pub(super) fn on_agent_hello(&mut self, i: usize, p: &[u8]) {
        let Some(nonce) = self.conns[i].as_ref().map(|c| c.nonce) else {
            return;
        };
        let h = match AgentHello::decode(p) {
            Ok(h) => h,
            Err(why) => return self.not_admitted(i, &why),
        };
        let Some(tr) = wire::verify_member(&self.cfg.secret, &nonce, wire::T_AGENT, p) else {
            return self.not_admitted(i, "its proof does not match this job's secret");
        };
        let a = h.index as usize;
        if a >= self.agents.len() || self.agents[a].conn.is_some() {
            return self.refuse(i, &format!("no such host agent in this job ({a})"), true);
        }
        if self.agents[a].gone || self.fatal.is_some() {
            return self.refuse(i, "the job has already ended", true);
        }
        self.send(i, Bytes::from(wire::welcome(None, &self.cfg.secret, &tr)));
        let now = Instant::now();
        let agent = &mut self.agents[a];
        agent.conn = Some(i);
        agent.connected = true;
        agent.heard = now;
        agent.said = now;
        let start = agent.start.clone();
        if let Some(c) = self.conns[i].as_mut() {
            c.agent = Some(a);
        }
        self.send(i, start);
    }

    pub(super) fn on_agent_frame(&mut self, i: usize, a: usize, t: u8, p: &[u8]) {
        self.agents[a].heard = Instant::now();
        match t {
            wire::T_BEAT => {}
            wire::T_EXITED => {
                let Some((rank, exit)) = wire::decode_exited(p) else {
                    return self.protocol_error(i, "malformed exit report");
                };
                let ci = self.slots.get(rank as usize).and_then(|s| s.child);
                match ci {
                    Some(ci)
                        if matches!(self.children[ci].proc, Proc::Remote { agent } if agent == a)
                            && self.children[ci].exit.is_none() =>
                    {
                        self.on_exit(ci, exit);
                    }
                    _ => self.protocol_error(i, &format!("exit report for rank {rank}")),
                }
            }
            wire::T_NOSTART => {
                let mut r = wire::Reader::new(p);
                let (Some(rank), Some(why)) = (r.u32(), r.str16(wire::MAX_TEXT)) else {
                    return self.protocol_error(i, "malformed start failure");
                };
                self.fail(Failure::Other {
                    rank: Some(rank),
                    message: why,
                });
            }
            _ => self.protocol_error(i, &format!("unknown agent message {t:#x}")),
        }
    }

    /// Agent `a`'s connection closed: fine once its ranks have all ended.
    pub(super) fn agent_closed(&mut self, a: usize) {
        self.agents[a].conn = None;
        let all_ended = self.agents[a].ranks.iter().all(|&r| {
            self.slots[r as usize]
                .child
                .is_some_and(|c| self.children[c].exit.is_some())
        });
        if all_ended {
            self.agents[a].gone = true;
        } else {
            self.agent_lost(a, "its agent's connection closed");
        }
    }

    /// Agent `a` can't be reached: its ranks count as gone, and the job fails.
    pub(super) fn agent_lost(&mut self, a: usize, why: &str) {
        if self.agents[a].gone {
            return;
        }
        self.agents[a].gone = true;
        if let Some(c) = self.agents[a].conn.and_then(|i| self.conns[i].as_mut()) {
            c.dead = true;
        }
        let agent = &self.agents[a];
        let alive: Vec<u32> = agent
            .ranks
            .iter()
            .copied()
            .filter(|&r| {
                self.slots[r as usize]
                    .child
                    .is_some_and(|c| self.children[c].exit.is_none())
            })
            .collect();
        if self.fatal.is_some() || alive.is_empty() {
            return;
        }
        // Ranks ran there only if its agent ever connected and started them.
        let msg = if agent.connected {
            format!(
                "host {} became unreachable ({why}) while ranks {} ran there",
                agent.host,
                rank_list(&alive)
            )
        } else {
            format!(
                "host {} could not be reached ({why}): ranks {} never started",
                agent.host,
                rank_list(&alive)
            )
        };
        self.fail(Failure::Other {
            rank: alive.first().copied(),
            message: msg,
        });
    }

    /// The next time an agent must be heard from or spoken to.
    pub(super) fn agents_deadline(&self) -> Option<Instant> {
        let join = self.cfg.join_timeout.map(|t| self.started + t);
        let warn = self.started + AGENT_CONNECT;
        self.agents
            .iter()
            .filter(|a| !a.gone)
            .filter_map(|a| match a.conn {
                Some(_) => Some((a.heard + SILENCE).min(a.said + BEAT_EVERY)),
                None if a.warned => join,
                None => Some(join.map_or(warn, |j| j.min(warn))),
            })
            .min()
    }

    pub(super) fn agent_timers(&mut self, now: Instant) {
        for a in 0..self.agents.len() {
            if self.agents[a].gone {
                continue;
            }
            match self.agents[a].conn {
                Some(i) => {
                    if now >= self.agents[a].heard + SILENCE {
                        let why = format!("nothing heard from its agent for {}", secs(SILENCE));
                        self.agent_lost(a, &why);
                    } else if now >= self.agents[a].said + BEAT_EVERY {
                        self.agents[a].said = now;
                        self.send(i, Bytes::from(wire::empty(wire::T_BEAT)));
                    }
                }
                None => {
                    let waited = now.saturating_duration_since(self.started);
                    let join = self.cfg.join_timeout;
                    if join.is_some_and(|t| waited >= t) {
                        let why = format!(
                            "its agent did not connect within {} of the remote shell's \
                             start, and the remote shell is still running",
                            secs(waited)
                        );
                        self.agent_lost(a, &why);
                    } else if !self.agents[a].warned && waited >= AGENT_CONNECT {
                        self.agents[a].warned = true;
                        let until = join.map_or("without a limit".into(), |t| {
                            format!(
                                "until the join timeout, {} (BULKWIRE_JOIN_TIMEOUT)",
                                secs(t)
                            )
                        });
                        let msg = format!(
                            "host {} has not answered within {} of its remote shell's start \
                             (ranks {} have not started); waiting {until}",
                            self.agents[a].host,
                            secs(AGENT_CONNECT),
                            rank_list(&self.agents[a].ranks)
                        );
                        self.say(&msg);
                    }
                }
            }
        }
    }

    /// Passes `sig` to the ranks on other hosts, through their agents.
    pub(super) fn signal_agents(&mut self, sig: i32) {
        let frame = Bytes::from(wire::signal(sig));
        for a in 0..self.agents.len() {
            if let (false, Some(i)) = (self.agents[a].gone, self.agents[a].conn) {
                self.agents[a].said = Instant::now();
                self.send(i, frame.clone());
            }
        }
    }

    /// Whether child `c`'s end is known, or can no longer be learnt.
    pub(super) fn child_settled(&self, c: usize) -> bool {
        let child = &self.children[c];
        if child.exit.is_some() {
            return true;
        }
        match child.proc {
            Proc::Local { .. } => false,
            Proc::Remote { agent } => {
                self.agents[agent].gone || (self.fatal.is_some() && self.give_up_at.is_none())
            }
        }
    }
}

fn secs(d: Duration) -> String {
    format!("{} s", d.as_secs())
}
