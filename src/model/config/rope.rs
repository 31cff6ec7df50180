//! The RoPE keys of config.json, read as transformers 5.23 reads them
//! (`RotaryEmbeddingConfigMixin` in modeling_rope_utils.py): `rope_parameters`
//! {rope_type, rope_theta, ...} in the transformers 5 form, top-level `rope_theta` plus
//! `rope_scaling` {rope_type|type, ...} in the transformers 4 form.

use super::reader::Reader;
use crate::error::Result;
use crate::tap::suggest;
use serde_json::{Map, Value};

/// Rotary embedding as configured (`rope_parameters` in transformers 5, `rope_theta` +
/// `rope_scaling` before).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct RopeConfig {
    pub theta: f64,
    pub scaling: RopeScaling,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(tag = "rope_type", rename_all = "lowercase")]
pub enum RopeScaling {
    Default,
    /// transformers `_compute_linear_scaling_rope_parameters`: every frequency divided by `factor`.
    Linear {
        factor: f64,
    },
    /// transformers `_compute_llama3_parameters`.
    Llama3 {
        factor: f64,
        low_freq_factor: f64,
        high_freq_factor: f64,
        original_max_position_embeddings: usize,
    },
    /// transformers `_compute_yarn_parameters`, with the optional keys as written (`None` =
    /// absent; the defaults are applied where HF applies them, in `model::rope`).
    Yarn {
        factor: f64,
        original_max_position_embeddings: usize,
        #[serde(skip_serializing_if = "Option::is_none")]
        attention_factor: Option<f64>,
        #[serde(skip_serializing_if = "Option::is_none")]
        beta_fast: Option<f64>,
        #[serde(skip_serializing_if = "Option::is_none")]
        beta_slow: Option<f64>,
        #[serde(skip_serializing_if = "Option::is_none")]
        mscale: Option<f64>,
        #[serde(skip_serializing_if = "Option::is_none")]
        mscale_all_dim: Option<f64>,
        /// Written only when false.
        #[serde(skip_serializing_if = "is_true")]
        truncate: bool,
    },
}

fn is_true(b: &bool) -> bool {
    *b
}

/// The rope types hefprobe computes, for messages.
const SUPPORTED: &str = "default, linear, llama3, yarn";

/// The keys each rope type reads (`_validate_*_rope_parameters`: required and optional keys;
/// `type` is the transformers 4 spelling of `rope_type`; `partial_rotary_factor` is allowed
/// everywhere and checked separately).
fn allowed_keys(rope_type: &str) -> &'static [&'static str] {
    match rope_type {
        "default" => &["rope_type", "type", "rope_theta", "partial_rotary_factor"],
        "linear" => &["rope_type", "type", "rope_theta", "partial_rotary_factor", "factor"],
        "llama3" => &[
            "rope_type",
            "type",
            "rope_theta",
            "partial_rotary_factor",
            "factor",
            "low_freq_factor",
            "high_freq_factor",
            "original_max_position_embeddings",
        ],
        "yarn" => &[
            "rope_type",
            "type",
            "rope_theta",
            "partial_rotary_factor",
            "factor",
            "original_max_position_embeddings",
            "attention_factor",
            "beta_fast",
            "beta_slow",
            "mscale",
            "mscale_all_dim",
            "truncate",
        ],
        _ => &[],
    }
}

pub(super) fn read_rope(
    r: &mut Reader,
    default_theta: f64,
    head_dim: usize,
    max_positions: usize,
) -> Result<RopeConfig> {
    let top_theta = r
        .present("rope_theta")
        .map(|v| v.as_f64().ok_or_else(|| r.err("rope_theta", format!("expected a number, found {v}"))))
        .transpose()?;
    let (key, obj) = rope_block(r)?;
    let theta = read_theta(r, (key, obj), top_theta, default_theta)?;
    let rope_type = read_rope_type(r, (key, obj), head_dim)?;
    let scaling = Params { r, key, obj, rope_type, max_positions }.scaling()?;
    Ok(RopeConfig { theta, scaling })
}

/// The rope block and the key it is under. Both forms are read; if both give a theta they
/// must agree. transformers lets rope_scaling win over rope_parameters (`rope_scaling or
/// self.rope_parameters`); two blocks in one file are refused instead.
fn rope_block<'a>(r: &Reader<'a>) -> Result<(&'static str, Option<&'a Map<String, Value>>)> {
    let (key, scaling_obj) = match (r.present("rope_parameters"), r.present("rope_scaling")) {
        (Some(p), None) => ("rope_parameters", Some(p)),
        (None, Some(s)) => ("rope_scaling", Some(s)),
        (None, None) => ("rope_parameters", None),
        (Some(_), Some(_)) => {
            return Err(r.err(
                "rope_scaling",
                "both `rope_parameters` and `rope_scaling` are present; keep one (transformers 5 writes rope_parameters)",
            ))
        }
    };
    match scaling_obj {
        None => Ok((key, None)),
        Some(Value::Object(o)) => Ok((key, Some(o))),
        Some(v) => Err(r.err(key, format!("expected an object, found {v}"))),
    }
}

/// rope_theta: the block's, the top-level one (they must agree), else the default (noted).
fn read_theta(
    r: &mut Reader,
    (key, obj): (&str, Option<&Map<String, Value>>),
    top_theta: Option<f64>,
    default_theta: f64,
) -> Result<f64> {
    let param_theta = obj
        .and_then(|o| o.get("rope_theta"))
        .map(|v| v.as_f64().ok_or_else(|| r.err(key, format!("rope_theta: expected a number, found {v}"))))
        .transpose()?;
    let theta = match (top_theta, param_theta) {
        (Some(a), Some(b)) if a != b => {
            return Err(r.err(key, format!("rope_theta {b} disagrees with top-level rope_theta {a}")))
        }
        (Some(a), _) | (None, Some(a)) => a,
        (None, None) => {
            r.defaults.push(("rope_theta".into(), format!("{default_theta}")));
            default_theta
        }
    };
    if theta <= 0.0 {
        return Err(r.err("rope_theta", format!("{theta} must be positive")));
    }
    Ok(theta)
}

/// The block's rope type, refused unless hefprobe computes it, with every key it reads known.
fn read_rope_type<'a>(
    r: &Reader,
    (key, obj): (&str, Option<&'a Map<String, Value>>),
    head_dim: usize,
) -> Result<&'a str> {
    // standardize_rope_params: `rope_type` defaults to `type`, then to "default".
    let rope_type = obj
        .and_then(|o| o.get("rope_type").or_else(|| o.get("type")))
        .and_then(|v| v.as_str())
        .unwrap_or("default");
    if let Some(o) = obj {
        if rope_type == "mrope" || o.contains_key("mrope_section") {
            return Err(r.err(
                key,
                format!("multimodal RoPE (mrope) is not supported; supported rope types: {SUPPORTED}"),
            ));
        }
        if let Some(f) = o.get("partial_rotary_factor").and_then(|v| v.as_f64()) {
            if f != 1.0 {
                return Err(r.err(
                    key,
                    format!("partial_rotary_factor {f} is not supported (head_dim {head_dim} fully rotated)"),
                ));
            }
        }
    }
    let allowed = allowed_keys(rope_type);
    if allowed.is_empty() {
        return Err(r.err(key, format!("rope_type `{rope_type}` is not supported; supported: {SUPPORTED}")));
    }
    if let Some(o) = obj {
        check_keys(r, key, rope_type, o, allowed)?;
    }
    Ok(rope_type)
}

/// The block's values as its rope type reads them.
struct Params<'r, 'a> {
    r: &'r Reader<'a>,
    key: &'static str,
    obj: Option<&'a Map<String, Value>>,
    rope_type: &'a str,
    max_positions: usize,
}

impl Params<'_, '_> {
    fn get(&self, name: &str) -> Option<&Value> {
        self.obj.and_then(|o| o.get(name)).filter(|v| !v.is_null())
    }

    fn num(&self, name: &str) -> Result<f64> {
        self.get(name).and_then(|v| v.as_f64()).filter(|x| x.is_finite()).ok_or_else(|| {
            self.r.err(self.key, format!("rope_type {} needs a numeric `{name}`", self.rope_type))
        })
    }

    fn opt_num(&self, name: &str) -> Result<Option<f64>> {
        self.get(name).map(|_| self.num(name)).transpose()
    }

    fn positive(&self, name: &str, x: f64) -> Result<f64> {
        if x > 0.0 {
            Ok(x)
        } else {
            Err(self.r.err(self.key, format!("`{name}` {x} must be positive")))
        }
    }

    /// standardize_rope_params fills a missing original_max_position_embeddings of llama3 and
    /// yarn with max_position_embeddings, and lets a top-level one win (the Phi3 exception; the
    /// second standardize call inside `_compute_*_parameters` sees it as an attribute).
    fn original(&self) -> Result<usize> {
        if let Some(v) = self.r.present("original_max_position_embeddings") {
            return self.r.as_usize("original_max_position_embeddings", v);
        }
        match self.get("original_max_position_embeddings") {
            // A whole number written as 2048.0 is what HF computes with too.
            Some(v) => v
                .as_f64()
                .filter(|x| *x >= 1.0 && x.fract() == 0.0 && *x < 1e15)
                .map(|x| x as usize)
                .ok_or_else(|| {
                    self.r.err(
                        self.key,
                        format!("original_max_position_embeddings: expected a positive integer, found {v}"),
                    )
                }),
            None => Ok(self.max_positions),
        }
    }

    fn scaling(&self) -> Result<RopeScaling> {
        Ok(match self.rope_type {
            "default" => RopeScaling::Default,
            // _compute_linear_scaling_rope_parameters: inv_freq /= factor.
            "linear" => RopeScaling::Linear { factor: self.positive("factor", self.num("factor")?)? },
            "llama3" => RopeScaling::Llama3 {
                factor: self.num("factor")?,
                low_freq_factor: self.num("low_freq_factor")?,
                high_freq_factor: self.num("high_freq_factor")?,
                original_max_position_embeddings: self.original()?,
            },
            "yarn" => self.yarn()?,
            _ => unreachable!("allowed_keys is empty for every other type"),
        })
    }

    fn yarn(&self) -> Result<RopeScaling> {
        let original_max_position_embeddings = self.original()?;
        if original_max_position_embeddings == 0 {
            return Err(self.r.err("original_max_position_embeddings", "must be at least 1"));
        }
        // `_validate_yarn_rope_parameters` requires the key; an explicit null means
        // max_position_embeddings / original_max_position_embeddings (`_compute_yarn_parameters`).
        let factor = match self.obj.and_then(|o| o.get("factor")) {
            Some(Value::Null) => self.max_positions as f64 / original_max_position_embeddings as f64,
            _ => self.num("factor")?,
        };
        let truncate = match self.get("truncate") {
            None => true, // `config.rope_parameters.get("truncate", True)`
            Some(v) => v.as_bool().ok_or_else(|| {
                self.r.err(self.key, format!("truncate: expected true or false, found {v}"))
            })?,
        };
        Ok(RopeScaling::Yarn {
            factor: self.positive("factor", factor)?,
            original_max_position_embeddings,
            attention_factor: self.opt_num("attention_factor")?,
            beta_fast: self.opt_num("beta_fast")?,
            beta_slow: self.opt_num("beta_slow")?,
            mscale: self.opt_num("mscale")?,
            mscale_all_dim: self.opt_num("mscale_all_dim")?,
            truncate,
        })
    }
}

/// A key inside the rope block that its type does not read: transformers only warns
/// ("Unrecognized keys in `rope_parameters`"), but every key there is about the rotation, so a
/// typo (`low_freq_factors`) is refused rather than silently ignored.
fn check_keys(
    r: &Reader,
    key: &str,
    rope_type: &str,
    o: &Map<String, Value>,
    allowed: &[&'static str],
) -> Result<()> {
    for name in o.keys() {
        if !allowed.contains(&name.as_str()) {
            let hint = suggest(name, allowed.iter().copied());
            return Err(r.err(
                key,
                format!(
                    "`{name}` is not a key of rope_type {rope_type}{hint}; it reads {}",
                    allowed.iter().filter(|k| **k != "type").copied().collect::<Vec<_>>().join(", ")
                ),
            ));
        }
    }
    Ok(())
}

/// The rope block transformers 5 writes for `rope`: `rope_theta`, then `RopeScaling` as it
/// serializes (`rope_type` first, the fields in declaration order, absent options left out).
pub(super) fn to_hf_json(rope: &RopeConfig) -> Value {
    let mut m = Map::new();
    m.insert("rope_theta".into(), rope.theta.into());
    if let Ok(Value::Object(scaling)) = serde_json::to_value(&rope.scaling) {
        m.extend(scaling);
    }
    Value::Object(m)
}
