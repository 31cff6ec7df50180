//! genai's Python `LLM` object (`hailo_platform.genai.LLM`, HailoRT 5.x `pyhailort.py`), or
//! anything with its `generate`/`clear_context`, as a served model: `hefprobe.run(probe,
//! llm=LLM(vdevice, hef))`. `generate(prompt, …)` takes a `str` as it is (the chat template
//! already applied by hefprobe, as for the reference) and yields one piece per token read ("" for
//! a token HailoRT's detokenizer holds back inside a UTF-8 character); after the tokens asked
//! for it yields the recovery sequence (the EOS by default) with `MAX_TOKENS_REACHED`, which is
//! not the model's answer and is dropped. Its context (KV cache, penalty history) persists
//! until `clear_context()`, which is called before every prompt; `frequency_penalty` 1.0 keeps
//! HailoRT's repetition penalty (the HEF's default, 1.1) off greedy decoding.

use hefprobe::backend::serve::{Finish, Generation, Prompt, Server, TokenInfo, SEED};
use hefprobe::error::Error;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString};

/// The most pieces read beyond those asked for before a generation is called endless.
const SLACK: usize = 8;

pub struct PyLlm {
    obj: Py<PyAny>,
    kind: String,
}

impl PyLlm {
    /// The object, checked for the methods a served model needs.
    pub fn new(obj: &Bound<'_, PyAny>) -> PyResult<Self> {
        for m in ["generate", "clear_context"] {
            if !obj.hasattr(m)? {
                return Err(crate::InputError::new_err(format!(
                    "llm=: the object has no `{m}`; give a hailo_platform.genai.LLM (or an object with its \
                     generate, clear_context)"
                )));
            }
        }
        Ok(PyLlm { obj: obj.clone().unbind(), kind: obj.get_type().name()?.to_string() })
    }

    /// The chat template the object applies to a list of messages (`prompt_template()`), if any.
    pub fn template(&self, py: Python<'_>) -> Option<String> {
        let t = self.obj.bind(py).call_method0("prompt_template").ok()?;
        t.extract::<String>().ok().filter(|t| !t.is_empty())
    }

    fn call(&self, py: Python<'_>, prompt: &Prompt, max_tokens: usize) -> PyResult<Generation> {
        let llm = self.obj.bind(py);
        llm.call_method0("clear_context")?;
        let prompt = match prompt {
            Prompt::Raw(t) => PyString::new(py, t).into_any(),
            Prompt::Message(m) => {
                let message = PyDict::new(py);
                message.set_item("role", "user")?;
                message.set_item("content", m)?;
                PyList::new(py, [message])?.into_any()
            }
        };
        let kw = PyDict::new(py);
        kw.set_item("frequency_penalty", 1.0)?;
        kw.set_item("max_generated_tokens", max_tokens)?;
        kw.set_item("do_sample", false)?;
        kw.set_item("seed", SEED)?;
        let completion = llm.call_method("generate", (prompt,), Some(&kw))?;
        let managed = completion.hasattr("__enter__")? && completion.hasattr("__exit__")?;
        let pieces_of = if managed { completion.call_method0("__enter__")? } else { completion.clone() };
        let mut pieces: Vec<String> = Vec::new();
        let read = (|| -> PyResult<()> {
            for piece in pieces_of.try_iter()? {
                pieces.push(piece?.extract()?);
                if pieces.len() > max_tokens + SLACK {
                    return Err(pyo3::exceptions::PyRuntimeError::new_err(format!(
                        "generate yielded over {} pieces for max_generated_tokens {max_tokens}",
                        max_tokens + SLACK
                    )));
                }
            }
            Ok(())
        })();
        let status = pieces_of.getattr("generation_status").map(|s| s.to_string()).unwrap_or_default();
        if managed {
            completion.call_method1("__exit__", (py.None(), py.None(), py.None()))?;
        }
        read?;
        let length = pieces.len() > max_tokens || status.contains("MAX_TOKENS");
        pieces.truncate(max_tokens);
        Ok(Generation {
            text: pieces.concat(),
            count: Some(pieces.len()),
            tokens: pieces.into_iter().map(|text| TokenInfo { text, id: None, top: Vec::new() }).collect(),
            finish: if length { Finish::Length } else { Finish::Stop },
            prompt_tokens: None,
        })
    }
}

impl Server for PyLlm {
    fn describe(&self) -> String {
        format!("the Python object {} (genai's LLM interface)", self.kind)
    }

    fn takes_raw(&self) -> bool {
        true
    }

    fn notes(&self) -> Vec<String> {
        vec!["asked greedily (do_sample False), frequency_penalty 1.0 (HailoRT's default 1.1 penalises repeats \
              even when greedy), seed 0, its context cleared before every prompt; the prompt is a str, the chat \
              template hefprobe applied to the reference's"
            .to_string()]
    }

    fn generate(&mut self, prompt: &Prompt, max_tokens: usize) -> hefprobe::Result<Generation> {
        Python::attach(|py| self.call(py, prompt, max_tokens))
            .map_err(|e| Error::Device(format!("LLM object ({}): generate: {e}", self.kind)))
    }
}
