//! Measurement kernels (ping-pong, streaming) and the statistics the reports print:
//! OSU methodology (warm-up, iterations, a window of 64 for bandwidth, powers of two) and
//! the Hockney fit t(n) = t0 + n / r_inf with n_1/2 = t0 * r_inf.
//!
//! The experiments of `bwbench` are in [`experiments`], one module each, listed in its
//! registry. Each makes a [`plan`] of runs for the [`suite`]'s level, over typed
//! [`stack`]s: two-process ([`pair`]) and p-process ([`group`]) jobs, BSP ([`bspk`]) and
//! collective latency ([`coll`]) over p processes, the simulated network ([`simexp`],
//! [`errors`]), kernel TCP between namespaces ([`netns`]) and the user's MPI ([`mpi`]);
//! the figures that decide a target are measured in alternating [`rounds`]. Each writes a
//! [`section`] of the report from what its runs returned; [`report`] puts them together
//! under a summary, and [`chart`] draws the charts.

pub mod bspk;
pub mod chart;
pub mod coll;
pub mod errors;
pub mod experiments;
pub mod group;
pub mod jobs;
pub mod kernels;
pub mod mpi;
pub mod netns;
pub mod npb;
pub mod osu;
pub mod p2pk;
pub mod pair;
pub mod plan;
pub mod profile;
pub mod raw;
pub mod report;
pub mod rounds;
pub mod scale;
pub mod section;
pub mod simexp;
pub mod stack;
pub mod stats;
pub mod suite;
pub mod timeline;
pub mod xchg;
