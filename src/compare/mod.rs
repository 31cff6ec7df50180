//! Comparison: pure functions from two captures to rows of figures, verdicts and the
//! located first drift (the Polygraphy split: run everything first, compare second).

pub mod metrics;
pub mod thresholds;
