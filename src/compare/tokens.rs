//! Token-level figures of a served model against the reference, for a backend where only
//! tokens come back (docs/SERVING.md): how long its greedy continuation agrees with the
//! reference's, where it first parts and how confident the reference was of the token it lost
//! (its top-1 margin, the served token's rank, log-probability and gap to the top-1: a token
//! within the `token_gap` bound of the top-1 is a near-tie, benign; beyond it, a confident
//! token lost, drift), the longest run of one repeated token (finding 16's signature), the
//! agreement of one-token continuations of the reference's own prefixes (each a fresh prefill:
//! they exercise the server's prefill only), and with the server's top log-probabilities the
//! mean KL divergence and the share of positions with the same top-1, as llama.cpp's
//! `--kl-divergence` reports them ("Mean KLD", "Same top p"; tools/perplexity/perplexity.cpp).
//!
//! A server returns text; it is turned back into the checkpoint's token ids here, and where that
//! is ambiguous (pieces holding several tokens, retokenized text whose ids are not the
//! reference's) the comparison says so in its notes.

use super::row::Failure;
use super::thresholds::{Metric, Thresholds};
use crate::backend::serve::{Finish, Generation, Served, TokenRef};
use crate::capture::Store;
use crate::error::Result;
use crate::model::tokenizer::Tokenizer;
use crate::tap::{Key, Phase, Tap};
use serde::Serialize;

pub use super::thresholds::{DEFAULT_TOKEN_GAP, TOKENS};

/// Where the served continuation first parts from the reference's (or a one-token
/// continuation misses), with what the reference thought of the token the server chose.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Divergence {
    /// Position in the continuation (0: the first generated token).
    pub position: usize,
    pub reference_token: u32,
    pub reference_text: String,
    /// The served token; None where the server ended its generation there.
    pub served_token: Option<u32>,
    pub served_text: String,
    /// How the served token's id was found: the server's id, its own piece, retokenized text.
    pub how: String,
    /// The reference's top-1 minus top-2 logit there.
    pub margin: f64,
    /// The reference's top-1 logit minus the served token's (for an end of generation, its
    /// likeliest special token's).
    pub gap: f64,
    /// The served token's rank under the reference (1: its top-1).
    pub rank: usize,
    /// The served token's log-probability under the reference.
    pub logprob: f64,
    /// Within the `token_gap` bound: a near-tie, benign.
    pub near_tie: bool,
}

/// One-token continuations of the reference's own prefixes.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Forced {
    /// Positions judged, and of them those where the served token is the reference's.
    pub positions: usize,
    pub agreed: usize,
    pub share: f64,
    /// Positions whose prefix could not be sent as text or whose answer held no whole token.
    pub skipped: usize,
    pub misses: Vec<Divergence>,
}

/// Mean KL divergence and same top-1 over the positions whose context is the reference's own.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Kld {
    pub positions: usize,
    pub mean: f64,
    pub max: f64,
    pub same_top1: f64,
    /// The most log-probabilities the server gave per position (the rest is one bucket).
    pub top_n: usize,
}

/// A served model against the reference, token by token.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct TokenComparison {
    pub server: String,
    /// Reference tokens compared (up to the one both stopped on, or what the server returned).
    pub compared: usize,
    /// The greedy continuations agree on this many tokens before they part.
    pub agreement: usize,
    pub agreement_share: f64,
    pub divergence: Option<Divergence>,
    /// How the comparison ended, in words.
    pub ended: String,
    /// The served continuation as the checkpoint's ids, and its longest run of one token.
    pub served_tokens: Vec<u32>,
    pub served_text: String,
    /// The reference's continuation over the tokens compared.
    pub reference_text: String,
    pub longest_run: usize,
    pub reference_longest_run: usize,
    pub forced: Option<Forced>,
    pub kld: Option<Kld>,
    /// Where turning text back into ids was ambiguous, what could not be measured, and why.
    pub notes: Vec<String>,
    pub failures: Vec<Failure>,
}

impl TokenComparison {
    /// The most confident reference token the server lost, in logits: the greedy divergence's
    /// gap and every one-token continuation's miss.
    pub fn token_gap(&self) -> Option<f64> {
        let misses = self.forced.iter().flat_map(|f| &f.misses);
        self.divergence.iter().chain(misses).map(|d| d.gap).reduce(f64::max)
    }
}

/// `served` with every token's text decoded from its id where it came without one (a device's
/// own greedy tokens are ids only), and the generation's text the decoded whole.
pub fn with_texts(served: &Served, tok: &Tokenizer) -> Served {
    let mut s = served.clone();
    let fill = |g: &mut Generation| {
        for t in &mut g.tokens {
            if let (Some(id), true) = (t.id, t.text.is_empty()) {
                t.text = tok.decode(&[id]);
            }
        }
        if g.text.is_empty() {
            let ids: Vec<u32> = g.tokens.iter().filter_map(|t| t.id).collect();
            g.text = tok.decode(&ids);
        }
    };
    fill(&mut s.greedy);
    s.forced.iter_mut().flatten().flatten().for_each(fill);
    s
}

/// Longest run of one repeated token.
pub fn longest_run(tokens: &[u32]) -> usize {
    let (mut best, mut run) = (0, 0);
    for (i, t) in tokens.iter().enumerate() {
        run = if i > 0 && tokens[i - 1] == *t { run + 1 } else { 1 };
        best = best.max(run);
    }
    best
}

/// A token metric's value on a comparison (None: not measured, e.g. KLD without logprobs).
pub fn value(metric: Metric, t: &TokenComparison) -> Option<f64> {
    match metric {
        Metric::Agreement => Some(t.agreement_share),
        Metric::ForcedAgreement => t.forced.as_ref().filter(|f| f.positions > 0).map(|f| f.share),
        Metric::SameTop1 => t.kld.as_ref().map(|k| k.same_top1),
        Metric::Kld => t.kld.as_ref().map(|k| k.mean),
        Metric::TokenGap => t.token_gap(),
        Metric::RepeatRun => Some(t.longest_run as f64),
        _ => None,
    }
}

/// The reference's logits at each position of its continuation: the last prompt row, then
/// each decode step's (position k predicts generated token k).
pub fn reference_rows(reference: &dyn Store, phases: &[Phase]) -> Result<Vec<Vec<f32>>> {
    let mut rows = Vec::new();
    let last_prefill = phases.iter().rev().find(|p| !p.is_decode());
    for phase in last_prefill.into_iter().chain(phases.iter().filter(|p| p.is_decode())) {
        let Some(a) = reference.get(&Key::new(*phase, Tap::Logits))? else { continue };
        let vocab = a.shape().last().copied().unwrap_or(0).max(1);
        let flat: Vec<f32> = a.iter().copied().collect();
        rows.push(flat[flat.len().saturating_sub(vocab)..].to_vec());
    }
    Ok(rows)
}

/// Compare `served` with the reference whose logits at each position are `rows` (its greedy
/// tokens their argmax), judged by `thresholds`' bounds on [`TOKENS`].
pub fn compare(
    rows: &[Vec<f32>],
    served: &Served,
    tok: &Tokenizer,
    thresholds: &Thresholds,
) -> TokenComparison {
    let reference: Vec<u32> = rows.iter().map(|r| crate::model::decoder::argmax(r) as u32).collect();
    let scorer = Scorer { rows, tok, specials: tok.special_ids() };
    let mut notes = Vec::new();
    let aligned = align(&reference, &served.greedy, tok, &mut notes);
    let (agreement, end) = (aligned.agreed, &aligned.end);
    let compared = match end {
        End::Diverged { at, .. } | End::Stopped { at } => at + 1,
        End::Ran { at } => *at,
    };
    let divergence = match end {
        End::Diverged { at, token } => Some(scorer.divergence(*at, reference[*at], token)),
        _ => None,
    };
    let served_ids = served_ids(&served.greedy, tok);
    let kld_positions = divergence.as_ref().map_or(compared, |d| d.position + 1);
    let forced = served.forced.as_ref().map(|f| scorer.forced(&reference, f, &mut notes));
    let kld = scorer.kld(served, kld_positions, &mut notes);
    let stop = reference.iter().position(|&t| tok.is_special(t)).map_or(reference.len(), |s| s + 1);
    let mut t = TokenComparison {
        server: served.server.clone(),
        compared,
        agreement,
        agreement_share: if compared == 0 { 1.0 } else { agreement as f64 / compared as f64 },
        ended: ended(end, &divergence, served.max_tokens),
        longest_run: longest_run(&served_ids),
        reference_longest_run: longest_run(&reference[..stop]),
        served_tokens: served_ids,
        served_text: served.greedy.text.clone(),
        reference_text: tok.decode(&reference[..compared.min(reference.len())]),
        divergence,
        forced,
        kld,
        notes,
        failures: Vec::new(),
    };
    t.notes.extend(served.forced_unavailable.clone());
    if let Some(n) = served.greedy.prompt_tokens.filter(|&n| n != served.prompt_tokens) {
        t.notes.push(format!(
            "the server read the prompt as {n} tokens where the reference has {}: it tokenized it otherwise (a BOS, \
             special tokens read as text), so the two models did not read the same prompt",
            served.prompt_tokens
        ));
    }
    judge(&mut t, thresholds);
    t
}

fn ended(end: &End, divergence: &Option<Divergence>, asked: usize) -> String {
    match (end, divergence) {
        (End::Stopped { at }, _) => format!("both ended their answer at token {at}"),
        (End::Ran { at }, _) if *at >= asked => format!("agree on all {asked} tokens asked for"),
        (End::Ran { at }, _) => format!("the server's text covers {at} of the {asked} tokens asked for"),
        (End::Diverged { .. }, Some(d)) if d.served_token.is_none() => {
            format!("the server ended its answer at token {} where the reference goes on", d.position)
        }
        (End::Diverged { .. }, _) => "they part".to_string(),
    }
}

/// Judge `t` on the bounds that apply to [`TOKENS`], and mark near-ties by the `token_gap` bound.
pub fn judge(t: &mut TokenComparison, thresholds: &Thresholds) {
    let bounds = thresholds.bounds_for(TOKENS);
    let tie = bounds.get(&Metric::TokenGap).map_or(DEFAULT_TOKEN_GAP, |b| b.0);
    let misses = t.forced.iter_mut().flat_map(|f| f.misses.iter_mut());
    for d in t.divergence.iter_mut().chain(misses) {
        d.near_tie = d.gap <= tie;
    }
    t.failures.clear();
    for (metric, (bound, rule)) in bounds {
        let Some(value) = value(metric, t) else { continue };
        if !metric.dir().passes(value, bound) {
            let (metric, dir) = (metric.name().to_string(), metric.dir());
            t.failures.push(Failure { metric, dir, bound, value, rule, expected: None });
        }
    }
}

/// How the two greedy continuations end.
enum End {
    /// They part at `at`: the reference's token there is not the served one.
    Diverged { at: usize, token: ServedToken },
    /// Both ended the answer: the reference's token `at` is a special token where the server
    /// stopped (or returned that token's text and stopped).
    Stopped { at: usize },
    /// The served text is used up after `at` agreeing tokens without a stop (the tokens asked
    /// for, or tokens the server held back): nothing more to compare.
    Ran { at: usize },
}

/// The served token at a divergence: its id (None: the server ended there) and text.
struct ServedToken {
    id: Option<u32>,
    text: String,
    how: String,
}

struct Aligned {
    agreed: usize,
    end: End,
}

/// Walk the reference's tokens along the served text: token k agrees while the reference's
/// text through k is a prefix of it. A token ending inside a UTF-8 character is pending until
/// the token that completes it (a server sends such bytes with the completing token): a group
/// that fails parts at its first token. With the server's ids for every token, the ids decide.
fn align(reference: &[u32], g: &Generation, tok: &Tokenizer, notes: &mut Vec<String>) -> Aligned {
    if !g.tokens.is_empty() && g.tokens.iter().all(|t| t.id.is_some()) {
        return align_ids(reference, g, tok);
    }
    let text = g.text.as_str();
    let (mut agreed, mut group) = (0, None);
    for k in 0..reference.len() {
        let through = tok.decode(&reference[..=k]);
        let pending = through.ends_with(char::REPLACEMENT_CHARACTER);
        let clean = through.trim_end_matches(char::REPLACEMENT_CHARACTER);
        if text.starts_with(clean) {
            if pending {
                group.get_or_insert(k);
            } else {
                group = None;
                agreed = k + 1;
                if tok.is_special(reference[k]) {
                    return Aligned { agreed, end: End::Stopped { at: k } };
                }
            }
            continue;
        }
        let at = group.unwrap_or(k);
        let before = tok.decode(&reference[..at]).len();
        let end = match (before >= text.len(), &g.finish) {
            (true, Finish::Stop) if tok.is_special(reference[at]) => {
                return Aligned { agreed: at + 1, end: End::Stopped { at } };
            }
            (true, Finish::Stop) => End::Diverged { at, token: ended_here() },
            (true, Finish::Length) => End::Ran { at },
            (false, _) => {
                End::Diverged { at, token: piece_at(at, text.get(before..).unwrap_or(""), g, tok, notes) }
            }
        };
        retokenized(reference, agreed, text, tok, notes);
        return Aligned { agreed, end };
    }
    if group.is_some() {
        notes.push(
            "the reference's last tokens end inside a UTF-8 character the server's text cannot show".into(),
        );
    }
    retokenized(reference, agreed, text, tok, notes);
    Aligned { agreed, end: End::Ran { at: agreed } }
}

/// With the server's ids: the common prefix decides.
fn align_ids(reference: &[u32], g: &Generation, tok: &Tokenizer) -> Aligned {
    for (k, &r) in reference.iter().enumerate() {
        match g.tokens.get(k).and_then(|t| t.id) {
            Some(id) if id == r && tok.is_special(r) => {
                return Aligned { agreed: k + 1, end: End::Stopped { at: k } }
            }
            Some(id) if id == r => continue,
            Some(id) => {
                let token = ServedToken {
                    id: Some(id),
                    text: g.tokens[k].text.clone(),
                    how: "the server's id".into(),
                };
                return Aligned { agreed: k, end: End::Diverged { at: k, token } };
            }
            None if g.finish == Finish::Stop && tok.is_special(r) => {
                return Aligned { agreed: k + 1, end: End::Stopped { at: k } }
            }
            None if g.finish == Finish::Stop => {
                return Aligned { agreed: k, end: End::Diverged { at: k, token: ended_here() } }
            }
            None => return Aligned { agreed: k, end: End::Ran { at: k } },
        }
    }
    Aligned { agreed: reference.len(), end: End::Ran { at: reference.len() } }
}

fn ended_here() -> ServedToken {
    ServedToken { id: None, text: String::new(), how: "the server ended its answer here".into() }
}

/// The served token where the text parts: its own piece when the server sent one token per
/// piece up to there, else the first token of the rest of the text retokenized.
fn piece_at(at: usize, rest: &str, g: &Generation, tok: &Tokenizer, notes: &mut Vec<String>) -> ServedToken {
    let one_per_piece = g.tokens.len() > at && g.tokens[..=at].iter().all(|t| !t.text.is_empty());
    if one_per_piece && rest.starts_with(g.tokens[at].text.as_str()) {
        if let Some(&[id]) = tok.encode(&g.tokens[at].text, false).ok().as_ref().map(|e| e.ids.as_slice()) {
            return ServedToken {
                id: Some(id),
                text: g.tokens[at].text.clone(),
                how: "its own piece".into(),
            };
        }
    }
    let first = tok.encode(rest, false).ok().and_then(|e| e.ids.first().copied());
    let text = first.map(|id| tok.decode(&[id])).unwrap_or_default();
    notes.push(format!(
        "the served token at {at} is the first token of the rest of its text retokenized (`{}`): the server did not \
         send it as a piece of its own, so its id is the tokenizer's reading",
        crate::error::echo(&text, 40)
    ));
    ServedToken { id: first, text, how: "retokenized".into() }
}

/// Say where the served text, retokenized, is not the reference's ids over the tokens that
/// agree as text (the same text, other ids: ambiguous, not a divergence).
fn retokenized(reference: &[u32], agreed: usize, text: &str, tok: &Tokenizer, notes: &mut Vec<String>) {
    let Ok(ids) = tok.encode(text, false).map(|e| e.ids) else { return };
    let plain: Vec<u32> = reference[..agreed].iter().copied().filter(|&t| !tok.is_special(t)).collect();
    if let Some(j) = plain.iter().zip(&ids).position(|(a, b)| a != b) {
        notes.push(format!(
            "the served text retokenizes to other ids than the reference's from its token {j} on, where the text \
             still agrees: the reference's ids are kept there"
        ));
    }
}

/// The served continuation as ids: the server's, else its text retokenized.
fn served_ids(g: &Generation, tok: &Tokenizer) -> Vec<u32> {
    let ids: Option<Vec<u32>> = g.tokens.iter().map(|t| t.id).collect();
    match ids {
        Some(ids) if !ids.is_empty() => ids,
        _ => tok.encode(&g.text, false).map(|e| e.ids).unwrap_or_default(),
    }
}

/// The reference's view of served tokens.
struct Scorer<'a> {
    rows: &'a [Vec<f32>],
    tok: &'a Tokenizer,
    specials: Vec<u32>,
}

impl Scorer<'_> {
    fn divergence(&self, at: usize, reference: u32, token: &ServedToken) -> Divergence {
        let row = &self.rows[at];
        let lp = super::metrics::log_softmax(row);
        // An end of generation is scored as the reference's likeliest special token.
        let scored = token.id.or_else(|| {
            self.specials.iter().copied().max_by(|&a, &b| lp[a as usize].total_cmp(&lp[b as usize]))
        });
        let top = lp[reference as usize];
        let second = lp
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != reference as usize)
            .map(|(_, v)| *v)
            .fold(f64::NEG_INFINITY, f64::max);
        let (gap, rank, logprob) = match scored.filter(|&s| (s as usize) < lp.len()) {
            Some(s) => {
                let v = lp[s as usize];
                (top - v, 1 + lp.iter().filter(|&&x| x > v).count(), v)
            }
            None => (f64::INFINITY, lp.len(), f64::NEG_INFINITY),
        };
        Divergence {
            position: at,
            reference_token: reference,
            reference_text: self.tok.decode(&[reference]),
            served_token: token.id,
            served_text: if token.id.is_none() { "(end)".into() } else { token.text.clone() },
            how: token.how.clone(),
            margin: top - second,
            gap,
            rank,
            logprob,
            near_tie: false,
        }
    }

    /// The served token of a one-token continuation: its id, its text's, or an end.
    fn forced_token(&self, g: &Generation) -> Option<ServedToken> {
        if let Some(id) = g.tokens.first().and_then(|t| t.id) {
            return Some(ServedToken { id: Some(id), text: g.text.clone(), how: "the server's id".into() });
        }
        if g.text.is_empty() {
            return (g.finish == Finish::Stop).then(ended_here);
        }
        let id = self.tok.encode(&g.text, false).ok()?.ids.first().copied()?;
        Some(ServedToken { id: Some(id), text: g.text.clone(), how: "its text".into() })
    }

    fn forced(&self, reference: &[u32], answers: &[Option<Generation>], notes: &mut Vec<String>) -> Forced {
        let (mut positions, mut agreed, mut skipped, mut misses) = (0, 0, 0, Vec::new());
        for (k, answer) in answers.iter().enumerate().take(reference.len()) {
            let Some(token) = answer.as_ref().and_then(|g| self.forced_token(g)) else {
                skipped += 1;
                continue;
            };
            positions += 1;
            let stop = token.id.is_none() && self.tok.is_special(reference[k]);
            if stop || token.id == Some(reference[k]) {
                agreed += 1;
            } else {
                misses.push(self.divergence(k, reference[k], &token));
            }
        }
        if skipped > 0 {
            notes.push(format!(
                "{skipped} one-token continuation(s) not judged: the prefix ends inside a UTF-8 character, or the \
                 answer held no whole token"
            ));
        }
        let share = if positions == 0 { 1.0 } else { agreed as f64 / positions as f64 };
        Forced { positions, agreed, share, skipped, misses }
    }

    /// KL(reference ‖ server) and same top-1 at every position whose context is the
    /// reference's own: the greedy run's up to `greedy` (its first divergence, included),
    /// then the one-token continuations'. The server gives its top N: the rest of both
    /// distributions is one bucket, so this is llama.cpp's KLD over the coarser distribution,
    /// a lower bound of it (exact when the server's tail has the reference's shape).
    fn kld(&self, served: &Served, greedy: usize, notes: &mut Vec<String>) -> Option<Kld> {
        let forced = |k: usize| {
            let g = served.forced.as_ref()?.get(k)?.as_ref()?;
            g.tokens.first().map(|t| &t.top).filter(|t| !t.is_empty())
        };
        let greedy_top =
            |k: usize| served.greedy.tokens.get(k).map(|t| &t.top).filter(|t| !t.is_empty() && k < greedy);
        let tops: Vec<Option<&Vec<(TokenRef, f64)>>> =
            (0..self.rows.len()).map(|k| greedy_top(k).or_else(|| forced(k))).collect();
        let (mut kl, mut same, mut top_n, mut unmapped) = (Vec::new(), 0, 0, 0);
        for (row, top) in self.rows.iter().zip(tops) {
            let Some(top) = top.filter(|t| !t.is_empty()) else { continue };
            let ids: Vec<(u32, f64)> = top.iter().filter_map(|(t, lp)| Some((self.id_of(t)?, *lp))).collect();
            unmapped += top.len() - ids.len();
            let Some(&(best, _)) = ids.iter().max_by(|a, b| a.1.total_cmp(&b.1)) else { continue };
            top_n = top_n.max(top.len());
            let p = super::metrics::log_softmax(row);
            same += usize::from(best as usize == crate::model::decoder::argmax(row));
            kl.push(bucketed_kl(&p, &ids));
        }
        if kl.is_empty() {
            return None;
        }
        if unmapped > 0 {
            notes.push(format!(
                "{unmapped} top log-probability entries name text that is not one token: left in the rest"
            ));
        }
        let n = kl.len() as f64;
        Some(Kld {
            positions: kl.len(),
            mean: kl.iter().sum::<f64>() / n,
            max: kl.iter().copied().fold(0.0, f64::max),
            same_top1: same as f64 / n,
            top_n,
        })
    }

    fn id_of(&self, t: &TokenRef) -> Option<u32> {
        match t {
            TokenRef::Id(id) => Some(*id).filter(|&i| (i as usize) < self.rows.first().map_or(0, Vec::len)),
            TokenRef::Text(text) => match self.tok.encode(text, false).ok()?.ids.as_slice() {
                [id] => Some(*id),
                _ => None,
            },
        }
    }
}

/// Σ p (ln p − ln q) over the server's entries and one bucket for the rest of both.
fn bucketed_kl(p: &[f64], q: &[(u32, f64)]) -> f64 {
    let mut seen = std::collections::BTreeSet::new();
    let (mut kl, mut p_in, mut q_in) = (0.0, 0.0, 0.0);
    for &(id, lq) in q {
        if !seen.insert(id) || id as usize >= p.len() {
            continue;
        }
        let lp = p[id as usize];
        let pp = lp.exp();
        if pp > 0.0 {
            kl += pp * (lp - lq);
        }
        p_in += pp;
        q_in += lq.exp();
    }
    let (p_rest, q_rest) = ((1.0 - p_in).max(0.0), (1.0 - q_in).max(1e-12));
    if p_rest > 1e-15 {
        kl += p_rest * (p_rest.ln() - q_rest.ln());
    }
    kl.max(0.0)
}

#[cfg(test)]
#[path = "tokens_tests.rs"]
mod tests;
