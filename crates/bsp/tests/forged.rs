//! A member that forges a packet announcing an impossible message: a BSP job over every
//! protocol fails naming the forger at the receiver's next step, instead of aborting in an
//! allocation or waiting (on the simulated network, deterministically; the simulation
//! reports the failed node, as a launcher reports the failed process).

use bulkwire_bsp::{Bsp, Config};
use bulkwire_engine::simproc::{self, SimSetup};
use bulkwire_link::sim::SimConfig;
use bulkwire_protocol::SEC;
use bulkwire_protocol::wire::{Header, Kind};

#[test]
fn a_forged_huge_total_fails_the_job_naming_the_forger() {
    for protocol in ["utopia", "gbn", "holefill", "rmpp"] {
        let mut setup = SimSetup::new(SimConfig::new(3), protocol);
        setup.limit = 10 * SEC;
        let cookie = setup.endpoint.cookie;
        let out = simproc::run(&setup, |t| {
            if bulkwire_engine::Transport::rank(&t) == 2 {
                // The far end of a message of 2^40 bytes, with the job's cookie.
                let mut h = Header::new(if protocol == "rmpp" {
                    Kind::Rts
                } else {
                    Kind::Data
                });
                let total = 1u64 << 40;
                (h.src, h.dst, h.cookie, h.total) = (2, 1, cookie, total);
                h.offset = if protocol == "rmpp" { 0 } else { total - 1 };
                let body = [1u8];
                t.inject(1, &h.encode(&body), &body).unwrap();
            }
            let mut bsp = Bsp::over(Box::new(t), 3, Config::default());
            let mut res = Ok(());
            for _ in 0..3 {
                res = bsp.sync();
                if res.is_err() {
                    break;
                }
            }
            res.map_err(|e| e.to_string())
        });
        let msg = match out {
            Ok(o) => format!("{:?}", o.results),
            Err(e) => e.to_string(),
        };
        eprintln!("{protocol}: {msg}");
        assert!(
            msg.contains("rank 2 announced a message of 1099511627776 bytes"),
            "{protocol}: {msg}"
        );
    }
}
