//! Measurement kernels (ping-pong, streaming) and the statistics the reports print:
//! OSU methodology (warm-up, iterations, a window of 64 for bandwidth, powers of two) and
//! the Hockney fit t(n) = t0 + n / r_inf with n_1/2 = t0 * r_inf. The experiments of
//! `bwbench` are in [`suite`], over two-process ([`pair`]) and p-process ([`group`]) jobs,
//! collective latency over p processes ([`coll`]), two hosts over veth ([`cluster`]), the
//! simulated network ([`simexp`],
//! [`errors`]), kernel TCP between namespaces
//! ([`netns`]) and the user's MPI ([`mpi`]); the figures that decide a target are measured
//! in alternating [`rounds`]; [`report`] writes them up.

pub mod bspk;
pub mod cluster;
pub mod coll;
pub mod errors;
pub mod group;
pub mod jobs;
pub mod kernels;
pub mod mpi;
pub mod netns;
pub mod p2pk;
pub mod pair;
pub mod raw;
pub mod report;
pub mod rounds;
pub mod simexp;
pub mod stats;
pub mod suite;
