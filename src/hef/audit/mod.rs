//! Structural audit of an LLM HEF: does it have the interface HailoRT's genai server drives, with
//! widths that agree with hailo-config.json, the RoPE theta, the tokenizer and the checkpoint?
//!
//! The checks are the mistakes in the project's findings table that a HEF shows on its face:
//! a graph without lm_head (finding 1), a full-sequence logits output (2), RoPE inputs not tiled
//! per head (3), a misspelled hailo-config.json key (5), a sharded lm_head (12), plus everything
//! genai or HailoRT would refuse at load time.
//!
//! **Rows.** genai never uses an input's height or width on their own: it sizes each frame as
//! h·w·f·bytes and fills it as `rows × features` row-major (pre_process.cpp
//! `prepare_embeddings_input` maps P × F over the embeddings buffer, `prepare_attention_mask_input`
//! T × (KV·heads), `tile_along_last_axis` T × heads × L). So the token rows of a frame are
//! **height × width** ([1, T, F] and [T, 1, F] are the same bytes) and the width of a row is
//! `features`. The audit checks rows = T and features = the per-token width.
//!
//! # JSON schema `hefprobe.audit/1`
//!
//! `AuditReport` serializes with keys in this order (fields are never removed or renamed within
//! version 1; new fields may be appended):
//! - `schema`: "hefprobe.audit/1"
//! - `source`: file name or null
//! - `container`: null, or {`header` {version, hef_proto_size, fields}, `layout` {file_size,
//!   header_size, proto_offset, proto_size, padding_size, offset_zero_point, ccws_size,
//!   additional_info_size, declared_file_size}, `integrity` {check, value?, ...}}
//! - `header`: {version, hw_arch, hw_arch_name, sdk_version, extensions: [{id, name, supported}]}
//! - `selection`: {group_count, prefill_suffix, tbt_suffix, prefill, tbt} (names or null)
//! - `groups`: [{name, role ("prefill" | "tbt" | null), contexts, inputs, outputs, caches}] where
//!   inputs/outputs are [{name, role, shape [h,w,f], padded [h,w,f], rows, order, dtype, quant
//!   {zp, scale, min, max, per_feature, scale_range}}] and caches [{name, side ("read" | "write"),
//!   cache_id, shape, padded, order, dtype, entry_bytes}]
//! - `caches`: {prefill_ids, tbt_ids, shared (bool or null without tbt), ring_lengths: [{group, cache_id, entries}]}
//! - `resources`: [{name, size, xxh3 (hex of the data), stored_xxh3 (hex, "0" = unchecked)}]
//! - `vocab`: {expected, tokenizer, embeddings_rows, prefill_logits, tbt_logits}
//! - `config`: the effective hailo-config.json (every key, defaults applied, plus
//!   `defaults_applied` and `findings`), or null
//! - `rope`: {theta_length, mask_on_value}
//! - `findings`: [{id, severity ("error" | "warning" | "info"), finding (table number or null),
//!   group, message}], errors first
//! - `summary`: {errors, warnings, infos}

use std::collections::BTreeMap;

use serde::Serialize;

use super::container::Container;
use super::finding::{Finding, Severity};
use super::llm_config::{self, LlmConfig};
use super::model::{dtype_name, extension, hw_arch_name, CacheLayer, Hef, NetworkGroup, Shape3, Stream};
use crate::error::Result;

mod caches;
mod interface;
mod resources;
#[cfg(test)]
mod tests;

pub use resources::tokenizer_vocab_size;

pub const SCHEMA: &str = "hefprobe.audit/1";

/// Resource names genai fetches (hailort/common/genai/constants.hpp); all four are required.
pub const EMBEDDINGS: &str = "embeddings.bin";
pub const TOKENIZER: &str = "tokenizer.json";
pub const THETA: &str = "rope_theta_data.bin";
pub const REQUIRED_RESOURCES: [&str; 4] = [EMBEDDINGS, TOKENIZER, THETA, llm_config::RESOURCE];

/// What the checkpoint says, when known (from its config.json). Every field is optional; the
/// tokenizer.json resource is always used for the vocabulary when present.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Expectations {
    pub vocab_size: Option<u32>,
    pub hidden_size: Option<u32>,
    pub num_attention_heads: Option<u32>,
    pub num_key_value_heads: Option<u32>,
    pub head_dim: Option<u32>,
}

#[derive(Debug, Clone, Serialize)]
pub struct AuditReport {
    pub schema: &'static str,
    pub source: Option<String>,
    pub container: Option<Container>,
    pub header: HeaderSummary,
    pub selection: Selection,
    pub groups: Vec<GroupReport>,
    pub caches: CacheSummary,
    pub resources: Vec<ResourceRow>,
    pub vocab: VocabSummary,
    pub config: Option<LlmConfig>,
    pub rope: RopeSummary,
    pub findings: Vec<Finding>,
    pub summary: Summary,
}

#[derive(Debug, Clone, Serialize)]
pub struct HeaderSummary {
    pub version: u32,
    pub hw_arch: i32,
    pub hw_arch_name: String,
    pub sdk_version: String,
    pub extensions: Vec<ExtensionRow>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ExtensionRow {
    pub id: u32,
    pub name: String,
    pub supported: bool,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Selection {
    pub group_count: usize,
    pub prefill_suffix: String,
    pub tbt_suffix: String,
    pub prefill: Option<String>,
    pub tbt: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct GroupReport {
    pub name: String,
    pub role: Option<&'static str>,
    pub contexts: usize,
    pub inputs: Vec<LayerRow>,
    pub outputs: Vec<LayerRow>,
    pub caches: Vec<CacheRow>,
}

#[derive(Debug, Clone, Serialize)]
pub struct LayerRow {
    pub name: String,
    /// The genai role (embeddings, attention_mask, pe_q_cos, ..., logits) or null.
    pub role: Option<String>,
    pub shape: [u32; 3],
    pub padded: [u32; 3],
    pub rows: u64,
    pub order: String,
    pub dtype: String,
    pub quant: QuantRow,
}

#[derive(Debug, Clone, Serialize)]
pub struct QuantRow {
    pub zp: f32,
    pub scale: f32,
    pub min: f32,
    pub max: f32,
    /// Number of per-feature quant infos (0 = scalar only).
    pub per_feature: usize,
    /// [min, max] of the per-feature scales, when there are any.
    pub scale_range: Option<[f32; 2]>,
}

#[derive(Debug, Clone, Serialize)]
pub struct CacheRow {
    pub name: String,
    pub side: &'static str,
    pub cache_id: u32,
    pub shape: [u32; 3],
    pub padded: [u32; 3],
    pub order: String,
    pub dtype: String,
    /// `padded.features`: HailoRT's cache entry size in bytes (cache_manager.cpp:211-235).
    pub entry_bytes: u32,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct CacheSummary {
    pub prefill_ids: Vec<u32>,
    pub tbt_ids: Vec<u32>,
    pub shared: Option<bool>,
    pub ring_lengths: Vec<RingLength>,
}

#[derive(Debug, Clone, Serialize)]
pub struct RingLength {
    pub group: String,
    pub cache_id: u32,
    pub entries: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct ResourceRow {
    pub name: String,
    pub size: u64,
    pub xxh3: String,
    pub stored_xxh3: String,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct VocabSummary {
    pub expected: Option<u32>,
    pub tokenizer: Option<u32>,
    pub embeddings_rows: Option<u64>,
    pub prefill_logits: Option<u64>,
    pub tbt_logits: Option<u64>,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct RopeSummary {
    pub theta_length: Option<u64>,
    /// quantize(1.0) with the prefill mask input's quant info: the "on" byte genai writes.
    pub mask_on_value: Option<f32>,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Summary {
    pub errors: usize,
    pub warnings: usize,
    pub infos: usize,
}

impl AuditReport {
    pub fn has_errors(&self) -> bool {
        self.summary.errors > 0
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("the audit report serializes")
    }
}

/// Read a HEF file and audit it (on the groups `group` names: an unknown name is a usage error
/// listing the groups), keeping the container facts (integrity check, layout).
pub fn audit_file(
    path: impl AsRef<std::path::Path>,
    expect: &Expectations,
    group: Option<&str>,
) -> Result<AuditReport> {
    let (hef, container) = Hef::read_with_container(path.as_ref())?;
    if group.is_some() {
        hef.driven_groups(group)?;
    }
    let mut report = audit_group(&hef, expect, group);
    report.source = Some(path.as_ref().display().to_string());
    report.findings.extend(container_findings(&container));
    report.container = Some(container);
    report.finish();
    Ok(report)
}

/// Audit a HEF against HailoRT's genai expectations (and the checkpoint's, when given).
pub fn audit(hef: &Hef, expect: &Expectations) -> AuditReport {
    audit_group(hef, expect, None)
}

/// [`audit`], the LLM interface checked on the groups `group` names (a prefill group and its
/// tbt partner, or a base-scope group: [`Hef::driven_groups`], whose caller checked the name).
pub fn audit_group(hef: &Hef, expect: &Expectations, group: Option<&str>) -> AuditReport {
    let mut a = Auditor::new(hef, expect);
    a.named = group;
    a.run();
    let mut report = a.into_report(hef);
    report.finish();
    report
}

impl AuditReport {
    /// Sort findings (errors first, stable otherwise) and count them.
    fn finish(&mut self) {
        self.findings.sort_by_key(|f| f.severity);
        let count = |s| self.findings.iter().filter(|f| f.severity == s).count();
        self.summary = Summary {
            errors: count(Severity::Error),
            warnings: count(Severity::Warning),
            infos: count(Severity::Info),
        };
    }
}

fn container_findings(c: &Container) -> Vec<Finding> {
    use super::container::Integrity;
    let mut out = Vec::new();
    if c.integrity == Integrity::Md5NotVerified {
        out.push(Finding::new(
            "md5-not-verified",
            Severity::Info,
            "V0 HEF: its MD5 is not verified by hefprobe",
        ));
    }
    if c.layout.declared_file_size != c.layout.file_size {
        out.push(Finding::new(
            "container-length",
            Severity::Warning,
            format!(
                "the header adds up to {} bytes but the file has {}; HailoRT does not check this when the proto \
                 hash is set, so the HEF loads, but it was cut or appended to",
                c.layout.declared_file_size, c.layout.file_size
            ),
        ));
    }
    out
}

/// The token counts a host uses per frame: prefill_input_tokens_count for prefill, 1 for tbt
/// (`TBT_INPUT_TOKENS_SIZE`, pre_process.hpp:40), and a base-scope group's own frame (its
/// embeddings input's rows: the exporter reads SEQ from the HEF, generate_base_scope.py).
#[derive(Clone, Copy, PartialEq)]
enum Phase {
    Prefill,
    Tbt,
    Base,
}

struct Auditor<'a> {
    hef: &'a Hef,
    expect: &'a Expectations,
    findings: Vec<Finding>,
    config: Option<LlmConfig>,
    /// The effective config, or HailoRT's defaults when the file is missing or broken.
    params: LlmConfig,
    prefill: Option<&'a NetworkGroup>,
    tbt: Option<&'a NetworkGroup>,
    /// Cache-less groups run alone in one frame (the exporter's base scope).
    base: Vec<&'a NetworkGroup>,
    /// The group the audit was asked about (`--group`), its partner and nothing else.
    named: Option<&'a str>,
    selection: Selection,
    tokenizer_vocab: Option<u32>,
    theta_length: Option<u64>,
    vocab: VocabSummary,
    rope: RopeSummary,
    cache_summary: CacheSummary,
    /// (group, input name) → role, for the layer tables.
    roles: BTreeMap<(String, String), String>,
}

impl<'a> Auditor<'a> {
    fn new(hef: &'a Hef, expect: &'a Expectations) -> Self {
        Auditor {
            hef,
            expect,
            findings: Vec::new(),
            config: None,
            params: LlmConfig::with_defaults(0),
            prefill: None,
            tbt: None,
            base: Vec::new(),
            named: None,
            selection: Selection { group_count: hef.groups.len(), ..Selection::default() },
            tokenizer_vocab: None,
            theta_length: None,
            vocab: VocabSummary { expected: expect.vocab_size, ..Default::default() },
            rope: RopeSummary::default(),
            cache_summary: CacheSummary::default(),
            roles: BTreeMap::new(),
        }
    }

    fn push(&mut self, finding: Finding) {
        self.findings.push(finding);
    }

    fn run(&mut self) {
        self.check_extensions();
        self.check_resources();
        self.read_config();
        self.read_tokenizer();
        self.read_theta();
        self.select_groups();
        let hef = self.hef;
        for group in &hef.groups {
            self.check_group_structure(group);
        }
        let phases = [(self.prefill, Phase::Prefill), (self.tbt, Phase::Tbt)];
        for (group, phase) in phases {
            if let Some(group) = group {
                self.check_llm_group(group, phase);
            }
        }
        for group in self.base.clone() {
            self.check_llm_group(group, Phase::Base);
        }
        self.check_prefill_vs_tbt();
        self.check_caches();
        self.check_embeddings_resource();
        self.check_expectations();
        self.check_sizes();
    }

    fn into_report(self, hef: &Hef) -> AuditReport {
        let role_of = |g: &NetworkGroup| match (&self.selection.prefill, &self.selection.tbt) {
            (Some(p), _) if *p == g.name => Some("prefill"),
            (_, Some(t)) if *t == g.name => Some("tbt"),
            _ if self.base.iter().any(|b| b.name == g.name) => Some("base-scope"),
            _ => None,
        };
        let rows = |g: &NetworkGroup, streams: &[Stream]| {
            streams.iter().map(|s| layer_row(s, self.roles.get(&(g.name.clone(), s.name.clone())))).collect()
        };
        let groups = hef
            .groups
            .iter()
            .map(|g| GroupReport {
                name: g.name.clone(),
                role: role_of(g),
                contexts: g.contexts,
                inputs: rows(g, &g.inputs),
                outputs: rows(g, &g.outputs),
                caches: g.caches.iter().map(cache_row).collect(),
            })
            .collect();
        AuditReport {
            schema: SCHEMA,
            source: None,
            container: None,
            header: header_summary(hef),
            selection: self.selection,
            groups,
            caches: self.cache_summary,
            resources: hef.resources.iter().map(resource_row).collect(),
            vocab: self.vocab,
            config: self.config,
            rope: self.rope,
            findings: self.findings,
            summary: Summary::default(),
        }
    }
}

fn dims(s: Shape3) -> [u32; 3] {
    [s.height, s.width, s.features]
}

fn layer_row(s: &Stream, role: Option<&String>) -> LayerRow {
    let scales = s.quant_per_feature.iter().map(|q| q.scale);
    let scale_range = (!s.quant_per_feature.is_empty())
        .then(|| [scales.clone().fold(f32::INFINITY, f32::min), scales.fold(f32::NEG_INFINITY, f32::max)]);
    LayerRow {
        name: s.name.clone(),
        role: role.cloned(),
        shape: dims(s.shape),
        padded: dims(s.padded),
        rows: s.shape.rows(),
        order: s.order.name(),
        dtype: s.dtype(),
        quant: QuantRow {
            zp: s.quant.zp,
            scale: s.quant.scale,
            min: s.quant.min,
            max: s.quant.max,
            per_feature: s.quant_per_feature.len(),
            scale_range,
        },
    }
}

fn cache_row(c: &CacheLayer) -> CacheRow {
    CacheRow {
        name: c.name.clone(),
        side: if c.is_input { "read" } else { "write" },
        cache_id: c.cache_id,
        shape: dims(c.shape),
        padded: dims(c.padded),
        order: c.order.name(),
        dtype: dtype_name(c.data_bytes),
        entry_bytes: c.padded.features,
    }
}

fn resource_row(r: &super::model::Resource) -> ResourceRow {
    ResourceRow {
        name: r.name.clone(),
        size: r.data.len() as u64,
        xxh3: format!("{:016x}", xxhash_rust::xxh3::xxh3_64(&r.data)),
        stored_xxh3: format!("{:x}", r.xxhash),
    }
}

fn header_summary(hef: &Hef) -> HeaderSummary {
    HeaderSummary {
        version: hef.version,
        hw_arch: hef.hw_arch,
        hw_arch_name: hw_arch_name(hef.hw_arch),
        sdk_version: hef.sdk_version.clone(),
        extensions: hef
            .extensions
            .iter()
            .map(|&id| ExtensionRow {
                id,
                name: extension::name(id),
                supported: extension::SUPPORTED.contains(&id),
            })
            .collect(),
    }
}
