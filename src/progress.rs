//! Progress bars: where every long loop (a decode, a probe's backends, explain's emulations, a
//! sweep) says how far it is. By default indicatif's: drawn on stderr when it is a terminal,
//! nothing otherwise. An embedder (the Python module) may turn them off or draw them itself.

use indicatif::{ProgressBar, ProgressDrawTarget, TermLike};
use std::sync::{Arc, RwLock};

/// Makes the terminal a bar draws on (one per bar).
pub type MakeTerm = Arc<dyn Fn() -> Box<dyn TermLike> + Send + Sync>;

/// Where bars are drawn.
#[derive(Clone, Default)]
pub enum Target {
    /// stderr when it is a terminal (indicatif's default).
    #[default]
    Auto,
    /// Nowhere.
    Hidden,
    /// On terminals the embedder makes.
    Custom(MakeTerm),
}

static TARGET: RwLock<Option<Target>> = RwLock::new(None);

/// Where every bar made from now on is drawn (process-wide).
pub fn set_target(t: Target) {
    *TARGET.write().unwrap_or_else(|e| e.into_inner()) = Some(t);
}

fn draw_target() -> ProgressDrawTarget {
    match TARGET.read().unwrap_or_else(|e| e.into_inner()).clone().unwrap_or_default() {
        Target::Auto => ProgressDrawTarget::stderr(),
        Target::Hidden => ProgressDrawTarget::hidden(),
        Target::Custom(make) => ProgressDrawTarget::term_like_with_hz(make(), 4),
    }
}

/// A bar of `len` steps drawn with `template` (indicatif's syntax) on the current target.
pub fn bar(len: u64, template: &str) -> ProgressBar {
    let b = ProgressBar::with_draw_target(Some(len), draw_target());
    b.set_style(indicatif::ProgressStyle::with_template(template).expect("template"));
    b
}

/// A spinner (no known length) on the current target.
pub fn spinner() -> ProgressBar {
    let b = ProgressBar::with_draw_target(None, draw_target());
    b.set_style(indicatif::ProgressStyle::default_spinner());
    b
}
