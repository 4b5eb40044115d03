//! Measurement kernels (ping-pong, streaming) and the statistics the reports print:
//! OSU methodology (warm-up, iterations, a window of 64 for bandwidth, powers of two) and
//! the Hockney fit t(n) = t0 + n / r_inf with n_1/2 = t0 * r_inf.

pub mod group;
pub mod kernels;
pub mod mpi;
pub mod pair;
pub mod raw;
pub mod report;
pub mod simexp;
pub mod stats;
pub mod suite;
