//! hailo-ollama's dialect (hailo_model_zoo_genai v5.1.1, `src/library/dto/DTOs.hpp`,
//! `controller/controller.cpp`, `controller/llm_generation_callback.cpp`): `POST /api/generate`
//! `{model, prompt, stream, options{temperature, seed, top_k, top_p, frequency_penalty,
//! num_predict}}` answers `application/x-ndjson`, one object per generated token
//! `{model, created_at, response, done: false}` (each ended by `\r\n`), then
//! `{…, done: true, done_reason: "stop"|"length", total_duration, eval_count}`.
//!
//! Its quirks, each handled here: it always applies the manifest's chat template to `prompt`
//! (`raw` is parsed and ignored), so the prompt is the user message; `temperature: 0` is
//! greedy (absent, the HEF's default samples); `frequency_penalty` is HF's repetition penalty
//! over the tokens generated since the context was last cleared, applied even when greedy and
//! defaulting to the HEF's (1.1): 1.0 is sent; a prompt that extends the previous prompt and
//! response continues that context (its KV cache and penalty history), any other clears it;
//! errors, an unknown model among them, come back as HTTP 200 `{"error": "…"}`; a token that
//! ends inside a UTF-8 character is sent as `""` and its text with the token that completes it
//! (HailoRT's detokenizer buffers it). Ollama proper reads `frequency_penalty` as an additive
//! penalty (1.0 is strong): judge it with `api=openai` on its `/v1/completions`.

use super::http::{self, Endpoint};
use super::server::{json_object, limits, Prompt, Server, SEED};
use crate::backend::generation::{Finish, Generation, TokenInfo};
use crate::error::{Error, Result};
use serde_json::{json, Value};
use std::time::Duration;

/// The longest NDJSON line accepted: one token's object is well under a kilobyte.
const MAX_LINE: usize = 1 << 20;

pub struct Ollama {
    ep: Endpoint,
    model: Option<String>,
    timeout: Duration,
    what: String,
}

impl Ollama {
    pub fn new(ep: Endpoint, model: Option<String>, timeout: Duration, what: &str) -> Self {
        Ollama { ep, model, timeout, what: what.to_string() }
    }

    /// The server's models (`GET /api/tags`), for a message; empty when it cannot say.
    fn models(&self) -> Vec<String> {
        let Ok(r) = http::request(&self.ep, "GET", "/api/tags", None, limits(self.timeout, 1, 0)) else {
            return Vec::new();
        };
        let v: Value = serde_json::from_slice(&r.body).unwrap_or_default();
        let names = v.get("models").and_then(Value::as_array).into_iter().flatten();
        names.filter_map(|m| m.get("name").and_then(Value::as_str).map(String::from)).collect()
    }

    /// The model to ask for: the one named, else the server's only one.
    fn model(&mut self) -> Result<String> {
        if let Some(m) = &self.model {
            return Ok(m.clone());
        }
        match self.models().as_slice() {
            [one] => {
                self.model = Some(one.clone());
                Ok(one.clone())
            }
            many => Err(Error::usage(format!(
                "{}: name the served model (`model=NAME`); the server at {} has {}",
                self.what,
                self.ep.url(),
                if many.is_empty() { "none listed at /api/tags".to_string() } else { many.join(", ") }
            ))),
        }
    }

    /// An `{"error": …}` answer: an unknown model is what the user wrote (exit 2), anything
    /// else the server's failure (exit 3).
    fn refusal(&self, model: &str, msg: &str) -> Error {
        let msg = crate::error::echo(msg, 200);
        if msg.contains("not found") {
            let have = self.models();
            let have =
                if have.is_empty() { String::new() } else { format!("; it serves {}", have.join(", ")) };
            return Error::input(
                format!("{} model `{model}`", self.what),
                format!("the server at {} answered `{msg}`{have}", self.ep.url()),
            );
        }
        Error::Device(format!("server {}: answered with an error: {msg}", self.ep.url()))
    }
}

impl Server for Ollama {
    fn describe(&self) -> String {
        format!("hailo-ollama dialect at {}, model {}", self.ep.url(), self.model.as_deref().unwrap_or("?"))
    }

    fn takes_raw(&self) -> bool {
        false
    }

    fn notes(&self) -> Vec<String> {
        vec!["asked greedily (temperature 0), frequency_penalty 1.0 (HailoRT's default 1.1 would penalise \
              repeats even when greedy), seed 0; the server applies its own chat template, which hefprobe \
              applied to the reference's prompt too"
            .to_string()]
    }

    fn generate(&mut self, prompt: &Prompt, max_tokens: usize) -> Result<Generation> {
        let Prompt::Message(message) = prompt else {
            return Err(Error::usage("hailo-ollama takes a user message, never a raw prompt"));
        };
        let model = self.model()?;
        let body = json!({
            "model": model,
            "prompt": message,
            "stream": true,
            "options": {
                "temperature": 0,
                "seed": SEED,
                "top_k": 1,
                "top_p": 1.0,
                "frequency_penalty": 1.0,
                "num_predict": max_tokens,
            },
        });
        let body = serde_json::to_vec(&body).expect("a JSON value serializes");
        let mut x =
            http::open(&self.ep, "POST", "/api/generate", Some(&body), limits(self.timeout, max_tokens, 0))?;
        if x.status != 200 {
            let mut rest = vec![0u8; 4096];
            let n = x.read_body(&mut rest).unwrap_or(0);
            return Err(Error::Device(format!(
                "server {}: /api/generate answered HTTP {} ({}): {}",
                self.ep.url(),
                x.status,
                if x.content_type.is_empty() { "no content type" } else { &x.content_type },
                super::server::excerpt(&rest[..n])
            )));
        }
        let mut stream = Stream { tokens: Vec::new(), done: None, line: 0, max_tokens, error: None };
        let url = self.ep.url();
        x.lines(MAX_LINE, &mut |line| {
            stream.take(line).map_err(|msg| Error::Device(format!("server {url}: {msg}")))
        })?;
        if let Some(msg) = stream.error.take() {
            return Err(self.refusal(&model, &msg));
        }
        let Some((finish, count)) = stream.done else {
            return Err(Error::Device(format!(
                "server {url}: its /api/generate stream ended after {} pieces without `\"done\": true`",
                stream.tokens.len()
            )));
        };
        let text = stream.tokens.iter().map(|t| t.text.as_str()).collect();
        Ok(Generation { text, tokens: stream.tokens, finish, count, prompt_tokens: None })
    }
}

/// The pieces of one `/api/generate` stream, checked line by line.
struct Stream {
    tokens: Vec<TokenInfo>,
    done: Option<(Finish, Option<usize>)>,
    line: usize,
    max_tokens: usize,
    /// The server's own `{"error": …}`.
    error: Option<String>,
}

impl Stream {
    /// One line; false once the stream is over.
    fn take(&mut self, line: &[u8]) -> std::result::Result<bool, String> {
        self.line += 1;
        let what = format!("line {} of its /api/generate stream", self.line);
        let o = json_object(line, &what)?;
        if let Some(e) = o.get("error") {
            self.error = Some(e.as_str().map_or_else(|| e.to_string(), String::from));
            return Ok(false);
        }
        let done =
            o.get("done").and_then(Value::as_bool).ok_or_else(|| format!("{what} has no boolean `done`"))?;
        let piece = match o.get("response") {
            Some(Value::String(s)) => s.clone(),
            None if done => String::new(),
            _ => return Err(format!("{what} has no string `response`")),
        };
        if done {
            let finish = match o.get("done_reason").and_then(Value::as_str) {
                Some("length") => Finish::Length,
                _ => Finish::Stop,
            };
            let count = o.get("eval_count").and_then(Value::as_u64).and_then(|n| usize::try_from(n).ok());
            if !piece.is_empty() {
                self.tokens.push(TokenInfo { text: piece, id: None, top: Vec::new() });
            }
            self.done = Some((finish, count));
            return Ok(false);
        }
        // hailo-ollama sends one object per token (and HailoRT's recovery token is not sent):
        // more than asked for is a stream that does not stop.
        if self.tokens.len() > self.max_tokens {
            return Err(format!(
                "it sent over {} pieces for num_predict {} without `\"done\": true`; a stream that does not end",
                self.tokens.len(),
                self.max_tokens
            ));
        }
        self.tokens.push(TokenInfo { text: piece, id: None, top: Vec::new() });
        Ok(true)
    }
}
