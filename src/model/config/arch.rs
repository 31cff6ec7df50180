//! The architectures hefprobe reads (`model_type`) and their transformers classes.

crate::named_enum! {
    #[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
    #[serde(rename_all = "lowercase")]
    pub enum Arch {
        Llama = "llama",
        Mistral = "mistral",
        Qwen2 = "qwen2",
        Qwen3 = "qwen3",
    }
}

impl Arch {
    /// The HF class name written in `architectures`.
    pub fn hf_class(self) -> &'static str {
        match self {
            Arch::Llama => "LlamaForCausalLM",
            Arch::Mistral => "MistralForCausalLM",
            Arch::Qwen2 => "Qwen2ForCausalLM",
            Arch::Qwen3 => "Qwen3ForCausalLM",
        }
    }

    /// The transformers configuration class that reads config.json.
    pub fn hf_config_class(self) -> &'static str {
        match self {
            Arch::Llama => "LlamaConfig",
            Arch::Mistral => "MistralConfig",
            Arch::Qwen2 => "Qwen2Config",
            Arch::Qwen3 => "Qwen3Config",
        }
    }
}
