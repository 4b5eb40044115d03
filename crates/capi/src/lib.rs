pub mod coll;
pub mod p2p;
