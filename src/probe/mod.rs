//! Probes: the TOML files users write, and the InputSet they build.

pub mod bundle;
pub mod catalog;
pub mod cleanup;
pub mod reduce;
pub mod run;
pub mod schema;
pub mod spill;
pub mod sweep;
pub mod verify;
