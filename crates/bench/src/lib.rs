//! Measurement kernels (ping-pong, streaming) and the statistics the reports print:
//! OSU methodology (warm-up, iterations, a window of 64 for bandwidth, powers of two) and
//! the Hockney fit t(n) = t0 + n / r_inf with n_1/2 = t0 * r_inf. Over them, seed 000's
//! comparison of every stack ([`compare`]: latency table, bandwidth as a fraction of
//! utopia's) and its client/server error-rate experiment ([`errors`], [`netns`]).

pub mod compare;
pub mod errors;
pub mod kernels;
pub mod netns;
pub mod stats;
