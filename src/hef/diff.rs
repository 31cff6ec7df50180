//! `audit A --against B`: what differs structurally between two HEFs (a known-good official HEF
//! and ours, or two compiles of one model).
//!
//! Groups are paired by name, then by the LLM role genai gives them (prefill/tbt), so
//! `qwen__prefill` meets `tiny__prefill`. Layers are paired by name without the `<group>/`
//! prefix the compiler adds. Severity: error for what changes the bytes genai exchanges (shapes,
//! dtypes, missing layers/groups/resources), warning for names and orders, info for resource
//! sizes and contents, quant parameters and context counts.

use std::collections::BTreeSet;

use serde::Serialize;
use serde_json::Value;

use super::finding::Severity::{self, Error, Info, Warning};
use super::llm_config::{self, LlmConfig};
use super::model::{dtype_name, CacheLayer, Hef, NetworkGroup, Stream};

/// One structural difference; `a` and `b` are the two sides' values ("-" when absent).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Difference {
    pub id: &'static str,
    pub severity: Severity,
    /// What differs: "group X", "group X input Y", "resource Z", "config key K".
    pub subject: String,
    pub a: String,
    pub b: String,
    pub message: String,
}

fn push(
    out: &mut Vec<Difference>,
    id: &'static str,
    severity: Severity,
    subject: &str,
    a: impl ToString,
    b: impl ToString,
    message: &str,
) {
    let (subject, a, b, message) = (subject.to_string(), a.to_string(), b.to_string(), message.to_string());
    out.push(Difference { id, severity, subject, a, b, message });
}

/// All differences, errors first.
pub fn diff(a: &Hef, b: &Hef) -> Vec<Difference> {
    let mut out = Vec::new();
    diff_header(a, b, &mut out);
    for (ga, gb) in pair_groups(a, b, &mut out) {
        diff_group(ga, gb, &mut out);
    }
    diff_resources(a, b, &mut out);
    diff_config(a, b, &mut out);
    out.sort_by_key(|d| d.severity);
    out
}

fn diff_header(a: &Hef, b: &Hef, out: &mut Vec<Difference>) {
    if a.hw_arch != b.hw_arch {
        push(out, "hw-arch", Warning, "header", a.hw_arch, b.hw_arch, "compiled for different hardware");
    }
    let ea: BTreeSet<u32> = a.extensions.iter().copied().collect();
    let eb: BTreeSet<u32> = b.extensions.iter().copied().collect();
    if ea != eb {
        let (x, y) = (format!("{ea:?}"), format!("{eb:?}"));
        push(out, "extensions", Warning, "header", x, y, "the HEFs declare different extensions");
    }
}

/// The genai role of a group: "prefill", "tbt" or None.
fn role(hef: &Hef, g: &NetworkGroup) -> Option<&'static str> {
    let sel = hef.llm_groups_for_lora("").ok()?;
    if sel.prefill == g.name {
        Some("prefill")
    } else if sel.tbt.as_deref() == Some(g.name.as_str()) {
        Some("tbt")
    } else {
        None
    }
}

fn pair_groups<'h>(
    a: &'h Hef,
    b: &'h Hef,
    out: &mut Vec<Difference>,
) -> Vec<(&'h NetworkGroup, &'h NetworkGroup)> {
    let mut pairs = Vec::new();
    let mut used_b = BTreeSet::new();
    let mut unpaired_a = Vec::new();
    for ga in &a.groups {
        match b.groups.iter().position(|gb| gb.name == ga.name) {
            Some(i) if used_b.insert(i) => pairs.push((ga, &b.groups[i])),
            _ => unpaired_a.push(ga),
        }
    }
    for ga in unpaired_a {
        let want = role(a, ga);
        let found = b
            .groups
            .iter()
            .enumerate()
            .find(|(i, gb)| !used_b.contains(i) && want.is_some() && role(b, gb) == want);
        match found {
            Some((i, gb)) => {
                used_b.insert(i);
                let subject = format!("{} group", want.unwrap_or("?"));
                let msg = "the groups have different names";
                push(out, "group-name", Warning, &subject, &ga.name, &gb.name, msg);
                pairs.push((ga, gb));
            }
            None => {
                push(out, "group-missing", Error, &format!("group {}", ga.name), &ga.name, "-", "only in A")
            }
        }
    }
    for (_, gb) in b.groups.iter().enumerate().filter(|(i, _)| !used_b.contains(i)) {
        push(out, "group-missing", Error, &format!("group {}", gb.name), "-", &gb.name, "only in B");
    }
    pairs
}

/// A layer's name without its `<group>/` prefix.
fn local<'n>(group: &str, name: &'n str) -> &'n str {
    name.strip_prefix(group).and_then(|rest| rest.strip_prefix('/')).unwrap_or(name)
}

fn diff_group(a: &NetworkGroup, b: &NetworkGroup, out: &mut Vec<Difference>) {
    let subject = format!("group {}", a.name);
    if a.contexts != b.contexts {
        push(out, "contexts", Info, &subject, a.contexts, b.contexts, "different numbers of contexts");
    }
    diff_streams(a, b, "input", &a.inputs, &b.inputs, out);
    diff_streams(a, b, "output", &a.outputs, &b.outputs, out);
    let order =
        |g: &NetworkGroup| g.outputs.iter().map(|s| local(&g.name, &s.name).to_string()).collect::<Vec<_>>();
    let (oa, ob) = (order(a), order(b));
    let same_set = oa.iter().collect::<BTreeSet<_>>() == ob.iter().collect::<BTreeSet<_>>();
    if same_set && oa != ob {
        let msg = "outputs come in a different order; genai concatenates logits in this order";
        push(out, "output-order", Warning, &subject, oa.join(", "), ob.join(", "), msg);
    }
    diff_caches(a, b, out);
}

/// Pair layers by local name; layers left over on both sides are paired in order (a renamed
/// layer), the rest are missing.
fn diff_streams(
    ga: &NetworkGroup,
    gb: &NetworkGroup,
    kind: &str,
    a: &[Stream],
    b: &[Stream],
    out: &mut Vec<Difference>,
) {
    let key_a = |s: &Stream| local(&ga.name, &s.name).to_string();
    let key_b = |s: &Stream| local(&gb.name, &s.name).to_string();
    let mut left_a = Vec::new();
    for sa in a {
        match b.iter().find(|sb| key_b(sb) == key_a(sa)) {
            Some(sb) => diff_stream(sa, sb, &format!("group {} {kind} {}", ga.name, key_a(sa)), out),
            None => left_a.push(sa),
        }
    }
    let left_b: Vec<&Stream> = b.iter().filter(|sb| !a.iter().any(|sa| key_a(sa) == key_b(sb))).collect();
    for (i, sa) in left_a.iter().enumerate() {
        let subject = format!("group {} {kind} {}", ga.name, key_a(sa));
        match left_b.get(i) {
            Some(sb) => {
                let msg = "renamed (paired by position)";
                push(out, "layer-name", Warning, &subject, &sa.name, &sb.name, msg);
                diff_stream(sa, sb, &subject, out);
            }
            None => push(out, "layer-missing", Error, &subject, &sa.name, "-", "only in A"),
        }
    }
    for sb in left_b.iter().skip(left_a.len()) {
        let subject = format!("group {} {kind} {}", gb.name, key_b(sb));
        push(out, "layer-missing", Error, &subject, "-", &sb.name, "only in B");
    }
}

fn diff_stream(a: &Stream, b: &Stream, subject: &str, out: &mut Vec<Difference>) {
    if a.shape != b.shape {
        push(out, "layer-shape", Error, subject, a.shape, b.shape, "different shapes");
    }
    if a.data_bytes != b.data_bytes {
        let (x, y) = (dtype_name(a.data_bytes), dtype_name(b.data_bytes));
        push(out, "layer-dtype", Error, subject, x, y, "different element types");
    }
    if a.order != b.order {
        push(out, "layer-order", Warning, subject, a.order.name(), b.order.name(), "different format orders");
    }
    if a.padded != b.padded {
        push(out, "layer-padded", Warning, subject, a.padded, b.padded, "different hardware (padded) shapes");
    }
    if a.quant_per_feature.len() != b.quant_per_feature.len() {
        let (x, y) = (a.quant_per_feature.len(), b.quant_per_feature.len());
        push(out, "layer-quant", Info, subject, x, y, "different numbers of per-feature quant infos");
    } else if a.quant != b.quant {
        let fmt = |s: &Stream| {
            format!("zp {} scale {} [{}, {}]", s.quant.zp, s.quant.scale, s.quant.min, s.quant.max)
        };
        push(out, "layer-quant", Info, subject, fmt(a), fmt(b), "different quantization");
    }
}

fn diff_caches(a: &NetworkGroup, b: &NetworkGroup, out: &mut Vec<Difference>) {
    let side = |c: &CacheLayer| if c.is_input { "read" } else { "write" };
    for ca in &a.caches {
        let subject = format!("group {} cache {} {}", a.name, ca.cache_id, side(ca));
        let Some(cb) = b.caches.iter().find(|cb| cb.cache_id == ca.cache_id && cb.is_input == ca.is_input)
        else {
            push(out, "cache-missing", Error, &subject, &ca.name, "-", "only in A");
            continue;
        };
        if ca.shape != cb.shape || ca.padded != cb.padded {
            let (x, y) = (format!("{} hw {}", ca.shape, ca.padded), format!("{} hw {}", cb.shape, cb.padded));
            push(out, "cache-shape", Error, &subject, x, y, "different cache shapes");
        }
        if ca.data_bytes != cb.data_bytes {
            let (x, y) = (dtype_name(ca.data_bytes), dtype_name(cb.data_bytes));
            push(out, "cache-dtype", Error, &subject, x, y, "different cache element types");
        }
        if ca.order != cb.order {
            let msg = "different cache layouts (finding 9 was such a mismatch)";
            push(out, "cache-order", Warning, &subject, ca.order.name(), cb.order.name(), msg);
        }
    }
    for cb in &b.caches {
        if !a.caches.iter().any(|ca| ca.cache_id == cb.cache_id && ca.is_input == cb.is_input) {
            let subject = format!("group {} cache {} {}", b.name, cb.cache_id, side(cb));
            push(out, "cache-missing", Error, &subject, "-", &cb.name, "only in B");
        }
    }
}

fn diff_resources(a: &Hef, b: &Hef, out: &mut Vec<Difference>) {
    let names: BTreeSet<&str> = a.resources.iter().chain(&b.resources).map(|r| r.name.as_str()).collect();
    for name in names {
        let subject = format!("resource {name}");
        match (a.resource(name), b.resource(name)) {
            (Some(x), Some(y)) if x.len() != y.len() => {
                push(out, "resource-size", Info, &subject, x.len(), y.len(), "different sizes")
            }
            (Some(x), Some(y)) if x != y => {
                let msg = "same size, different content";
                push(out, "resource-content", Info, &subject, "same size", "other bytes", msg)
            }
            (Some(_), None) => push(out, "resource-missing", Error, &subject, "present", "-", "only in A"),
            (None, Some(_)) => push(out, "resource-missing", Error, &subject, "-", "present", "only in B"),
            _ => {}
        }
    }
}

/// Compare the effective hailo-config.json values (defaults applied) key by key.
fn diff_config(a: &Hef, b: &Hef, out: &mut Vec<Difference>) {
    let values = |h: &Hef| {
        let config = LlmConfig::parse(h.resource(llm_config::RESOURCE)?, llm_config::RESOURCE).ok()?;
        Some(config.values())
    };
    let (Some(ca), Some(cb)) = (values(a), values(b)) else { return };
    for (key, va) in ca {
        let vb = cb.iter().find(|(k, _)| *k == key).map_or(Value::Null, |(_, v)| v.clone());
        if va != vb {
            let (x, y) = (value_text(&va), value_text(&vb));
            let msg = "genai runs with different values";
            push(out, "config-value", Warning, &format!("config key {key}"), x, y, msg);
        }
    }
}

/// JSON text of a config value; f32 values (stored as f64 in a `Value`) print as f32 (0.8, not
/// 0.800000011920929).
pub fn value_text(value: &Value) -> String {
    match value.as_f64() {
        Some(x) if value.is_f64() && f64::from(x as f32) == x => format!("{}", x as f32),
        _ => value.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hef::model::{FormatOrder, Resource, Shape3};
    use crate::hef::synth::LlmSpec;

    fn ids(diffs: &[Difference]) -> Vec<&'static str> {
        diffs.iter().map(|d| d.id).collect()
    }

    #[test]
    fn identical_hefs_have_no_differences() {
        let hef = LlmSpec::tiny().build().unwrap();
        assert!(diff(&hef, &hef).is_empty());
    }

    #[test]
    fn groups_pair_by_role_when_names_differ() {
        let a = LlmSpec::tiny().build().unwrap();
        let b = LlmSpec { name: "other".into(), ..LlmSpec::tiny() }.build().unwrap();
        let diffs = diff(&a, &b);
        assert_eq!(ids(&diffs), ["group-name", "group-name"], "{diffs:#?}");
        assert_eq!((diffs[0].a.as_str(), diffs[0].b.as_str()), ("tiny_llm__prefill", "other__prefill"));
    }

    #[test]
    fn shape_dtype_and_missing_layers_are_errors_orders_warnings() {
        let a = LlmSpec::tiny().build().unwrap();
        let mut b = a.clone();
        b.groups[0].outputs[0].shape = Shape3::new(1, 8, 256);
        b.groups[0].inputs[0].data_bytes = 1;
        b.groups[0].inputs[1].order = FormatOrder::Nhcw;
        b.groups[1].inputs.pop();
        b.groups[1].caches[0].order = FormatOrder::Nhwc13;
        let diffs = diff(&a, &b);
        let got: Vec<(&str, Severity)> = diffs.iter().map(|d| (d.id, d.severity)).collect();
        for want in [
            ("layer-shape", Severity::Error),
            ("layer-dtype", Severity::Error),
            ("layer-missing", Severity::Error),
            ("layer-order", Severity::Warning),
            ("cache-order", Severity::Warning),
        ] {
            assert!(got.contains(&want), "{want:?} not in {got:?}");
        }
        assert_eq!(diffs[0].severity, Severity::Error, "errors come first");
    }

    #[test]
    fn renamed_layers_pair_by_position() {
        let a = LlmSpec::tiny().build().unwrap();
        let mut b = a.clone();
        b.groups[0].outputs[0].name = "tiny_llm__prefill/logits".into();
        let diffs = diff(&a, &b);
        assert_eq!(ids(&diffs), ["layer-name"]);
        assert_eq!(diffs[0].b, "tiny_llm__prefill/logits");
    }

    #[test]
    fn resources_and_config_values_are_compared() {
        let a = LlmSpec::tiny().build().unwrap();
        let mut b = LlmSpec { kv_cache_size: 64, ..LlmSpec::tiny() }.build().unwrap();
        b.resources.retain(|r| r.name != "tokenizer.json");
        b.resources.push(Resource::new("extra.bin", vec![1]));
        let diffs = diff(&a, &b);
        let find = |id: &str, subject: &str| diffs.iter().find(|d| d.id == id && d.subject == subject);
        assert_eq!(find("resource-missing", "resource tokenizer.json").unwrap().severity, Severity::Error);
        assert!(find("resource-missing", "resource extra.bin").is_some());
        let kv = find("config-value", "config key pre_process_params.kv_cache_size").unwrap();
        assert_eq!((kv.a.as_str(), kv.b.as_str()), ("32", "64"));
        assert!(
            find("resource-size", "resource hailo-config.json").is_some()
                || find("resource-content", "resource hailo-config.json").is_some()
        );
    }

    #[test]
    fn output_order_change_is_a_warning() {
        let mut a = LlmSpec::tiny().build().unwrap();
        let mut second = a.groups[0].outputs[0].clone();
        second.name = "tiny_llm__prefill/output_layer2".into();
        a.groups[0].outputs.push(second);
        let mut b = a.clone();
        b.groups[0].outputs.reverse();
        let diffs = diff(&a, &b);
        assert_eq!(ids(&diffs), ["output-order"]);
    }
}
