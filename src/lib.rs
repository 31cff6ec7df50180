//! hefprobe: numerics diagnostics for LLMs compiled to Hailo-10H HEF files.
//!
//! Data flow (see docs/ARCHITECTURE.md): a probe builds one [`inputs::InputSet`], every
//! backend runs it into a [`capture::Capture`] (`PHASE/TAP` → tensor), pure functions in
//! [`compare`] turn pairs of captures into located, explained drift, and [`report`] renders it.

/// An enum whose variants each have one name (what files, flags and reports spell): the enum
/// as declared, `ALL` in declaration order, `name()` and its inverse `from_name()`.
macro_rules! named_enum {
    ($(#[$meta:meta])* $vis:vis enum $enum:ident {
        $($(#[$vmeta:meta])* $variant:ident = $name:literal,)+
    }) => {
        $(#[$meta])*
        $vis enum $enum { $($(#[$vmeta])* $variant,)+ }

        impl $enum {
            pub const ALL: [$enum; [$($name),+].len()] = [$($enum::$variant),+];

            pub fn name(self) -> &'static str {
                match self { $($enum::$variant => $name,)+ }
            }

            pub fn from_name(s: &str) -> Option<$enum> {
                Self::ALL.into_iter().find(|v| v.name() == s)
            }
        }
    };
}
pub(crate) use named_enum;

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
