//! Fuzz the HEF reader: any bytes must give `Ok` or a typed error, never a panic, an abort or an
//! unbounded allocation. Each input is tried as is and re-sealed (both V3 hashes recomputed) so
//! mutations of the proto reach the decoder instead of stopping at the hash check. Whatever
//! parses is audited, rendered and diffed too, since those walk the same untrusted numbers.

#![no_main]

use hefprobe::hef::{self, reseal_v3, Expectations, Hef};
use libfuzzer_sys::fuzz_target;

fn exercise(bytes: &[u8]) {
    let Ok(hef) = Hef::from_bytes(bytes, "fuzz.hef") else { return };
    let report = hef::audit(&hef, &Expectations::default());
    let doc = hefprobe::report::audit::audit_doc(&report);
    let _ = doc.terminal(false);
    let _ = doc.markdown();
    let _ = report.to_json();
    let _ = hefprobe::report::audit::diff_doc(&hef::diff(&hef, &hef)).markdown();
    let _ = hef.to_bytes();
}

fuzz_target!(|data: &[u8]| {
    exercise(data);
    let mut sealed = data.to_vec();
    if reseal_v3(&mut sealed) {
        exercise(&sealed);
    }
});
