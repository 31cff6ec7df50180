//! Fuzz the npz reader: any bytes must give `Ok` or a typed error, never a panic, an abort or an
//! allocation a header merely claims (every npy header's shape × dtype size is checked against
//! the member's real length before its data is read).

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = hefprobe::capture::npz::read_all_from_bytes(data);
});
