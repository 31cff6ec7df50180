//! HEF files: the container (header, hashes, regions), the proto subset, the plain-data model the
//! rest of hefprobe uses, hailo-config.json as genai reads it, and the structural audit and diff
//! (`report::audit` renders them).
//!
//! Everything here mirrors HailoRT v5.2.0 (see `docs/HAILO-RUNTIME.md`); each number that
//! comes from HailoRT names its source file next to it.

pub mod arch;
pub mod audit;
pub mod container;
mod container_write;
pub use container_write::{layout_resources, reseal_v3, write_v3};
mod decode;
pub mod diff;
mod encode;
pub mod finding;
pub mod llm_config;
pub mod model;
pub mod proto;
pub mod synth;
// Tests of the whole folder (writer ↔ reader, damaged files); a file's own tests sit in it or in
// `<file>_tests.rs` beside it (docs/ARCHITECTURE.md, "Tests").
#[cfg(test)]
mod robustness_tests;
#[cfg(test)]
mod roundtrip_tests;
#[cfg(test)]
mod strategy_tests;

pub use audit::{audit, audit_file, AuditReport, Expectations};
pub use diff::{diff, Difference};
pub use finding::{Finding, Severity};
pub use model::{
    CacheLayer, Driven, FormatOrder, GroupRole, Hef, LlmGroups, NetworkGroup, QuantInfo, Resource, Shape3,
    Stream,
};
