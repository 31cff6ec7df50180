//! The OpenAI completions dialect (`POST /v1/completions`) of llama.cpp's server and
//! llama-cpp-python's (and vLLM's): the prompt goes as it is, so hefprobe sends it templated,
//! and `logprobs: N` returns the top N log-probabilities of every generated token, computed
//! from the raw logits (no temperature, no penalty). Two shapes come back:
//! llama-cpp-python 0.3.36's legacy `{tokens, token_logprobs, top_logprobs: [{text: logprob}],
//! text_offset}` (`llama_cpp/llama.py` `_create_completion`) and llama.cpp's
//! `{content: [{id, token, bytes, logprob, top_logprobs: [{id, token, bytes, logprob}]}]}`
//! (`tools/server`); both are read.
//!
//! Defaults a judge must override: llama-cpp-python's server schema sets `repeat_penalty` 1.1,
//! `temperature` 0.8, `top_k` 40, `top_p` 0.95, `min_p` 0.05 and `max_tokens` 16
//! (`llama_cpp/server/types.py`); llama.cpp's server reuses its cached prompt (`cache_prompt`
//! true, whose batch sizes change the logits' bits). An unknown `model` falls back to the
//! server's default model in llama-cpp-python (`server/model.py`): the report names the model
//! the server says it used.

use super::http::{self, Endpoint};
use super::server::{json_object, limits, Prompt, Server, SEED};
use crate::backend::generation::{Finish, Generation, TokenInfo, TokenRef};
use crate::error::{Error, Result};
use serde_json::{json, Map, Value};
use std::time::Duration;

pub struct OpenAi {
    ep: Endpoint,
    model: Option<String>,
    logprobs: Option<usize>,
    timeout: Duration,
    /// The model the server said it used, once it has.
    answered_by: Option<String>,
}

impl OpenAi {
    pub fn new(ep: Endpoint, model: Option<String>, logprobs: Option<usize>, timeout: Duration) -> Self {
        OpenAi { ep, model, logprobs, timeout, answered_by: None }
    }

    fn body(&self, text: &str, max_tokens: usize) -> Vec<u8> {
        let mut body = json!({
            "prompt": text,
            "max_tokens": max_tokens,
            "temperature": 0,
            "top_k": 1,
            "top_p": 1.0,
            "min_p": 0.0,
            "repeat_penalty": 1.0,
            "frequency_penalty": 0.0,
            "presence_penalty": 0.0,
            "seed": SEED,
            "stream": false,
            "cache_prompt": false,
        });
        if let Some(m) = &self.model {
            body["model"] = json!(m);
        }
        if let Some(n) = self.logprobs {
            body["logprobs"] = json!(n);
        }
        serde_json::to_vec(&body).expect("a JSON value serializes")
    }

    fn failed(&self, msg: impl std::fmt::Display) -> Error {
        Error::Device(format!("server {}: {msg}", self.ep.url()))
    }
}

impl Server for OpenAi {
    fn describe(&self) -> String {
        let model = self.answered_by.as_deref().or(self.model.as_deref()).unwrap_or("its default");
        format!("OpenAI-style server at {}, model {model}", self.ep.url())
    }

    fn takes_raw(&self) -> bool {
        true
    }

    fn notes(&self) -> Vec<String> {
        let logprobs = match self.logprobs {
            Some(n) => format!(", the top {n} log-probabilities of each token"),
            None => String::new(),
        };
        vec![format!(
            "asked on /v1/completions greedily (temperature 0, top_k 1), repeat_penalty 1.0 (llama-cpp-python's \
             server defaults it to 1.1), no prompt cache, seed 0{logprobs}; the prompt sent is the chat template \
             hefprobe applied to the reference's"
        )]
    }

    fn generate(&mut self, prompt: &Prompt, max_tokens: usize) -> Result<Generation> {
        let text = match prompt {
            Prompt::Raw(t) | Prompt::Message(t) => t,
        };
        let limits = limits(self.timeout, max_tokens, self.logprobs.unwrap_or(0));
        let r =
            http::request(&self.ep, "POST", "/v1/completions", Some(&self.body(text, max_tokens)), limits)?;
        if r.status != 200 {
            let kind = if r.content_type.is_empty() {
                "no content type".to_string()
            } else {
                r.content_type.clone()
            };
            return Err(self.failed(format_args!(
                "/v1/completions answered HTTP {} ({kind}): {}",
                r.status,
                r.excerpt()
            )));
        }
        let o = json_object(&r.body, "its /v1/completions answer").map_err(|m| self.failed(m))?;
        if let Some(e) = o.get("error") {
            let msg = e.get("message").and_then(Value::as_str).map_or_else(|| e.to_string(), String::from);
            return Err(
                self.failed(format_args!("answered with an error: {}", crate::error::echo(&msg, 200)))
            );
        }
        if let Some(m) = o.get("model").and_then(Value::as_str) {
            self.answered_by = Some(m.to_string());
        }
        completion(&o).map_err(|m| self.failed(format_args!("its /v1/completions answer {m}")))
    }
}

/// A completion object's first choice, in either log-probability shape.
fn completion(o: &Map<String, Value>) -> std::result::Result<Generation, String> {
    let choice =
        o.get("choices").and_then(Value::as_array).and_then(|c| c.first()).ok_or("has no `choices[0]`")?;
    let text =
        choice.get("text").and_then(Value::as_str).ok_or("has no string `choices[0].text`")?.to_string();
    let finish = match choice.get("finish_reason").and_then(Value::as_str) {
        Some("length") => Finish::Length,
        _ => Finish::Stop,
    };
    let usage = |k: &str| o.get("usage")?.get(k)?.as_u64().and_then(|n| usize::try_from(n).ok());
    let tokens = match choice.get("logprobs") {
        None | Some(Value::Null) => Vec::new(),
        Some(lp) => match lp.get("content") {
            Some(content) => llama_cpp(content)?,
            None => legacy(lp)?,
        },
    };
    Ok(Generation {
        text,
        tokens,
        finish,
        count: usage("completion_tokens"),
        prompt_tokens: usage("prompt_tokens"),
    })
}

/// llama.cpp's `logprobs.content`: ids, and the top entries with theirs.
fn llama_cpp(content: &Value) -> std::result::Result<Vec<TokenInfo>, String> {
    let entries = content.as_array().ok_or("has a `logprobs.content` that is not a list")?;
    let id = |v: &Value| v.get("id").and_then(Value::as_u64).and_then(|i| u32::try_from(i).ok());
    entries
        .iter()
        .map(|e| {
            let top = e.get("top_logprobs").and_then(Value::as_array).into_iter().flatten();
            let top =
                top.filter_map(|t| Some((id(t).map(TokenRef::Id)?, t.get("logprob")?.as_f64()?))).collect();
            Ok(TokenInfo {
                text: e.get("token").and_then(Value::as_str).unwrap_or_default().to_string(),
                id: id(e),
                top,
            })
        })
        .collect()
}

/// llama-cpp-python's legacy `logprobs`: token texts, and the top entries keyed by text (a
/// partial UTF-8 token's text is "", and entries of equal text collapse into one key).
fn legacy(lp: &Value) -> std::result::Result<Vec<TokenInfo>, String> {
    let texts = lp.get("tokens").and_then(Value::as_array).ok_or("has `logprobs` without `tokens`")?;
    let tops = lp.get("top_logprobs").and_then(Value::as_array);
    Ok(texts
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let top = tops.and_then(|all| all.get(i)).and_then(Value::as_object).into_iter().flatten();
            let mut top: Vec<(TokenRef, f64)> = top
                .filter(|(k, _)| !k.is_empty())
                .filter_map(|(k, v)| Some((TokenRef::Text(k.clone()), v.as_f64()?)))
                .collect();
            top.sort_by(|a, b| b.1.total_cmp(&a.1));
            TokenInfo { text: t.as_str().unwrap_or_default().to_string(), id: None, top }
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_logprob_shapes_are_read() {
        // llama-cpp-python 0.3.36 (legacy shape).
        let legacy = json!({"id": "cmpl-1", "object": "text_completion", "created": 1, "model": "m.gguf",
            "choices": [{"text": " Paris", "index": 0, "finish_reason": "length", "logprobs": {
                "tokens": [" Paris"], "text_offset": [10], "token_logprobs": [-0.1],
                "top_logprobs": [{" Paris": -0.1, " Lyon": -3.0, "": -9.0}]}}],
            "usage": {"prompt_tokens": 12, "completion_tokens": 1, "total_tokens": 13}});
        let g = completion(legacy.as_object().unwrap()).unwrap();
        assert_eq!(
            (g.text.as_str(), g.finish.clone(), g.count, g.prompt_tokens),
            (" Paris", Finish::Length, Some(1), Some(12))
        );
        assert_eq!(
            g.tokens[0].top,
            vec![(TokenRef::Text(" Paris".into()), -0.1), (TokenRef::Text(" Lyon".into()), -3.0)]
        );
        // llama.cpp's server.
        let cpp = json!({"choices": [{"text": "!", "index": 0, "finish_reason": "stop", "logprobs": {"content": [
            {"id": 0, "token": "!", "bytes": [33], "logprob": -0.5,
             "top_logprobs": [{"id": 0, "token": "!", "bytes": [33], "logprob": -0.5}, {"id": 7, "token": "?", "bytes": [63], "logprob": -1.5}]}]}}]});
        let g = completion(cpp.as_object().unwrap()).unwrap();
        assert_eq!((g.tokens[0].id, g.finish.clone()), (Some(0), Finish::Stop));
        assert_eq!(g.tokens[0].top[1], (TokenRef::Id(7), -1.5));
        let e = completion(json!({"choices": []}).as_object().unwrap()).unwrap_err();
        assert!(e.contains("choices[0]"), "{e}");
    }
}
