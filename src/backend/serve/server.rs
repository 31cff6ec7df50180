//! What every dialect of served model speaks: a prompt sent, a generation back (its tokens and
//! how it ended: `generation`), the seed, and the bounds and JSON checks each answer goes through.

use super::http::Limits;
use crate::backend::generation::Generation;
use crate::error::Result;
use std::time::Duration;

/// The seed every request sends (greedy decoding does not draw, but a server that samples
/// anyway then draws the same).
pub const SEED: u32 = 0;

/// What a prompt is sent as.
#[derive(Debug, Clone, PartialEq)]
pub enum Prompt {
    /// A user message, which the server wraps in its own chat template.
    Message(String),
    /// Text the model reads as it is (the chat template already applied by hefprobe).
    Raw(String),
}

/// A server, spoken to in its dialect: greedy, no penalty, a fresh context per call.
pub trait Server: Send {
    /// Who answers, for the report ("hailo-ollama at http://…, model qwen2:1.5b").
    fn describe(&self) -> String;
    /// Whether it takes a raw prompt (else only a user message, templated by the server).
    fn takes_raw(&self) -> bool;
    /// Its greedy continuation of `prompt`: at most `max_tokens` tokens.
    fn generate(&mut self, prompt: &Prompt, max_tokens: usize) -> Result<Generation>;
    /// What the report should know about how it was asked (its quirks).
    fn notes(&self) -> Vec<String> {
        Vec::new()
    }
}

/// What an answer of `tokens` tokens may cost: `timeout` of silence between reads, `timeout`
/// per token and two more for the whole answer, and a body cap of generous JSON per token (a
/// streamed object, or a log-probability entry with its top N, each with its bytes), never
/// unbounded.
pub(super) fn limits(timeout: Duration, tokens: usize, top: usize) -> Limits {
    Limits {
        silence: timeout,
        deadline: timeout.saturating_mul(u32::try_from(tokens).unwrap_or(u32::MAX).saturating_add(2)),
        max_body: (64usize << 10).saturating_add(tokens.saturating_mul(1024 + top.saturating_mul(512))),
    }
}

/// The object of one JSON line or body, or why it is not one.
pub(super) fn json_object(
    bytes: &[u8],
    what: &str,
) -> std::result::Result<serde_json::Map<String, serde_json::Value>, String> {
    match serde_json::from_slice::<serde_json::Value>(bytes) {
        Ok(serde_json::Value::Object(m)) => Ok(m),
        Ok(_) => Err(format!("{what} is JSON but not an object: {}", excerpt(bytes))),
        Err(e) => Err(format!("{what} is not JSON ({e}): {}", excerpt(bytes))),
    }
}

pub(super) fn excerpt(bytes: &[u8]) -> String {
    crate::error::echo(&String::from_utf8_lossy(&bytes[..bytes.len().min(400)]), 120)
}
