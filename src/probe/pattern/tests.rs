use super::*;

const MINIMAL: &str = r#"
version = 1
finding = 16
summary = "s"
baseline = "w8"
[generation]
tokens = 16
run = 8
[prompt]
tokens = [1, 2, 3]
[[observation]]
hidden = 288
layers = 6
outcome = "coherent"
[[observation]]
hidden = 576
layers = 6
heads = 9
kv_heads = 9
outcome = "degenerate"
[[cleared]]
cause = "depth"
"#;

#[test]
fn the_minimal_record_parses() {
    let p = Pattern::parse(MINIMAL, Path::new("r.toml")).unwrap();
    assert_eq!(p.observations.len(), 2);
    assert_eq!(p.observations[1].within(&p.generation), 16);
    assert_eq!(p.cleared[0].cause, Cause::Depth);
    assert_eq!(p.baseline.as_ref().unwrap().to_string(), "quant:w8");
}

#[test]
fn bad_records_are_refused_naming_the_file_and_key() {
    let cases = [
        ("hidden = 288", "hiden = 288", "hiden"),
        ("version = 1", "version = 2", "`version`"),
        ("tokens = 16", "tokens = 100000", "`generation.tokens`"),
        ("run = 8", "run = 1", "`generation.run`"),
        ("run = 8", "run = 17", "`generation.run`"),
        ("tokens = [1, 2, 3]", "tokens = []", "`prompt.tokens`"),
        ("hidden = 288", "hidden = 0", "`hidden`"),
        ("kv_heads = 9", "kv_heads = 4", "`kv_heads`"),
        ("heads = 9\nkv_heads = 9", "heads = 7\nkv_heads = 7", "`heads`"),
        ("outcome = \"coherent\"", "outcome = \"fine\"", "fine"),
        ("outcome = \"degenerate\"", "outcome = \"degenerate\"\nwithin = 4", "`within`"),
        ("outcome = \"coherent\"", "outcome = \"coherent\"\nwithin = 8", "`within`"),
        ("cause = \"depth\"", "cause = \"weather\"", "weather"),
        ("cause = \"depth\"", "cause = \"depth\"\n[[cleared]]\ncause = \"depth\"", "`cleared.cause`"),
        ("layers = 6\nheads", "layers = 100000\nheads", "`layers`"),
    ];
    for (from, to, says) in cases {
        assert!(MINIMAL.contains(from), "{from}");
        let text = MINIMAL.replacen(from, to, 1);
        let e = Pattern::parse(&text, Path::new("r.toml")).unwrap_err();
        assert_eq!(e.exit_code(), 2, "{to}");
        let e = e.to_string();
        assert!(e.contains("r.toml") && e.contains(says), "{to}: {e}");
    }
    let many: String =
        (0..=MAX_OBSERVATIONS).map(|_| "[[observation]]\nhidden = 64\noutcome = \"coherent\"\n").collect();
    let e = Pattern::parse(&format!("{MINIMAL}{many}"), Path::new("r.toml")).unwrap_err().to_string();
    assert!(e.contains("`observation`") && e.contains("1..=64"), "{e}");
}

#[test]
fn the_committed_record_of_finding_16_parses() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("probes/findings/16.toml");
    let p = Pattern::load(&path).unwrap();
    assert_eq!(p.finding, 16);
    assert!(p.observations.iter().any(|o| o.outcome == Outcome::Coherent && o.hidden <= 288));
    assert!(p
        .observations
        .iter()
        .any(|o| o.outcome == Outcome::Degenerate && o.hidden == 576 && o.layers == Some(6)));
    let causes: Vec<Cause> = p.cleared.iter().map(|c| c.cause).collect();
    assert_eq!(causes, [Cause::LmHeadSplit, Cause::GqaRatio, Cause::Depth]);
}
