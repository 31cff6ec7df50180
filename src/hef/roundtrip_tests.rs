//! Writer ↔ reader: every representable `Hef` survives `to_bytes` → `from_bytes` unchanged.

use proptest::prelude::*;

use crate::hef::container;
use crate::hef::model::Hef;
use crate::hef::strategy_tests;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn any_representable_hef_round_trips(hef in strategy_tests::hef()) {
        let bytes = hef.to_bytes();
        let back = Hef::from_bytes(&bytes, "roundtrip.hef").unwrap();
        prop_assert_eq!(back, hef);
    }

    #[test]
    fn written_files_keep_ccws_aligned(hef in strategy_tests::hef()) {
        let bytes = hef.to_bytes();
        let (c, _) = container::parse(&mut container::SliceSource(&bytes), "x").unwrap();
        prop_assert_eq!(c.layout.offset_zero_point % container::CCW_ALIGNMENT, 0);
        prop_assert_eq!(c.layout.declared_file_size, bytes.len() as u64);
    }
}

#[test]
fn written_hef_declares_what_hailort_requires() {
    let mut hef = crate::hef::synth::LlmSpec::tiny().build().unwrap();
    hef.extensions.clear();
    let back = Hef::from_bytes(&hef.to_bytes(), "x.hef").unwrap();
    assert_eq!(back.extensions, vec![13, 26]);
}
