//! Which layers attend through a sliding window, as each architecture's transformers config
//! and modeling code decide it.

use super::arch::Arch;
use super::reader::Reader;
use crate::error::Result;
use serde_json::Value;

pub(super) fn read_sliding_window(
    r: &mut Reader,
    arch: Arch,
    num_layers: usize,
) -> Result<Vec<Option<usize>>> {
    // MistralConfig/Qwen2Config/Qwen3Config: `sliding_window: int | None = 4096`; LlamaConfig
    // has none.
    let class_default = if arch == Arch::Llama { None } else { Some(4096) };
    let window = match r.obj.get("sliding_window") {
        Some(Value::Null) => None,
        Some(v) => Some(r.as_usize("sliding_window", v)?),
        None => class_default,
    };
    if window == Some(0) {
        return Err(r.err("sliding_window", "0 would hide every key; use null for no window"));
    }
    match arch {
        Arch::Llama => {
            if window.is_some() {
                return Err(r.err("sliding_window", "llama has no sliding-window attention in transformers"));
            }
            Ok(vec![None; num_layers])
        }
        // modeling_mistral: every layer uses config.sliding_window (null = full attention).
        Arch::Mistral => {
            if !r.obj.contains_key("sliding_window") {
                r.defaults.push(("sliding_window".into(), format!("{window:?}")));
            }
            Ok(vec![window; num_layers])
        }
        // configuration_qwen2/3: sliding_window applies only with use_sliding_window; the
        // layers that slide are given by layer_types, which defaults to "sliding_attention"
        // for layer indices >= max_window_layers.
        Arch::Qwen2 | Arch::Qwen3 => {
            let use_sw = r.flag("use_sliding_window")?;
            let window = if use_sw { window } else { None };
            let types: Vec<bool> = match r.present("layer_types") {
                Some(Value::Array(a)) => {
                    if a.len() != num_layers {
                        return Err(r.err(
                            "layer_types",
                            format!("has {} entries, num_hidden_layers is {num_layers}", a.len()),
                        ));
                    }
                    a.iter()
                        .map(|t| match t.as_str() {
                            Some("sliding_attention") => Ok(true),
                            Some("full_attention") => Ok(false),
                            _ => Err(r.err(
                                "layer_types",
                                format!("{t} is not \"full_attention\" or \"sliding_attention\""),
                            )),
                        })
                        .collect::<Result<_>>()?
                }
                Some(v) => return Err(r.err("layer_types", format!("expected a list, found {v}"))),
                None => {
                    let mwl = r.int("max_window_layers")?;
                    (0..num_layers).map(|i| i >= mwl).collect()
                }
            };
            Ok(types.into_iter().map(|s| if s { window } else { None }).collect())
        }
    }
}
