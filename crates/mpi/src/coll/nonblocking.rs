//! Non-blocking collectives in flight: the request table's side (`Operation`) and a
//! progress thread.
//!
//! `MPI_Wait`/`MPI_Test` move a schedule on whenever the program calls them. MPI's progress
//! rule asks more: a process blocked elsewhere (in a receive of a message its partner sends
//! only once the collective is done there) must still do its part. So every schedule in
//! flight is also moved on by one thread of this process that wakes every
//! [`PERIOD`] while any is in flight and sleeps otherwise: a collective whose process does
//! not call MPI advances a round per period instead of never. The program's own calls
//! stay the fast path (they progress the schedule directly, and the thread only tries a
//! schedule that no call has moved on since its last look, and that nobody else holds).

use std::os::raw::c_int;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, Once, Weak};
use std::time::Duration;

use super::sched::Sched;
use crate::comm::Communicator;
use crate::request::Operation;

/// How often the progress thread looks at the schedules in flight.
pub const PERIOD: Duration = Duration::from_micros(200);

struct Shared {
    comm: Arc<Communicator>,
    sched: Mutex<Sched>,
    /// Set each time the program's own calls move the schedule on; the thread then leaves
    /// it alone for a period. Taking its lock (and p2p's) while the program polls it made
    /// the two threads contend, and a thread preempted holding the lock on a loaded core
    /// stalled the program's wait for a whole time slice.
    driven: AtomicBool,
}

/// A non-blocking collective as the request table holds it.
pub struct Pending(Arc<Shared>);

impl Operation for Pending {
    fn progress(&mut self) -> Option<Result<(), c_int>> {
        self.0.driven.store(true, Ordering::Relaxed);
        let net = self.0.comm.net();
        self.0
            .sched
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .progress(&net, false)
    }
}

struct Active {
    list: Mutex<Vec<Weak<Shared>>>,
    wake: Condvar,
}

static ACTIVE: Active = Active {
    list: Mutex::new(Vec::new()),
    wake: Condvar::new(),
};
static THREAD: Once = Once::new();

/// Starts `s` (its first round is posted now) and makes the request table's operation.
pub fn start(comm: Arc<Communicator>, mut s: Sched) -> Pending {
    let _ = s.progress(&comm.net(), false);
    let shared = Arc::new(Shared {
        comm,
        sched: Mutex::new(s),
        driven: AtomicBool::new(false),
    });
    ACTIVE
        .list
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(Arc::downgrade(&shared));
    ACTIVE.wake.notify_one();
    THREAD.call_once(|| {
        // Without the thread, collectives still complete through the program's calls.
        let _ = std::thread::Builder::new()
            .name("bwmpi-coll-progress".into())
            .spawn(run);
    });
    Pending(shared)
}

fn run() {
    loop {
        let live: Vec<Arc<Shared>> = {
            let mut list = ACTIVE.list.lock().unwrap_or_else(|e| e.into_inner());
            list.retain(|w| w.strong_count() > 0);
            while list.is_empty() {
                list = ACTIVE.wake.wait(list).unwrap_or_else(|e| e.into_inner());
                list.retain(|w| w.strong_count() > 0);
            }
            list.iter().filter_map(Weak::upgrade).collect()
        };
        for s in &live {
            // A schedule someone is moving on already needs nothing from here.
            if s.driven.swap(false, Ordering::Relaxed) {
                continue;
            }
            if let Ok(mut g) = s.sched.try_lock()
                && !g.is_done()
            {
                let _ = g.progress(&s.comm.net(), false);
            }
        }
        // Done schedules leave the list; their requests keep the outcome.
        ACTIVE
            .list
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|w| {
                w.upgrade()
                    .is_some_and(|s| s.sched.try_lock().map_or(true, |g| !g.is_done()))
            });
        drop(live);
        std::thread::sleep(PERIOD);
    }
}
