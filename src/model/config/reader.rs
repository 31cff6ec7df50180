//! The reader of one config.json: each key read by its row of the table, defaults noted.

use super::arch::Arch;
use super::keys::{self, Dflt, Read, Unknown, UnknownKey};
use crate::error::{Error, Result};
use serde_json::{Map, Value};

pub(super) struct Reader<'a> {
    pub(super) file: String,
    pub(super) obj: &'a Map<String, Value>,
    pub(super) arch: Arch,
    pub(super) defaults: Vec<(String, String)>,
    /// `num_attention_heads` and `hidden_size`, for the defaults derived from them.
    pub(super) heads: usize,
    pub(super) hidden: usize,
}

impl<'a> Reader<'a> {
    pub(super) fn err(&self, key: &str, msg: impl std::fmt::Display) -> Error {
        Error::input(format!("{} key `{key}`", self.file), msg.to_string())
    }

    pub(super) fn present(&self, key: &str) -> Option<&'a Value> {
        self.obj.get(key).filter(|v| !v.is_null())
    }

    pub(super) fn as_usize(&self, key: &str, v: &Value) -> Result<usize> {
        v.as_u64()
            .and_then(|n| usize::try_from(n).ok())
            .ok_or_else(|| self.err(key, format!("expected a non-negative integer, found {v}")))
    }

    fn read(&self, key: &str) -> Read {
        keys::row(key, self.arch).map(|k| k.read).expect("every key read by name has a row for every arch")
    }

    /// A required positive dimension.
    pub(super) fn dim(&self, key: &str) -> Result<usize> {
        debug_assert!(matches!(self.read(key), Read::Dim));
        match self.present(key) {
            None => Err(self.err(key, "missing; a checkpoint config must give it")),
            Some(v) => self.as_usize(key, v),
        }
    }

    fn resolve(&self, d: Dflt) -> usize {
        match d {
            Dflt::Int(n) => n,
            Dflt::Heads => self.heads,
            Dflt::HiddenOverHeads => self.hidden.checked_div(self.heads).unwrap_or(0),
        }
    }

    pub(super) fn int(&mut self, key: &str) -> Result<usize> {
        let Read::Int { default, noted, null } = self.read(key) else {
            unreachable!("{key} is not an Int row")
        };
        match self.obj.get(key) {
            Some(Value::Null) if null.is_some() => Ok(self.resolve(null.expect("checked"))),
            Some(v) if !v.is_null() => self.as_usize(key, v),
            _ => {
                let n = self.resolve(default);
                if noted {
                    self.defaults.push((key.into(), n.to_string()));
                }
                Ok(n)
            }
        }
    }

    pub(super) fn float(&mut self, key: &str) -> Result<f64> {
        let Read::Float { default } = self.read(key) else { unreachable!("{key} is not a Float row") };
        match self.present(key) {
            Some(v) => v.as_f64().ok_or_else(|| self.err(key, format!("expected a number, found {v}"))),
            None => {
                self.defaults.push((key.into(), format!("{default:e}")));
                Ok(default)
            }
        }
    }

    pub(super) fn flag(&mut self, key: &str) -> Result<bool> {
        let Read::Flag { default, noted } = self.read(key) else { unreachable!("{key} is not a Flag row") };
        match self.present(key) {
            Some(v) => v.as_bool().ok_or_else(|| self.err(key, format!("expected true or false, found {v}"))),
            None => {
                if noted {
                    self.defaults.push((key.into(), default.to_string()));
                }
                Ok(default)
            }
        }
    }

    /// Projection biases (qkv, o, mlp), as the table's attention_bias/mlp_bias rows say.
    pub(super) fn biases(&mut self) -> Result<(bool, bool, bool)> {
        Ok(match self.arch {
            Arch::Llama => {
                let a = self.flag("attention_bias")?;
                (a, a, self.flag("mlp_bias")?)
            }
            Arch::Qwen3 => {
                let a = self.flag("attention_bias")?;
                (a, a, false)
            }
            Arch::Qwen2 => (true, false, false),
            Arch::Mistral => (false, false, false),
        })
    }

    /// Every key of the file against the table: refusals and unknown keys.
    pub(super) fn check_keys(&self) -> Result<Vec<UnknownKey>> {
        let mut unknown = Vec::new();
        for (name, value) in self.obj {
            let note = match keys::row(name, self.arch).map(|k| k.read) {
                Some(Read::Only { ok, msg }) => {
                    if !value.is_null() && !ok(value) {
                        let msg = msg.replace("{v}", &short(value)).replace("{arch}", self.arch.name());
                        return Err(self.err(name, msg));
                    }
                    continue;
                }
                Some(Read::Foreign(note)) => note.to_string(),
                Some(_) => continue,
                None => match keys::classify_unknown(name, self.arch) {
                    Unknown::Report(note) => note,
                    Unknown::Refuse(msg) => return Err(self.err(name, msg)),
                },
            };
            unknown.push(UnknownKey { key: name.clone(), value: short(value), note });
        }
        Ok(unknown)
    }
}

/// A JSON value for a message, at most 60 characters.
fn short(v: &Value) -> String {
    let s = v.to_string();
    if s.chars().count() <= 60 {
        s
    } else {
        format!("{}…", s.chars().take(59).collect::<String>())
    }
}
