//! BSPlib for bulkwire: supersteps, DRMA (`put`, `get`) and BSMP (`send`, `move`) over
//! any [`bulkwire_engine::Transport`], with the BSPlib paper's superstep-aware messaging layer
//! (see [`core`] and `docs/bsp.md`).
//!
//! - [`Bsp`]: the safe Rust API. Registered memory belongs to the `Bsp` ([`Area`]), so a
//!   sync can never write under a live borrow.
//! - [`Runtime`] and [`core::Core`]: the raw, address-based calls the C ABI
//!   (`bulkwire-capi`, `bsp.h`) is built on.
//! - [`mod@bench`]: bspbench's g and l.
//! - [`profile`]: the cost profile of every superstep (`BULKWIRE_PROFILE`).
//!
//! Settings: [`Config`] (a program takes it from its environment with
//! `bulkwire_config::Settings::from_env()`).

mod api;
pub mod bench;
pub mod board;
mod bsmp;
mod config;
pub mod core;
mod direct;
mod error;
mod lock;
pub mod profile;
mod regs;
mod runtime;
pub mod stats;
mod wire;

pub use api::{Area, Bsp, Message, Pod, init};
pub use config::{Config, DEFAULT_MCAST_MIN, PACED_CHUNK, Schedule};
pub use direct::DirectGet;
pub use error::BspError;
pub use runtime::{Runtime, abort_job, say};
