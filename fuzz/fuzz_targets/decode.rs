//! Any byte string must decode to a packet or a counted drop, never a panic, and a
//! packet that decodes must re-encode to the same bytes. Half the inputs get a correct
//! CRC patched in first, so the fuzzer also explores the checks that follow the CRC.
#![no_main]

use bulkwire_protocol::wire::{Filter, HEADER_LEN, decode};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: &[u8]| {
    let Some((&mode, data)) = input.split_first() else { return };
    let mut data = data.to_vec();
    if mode & 1 == 1 && data.len() >= HEADER_LEN {
        let crc = crc32c::crc32c_append(crc32c::crc32c(&data[..60]), &data[HEADER_LEN..]);
        data[60..64].copy_from_slice(&crc.to_le_bytes());
    }
    let field = |at: usize| -> u32 {
        data.get(at..at + 4)
            .map_or(0, |b| u32::from_le_bytes(b.try_into().unwrap()))
    };
    // Mostly accept the packet's own cookie and addressing, sometimes not.
    let f = Filter {
        cookie: field(8) ^ u32::from(mode & 2 == 2),
        me: field(16) % 300,
        nprocs: (field(12) % 300).max(field(16) % 300) + u32::from(mode & 4 == 0),
    };
    if let Ok((hdr, payload)) = decode(&data, &f) {
        assert_eq!(hdr.encode_to_vec(payload), data);
    }
});
