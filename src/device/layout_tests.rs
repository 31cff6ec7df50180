//! The one HEF synthesizer (`hef::synth`) against genai: each frame genai's host pre-processing
//! builds (`frames.rs`) must fill the synthesized input exactly, each quant info must fit the
//! hardware type of its layer, and the cache rings must be what the runtime pads and the
//! simulated device holds. Both the test layout (`LlmSpec::build`) and `synth-hef`'s are checked,
//! and drifting either side is shown to be caught.

use super::frames::PreProcess;
use super::sim::SimDevice;
use super::synth_hef::{sim_spec, synth_hef, Mistake, SimCheckpoint, SynthHefOptions};
use super::{configured_streams, padded_entry_bytes, Device};
use crate::hef::llm_config::{self, LlmConfig};
use crate::hef::model::dtype_name;
use crate::hef::synth::{data_bytes, LlmSpec};
use crate::hef::{Hef, NetworkGroup, QuantInfo, Resource};
use crate::model::synth::SynthSpec;
use crate::model::Arch;

/// Whether every value in the quant info's limvals lands inside the layer's unsigned type, as
/// the runtime's quantize (and the compiler's dequantize) assume.
fn fits(q: QuantInfo, bytes: u32) -> bool {
    let top = ((1u64 << (8 * bytes.min(4))) - 1) as f32;
    q.is_identity() || (q.quantize(q.min) >= 0.0 && q.quantize(q.max) <= top)
}

/// Every place where `hef` and genai disagree, one line each; empty when they agree.
fn disagreements(hef: &Hef) -> Vec<String> {
    let cfg = LlmConfig::parse(hef.resource(llm_config::RESOURCE).unwrap(), "hailo-config.json").unwrap();
    let (pp, suffixes) = (&cfg.pre_process_params, &cfg.input_layers_names_suffixes);
    let theta: Vec<f32> = hef
        .resource("rope_theta_data.bin")
        .unwrap()
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    let l = theta.len();
    let (prefill, tbt) = hef.llm_groups().unwrap();
    let find = |g: &NetworkGroup, suffix: &str| {
        let mut names: Vec<String> = g.inputs.iter().map(|s| s.name.clone()).collect();
        names.sort();
        names.into_iter().find(|n| n.ends_with(suffix)).unwrap()
    };
    let emb = find(hef.group(&prefill).unwrap(), &suffixes.embeddings);
    let features = hef.group(&prefill).unwrap().inputs.iter().find(|s| s.name == emb).unwrap().shape.features;
    let (p, kv) = (pp.prefill_input_tokens_count as usize, pp.kv_cache_size as usize);
    let (heads, kv_heads) = (pp.num_attention_heads as usize, pp.num_key_value_heads as usize);
    let mut pre = PreProcess::new(p, kv, heads, kv_heads, features as usize, theta, 255);
    let row = vec![0u16; features as usize];
    let mut steps = vec![(prefill, pre.prefill(&vec![row.clone(); p]))];
    if let Some(t) = tbt {
        steps.push((t, pre.tbt(row)));
    }
    let mut out = Vec::new();
    for (name, f) in steps {
        let g = hef.group(&name).unwrap();
        let rope: Vec<String> =
            [&suffixes.pe_q_cos, &suffixes.pe_q_sin, &suffixes.pe_k_cos, &suffixes.pe_k_sin]
                .into_iter()
                .map(|s| find(g, s))
                .collect();
        let (inputs, _) = configured_streams(g, &rope).unwrap();
        let sent = [
            (&suffixes.embeddings, f.embeddings.len() * 2),
            (&suffixes.attention_mask, f.mask.len()),
            (&suffixes.pe_q_cos, f.q_cos.len() * 4),
            (&suffixes.pe_q_sin, f.q_sin.len() * 4),
            (&suffixes.pe_k_cos, f.k_cos.len() * 4),
            (&suffixes.pe_k_sin, f.k_sin.len() * 4),
        ];
        for (suffix, bytes) in sent {
            let name = find(g, suffix);
            let s = inputs.iter().find(|s| s.name == name).unwrap();
            if s.frame_size() != bytes {
                out.push(format!(
                    "`{name}`: genai sends {bytes} bytes, the HEF's frame is {}",
                    s.frame_size()
                ));
            }
        }
        for s in g.inputs.iter().chain(&g.outputs) {
            if !fits(s.quant, s.data_bytes) {
                out.push(format!("`{}`: quant {:?} does not fit {}", s.name, s.quant, s.dtype()));
            }
        }
        // One ring entry per token: the ring holds kv_cache_size entries (the mask's columns per
        // head), the write window the frame's rows, an entry uint16 kv_heads × L values.
        let entry = data_bytes::CACHE as usize * kv_heads * l;
        for c in &g.caches {
            let ring: u64 =
                g.caches.iter().filter(|x| x.cache_id == c.cache_id).map(|x| x.shape.rows()).sum();
            let mut bad = Vec::new();
            if ring != kv as u64 {
                bad.push(format!("a ring of {ring} entries for kv_cache_size {kv}"));
            }
            if !c.is_input && c.shape.rows() != f.rows as u64 {
                bad.push(format!("a write window of {} for {} rows", c.shape.rows(), f.rows));
            }
            if c.padded.features as usize != entry || c.data_bytes != data_bytes::CACHE {
                bad.push(format!(
                    "{}-byte {} entries for {entry}-byte UINT16 ones",
                    c.padded.features,
                    dtype_name(c.data_bytes)
                ));
            }
            if padded_entry_bytes(c.padded.features as usize) != padded_entry_bytes(entry) {
                bad.push("another padded entry".into());
            }
            if !fits(c.quant, c.data_bytes) {
                bad.push(format!("quant {:?} outside {}", c.quant, dtype_name(c.data_bytes)));
            }
            if !bad.is_empty() {
                out.push(format!("`{}`: {}", c.name, bad.join(", ")));
            }
        }
    }
    out
}

fn checkpoint() -> SynthSpec {
    let mut s = SynthSpec::preset("tinystories", 5).unwrap();
    (s.preset, s.arch, s.hidden, s.layers, s.heads, s.kv_heads) = (None, Arch::Llama, 64, 2, 4, 2);
    (s.head_dim, s.intermediate, s.vocab) = (None, Some(128), Some(300));
    s
}

fn synth(opts: SynthHefOptions) -> Hef {
    let s = checkpoint();
    let ckpt = s.build().unwrap();
    let opts = SynthHefOptions { prefill_tokens: 16, kv_cache_size: 128, ..opts };
    synth_hef(&ckpt, SimCheckpoint::Synth(s), &opts).unwrap()
}

#[test]
fn the_test_layout_is_genais() {
    for spec in [
        LlmSpec::tiny(),
        LlmSpec { with_tbt: false, lm_head_shards: 3, ..LlmSpec::tiny() },
        LlmSpec {
            heads: 6,
            kv_heads: 1,
            head_dim: 48,
            kv_cache_size: 100,
            prefill_tokens: 12,
            ..LlmSpec::tiny()
        },
    ] {
        let hef = spec.build().unwrap();
        assert_eq!(disagreements(&hef), Vec::<String>::new(), "{spec:?}");
    }
}

#[test]
fn synth_hef_is_genais_and_the_sim_holds_its_rings() {
    let hef = synth(SynthHefOptions { lm_head_shards: 2, ..Default::default() });
    assert_eq!(disagreements(&hef), Vec::<String>::new());
    // The simulated device's rings: kv_cache_size entries, each padded as the runtime pads the
    // HEF's entry.
    let spec = sim_spec(&hef, "sim.hef").unwrap().unwrap();
    let mut dev = SimDevice::from_hef(hef.clone(), spec, "sim.hef".into()).unwrap();
    let (prefill, _) = hef.llm_groups().unwrap();
    let mut model = dev.configure(&prefill, &[]).unwrap();
    model.init_cache(0).unwrap();
    let buffers = model.cache_buffers().unwrap();
    let g = hef.group(&prefill).unwrap();
    assert_eq!(buffers.len(), 4);
    for (id, raw) in buffers {
        let c = g.caches.iter().find(|c| c.cache_id == id).unwrap();
        assert_eq!(raw.len(), 128 * padded_entry_bytes(c.padded.features as usize), "cache id {id}");
    }
}

#[test]
fn drift_on_either_side_is_caught() {
    // The HEF side: Q RoPE tiled per kv head (finding 3), in both groups.
    let found = disagreements(&synth(SynthHefOptions {
        mistakes: vec![Mistake::WrongRopeWidth],
        ..Default::default()
    }));
    assert_eq!(found.len(), 4, "{found:#?}");
    assert!(
        found[0].contains("prefill/input_layer3`: genai sends 4096 bytes, the HEF's frame is 2048"),
        "{found:#?}"
    );
    // genai's side: a misspelled prefill_input_tokens_count makes genai build 96-row frames.
    let found = disagreements(&synth(SynthHefOptions {
        mistakes: vec![Mistake::MisspelledConfigKey],
        ..Default::default()
    }));
    assert!(found.iter().any(|d| d.contains("prefill/input_layer1`: genai sends 12288 bytes")), "{found:#?}");
    // The two layouts the synthesizers used to disagree on: 8-bit RoPE with a 16-bit quant, and
    // cache entries one byte per value.
    let mut hef = LlmSpec::tiny().build().unwrap();
    hef.groups[1].inputs[2].data_bytes = 1;
    for c in &mut hef.groups[0].caches {
        c.padded.features /= 2;
    }
    let found = disagreements(&hef);
    assert!(found.iter().any(|d| d.contains("tbt/input_layer3`: quant") && d.contains("does not fit UINT8")));
    assert!(found.iter().any(|d| d.contains("prefill/cache_k0_read`: 32-byte UINT16 entries for 64-byte")));
    // And a kv_cache_size the rings do not have.
    let mut hef = LlmSpec::tiny().build().unwrap();
    let config = String::from_utf8(hef.resource(llm_config::RESOURCE).unwrap().to_vec()).unwrap();
    hef.resources.retain(|r| r.name != llm_config::RESOURCE);
    let config = config.replace("\"kv_cache_size\": 32", "\"kv_cache_size\": 40");
    hef.resources.push(Resource::new(llm_config::RESOURCE, config.into_bytes()));
    let found = disagreements(&hef);
    assert!(found.iter().any(|d| d.contains("a ring of 32 entries for kv_cache_size 40")), "{found:#?}");
    assert!(found.iter().any(|d| d.contains("input_layer2`: genai sends")), "{found:#?}");
}
