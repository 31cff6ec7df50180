//! A spilled run's temporary folder does not outlive it: removed when the run is interrupted
//! (SIGINT), and swept by the next spilled run when the run was killed outright (SIGKILL).
#![cfg(target_os = "linux")]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A tiny model on 96 prompt tokens and 150 decode steps, every tap: held in memory its
/// captures plan ~32 MiB, so an 8 MiB budget spills them; the run takes about a second in a
/// debug build, long enough to be stopped half-way.
fn probe(dir: &Path) -> PathBuf {
    let tokens: Vec<String> = (0..96).map(|i| ((i * 37 + 5) % 500 + 1).to_string()).collect();
    let p = dir.join("spill.toml");
    std::fs::write(
        &p,
        format!(
            "version = 1\nname = \"spill\"\nquestion = \"q?\"\ntaps = [\"*\"]\n[checkpoint]\nsynth = \"tinystories\"\n\
             hidden = 64\nlayers = 6\nheads = 4\nkv_heads = 2\nvocab = 512\n[inputs]\ntokens = [{}]\n\
             decode = 150\n[[backend]]\nname = \"device\"\nkind = \"emulator\"\nfaults = [\"shared-softmax@layers=1\"]\n",
            tokens.join(", ")
        ),
    )
    .unwrap();
    p
}

fn spawn(probe: &Path, tmp: &Path, json: &Path) -> Child {
    // Through cargo's runner where one is set (qemu-aarch64 for the arm64 tier of .ci/run).
    <Command as assert_cmd::cargo::CommandCargoExt>::cargo_bin("hefprobe")
        .unwrap()
        .env("TMPDIR", tmp)
        .args(["--max-memory", "8M", "run"])
        .arg(probe)
        .args(["--no-explain", "--report"])
        .arg(format!("json={}", json.display()))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn spill_folders(tmp: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(tmp)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with("hefprobe-spill-"))
        .collect();
    v.sort();
    v
}

/// Wait until the run has made its spill folder (with its owner file) and is still running.
fn wait_for_folder(child: &mut Child, tmp: &Path) -> PathBuf {
    let start = Instant::now();
    loop {
        assert!(child.try_wait().unwrap().is_none(), "the run ended before its spill folder was seen");
        if let Some(d) = spill_folders(tmp).into_iter().find(|d| d.join("owner").exists()) {
            return d;
        }
        assert!(start.elapsed() < Duration::from_secs(120), "no spill folder after 2 minutes");
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn signal(child: &Child, sig: i32) {
    // SAFETY: kill(2) on our own child's pid; no memory is shared.
    assert_eq!(unsafe { libc::kill(child.id() as i32, sig) }, 0);
}

/// A folder with the probe and a TMPDIR, and a spilled run in it stopped by `sig` once its
/// spill folder exists: the folder, the probe, TMPDIR and the run's child (reaped or not).
fn stopped_run(sig: i32) -> (tempfile::TempDir, PathBuf, PathBuf, PathBuf, Child) {
    let t = tempfile::tempdir().unwrap();
    let tmp = t.path().join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let p = probe(t.path());
    let mut child = spawn(&p, &tmp, &t.path().join("stopped.json"));
    let folder = wait_for_folder(&mut child, &tmp);
    signal(&child, sig);
    (t, p, tmp, folder, child)
}

#[test]
fn an_interrupted_run_removes_its_spill_folder() {
    let (_t, _, tmp, folder, child) = stopped_run(libc::SIGINT);
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{stderr}");
    assert!(!folder.exists(), "{} is still there", folder.display());
    assert!(spill_folders(&tmp).is_empty());
    assert!(
        stderr.contains(&format!("interrupted; removed the spill folder {}", folder.display())),
        "{stderr}"
    );
}

#[test]
fn a_killed_runs_spill_folder_is_swept_by_the_next_spilled_run_and_said() {
    let (t, p, tmp, left, mut child) = stopped_run(libc::SIGKILL);
    child.wait().unwrap();
    assert!(left.exists(), "SIGKILL cannot clean up: the folder stays until the next run");

    let json = t.path().join("next.json");
    let out = spawn(&p, &tmp, &json).wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(!left.exists(), "{} was not swept", left.display());
    assert!(spill_folders(&tmp).is_empty(), "the next run's own folder is gone too");
    let report: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let notes: Vec<&str> = report["notes"].as_array().unwrap().iter().filter_map(|n| n.as_str()).collect();
    let said = "removed 1 spill folder(s) left by killed runs on this host";
    assert!(notes.iter().any(|n| n.contains(said) && n.contains(&left.display().to_string())), "{notes:?}");
}
