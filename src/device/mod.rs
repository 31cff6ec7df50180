//! Devices: what HailoRT's InferModel gives, behind one trait, and the LLM driver that feeds
//! a HEF exactly as HailoRT's genai server does.

pub mod backend;
