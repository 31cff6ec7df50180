//! A model's chat template, applied to a prompt as its server applies it: hailo-ollama wraps
//! every `/api/generate` prompt as `[{"role": "user", "content": prompt}]` and renders the
//! manifest's template with `add_generation_prompt = true` (hailo_model_zoo_genai v5.1.1
//! `controller.cpp`, minja `chat_template`); HF's `apply_chat_template` renders the tokenizer
//! config's with the same variables. The reference must be fed the same templated ids, so a
//! served model is judged on what it was actually asked.
//!
//! The template is Jinja, rendered by minijinja the way transformers compiles it
//! (`trim_blocks`, `lstrip_blocks`, loop controls, `raise_exception`, `strftime_now`, the string
//! methods templates call) and bounded: it comes from a file, so its work is metered (fuel) and
//! its output capped.

use crate::error::{Error, Result};
use crate::model::weights::CheckpointSource;
use minijinja::value::{Value, ValueKind};
use minijinja::{Environment, ErrorKind, State};
use std::path::Path;

/// Instructions one rendering may execute: real templates take thousands.
const FUEL: u64 = 5_000_000;
/// The longest templated prompt accepted (a template that loops cannot fill memory).
const MAX_OUTPUT: usize = 1 << 20;

/// A chat template, where it came from, and the special tokens it may name.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ChatTemplate {
    /// Where it was read (for notes and errors).
    pub source: String,
    text: String,
    bos_token: String,
    eos_token: String,
}

impl ChatTemplate {
    pub fn new(source: impl Into<String>, text: impl Into<String>) -> Self {
        ChatTemplate { source: source.into(), text: text.into(), ..Default::default() }
    }

    /// The checkpoint's own: a folder's `tokenizer_config.json` `chat_template` (or, as
    /// transformers ≥ 4.43 saves it, `chat_template.jinja`), a GGUF's `tokenizer.chat_template`.
    /// None for a synthesized checkpoint or a folder without one.
    pub fn of_checkpoint(source: &CheckpointSource) -> Result<Option<Self>> {
        match source {
            CheckpointSource::Dir(d) => {
                let config = d.join("tokenizer_config.json");
                if config.is_file() {
                    if let Some(t) = Self::from_json_file(&config)? {
                        return Ok(Some(t));
                    }
                }
                let jinja = d.join("chat_template.jinja");
                jinja.is_file().then(|| Self::from_jinja_file(&jinja)).transpose()
            }
            CheckpointSource::Gguf { path, .. } => Self::from_gguf(path),
            CheckpointSource::Synth(_) => Ok(None),
        }
    }

    /// A template file: Jinja text, a JSON file holding `chat_template` (tokenizer_config.json,
    /// or a HEF's hailo-config.json extracted), or a `.hef` whose hailo-config.json holds one.
    pub fn load(path: &Path) -> Result<Self> {
        let what = path.display().to_string();
        let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("").to_ascii_lowercase();
        let found = match ext.as_str() {
            "hef" => Self::from_hef(path)?,
            "json" => Self::from_json_file(path)?,
            _ => Some(Self::from_jinja_file(path)?),
        };
        found.ok_or_else(|| {
            Error::input(
                what,
                "holds no chat template (`chat_template` is missing or empty); give the template's file",
            )
        })
    }

    fn from_jinja_file(path: &Path) -> Result<Self> {
        let text = crate::files::read_text(path, crate::files::Kind::ChatTemplate)?;
        Ok(Self::new(path.display().to_string(), text))
    }

    /// `chat_template` of a JSON file (a string, or HF's list of named templates: `default`),
    /// with its `bos_token` / `eos_token` (a string or `{"content": ...}`).
    fn from_json_file(path: &Path) -> Result<Option<Self>> {
        let what = path.display().to_string();
        let text = crate::files::read_text(path, crate::files::Kind::Config)?;
        let root: serde_json::Value = serde_json::from_str(&text)
            .map_err(|e| Error::input(&what, format!("is not valid JSON: {e}")))?;
        let template = match root.get("chat_template") {
            None | Some(serde_json::Value::Null) => return Ok(None),
            Some(serde_json::Value::String(s)) => s.clone(),
            Some(serde_json::Value::Array(named)) => {
                let default =
                    named.iter().find(|t| t.get("name").and_then(|n| n.as_str()) == Some("default"));
                match default.and_then(|t| t.get("template")).and_then(|t| t.as_str()) {
                    Some(s) => s.to_string(),
                    None => return Err(Error::input(
                        format!("{what} key `chat_template`"),
                        "is a list of named templates without one named `default`; give the template's file",
                    )),
                }
            }
            Some(_) => {
                return Err(Error::input(
                    format!("{what} key `chat_template`"),
                    "is neither a string nor a list",
                ))
            }
        };
        if template.is_empty() {
            return Ok(None);
        }
        let token = |key: &str| match root.get(key) {
            Some(serde_json::Value::String(s)) => s.clone(),
            Some(v) => v.get("content").and_then(|c| c.as_str()).unwrap_or_default().to_string(),
            None => String::new(),
        };
        Ok(Some(ChatTemplate {
            source: what,
            text: template,
            bos_token: token("bos_token"),
            eos_token: token("eos_token"),
        }))
    }

    fn from_gguf(path: &Path) -> Result<Option<Self>> {
        let file = crate::model::gguf::GgufFile::open(path)?;
        let Some(text) = file.string("tokenizer.chat_template")?.filter(|t| !t.is_empty()) else {
            return Ok(None);
        };
        let tokens = file.strings("tokenizer.ggml.tokens")?.unwrap_or_default();
        let token = |key: &str| -> Result<String> {
            let id = file.uint(key)?;
            Ok(id
                .and_then(|i| tokens.get(usize::try_from(i).ok()?))
                .map_or_else(String::new, |t| t.to_string()))
        };
        Ok(Some(ChatTemplate {
            source: format!("{} tokenizer.chat_template", path.display()),
            text: text.to_string(),
            bos_token: token("tokenizer.ggml.bos_token_id")?,
            eos_token: token("tokenizer.ggml.eos_token_id")?,
        }))
    }

    /// hailo-config.json's `chat_template` (what genai's `prompt_template()` returns).
    fn from_hef(path: &Path) -> Result<Option<Self>> {
        let what = path.display().to_string();
        let hef = crate::hef::Hef::read(path)?;
        let resource = crate::hef::llm_config::RESOURCE;
        let bytes = hef.resource(resource).ok_or_else(|| {
            Error::input(
                &what,
                format!("has no `{resource}` resource, so no chat template; give the template's file"),
            )
        })?;
        let config = crate::hef::llm_config::LlmConfig::parse(bytes, &format!("{what} {resource}"))?;
        Ok((!config.chat_template.is_empty())
            .then(|| Self::new(format!("{what} {resource}"), config.chat_template)))
    }

    /// The prompt a server sends its model for one user `message`: the template rendered with
    /// `messages = [{"role": "user", "content": message}]` and `add_generation_prompt = true`.
    pub fn render_user(&self, message: &str) -> Result<String> {
        let bad = |msg: String| Error::input(format!("chat template {}", self.source), msg);
        let mut env = Environment::new();
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_fuel(Some(FUEL));
        env.add_function("raise_exception", |msg: String| -> std::result::Result<Value, minijinja::Error> {
            Err(minijinja::Error::new(ErrorKind::InvalidOperation, format!("the template raised: {msg}")))
        });
        env.add_function("strftime_now", |format: String| strftime(&format, std::time::SystemTime::now()));
        env.set_unknown_method_callback(python_method);
        let template =
            env.template_from_str(&self.text).map_err(|e| bad(format!("is not valid Jinja: {e:#}")))?;
        let messages = vec![minijinja::context! { role => "user", content => message }];
        let out = template
            .render(minijinja::context! {
                messages,
                add_generation_prompt => true,
                bos_token => &self.bos_token,
                eos_token => &self.eos_token,
            })
            .map_err(|e| bad(format!("cannot render a user message: {e:#}")))?;
        if out.len() > MAX_OUTPUT {
            return Err(bad(format!(
                "renders {} bytes for one message; a prompt template renders far less",
                out.len()
            )));
        }
        Ok(out)
    }
}

/// The Python string and dict methods chat templates call (`message['content'].strip()`),
/// which Jinja2 has from Python and minijinja does not.
fn python_method(
    state: &State,
    value: &Value,
    method: &str,
    args: &[Value],
) -> std::result::Result<Value, minijinja::Error> {
    let unknown = || Err(minijinja::Error::new(ErrorKind::UnknownMethod, format!("no method `{method}`")));
    let arg = |i: usize| args.get(i).and_then(Value::as_str);
    if let Some(s) = value.as_str() {
        return Ok(match method {
            "strip" => Value::from(s.trim_matches(strip_set(arg(0)))),
            "lstrip" => Value::from(s.trim_start_matches(strip_set(arg(0)))),
            "rstrip" => Value::from(s.trim_end_matches(strip_set(arg(0)))),
            "startswith" => Value::from(arg(0).is_some_and(|p| s.starts_with(p))),
            "endswith" => Value::from(arg(0).is_some_and(|p| s.ends_with(p))),
            "lower" => Value::from(s.to_lowercase()),
            "upper" => Value::from(s.to_uppercase()),
            "title" => state.apply_filter("title", std::slice::from_ref(value))?,
            "replace" => match (arg(0), arg(1)) {
                (Some(from), Some(to)) => Value::from(s.replace(from, to)),
                _ => return unknown(),
            },
            "split" => Value::from(match arg(0) {
                Some(sep) => s.split(sep).map(Value::from).collect::<Vec<_>>(),
                None => s.split_whitespace().map(Value::from).collect(),
            }),
            _ => return unknown(),
        });
    }
    if value.kind() == ValueKind::Map {
        return match method {
            "items" => state.apply_filter("items", std::slice::from_ref(value)),
            "keys" => Ok(Value::from(value.try_iter()?.collect::<Vec<_>>())),
            "values" => Ok(Value::from(
                value.try_iter()?.map(|k| value.get_item(&k)).collect::<std::result::Result<Vec<_>, _>>()?,
            )),
            "get" => {
                let v = value.get_item(args.first().unwrap_or(&Value::UNDEFINED))?;
                Ok(if v.is_undefined() { args.get(1).cloned().unwrap_or(Value::from(())) } else { v })
            }
            _ => unknown(),
        };
    }
    unknown()
}

/// The characters Python's `strip(chars)` removes: `chars`, or whitespace.
fn strip_set(chars: Option<&str>) -> impl Fn(char) -> bool + '_ {
    move |c| chars.map_or(c.is_whitespace(), |set| set.contains(c))
}

/// UTC calendar fields of `t`: year, month, day, hour, minute, second (the proleptic Gregorian
/// calendar from days since the epoch; Hinnant's `civil_from_days`).
pub fn utc_fields(t: std::time::SystemTime) -> [i64; 6] {
    let secs = t.duration_since(std::time::SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_secs()) as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    [y, m, d, rem / 3600, rem % 3600 / 60, rem % 60]
}

/// `strftime_now(format)` as minja defines it for templates (the current time; the Llama 3.2
/// template prints `Today Date: 26 Jul 2024`): the directives templates use, UTC.
fn strftime(format: &str, now: std::time::SystemTime) -> String {
    // `%b` is the first three letters of `%B`.
    const MONTHS: [&str; 12] = [
        "January",
        "February",
        "March",
        "April",
        "May",
        "June",
        "July",
        "August",
        "September",
        "October",
        "November",
        "December",
    ];
    let [y, m, d, hh, mm, ss] = utc_fields(now);
    let month = (m - 1).clamp(0, 11) as usize;
    let mut out = String::new();
    let mut chars = format.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('Y') => out += &format!("{y:04}"),
            Some('m') => out += &format!("{m:02}"),
            Some('d') => out += &format!("{d:02}"),
            Some('-') if format.contains("%-d") => {
                chars.next();
                out += &d.to_string();
            }
            Some('b') => out += &MONTHS[month][..3],
            Some('B') => out += MONTHS[month],
            Some('H') => out += &format!("{hh:02}"),
            Some('M') => out += &format!("{mm:02}"),
            Some('S') => out += &format!("{ss:02}"),
            Some(other) => {
                out.push('%');
                out.push(other);
            }
            None => out.push('%'),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// SmolLM2-135M-Instruct's template, as its GGUF and tokenizer_config.json carry it.
    const SMOLLM2: &str = "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

    #[test]
    fn a_user_message_is_rendered_as_transformers_renders_it() {
        let t = ChatTemplate::new("smollm2", SMOLLM2);
        // transformers 4.x apply_chat_template(tokenize=False, add_generation_prompt=True).
        let want = "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n\
                    <|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n";
        assert_eq!(t.render_user("What is 2+2?").unwrap(), want);
    }

    #[test]
    fn python_methods_bos_and_blocks_are_as_jinja2_has_them() {
        let t = ChatTemplate {
            source: "t".into(),
            text: "{{ bos_token }}{% for m in messages %}\n  {% if m.content.strip().startswith('Hi') %}[{{ m['content'].strip().upper() }}]{% endif %}\n{% endfor %}"
                .into(),
            bos_token: "<s>".into(),
            eos_token: "</s>".into(),
        };
        assert_eq!(t.render_user("  Hi there ").unwrap(), "<s>[HI THERE]");
    }

    #[test]
    fn a_template_that_raises_loops_or_is_not_jinja_is_an_input_error() {
        let raises = ChatTemplate::new("r.jinja", "{{ raise_exception('only system and user roles') }}");
        let e = raises.render_user("x").unwrap_err();
        assert!(e.exit_code() == 2 && e.to_string().contains("only system and user roles"), "{e}");
        let endless = ChatTemplate::new(
            "l.jinja",
            "{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}",
        );
        let e = endless.render_user("x").unwrap_err();
        assert!(e.exit_code() == 2 && e.to_string().contains("l.jinja"), "{e}");
        let broken = ChatTemplate::new("b.jinja", "{% for m in messages %}");
        let e = broken.render_user("x").unwrap_err();
        assert!(e.to_string().contains("b.jinja") && e.to_string().contains("not valid Jinja"), "{e}");
    }

    #[test]
    fn json_files_hold_the_template_as_a_string_or_named_and_strftime_formats_a_date() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("tokenizer_config.json");
        let named = serde_json::json!({"chat_template": [{"name": "tool_use", "template": "T"},
            {"name": "default", "template": "{{ eos_token }}"}], "eos_token": {"content": "<|e|>"}});
        std::fs::write(&p, named.to_string()).unwrap();
        assert_eq!(ChatTemplate::load(&p).unwrap().render_user("x").unwrap(), "<|e|>");
        std::fs::write(&p, r#"{"eos_token": "x"}"#).unwrap();
        assert!(ChatTemplate::load(&p).unwrap_err().to_string().contains("holds no chat template"));
        // 2024-07-26T13:05:09Z
        let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_721_999_109);
        assert_eq!(strftime("%d %b %Y %H:%M:%S", t), "26 Jul 2024 13:05:09");
    }
}
