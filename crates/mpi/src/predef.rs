//! Predefined handles and constants of `mpi.h` that the Rust side reads (the MPI 5.0
//! ABI's values). Datatypes and operations are their owners' (`datatype`, `op`).

use std::os::raw::c_int;

use crate::handle::Raw;

pub const MPI_COMM_NULL: Raw = 0x100;
pub const MPI_COMM_WORLD: Raw = 0x101;
pub const MPI_COMM_SELF: Raw = 0x102;
pub const MPI_GROUP_NULL: Raw = 0x108;
pub const MPI_GROUP_EMPTY: Raw = 0x109;
pub const MPI_WIN_NULL: Raw = 0x110;
pub const MPI_MESSAGE_NULL: Raw = 0x128;
pub const MPI_MESSAGE_NO_PROC: Raw = 0x129;
pub const MPI_INFO_NULL: Raw = 0x130;
pub const MPI_INFO_ENV: Raw = 0x131;
pub const MPI_ERRHANDLER_NULL: Raw = 0x140;
pub const MPI_ERRORS_ARE_FATAL: Raw = 0x141;
pub const MPI_ERRORS_ABORT: Raw = 0x142;
pub const MPI_ERRORS_RETURN: Raw = 0x143;
pub const MPI_REQUEST_NULL: Raw = 0x180;
pub const MPI_DATATYPE_NULL: Raw = 0x200;

pub const MPI_ANY_SOURCE: c_int = -1;
pub const MPI_ANY_TAG: c_int = -2;
pub const MPI_PROC_NULL: c_int = -3;
pub const MPI_ROOT: c_int = -4;
pub const MPI_UNDEFINED: c_int = -32766;

pub const MPI_THREAD_SINGLE: c_int = 0;
pub const MPI_THREAD_FUNNELED: c_int = 1024;
pub const MPI_THREAD_SERIALIZED: c_int = 2048;
pub const MPI_THREAD_MULTIPLE: c_int = 4096;

pub const MPI_IDENT: c_int = 201;
pub const MPI_CONGRUENT: c_int = 202;
pub const MPI_SIMILAR: c_int = 203;
pub const MPI_UNEQUAL: c_int = 204;

pub const MPI_CART: c_int = 211;
pub const MPI_GRAPH: c_int = 212;
pub const MPI_DIST_GRAPH: c_int = 213;

pub const MPI_COMM_TYPE_SHARED: c_int = 221;

pub const MPI_KEYVAL_INVALID: c_int = 0;
pub const MPI_TAG_UB: c_int = 501;
pub const MPI_IO: c_int = 502;
pub const MPI_HOST: c_int = 503;
pub const MPI_WTIME_IS_GLOBAL: c_int = 504;
pub const MPI_APPNUM: c_int = 505;
pub const MPI_LASTUSEDCODE: c_int = 506;
pub const MPI_UNIVERSE_SIZE: c_int = 507;

pub const MPI_MAX_ERROR_STRING: usize = 512;
pub const MPI_MAX_INFO_KEY: usize = 256;
pub const MPI_MAX_INFO_VAL: usize = 1024;
pub const MPI_MAX_LIBRARY_VERSION_STRING: usize = 8192;
pub const MPI_MAX_OBJECT_NAME: usize = 128;
pub const MPI_MAX_PROCESSOR_NAME: usize = 256;
pub const MPI_BSEND_OVERHEAD: usize = 512;

/// The largest user tag: a communicator's message carries `ctx << 16 | tag` as its p2p
/// tag (the tag space of `crate::net`).
pub const TAG_UB: c_int = 0xffff;

/// `MPI_IN_PLACE`.
pub const IN_PLACE: usize = 1;
