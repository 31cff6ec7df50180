//! Probes: the TOML files users write, the InputSet they build, and a run's stages
//! ([`prepare`], [`backends`], [`compared`], [`explained`], [`assemble`]; [`run`] calls them in
//! order), with evidence bundles, their replay ([`verify`]), sweeps and reduction.

pub mod assemble;
pub mod backends;
pub mod bundle;
pub mod catalog;
pub mod checks;
pub mod cleanup;
pub mod compared;
pub mod explained;
pub mod pattern;
pub mod prepare;
pub mod record;
pub mod rederive;
pub mod reduce;
pub mod run;
pub mod runs;
pub mod schema;
pub mod spill;
pub mod sweep;
pub mod verify;
