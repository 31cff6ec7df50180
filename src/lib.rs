//! hefprobe: numerics diagnostics for LLMs compiled to Hailo-10H HEF files.
//!
//! Data flow (see docs/ARCHITECTURE.md): a probe builds one [`inputs::InputSet`], every
//! backend runs it into a [`capture::Capture`] (`PHASE/TAP` → tensor), pure functions in
//! [`compare`] turn pairs of captures into located, explained drift, and [`report`] renders it.

mod named;
pub(crate) use named::named_enum;

pub mod alloc;
pub mod backend;
pub mod bench;
pub mod budget;
pub mod capture;
pub mod cli;
pub mod compare;
pub mod console;
pub mod device;
pub mod diagnose;
pub mod error;
pub mod explain;
pub mod fault;
pub mod files;
pub mod hef;
pub mod inputs;
pub mod model;
pub mod output;
pub mod probe;
pub mod progress;
pub mod report;
pub mod request;
pub mod suite;
pub mod tap;

pub use cli::main_code;
pub use error::{Error, Result};
