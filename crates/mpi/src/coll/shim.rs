//! Stand-ins for core's communicators, requests and runtime (`crate::comm`,
//! `crate::request`, `crate::runtime`) with the shared contract's signatures, so that the
//! collectives' C entry points build before core is merged.
//!
//! TO BE REPLACED on merge with core: `use crate::{comm, request, runtime}` in `coll.rs` and
//! `op.rs`, and this file deleted. Until then every communicator lookup fails with
//! `MPI_ERR_COMM` (no communicator exists without core's `MPI_Init`).

pub mod comm {
    use std::os::raw::c_int;
    use std::sync::Arc;

    use crate::error::MPI_ERR_COMM;
    use crate::handle::Raw;
    use crate::net::{Net, ReqId};

    pub struct Group {
        pub ranks: Vec<u32>,
    }

    pub struct Communicator {
        pub group: Arc<Group>,
        pub rank: u32,
        pub ctx: u16,
        pub world_like: bool,
    }

    impl Communicator {
        pub fn size(&self) -> u32 {
            self.group.ranks.len() as u32
        }
        pub fn next_coll_tag(&self) -> u16 {
            0
        }
        pub fn net(&self) -> impl Net + '_ {
            NoNet
        }
    }

    struct NoNet;

    impl Net for NoNet {
        fn rank(&self) -> u32 {
            0
        }
        fn size(&self) -> u32 {
            1
        }
        unsafe fn isend(&self, _: u32, _: u16, _: *const u8, _: usize) -> Result<ReqId, c_int> {
            Err(MPI_ERR_COMM)
        }
        unsafe fn irecv(&self, _: u32, _: u16, _: *mut u8, _: usize) -> Result<ReqId, c_int> {
            Err(MPI_ERR_COMM)
        }
        fn test(&self, _: ReqId) -> Option<Result<usize, c_int>> {
            Some(Err(MPI_ERR_COMM))
        }
        fn wait(&self, _: ReqId) -> Result<usize, c_int> {
            Err(MPI_ERR_COMM)
        }
    }

    pub fn lookup(_h: Raw) -> Result<Arc<Communicator>, c_int> {
        Err(MPI_ERR_COMM)
    }
}

pub mod request {
    use std::os::raw::c_int;

    use crate::handle::Raw;

    pub trait Operation: Send {
        fn progress(&mut self) -> Option<Result<(), c_int>>;
    }

    /// Without core's request table the operation runs to completion here; the request
    /// is `MPI_REQUEST_NULL` (already complete).
    pub fn start_operation(mut op: Box<dyn Operation>) -> Raw {
        while op.progress().is_none() {
            std::thread::yield_now();
        }
        0x180
    }
}

pub mod runtime {
    use std::fmt::Display;
    use std::os::raw::c_int;

    use crate::error::MPI_ERR_OTHER;
    use crate::handle::Raw;

    /// Core's error handler dispatch: here the code is returned (`MPI_ERRORS_RETURN`).
    pub fn fail(_comm: Raw, code: c_int, _what: impl Display) -> c_int {
        code
    }

    pub fn p2p() -> Result<&'static bulkwire_p2p::Comm, c_int> {
        Err(MPI_ERR_OTHER)
    }

    pub fn coll_config() -> &'static bulkwire_collectives::Config {
        static C: std::sync::OnceLock<bulkwire_collectives::Config> = std::sync::OnceLock::new();
        C.get_or_init(Default::default)
    }
}
