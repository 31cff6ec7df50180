//! What several commands share: the model, checkpoint and prompt flags, the deprecated report
//! flags' note, and the command line as typed (quoted for reports, read back by `verify`).

use crate::error::Result;
use crate::model::CheckpointRef;
use crate::report::{Format, ReportTarget};
use clap::Args;
use std::path::PathBuf;

/// A checkpoint given on the command line: a folder, a `.gguf` file, or a hub id at a
/// revision. Every command that takes `--checkpoint` reads it through this one group.
#[derive(Args, Debug, Clone)]
pub struct CheckpointArgs {
    /// HF checkpoint folder (config.json + model.safetensors or a sharded index), a .gguf file,
    /// or a model id (ORG/NAME) already in the local Hugging Face hub cache (nothing is downloaded).
    #[arg(long, value_name = "DIR|FILE.gguf|ID")]
    pub checkpoint: Option<PathBuf>,
    /// With a model id: the branch, tag or full commit sha in the hub cache.
    #[arg(long, value_name = "REV", default_value = crate::model::hub::DEFAULT_REVISION, requires = "checkpoint")]
    pub revision: String,
    /// config.json keys hefprobe does not know are an error (exit 2) instead of a warning.
    #[arg(long, requires = "checkpoint")]
    pub strict_config: bool,
}

impl CheckpointArgs {
    pub fn to_ref(&self) -> Option<CheckpointRef> {
        self.checkpoint.as_ref().map(|path| CheckpointRef::Path {
            path: path.clone(),
            revision: self.revision.clone(),
            strict_config: self.strict_config,
        })
    }
}

/// Where the model comes from: a checkpoint or a synthesized preset.
#[derive(Args, Debug, Clone)]
pub struct ModelArgs {
    #[command(flatten)]
    pub from: CheckpointArgs,
    /// Synthesize the checkpoint in memory from a preset instead (see `hefprobe synth --help`).
    #[arg(long, value_name = "PRESET", conflicts_with = "checkpoint")]
    pub synth: Option<String>,
    /// Seed for --synth.
    #[arg(long, default_value_t = 0, requires = "synth")]
    pub synth_seed: u64,
}

impl ModelArgs {
    /// Whether a model was given at all.
    pub fn given(&self) -> bool {
        self.from.checkpoint.is_some() || self.synth.is_some()
    }

    pub fn to_ref(&self) -> Result<CheckpointRef> {
        CheckpointRef::given(self.from.to_ref(), self.synth.as_deref(), self.synth_seed)
    }
}

/// Token ids as given on the command line: `1,2,3`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ids(pub Vec<u32>);

pub fn parse_ids(s: &str) -> std::result::Result<Ids, String> {
    s.split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(|t| t.parse::<u32>().map_err(|_| format!("`{t}` is not a token id")))
        .collect::<std::result::Result<Vec<u32>, String>>()
        .map(Ids)
}

/// The inputs of a run: prompt (ids or text), chunking and decode steps.
#[derive(Args, Debug, Clone, Default)]
pub struct PromptArgs {
    /// Prompt token ids: 1,2,3.
    #[arg(long, value_name = "IDS", value_parser = parse_ids, conflicts_with = "text")]
    pub tokens: Option<Ids>,
    /// Prompt text, tokenized with the checkpoint's tokenizer.json, a GGUF's own, or --tokenizer.
    #[arg(long)]
    pub text: Option<String>,
    /// tokenizer.json to use with --text (default: the checkpoint folder's).
    #[arg(long, value_name = "PATH")]
    pub tokenizer: Option<PathBuf>,
    /// Let the tokenizer's post-processor add special tokens (a BOS). HailoRT's genai server
    /// does not (finding 6), so the default is off.
    #[arg(long)]
    pub add_special_tokens: bool,
    /// Greedy decode steps after the prompt.
    #[arg(long, value_name = "N", conflicts_with = "decode_tokens")]
    pub decode: Option<usize>,
    /// Teacher-forced decode tokens: step K feeds token K.
    #[arg(long, value_name = "IDS", value_parser = parse_ids)]
    pub decode_tokens: Option<Ids>,
    /// Prefill in chunks of N tokens, remainder first (as HailoRT feeds prompts).
    #[arg(long, value_name = "N")]
    pub chunk: Option<usize>,
    /// Absolute position of the first prompt token.
    #[arg(long, default_value_t = 0)]
    pub start_position: usize,
}

impl PromptArgs {
    /// The inputs as a probe's `[inputs]` table states them.
    pub fn spec(&self) -> crate::probe::schema::InputsSpec {
        crate::probe::schema::InputsSpec {
            tokens: self.tokens.as_ref().map(|t| t.0.clone()),
            text: self.text.clone(),
            tokenizer: self.tokenizer.clone(),
            add_special_tokens: self.add_special_tokens,
            chunk: self.chunk,
            decode: self.decode,
            decode_tokens: self.decode_tokens.as_ref().map(|t| t.0.clone()),
            start_position: self.start_position,
        }
    }

    /// Whether a prompt was given (`--tokens` or `--text`).
    pub fn given(&self) -> bool {
        self.tokens.is_some() || self.text.is_some()
    }
}

/// A deprecated report flag was used (with its PATH, if it takes one): say once, on stderr, what
/// replaces it, and return the target it stands for.
pub fn deprecated(old: &str, format: Format, path: Option<&PathBuf>) -> ReportTarget {
    let f = format.name();
    let (old, new) = match path {
        Some(_) => (format!("{old} PATH"), format!("--report {f}=PATH")),
        None => (old.to_string(), format!("--report {f}")),
    };
    crate::errln!("note: {old} is deprecated and goes in the next release; use {new}");
    ReportTarget { format, path: path.cloned() }
}

/// The command line as given (`main_code`'s), for [`command_line`]: the Python module's
/// console script runs inside an interpreter, whose own arguments are not hefprobe's.
pub static ARGS: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();

/// The command line as typed, quoted where needed, for the Markdown report.
pub fn command_line() -> String {
    let args = ARGS.get().cloned().unwrap_or_else(|| std::env::args().collect());
    args.into_iter()
        .enumerate()
        .map(|(i, a)| {
            let a = if i == 0 { "hefprobe".to_string() } else { a };
            if a.chars().any(|c| c.is_whitespace() || "\"'$`|&;<>()".contains(c)) {
                format!("'{}'", a.replace('\'', "'\\''"))
            } else {
                a
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The words of a command line as [`command_line`] quoted them.
pub fn unquote(line: &str) -> Vec<String> {
    let (mut words, mut word, mut quoted, mut started) = (Vec::new(), String::new(), false, false);
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\'' => (quoted, started) = (!quoted, true),
            '\\' if !quoted => word.extend(chars.next()),
            ' ' if !quoted => {
                if started || !word.is_empty() {
                    words.push(std::mem::take(&mut word));
                }
                started = false;
            }
            c => word.push(c),
        }
    }
    if started || !word.is_empty() {
        words.push(word);
    }
    words
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_quoted_command_line_reads_back_word_for_word() {
        let line = r"hefprobe run 'my probes/p.toml' --threshold 'it'\''s' '' --fault a";
        let words = super::unquote(line);
        assert_eq!(words, ["hefprobe", "run", "my probes/p.toml", "--threshold", "it's", "", "--fault", "a"]);
    }
}
