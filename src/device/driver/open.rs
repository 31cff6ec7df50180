//! Opening a HEF as `LLMServer` does: its resources read (hailo-config.json, the RoPE theta
//! table, the embeddings), its prefill and tbt groups configured, and every frame genai would
//! build checked against the HEF's frame sizes and the memory budget.

use super::{input, BaseScope, Group, InputNames, LlmDriver};
use crate::budget::Bytes;
use crate::device::frames::PreProcess;
use crate::device::{Device, FormatType, StreamInfo};
use crate::error::{Error, Result};
use crate::hef::llm_config::LlmConfig;
use crate::hef::Hef;
use std::sync::{Arc, OnceLock};

impl LlmDriver {
    /// Open the prefill (and tbt) group of `hef` on `device`, as `LLMServer` does.
    pub fn open(device: &mut dyn Device, hef: &Hef, what: &str) -> Result<Self> {
        Self::open_sharing(device, hef, what, None, &OnceLock::new())
    }

    /// [`LlmDriver::open`] on the groups `group` names ([`Hef::driven_groups`]: genai's choice
    /// when None), its embeddings table decoded once into `table` and shared by every driver
    /// opened with it (explain opens one per candidate: 28M rows' worth on SmolLM2).
    pub fn open_sharing(
        device: &mut dyn Device,
        hef: &Hef,
        what: &str,
        group: Option<&str>,
        table: &OnceLock<Arc<[u16]>>,
    ) -> Result<Self> {
        let resource = |name: &str| -> Result<&[u8]> {
            hef.resource(name).ok_or_else(|| {
                Error::input(what, format!("resource `{name}` is missing; genai's LLM server needs it"))
            })
        };
        let config = LlmConfig::parse(resource("hailo-config.json")?, &format!("{what} hailo-config.json"))?;
        let theta = read_theta(resource("rope_theta_data.bin")?, what)?;
        let driven = hef.driven_groups(group)?;
        let prefill = open_group(device, hef, &config, &driven.main, what)?;
        let tbt = driven.tbt.as_deref().map(|t| open_group(device, hef, &config, t, what)).transpose()?;
        let (embeddings, features) = read_embeddings(&prefill, || resource("embeddings.bin"), table, what)?;
        // "on" is 1.0 quantized with the prefill mask input's quant info
        // (llm_server.cpp create_pre_process_future).
        let mask = input(&prefill, &prefill.names.mask)?;
        let q = mask.quant_infos.first().copied().unwrap_or(crate::hef::QuantInfo::INVALID);
        let mask_on = q.quantize(1.0).clamp(0.0, 255.0) as u8;
        let pp = &config.pre_process_params;
        let base = driven.base_scope.then(|| base_scope(&prefill)).transpose()?;
        let (p, kv) = match &base {
            Some(b) => (b.frame, b.frame),
            None => (pp.prefill_input_tokens_count as usize, pp.kv_cache_size as usize),
        };
        check_frame_budget((p, kv), pp, theta.len(), features, what)?;
        let pre = PreProcess::new(
            pp.prefill_input_tokens_count as usize,
            pp.kv_cache_size as usize,
            pp.num_attention_heads as usize,
            pp.num_key_value_heads as usize,
            features,
            theta,
            mask_on,
        );
        let driver = LlmDriver {
            vocab_rows: embeddings.len() / features,
            embeddings,
            prefill,
            tbt,
            base,
            config,
            pre,
            record: None,
            device: device.describe(),
            context_full: false,
            exposed: Vec::new(),
            feed: None,
        };
        driver.check_frames()?;
        Ok(driver)
    }

    /// Every frame genai would build must have exactly the HEF's frame size.
    fn check_frames(&self) -> Result<()> {
        let pp = &self.config.pre_process_params;
        let note = if self.config.findings.is_empty() {
            "hailo-config.json and the HEF disagree".to_string()
        } else {
            let f: Vec<&str> = self.config.findings.iter().map(|f| f.message.as_str()).collect();
            format!("hailo-config.json and the HEF disagree ({})", f.join("; "))
        };
        let l = self.pre.theta.len();
        // A base-scope group's mask covers its own frame, not a cache (build_mask(SEQ, n, SEQ)).
        let (p, kv) = (self.prefill_tokens(), self.kv_cache_size());
        for (g, t) in [(Some(&self.prefill), p), (self.tbt.as_ref(), 1)] {
            let Some(g) = g else { continue };
            let n = &g.names;
            let expect = [
                (&n.embeddings, t * self.pre.features * 2, "embeddings"),
                (&n.mask, t * kv * pp.num_attention_heads as usize, "mask"),
                (&n.q_cos, t * l * pp.num_attention_heads as usize * 4, "Q RoPE"),
                (&n.q_sin, t * l * pp.num_attention_heads as usize * 4, "Q RoPE"),
                (&n.k_cos, t * l * pp.num_key_value_heads as usize * 4, "K RoPE"),
                (&n.k_sin, t * l * pp.num_key_value_heads as usize * 4, "K RoPE"),
            ];
            for (name, bytes, role) in expect {
                frame_check(&g.name, input(g, name)?, bytes, role, &note)?;
            }
        }
        Ok(())
    }
}

fn frame_check(group: &str, s: &StreamInfo, bytes: usize, role: &str, cfg_note: &str) -> Result<()> {
    if s.frame_size() != bytes {
        return Err(Error::input(
            format!("network group `{group}` input `{}`", s.name),
            format!(
                "the {role} frame genai builds is {bytes} bytes but the HEF's frame is {} bytes (shape {}, {:?}); {cfg_note}",
                s.frame_size(),
                s.shape,
                s.format
            ),
        ));
    }
    Ok(())
}

/// The RoPE theta table: rope_theta_data.bin's little-endian float32s, at least one.
fn read_theta(raw: &[u8], what: &str) -> Result<Vec<f32>> {
    let theta: Vec<f32> = raw.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
    if theta.is_empty() {
        return Err(Error::input(format!("{what} rope_theta_data.bin"), "is empty"));
    }
    Ok(theta)
}

/// Configure the network group `name` of `hef` on `device`, its inputs named as `config` says.
fn open_group(
    device: &mut dyn Device,
    hef: &Hef,
    config: &LlmConfig,
    name: &str,
    what: &str,
) -> Result<Group> {
    let g = hef.group(name).ok_or_else(|| Error::input(what, format!("no network group `{name}`")))?;
    let inputs: Vec<String> = g.inputs.iter().map(|s| s.name.clone()).collect();
    let names = InputNames::find(name, &inputs, config)?;
    // genai sets the four RoPE inputs and every output to FLOAT32; embeddings and mask
    // keep their hardware types (llm_server.cpp create_inference_managers_future).
    let model = device.configure(name, &names.rope())?;
    let taps = model.outputs().iter().map(|o| crate::tap::Tap::of_output(&o.name).is_some()).collect();
    Ok(Group { name: name.to_string(), model, names, cached: !g.caches.is_empty(), taps })
}

/// A base-scope group's frame: as many rows as its embeddings input has (the exporter's SEQ,
/// 24 in its runs: read from the HEF, never assumed), padded with a zero embedding quantized
/// as the runtime quantizes float inputs.
fn base_scope(g: &Group) -> Result<BaseScope> {
    let emb = input(g, &g.names.embeddings)?;
    let frame = usize::try_from(emb.shape.rows()).unwrap_or(usize::MAX);
    if frame == 0 {
        return Err(Error::input(
            format!("network group `{}` input `{}`", g.name, emb.name),
            "has 0 rows: a base-scope frame needs at least one position",
        ));
    }
    let q = emb.quant_infos.first().copied().unwrap_or(crate::hef::QuantInfo::INVALID);
    let pad = q.quantize(0.0).clamp(0.0, 65535.0) as u16;
    Ok(BaseScope { frame, pad, rows: Vec::new() })
}

/// The embeddings table (embeddings.bin): whole uint16 rows of the prefill embeddings input's
/// features, and that width.
fn read_embeddings<'a>(
    prefill: &Group,
    raw: impl FnOnce() -> Result<&'a [u8]>,
    table: &OnceLock<Arc<[u16]>>,
    what: &str,
) -> Result<(Arc<[u16]>, usize)> {
    let emb = input(prefill, &prefill.names.embeddings)?;
    if emb.format != FormatType::Uint16 {
        return Err(Error::input(
            format!("{what} input `{}`", emb.name),
            format!("embeddings are {:?}; genai requires UINT16 (LLMPreProcess::create)", emb.format),
        ));
    }
    let features = emb.shape.features as usize;
    if features == 0 {
        return Err(Error::input(
            format!("{what} input `{}`", emb.name),
            "its shape has 0 features: an embeddings row needs at least one (the HEF's stream info is damaged)",
        ));
    }
    let raw = raw()?;
    if raw.len() % (2 * features) != 0 {
        return Err(Error::input(
            format!("{what} embeddings.bin"),
            format!("{} bytes is not a whole number of {features}-feature uint16 rows", raw.len()),
        ));
    }
    let decoded =
        table.get_or_init(|| raw.chunks_exact(2).map(|b| u16::from_le_bytes([b[0], b[1]])).collect());
    Ok((decoded.clone(), features))
}

/// One prefill frame set, sized by hailo-config.json (input), within the memory budget: mask
/// rows × kv_cache_size × heads bytes, RoPE rows × theta × heads float32 for Q and K, the
/// embeddings rows.
fn check_frame_budget(
    (p, kv): (usize, usize),
    pp: &crate::hef::llm_config::PreProcessParams,
    theta: usize,
    features: usize,
    what: &str,
) -> Result<()> {
    let (h, kvh) = (pp.num_attention_heads as usize, pp.num_key_value_heads as usize);
    let frames = Bytes::product(&[p, kv, h])
        .plus(Bytes::product(&[p, theta, h.saturating_add(kvh), 2]).times(4))
        .plus(Bytes::product(&[p, features]).times(2));
    crate::budget::current().check(
        format!(
            "{what}: one prefill frame set (prefill_input_tokens_count {p} × kv_cache_size {kv} × {h} heads)"
        ),
        frames,
        "the HEF's hailo-config.json claims frames no compiled model has: check prefill_input_tokens_count \
         and kv_cache_size (hefprobe audit), or raise --max-memory",
    )
}
