//! The opt-in served tier: llama.cpp's server (the Python package llama-cpp-python[server]
//! 0.3.36, built from source by pip) serving SmolLM2-135M-Instruct Q4_1 on loopback, judged
//! token by token against the f32 reference of the same GGUF through the OpenAI dialect: the
//! quantized model's real drift, measured. Not part of the default `cargo test` (it needs the
//! downloaded model and a C++ build of minutes):
//!
//! ```sh
//! DIR=$(scripts/fetch-real-models.sh)
//! INSTALL_ONLY=1 scripts/served-real-model.sh "$DIR"      # the venv, once (10-25 min)
//! HEFPROBE_REAL_MODELS="$DIR" HEFPROBE_LLAMA_CPP_VENV=VENV cargo test --test served_real -- --include-ignored
//! ```
//!
//! `scripts/served-real-model.sh DIR` runs the same judgement and prints the figures
//! docs/SERVING.md quotes.

mod common;

use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

const NEEDS: &str =
    "needs HEFPROBE_REAL_MODELS=DIR (scripts/fetch-real-models.sh) and HEFPROBE_LLAMA_CPP_VENV=VENV \
                     (INSTALL_ONLY=1 scripts/served-real-model.sh DIR)";
const GGUF: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

fn env_path(name: &str) -> PathBuf {
    PathBuf::from(std::env::var_os(name).unwrap_or_else(|| panic!("{NEEDS}")))
}

/// The server process, stopped when the test ends, however it ends.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// llama-cpp-python's server on a free loopback port, once it answers.
fn start(venv: &std::path::Path, gguf: &std::path::Path) -> (Server, u16) {
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let child = Command::new(venv.join("bin/python"))
        .args([
            "-m",
            "llama_cpp.server",
            "--host",
            "127.0.0.1",
            "--port",
            &port.to_string(),
            "--n_ctx",
            "2048",
        ])
        .arg("--model")
        .arg(gguf)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("{}: {e}; {NEEDS}", venv.display()));
    let server = Server(child);
    let start = Instant::now();
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(start.elapsed() < Duration::from_secs(120), "the server did not listen within 2 minutes");
        std::thread::sleep(Duration::from_millis(500));
    }
    (server, port)
}

#[test]
#[ignore = "needs the real SmolLM2 GGUF and llama-cpp-python[server] built into a venv"]
fn llama_cpp_serving_smollm2_q4_1_is_judged_token_by_token() {
    let gguf = env_path("HEFPROBE_REAL_MODELS").join(GGUF);
    assert!(gguf.is_file(), "{} is missing: {NEEDS}", gguf.display());
    let (_server, port) = start(&env_path("HEFPROBE_LLAMA_CPP_VENV"), &gguf);
    let dir = tempfile::tempdir().unwrap();
    let (md, json) = (dir.path().join("served.md"), dir.path().join("served.json"));
    let probe = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("probes/served/greedy-answer.toml");
    let out = common::hefprobe()
        .arg("run")
        .arg(&probe)
        .arg("--checkpoint")
        .arg(&gguf)
        .args(["--backend", &format!("serve=http://127.0.0.1:{port},api=openai,logprobs=10"), "--no-explain"])
        .args(["--report", "terminal", "--report"])
        .arg(format!("markdown={}", md.display()))
        .arg("--report")
        .arg(format!("json={}", json.display()))
        .timeout(Duration::from_secs(900))
        .output()
        .unwrap();
    let terminal = String::from_utf8_lossy(&out.stdout);
    println!("{terminal}");
    assert!(matches!(out.status.code(), Some(0 | 1)), "{}", String::from_utf8_lossy(&out.stderr));
    let report: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let t = &report["comparisons"][0]["tokens"];
    let (kld, same) = (t["kld"]["mean"].as_f64().unwrap(), t["kld"]["same_top1"].as_f64().unwrap());
    // Q4_1 of a 135M model drifts, but little: llama.cpp's own KLD table puts 4-bit quants of
    // larger models at a few hundredths of a nat and ~90% same top-1.
    assert!(kld > 0.0 && kld < 0.05 && same >= 0.9, "{t:#}");
    assert!(t["agreement"].as_u64().unwrap() >= 1 && t["forced"]["share"].as_f64().unwrap() >= 0.9, "{t:#}");
    let markdown = std::fs::read_to_string(&md).unwrap();
    for shown in ["greedy agreement", "KLD (reference ‖ server)", "same top-1"] {
        assert!(terminal.contains(shown) && markdown.contains(shown), "{shown}");
    }
    if let Some(d) = t["divergence"].as_object() {
        for shown in ["first divergence", "top-1 margin", "rank"] {
            assert!(terminal.contains(shown) && markdown.contains(shown), "{shown}");
        }
        println!("first divergence: {d:?}");
    }
}
