//! What a served model answers: a generation with its tokens and how it ended, and what it
//! returned for one probe.

use serde::Serialize;

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

/// What a served model returned for one probe: its greedy continuation, and the one-token
/// continuations of the reference's prefixes where it takes a raw prompt (`forced[k]`
/// continues the prompt and the reference's first k tokens; None where the prefix could not
/// be sent as text).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Served {
    pub server: String,
    pub greedy: Generation,
    pub forced: Option<Vec<Option<Generation>>>,
    /// Why there are no one-token continuations.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub forced_unavailable: Option<String>,
    /// The prompt as the server was sent it, and how many tokens the reference reads it as.
    pub prompt: String,
    pub prompt_tokens: usize,
    /// How many tokens each request asked for.
    pub max_tokens: usize,
}
