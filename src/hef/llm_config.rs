//! `hailo-config.json` as genai's `LLMServer::parse_config_json` reads it (llm_server.cpp:108-196,
//! HailoRT v5.2.0): every key, its type, the default that applies when it is absent, and the keys
//! HailoRT silently ignores.
//!
//! genai tests each key with nlohmann's `contains` and reads it with `get<T>()`: unknown keys are
//! never looked at, and a misspelled key means the default applies without a word (finding 5:
//! `prefill_input_tokens_size` left HailoRT on its built-in 96). A value of the wrong JSON type
//! makes `get<T>()` throw and genai fail to start; a number of the right kind but the wrong range
//! is converted C-style (negative → huge uint32, 2.9 → 2), which is reported as a finding.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::finding::Severity;
use crate::error::{Error, Result};
use crate::tap::closest;

/// The resource name (hailort/common/genai/constants.hpp).
pub const RESOURCE: &str = "hailo-config.json";

/// `INVALID_TOKEN_VALUE` (common/genai/tokenizer/token_embedder.hpp:25): "no reasoning token".
pub const INVALID_TOKEN: i32 = i32::MAX;

/// `default_generation_params`; defaults are the LLMServer constants (llm_server.hpp:47-52).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GenerationParams {
    pub max_new_tokens: u32,
    pub temperature: f32,
    pub top_p: f32,
    pub top_k: u32,
    /// Stored by genai as its "frequency penalty"; applied even when do_sample is false.
    pub repetition_penalty: f32,
    pub do_sample: bool,
}

/// `pre_process_params`; defaults from pre_process.hpp:34-37 and the `PreProcessParams` struct.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PreProcessParams {
    pub kv_cache_size: u32,
    pub num_attention_heads: u32,
    pub num_key_value_heads: u32,
    pub prefill_input_tokens_count: u32,
    /// Read, then overridden to [L/2] for LLMs (llm_server.cpp `create_pre_process_future`).
    pub mrope_section: Vec<i32>,
}

/// `input_layers_names_suffixes`: genai finds each input as the first (by name) that ends with
/// the suffix (pre_process.hpp `get_layer_name_from_suffix`); defaults pre_process.hpp:27-32.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InputSuffixes {
    pub embeddings: String,
    pub attention_mask: String,
    pub pe_q_cos: String,
    pub pe_q_sin: String,
    pub pe_k_cos: String,
    pub pe_k_sin: String,
}

impl InputSuffixes {
    /// genai's defaults (pre_process.hpp:27-32): input_layer1..6 = embeddings, mask, Q cos,
    /// Q sin, K cos, K sin.
    pub fn genai() -> Self {
        Self::numbered([1, 2, 3, 4, 5, 6])
    }

    /// The exporter's map (l-nmch/hailo-10h-llm-compiler `s3_surgery_and_resources.py`
    /// `build_hailo_config`, 0111deb6): its ONNX inputs come in the order embeddings, mask,
    /// K cos, Q cos, K sin, Q sin, so input_layer3 = K cos, 4 = Q cos, 5 = K sin, 6 = Q sin.
    pub fn exporter() -> Self {
        Self::numbered([1, 2, 4, 6, 3, 5])
    }

    /// `input_layerN` for embeddings, mask, Q cos, Q sin, K cos, K sin, in that order.
    fn numbered(n: [u8; 6]) -> Self {
        let s = |i: usize| format!("input_layer{}", n[i]);
        InputSuffixes {
            embeddings: s(0),
            attention_mask: s(1),
            pe_q_cos: s(2),
            pe_q_sin: s(3),
            pe_k_cos: s(4),
            pe_k_sin: s(5),
        }
    }

    /// (role, suffix) in genai's validation order (`validate_inputs_names` pre_process.cpp:61-76).
    pub fn roles(&self) -> [(&'static str, &str); 6] {
        [
            ("embeddings", &self.embeddings),
            ("attention_mask", &self.attention_mask),
            ("pe_q_cos", &self.pe_q_cos),
            ("pe_q_sin", &self.pe_q_sin),
            ("pe_k_cos", &self.pe_k_cos),
            ("pe_k_sin", &self.pe_k_sin),
        ]
    }
}

/// A key genai ignores or converts, found while reading the file.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ConfigFinding {
    /// Dotted path of the key in the file.
    pub key: String,
    pub severity: Severity,
    /// "unknown-key" or "converted".
    pub kind: &'static str,
    pub did_you_mean: Option<String>,
    /// What HailoRT uses instead (the default, or the value of the intended key).
    pub applies_instead: Option<String>,
    pub message: String,
}

/// The effective configuration genai runs with: every key, defaults applied.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LlmConfig {
    pub eos_token_id: i32,
    pub chat_template: String,
    pub stop_token_id: Vec<i32>,
    pub begin_of_reasoning_token_id: i32,
    pub end_of_reasoning_token_id: i32,
    pub default_generation_params: GenerationParams,
    pub pre_process_params: PreProcessParams,
    pub input_layers_names_suffixes: InputSuffixes,
    /// Dotted paths of keys that were absent, so their default applies.
    #[serde(skip_deserializing)]
    pub defaults_applied: Vec<String>,
    #[serde(skip_deserializing)]
    pub findings: Vec<ConfigFinding>,
}

/// The C++ type genai reads a key as.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Ty {
    I32,
    U32,
    F32,
    Bool,
    Str,
    I32List,
}

impl Ty {
    /// The C++ type, and what to write for it in JSON.
    fn words(self) -> (&'static str, &'static str) {
        match self {
            Ty::I32 => ("int", "whole number"),
            Ty::U32 => ("uint32_t", "whole number"),
            Ty::F32 => ("float", "number"),
            Ty::Bool => ("bool", "true/false"),
            Ty::Str => ("std::string", "string"),
            Ty::I32List => ("std::vector<int>", "list of whole numbers"),
        }
    }
}

/// One key: section ("" = top level), name, type and default as JSON text (None = required).
struct Key {
    section: &'static str,
    name: &'static str,
    ty: Ty,
    default: Option<&'static str>,
}

const fn key(section: &'static str, name: &'static str, ty: Ty, default: Option<&'static str>) -> Key {
    Key { section, name, ty, default }
}

const GENERATION: &str = "default_generation_params";
const PRE_PROCESS: &str = "pre_process_params";
const SUFFIXES: &str = "input_layers_names_suffixes";
const SECTIONS: [&str; 3] = [GENERATION, PRE_PROCESS, SUFFIXES];

/// Every key `parse_config_json` reads, in its order, with the default that applies when absent.
const KEYS: [Key; 22] = [
    key("", "eos_token_id", Ty::I32, None),
    key("", "chat_template", Ty::Str, Some("\"\"")),
    key("", "stop_token_id", Ty::I32List, Some("[]")),
    key("", "begin_of_reasoning_token_id", Ty::I32, Some("2147483647")),
    key("", "end_of_reasoning_token_id", Ty::I32, Some("2147483647")),
    key(GENERATION, "max_new_tokens", Ty::U32, Some("1024")),
    key(GENERATION, "temperature", Ty::F32, Some("0.7")),
    key(GENERATION, "top_p", Ty::F32, Some("0.8")),
    key(GENERATION, "top_k", Ty::U32, Some("20")),
    key(GENERATION, "repetition_penalty", Ty::F32, Some("1.1")),
    key(GENERATION, "do_sample", Ty::Bool, Some("true")),
    key(PRE_PROCESS, "kv_cache_size", Ty::U32, Some("2048")),
    key(PRE_PROCESS, "num_attention_heads", Ty::U32, Some("12")),
    key(PRE_PROCESS, "num_key_value_heads", Ty::U32, Some("2")),
    key(PRE_PROCESS, "prefill_input_tokens_count", Ty::U32, Some("96")),
    key(PRE_PROCESS, "mrope_section", Ty::I32List, Some("[16, 24, 24]")),
    key(SUFFIXES, "embeddings", Ty::Str, Some("\"input_layer1\"")),
    key(SUFFIXES, "attention_mask", Ty::Str, Some("\"input_layer2\"")),
    key(SUFFIXES, "pe_q_cos", Ty::Str, Some("\"input_layer3\"")),
    key(SUFFIXES, "pe_q_sin", Ty::Str, Some("\"input_layer4\"")),
    key(SUFFIXES, "pe_k_cos", Ty::Str, Some("\"input_layer5\"")),
    key(SUFFIXES, "pe_k_sin", Ty::Str, Some("\"input_layer6\"")),
];

fn path(section: &str, name: &str) -> String {
    if section.is_empty() {
        name.to_string()
    } else {
        format!("{section}.{name}")
    }
}

fn default_value(k: &Key) -> Value {
    serde_json::from_str(k.default.unwrap_or("null")).expect("defaults in KEYS are valid JSON")
}

impl LlmConfig {
    /// What genai runs with when `hailo-config.json` has only the required `eos_token_id`.
    pub fn with_defaults(eos_token_id: i32) -> LlmConfig {
        let text = format!("{{\"eos_token_id\": {eos_token_id}}}");
        Self::parse(text.as_bytes(), "defaults").expect("a config with only eos_token_id parses")
    }

    /// Parse the file as genai does; `what` names it in errors (e.g. "model.hef resource hailo-config.json").
    pub fn parse(bytes: &[u8], what: &str) -> Result<LlmConfig> {
        let root: Value = serde_json::from_slice(bytes).map_err(|e| {
            Error::input(what, format!("is not valid JSON ({e}); nlohmann throws and genai fails to start"))
        })?;
        let Value::Object(root) = root else {
            return Err(Error::input(
                what,
                "is not a JSON object, so `eos_token_id` cannot be found; genai fails with HAILO_INVALID_ARGUMENT",
            ));
        };
        let mut reader = Reader { what, findings: Vec::new(), defaults_applied: Vec::new() };
        let effective = reader.effective(&root)?;
        reader.unknown_keys(&root, &effective);
        let mut config: LlmConfig = serde_json::from_value(Value::Object(effective)).map_err(|e| {
            Error::input(what, format!("internal: effective config does not deserialize: {e}"))
        })?;
        config.defaults_applied = reader.defaults_applied;
        config.findings = reader.findings;
        Ok(config)
    }

    /// Every effective value by its dotted path (`pre_process_params.kv_cache_size`), in the
    /// serialized order, without the reader's notes (`defaults_applied`, `findings`).
    pub fn values(&self) -> Vec<(String, Value)> {
        let Ok(Value::Object(map)) = serde_json::to_value(self) else { return Vec::new() };
        let mut out = Vec::new();
        for (key, value) in map.into_iter().filter(|(k, _)| k != "defaults_applied" && k != "findings") {
            match value {
                Value::Object(section) => {
                    out.extend(section.into_iter().map(|(k, v)| (format!("{key}.{k}"), v)))
                }
                v => out.push((key, v)),
            }
        }
        out
    }
}

struct Reader<'a> {
    what: &'a str,
    findings: Vec<ConfigFinding>,
    defaults_applied: Vec<String>,
}

impl Reader<'_> {
    /// Build the effective JSON: every key, converted as genai converts it, or its default.
    fn effective(&mut self, root: &Map<String, Value>) -> Result<Map<String, Value>> {
        let mut out = Map::new();
        for section in SECTIONS {
            self.check_section_is_object(root, section);
            out.insert(section.to_string(), Value::Object(Map::new()));
        }
        for k in &KEYS {
            let value = self.key_value(root, k)?;
            let slot = if k.section.is_empty() {
                &mut out
            } else {
                out[k.section].as_object_mut().expect("inserted above")
            };
            slot.insert(k.name.to_string(), value);
        }
        Ok(out)
    }

    fn key_value(&mut self, root: &Map<String, Value>, k: &Key) -> Result<Value> {
        let raw = lookup(root, k.section, k.name);
        let p = path(k.section, k.name);
        match (raw, k.default) {
            (Some(raw), _) => self.convert(raw, k.ty, &p),
            (None, Some(_)) => {
                self.defaults_applied.push(p);
                Ok(default_value(k))
            }
            (None, None) => Err(Error::input(
                format!("{} key `{p}`", self.what),
                "is required: genai's parse_config_json fails with HAILO_INVALID_ARGUMENT without it",
            )),
        }
    }

    /// nlohmann's `contains` is false on a non-object, so a section of another type hides all its keys.
    fn check_section_is_object(&mut self, root: &Map<String, Value>, section: &str) {
        if let Some(value) = root.get(section).filter(|v| !v.is_object()) {
            self.findings.push(ConfigFinding {
                key: section.to_string(),
                severity: Severity::Error,
                kind: "unknown-key",
                did_you_mean: None,
                applies_instead: Some("the defaults of every key in it".to_string()),
                message: format!(
                    "`{section}` is {} instead of an object: genai finds none of its keys and silently uses all their defaults",
                    json_kind(value)
                ),
            });
        }
    }

    fn type_error(&self, p: &str, raw: &Value, ty: Ty) -> Error {
        let (cpp, write) = ty.words();
        let msg = format!(
            "is {} but genai reads it with get<{cpp}>(), which throws: genai fails to start. Write a {write}",
            json_kind(raw)
        );
        Error::input(format!("{} key `{p}`", self.what), msg)
    }

    /// Convert like nlohmann `get<T>()`: numbers and booleans convert C-style to any arithmetic
    /// type; everything else of the wrong kind throws.
    fn convert(&mut self, raw: &Value, ty: Ty, p: &str) -> Result<Value> {
        match ty {
            Ty::Str => {
                raw.as_str().map(|s| Value::String(s.to_string())).ok_or_else(|| self.type_error(p, raw, ty))
            }
            Ty::Bool => raw.as_bool().map(Value::Bool).ok_or_else(|| self.type_error(p, raw, ty)),
            Ty::I32List => {
                let items = raw.as_array().ok_or_else(|| self.type_error(p, raw, ty))?;
                let converted = items
                    .iter()
                    .enumerate()
                    .map(|(i, item)| self.convert(item, Ty::I32, &format!("{p}[{i}]")))
                    .collect::<Result<Vec<_>>>()?;
                Ok(Value::Array(converted))
            }
            Ty::I32 | Ty::U32 | Ty::F32 => {
                let num = Num::of(raw).ok_or_else(|| self.type_error(p, raw, ty))?;
                let (value, lossless) = num.convert(ty);
                // Booleans convert "losslessly" to 0/1 but are surely not what the author meant.
                if !lossless || raw.is_boolean() {
                    self.note_conversion(p, raw, &value, ty);
                }
                Ok(value)
            }
        }
    }

    fn note_conversion(&mut self, p: &str, raw: &Value, value: &Value, ty: Ty) {
        self.findings.push(ConfigFinding {
            key: p.to_string(),
            severity: Severity::Warning,
            kind: "converted",
            did_you_mean: None,
            applies_instead: Some(value.to_string()),
            message: format!("`{p}` is {raw}; genai reads it with get<{}>() and gets {value}", ty.words().0),
        });
    }

    /// Every key genai never looks at, at any level.
    fn unknown_keys(&mut self, root: &Map<String, Value>, effective: &Map<String, Value>) {
        for (name, value) in root {
            let known = SECTIONS.contains(&name.as_str())
                || KEYS.iter().any(|k| k.section.is_empty() && k.name == name);
            if !known {
                self.report_unknown("", name, value, root, effective);
            }
        }
        for section in SECTIONS {
            let Some(Value::Object(keys)) = root.get(section) else { continue };
            for (name, value) in keys {
                if !KEYS.iter().any(|k| k.section == section && k.name == name) {
                    self.report_unknown(section, name, value, root, effective);
                }
            }
        }
    }

    /// Report an unknown key, then every key inside it when it is an object (a known key nested
    /// in an unknown object is just as ignored). A misspelled section already lists its keys.
    fn report_unknown(
        &mut self,
        section: &str,
        name: &str,
        value: &Value,
        root: &Map<String, Value>,
        effective: &Map<String, Value>,
    ) {
        let finding = unknown_key(section, name, value, root, effective);
        let is_section = finding.did_you_mean.as_deref().is_some_and(|d| SECTIONS.contains(&d));
        self.findings.push(finding);
        if let (Value::Object(children), false) = (value, is_section) {
            let parent = path(section, name);
            for (child, child_value) in children {
                self.report_unknown(&parent, child, child_value, root, effective);
            }
        }
    }
}

/// The finding for a key genai ignores: the key it was probably meant to be, and what applies
/// instead. An error when the ignored value differs from what applies (the author wanted
/// something else), a warning when it happens to match, info when nothing similar exists.
fn unknown_key(
    section: &str,
    name: &str,
    value: &Value,
    root: &Map<String, Value>,
    effective: &Map<String, Value>,
) -> ConfigFinding {
    let p = path(section, name);
    // A known key placed in the wrong section is the likeliest intent.
    if let Some(k) = KEYS.iter().find(|k| k.name == name && k.section != section) {
        let where_ = if k.section.is_empty() {
            "at the top level".to_string()
        } else {
            format!("only under `{}`", k.section)
        };
        return ignored(p, value, k, root, effective, format!("genai reads `{name}` {where_}"));
    }
    let candidates: Vec<&str> = if section.is_empty() {
        KEYS.iter().filter(|k| k.section.is_empty()).map(|k| k.name).chain(SECTIONS).collect()
    } else {
        KEYS.iter().filter(|k| k.section == section).map(|k| k.name).collect()
    };
    match closest(name, candidates) {
        Some(target) if SECTIONS.contains(&target) => ignored_section(p, value, target),
        Some(target) => {
            let k =
                KEYS.iter().find(|k| k.section == section && k.name == target).expect("candidate is a key");
            ignored(p, value, k, root, effective, format!("did you mean `{target}`?"))
        }
        None => ConfigFinding {
            key: p.clone(),
            severity: Severity::Info,
            kind: "unknown-key",
            did_you_mean: None,
            applies_instead: None,
            message: format!("`{p}` is not a key genai reads; it is ignored"),
        },
    }
}

/// An ignored key `p` that was meant to be `intended`: say what genai uses instead.
fn ignored(
    p: String,
    value: &Value,
    intended: &Key,
    root: &Map<String, Value>,
    effective: &Map<String, Value>,
    hint: String,
) -> ConfigFinding {
    let target = path(intended.section, intended.name);
    // The effective value as JSON text, for the message.
    let instead =
        lookup(effective, intended.section, intended.name).map_or_else(|| "?".to_string(), Value::to_string);
    let present = lookup(root, intended.section, intended.name).is_some();
    let source = if present { format!("the value of `{target}`") } else { "the default".to_string() };
    let same = same_value(value, &instead);
    let message = if same {
        format!(
            "`{p}` is not a key genai reads ({hint}); it is ignored, but {source} {instead} equals its value"
        )
    } else {
        format!("`{p}` is not a key genai reads ({hint}); it is silently ignored: {source} {instead} applies instead of {value}")
    };
    ConfigFinding {
        key: p,
        severity: if same { Severity::Warning } else { Severity::Error },
        kind: "unknown-key",
        did_you_mean: Some(target),
        applies_instead: Some(instead),
        message,
    }
}

fn lookup<'a>(root: &'a Map<String, Value>, section: &str, name: &str) -> Option<&'a Value> {
    if section.is_empty() {
        root.get(name)
    } else {
        root.get(section).and_then(|s| s.get(name))
    }
}

fn ignored_section(p: String, value: &Value, target: &str) -> ConfigFinding {
    let inner: Vec<String> = value.as_object().map(|o| o.keys().cloned().collect()).unwrap_or_default();
    ConfigFinding {
        severity: if inner.is_empty() { Severity::Warning } else { Severity::Error },
        kind: "unknown-key",
        did_you_mean: Some(target.to_string()),
        applies_instead: Some(format!("the defaults of `{target}`")),
        message: format!(
            "`{p}` is not a section genai reads (did you mean `{target}`?): its keys {inner:?} are silently ignored \
             and the defaults of `{target}` apply"
        ),
        key: p,
    }
}

/// Whether an ignored JSON value equals the effective one (numbers compared as f64, so 96 == 96.0).
fn same_value(value: &Value, effective_text: &str) -> bool {
    let Ok(effective) = serde_json::from_str::<Value>(effective_text) else { return false };
    match (value.as_f64(), effective.as_f64()) {
        (Some(a), Some(b)) => a == b,
        _ => *value == effective,
    }
}

fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

/// A JSON value nlohmann accepts for an arithmetic `get<T>()`.
enum Num {
    Int(i128),
    Float(f64),
}

impl Num {
    fn of(v: &Value) -> Option<Num> {
        match v {
            Value::Bool(b) => Some(Num::Int(i128::from(*b))),
            Value::Number(n) => Some(match (n.as_i64(), n.as_u64()) {
                (Some(i), _) => Num::Int(i128::from(i)),
                (_, Some(u)) => Num::Int(i128::from(u)),
                _ => Num::Float(n.as_f64().unwrap_or(f64::NAN)),
            }),
            _ => None,
        }
    }

    /// C-style conversion (integers wrap modulo 2^32; floats truncate toward zero — Rust's `as`
    /// saturates where C++ would be undefined) and whether it kept the value. Booleans count as a
    /// lossy conversion so they get reported.
    fn convert(&self, ty: Ty) -> (Value, bool) {
        match (self, ty) {
            (Num::Int(i), Ty::I32) => (Value::from(*i as i32), i128::from(*i as i32) == *i),
            (Num::Int(i), Ty::U32) => (Value::from(*i as u32), i128::from(*i as u32) == *i),
            (Num::Float(f), Ty::I32) => (Value::from(*f as i32), f64::from(*f as i32) == *f),
            (Num::Float(f), Ty::U32) => (Value::from(*f as u32), f64::from(*f as u32) == *f),
            (Num::Int(i), _) => (Value::from(*i as f32), true),
            (Num::Float(f), _) => (Value::from(*f as f32), true),
        }
    }
}

#[cfg(test)]
#[path = "llm_config_tests.rs"]
mod tests;
