use std::collections::BTreeSet;

use bulkwire_launch::{Launcher, Secret, job_id_from_name};

use super::*;

fn settings(vars: &[(&str, &str)]) -> Result<Settings, ConfigError> {
    Settings::from_lookup(|k| {
        vars.iter()
            .find(|(n, _)| *n == k)
            .map(|(_, v)| v.to_string())
    })
}

fn error(vars: &[(&str, &str)]) -> String {
    settings(vars).unwrap_err().to_string()
}

#[test]
fn the_table_lists_exactly_the_variables_read() {
    let read = Settings::variables_read();
    let listed: BTreeSet<&str> = ALL.iter().map(|v| v.name).collect();
    assert_eq!(read, listed);
}

/// Variables whose default is described rather than a value one could set (or, for
/// BULKWIRE_EAGER, whose setting also sets another).
const DESCRIBED_DEFAULTS: &[&str] = &[
    "BULKWIRE_PROTOCOL",
    "BULKWIRE_EAGER",
    "BULKWIRE_FAULTS",
    "BULKWIRE_MTU",
    "BULKWIRE_MCAST_GROUP",
    "BULKWIRE_SHM_RING",
    "BULKWIRE_SHM_DGRAM",
    "BULKWIRE_HOLEFILL_WINDOW",
    "BULKWIRE_BSP_RATE",
    "BULKWIRE_BSP_CHUNK",
    "BULKWIRE_HOST_CPUS",
    "BULKWIRE_HOST_ID",
    "BULKWIRE_RANK",
    "BULKWIRE_NPROCS",
    "BULKWIRE_RENDEZVOUS",
    "BULKWIRE_SECRET",
    "BULKWIRE_SECRET_FILE",
    "BULKWIRE_COOKIE",
    "BULKWIRE_JOB",
    "BULKWIRE_PROFILE",
    "BULKWIRE_SPMD_ENTRY",
];

#[test]
fn the_table_states_the_defaults_the_code_has() {
    let default = Settings::default();
    for v in ALL.iter().filter(|v| !DESCRIBED_DEFAULTS.contains(&v.name)) {
        let s = settings(&[(v.name, v.default)])
            .unwrap_or_else(|e| panic!("{}'s default {:?}: {e}", v.name, v.default));
        assert_eq!(s, default, "{}={} is not the default", v.name, v.default);
    }
}

#[test]
fn docs_hold_the_generated_table() {
    let doc = include_str!("../../../docs/configuration.md");
    assert!(
        doc.contains(&vars::markdown()),
        "docs/configuration.md is out of date: regenerate its table with \
         `bsprun --help-env=markdown`"
    );
}

/// Variables that take any text.
const ANY_TEXT: &[&str] = &[
    "BULKWIRE_HOST_ID",
    "BULKWIRE_JOB",
    "BULKWIRE_PROFILE",
    "BULKWIRE_RSH",
    "BULKWIRE_SPMD_ENTRY",
];

#[test]
fn every_bad_value_names_the_variable_and_what_is_accepted() {
    for v in ALL.iter().filter(|v| !ANY_TEXT.contains(&v.name)) {
        // A job's variables are only read together.
        let mut vars = vec![(v.name, "twelve")];
        if v.section == Section::Launch && v.name != "BULKWIRE_BIND" {
            vars.extend([
                ("BULKWIRE_RANK", "0"),
                ("BULKWIRE_NPROCS", "2"),
                ("BULKWIRE_RENDEZVOUS", "127.0.0.1:1"),
                ("BULKWIRE_SECRET", SECRET_HEX),
            ]);
            vars.retain(|(n, x)| *n != v.name || *x == "twelve");
            vars.dedup_by_key(|(n, _)| *n);
        }
        let e = error(&vars);
        assert!(e.contains(v.name), "{}: {e}", v.name);
        if !matches!(settings(&vars), Err(ConfigError::Invalid { .. })) {
            assert!(e.contains(v.accepted), "{}: {e}", v.name);
        }
    }
}

#[test]
fn deadlines_and_intervals_are_validated() {
    for bad in ["0", "99", "-5", "x", "18000000000000", "604800001"] {
        assert!(
            error(&[("BULKWIRE_DEAD_AFTER_MS", bad)]).contains("BULKWIRE_DEAD_AFTER_MS"),
            "{bad}"
        );
    }
    let s = settings(&[("BULKWIRE_DEAD_AFTER_MS", "2500")]).unwrap();
    assert_eq!(s.job().dead_after, 2500 * MS);
    assert_eq!(s.coll.dead_after, Duration::from_millis(2500));
    for (var, bad) in [
        ("BULKWIRE_SPIN_US", "-5"),
        ("BULKWIRE_SPIN_US", "1e3"),
        ("BULKWIRE_PROGRESS_US", "x"),
        ("BULKWIRE_PROGRESS_US", "10000001"),
        ("BULKWIRE_STATS", "2"),
    ] {
        assert!(error(&[(var, bad)]).contains(var), "{var}={bad}");
    }
    let s = settings(&[("BULKWIRE_PROGRESS_US", "0"), ("BULKWIRE_SPIN_US", "0")]).unwrap();
    assert_eq!((s.p2p.progress, s.bsp.progress), (None, None));
    assert_eq!(s.job().spin, Duration::ZERO);
    let s = settings(&[("BULKWIRE_PROGRESS_US", "500")]).unwrap();
    assert_eq!(s.bsp.progress, Some(Duration::from_micros(500)));
}

#[test]
fn blank_counts_as_unset() {
    let s = settings(&[("BULKWIRE_PROTOCOL", " "), ("BULKWIRE_GSO", "")]).unwrap();
    assert_eq!(s, Settings::default());
}

#[test]
fn stack() {
    let s = settings(&[
        ("BULKWIRE_PROTOCOL", "gbn"),
        ("BULKWIRE_TRANSPORT", "udp"),
        ("BULKWIRE_FAULTS", "loss=0.05,seed=7"),
        ("BULKWIRE_CHECKSUM", "always"),
        ("BULKWIRE_AUTH", "off"),
        ("BULKWIRE_MALLOC_TUNE", "off"),
    ])
    .unwrap();
    let j = s.job();
    assert_eq!(j.protocol.as_deref(), Some("gbn"));
    assert_eq!(j.link, LinkKind::Udp);
    assert_eq!((j.faults.loss, j.faults.seed), (0.05, 7));
    assert!(j.always_checksum && !j.tune_malloc && !j.authenticate);
    let h = settings(&[("BULKWIRE_AUTH", "header")]).unwrap();
    let j = h.job();
    assert!(j.authenticate && !j.mac_payload);
    assert!(j.agree.contains(&("BULKWIRE_AUTH", "header".into())));
    assert_eq!(s.bsp.job, s.p2p.job);
    assert!(s.warnings.is_empty());
    assert!(error(&[("BULKWIRE_PROTOCOL", "quic")]).contains("utopia, gbn"));
    let e = error(&[("BULKWIRE_FAULTS", "loss=2")]);
    assert!(e.contains("BULKWIRE_FAULTS=\"loss=2\""), "{e}");
}

#[test]
fn faults_under_utopia_warn() {
    let s = settings(&[
        ("BULKWIRE_PROTOCOL", "utopia"),
        ("BULKWIRE_FAULTS", "dup=0.1"),
    ])
    .unwrap();
    assert_eq!(s.warnings.len(), 1);
    for part in [
        "BULKWIRE_PROTOCOL",
        "BULKWIRE_FAULTS",
        "utopia has no recovery",
    ] {
        assert!(s.warnings[0].contains(part), "{:?}", s.warnings);
    }
    let s = settings(&[("BULKWIRE_PROTOCOL", "utopia")]).unwrap();
    assert!(s.warnings.is_empty());
}

#[test]
fn udp() {
    let s = settings(&[
        ("BULKWIRE_GSO", "0"),
        ("BULKWIRE_GRO", "off"),
        ("BULKWIRE_MTU", "9000"),
        ("BULKWIRE_SOCKBUF", "8M"),
    ])
    .unwrap();
    let u = &s.job().udp;
    assert!(!u.gso && !u.gro);
    assert_eq!((u.mtu, u.sockbuf), (Some(9000), 8 << 20));
    for (var, bad) in [
        ("BULKWIRE_MTU", "jumbo"),
        ("BULKWIRE_MTU", "100"),
        ("BULKWIRE_GRO", "maybe"),
        ("BULKWIRE_SOCKBUF", "0"),
        ("BULKWIRE_SOCKBUF", "-1"),
        ("BULKWIRE_SOCKBUF", "12Q"),
        ("BULKWIRE_SOCKBUF", "3G"),
    ] {
        assert!(error(&[(var, bad)]).starts_with(var), "{var}={bad}");
    }
}

#[test]
fn shared_memory() {
    let s = settings(&[("BULKWIRE_SHM_RING", "64k"), ("BULKWIRE_SHM_DGRAM", "4096")]).unwrap();
    let c = s.job().shm.resolve(4).unwrap();
    assert_eq!((c.ring_bytes, c.max_datagram), (64 << 10, 4096));
    for bad in ["3000", "2G", "1k"] {
        assert!(error(&[("BULKWIRE_SHM_RING", bad)]).contains("BULKWIRE_SHM_RING"));
    }
    // Each accepted, but the datagram does not fit the ring.
    let e = error(&[("BULKWIRE_SHM_RING", "64k"), ("BULKWIRE_SHM_DGRAM", "32k")]);
    assert!(e.contains("BULKWIRE_SHM_RING, BULKWIRE_SHM_DGRAM"), "{e}");
}

/// The smallest datagram accepted carries a packet (header and one byte; the probe test
/// `the_smallest_shared_memory_datagram_accepted_works` runs BSP over it); one that
/// could carry none is refused at start, naming the variable, the value and the bound.
#[test]
fn the_smallest_shared_memory_datagram_holds_a_packet() {
    let s = settings(&[("BULKWIRE_SHM_DGRAM", "65")]).unwrap();
    assert_eq!(s.job().shm.resolve(2).unwrap().max_datagram, 65);
    let e = error(&[("BULKWIRE_SHM_DGRAM", "64")]);
    assert!(
        e.contains("BULKWIRE_SHM_DGRAM=\"64\"") && e.contains("from 65 bytes"),
        "{e}"
    );
}

#[test]
fn protocols() {
    let s = settings(&[
        ("BULKWIRE_GBN_WINDOW", "3"),
        ("BULKWIRE_GBN_SEQ_BITS", " 2 "),
        ("BULKWIRE_GBN_RX_SLOTS", "5"),
        ("BULKWIRE_GBN_CUMULATIVE_ACKS", "off"),
        ("BULKWIRE_GBN_BACKOFF_AFTER", "0"),
        ("BULKWIRE_GBN_MAX_BACKOFF", "20"),
        ("BULKWIRE_RMPP_BACKOFF_AFTER", "1"),
        ("BULKWIRE_RMPP_MAX_BACKOFF", "3"),
        ("BULKWIRE_RTO_INITIAL_US", "2000"),
        ("BULKWIRE_RTO_MIN_US", "500"),
        ("BULKWIRE_HOLEFILL_BUFFERS", "4096"),
        ("BULKWIRE_HOLEFILL_WINDOW", "1024"),
        ("BULKWIRE_HOLEFILL_SEQ_BITS", "16"),
        ("BULKWIRE_HOLEFILL_BURST", "8"),
        ("BULKWIRE_HOLEFILL_PROD_MIN_US", "50"),
        ("BULKWIRE_HOLEFILL_PROD_MAX_US", "20000"),
        ("BULKWIRE_HOLEFILL_INFLIGHT_KB", "512"),
        ("BULKWIRE_RMPP_WINDOW", "8"),
        ("BULKWIRE_RMPP_BURST", "4"),
        ("BULKWIRE_RMPP_AUTO_ACCEPT", "yes"),
        ("BULKWIRE_RMPP_ANNOUNCE_KIB", "2"),
    ])
    .unwrap();
    let p = &s.job().protocols;
    assert_eq!(
        p.gbn,
        GbnConfig {
            window: 3,
            seq_bits: 2,
            rx_slots: 5,
            cumulative_acks: false,
            backoff_after: 0,
            max_backoff: 20,
        }
    );
    assert_eq!(
        p.holefill,
        HolefillConfig {
            buffers: 4096,
            window: 1024,
            seq_bits: 16,
            burst: 8,
            prod_min: 50 * US,
            prod_max: 20 * MS,
            inflight_bytes: 512 << 10,
        }
    );
    assert_eq!(
        p.rmpp,
        RmppConfig {
            window: 8,
            burst: 4,
            auto_accept: true,
            announce_bytes: 2048,
            backoff_after: 1,
            max_backoff: 3,
        }
    );
    assert_eq!((p.rto_initial, p.rto_min), (2 * MS, 500 * US));
    // What jobs run when nothing is set: gbn with cumulative ACKs, back-off toward a
    // silent peer only.
    assert_eq!(
        Settings::default().job().protocols.gbn,
        GbnConfig::recommended()
    );
    // Fewer buffers alone shrink holefill's default window with them.
    let s = settings(&[("BULKWIRE_HOLEFILL_BUFFERS", "64")]).unwrap();
    assert_eq!(s.job().protocols.holefill.window, 32);
    for (vars, names) in [
        (&[("BULKWIRE_GBN_WINDOW", "256")][..], "BULKWIRE_GBN_WINDOW"),
        (
            &[("BULKWIRE_HOLEFILL_WINDOW", "600")],
            "BULKWIRE_HOLEFILL_WINDOW",
        ),
        (
            &[
                ("BULKWIRE_HOLEFILL_PROD_MIN_US", "500"),
                ("BULKWIRE_HOLEFILL_PROD_MAX_US", "100"),
            ],
            "BULKWIRE_HOLEFILL_PROD_MIN_US",
        ),
        (&[("BULKWIRE_RMPP_WINDOW", "0")], "BULKWIRE_RMPP_WINDOW"),
        (&[("BULKWIRE_RMPP_BURST", "0")], "BULKWIRE_RMPP_BURST"),
        (
            &[("BULKWIRE_RMPP_ANNOUNCE_KIB", "0")],
            "BULKWIRE_RMPP_ANNOUNCE_KIB",
        ),
        (
            &[("BULKWIRE_GBN_CUMULATIVE_ACKS", "maybe")],
            "BULKWIRE_GBN_CUMULATIVE_ACKS",
        ),
        (
            &[("BULKWIRE_GBN_MAX_BACKOFF", "21")],
            "BULKWIRE_GBN_MAX_BACKOFF",
        ),
        (
            &[("BULKWIRE_RMPP_MAX_BACKOFF", "17")],
            "BULKWIRE_RMPP_MAX_BACKOFF",
        ),
        (&[("BULKWIRE_RTO_MIN_US", "0")], "BULKWIRE_RTO_MIN_US"),
    ] {
        let e = error(vars);
        assert!(e.contains(names), "{vars:?}: {e}");
    }
}

/// The memory a peer's incomplete messages may hold: a size, 1 GiB by default, 1 MiB to
/// 1 TiB; it reaches the protocols' common settings.
#[test]
fn peer_budget() {
    assert_eq!(Settings::default().job().protocols.peer_budget, 1 << 30);
    let s = settings(&[("BULKWIRE_PEER_BUDGET", "256M")]).unwrap();
    assert_eq!(s.job().protocols.peer_budget, 256 << 20);
    let c = s
        .job()
        .protocols
        .timers(bulkwire_protocol::Common::new(0, 2, 1000));
    assert_eq!(c.peer_budget, 256 << 20);
    assert_eq!(c.message_limit(), 256 << 20);
    let s = settings(&[("BULKWIRE_PEER_BUDGET", "1024g")]).unwrap();
    assert_eq!(s.job().protocols.peer_budget, 1 << 40);
    for bad in ["1023K", "1025G", "lots", "-1M"] {
        let e = error(&[("BULKWIRE_PEER_BUDGET", bad)]);
        assert!(
            e.contains("BULKWIRE_PEER_BUDGET") && e.contains("from 1M to 1024G"),
            "{bad:?}: {e}"
        );
    }
}

#[test]
fn point_to_point() {
    let s = settings(&[("BULKWIRE_EAGER", "4k"), ("BULKWIRE_SINGLE_COPY", "off")]).unwrap();
    assert_eq!((s.p2p.eager, s.p2p.eager_local), (4096, 4096));
    assert_eq!(s.p2p.single_copy, SingleCopy::Off);
    let s = settings(&[("BULKWIRE_EAGER", "1m"), ("BULKWIRE_EAGER_LOCAL", "0")]).unwrap();
    assert_eq!((s.p2p.eager, s.p2p.eager_local), (1 << 20, 0));
    let s = settings(&[("BULKWIRE_SINGLE_COPY", "refuse")]).unwrap();
    assert_eq!(s.p2p.single_copy, SingleCopy::Refuse);
    assert!(error(&[("BULKWIRE_SINGLE_COPY", "sometimes")]).contains("BULKWIRE_SINGLE_COPY"));
}

#[test]
fn bsp() {
    let s = settings(&[
        ("BULKWIRE_BSP_SCHEDULE", "pid"),
        ("BULKWIRE_BSP_RATE", "500M"),
        ("BULKWIRE_STATS", "1"),
    ])
    .unwrap();
    assert_eq!(s.bsp.schedule, Schedule::Pid);
    assert_eq!(s.bsp.rate, Some(500_000_000));
    assert_eq!(s.bsp.chunk, Some(bulkwire_bsp::PACED_CHUNK));
    assert!(s.bsp.stats);
    assert_eq!(s.bsp.profile, None);
    let s = settings(&[("BULKWIRE_PROFILE", " /tmp/cg.prof ")]).unwrap();
    assert_eq!(s.bsp.profile, Some("/tmp/cg.prof".into()));
    let s = settings(&[("BULKWIRE_BSP_CHUNK", "1M"), ("BULKWIRE_BSP_RATE", "1G")]).unwrap();
    assert_eq!(s.bsp.chunk, Some(1 << 20));
    // Messages of puts are lent from 8 MiB unless set otherwise.
    assert_eq!(settings(&[]).unwrap().bsp.lend, 8 << 20);
    assert_eq!(bulkwire_bsp::Config::default().lend, 8 << 20);
    let s = settings(&[("BULKWIRE_BSP_LEND", "256k")]).unwrap();
    assert_eq!(s.bsp.lend, 256 << 10);
    let s = settings(&[("BULKWIRE_BSP_LEND", "off")]).unwrap();
    assert_eq!(s.bsp.lend, usize::MAX);
    // Broadcasts in a superstep go by multicast from the collectives' 32 KiB.
    assert_eq!(settings(&[]).unwrap().bsp.mcast_min, 32 << 10);
    let s = settings(&[("BULKWIRE_BSP_MCAST_MIN", "1M")]).unwrap();
    assert_eq!(s.bsp.mcast_min, 1 << 20);
    let s = settings(&[("BULKWIRE_BSP_MCAST_MIN", "off")]).unwrap();
    assert_eq!(s.bsp.mcast_min, usize::MAX);
    for bad in [
        ("BULKWIRE_BSP_SCHEDULE", "shuffle"),
        ("BULKWIRE_BSP_RATE", "fast"),
        ("BULKWIRE_BSP_CHUNK", "0"),
        ("BULKWIRE_BSP_LEND", "sometimes"),
        ("BULKWIRE_BSP_MCAST_MIN", "big"),
    ] {
        assert!(error(&[bad]).contains(bad.0), "{bad:?}");
    }
}

#[test]
fn collectives() {
    let s = settings(&[
        ("BULKWIRE_COLL", "p2p"),
        ("BULKWIRE_COLL_PART", "256k"),
        ("BULKWIRE_COLL_ALG", "large"),
        ("BULKWIRE_COLL_DIRECT", "16K"),
    ])
    .unwrap();
    assert_eq!((s.coll.mode, s.coll.family), (Mode::P2p, Family::Large));
    assert_eq!(s.coll.part_bytes, 256 << 10);
    assert_eq!(s.coll.thresholds.netcache_direct, 16 << 10);
    let off = settings(&[("BULKWIRE_COLL_DIRECT", "off")]).unwrap();
    assert_eq!(off.coll.thresholds.netcache_direct, usize::MAX);
    // Single copy is asked for; the cache's two copies are the default.
    let default = settings(&[]).unwrap();
    assert_eq!(default.coll.thresholds.netcache_direct, usize::MAX);
    assert!(error(&[("BULKWIRE_COLL", "bogus")]).contains("auto, netcache or p2p"));
}

#[test]
fn launch_placement_and_host() {
    let s = settings(&[
        ("BULKWIRE_BIND", "none"),
        ("BULKWIRE_HOST_ID", "node7"),
        ("BULKWIRE_HOST_CPUS", "16"),
        ("BULKWIRE_NPROCS", "6"),
    ])
    .unwrap();
    let l = &s.launch;
    assert_eq!(l.placement, Placement::Free);
    assert_eq!(
        (l.host_id.as_deref(), l.host_cpus),
        (Some("node7"), Some(16))
    );
    assert_eq!((l.job.clone(), l.available_processors()), (None, 6));
    assert!(error(&[("BULKWIRE_BIND", "core")]).contains("share or none"));
}

const RV: (&str, &str) = ("BULKWIRE_RENDEZVOUS", "127.0.0.1:4567");

fn job(vars: &[(&str, &str)]) -> Option<bulkwire_launch::JobEnv> {
    settings(vars).unwrap().launch.job
}

#[test]
fn nothing_set_means_not_launched() {
    assert_eq!(job(&[]), None);
    // BULKWIRE_NPROCS alone only sets the size for self-spawn.
    assert_eq!(job(&[("BULKWIRE_NPROCS", "4")]), None);
}

/// A job secret for the tests.
const SECRET_HEX: &str = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
const SECRET: (&str, &str) = ("BULKWIRE_SECRET", SECRET_HEX);

#[test]
fn bulkwire_job_variables_round_trip() {
    let e = job(&[
        ("BULKWIRE_RANK", "2"),
        ("BULKWIRE_NPROCS", "4"),
        RV,
        SECRET,
        ("BULKWIRE_JOB", "77"),
        ("BULKWIRE_HOST_ID", "h1"),
    ])
    .unwrap();
    assert_eq!((e.rank, e.nprocs, e.job_id), (2, 4, 77));
    assert_eq!(e.secret, Secret::from_hex(SECRET_HEX).unwrap());
    assert_eq!(e.rendezvous, "127.0.0.1:4567".parse().unwrap());
    assert_eq!(
        (e.launcher, e.host_id.as_deref()),
        (Launcher::Bulkwire, Some("h1"))
    );
    // Round trip through the variables a launcher sets.
    let mut vars = e.vars_for(3);
    vars.push(("BULKWIRE_HOST_ID", "h1".into()));
    let pairs: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (*k, v.as_str())).collect();
    assert_eq!(
        job(&pairs).unwrap(),
        bulkwire_launch::JobEnv { rank: 3, ..e }
    );
}

#[test]
fn the_secret_comes_from_the_environment_or_a_private_file_and_is_never_shown() {
    let base = [("BULKWIRE_RANK", "0"), ("BULKWIRE_NPROCS", "2"), RV];
    let with = |extra: &[(&'static str, &str)]| {
        let mut v: Vec<(&str, &str)> = base.to_vec();
        v.extend_from_slice(extra);
        v.into_iter()
            .map(|(k, x)| (k, x.to_string()))
            .collect::<Vec<_>>()
    };
    let pairs = |v: &[(&'static str, String)]| -> Vec<(&'static str, String)> { v.to_vec() };
    let run = |v: Vec<(&'static str, String)>| {
        Settings::from_lookup(|k| v.iter().find(|(n, _)| *n == k).map(|(_, x)| x.clone()))
    };
    // Without a name the job id still agrees across ranks (it derives from the secret).
    let a = run(with(&[SECRET])).unwrap().launch.job.unwrap();
    assert_eq!(
        a.job_id,
        run(with(&[SECRET])).unwrap().launch.job.unwrap().job_id
    );
    // A malformed secret is refused without echoing it.
    let e = run(with(&[("BULKWIRE_SECRET", "0123456789abcdefXYZ")]))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("BULKWIRE_SECRET") && e.contains("value hidden"),
        "{e}"
    );
    assert!(!e.contains("0123456789abcdef"), "{e}");
    // BULKWIRE_COOKIE is named as replaced.
    let e = run(with(&[SECRET, ("BULKWIRE_COOKIE", "0x1234")]))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("BULKWIRE_COOKIE") && e.contains("replaced by BULKWIRE_SECRET"),
        "{e}"
    );
    // A file: private ones are read, others refused, naming the path.
    let dir = std::env::temp_dir().join(format!("bw-cfg-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir(&dir).unwrap();
    let f = dir.join("secret");
    bulkwire_launch::write_key_file(&f, &Secret::from_hex(SECRET_HEX).unwrap()).unwrap();
    let fv = pairs(&with(&[("BULKWIRE_SECRET_FILE", f.to_str().unwrap())]));
    assert_eq!(
        run(fv.clone()).unwrap().launch.job.unwrap().secret,
        a.secret
    );
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
    let e = run(fv).unwrap_err().to_string();
    assert!(
        e.contains("BULKWIRE_SECRET_FILE") && e.contains(f.to_str().unwrap()) && e.contains("0644"),
        "{e}"
    );
    assert!(!e.contains(SECRET_HEX));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn slurm_job() {
    let v = [
        ("SLURM_PROCID", "3"),
        ("SLURM_NTASKS", "8"),
        ("SLURM_JOB_ID", "1234"),
        ("SLURM_STEP_ID", "0"),
        RV,
        SECRET,
    ];
    let e = job(&v).unwrap();
    assert_eq!((e.rank, e.nprocs, e.launcher), (3, 8, Launcher::Slurm));
    assert_eq!(e.job_id, job_id_from_name("slurm:1234.0"));
    // Another step of the same allocation is another job.
    let mut w = v;
    w[3] = ("SLURM_STEP_ID", "1");
    assert_ne!(job(&w).unwrap().job_id, e.job_id);
}

#[test]
fn open_mpi_job() {
    let e = job(&[
        ("OMPI_COMM_WORLD_RANK", "1"),
        ("OMPI_COMM_WORLD_SIZE", "2"),
        ("OMPI_MCA_ess_base_jobid", "3735552001"),
        RV,
        SECRET,
    ])
    .unwrap();
    assert_eq!((e.rank, e.nprocs, e.launcher), (1, 2, Launcher::OpenMpi));
    assert_eq!(e.job_id, job_id_from_name("ompi:3735552001"));
}

#[test]
fn bulkwire_wins_over_slurm() {
    // bsprun inside a Slurm batch script: the batch step's variables are stale.
    let e = job(&[
        ("BULKWIRE_RANK", "1"),
        ("BULKWIRE_NPROCS", "4"),
        SECRET,
        ("SLURM_PROCID", "0"),
        ("SLURM_NTASKS", "1"),
        RV,
    ])
    .unwrap();
    assert_eq!((e.rank, e.nprocs, e.launcher), (1, 4, Launcher::Bulkwire));
}

#[test]
fn single_task_batch_step_is_not_a_job() {
    assert_eq!(job(&[("SLURM_PROCID", "0"), ("SLURM_NTASKS", "1")]), None);
}

#[test]
fn incomplete_or_inconsistent_jobs() {
    let rank = |r| ("BULKWIRE_RANK", r);
    let size = |n| ("BULKWIRE_NPROCS", n);
    let secret = SECRET;
    for (vars, says) in [
        (&[rank("0")][..], "BULKWIRE_NPROCS is not"),
        (&[rank("4"), size("4"), RV, secret], "out of range"),
        (&[rank("x"), size("4")], "BULKWIRE_RANK=\"x\""),
        (&[rank("0"), size("0")], "BULKWIRE_NPROCS=\"0\""),
        (
            &[rank("0"), size("2"), secret],
            "BULKWIRE_RENDEZVOUS is not set",
        ),
        (
            &[("SLURM_PROCID", "0"), ("SLURM_NTASKS", "4")],
            "BULKWIRE_RENDEZVOUS is not set",
        ),
        (&[rank("0"), size("2"), RV], "no job secret"),
        (&[RV], "no rank"),
        (
            &[rank("0"), size("2"), RV, ("BULKWIRE_SECRET", "0xzz")],
            "BULKWIRE_SECRET=(value hidden)",
        ),
        (
            &[
                ("SLURM_PROCID", "0"),
                ("SLURM_NTASKS", "4"),
                size("8"),
                ("SLURM_JOB_ID", "1"),
                RV,
            ],
            "disagrees",
        ),
        (
            &[
                rank("0"),
                size("2"),
                secret,
                ("BULKWIRE_RENDEZVOUS", "no-port-here"),
            ],
            "host:port",
        ),
    ] {
        let e = error(vars);
        assert!(e.contains(says), "{vars:?}: {e}");
    }
}

fn boot(vars: &[(&str, &str)]) -> Option<bulkwire_launch::bootstrap::BootOffer> {
    let s = settings(vars).unwrap();
    assert_eq!(s.launch.job, None, "{vars:?}");
    s.launch.boot
}

#[test]
fn mpiexec_offers_pmi_on_its_descriptor() {
    use bulkwire_launch::bootstrap::{BootService, PmiAddr};
    let b = boot(&[("PMI_FD", "6"), ("PMI_RANK", "2"), ("PMI_SIZE", "4")]).unwrap();
    assert_eq!(b.service, BootService::Pmi(PmiAddr::Fd(6)));
    assert_eq!(
        (b.rank, b.size, b.launcher),
        (Some(2), Some(4), Launcher::Pmi)
    );
    let s = settings(&[("PMI_FD", "6"), ("PMI_RANK", "2"), ("PMI_SIZE", "4")]).unwrap();
    assert_eq!(s.launch.rank(), Some(2));
    assert!(s.launch.is_spawned());
    assert_eq!(s.launch.available_processors(), 4);
    let b = boot(&[
        ("PMI_PORT", "node1:4000"),
        ("PMI_ID", "3"),
        ("PMI_RANK", "3"),
        ("PMI_SIZE", "4"),
    ])
    .unwrap();
    assert_eq!(
        b.service,
        BootService::Pmi(PmiAddr::Port {
            addr: "node1:4000".into(),
            id: Some(3)
        })
    );
    // One process is no job to form: it may start its own.
    assert_eq!(
        settings(&[("PMI_FD", "6"), ("PMI_RANK", "0"), ("PMI_SIZE", "1")])
            .unwrap()
            .launch
            .boot,
        None
    );
    let e = error(&[("PMI_FD", "x"), ("PMI_RANK", "0"), ("PMI_SIZE", "2")]);
    assert!(e.contains("PMI_FD=\"x\""), "{e}");
    // A standard stream is no PMI connection (closing it would take stderr away).
    for fd in ["0", "1", "2"] {
        let e = error(&[("PMI_FD", fd), ("PMI_RANK", "0"), ("PMI_SIZE", "2")]);
        assert!(
            e.contains(&format!("PMI_FD={fd}")) && e.contains("standard"),
            "{e}"
        );
    }
}

#[test]
fn mpirun_offers_pmix_and_srun_pmi_or_its_node_list() {
    use bulkwire_launch::bootstrap::BootService;
    let ompi = [
        ("OMPI_COMM_WORLD_RANK", "1"),
        ("OMPI_COMM_WORLD_SIZE", "2"),
        ("OMPI_MCA_ess_base_jobid", "77"),
        ("PMIX_NAMESPACE", "prterun-x-1@1"),
        ("PMIX_RANK", "1"),
    ];
    let b = boot(&ompi).unwrap();
    assert_eq!(
        (b.service, b.launcher),
        (BootService::Pmix, Launcher::OpenMpi)
    );
    assert_eq!(b.job_name.as_deref(), Some("ompi:77"));
    let slurm = [
        ("SLURM_PROCID", "3"),
        ("SLURM_NTASKS", "8"),
        ("SLURM_JOB_ID", "12"),
        ("SLURM_STEP_ID", "0"),
        ("SLURM_STEP_NODELIST", "node[07-08,11],login"),
    ];
    let b = boot(&slurm).unwrap();
    assert_eq!(
        b.service,
        BootService::Derived {
            host: "node07".into()
        }
    );
    assert_eq!(b.job_name.as_deref(), Some("slurm:12.0"));
    // No user key: the derived rendezvous will refuse to start; with one, it is passed on.
    assert_eq!(b.user_key, None);
    let mut keyed = slurm.to_vec();
    keyed.push(SECRET);
    assert_eq!(
        boot(&keyed).unwrap().user_key,
        Some(Ok(Secret::from_hex(SECRET_HEX).unwrap()))
    );
    // srun --mpi=pmi2 gives a PMI descriptor too: it wins, unless told otherwise.
    let mut pmi2 = slurm.to_vec();
    pmi2.push(("PMI_FD", "5"));
    assert!(matches!(boot(&pmi2).unwrap().service, BootService::Pmi(_)));
    pmi2.push(("BULKWIRE_BOOTSTRAP", "derived"));
    assert!(matches!(
        boot(&pmi2).unwrap().service,
        BootService::Derived { .. }
    ));
    let mut want_pmix = slurm.to_vec();
    want_pmix.push(("BULKWIRE_BOOTSTRAP", "pmix"));
    let e = error(&want_pmix);
    assert!(
        e.contains("BULKWIRE_BOOTSTRAP") && e.contains("does not offer"),
        "{e}"
    );
    // A rendezvous given is used as before.
    let mut served = slurm.to_vec();
    served.extend([RV, SECRET]);
    assert!(job(&served).is_some());
}

#[test]
fn slurm_node_lists_name_their_first_host() {
    use crate::job::first_host;
    assert_eq!(
        first_host("node[01-04,07],login1").as_deref(),
        Some("node01")
    );
    assert_eq!(first_host("a,b").as_deref(), Some("a"));
    assert_eq!(first_host("gpu[3,5]x").as_deref(), Some("gpu3x"));
    assert_eq!(first_host("solo").as_deref(), Some("solo"));
    assert_eq!(first_host(""), None);
    assert_eq!(first_host("bad[1-2"), None);
}

#[test]
fn join_deadline_and_remote_shell() {
    let s = settings(&[
        ("BULKWIRE_JOIN_TIMEOUT", "5"),
        ("BULKWIRE_RSH", "ssh -p 2222"),
    ])
    .unwrap();
    assert_eq!(s.launch.join_timeout, Duration::from_secs(5));
    assert_eq!(s.launch.rsh, ["ssh", "-p", "2222"]);
    for bad in ["0", "-1", "86401", "1.5", "x"] {
        let e = error(&[("BULKWIRE_JOIN_TIMEOUT", bad)]);
        assert!(
            e.contains("BULKWIRE_JOIN_TIMEOUT") && e.contains("seconds from 1"),
            "{e}"
        );
    }
}

/// What every process of a job must share is listed by variable, with the values of those
/// of the protocol in use only (compared when the job forms: engine `job::connect`).
#[test]
fn settings_that_must_agree_across_the_job() {
    let s = settings(&[]).unwrap();
    let names: Vec<&str> = s.job().agree.iter().map(|(k, _)| *k).collect();
    assert_eq!(
        names,
        [
            "BULKWIRE_TRANSPORT",
            "BULKWIRE_PROTOCOL",
            "BULKWIRE_CHECKSUM",
            "BULKWIRE_AUTH",
            "BULKWIRE_MCAST",
            "BULKWIRE_CC",
            "BULKWIRE_HOLEFILL_SEQ_BITS"
        ]
    );
    assert_eq!(s.bsp.job.agree, s.p2p.job.agree);
    let s = settings(&[
        ("BULKWIRE_PROTOCOL", "gbn"),
        ("BULKWIRE_GBN_SEQ_BITS", "12"),
        ("BULKWIRE_TRANSPORT", "udp"),
    ])
    .unwrap();
    let a = &s.job().agree;
    assert!(a.contains(&("BULKWIRE_PROTOCOL", "gbn".into())), "{a:?}");
    assert!(a.contains(&("BULKWIRE_GBN_SEQ_BITS", "12".into())), "{a:?}");
    assert!(a.contains(&("BULKWIRE_TRANSPORT", "udp".into())), "{a:?}");
    assert!(!a.iter().any(|(k, _)| k.contains("HOLEFILL")), "{a:?}");
}

/// `BULKWIRE_CC` turns congestion control off for every protocol (the papers' protocols),
/// is on by default, and must agree across the job.
#[test]
fn congestion_control_is_on_unless_turned_off() {
    let s = settings(&[]).unwrap();
    assert!(s.job().protocols.cc);
    assert!(s.job().agree.contains(&("BULKWIRE_CC", "on".into())));
    let s = settings(&[("BULKWIRE_CC", "off")]).unwrap();
    assert!(!s.job().protocols.cc);
    assert!(s.job().agree.contains(&("BULKWIRE_CC", "off".into())));
    let s = settings(&[("BULKWIRE_CC", "all")]).unwrap();
    assert!(s.job().protocols.cc && s.job().protocols.cc_all);
    assert!(s.job().agree.contains(&("BULKWIRE_CC", "all".into())));
    let e = settings(&[("BULKWIRE_CC", "maybe")])
        .unwrap_err()
        .to_string();
    assert!(e.contains("BULKWIRE_CC") && e.contains("maybe"), "{e}");
}

/// `BULKWIRE_SPMD_ENTRY` must have the form bsp_begin writes (a process jumps to what it
/// names; the C library checks the address against the program before that).
#[test]
fn spmd_entry_has_the_form_bsp_begin_writes() {
    let job = [
        ("BULKWIRE_RANK", "1"),
        ("BULKWIRE_NPROCS", "2"),
        ("BULKWIRE_RENDEZVOUS", "127.0.0.1:9"),
        ("BULKWIRE_JOB", "7"),
        SECRET,
    ];
    let with = |e: &str| {
        let mut v = job.to_vec();
        v.push(("BULKWIRE_SPMD_ENTRY", e));
        settings(&v)
    };
    let ok = "0:1a2b:0123456789abcdef:/usr/bin/prog:with:colons";
    let s = with(ok).unwrap();
    assert_eq!(s.launch.job.unwrap().entry.as_deref(), Some(ok));
    for bad in [
        "0:0:",
        "0:1a2b:/usr/bin/prog",
        "x:1a2b:0123456789abcdef:p",
        "0:zz:0123456789abcdef:p",
        "0:1a2b:0123:p",
        "0:1a2b:0123456789abcdef",
    ] {
        let e = with(bad).unwrap_err().to_string();
        assert!(
            e.starts_with(&format!("BULKWIRE_SPMD_ENTRY={bad:?} is not accepted"))
                && e.contains("MODULE:OFFSET:CHECK:NAME"),
            "{e}"
        );
    }
}

/// `BULKWIRE_MCAST` and its companions reach the job's settings; bad values are named.
#[test]
fn multicast_settings() {
    use bulkwire_link::McastMode;
    let s = settings(&[]).unwrap();
    assert_eq!(s.job().mcast.mode, McastMode::Auto);
    assert_eq!(s.job().mcast.ttl, 1);
    assert_eq!(s.job().mcast.group, None);
    let s = settings(&[
        ("BULKWIRE_MCAST", "off"),
        ("BULKWIRE_MCAST_TTL", "4"),
        ("BULKWIRE_MCAST_GROUP", "239.192.1.2:30000"),
        ("BULKWIRE_MTU", "9000"),
    ])
    .unwrap();
    let m = &s.job().mcast;
    assert_eq!((m.mode, m.ttl, m.mtu), (McastMode::Off, 4, 9000));
    assert_eq!(m.group, Some("239.192.1.2:30000".parse().unwrap()));
    assert!(s.job().agree.contains(&("BULKWIRE_MCAST", "off".into())));
    assert_eq!(s.coll.mcast_min, 32 << 10);
    let s = settings(&[("BULKWIRE_COLL_MCAST_MIN", "1M")]).unwrap();
    assert_eq!(s.coll.mcast_min, 1 << 20);
    let s = settings(&[("BULKWIRE_COLL_MCAST_MIN", "off")]).unwrap();
    assert_eq!(s.coll.mcast_min, usize::MAX);
    for (var, bad) in [
        ("BULKWIRE_MCAST", "maybe"),
        ("BULKWIRE_MCAST_TTL", "0"),
        ("BULKWIRE_MCAST_TTL", "256"),
        ("BULKWIRE_MCAST_GROUP", "10.0.0.1:3000"),
        ("BULKWIRE_MCAST_GROUP", "239.192.1.2"),
        ("BULKWIRE_MCAST_GROUP", "239.192.1.2:0"),
        ("BULKWIRE_COLL_MCAST_MIN", "lots"),
    ] {
        let e = error(&[(var, bad)]);
        assert!(e.contains(var) && e.contains(bad), "{e}");
    }
}
