//! The registry against itself: every entry parses, every grid spec is a registered fault,
//! the per-layer rule agrees with what parsing accepts, and the grid and messages users and
//! reports/fault-localization.md depend on stay as they are.

use super::*;
use crate::fault::catalog::cache::CacheLayout;
use crate::named::Named;

/// Whether the spec written `text` names the entry `e`.
fn is_named(e: &Entry, text: &str) -> bool {
    FaultSpec::parse(text).is_ok_and(|s| s.name == e.name)
}

fn tinystories() -> ModelConfig {
    crate::model::synth::preset_config("tinystories").unwrap()
}

/// Configs that change what applies: one kv head (no transpose), one head (no head mixing).
fn configs() -> Vec<ModelConfig> {
    let mut one_kv = tinystories();
    one_kv.num_kv_heads = 1;
    let mut one_head = one_kv.clone();
    one_head.num_heads = 1;
    vec![tinystories(), one_kv, one_head]
}

#[test]
fn faults_that_do_not_apply_say_why() {
    let mut cfg = crate::model::synth::preset_config("tinystories").unwrap();
    cfg.num_kv_heads = 1;
    let e = parse("cache-layout:transpose", &cfg).err().unwrap().to_string();
    assert!(e.contains("at least 2 kv heads") && e.contains("has 1"), "{e}");
    cfg.num_heads = 1;
    let e = parse("shared-softmax", &cfg).err().unwrap().to_string();
    assert!(e.contains("one attention head"), "{e}");
    let e = parse("no-lm-head@layers=1", &cfg).err().unwrap().to_string();
    assert!(e.contains("not per layer"), "{e}");
    let e = parse("position-shift:0", &cfg).err().unwrap().to_string();
    assert!(e.contains("clean run"), "{e}");
}

#[test]
fn names_and_findings_are_unique() {
    for (i, a) in REGISTRY.iter().enumerate() {
        for b in &REGISTRY[i + 1..] {
            assert_ne!(a.name, b.name);
            // Findings are shared only by the width hypotheses of finding 16.
            let shared_ok = a.finding == Some(16) && b.finding == Some(16);
            assert!(a.finding.is_none() || a.finding != b.finding || shared_ok, "{} and {}", a.name, b.name);
        }
        assert_eq!(finding_of(a.name), a.finding);
        assert!(a.positional <= a.keys.len(), "{}", a.name);
        assert!(!a.summary.is_empty() && !a.summary.contains('\n'), "{}", a.name);
    }
}

#[test]
fn every_fault_parses_with_its_defaults() {
    let cfg = tinystories();
    for e in REGISTRY {
        let f = parse(e.name, &cfg).unwrap_or_else(|err| panic!("{}: {err}", e.name));
        assert_eq!(*f.spec(), e.name);
        assert!(is_named(e, e.name));
    }
}

#[test]
fn every_grid_spec_parses_and_names_its_fault() {
    for cfg in configs() {
        for e in REGISTRY {
            for spec in e.grid_specs(&cfg) {
                let f = build(&spec, &cfg).unwrap_or_else(|err| panic!("grid spec {spec}: {err}"));
                assert_eq!(f.spec(), &spec);
                assert_eq!(FaultSpec::parse(&spec.text).unwrap().name, e.name, "{spec}");
                assert!(spec.name == e.name && entry(e.name).is_some(), "{spec}");
            }
        }
        // A fault left out of the grid is one that cannot apply to this model.
        for e in REGISTRY.iter().filter(|e| e.grid_specs(&cfg).is_empty()) {
            assert!(parse(e.name, &cfg).is_err(), "{} applies but is not in the grid", e.name);
        }
    }
}

#[test]
fn per_layer_faults_are_exactly_those_that_take_layers() {
    let cfg = tinystories();
    for e in REGISTRY {
        let takes = parse(&format!("{}@layers=0", e.name), &cfg).is_ok();
        assert_eq!(takes, e.per_layer, "{}", e.name);
        let narrowed = per_layer(&FaultSpec::parse(e.name).unwrap(), &cfg);
        assert_eq!(!narrowed.is_empty(), e.per_layer, "{}", e.name);
        for (l, spec) in narrowed.iter().enumerate() {
            assert_eq!(spec.text, format!("{}@layers={l}", e.name));
            assert_eq!(*spec, FaultSpec::parse(&spec.text).unwrap(), "the same spec as written");
            build(spec, &cfg).unwrap();
        }
        // Already narrowed: not narrowed again.
        assert!(per_layer(&FaultSpec::parse(&format!("{}@layers=1", e.name)).unwrap(), &cfg).is_empty());
    }
    let mut one = cfg.clone();
    one.num_layers = 1;
    assert!(per_layer(&FaultSpec::parse("rope").unwrap(), &one).is_empty());
    // The flag itself: explain narrows these, and the matrix injects them at one layer.
    let names: Vec<&str> = REGISTRY.iter().filter(|e| e.per_layer).map(|e| e.name).collect();
    assert_eq!(
        names,
        [
            "shared-softmax",
            "mask-repeat",
            "rope",
            "cache-layout",
            "tile-sum",
            "norm-acc",
            "norm-width",
            "tile-scale"
        ]
    );
}

#[test]
fn the_grid_stays_as_explain_and_the_matrix_report_rank_it() {
    let full = [
        "shared-softmax",
        "mask-repeat",
        "rope:interleaved,target=both",
        "rope:interleaved,target=q",
        "rope:interleaved,target=k",
        "rope:sin-sign,target=both",
        "rope:sin-sign,target=q",
        "rope:sin-sign,target=k",
        "rope:shift,target=q",
        "rope:shift,target=k",
        "position-shift:1",
        "position-shift:-1",
        "cache-layout:interleave",
        "cache-layout:transpose",
        "no-lm-head",
        "first-slot-output",
        "lm-head-shards:2,scale=shard0",
        "lm-head-shards:3,scale=shard0",
        "lm-head-shards:4,scale=shard0",
        "quant:w8a16",
        "quant:w8a8",
        "quant:w4a16",
        "quant:w4a8",
        // The width faults of finding 16 at hidden 288: the tiles narrower than the row (256),
        // the accumulators a 288-wide row can saturate.
        "tile-sum:256",
        "norm-acc:16",
        "norm-acc:20",
        "norm-width:256",
        "norm-width:256,pad",
        "tile-scale:256",
    ];
    let [all, one_kv, one_head] = configs().try_into().ok().unwrap();
    assert_eq!(grid(&all), full);
    let no_transpose: Vec<&str> = full.into_iter().filter(|s| *s != "cache-layout:transpose").collect();
    assert_eq!(grid(&one_kv), no_transpose);
    let no_heads: Vec<&str> = no_transpose[2..].to_vec();
    assert_eq!(grid(&one_head), no_heads);
}

#[test]
fn refusals_keep_their_messages() {
    let cfg = tinystories();
    let cases = [
        ("shared-softmax:x=1", "fault `shared-softmax:x=1`: unknown parameter `x`; it takes: none"),
        ("mask-repeat:foo", "fault `mask-repeat:foo`: unexpected parameter `foo`"),
        ("shared-softmax@layers=9", "fault `shared-softmax@layers=9`: layer 9 is out of range; this model has layers 0..=5"),
        ("rope:x=1", "fault `rope:x=1`: unknown parameter `x`; it takes: variant, target, shift"),
        ("rope:bogus", "fault `rope:bogus`: `variant` = `bogus` is not valid; valid: interleaved, sin-sign, shift"),
        ("rope:interleaved,target=x", "fault `rope:interleaved,target=x`: `target` = `x` is not valid; valid: both, q, k"),
        ("rope:shift,shift=0", "fault `rope:shift,shift=0`: `shift` must be non-zero for the shift variant"),
        ("rope:a,b", "fault `rope:a,b`: unexpected parameter `b`"),
        ("position-shift:1@layers=0", "fault `position-shift:1@layers=0`: this fault is not per layer; drop `@layers=`"),
        ("position-shift:65", "fault `position-shift:65`: `k` = 65 is out of range; valid: -64..=64"),
        (
            "position-shift:1,from=prefill",
            "fault `position-shift:1,from=prefill`: `from` = `prefill`: expected decode or chunkC (e.g. chunk1)",
        ),
        ("cache-layout:bogus", "fault `cache-layout:bogus`: `layout` = `bogus` is not valid; valid: transpose, interleave"),
        ("cache-layout:x=1", "fault `cache-layout:x=1`: unknown parameter `x`; it takes: layout"),
        ("lm-head-shards:3,scale=x", "fault `lm-head-shards:3,scale=x`: `scale` = `x` is not valid; valid: own, shard0"),
        ("lm-head-shards:2@layers=0", "fault `lm-head-shards:2@layers=0`: this fault is not per layer; drop `@layers=`"),
        (
            "quant:foo=1",
            "fault `quant:foo=1`: unknown parameter `foo`; it takes: preset, weights, acts, points, inputs, rope_bits, granularity, keep",
        ),
        ("quant:w8@layers=0", "fault `quant:w8@layers=0`: this fault is not per layer; drop `@layers=`"),
        (
            "shared-sofmax",
            "unknown fault `shared-sofmax` (did you mean `shared-softmax`?); known faults: shared-softmax, \
             mask-repeat, rope, position-shift, cache-layout, no-lm-head, first-slot-output, lm-head-shards, quant, \
             tile-sum, norm-acc, norm-width, tile-scale",
        ),
        (
            "xyz",
            "unknown fault `xyz`; known faults: shared-softmax, mask-repeat, rope, position-shift, \
             cache-layout, no-lm-head, first-slot-output, lm-head-shards, quant, tile-sum, norm-acc, \
             norm-width, tile-scale",
        ),
    ];
    for (spec, message) in cases {
        let e = parse(spec, &cfg).err().unwrap_or_else(|| panic!("{spec} parsed"));
        assert_eq!(e.to_string(), message);
    }
    let mut small = cfg.clone();
    small.vocab_size = 3;
    let e = parse("lm-head-shards:4", &small).err().unwrap().to_string();
    assert_eq!(e, "fault `lm-head-shards:4`: 4 shards for a vocabulary of 3");
}

#[test]
fn every_word_picks_its_value() {
    fn round_trip<C: Named + PartialEq + std::fmt::Debug>(key: &str) {
        for &c in C::ALL {
            let spec = FaultSpec::parse(&format!("x:{key}={}", c.name())).unwrap();
            assert_eq!(spec.pick(key, None, C::ALL[0]).unwrap(), c);
        }
    }
    round_trip::<rope::RopeVariant>("variant");
    round_trip::<rope::RopeTarget>("target");
    round_trip::<cache::CacheLayoutKind>("layout");
    round_trip::<output::ShardScale>("scale");
    round_trip::<width::SumMode>("mode");
}

#[test]
fn typed_parse_keeps_the_parameters() {
    let cfg = tinystories();
    let spec = |t: &str| FaultSpec::parse(t).unwrap();
    let p = parse_as::<CacheLayout>(&spec("cache-layout:interleave@layers=1"), &cfg).unwrap();
    assert_eq!(p.mechanism.layout, cache::CacheLayoutKind::Interleave);
    assert!(p.spec.applies(1) && !p.spec.applies(0));
    assert_eq!(
        parse_as::<CacheLayout>(&spec("cache-layout"), &cfg).unwrap().mechanism.layout,
        cache::CacheLayoutKind::Transpose
    );
    assert!(parse_as::<CacheLayout>(&spec("rope"), &cfg).is_err());
    let r = parse_as::<rope::RopeFault>(&spec("rope:shift,target=k,shift=-2"), &cfg).unwrap().mechanism;
    assert_eq!((r.variant, r.target, r.shift), (rope::RopeVariant::Shift, rope::RopeTarget::K, -2));
    assert!(
        is::<CacheLayout>(&spec("cache-layout:transpose@layers=0"))
            && !is::<CacheLayout>(&spec("cache-layoutx"))
    );
    // A spec grows a parameter as it would be written.
    assert_eq!(spec("quant:a16").with_param("inputs", "none").text, "quant:a16,inputs=none");
    assert_eq!(spec("no-lm-head").with_param("k", "v"), spec("no-lm-head:k=v"));
}

/// A small llama with every tap of a prompt and two decode steps, through `specs` (none: clean).
fn all_taps(ckpt: &crate::model::Checkpoint, specs: &[FaultSpec]) -> crate::capture::Capture {
    use crate::model::hooks::{HookStack, Hooks};
    let faults = build_all(specs, &ckpt.config).unwrap();
    let mut model = crate::model::Decoder::new(ckpt).unwrap();
    faults.iter().for_each(|f| f.transform_weights(&mut model).unwrap());
    let mut inputs = crate::inputs::InputSet::new((0..10).map(|i| (i * 37 + 5) % 256).collect());
    inputs.decode = crate::inputs::DecodeSpec::Forced(vec![3, 99]);
    faults.iter().for_each(|f| f.prepare(&model, std::slice::from_ref(&inputs)).unwrap());
    let mut hooks: Vec<Box<dyn Hooks + '_>> = faults.iter().map(|f| f.hooks()).collect();
    let mut stack = HookStack::default();
    for h in hooks.iter_mut() {
        stack.hooks.push(h.as_mut());
    }
    let mut sink = crate::capture::MemorySink::new(crate::tap::TapSelection::all());
    let mut record = crate::model::run::RunRecord::default();
    crate::model::run::run_inputs(&model, &inputs, &mut sink, &mut stack, &mut record).unwrap();
    drop(stack);
    sink.capture
}

/// `first_block` is what explain's reuse stands on: every tap below a fault's first block is
/// bit for bit the clean run's (so a candidate may start from the clean run's residual there),
/// and the fault changes something at or after it (so the block is not set too low by mistake).
#[test]
fn every_fault_leaves_the_blocks_below_its_first_block_as_a_clean_run_computes_them() {
    let mut s = crate::model::synth::SynthSpec::preset("tinystories", 3).unwrap();
    (s.preset, s.hidden, s.layers, s.heads, s.kv_heads) = (None, 32, 4, 4, 2);
    (s.head_dim, s.intermediate, s.vocab) = (None, Some(64), Some(256));
    let ckpt = s.build().unwrap();
    let cfg = &ckpt.config;
    let clean = all_taps(&ckpt, &[]);
    let mut specs: Vec<FaultSpec> = grid(cfg);
    specs.extend(grid(cfg).iter().flat_map(|f| per_layer(f, cfg).into_iter().skip(2).take(1)));
    for spec in specs {
        let faulty = all_taps(&ckpt, std::slice::from_ref(&spec));
        let first = first_block(&spec, cfg);
        let below = |k: &crate::tap::Key| match k.tap().and_then(|t| t.layer()) {
            Some(l) => l < first,
            None => first > 0 && k.tap().is_some_and(|t| t.is(crate::tap::Tap::Embed)),
        };
        let (mut same_below, mut differs) = (0, false);
        for k in clean.keys() {
            let (c, f) = (clean.get(k).unwrap(), faulty.get(k));
            let equal = f.is_some_and(|f| {
                f.shape() == c.shape() && f.iter().zip(c.iter()).all(|(a, b)| a.to_bits() == b.to_bits())
            });
            if below(k) {
                assert!(equal, "{spec}: {k} (below its first block {first}) differs from the clean run");
                same_below += 1;
            } else {
                differs |= !equal;
            }
        }
        assert!(differs, "{spec}: nothing at or after block {first} differs from the clean run");
        assert_eq!(same_below > 0, first > 0, "{spec}: first block {first}");
    }
}
