//! A model id (`ORG/NAME`) given as `--checkpoint` or a probe's `[checkpoint] path` resolves,
//! offline, to its snapshot in a Hugging Face hub cache laid out as huggingface_hub writes it;
//! config.json keys hefprobe does not know are accepted and shown in every output, or refused
//! with `--strict-config` / `strict_config = true`.

use assert_cmd::Command;
use predicates::prelude::*;
use std::path::{Path, PathBuf};

const SHA: &str = "0123456789abcdef0123456789abcdef01234567";
const OLD_SHA: &str = "fedcba9876543210fedcba9876543210fedcba98";

/// hefprobe with every hub-cache variable cleared, so the machine's own cache never answers.
fn hefprobe() -> Command {
    let mut c = Command::cargo_bin("hefprobe").unwrap();
    for k in ["HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME"] {
        c.env_remove(k);
    }
    c
}

/// `hub/models--TestOrg--tiny` with `refs/main` → SHA and `refs/v1` → OLD_SHA, each snapshot a
/// synthesized checkpoint whose config.json carries SmolLM2's and Unsloth's harmless keys.
fn fake_hub(hub: &Path) {
    let repo = hub.join("models--TestOrg--tiny");
    std::fs::create_dir_all(repo.join("refs")).unwrap();
    // `synth -o` creates its folder, not the folders above it.
    std::fs::create_dir_all(repo.join("snapshots")).unwrap();
    for (rev, sha) in [("main", SHA), ("v1", OLD_SHA)] {
        let snap = repo.join("snapshots").join(sha);
        Command::cargo_bin("hefprobe")
            .unwrap()
            .args(["synth", "--arch", "llama", "--hidden", "32", "--layers", "2", "--heads", "4"])
            .args(["--kv-heads", "2", "--vocab", "300", "-o"])
            .arg(&snap)
            .assert()
            .success();
        let p = snap.join("config.json");
        let mut v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
        let o = v.as_object_mut().unwrap();
        o.insert("is_llama_config".into(), true.into());
        o.insert("unsloth_version".into(), "2024.9".into());
        std::fs::write(&p, v.to_string()).unwrap();
        std::fs::write(repo.join("refs").join(rev), sha).unwrap();
    }
}

fn reference(id: &str, out: &Path) -> Command {
    let mut c = hefprobe();
    c.args(["reference", "--checkpoint", id, "--tokens", "1,2,3", "-o"]).arg(out);
    c
}

#[test]
fn an_id_resolves_through_every_cache_setting_and_revision() {
    let t = tempfile::tempdir().unwrap();
    let hub = t.path().join("home/hub");
    fake_hub(&hub);
    let out = t.path().join("cap.npz");
    let snap = |sha: &str| format!("snapshots{}{sha}", std::path::MAIN_SEPARATOR);

    // $HF_HUB_CACHE, refs/main; the unknown keys are one line of the header.
    reference("TestOrg/tiny", &out)
        .env("HF_HUB_CACHE", &hub)
        .assert()
        .success()
        .stdout(predicate::str::contains(snap(SHA)))
        .stdout(predicate::str::contains("2 keys hefprobe does not read"))
        .stdout(predicate::str::contains("`is_llama_config` = true, `unsloth_version` = \"2024.9\""));
    // $HF_HOME/hub; a branch other than main.
    reference("TestOrg/tiny", &out)
        .env("HF_HOME", t.path().join("home"))
        .args(["--revision", "v1"])
        .assert()
        .success()
        .stdout(predicate::str::contains(snap(OLD_SHA)));
    // $XDG_CACHE_HOME/huggingface/hub and ~/.cache/huggingface/hub; a full commit sha.
    let xdg = t.path().join("xdg");
    std::fs::create_dir_all(xdg.join("huggingface")).unwrap();
    copy_dir(&hub, &xdg.join("huggingface/hub"));
    reference("TestOrg/tiny", &out)
        .env("XDG_CACHE_HOME", &xdg)
        .args(["--revision", OLD_SHA])
        .assert()
        .success()
        .stdout(predicate::str::contains(snap(OLD_SHA)));
    let home = t.path().join("user");
    std::fs::create_dir_all(home.join(".cache/huggingface")).unwrap();
    copy_dir(&hub, &home.join(".cache/huggingface/hub"));
    reference("TestOrg/tiny", &out)
        .env("HOME", &home)
        .assert()
        .success()
        .stdout(predicate::str::contains(snap(SHA)));

    // --strict-config refuses the same keys, naming them.
    reference("TestOrg/tiny", &out).env("HF_HUB_CACHE", &hub).arg("--strict-config").assert().code(2).stderr(
        predicate::str::contains("`is_llama_config`").and(predicate::str::contains("`unsloth_version`")),
    );
}

#[test]
fn a_missing_id_lists_where_it_looked_and_the_download_command() {
    let t = tempfile::tempdir().unwrap();
    let hub = t.path().join("hub");
    fake_hub(&hub);
    let out = t.path().join("cap.npz");
    let refs = hub.join("models--TestOrg--absent").join("refs").join("main");
    reference("TestOrg/absent", &out)
        .env("HF_HUB_CACHE", &hub)
        .assert()
        .code(2)
        .stderr(predicate::str::contains(refs.display().to_string()))
        .stderr(predicate::str::contains("$HF_HUB_CACHE"))
        .stderr(predicate::str::contains("hf download TestOrg/absent`"))
        .stderr(predicate::str::contains("huggingface-cli download"));
    // A revision the cache does not hold: the command fetches that revision.
    reference("TestOrg/tiny", &out)
        .env("HF_HUB_CACHE", &hub)
        .args(["--revision", "v2"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("hf download TestOrg/tiny --revision v2"));
    // A ref pointing at a snapshot that is not there.
    std::fs::write(hub.join("models--TestOrg--tiny/refs/gone"), "ab".repeat(20)).unwrap();
    reference("TestOrg/tiny", &out)
        .env("HF_HUB_CACHE", &hub)
        .args(["--revision", "gone"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("ab".repeat(20)).and(predicate::str::contains("no such folder")));
    // The default location is named when no variable is set.
    reference("TestOrg/absent", &out)
        .env("HOME", t.path())
        .assert()
        .code(2)
        .stderr(predicate::str::contains(".cache/huggingface/hub"));
}

fn probe(dir: &Path, checkpoint: &str) -> PathBuf {
    let p = dir.join("p.toml");
    std::fs::write(
        &p,
        format!(
            "version = 1\nname = \"hub\"\nquestion = \"Does an id load?\"\n\n[checkpoint]\n{checkpoint}\n\n\
             [inputs]\ntokens = [1, 2, 3]\n\n[[backend]]\nkind = \"emulator\"\n"
        ),
    )
    .unwrap();
    p
}

#[test]
fn a_probe_takes_an_id_and_reports_unknown_keys_in_every_format() {
    let t = tempfile::tempdir().unwrap();
    let hub = t.path().join("hub");
    fake_hub(&hub);
    let p = probe(t.path(), "path = \"TestOrg/tiny\"");
    let (md, json) = (t.path().join("r.md"), t.path().join("r.json"));
    hefprobe()
        .env("HF_HUB_CACHE", &hub)
        .arg("run")
        .arg(&p)
        .arg("--report")
        .arg("terminal")
        .arg("--report")
        .arg(format!("md={}", md.display()))
        .arg("--report")
        .arg(format!("json={}", json.display()))
        .assert()
        .success()
        .stdout(
            predicate::str::contains(SHA).and(predicate::str::contains("`unsloth_version` = \"2024.9\"")),
        );
    let md = std::fs::read_to_string(md).unwrap();
    assert!(md.contains("config unknown key") && md.contains("`is_llama_config`"), "{md}");
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(json).unwrap()).unwrap();
    let keys: Vec<&str> =
        v["config"]["unknown_keys"].as_array().unwrap().iter().map(|k| k["key"].as_str().unwrap()).collect();
    assert_eq!(keys, ["is_llama_config", "unsloth_version"]);

    // strict_config = true refuses them; a revision the cache lacks is named.
    let p = probe(t.path(), "path = \"TestOrg/tiny\"\nstrict_config = true");
    hefprobe()
        .env("HF_HUB_CACHE", &hub)
        .arg("run")
        .arg(&p)
        .assert()
        .code(2)
        .stderr(predicate::str::contains("strict config").and(predicate::str::contains("`unsloth_version`")));
    let p = probe(t.path(), "path = \"TestOrg/tiny\"\nrevision = \"v9\"");
    hefprobe()
        .env("HF_HUB_CACHE", &hub)
        .arg("run")
        .arg(&p)
        .assert()
        .code(2)
        .stderr(predicate::str::contains("hf download TestOrg/tiny --revision v9"));
    // A folder of that name beside the probe wins over the cache.
    let local = t.path().join("TestOrg/tiny");
    copy_dir(&hub.join("models--TestOrg--tiny/snapshots").join(OLD_SHA), &local);
    let p = probe(t.path(), "path = \"TestOrg/tiny\"");
    hefprobe()
        .env("HF_HUB_CACHE", &hub)
        .arg("run")
        .arg(&p)
        .assert()
        .success()
        .stdout(predicate::str::contains(SHA).not());
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &to.join(e.file_name()));
        } else {
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

/// `run --checkpoint ID` (with `--revision`, `--strict-config`) resolves as `reference
/// --checkpoint ID` does: the same resolver, the same refusals, and the resolved snapshot is
/// registered with the output checks (no report may be written over one of its files).
#[test]
fn run_takes_the_checkpoint_flags_reference_takes() {
    let t = tempfile::tempdir().unwrap();
    let hub = t.path().join("hub");
    fake_hub(&hub);
    let p = probe(t.path(), "synth = \"tinystories\"");
    let run = |extra: &[&str]| {
        let mut c = hefprobe();
        c.env("HF_HUB_CACHE", &hub).arg("run").arg(&p).args(["--checkpoint", "TestOrg/tiny"]).args(extra);
        c
    };
    run(&[]).assert().success().stdout(predicate::str::contains(SHA));
    run(&["--revision", "v1"]).assert().success().stdout(predicate::str::contains(OLD_SHA));
    run(&["--strict-config"]).assert().code(2).stderr(predicate::str::contains("`unsloth_version`"));
    let inside = hub.join("models--TestOrg--tiny/snapshots").join(SHA).join("config.json");
    run(&["--report", &format!("json={}", inside.display())])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("config.json"));
    assert!(
        std::fs::read_to_string(&inside).unwrap().contains("unsloth_version"),
        "the checkpoint is untouched"
    );
}
