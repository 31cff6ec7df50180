//! Device diagnostics (filled in below).
