//! What every dialect of served model speaks: a prompt sent, a generation with its tokens and
//! how it ended, the seed, and the bounds and JSON checks each answer goes through.

use crate::error::Result;
use serde::Serialize;

/// The seed every request sends (greedy decoding does not draw, but a server that samples
/// anyway then draws the same).
pub const SEED: u32 = 0;

/// How a served generation ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Finish {
    /// A stop token (the server does not return its text, except genai's `LLM`).
    Stop,
    /// The number of tokens asked for.
    Length,
}

/// A token as a server names it in its log-probabilities: by id (llama.cpp) or by its text
/// (llama-cpp-python's legacy shape).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TokenRef {
    Id(u32),
    Text(String),
}

/// One generated token as the server reported it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TokenInfo {
    /// Its text as the server sent it: "" for a token it held back (an incomplete UTF-8
    /// character: hailo-ollama sends the held tokens' text with the token that completes it).
    pub text: String,
    pub id: Option<u32>,
    /// The server's top log-probabilities at its position, best first (empty without them).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub top: Vec<(TokenRef, f64)>,
}

/// One generation: its text and, where the server says how it cut it, its tokens.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Generation {
    pub text: String,
    /// One per generated token when the server reports them one by one (a stream's pieces,
    /// log-probability entries); empty otherwise.
    pub tokens: Vec<TokenInfo>,
    pub finish: Finish,
    /// How many tokens the server says it generated (`eval_count`, `completion_tokens`).
    pub count: Option<usize>,
    /// How many tokens the server says the prompt was (`usage.prompt_tokens`).
    pub prompt_tokens: Option<usize>,
}

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

/// The body cap of an answer of `tokens` tokens: generous JSON per token (a streamed object,
/// or a log-probability entry with its top N, each with its bytes), never unbounded.
pub(super) fn max_body(tokens: usize, top: usize) -> usize {
    (64usize << 10).saturating_add(tokens.saturating_mul(1024 + top.saturating_mul(512)))
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
