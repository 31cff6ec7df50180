//! A served model as a backend: the model as people run it — hailo-ollama's Ollama-style HTTP
//! server on a Raspberry Pi, genai's Python `LLM` object, an OpenAI-style server (llama.cpp's,
//! vLLM) — asked for its greedy continuation of each probe prompt, and for one-token
//! continuations of the reference's own answer where it takes a prompt as it is. Only tokens
//! (and, from OpenAI-style servers, the top log-probabilities) come back: nothing reaches the
//! tap sink, and [`compare::tokens`](crate::compare::tokens) judges what it returns
//! ([`Served`]) against the reference token by token.
//!
//! Every request asks for what a judge needs and a server would not do by itself: greedy
//! decoding (temperature 0), no repetition penalty (hailo-ollama's HRT applies the HEF's
//! `repetition_penalty`, 1.1 by default, even to greedy decoding unless `frequency_penalty`
//! 1.0 is sent; llama-cpp-python's server defaults `repeat_penalty` to 1.1), a fixed seed, a
//! fresh context per prompt.

mod http;
mod ollama;
mod openai;
mod server;

pub use super::generation::{Finish, Generation, Served, TokenInfo, TokenRef};
pub use super::spec::Api;
pub use http::Endpoint;
pub use server::{Prompt, Server, SEED};

use super::runner::{Backend, Ran};
use crate::capture::{Store, TapSink};
use crate::error::{Error, Result};
use crate::inputs::InputSet;
use crate::model::run::RunRecord;
use crate::model::tokenizer::Tokenizer;
use crate::tap::TapSelection;
use std::sync::Arc;

/// The serving backend: a [`Server`] and the tokenizer that turns the reference's ids into
/// the text it is sent.
pub struct ServeBackend {
    name: String,
    server: Box<dyn Server>,
    tokenizer: Arc<Tokenizer>,
    served: Option<Served>,
}

impl ServeBackend {
    pub fn new(name: &str, server: Box<dyn Server>, tokenizer: Arc<Tokenizer>) -> Self {
        ServeBackend { name: name.to_string(), server, tokenizer, served: None }
    }

    /// The greedy answer, then the one-token continuations: what finished is kept when a
    /// continuation fails (the error is the run's).
    fn serve(&mut self, inputs: &InputSet) -> (Option<Served>, Option<Error>) {
        let mut served = match self.greedy(inputs) {
            Ok(s) => s,
            Err(e) => return (None, Some(e)),
        };
        if !self.server.takes_raw() {
            served.forced_unavailable = Some(format!(
                "`{}` applies its chat template to every prompt, so the reference's own answer cannot be continued \
                 token by token: no teacher-forced agreement",
                self.name
            ));
            return (Some(served), None);
        }
        let reference = match &inputs.decode {
            crate::inputs::DecodeSpec::Forced(t) => t.as_slice(),
            crate::inputs::DecodeSpec::Greedy(_) => &[],
        };
        let mut answers = Vec::new();
        let error = self.continuations(&inputs.prompt, reference, &mut answers).err();
        served.forced = Some(answers);
        (Some(served), error)
    }

    fn greedy(&mut self, inputs: &InputSet) -> Result<Served> {
        let max_tokens = match &inputs.decode {
            crate::inputs::DecodeSpec::Forced(t) => t.len() + 1,
            crate::inputs::DecodeSpec::Greedy(_) => {
                return Err(Error::usage(
                    "a served model is judged on the reference's greedy tokens, resolved first",
                ))
            }
        };
        let raw = self.tokenizer.decode(&inputs.prompt);
        let (prompt, sent) = match (&inputs.message, self.server.takes_raw()) {
            (_, true) => (Prompt::Raw(raw.clone()), raw),
            (Some(m), false) => (Prompt::Message(m.clone()), m.clone()),
            (None, false) => {
                return Err(Error::usage(format!(
                    "backend `{}` applies its own chat template to a user message: give the probe's prompt as `text` \
                     (token ids cannot be sent to it)",
                    self.name
                )))
            }
        };
        let greedy = self.server.generate(&prompt, max_tokens)?;
        Ok(Served {
            server: self.server.describe(),
            greedy,
            forced: None,
            forced_unavailable: None,
            prompt: sent,
            prompt_tokens: inputs.prompt.len(),
            max_tokens,
        })
    }

    /// One-token continuations of the prompt and the reference's first k tokens, k = 0..=n
    /// (each a fresh prefill: they exercise the server's prefill only). A prefix whose text
    /// ends inside a UTF-8 character cannot be sent as text: None there. Stops after the
    /// reference's first special token (its answer is over).
    fn continuations(
        &mut self,
        prompt: &[u32],
        reference: &[u32],
        out: &mut Vec<Option<Generation>>,
    ) -> Result<()> {
        let bar =
            crate::progress::bar(reference.len() as u64 + 1, "{spinner} one-token continuations {pos}/{len}");
        let mut ids = prompt.to_vec();
        for k in 0..=reference.len() {
            crate::error::check_interrupt()?;
            let text = self.tokenizer.decode(&ids);
            out.push(if text.ends_with(char::REPLACEMENT_CHARACTER) {
                None
            } else {
                Some(self.server.generate(&Prompt::Raw(text), 1)?)
            });
            bar.inc(1);
            let Some(&next) = reference.get(k) else { break };
            if self.tokenizer.is_special(next) {
                break;
            }
            ids.push(next);
        }
        bar.finish_and_clear();
        Ok(())
    }
}

impl Backend for ServeBackend {
    fn name(&self) -> &str {
        &self.name
    }

    fn notes(&self) -> Vec<String> {
        self.server.notes()
    }

    fn served(&mut self) -> Option<Served> {
        self.served.take()
    }

    fn run(
        &mut self,
        inputs: &InputSet,
        _taps: &TapSelection,
        feed: Option<&dyn Store>,
        _sink: &mut dyn TapSink,
    ) -> Ran {
        if feed.is_some() {
            return super::runner::no_feed(&self.name);
        }
        let (served, error) = self.serve(inputs);
        self.served = served;
        Ran { record: RunRecord::default(), error }
    }
}

/// The HTTP server a `serve` spec names, in its dialect.
pub fn open(spec: &super::spec::BackendSpec, what: &str) -> Result<Box<dyn Server>> {
    let url = spec
        .url
        .as_deref()
        .ok_or_else(|| Error::usage(format!("{what}: a serve backend needs `url` (http://HOST:PORT)")))?;
    let ep = Endpoint::parse(url, what)?;
    let timeout = std::time::Duration::from_secs_f64(spec.timeout.unwrap_or(DEFAULT_TIMEOUT_S));
    Ok(match spec.api.unwrap_or(Api::Ollama) {
        Api::Ollama => Box::new(ollama::Ollama::new(ep, spec.model.clone(), timeout, what)),
        Api::Openai => Box::new(openai::OpenAi::new(ep, spec.model.clone(), spec.logprobs, timeout)),
        Api::Llm => {
            return Err(Error::usage(format!(
                "{what}: api = llm is an LLM object handed over from Python (hefprobe.run(..., llm=LLM(...)))"
            )))
        }
    })
}

/// The longest a server may stay silent, by default: a Raspberry Pi's first token of a long
/// prompt takes seconds, not minutes.
pub const DEFAULT_TIMEOUT_S: f64 = 60.0;
