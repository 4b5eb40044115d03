//! An in-process link: queues between endpoints of one process, for unit tests and for
//! running several ranks as threads. Reliable and ordered unless wrapped in faults.

use std::collections::VecDeque;
use std::io;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use crate::{Link, LinkCaps, Rank, RxBatch, Tx};

struct Hub {
    queues: Mutex<Vec<VecDeque<Vec<u8>>>>,
    ready: Condvar,
    mtu: usize,
    /// Per-receiver queue limit in datagrams; beyond it datagrams are dropped, like a
    /// full socket buffer.
    depth: usize,
}

/// One rank's end of an in-process network made by [`network`].
pub struct InprocLink {
    hub: Arc<Hub>,
    rank: Rank,
    nprocs: u32,
}

/// Creates `nprocs` connected endpoints carrying datagrams of up to `mtu` bytes, each
/// queueing at most `depth` datagrams.
pub fn network(nprocs: u32, mtu: usize, depth: usize) -> Vec<InprocLink> {
    let hub = Arc::new(Hub {
        queues: Mutex::new((0..nprocs).map(|_| VecDeque::new()).collect()),
        ready: Condvar::new(),
        mtu,
        depth,
    });
    (0..nprocs)
        .map(|rank| InprocLink {
            hub: hub.clone(),
            rank,
            nprocs,
        })
        .collect()
}

impl Link for InprocLink {
    fn rank(&self) -> Rank {
        self.rank
    }

    fn nprocs(&self) -> u32 {
        self.nprocs
    }

    fn capabilities(&self) -> LinkCaps {
        LinkCaps {
            reliable: true,
            intact: true,
            private: true,
            ..LinkCaps::lossy(self.nprocs(), self.hub.mtu)
        }
    }

    fn send(&mut self, batch: &[Tx<'_>]) -> io::Result<usize> {
        let mut q = self.hub.queues.lock().unwrap();
        for tx in batch {
            if tx.len() > self.hub.mtu {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "datagram of {} bytes exceeds MTU {}",
                        tx.len(),
                        self.hub.mtu
                    ),
                ));
            }
            if let Some(dq) = q.get_mut(tx.dst as usize)
                && dq.len() < self.hub.depth
            {
                dq.push_back(tx.to_vec());
            }
        }
        drop(q);
        self.hub.ready.notify_all();
        Ok(batch.len())
    }

    fn recv(&mut self, batch: &mut RxBatch) -> io::Result<usize> {
        batch.clear();
        let mut q = self.hub.queues.lock().unwrap();
        let mine = &mut q[self.rank as usize];
        while !batch.is_full() {
            let Some(d) = mine.front() else { break };
            if !batch.push_copy(d) {
                // Larger than a slot: the receiver's buffers are too small, as with a
                // truncated UDP datagram. Drop it.
                if batch.is_empty() || d.len() > batch.slot_size() {
                    mine.pop_front();
                    continue;
                }
                break;
            }
            mine.pop_front();
        }
        Ok(batch.len())
    }

    fn wait(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        let q = self.hub.queues.lock().unwrap();
        if !q[self.rank as usize].is_empty() {
            return Ok(());
        }
        let me = self.rank as usize;
        match timeout {
            Some(t) => drop(
                self.hub
                    .ready
                    .wait_timeout_while(q, t, |q| q[me].is_empty())
                    .unwrap(),
            ),
            None => drop(self.hub.ready.wait_while(q, |q| q[me].is_empty()).unwrap()),
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delivers_in_order_and_drops_when_full() {
        let mut net = network(2, 100, 3);
        let mut b = net.pop().unwrap();
        let mut a = net.pop().unwrap();
        let msgs: Vec<Vec<u8>> = (0..5u8).map(|i| vec![i; i as usize + 1]).collect();
        let txs: Vec<Tx> = msgs
            .iter()
            .map(|m| Tx {
                dst: 1,
                head: &m[..1],
                body: &m[1..],
            })
            .collect();
        assert_eq!(a.send(&txs).unwrap(), 5);
        let mut rx = RxBatch::new(8, 100);
        assert_eq!(b.recv(&mut rx).unwrap(), 3);
        for (i, m) in msgs.iter().take(3).enumerate() {
            assert_eq!(rx.get(i), &m[..]);
        }
        assert_eq!(b.recv(&mut rx).unwrap(), 0);
        b.wait(Some(Duration::from_millis(1))).unwrap();
        let big = vec![0u8; 101];
        assert!(
            a.send(&[Tx {
                dst: 1,
                head: &big,
                body: &[]
            }])
            .is_err()
        );
    }
}
