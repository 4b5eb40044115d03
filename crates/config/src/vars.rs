//! Every environment variable bulkwire reads: its name, what it accepts, its default and
//! what it does. The error for a bad value quotes `accepted` from here, and
//! `docs/configuration.md` and `bsprun --help-env` are generated from this table, so the
//! three never disagree.

/// Where a variable acts; the sections of the generated table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Section {
    Stack,
    Udp,
    Shm,
    Gbn,
    Holefill,
    Rmpp,
    Engine,
    P2p,
    Bsp,
    Collectives,
    Launch,
    Tools,
}

impl Section {
    pub const ALL: [Section; 12] = [
        Section::Stack,
        Section::Udp,
        Section::Shm,
        Section::Gbn,
        Section::Holefill,
        Section::Rmpp,
        Section::Engine,
        Section::P2p,
        Section::Bsp,
        Section::Collectives,
        Section::Launch,
        Section::Tools,
    ];

    pub fn title(self) -> &'static str {
        match self {
            Section::Stack => "Stack: protocol, link, faults",
            Section::Udp => "UDP link",
            Section::Shm => "Shared-memory link",
            Section::Gbn => "gbn (ParaStation2's go-back-N)",
            Section::Holefill => "holefill (BSPlib's selective retransmission)",
            Section::Rmpp => "rmpp (Sandia's message-based protocol)",
            Section::Engine => "Engine: waiting, progress, liveness",
            Section::P2p => "Point-to-point messaging",
            Section::Bsp => "BSPlib",
            Section::Collectives => "Collectives",
            Section::Launch => "Launch (set by the launchers; set by hand only to join a job)",
            Section::Tools => "Tools",
        }
    }
}

/// One variable.
#[derive(Debug, PartialEq, Eq)]
pub struct Var {
    pub name: &'static str,
    pub section: Section,
    /// What a value may be, as a bad value's error says it.
    pub accepted: &'static str,
    pub default: &'static str,
    pub about: &'static str,
}

macro_rules! vars {
    ($($id:ident: $section:ident, $name:literal, $accepted:literal, $default:literal, $about:literal;)*) => {
        $(
            #[doc = $about]
            pub const $id: Var = Var {
                name: $name,
                section: Section::$section,
                accepted: $accepted,
                default: $default,
                about: $about,
            };
        )*
        /// Every variable, in the order of the generated table.
        pub const ALL: &[&Var] = &[$(&$id),*];
    };
}

vars! {
    PROTOCOL: Stack, "BULKWIRE_PROTOCOL",
        "utopia, gbn, holefill, rmpp, or tcp (kernel TCP)",
        "utopia where every peer is reached over clean shared memory, else holefill",
        "The protocol that makes the link reliable, or the kernel-TCP stack.";
    TRANSPORT: Stack, "BULKWIRE_TRANSPORT",
        "auto, shm or udp",
        "auto",
        "The link: auto uses shared memory between the processes of a host and UDP between hosts; shm only shared memory (one host); udp UDP for every peer.";
    FAULTS: Stack, "BULKWIRE_FAULTS",
        "key=value pairs separated by commas: loss, corrupt, dup, reorder, delay (probabilities from 0 to 1), corrupt_bytes (1 to 65536), reorder_us, delay_us, seed (integers)",
        "no faults",
        "Faults injected on every datagram received, to exercise recovery, e.g. loss=0.05,dup=0.01,seed=7. utopia has no recovery: with utopia a lost datagram ends the job.";
    CHECKSUM: Stack, "BULKWIRE_CHECKSUM",
        "auto or always",
        "auto",
        "always: CRC32C on every datagram; auto leaves it out where the link cannot alter bytes (shared memory, UDP between addresses of one host) unless BULKWIRE_FAULTS corrupts. Every process must agree.";
    AUTH: Stack, "BULKWIRE_AUTH",
        "mac, header or off",
        "mac",
        "mac: every datagram over a link that others can send to (UDP) carries a 64-bit MAC keyed by the job's secret, over its header and, between hosts, its payload, so nothing from outside the job reaches a protocol (docs/security.md); header: between hosts the MAC covers the header and a CRC32C of the payload, cheaper on long packets, for a network where no one else can read the job's datagrams on the way; off: a cookie and a CRC32C screen them, which stops stray packets but no one who learns the cookie, for a network whose every host and user is trusted. Every process must agree.";
    RTO_INITIAL_US: Stack, "BULKWIRE_RTO_INITIAL_US",
        "microseconds from 1 to 1000000",
        "1000",
        "First retransmission timeout of gbn, holefill and rmpp, before a round trip is measured.";
    RTO_MIN_US: Stack, "BULKWIRE_RTO_MIN_US",
        "microseconds from 1 to 1000000",
        "200",
        "Floor of the retransmission timeout of gbn and rmpp (holefill keeps at least 1 ms: it delays its acknowledgements on purpose).";
    CC: Stack, "BULKWIRE_CC",
        "on, off (also 1/0, true/false, yes/no) or all",
        "on",
        "Congestion control: for gbn, a window per peer that halves on a loss through a queue and grows while packets get through, and a timeout that follows the queue; for rmpp, receiver grants (each receiver lets 20 packets be in flight to it, one or two senders at a time); holefill stays the paper's. all: also holefill's window and rmpp's pacing, for experiments (slower on the simulated switch, docs/protocols.md). off: the papers' protocols, which send as fast as their own windows allow; gbn's collapses on a switch whose buffers fill. Every process must agree.";
    PEER_BUDGET: Stack, "BULKWIRE_PEER_BUDGET",
        "a size in bytes from 1M to 1024G (suffixes K, M, G: powers of 1024)",
        "1G",
        "Most memory the incomplete messages of one peer may hold in a process (every stack; for tcp the frame being read), and so the largest message a job can send. A peer that announces more, or sends beyond it, fails the job naming that peer.";
    MTU: Udp, "BULKWIRE_MTU",
        "an integer from 576 to 65536",
        "the path MTU the kernel reports (64 KiB datagrams on loopback)",
        "Ethernet MTU to assume for every peer; datagrams carry this minus the IP and UDP headers.";
    GSO: Udp, "BULKWIRE_GSO",
        "on or off (also 1/0, true/false, yes/no)",
        "on",
        "Group consecutive datagrams to one peer into one UDP GSO send.";
    GRO: Udp, "BULKWIRE_GRO",
        "on or off (also 1/0, true/false, yes/no)",
        "on",
        "Accept UDP GRO-coalesced receive buffers.";
    SOCKBUF: Udp, "BULKWIRE_SOCKBUF",
        "a size in bytes from 1 to 1G (suffixes K, M, G: powers of 1024)",
        "4M",
        "SO_SNDBUF and SO_RCVBUF requested for each UDP socket (as root, past the system's cap).";
    MCAST: Udp, "BULKWIRE_MCAST",
        "auto, on or off",
        "auto",
        "IP multicast group of the job (an address and port derived from its secret, joined on the interface its hosts share): auto opens it when the job spans hosts and checks at start that every member hears every other, else goes on without it after one line saying why; on opens it for any job of two processes or more and fails the job if it does not reach every member; off never opens it. Every process must agree.";
    MCAST_TTL: Udp, "BULKWIRE_MCAST_TTL",
        "an integer from 1 to 255",
        "1",
        "Hops a multicast datagram may cross: 1 keeps the group on the hosts' own network segment.";
    MCAST_GROUP: Udp, "BULKWIRE_MCAST_GROUP",
        "an IPv4 multicast address and port, as 239.192.7.1:30000",
        "derived from the job's secret",
        "The multicast group, for a network whose switches pass only some groups; every process of the job must use the same.";
    SHM_RING: Shm, "BULKWIRE_SHM_RING",
        "a power of two from 4K to 1G (suffixes K, M, G: powers of 1024)",
        "1M, smaller with many processes per host (all rings within 256 MiB, at least 64K each)",
        "Bytes of each shared-memory ring (one per ordered pair of processes of a host). Every process of a host must agree.";
    SHM_DGRAM: Shm, "BULKWIRE_SHM_DGRAM",
        "a size from 65 bytes (the 64-byte packet header and one byte of data) to a quarter of the ring (suffixes K, M, G)",
        "64K or a quarter of the ring",
        "Largest datagram on the shared-memory link.";
    GBN_WINDOW: Gbn, "BULKWIRE_GBN_WINDOW",
        "an integer from 1 to 2^seq_bits - 1",
        "8",
        "Packets in flight per peer (the paper's window).";
    GBN_SEQ_BITS: Gbn, "BULKWIRE_GBN_SEQ_BITS",
        "an integer from 1 to 32",
        "8",
        "Width of the per-pair sequence numbers.";
    GBN_RX_SLOTS: Gbn, "BULKWIRE_GBN_RX_SLOTS",
        "an integer from 2 to 4294967295",
        "64",
        "Receive slots per process; one is always kept free (a packet that would take it is NACKed).";
    GBN_CUMULATIVE_ACKS: Gbn, "BULKWIRE_GBN_CUMULATIVE_ACKS",
        "on or off (also 1/0, true/false, yes/no)",
        "on",
        "An ACK also acknowledges every older packet, so a lost ACK costs no timeout (a variation on the paper, whose protocol is off).";
    GBN_BACKOFF_AFTER: Gbn, "BULKWIRE_GBN_BACKOFF_AFTER",
        "an integer from 0 to 20",
        "2",
        "Timeouts in a row toward a silent peer before the timeout doubles (never while the peer is heard from; 0 doubles at every timeout, as the paper's TCP-like timer does).";
    GBN_MAX_BACKOFF: Gbn, "BULKWIRE_GBN_MAX_BACKOFF",
        "an integer from 0 to 20",
        "4",
        "Most doublings of the timeout.";
    HOLEFILL_BUFFERS: Holefill, "BULKWIRE_HOLEFILL_BUFFERS",
        "an integer from 2 to 4294967295",
        "1024",
        "Packet buffers per process (n in the paper's acknowledgement rule n/(2p)).";
    HOLEFILL_SEQ_BITS: Holefill, "BULKWIRE_HOLEFILL_SEQ_BITS",
        "an integer from 2 to 32",
        "32",
        "Width of the per-pair sequence numbers.";
    HOLEFILL_WINDOW: Holefill, "BULKWIRE_HOLEFILL_WINDOW",
        "an integer from 1 to the smaller of buffers/2 and 2^(seq_bits-1) - 1",
        "256, or what fewer buffers allow",
        "Packets in flight per peer.";
    HOLEFILL_BURST: Holefill, "BULKWIRE_HOLEFILL_BURST",
        "an integer from 1 to 4294967295",
        "32",
        "Packets sent to one peer before the next peer's turn.";
    HOLEFILL_PROD_MIN_US: Holefill, "BULKWIRE_HOLEFILL_PROD_MIN_US",
        "microseconds from 1 to BULKWIRE_HOLEFILL_PROD_MAX_US",
        "100",
        "Shortest interval between prods of a silent sender.";
    HOLEFILL_PROD_MAX_US: Holefill, "BULKWIRE_HOLEFILL_PROD_MAX_US",
        "microseconds from BULKWIRE_HOLEFILL_PROD_MIN_US to 60000000",
        "100000",
        "Longest interval between prods after backing off.";
    HOLEFILL_INFLIGHT_KB: Holefill, "BULKWIRE_HOLEFILL_INFLIGHT_KB",
        "an integer from 1 to 4194304 (KiB)",
        "4096",
        "Most unacknowledged bytes per peer.";
    RMPP_WINDOW: Rmpp, "BULKWIRE_RMPP_WINDOW",
        "an integer from 1 to 1073741824",
        "64",
        "Messages in flight per peer.";
    RMPP_BURST: Rmpp, "BULKWIRE_RMPP_BURST",
        "an integer from 1 to 4294967295",
        "32",
        "Data packets sent to one peer before the next peer's turn.";
    RMPP_AUTO_ACCEPT: Rmpp, "BULKWIRE_RMPP_AUTO_ACCEPT",
        "on or off (also 1/0, true/false, yes/no)",
        "off",
        "Accept every message on arrival instead of when a receive is posted (BSP and the collectives do this themselves).";
    RMPP_BACKOFF_AFTER: Rmpp, "BULKWIRE_RMPP_BACKOFF_AFTER",
        "an integer from 0 to 20",
        "2",
        "Retransmissions in a row toward a silent peer before the timeout doubles.";
    RMPP_MAX_BACKOFF: Rmpp, "BULKWIRE_RMPP_MAX_BACKOFF",
        "an integer from 0 to 16",
        "4",
        "Most doublings of the timeout.";
    RMPP_ANNOUNCE_KIB: Rmpp, "BULKWIRE_RMPP_ANNOUNCE_KIB",
        "an integer from 1 to 1073741824 (KiB)",
        "16384",
        "Most bytes of announced, not yet accepted message heads held, all peers together.";
    SPIN_US: Engine, "BULKWIRE_SPIN_US",
        "microseconds from 0 to 10000000",
        "1000",
        "A wait spins this long before it sleeps; past 50 us of spinning each idle turn yields the core, unless a launcher bound the process to cores of its own.";
    PROGRESS_US: Engine, "BULKWIRE_PROGRESS_US",
        "microseconds from 0 (no progress thread) to 10000000",
        "2000",
        "Interval of the progress thread that keeps messages moving while the program computes. With 0, the library moves them only inside calls.";
    DEAD_AFTER_MS: Engine, "BULKWIRE_DEAD_AFTER_MS",
        "milliseconds from 100 to 604800000 (7 days)",
        "30000",
        "A peer silent this long while this process depends on it is reported dead, and the job ends naming it.";
    MALLOC_TUNE: Engine, "BULKWIRE_MALLOC_TUNE",
        "on or off (also 1/0, true/false, yes/no)",
        "on",
        "Keep freed large buffers in the process instead of returning them to the kernel (glibc mallopt): large messages then need no fresh pages.";
    EAGER: P2p, "BULKWIRE_EAGER",
        "a size in bytes from 0 to 1G (suffixes K, M, G)",
        "64K",
        "Messages up to this size are sent eagerly, larger ones by rendezvous. Also sets BULKWIRE_EAGER_LOCAL unless that is set.";
    EAGER_LOCAL: P2p, "BULKWIRE_EAGER_LOCAL",
        "a size in bytes from 0 to 1G (suffixes K, M, G)",
        "16K",
        "The eager limit toward processes whose buffers are read in place (single copy).";
    SINGLE_COPY: P2p, "BULKWIRE_SINGLE_COPY",
        "on or off (refuse: offered, every read refused, for tests)",
        "on",
        "Read large messages straight from the sender's buffer on one host (process_vm_readv). off also turns the collectives' single copy off.";
    SPLIT_COPY: P2p, "BULKWIRE_SPLIT_COPY",
        "a size in bytes (suffixes K, M, G) or off",
        "64K",
        "Single-copy messages from this size are copied half by each side: the receiver reads the first half, the sender writes the second into the receiver's buffer (process_vm_writev), at the same time.";
    BSP_SCHEDULE: Bsp, "BULKWIRE_BSP_SCHEDULE",
        "latin, pid or random",
        "latin",
        "Order in which a process sends to its destinations in a superstep: a latin square, everyone in pid order, or each process in its own random order (the last two for comparison).";
    BSP_RATE: Bsp, "BULKWIRE_BSP_RATE",
        "bytes per second (suffixes K, M, G: powers of 1000)",
        "no cap",
        "Pacing: most bytes per second a process hands to the transport in a superstep.";
    BSP_CHUNK: Bsp, "BULKWIRE_BSP_CHUNK",
        "a size from 1 byte to 1G (suffixes K, M, G: powers of 1024)",
        "one message per destination; 64K with BULKWIRE_BSP_RATE",
        "Most bytes per transport message of a superstep's data for one destination.";
    BSP_BOARD: Bsp, "BULKWIRE_BSP_BOARD",
        "on or off (also 1/0, true/false, yes/no)",
        "on",
        "When every process of the computation shares this host over shared memory, bsp_sync meets the others on a shared board (the barrier, who sends whom how much, and each small message) instead of sending barrier messages through the transport. off keeps everything in the transport.";
    BSP_LEND: Bsp, "BULKWIRE_BSP_LEND",
        "a size in bytes (suffixes K, M, G) or off",
        "8M",
        "A superstep's puts to a process of the same host, over shared memory, are read by that process straight out of the sender's memory (process_vm_readv) when they come to this many bytes and average 4 KiB or more per put (bsp_hpput data is then read from its source); the values of get requests likewise. off sends everything through the transport.";
    BSP_MCAST_MIN: Bsp, "BULKWIRE_BSP_MCAST_MIN",
        "a size in bytes (suffixes K, M, G) or off",
        "32K",
        "Where the job has a multicast group (BULKWIRE_MCAST) and three processes or more, a superstep in which a process puts or sends the same data to every other process, at least this many bytes to each, sends it once over the group instead of once per destination. off sends it to each destination.";
    STATS: Bsp, "BULKWIRE_STATS",
        "on or off (also 1/0, true/false, yes/no)",
        "off",
        "bsp_end prints each process's packet statistics (the BSPlib paper's Table 5).";
    PROFILE: Bsp, "BULKWIRE_PROFILE",
        "a file path PATH (process s writes PATH.s)",
        "no profile",
        "Record the BSP cost profile of every superstep (time computing and in bsp_sync, bytes and messages sent and received, packets of the BSPlib paper's Table 5); process s writes its records to PATH.s at bsp_end (created at bsp_begin, so a path that cannot be written stops the job at once). bwbench profile PATH turns them into tables, a timeline and the cost W + H g + S l (bsprun --profile PATH sets it).";
    COLL: Collectives, "BULKWIRE_COLL",
        "auto, netcache or p2p",
        "auto",
        "auto: the shared network cache when every process is on one host, else point-to-point algorithms.";
    COLL_PART: Collectives, "BULKWIRE_COLL_PART",
        "a size from 1 byte to 1G (suffixes K, M, G)",
        "1M",
        "Bytes of each process's part of the network cache (two halves used in turn).";
    COLL_ALG: Collectives, "BULKWIRE_COLL_ALG",
        "auto, small or large",
        "auto",
        "Force the point-to-point algorithms for small or for large messages.";
    COLL_DIRECT: Collectives, "BULKWIRE_COLL_DIRECT",
        "a size in bytes (suffixes K, M, G) or off",
        "off",
        "Network cache: scatter, gather and alltoall blocks from this size are read out of the writer's buffer (single copy, process_vm_readv) instead of going through the cache; so are broadcast and allgather with one reader per buffer (p = 2), and reductions whose slice per process is 4 times this size. Off by default: the cache's two copies, pipelined on two cores, were faster at every size measured.";
    COLL_MCAST_MIN: Collectives, "BULKWIRE_COLL_MCAST_MIN",
        "a size in bytes (suffixes K, M, G) or off",
        "32K",
        "Where the job has a multicast group (BULKWIRE_MCAST) and three processes or more, broadcasts from this size, and allgathers of blocks from this size (each process broadcasting its block in turn), go over it; smaller ones, and every other collective, use the point-to-point algorithms.";
    BIND: Launch, "BULKWIRE_BIND",
        "share or none",
        "share",
        "share: each process a launcher starts gets an equal share of its cores, whole cores first (nothing is bound when the processes outnumber the CPUs); none leaves placement to the scheduler.";
    HOST_CPUS: Launch, "BULKWIRE_HOST_CPUS",
        "an integer from 1 to 65536",
        "the CPUs this process may run on",
        "The CPUs the job's processes on this host share; set by a launcher that bound them.";
    HOST_ID: Launch, "BULKWIRE_HOST_ID",
        "any text",
        "hostname/boot id/network namespace",
        "Identity of this host: processes with the same one use shared memory. Tests set it to pretend several hosts.";
    SPMD_ENTRY: Launch, "BULKWIRE_SPMD_ENTRY",
        "set by bsp_begin: MODULE:OFFSET:CHECK:NAME, a function in an executable segment of the program, with a check of its code",
        "none",
        "Set by bsp_begin for the processes it starts for a later SPMD section of a BSPlib program: the function they run. A value that names no function of the program (wrong form, outside its executable segments, or a check that does not match the code there) stops the process with an error before anything runs.";
    RANK: Launch, "BULKWIRE_RANK",
        "an integer from 0 to BULKWIRE_NPROCS - 1",
        "not in a job",
        "This process's rank.";
    NPROCS: Launch, "BULKWIRE_NPROCS",
        "an integer from 1 to 4294967295",
        "the CPUs this process may run on (for bsp_nprocs before bsp_begin)",
        "The job's size.";
    RENDEZVOUS: Launch, "BULKWIRE_RENDEZVOUS",
        "host:port",
        "none",
        "The job's rendezvous server (set by bsprun; by hand for bsprun --serve). Under srun, mpirun or mpiexec without it, the job forms through the launcher's own bootstrap service (see BULKWIRE_BOOTSTRAP).";
    SECRET: Launch, "BULKWIRE_SECRET",
        "64 hex digits (32 bytes)",
        "none (bsprun generates one per job)",
        "The job's secret: a process proves it to join the job, the rendezvous server proves it back, and the packet cookie and keys derive from it. Set by bsprun for the processes it starts; by hand (from bsprun --serve) for processes of another launcher; under srun --mpi=none, the user's key from which each job's secret is derived. Never on a command line.";
    SECRET_FILE: Launch, "BULKWIRE_SECRET_FILE",
        "the path of a file holding 64 hex digits, owned by the user and private (mode 0600 or stricter, no symbolic link)",
        "none",
        "Where to read the job's secret when BULKWIRE_SECRET is not set (bsprun --serve writes one).";
    COOKIE: Launch, "BULKWIRE_COOKIE",
        "nothing: replaced by BULKWIRE_SECRET",
        "unset",
        "Replaced by BULKWIRE_SECRET; setting it is an error (the packet cookie derives from the secret).";
    JOIN_TIMEOUT: Launch, "BULKWIRE_JOIN_TIMEOUT",
        "seconds from 1 to 86400",
        "60",
        "Every process of a job must have joined it this long after the rendezvous started (after the first process joined, under bsprun); otherwise the job fails, naming the ranks that never came.";
    BOOTSTRAP: Launch, "BULKWIRE_BOOTSTRAP",
        "auto, pmi, pmix or derived",
        "auto",
        "How a job started by srun, mpirun or mpiexec without BULKWIRE_RENDEZVOUS forms: auto uses the launcher's PMI-1 service (PMI_FD, PMI_PORT), else PMIx (libpmix, loaded when needed), else rank 0 serves on the first host of Slurm's node list at ports derived from the job id (derived: this needs the user's key, BULKWIRE_SECRET or ~/.config/bulkwire/key).";
    RSH: Tools, "BULKWIRE_RSH",
        "a command and its arguments, separated by spaces",
        "ssh",
        "The remote shell bsprun starts each other host's agent with, called as COMMAND HOST AGENT... (as ssh is); bsprun --rsh overrides it.";
    JOB: Launch, "BULKWIRE_JOB",
        "any text (a number is used as it is, other text hashed)",
        "Slurm's or Open MPI's job id",
        "The job's identity (a name for messages and shared names; not a credential).";
}

/// Variables of other launchers that identify a job (read, never written).
pub const FOREIGN: &[(&str, &str)] = &[
    ("SLURM_PROCID, SLURM_NTASKS", "rank and size under srun"),
    (
        "SLURM_JOB_ID, SLURM_STEP_ID",
        "the job's identity under srun (each step is a job)",
    ),
    (
        "OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE",
        "rank and size under Open MPI's mpirun",
    ),
    (
        "OMPI_MCA_ess_base_jobid, PMIX_NAMESPACE, OMPI_MCA_orte_ess_jobid",
        "the job's identity under Open MPI's mpirun",
    ),
    (
        "PMI_RANK, PMI_SIZE, PMI_FD, PMI_PORT, PMI_ID",
        "rank, size and the PMI-1 service under MPICH's mpiexec (Hydra) and srun --mpi=pmi2",
    ),
    (
        "PMIX_RANK, PMIX_NAMESPACE, PMIX_SERVER_URI*",
        "the PMIx service under Open MPI's mpirun and srun --mpi=pmix",
    ),
    (
        "SLURM_STEP_NODELIST, SLURM_JOB_NODELIST",
        "the host of rank 0 under srun without PMI (its first host)",
    ),
];

/// The variable named `name`, if bulkwire reads one.
pub fn find(name: &str) -> Option<&'static Var> {
    ALL.iter().copied().find(|v| v.name == name)
}

/// The table as Markdown, one section per [`Section`] (what `docs/configuration.md`
/// holds between its markers).
pub fn markdown() -> String {
    let mut s = String::new();
    for section in Section::ALL {
        s += &format!("### {}\n\n", section.title());
        s += "| variable | accepted | default | meaning |\n|---|---|---|---|\n";
        for v in ALL.iter().filter(|v| v.section == section) {
            s += &format!(
                "| `{}` | {} | {} | {} |\n",
                v.name,
                cell(v.accepted),
                cell(v.default),
                cell(v.about)
            );
        }
        s += "\n";
    }
    s += "### Other launchers' variables (read to join their jobs)\n\n";
    s += "| variables | meaning |\n|---|---|\n";
    for (names, about) in FOREIGN {
        s += &format!("| `{names}` | {about} |\n");
    }
    s
}

fn cell(text: &str) -> String {
    text.replace('|', "\\|")
}

/// The table as plain text for a terminal, `width` columns wide.
pub fn text(width: usize) -> String {
    let mut s = String::new();
    for section in Section::ALL {
        s += &format!("{}\n", section.title());
        for v in ALL.iter().filter(|v| v.section == section) {
            s += &format!("  {}\n", v.name);
            s += &wrap(v.about, 6, width);
            s += &wrap(&format!("accepted: {}", v.accepted), 6, width);
            s += &wrap(&format!("default: {}", v.default), 6, width);
        }
        s += "\n";
    }
    s += "Other launchers' variables, read to join their jobs\n";
    for (names, about) in FOREIGN {
        s += &format!("  {names}\n");
        s += &wrap(about, 6, width);
    }
    s
}

/// `text` broken into lines of at most `width` columns, each indented by `indent`.
fn wrap(text: &str, indent: usize, width: usize) -> String {
    let mut out = String::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        if !line.is_empty() && indent + line.len() + 1 + word.len() > width {
            out += &format!("{:indent$}{line}\n", "");
            line.clear();
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line += word;
    }
    if !line.is_empty() {
        out += &format!("{:indent$}{line}\n", "");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_prefixed() {
        let mut names: Vec<&str> = ALL.iter().map(|v| v.name).collect();
        assert!(
            names.iter().all(|n| n.starts_with("BULKWIRE_")),
            "{names:?}"
        );
        names.sort_unstable();
        let n = names.len();
        names.dedup();
        assert_eq!(names.len(), n, "a variable is listed twice");
    }

    #[test]
    fn every_section_has_a_variable_or_is_tools() {
        for s in Section::ALL {
            assert!(
                s == Section::Tools || ALL.iter().any(|v| v.section == s),
                "{s:?} is empty"
            );
        }
    }

    #[test]
    fn text_lines_fit() {
        for line in text(80).lines() {
            // A single word longer than the width may stand alone.
            assert!(
                line.len() <= 80 || !line.trim().contains(' '),
                "too long: {line}"
            );
        }
        assert!(text(80).contains("BULKWIRE_DEAD_AFTER_MS"));
    }
}
