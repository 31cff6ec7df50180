//! Group checks: which groups genai picks, what HailoRT refuses in any group, and the LLM
//! interface of the prefill and tbt groups (inputs by suffix, rows, widths, logits).

use std::collections::BTreeSet;

use super::{Auditor, Phase};
use crate::hef::finding::{Finding, Severity};
use crate::hef::model::{GroupRole, NetworkGroup, Stream};
use crate::tap::Tap;

/// The inputs whose names end with `suffix`, in name order: genai keeps inputs in a std::map and
/// takes the first match (pre_process.hpp `get_layer_name_from_suffix`).
fn inputs_with_suffix<'g>(g: &'g NetworkGroup, suffix: &str) -> Vec<&'g Stream> {
    let mut matches: Vec<&Stream> = g.inputs.iter().filter(|s| s.name.ends_with(suffix)).collect();
    matches.sort_by(|a, b| a.name.cmp(&b.name));
    matches
}

/// The number a name ends with (`conv137_shard1` → 1, `output_layer3` → 3).
fn trailing_number(name: &str) -> Option<u64> {
    let digits = name.len() - name.trim_end_matches(|c: char| c.is_ascii_digit()).len();
    name[name.len() - digits..].parse().ok()
}

impl<'a> Auditor<'a> {
    /// A finding about group `g`.
    fn flag(&mut self, g: &NetworkGroup, id: &'static str, severity: Severity, msg: impl Into<String>) {
        self.push(Finding::new(id, severity, msg).in_group(&g.name));
    }

    pub(super) fn select_groups(&mut self) {
        let hef = self.hef;
        let names: Vec<&str> = hef.groups.iter().map(|g| g.name.as_str()).collect();
        if let Some(Ok(d)) = self.named.map(|n| hef.driven_groups(Some(n))) {
            if d.base_scope {
                self.base = hef.group(&d.main).into_iter().collect();
            } else {
                self.prefill = hef.group(&d.main);
                self.tbt = d.tbt.as_deref().and_then(|t| hef.group(t));
                self.selection.prefill = Some(d.main);
                self.selection.tbt = d.tbt;
            }
            return;
        }
        self.base = hef.groups.iter().filter(|g| g.role() == GroupRole::BaseScope).collect();
        for g in self.base.clone() {
            let msg = "base-scope group: no cache layers by design; a host re-runs the whole conversation in its one \
                       frame at every step (the exporter's base scope, finding 16). genai never runs it; hefprobe does \
                       with `group=NAME`";
            self.flag(g, "base-scope-group", Severity::Info, msg);
        }
        match hef.llm_groups_for_lora("") {
            Ok(sel) => {
                self.prefill = self.hef.group(&sel.prefill);
                self.tbt = sel.tbt.as_deref().and_then(|t| self.hef.group(t));
                if sel.tbt.is_none() {
                    let msg = format!("no group ends with `{}`: base scope, genai runs every step (single tokens too) through prefill", sel.tbt_suffix);
                    self.push(Finding::new("no-tbt-group", Severity::Info, msg));
                }
                self.selection.prefill_suffix = sel.prefill_suffix;
                self.selection.tbt_suffix = sel.tbt_suffix;
                self.selection.prefill = Some(sel.prefill);
                self.selection.tbt = sel.tbt;
            }
            Err(_) => {
                let count = names.len();
                let suffix =
                    if count <= 2 { "prefill".to_string() } else { "base_model__prefill".to_string() };
                let msg = format!(
                    "no network group ends with `{suffix}` (genai's prefill suffix for {count} group(s)); groups: {names:?}. \
                     genai fails with HAILO_INTERNAL_FAILURE"
                );
                self.selection.prefill_suffix = suffix;
                // A HEF that adds a base-scope group to a prefill/tbt pair is a diagnostics HEF
                // (the exporter writes it as model_basescope.hef and says genai breaks on it):
                // said, and its pair audited as a host that names it (`group=`) drives it.
                let pair = hef.groups.iter().rev().find(|g| g.role() == GroupRole::Prefill);
                match pair.filter(|_| !self.base.is_empty()) {
                    Some(p) => {
                        let d = hef.driven_groups(Some(&p.name)).expect("a prefill group");
                        let msg = format!(
                            "{msg}, so hailo-ollama cannot serve this HEF: it adds base-scope group(s) to the pair, as the \
                             exporter's diagnostics HEFs do. Audited as hefprobe runs it when named: `{}` with `{}`",
                            d.main,
                            d.tbt.as_deref().unwrap_or("no tbt group")
                        );
                        self.push(Finding::new("genai-cannot-pick", Severity::Warning, msg));
                        self.prefill = Some(p);
                        self.tbt = d.tbt.as_deref().and_then(|t| hef.group(t));
                        self.selection.prefill = Some(d.main);
                        self.selection.tbt = d.tbt;
                    }
                    None => self.push(Finding::new("no-prefill-group", Severity::Error, msg)),
                }
            }
        }
    }

    pub(super) fn check_group_structure(&mut self, g: &NetworkGroup) {
        let mut names = BTreeSet::new();
        for s in g.inputs.iter().chain(&g.outputs) {
            if !names.insert(s.name.as_str()) {
                let msg = format!("boundary layer `{}` appears twice; HailoRT: HAILO_INVALID_HEF", s.name);
                self.flag(g, "duplicate-layer-name", Severity::Error, msg);
            }
            self.check_stream_types(g, s);
        }
        for input in &g.inputs {
            if input.quant_per_feature.windows(2).any(|w| w[0] != w[1]) {
                let msg = format!("input `{}` has different quant infos per feature; HailoRT refuses that for inputs (HAILO_INVALID_HEF)", input.name);
                self.flag(g, "input-quant-per-feature", Severity::Error, msg);
            }
        }
        for name in &g.unordered_outputs {
            let msg = format!("output `{name}` is missing from the sorted output list; HailoRT cannot list the outputs (HAILO_INTERNAL_FAILURE)");
            self.flag(g, "output-not-in-order", Severity::Error, msg);
        }
        for c in &g.caches {
            if !c.order.is_known() || !matches!(c.data_bytes, 1 | 2) {
                let msg = format!(
                    "cache layer `{}` has format {} and {} bytes per element; HailoRT refuses it",
                    c.name, c.order, c.data_bytes
                );
                self.flag(g, "invalid-cache-layer", Severity::Error, msg);
            }
        }
    }

    fn check_stream_types(&mut self, g: &NetworkGroup, s: &Stream) {
        if !matches!(s.data_bytes, 1 | 2) {
            let msg = format!(
                "`{}` has data_bytes {}; HailoRT knows only 1 (UINT8) and 2 (UINT16) and refuses the layer",
                s.name, s.data_bytes
            );
            self.flag(g, "invalid-dtype", Severity::Error, msg);
        }
        if !s.order.is_known() {
            let msg = format!(
                "`{}` has compiler format code {}, which HailoRT cannot map (HAILO_INTERNAL_FAILURE)",
                s.name,
                s.order.code()
            );
            self.flag(g, "unknown-format-order", Severity::Error, msg);
        }
    }

    // ---- LLM groups --------------------------------------------------------------------------

    pub(super) fn check_llm_group(&mut self, g: &'a NetworkGroup, phase: Phase) {
        let inputs = self.resolve_inputs(g);
        let find = |role: &str| inputs.iter().find(|(r, _)| *r == role).and_then(|(_, s)| *s);
        let rows = match phase {
            Phase::Prefill => u64::from(self.params.pre_process_params.prefill_input_tokens_count),
            Phase::Tbt => 1,
            // Its frame is its embeddings input's rows; every other input must agree.
            Phase::Base => find("embeddings").map_or(0, |s| s.shape.rows()),
        };
        for (role, stream) in &inputs {
            if let Some(s) = stream {
                self.check_rows(g, phase, role, s, rows);
            }
        }
        if let Some(emb) = find("embeddings") {
            self.check_embeddings_input(g, emb);
        }
        if let Some(mask) = find("attention_mask") {
            self.check_mask(g, (phase, rows), mask);
        }
        for role in ["pe_q_cos", "pe_q_sin", "pe_k_cos", "pe_k_sin"] {
            if let Some(pe) = find(role) {
                self.check_rope_width(g, role, pe);
            }
        }
        self.check_logits(g, phase, rows);
        if g.caches.is_empty() && phase != Phase::Base {
            let msg = "the group has no cache layers, but genai calls update_cache_offset before every run: HAILO_INVALID_OPERATION";
            self.flag(g, "no-cache-layers", Severity::Error, msg);
        }
    }

    /// genai finds each input as the first name (std::map order: lexicographic) ending with the
    /// role's suffix (pre_process.hpp `get_layer_name_from_suffix`).
    fn resolve_inputs(&mut self, g: &'a NetworkGroup) -> Vec<(&'static str, Option<&'a Stream>)> {
        let suffixes = self.params.input_layers_names_suffixes.clone();
        let mut out = Vec::new();
        for (role, suffix) in suffixes.roles() {
            let matches = inputs_with_suffix(g, suffix);
            match matches.first() {
                None => {
                    let msg = format!("no input name ends with `{suffix}` (the {role} suffix); genai fails with HAILO_INVALID_ARGUMENT");
                    self.flag(g, "missing-input", Severity::Error, msg);
                }
                Some(first) => {
                    self.roles.insert((g.name.clone(), first.name.clone()), role.to_string());
                    if matches.len() > 1 {
                        let names: Vec<&str> = matches.iter().map(|s| s.name.as_str()).collect();
                        let msg = format!(
                            "{} inputs end with `{suffix}` ({names:?}); genai uses `{}` as {role}",
                            matches.len(),
                            first.name
                        );
                        self.flag(g, "ambiguous-input", Severity::Warning, msg);
                    }
                }
            }
            out.push((role, matches.first().copied()));
        }
        out
    }

    fn check_rows(&mut self, g: &NetworkGroup, phase: Phase, role: &str, s: &Stream, rows: u64) {
        if s.shape.rows() == rows {
            return;
        }
        let source = match phase {
            Phase::Prefill => format!("prefill_input_tokens_count = {rows}"),
            Phase::Tbt => "1 token per tbt step".to_string(),
            Phase::Base => format!("the base-scope frame of {rows} positions, its embeddings input's rows"),
        };
        let msg = format!(
            "{role} input `{}` has {} rows (height × width of {}) but genai writes {rows} ({source}); the frame is \
             over- or under-filled",
            s.name,
            s.shape.rows(),
            s.shape
        );
        self.flag(g, "input-rows", Severity::Error, msg);
    }

    /// `LLMPreProcess::create` (pre_process.cpp:87) requires UINT16 embeddings.
    fn check_embeddings_input(&mut self, g: &NetworkGroup, s: &Stream) {
        if s.data_bytes != 2 {
            let msg = format!(
                "embeddings input `{}` is {}; genai supports only UINT16 (HAILO_INVALID_ARGUMENT)",
                s.name,
                s.dtype()
            );
            self.flag(g, "embeddings-dtype", Severity::Error, msg);
        }
    }

    /// The mask frame is T × (kv_cache_size × heads) bytes, written as uint8 whatever the layer's
    /// type (pre_process.cpp:133-174); "on" is 1.0 quantized with the prefill mask's quant info.
    fn check_mask(&mut self, g: &NetworkGroup, (phase, rows): (Phase, u64), s: &Stream) {
        let p = &self.params.pre_process_params;
        // A base-scope frame's mask covers its own rows (build_mask(SEQ, n, SEQ, NHEAD)).
        let (columns, of) = match phase {
            Phase::Base => (rows, "the base-scope frame"),
            _ => (u64::from(p.kv_cache_size), "kv_cache_size"),
        };
        let width = columns * u64::from(p.num_attention_heads);
        if u64::from(s.shape.features) != width {
            let msg = format!(
                "attention mask `{}` is {} wide but a host writes {of} × num_attention_heads = {columns} × {} = {width} per row",
                s.name, s.shape.features, p.num_attention_heads
            );
            self.flag(g, "mask-width", Severity::Error, msg);
        }
        if s.data_bytes != 1 {
            let msg =
                format!("attention mask `{}` is {} but genai writes it as uint8 bytes", s.name, s.dtype());
            self.flag(g, "mask-dtype", Severity::Error, msg);
        }
        if phase == Phase::Prefill {
            let on = s.quant.quantize(1.0);
            self.rope.mask_on_value = Some(on);
            if !(1.0..=255.0).contains(&on) {
                let msg = format!("1.0 quantizes to {on} with the mask's quant info (scale {}, zp {}); genai's uint8 \"on\" value would be wrong", s.quant.scale, s.quant.zp);
                self.flag(g, "mask-on-value", Severity::Error, msg);
            }
        }
    }

    /// Each token's L theta values are tiled once per head: Q inputs L × num_attention_heads,
    /// K inputs L × num_key_value_heads (pre_process.cpp `fill_positional_embed`) — finding 3.
    fn check_rope_width(&mut self, g: &NetworkGroup, role: &str, s: &Stream) {
        let Some(l) = self.theta_length else { return };
        let p = &self.params.pre_process_params;
        let (heads, key) = if role.starts_with("pe_q") {
            (p.num_attention_heads, "num_attention_heads")
        } else {
            (p.num_key_value_heads, "num_key_value_heads")
        };
        let want = l * u64::from(heads);
        if u64::from(s.shape.features) != want {
            let msg = format!(
                "RoPE input {role} `{}` is {} wide but genai writes theta length × {key} = {l} × {heads} = {want} per row",
                s.name, s.shape.features
            );
            self.push(Finding::new("rope-width", Severity::Error, msg).table(3).in_group(&g.name));
        }
    }

    /// genai concatenates every output of the group, in output order, and reads the whole buffer
    /// as float32 logits (llm_inference_manager.cpp:45-88). An output named `<group>/<tap>` is
    /// an exposed tap (hefprobe's convention, docs/HAILO-RUNTIME.md "Exposed outputs"), checked
    /// as that tap rather than as a part of the logits.
    fn check_logits(&mut self, g: &NetworkGroup, phase: Phase, rows: u64) {
        let (taps, logits): (Vec<&Stream>, Vec<&Stream>) =
            g.outputs.iter().partition(|s| Tap::of_output(&s.name).is_some());
        self.check_exposed(g, &taps, rows);
        if logits.is_empty() && !taps.is_empty() {
            let msg = "the group outputs exposed taps only: a graph cut before lm_head, as `bisect`'s prefix HEFs are; genai cannot generate with it";
            self.flag(g, "no-logits", Severity::Warning, msg);
            return;
        }
        if logits.is_empty() {
            let msg = "the group has no outputs: genai has no logits to sample";
            self.flag(g, "no-outputs", Severity::Error, msg);
            return;
        }
        let sharded = logits.len() > 1;
        for (i, s) in logits.iter().enumerate() {
            let role = if sharded { format!("logits[{i}]") } else { "logits".to_string() };
            self.roles.insert((g.name.clone(), s.name.clone()), role);
            if s.shape.rows() != 1 {
                let msg = format!(
                    "output `{}` is {} ({} positions); genai predicts one token from one position and argmaxes all {} values as if they were one vocabulary",
                    s.name,
                    s.shape,
                    s.shape.rows(),
                    s.elements()
                );
                self.push(Finding::new("logits-rows", Severity::Error, msg).table(2).in_group(&g.name));
            }
        }
        let width: u64 = logits.iter().map(|s| u64::from(s.shape.features)).sum();
        let total: u64 = logits.iter().map(|s| s.elements()).sum();
        match phase {
            Phase::Prefill => self.vocab.prefill_logits = Some(total),
            Phase::Tbt => self.vocab.tbt_logits = Some(total),
            Phase::Base => {}
        }
        if sharded {
            self.check_shards(g, &logits, total);
        }
        self.check_logits_width(g, width, sharded);
    }

    /// Exposed taps: each one tap once, the frame's rows (or only its last), and a
    /// hidden-state tap as wide as the hidden size; and a note listing them.
    fn check_exposed(&mut self, g: &NetworkGroup, taps: &[&Stream], rows: u64) {
        if taps.is_empty() {
            return;
        }
        let hidden =
            self.expect.hidden_size.map(u64::from).or_else(|| self.embeddings_features().map(u64::from));
        let mut seen: Vec<(Tap, &str)> = Vec::new();
        for s in taps {
            let tap = Tap::of_output(&s.name).expect("partitioned on it");
            self.roles.insert((g.name.clone(), s.name.clone()), format!("tap {tap}"));
            if let Some((_, other)) = seen.iter().find(|(t, _)| *t == tap) {
                let msg =
                    format!("outputs `{other}` and `{}` are both tap {tap}: one would silently win", s.name);
                self.flag(g, "exposed-twice", Severity::Error, msg);
            }
            seen.push((tap, &s.name));
            let width_off = hidden.filter(|&h| tap.is_per_position() && u64::from(s.shape.features) != h);
            if ![rows, 1].contains(&s.shape.rows()) || width_off.is_some() {
                let msg = format!(
                    "output `{}` is {} as tap {tap}, whose frame is {rows} rows (or only the last){}",
                    s.name,
                    s.shape,
                    width_off.map(|h| format!(" of {h} values (the hidden size)")).unwrap_or_default()
                );
                self.flag(g, "exposed-shape", Severity::Error, msg);
            }
        }
        let names: Vec<String> = seen.iter().map(|(t, _)| t.to_string()).collect();
        let msg = format!(
            "{} output(s) named <group>/<tap> are exposed taps (hefprobe's convention, measured per layer), \
             checked as those taps rather than as parts of the logits: {}",
            names.len(),
            names.join(", ")
        );
        self.flag(g, "exposed-outputs", Severity::Info, msg);
    }

    fn check_shards(&mut self, g: &NetworkGroup, logits: &[&Stream], total: u64) {
        let parts: Vec<String> = logits.iter().map(|s| format!("`{}` ({})", s.name, s.elements())).collect();
        let msg = format!(
            "logits come from {} outputs, concatenated in this order: {}; total {total}",
            logits.len(),
            parts.join(" + ")
        );
        self.push(Finding::new("logits-sharded", Severity::Info, msg).table(12).in_group(&g.name));
        // Shards numbered in their names (the exporter's `…_shard<i>`, `output_layer<i>`) must come
        // in that order: concatenated in outputs() order, any other order permutes the vocabulary.
        let numbers: Vec<Option<u64>> = logits.iter().map(|s| trailing_number(&s.name)).collect();
        if numbers.iter().all(Option::is_some) && numbers.windows(2).any(|w| w[0] >= w[1]) {
            let order: Vec<&str> = logits.iter().map(|s| s.name.as_str()).collect();
            let msg = format!(
                "the logits outputs come in the order {order:?}, not by their numbers: concatenated in outputs() \
                 order, the vocabulary's columns are permuted"
            );
            self.push(Finding::new("logits-shard-order", Severity::Error, msg).table(12).in_group(&g.name));
        }
        let first = logits[0].elements();
        if logits.iter().any(|s| s.elements() != first) {
            // Uneven shards tile the vocabulary in order when concatenated (as the exporter's
            // scripts and hefprobe's driver do: 16002 + 16003 for 32005). genai does not
            // concatenate: it binds output i at byte i × (that output's own frame size) of one
            // buffer of their total size and only asserts the sizes are equal
            // (llm_inference_manager.cpp `generate`, v5.2.0), so in a release build an uneven
            // split leaves gaps, overlaps, or writes past the buffer.
            let mut at = 0u64;
            let bounds: Vec<String> = logits
                .iter()
                .map(|s| {
                    let b = format!("[{at}:{})", at + s.elements());
                    at += s.elements();
                    b
                })
                .collect();
            let msg = format!(
                "uneven shards {} tile the vocabulary in order; genai's server places output i at i × its own frame \
                 size assuming equal shards (llm_inference_manager.cpp), so hailo-ollama would misplace them — \
                 hefprobe and the exporter's scripts concatenate",
                bounds.join(" ")
            );
            self.push(Finding::new("logits-shard-sizes", Severity::Warning, msg).table(12).in_group(&g.name));
        }
    }

    /// Finding 1: the logits width must be the vocabulary. A width equal to the hidden size is the
    /// signature of a graph that stops before lm_head.
    fn check_logits_width(&mut self, g: &NetworkGroup, width: u64, sharded: bool) {
        let table = if sharded { 12 } else { 1 };
        let hidden =
            self.expect.hidden_size.map(u64::from).or_else(|| self.embeddings_features().map(u64::from));
        let hint = match hidden {
            Some(h) if h == width => " — that is the hidden size: the graph probably ends before lm_head",
            _ => "",
        };
        let (vocab, source) = match (self.expect.vocab_size, self.tokenizer_vocab) {
            (Some(v), _) => (u64::from(v), "the checkpoint's vocab_size"),
            (None, Some(t)) => (u64::from(t), "the tokenizer's vocabulary"),
            (None, None) => {
                let msg =
                    format!("logits are {width} wide; no tokenizer.json or vocab size to check them against");
                self.flag(g, "vocab-unknown", Severity::Warning, msg);
                return;
            }
        };
        let exact = self.expect.vocab_size.is_some();
        // Without the checkpoint's vocab_size a width above the tokenizer's vocabulary reads as
        // padded lm_head rows, except at the hidden size: that is the graph ending before
        // lm_head, however small the tokenizer.
        let hidden_wide = hidden == Some(width) && width != vocab;
        if (exact && width != vocab) || (!exact && width < vocab) || hidden_wide {
            let msg = format!(
                "logits are {width} wide but {source} is {vocab}{hint}; genai would sample garbage token ids"
            );
            self.push(Finding::new("logits-width", Severity::Error, msg).table(table).in_group(&g.name));
        } else if width > vocab {
            let msg = format!("logits are {width} wide, {} more than {source} ({vocab}): padded lm_head rows that genai may sample", width - vocab);
            self.flag(g, "logits-padded", Severity::Info, msg);
        }
    }

    pub(super) fn embeddings_features(&self) -> Option<u32> {
        let g = self.prefill?;
        let first =
            inputs_with_suffix(g, &self.params.input_layers_names_suffixes.embeddings).first().copied();
        first.map(|s| s.shape.features)
    }

    /// genai sizes its embeddings window from the prefill input and copies those rows into the
    /// tbt frame, so every per-token width must agree between the two groups.
    pub(super) fn check_prefill_vs_tbt(&mut self) {
        let (Some(p), Some(t)) = (self.prefill, self.tbt) else { return };
        for (role, suffix) in self.params.input_layers_names_suffixes.clone().roles() {
            let first = |g: &'a NetworkGroup| inputs_with_suffix(g, suffix).first().copied();
            if let (Some(a), Some(b)) = (first(p), first(t)) {
                if a.shape.features != b.shape.features {
                    let msg = format!(
                        "{role} is {} wide in prefill (`{}`) but {} in tbt (`{}`)",
                        a.shape.features, a.name, b.shape.features, b.name
                    );
                    self.push(Finding::new("prefill-tbt-mismatch", Severity::Error, msg));
                }
            }
        }
        let width = |g: &NetworkGroup| g.outputs.iter().map(|s| u64::from(s.shape.features)).sum::<u64>();
        if width(p) != width(t) {
            let msg = format!("logits are {} wide in prefill but {} in tbt", width(p), width(t));
            self.push(Finding::new("prefill-tbt-mismatch", Severity::Error, msg));
        }
    }
}
