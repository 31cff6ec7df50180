//! Fault specs: `NAME[:PARAMS][@layers=RANGE]`, e.g. `shared-softmax@layers=0`,
//! `rope:interleaved,target=q`, `position-shift:1`, `lm-head-shards:3,scale=shard0`.

use crate::error::{Error, Result};
use crate::named::Named;

/// A fault spec, parsed once where it is written (a probe, a suite, the command line) and
/// carried typed from there; shown as it was written.
#[derive(Debug, Clone, PartialEq)]
pub struct FaultSpec {
    pub name: String,
    /// Positional and `key=value` parameters, in order.
    pub params: Vec<(Option<String>, String)>,
    /// Layers the fault applies to; None = every layer.
    pub layers: Option<Vec<usize>>,
    pub text: String,
}

impl std::fmt::Display for FaultSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

/// A spec equals the text it was written as.
impl PartialEq<str> for FaultSpec {
    fn eq(&self, other: &str) -> bool {
        self.text == other
    }
}

impl PartialEq<&str> for FaultSpec {
    fn eq(&self, other: &&str) -> bool {
        self.text == *other
    }
}

impl serde::Serialize for FaultSpec {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(&self.text)
    }
}

impl<'de> serde::Deserialize<'de> for FaultSpec {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        FaultSpec::parse(&text).map_err(serde::de::Error::custom)
    }
}

/// Specs as the command line gives them, parsed.
pub fn parse_all(texts: &[String]) -> Result<Vec<FaultSpec>> {
    texts.iter().map(|t| FaultSpec::parse(t)).collect()
}

/// Specs as written, one after the other with `sep` between them.
pub fn join(specs: &[FaultSpec], sep: &str) -> String {
    specs.iter().map(|s| s.text.as_str()).collect::<Vec<_>>().join(sep)
}

/// A quantization setting as written (`w8a16`, or a whole `quant:...` spec), as its fault spec.
pub fn quantization(setting: &str) -> Result<FaultSpec> {
    if setting.trim().is_empty() {
        return Err(Error::usage(
            "a quantization setting (--quant, or a probe's `quant`) is empty: give one like a16, w8a16 or w4a16, \
             a whole quant:... spec, or none",
        ));
    }
    if setting.starts_with("quant") {
        FaultSpec::parse(setting)
    } else {
        FaultSpec::parse(&format!("quant:{setting}"))
    }
}

/// serde's `deserialize_with` for an optional quantization setting.
pub fn de_quantization<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> std::result::Result<Option<FaultSpec>, D::Error> {
    let text: Option<String> = serde::Deserialize::deserialize(d)?;
    text.map(|t| quantization(&t).map_err(serde::de::Error::custom)).transpose()
}

/// serde's `deserialize_with` for a list of quantization settings.
pub fn de_quantizations<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> std::result::Result<Vec<FaultSpec>, D::Error> {
    let texts: Vec<String> = serde::Deserialize::deserialize(d)?;
    texts.iter().map(|t| quantization(t).map_err(serde::de::Error::custom)).collect()
}

impl FaultSpec {
    /// This fault narrowed to one layer: `NAME[:PARAMS]@layers=L`.
    pub fn at_layer(&self, layer: usize) -> FaultSpec {
        FaultSpec { layers: Some(vec![layer]), text: format!("{}@layers={layer}", self.text), ..self.clone() }
    }

    /// This spec with one more `key=value` parameter (after the ones written).
    pub fn with_param(&self, key: &str, value: &str) -> FaultSpec {
        let mut params = self.params.clone();
        params.push((Some(key.to_string()), value.to_string()));
        let (head, layers) = self.text.split_once('@').map_or((self.text.as_str(), ""), |(h, l)| (h, l));
        let sep = if head.contains(':') { "," } else { ":" };
        let at = if layers.is_empty() { String::new() } else { format!("@{layers}") };
        FaultSpec { params, text: format!("{head}{sep}{key}={value}{at}"), ..self.clone() }
    }

    pub fn parse(text: &str) -> Result<Self> {
        let (head, layers) = match text.split_once('@') {
            None => (text, None),
            Some((h, l)) => {
                let range = l.strip_prefix("layers=").ok_or_else(|| {
                    Error::usage(format!("fault `{text}`: after `@` expected `layers=RANGE` (e.g. @layers=0, @layers=1-3, @layers=0,2)"))
                })?;
                (h, Some(parse_range(range).map_err(|m| Error::usage(format!("fault `{text}`: {m}")))?))
            }
        };
        let (name, params) = match head.split_once(':') {
            None => (head, Vec::new()),
            Some((n, p)) => (
                n,
                p.split(',')
                    .filter(|s| !s.is_empty())
                    .map(|kv| match kv.split_once('=') {
                        Some((k, v)) => (Some(k.trim().to_string()), v.trim().to_string()),
                        None => (None, kv.trim().to_string()),
                    })
                    .collect(),
            ),
        };
        Ok(FaultSpec { name: name.trim().to_string(), params, layers, text: text.to_string() })
    }

    /// A named parameter, or the positional one at `index` when unnamed.
    pub fn get(&self, key: &str, positional: Option<usize>) -> Option<&str> {
        if let Some(v) = self.params.iter().find(|(k, _)| k.as_deref() == Some(key)) {
            return Some(&v.1);
        }
        let pos = positional?;
        self.params.iter().filter(|(k, _)| k.is_none()).nth(pos).map(|(_, v)| v.as_str())
    }

    pub fn err(&self, msg: impl std::fmt::Display) -> Error {
        Error::usage(format!("fault `{}`: {msg}", self.text))
    }

    /// Refuse parameters the fault does not know.
    pub fn allow(&self, keys: &[&str], positional: usize) -> Result<()> {
        let mut pos = 0;
        for (k, v) in &self.params {
            match k {
                Some(k) if !keys.contains(&k.as_str()) => {
                    return Err(self.err(format!(
                        "unknown parameter `{k}`; it takes: {}",
                        if keys.is_empty() { "none".into() } else { keys.join(", ") }
                    )))
                }
                None => {
                    pos += 1;
                    if pos > positional {
                        return Err(self.err(format!("unexpected parameter `{v}`")));
                    }
                }
                _ => {}
            }
        }
        Ok(())
    }

    pub fn int(
        &self,
        key: &str,
        positional: Option<usize>,
        default: i64,
        range: std::ops::RangeInclusive<i64>,
    ) -> Result<i64> {
        let v = match self.get(key, positional) {
            None => default,
            Some(s) => {
                s.parse::<i64>().map_err(|_| self.err(format!("`{key}` must be an integer, got `{s}`")))?
            }
        };
        if !range.contains(&v) {
            return Err(self.err(format!(
                "`{key}` = {v} is out of range; valid: {}..={}",
                range.start(),
                range.end()
            )));
        }
        Ok(v)
    }

    pub fn choice<'a>(
        &self,
        key: &str,
        positional: Option<usize>,
        default: &'a str,
        options: &[&'a str],
    ) -> Result<&'a str> {
        let v = self.get(key, positional).unwrap_or(default);
        options
            .iter()
            .find(|o| **o == v)
            .copied()
            .ok_or_else(|| self.err(format!("`{key}` = `{v}` is not valid; valid: {}", options.join(", "))))
    }

    /// A parameter whose value is one of a few words (`rope:sin-sign`, `target=q`), as the
    /// variant of `C` named so; errors list them in `C`'s order.
    pub(crate) fn pick<C: Named>(&self, key: &str, positional: Option<usize>, default: C) -> Result<C> {
        let words: Vec<&str> = C::ALL.iter().map(|c| c.name()).collect();
        let word = self.choice(key, positional, default.name(), &words)?;
        Ok(C::ALL.iter().copied().find(|c| c.name() == word).unwrap_or(default))
    }

    pub fn applies(&self, layer: usize) -> bool {
        self.layers.as_ref().is_none_or(|ls| ls.contains(&layer))
    }

    pub fn check_layers(&self, num_layers: usize, takes_layers: bool) -> Result<()> {
        match &self.layers {
            Some(_) if !takes_layers => Err(self.err("this fault is not per layer; drop `@layers=`")),
            Some(ls) => match ls.iter().find(|&&l| l >= num_layers) {
                Some(l) => Err(self
                    .err(format!("layer {l} is out of range; this model has layers 0..={}", num_layers - 1))),
                None => Ok(()),
            },
            None => Ok(()),
        }
    }
}

/// More layers than any model has: a range past it is refused at parse time, before a list of
/// its layers is made (the model's own count is checked when the fault is built).
pub const MAX_LAYERS: usize = 4096;

fn parse_range(s: &str) -> std::result::Result<Vec<usize>, String> {
    if s == "all" {
        return Err("write no @layers for every layer".into());
    }
    let too_many = |l: usize| format!("layer {l} is beyond any model (at most {MAX_LAYERS} layers)");
    let mut out = Vec::new();
    for part in s.split(',') {
        let bad = || format!("`{part}` is not a layer or a range like 1-3");
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (usize, usize) = (a.parse().map_err(|_| bad())?, b.parse().map_err(|_| bad())?);
                if a > b {
                    return Err(bad());
                }
                if b >= MAX_LAYERS {
                    return Err(too_many(b));
                }
                out.extend(a..=b);
            }
            None => {
                let l: usize = part.parse().map_err(|_| bad())?;
                if l >= MAX_LAYERS {
                    return Err(too_many(l));
                }
                out.push(l);
            }
        }
        if out.len() > MAX_LAYERS {
            return Err(format!("more than {MAX_LAYERS} layers listed"));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_quantization_setting_is_refused_not_read_as_the_default() {
        for empty in ["", " "] {
            let e = quantization(empty).unwrap_err();
            assert!(
                matches!(e, Error::Usage(_))
                    && e.to_string().contains("--quant, or a probe's `quant`) is empty"),
                "{e}"
            );
        }
        assert_eq!(quantization("w8a16").unwrap().text, "quant:w8a16");
    }

    #[test]
    fn parses_params_and_layers() {
        let s = FaultSpec::parse("lm-head-shards:3,scale=shard0@layers=0-2,5").unwrap();
        assert_eq!(s.name, "lm-head-shards");
        assert_eq!(s.get("n", Some(0)), Some("3"));
        assert_eq!(s.get("scale", None), Some("shard0"));
        assert_eq!(s.layers, Some(vec![0, 1, 2, 5]));
        assert!(FaultSpec::parse("x@layer=1").is_err());
        let s = FaultSpec::parse("position-shift:9").unwrap();
        let e = s.int("k", Some(0), 1, -8..=8).unwrap_err().to_string();
        assert!(e.contains("out of range") && e.contains("-8..=8"), "{e}");
    }
}
