use super::*;
use std::path::Path;

const MINIMAL: &str = r#"
version = 2
finding = 16
summary = "s"
[defaults]
recipe = "w4a8"
scope = "base"
frame = 24
tokens = 16
run = 4
prompt = [1, 2, 3, 4, 5, 6, 7, 8]
[[observation]]
id = "C1"
source = "page @abc"
hidden = 288
layers = 6
outcome = "coherent"
[[observation]]
id = "D1"
source = "page @abc"
hidden = 576
layers = 6
heads = 9
kv_heads = 9
vocab = 32005
shards = [16002, 16003]
outcome = "repeats"
run = 8
from = 2
[[observation.figure]]
metric = "cosine"
shard = 0
value = 0.84
band = 0.05
[[observation.figure]]
metric = "argmax"
shard = 1
agree = true
[[cleared]]
cause = "depth"
"#;

#[test]
fn the_minimal_record_parses() {
    let p = Pattern::parse(MINIMAL, Path::new("r.toml")).unwrap();
    assert_eq!(p.observations.len(), 2);
    let d = &p.observations[1];
    assert_eq!((d.outcome, d.run, d.from), (Outcome::Repeats, Some(8), Some(2)));
    assert_eq!(d.tokens(&p.defaults), 16, "8 prompt ids and 16 tokens fill the frame of 24");
    assert_eq!(d.figures[0].at, At::Last);
    assert_eq!(p.cleared[0].cause, Cause::Depth);
    assert_eq!(p.defaults.recipe.as_ref().unwrap().to_string(), "quant:w4a8");
    assert_eq!(d.shape(), "hidden 576, layers 6, heads 9/9, vocab 32005, shards 16002 + 16003");
}

#[test]
fn bad_records_are_refused_naming_the_file_observation_and_key() {
    let cases = [
        ("hidden = 288", "hiden = 288", "hiden"),
        ("version = 2", "version = 1", "`version`"),
        ("tokens = 16", "tokens = 100000", "`defaults.tokens`"),
        ("run = 4", "run = 1", "`defaults.run`"),
        ("prompt = [1, 2, 3, 4, 5, 6, 7, 8]", "prompt = []", "`defaults.prompt`"),
        ("hidden = 288", "hidden = 0", "(C1) key `hidden`"),
        ("kv_heads = 9", "kv_heads = 4", "(D1) key `kv_heads`"),
        ("heads = 9\nkv_heads = 9", "heads = 7\nkv_heads = 7", "`heads`"),
        ("outcome = \"coherent\"", "outcome = \"fine\"", "fine"),
        ("run = 8\nfrom = 2", "run = 8\nfrom = 12", "(D1) key `run`"),
        ("outcome = \"coherent\"", "outcome = \"coherent\"\nrun = 8", "(C1) key `run`"),
        ("shards = [16002, 16003]", "shards = [16002, 16004]", "`shards`"),
        ("shard = 1", "shard = 2", "`shard`"),
        ("value = 0.84", "value = 1.84", "`band`"),
        ("band = 0.05", "band = 0", "`band`"),
        ("agree = true", "value = 0.5", "`agree`"),
        ("id = \"D1\"", "id = \"C1\"", "`observation.id`"),
        ("source = \"page @abc\"\nhidden = 576", "source = \"\"\nhidden = 576", "`id`"),
        ("cause = \"depth\"", "cause = \"weather\"", "weather"),
        ("cause = \"depth\"", "cause = \"depth\"\n[[cleared]]\ncause = \"depth\"", "`cleared.cause`"),
        ("layers = 6\nheads", "layers = 100000\nheads", "`layers`"),
        ("prompt = [1, 2, 3, 4, 5, 6, 7, 8]", "prompt = [1, 2, 3, 4, 5, 6, 7, 8, 40000]", "past the vocab"),
    ];
    for (from, to, says) in cases {
        assert!(MINIMAL.contains(from), "{from}");
        let text = MINIMAL.replacen(from, to, 1);
        let e = Pattern::parse(&text, Path::new("r.toml")).unwrap_err();
        assert_eq!(e.exit_code(), 2, "{to}");
        let e = e.to_string();
        assert!(e.contains("r.toml") && e.contains(says), "{to}: {e}");
    }
    let many: String = (0..=MAX_OBSERVATIONS)
        .map(|i| {
            format!("[[observation]]\nid = \"X{i}\"\nsource = \"s\"\nhidden = 64\noutcome = \"coherent\"\n")
        })
        .collect();
    let e = Pattern::parse(&format!("{MINIMAL}{many}"), Path::new("r.toml")).unwrap_err().to_string();
    assert!(e.contains("`observation`") && e.contains("1..=64"), "{e}");
}

#[test]
fn a_record_past_the_cost_bound_is_refused_up_front_naming_its_dearest_observation() {
    let p = Pattern::parse(MINIMAL, Path::new("r.toml")).unwrap();
    assert!(p.check_cost(45, "r.toml").is_ok(), "{:e}", p.cost(45));
    // Within every key's bound, and still hours: a 30,000-wide, 200-layer observation.
    let big = MINIMAL.replacen("hidden = 288\nlayers = 6", "hidden = 30000\nlayers = 200", 1);
    let p = Pattern::parse(&big, Path::new("r.toml")).unwrap();
    let e = p.check_cost(45, "r.toml").unwrap_err();
    assert_eq!(e.exit_code(), 2);
    let e = e.to_string();
    assert!(e.contains("r.toml") && e.contains("(C1)") && e.contains("multiply-adds"), "{e}");
}

#[test]
fn the_committed_records_parse_with_every_observation_of_the_digest() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("probes/findings");
    let p = Pattern::load(&root.join("16.toml")).unwrap();
    let ids: Vec<&str> = p.observations.iter().map(|o| o.id.as_str()).collect();
    assert_eq!(ids, ["C1", "C2", "C3", "D1", "D2", "D3", "D4", "D5", "N1"]);
    let d1 = &p.observations[3];
    assert_eq!(d1.shard_widths(), Some(vec![16002, 16003]));
    assert_eq!(d1.figures.len(), 5);
    assert_eq!(p.defaults.recipe.as_ref().unwrap().to_string(), "quant:w4a8");
    assert_eq!(p.observations[6].recipe.as_ref().unwrap().to_string(), "quant:w8a8", "D4's 8-bit weights");
    let causes: Vec<Cause> = p.cleared.iter().map(|c| c.cause).collect();
    assert_eq!(causes, [Cause::LmHeadSplit, Cause::GqaRatio, Cause::Depth]);
    // Every cleared cause comes out contradicted by the shapes on record.
    for c in causes {
        let j = judge::judge_cause(&p, c);
        assert_eq!(j.verdict, judge::Verdict::Contradicts, "{}: {:?}", j.label, j.results);
    }
    assert!(p.check_cost(45, "16.toml").is_ok(), "{:.2e}", p.cost(45));
    let q = Pattern::load(&root.join("14.toml")).unwrap();
    let q1 = &q.observations[0];
    assert_eq!((q1.hidden, q1.vocab, q1.shard_widths().map(|w| w.len())), (896, Some(151936), Some(5)));
    assert_eq!(q1.figures[1].at, At::Position(16));
    assert!(q.check_cost(45, "14.toml").is_ok(), "{:.2e}", q.cost(45));
}
