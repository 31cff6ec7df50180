//! The reader never panics: truncated, bit-flipped and length-corrupted files (re-sealed so the
//! hashes pass and the proto decoder is reached) all come back as `Ok` or a typed error.

use proptest::prelude::*;

use crate::hef::model::Hef;
use crate::hef::reseal_v3;
use crate::hef::strategy_tests;
use crate::hef::synth::LlmSpec;

/// One way of damaging a file.
#[derive(Debug, Clone)]
enum Mutation {
    Truncate(usize),
    Flip(usize, u8),
    /// Overwrite 4 or 8 bytes (a length, offset or varint) with a random value.
    Word(usize, u64, bool),
    /// Insert bytes (shifts every offset after them).
    Insert(usize, Vec<u8>),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        any::<usize>().prop_map(Mutation::Truncate),
        (any::<usize>(), 1u8..=255).prop_map(|(at, x)| Mutation::Flip(at, x)),
        (any::<usize>(), any::<u64>(), any::<bool>()).prop_map(|(at, v, wide)| Mutation::Word(at, v, wide)),
        (any::<usize>(), proptest::collection::vec(any::<u8>(), 1..8))
            .prop_map(|(at, b)| Mutation::Insert(at, b)),
    ]
}

fn apply(bytes: &mut Vec<u8>, m: &Mutation) {
    if bytes.is_empty() {
        return;
    }
    let len = bytes.len();
    match m {
        Mutation::Truncate(at) => bytes.truncate(at % len),
        Mutation::Flip(at, x) => bytes[at % len] ^= x,
        Mutation::Word(at, v, wide) => {
            let word = if *wide { v.to_be_bytes().to_vec() } else { (*v as u32).to_be_bytes().to_vec() };
            let at = at % len;
            let end = (at + word.len()).min(len);
            bytes[at..end].copy_from_slice(&word[..end - at]);
        }
        Mutation::Insert(at, b) => {
            let at = at % len;
            bytes.splice(at..at, b.iter().copied());
        }
    }
}

/// Mostly hit the small header and proto, where the structure is.
fn focus(m: Mutation, len: usize) -> Mutation {
    let hot = 56 + len.min(2048);
    match m {
        Mutation::Flip(at, x) => Mutation::Flip(at % hot, x),
        Mutation::Word(at, v, w) => Mutation::Word(at % hot, v, w),
        other => other,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn mutated_llm_hef_never_panics(muts in proptest::collection::vec(mutation(), 1..4), reseal in any::<bool>()) {
        let mut bytes = LlmSpec::tiny().build().unwrap().to_bytes();
        for m in muts {
            let m = focus(m, bytes.len());
            apply(&mut bytes, &m);
        }
        if reseal {
            reseal_v3(&mut bytes);
        }
        let _ = Hef::from_bytes(&bytes, "mutated.hef");
    }

    #[test]
    fn mutated_random_hef_never_panics(hef in strategy_tests::hef(), muts in proptest::collection::vec(mutation(), 1..3)) {
        let mut bytes = hef.to_bytes();
        for m in muts {
            apply(&mut bytes, &m);
        }
        reseal_v3(&mut bytes);
        let _ = Hef::from_bytes(&bytes, "mutated.hef");
    }
}

#[test]
fn resealed_proto_corruption_is_a_proto_error_not_a_panic() {
    let mut bytes = LlmSpec::tiny().build().unwrap().to_bytes();
    bytes[60] = 0xff; // inside the proto: an invalid tag
    bytes[61] = 0xff;
    assert!(reseal_v3(&mut bytes));
    let err = Hef::from_bytes(&bytes, "bad.hef").unwrap_err().to_string();
    assert!(err.contains("bad.hef offset 56 (proto)"), "{err}");
}
