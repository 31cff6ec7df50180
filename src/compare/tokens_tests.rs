use super::*;
use crate::backend::serve::{Generation, TokenInfo};

fn tok() -> Tokenizer {
    Tokenizer::synth()
}

fn ids(t: &Tokenizer, s: &str) -> Vec<u32> {
    t.encode(s, false).unwrap().ids
}

const VOCAB: usize = 259;

/// Reference logits whose argmax at position k is `reference[k]` (logit 4), with `others`
/// (position, token, logit) set beside it and every other token at 0.
fn rows(reference: &[u32], others: &[(usize, u32, f32)]) -> Vec<Vec<f32>> {
    reference
        .iter()
        .enumerate()
        .map(|(k, &r)| {
            let mut row = vec![0f32; VOCAB];
            row[r as usize] = 4.0;
            for &(_, t, v) in others.iter().filter(|o| o.0 == k) {
                row[t as usize] = v;
            }
            row
        })
        .collect()
}

fn generation(pieces: &[&str], finish: Finish) -> Generation {
    Generation {
        text: pieces.concat(),
        tokens: pieces.iter().map(|p| TokenInfo { text: p.to_string(), id: None, top: Vec::new() }).collect(),
        finish,
        count: Some(pieces.len()),
        prompt_tokens: None,
    }
}

fn served(greedy: Generation, forced: Option<Vec<Option<Generation>>>) -> Served {
    Served {
        server: "test".into(),
        max_tokens: 6,
        greedy,
        forced,
        forced_unavailable: None,
        prompt: String::new(),
        prompt_tokens: 12,
    }
}

#[test]
fn a_served_continuation_that_agrees_throughout_passes() {
    let t = tok();
    let r = ids(&t, "hello!");
    let s = served(generation(&["h", "e", "l", "l", "o", "!"], Finish::Length), None);
    let c = compare(&rows(&r, &[]), &s, &t, &Thresholds::default());
    assert_eq!((c.agreement, c.compared, c.divergence.clone()), (6, 6, None), "{c:?}");
    assert_eq!((c.agreement_share, c.longest_run, c.reference_longest_run), (1.0, 2, 2));
    assert!(c.failures.is_empty() && c.ended.contains("all 6 tokens"), "{c:?}");
}

#[test]
fn the_first_divergence_is_found_with_the_references_view_of_the_served_token() {
    let t = tok();
    let r = ids(&t, "hello!");
    let (x, l) = (ids(&t, "x")[0], ids(&t, "l")[0]);
    // At position 2 the reference's top-1 `l` (4) beats `x` (1): a gap of 3, rank 2.
    let s = served(generation(&["h", "e", "x", "x", "x", "x"], Finish::Length), None);
    let c = compare(&rows(&r, &[(2, x, 1.0)]), &s, &t, &Thresholds::default());
    let d = c.divergence.clone().unwrap();
    assert_eq!(
        (c.agreement, c.compared, d.position, d.reference_token, d.served_token),
        (2, 3, 2, l, Some(x))
    );
    assert_eq!((d.rank, d.how.as_str(), d.near_tie), (2, "its own piece", false));
    assert!((d.gap - 3.0).abs() < 1e-9 && (d.margin - 3.0).abs() < 1e-9, "{d:?}");
    let p = crate::compare::metrics::log_softmax(&rows(&r, &[(2, x, 1.0)])[2]);
    assert!((d.logprob - p[x as usize]).abs() < 1e-12);
    // A confident token lost: the default token_gap bound (1 nat) fails.
    assert_eq!(c.failures.iter().map(|f| f.metric.as_str()).collect::<Vec<_>>(), vec!["token_gap"]);
    assert_eq!(c.longest_run, 4);
    // The same parting at a near-tie (x at 3.5) is benign.
    let c = compare(&rows(&r, &[(2, x, 3.5)]), &s, &t, &Thresholds::default());
    assert!(c.divergence.unwrap().near_tie && c.failures.is_empty());
    // A bound on agreement fails it.
    let mut th = Thresholds::default();
    th.add_cli("tokens:agreement=0.9").unwrap();
    let c = compare(&rows(&r, &[(2, x, 3.5)]), &s, &t, &th);
    assert_eq!(c.failures[0].metric, "agreement");
}

#[test]
fn a_stop_where_the_reference_ends_its_answer_is_agreement_and_an_early_stop_is_not() {
    let t = tok();
    let mut r = ids(&t, "ok");
    r.extend([2, ids(&t, "z")[0]]); // `</s>`, then the reference goes on past its end
    let s = served(generation(&["o", "k"], Finish::Stop), None);
    let c = compare(&rows(&r, &[]), &s, &t, &Thresholds::default());
    assert_eq!((c.agreement, c.compared, c.divergence.clone()), (3, 3, None), "{c:?}");
    assert!(c.ended.contains("both ended"), "{}", c.ended);
    let s = served(generation(&["o"], Finish::Stop), None);
    let c = compare(&rows(&r, &[(1, 2, 2.0)]), &s, &t, &Thresholds::default());
    let d = c.divergence.unwrap();
    assert_eq!((d.position, d.served_token, d.served_text.as_str()), (1, None, "(end)"));
    // Scored as the reference's likeliest special token (`</s>` at 2): a gap of 2.
    assert!((d.gap - 2.0).abs() < 1e-9, "{d:?}");
}

#[test]
fn bytes_held_back_for_an_incomplete_character_agree_and_a_wrong_one_parts_at_its_first_byte() {
    let t = tok();
    let r = ids(&t, "aé!");
    assert_eq!(r.len(), 4, "é is two byte tokens");
    // hailo-ollama sends "" for the first byte of é and "é" with the second.
    let s = served(generation(&["a", "", "é", "!"], Finish::Length), None);
    let c = compare(&rows(&r, &[]), &s, &t, &Thresholds::default());
    assert_eq!((c.agreement, c.divergence.clone()), (4, None), "{c:?}");
    // è shares é's first byte: they part at that byte (position 1), not at the second.
    let s = served(generation(&["a", "", "è", "!"], Finish::Length), None);
    let c = compare(&rows(&r, &[]), &s, &t, &Thresholds::default());
    let d = c.divergence.unwrap();
    assert_eq!((c.agreement, d.position, d.how.as_str()), (1, 1, "retokenized"), "{d:?}");
    assert!(c.notes.iter().any(|n| n.contains("retokenized")), "{:?}", c.notes);
}

#[test]
fn one_token_continuations_and_logprobs_give_forced_agreement_kld_and_same_top1() {
    let t = tok();
    let r = ids(&t, "abc");
    let x = ids(&t, "x")[0];
    let one = |s: &str, top: Vec<(TokenRef, f64)>| {
        let mut g = generation(&[s], Finish::Length);
        g.tokens[0].top = top;
        Some(g)
    };
    let rs = rows(&r, &[(1, x, 3.0)]);
    let lp = |k: usize| crate::compare::metrics::log_softmax(&rs[k]);
    // Position 0: the server's top-2 is the reference's exactly: KL over the rest only.
    let exact =
        vec![(TokenRef::Id(r[0]), lp(0)[r[0] as usize]), (TokenRef::Text("x".into()), lp(0)[x as usize])];
    // Position 1: the server prefers x (−0.1) over b (−2.5): a miss at a gap of 1.
    let flipped = vec![(TokenRef::Id(x), -0.1), (TokenRef::Id(r[1]), -2.5)];
    let forced = vec![one("a", exact), one("x", flipped), None];
    let s = served(generation(&["a", "x"], Finish::Length), Some(forced));
    let c = compare(&rs, &s, &t, &Thresholds::default());
    let f = c.forced.clone().unwrap();
    assert_eq!((f.positions, f.agreed, f.skipped, f.misses.len()), (2, 1, 1, 1), "{f:?}");
    assert!(f.misses[0].near_tie && (f.misses[0].gap - 1.0).abs() < 1e-9);
    let k = c.kld.clone().unwrap();
    assert_eq!((k.positions, k.same_top1, k.top_n), (2, 0.5, 2), "{k:?}");
    // Position 0 matches the reference on its top two: KL 0. Position 1 by hand.
    let p1 = lp(1);
    let (pb, px) = (p1[r[1] as usize].exp(), p1[x as usize].exp());
    let (qb, qx) = ((-2.5f64).exp(), (-0.1f64).exp());
    let rest = 1.0 - pb - px;
    let want = pb * (pb / qb).ln() + px * (px / qx).ln() + rest * (rest / (1.0 - qb - qx)).ln();
    assert!((k.mean - want / 2.0).abs() < 1e-9, "{} vs {}", k.mean, want / 2.0);
    assert_eq!(value(Metric::SameTop1, &c), Some(0.5));
    assert_eq!(value(Metric::Cosine, &c), None);
}

#[test]
fn the_servers_ids_decide_where_it_gives_them() {
    let t = tok();
    let r = ids(&t, "ab");
    let mut g = generation(&["a", "b"], Finish::Length);
    // The same text, but the server says its second token was another id.
    g.tokens[0].id = Some(r[0]);
    g.tokens[1].id = Some(7);
    let c = compare(&rows(&r, &[]), &served(g, None), &t, &Thresholds::default());
    let d = c.divergence.unwrap();
    assert_eq!((c.agreement, d.served_token, d.how.as_str()), (1, Some(7), "the server's id"));
}
