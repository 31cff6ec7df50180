//! A served model judged token by token (docs/SERVING.md) through hailo-ollama's dialect,
//! against a loopback server written here that answers as hailo-ollama does, object for
//! object (hailo_model_zoo_genai v5.1.1 `dto/DTOs.hpp`, `controller/*`, HailoRT 5.x's
//! detokenizer): `/api/generate` streamed as chunked `application/x-ndjson`, each object ended
//! by `\r\n`; the chat template always applied to `prompt`; `temperature` 0 greedy, absent the
//! HEF's sampling; `frequency_penalty` HF's repetition penalty over the tokens generated since
//! the context was cleared, applied even when greedy, defaulting to the HEF's 1.1; a prompt that
//! extends the previous prompt and response continuing that context (penalty history
//! included); a token ending inside a UTF-8 character sent as "" and its text with the one that
//! completes it; the stop token not sent; errors as HTTP 200 `{"error": …}`. Its tokens come
//! from hefprobe's emulator: clean, the served model agrees with the reference; with a planted
//! fault, the first divergence is found and explain ranks the fault by the tokens it predicts.
//! hailo-ollama itself cannot run here (it needs a Hailo-10H), hence the stand-in.
//!
//! Then servers that misbehave, each an exit code naming it within a bounded time.

mod common;

use common::{hefprobe, small_checkpoint};
use hefprobe::backend::{collect, decoder::DecoderBackend};
use hefprobe::fault::spec::FaultSpec;
use hefprobe::inputs::{DecodeSpec, InputSet};
use hefprobe::model::chat::ChatTemplate;
use hefprobe::model::tokenizer::Tokenizer;
use hefprobe::model::Checkpoint;
use hefprobe::tap::{Key, Phase, Tap, TapSelection};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The served model's chat template: `Q: …\nA:`, simple enough that a later prompt can extend
/// an earlier prompt and its answer (hailo-ollama's cache reuse).
const TEMPLATE: &str =
    "{% for m in messages %}Q: {{ m['content'] }}{% endfor %}{% if add_generation_prompt %}\nA:{% endif %}";
const MODEL: &str = "tiny:1b";
/// The HEF's stop token (`</s>` of the synth tokenizer).
const EOS: u32 = 2;
/// hailo-ollama's default when a request sets no `frequency_penalty`: the HEF's own
/// `repetition_penalty`, HailoRT's 1.1 (`llm_server.hpp`).
const HEF_PENALTY: f32 = 1.1;

/// A tiny checkpoint whose tokenizer_config.json holds the template, with the byte-level
/// tokenizer cut to printable ASCII (97 ids: a random model's bytes above 0x7f are mostly not
/// UTF-8, which a server holds back for good; tokens_tests.rs has the held-back bytes).
fn checkpoint(dir: &Path) -> PathBuf {
    let ckpt = small_checkpoint(dir, "tiny", 97);
    let tokenizer = hefprobe::model::tokenizer::synth_tokenizer_json_within(97);
    std::fs::write(ckpt.join("tokenizer.json"), tokenizer.to_string()).unwrap();
    let config = json!({"chat_template": TEMPLATE, "bos_token": "<s>", "eos_token": "</s>"});
    std::fs::write(ckpt.join("tokenizer_config.json"), config.to_string()).unwrap();
    ckpt
}

/// What hailo-ollama's one generation context holds between requests.
#[derive(Default)]
struct Context {
    last_prompt: String,
    /// Tokens generated since the context was last cleared: HailoRT's penalty set.
    history: std::collections::BTreeSet<u32>,
}

/// A served model: the checkpoint with `faults`, and every request it was sent, with whether
/// it continued the previous context.
struct Served {
    ckpt: Checkpoint,
    tok: Tokenizer,
    faults: Vec<FaultSpec>,
    context: Mutex<Context>,
    log: Mutex<Vec<(Value, bool)>>,
}

impl Served {
    /// The logits after `ids` (the emulator's decode path, as the reference's).
    fn logits(&self, prompt: &[u32], generated: &[u32]) -> Vec<f32> {
        let mut b = DecoderBackend::emulator("served", &self.ckpt, &self.faults, None).unwrap();
        let inputs =
            InputSet { decode: DecodeSpec::Forced(generated.to_vec()), ..InputSet::new(prompt.to_vec()) };
        let run = collect(&mut b, &inputs, &TapSelection::parse(&["logits".to_string()]).unwrap(), None);
        let phase = run.record.phases.last().unwrap().0;
        let a = run.capture.get(&Key::new(phase, Tap::Logits)).unwrap();
        let flat: Vec<f32> = a.iter().copied().collect();
        flat[flat.len() - self.ckpt.config.vocab_size..].to_vec()
    }

    /// HailoRT's choice of the next token: the penalty over the history (a positive logit
    /// divided, any other multiplied), then the argmax (greedy) or, sampling, the second best.
    fn next(
        &self,
        logits: &mut [f32],
        penalty: f32,
        greedy: bool,
        history: &std::collections::BTreeSet<u32>,
    ) -> u32 {
        if penalty != 1.0 {
            for &t in history {
                let l = &mut logits[t as usize];
                *l = if *l > 0.0 { *l / penalty } else { *l * penalty };
            }
        }
        let mut order: Vec<usize> = (0..logits.len()).collect();
        order.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]).then(a.cmp(&b)));
        order[usize::from(!greedy)] as u32
    }

    /// One `/api/generate`: the pieces sent and the done reason.
    fn generate(&self, request: &Value) -> (Vec<String>, &'static str) {
        let options = &request["options"];
        let prompt =
            ChatTemplate::new("served", TEMPLATE).render_user(request["prompt"].as_str().unwrap()).unwrap();
        let greedy = options["temperature"].as_f64() == Some(0.0);
        let penalty = options["frequency_penalty"].as_f64().map_or(HEF_PENALTY, |p| p as f32);
        let max = options["num_predict"].as_u64().unwrap_or(1024) as usize;
        let mut ctx = self.context.lock().unwrap();
        let continued = prompt.starts_with(&ctx.last_prompt) && prompt.len() != ctx.last_prompt.len();
        if !continued {
            ctx.history.clear();
        }
        ctx.last_prompt = prompt.clone();
        self.log.lock().unwrap().push((request.clone(), continued));
        let ids = self.tok.encode(&prompt, false).unwrap().ids;
        let (mut generated, mut pieces, mut held) = (Vec::new(), Vec::new(), Vec::new());
        let mut reason = "length";
        for _ in 0..max {
            let mut logits = self.logits(&ids, &generated);
            let t = self.next(&mut logits, penalty, greedy, &ctx.history);
            ctx.history.insert(t);
            if t == EOS {
                reason = "stop";
                break;
            }
            generated.push(t);
            // HailoRT's detokenizer holds a token that decodes to U+FFFD back.
            held.push(t);
            let text = self.tok.decode(&held);
            if text.contains(char::REPLACEMENT_CHARACTER) {
                pieces.push(String::new());
            } else {
                pieces.push(text);
                held.clear();
            }
        }
        ctx.last_prompt += &pieces.concat();
        (pieces, reason)
    }
}

/// Read one request: its head and body.
fn read_request(stream: &TcpStream) -> Option<(String, Vec<u8>)> {
    let mut r = BufReader::new(stream);
    let mut head = String::new();
    let mut length = 0;
    loop {
        let mut line = String::new();
        if r.read_line(&mut line).ok()? == 0 {
            return None;
        }
        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            length = v.trim().parse().ok()?;
        }
        if line == "\r\n" {
            break;
        }
        head += &line;
    }
    let mut body = vec![0; length];
    r.read_exact(&mut body).ok()?;
    Some((head, body))
}

fn chunk(w: &mut TcpStream, data: &str) {
    let _ = write!(w, "{:x}\r\n{data}\r\n", data.len());
}

/// hailo-ollama's answer to one connection.
fn answer(mut s: TcpStream, served: &Served) {
    let Some((head, body)) = read_request(&s) else { return };
    let json_200 = |s: &mut TcpStream, v: Value| {
        let b = v.to_string();
        let _ = write!(
            s,
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{b}",
            b.len()
        );
    };
    if head.starts_with("GET /api/tags") {
        return json_200(&mut s, json!({"models": [{"name": MODEL, "model": MODEL, "size": 1}]}));
    }
    let request: Value = serde_json::from_slice(&body).unwrap();
    if request["model"] != MODEL {
        let m = request["model"].as_str().unwrap_or_default();
        return json_200(&mut s, json!({"error": format!("model '{m}' not found")}));
    }
    let (pieces, reason) = served.generate(&request);
    let _ = write!(
        s,
        "HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\nTransfer-Encoding: chunked\r\n\r\n"
    );
    let at = "2025-11-09T12:34:56.123456789Z";
    for p in &pieces {
        chunk(
            &mut s,
            &format!("{}\r\n", json!({"model": MODEL, "created_at": at, "response": p, "done": false})),
        );
    }
    let done = json!({"model": MODEL, "created_at": at, "response": "", "done": true, "done_reason": reason,
        "total_duration": 123456789, "eval_count": pieces.len()});
    chunk(&mut s, &format!("{done}\r\n"));
    let _ = s.write_all(b"0\r\n\r\n");
}

/// A loopback hailo-ollama serving the checkpoint at `ckpt` with `faults`.
fn serve(ckpt: &Path, faults: &[&str]) -> (String, Arc<Served>) {
    let served = Arc::new(Served {
        ckpt: Checkpoint::load(ckpt).unwrap(),
        tok: Tokenizer::load(&ckpt.join("tokenizer.json")).unwrap(),
        faults: faults.iter().map(|f| FaultSpec::parse(f).unwrap()).collect(),
        context: Mutex::default(),
        log: Mutex::default(),
    });
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let s = served.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            answer(stream, &s);
        }
    });
    (url, served)
}

/// A probe asking the served model `text`, `decode` greedy steps, ranking `faults` if any.
fn probe(dir: &Path, ckpt: &Path, text: &str, explain: &[&str]) -> PathBuf {
    let explain = if explain.is_empty() {
        String::new()
    } else {
        let list: Vec<String> = explain.iter().map(|f| format!("{f:?}")).collect();
        format!("[explain]\nfaults = [{}]\n", list.join(", "))
    };
    let p = dir.join("served.toml");
    let text = format!(
        "version = 1\nname = \"served\"\nquestion = \"Does the served model answer as the reference does?\"\n\
         taps = [\"logits\"]\n[checkpoint]\npath = {:?}\n[inputs]\ntext = {}\ndecode = 11\n\
         [compare]\nlocal = false\nlens = false\n{explain}",
        ckpt.display().to_string(),
        // A JSON string is a TOML basic string (its escapes are TOML's).
        serde_json::to_string(text).unwrap()
    );
    std::fs::write(&p, text).unwrap();
    p
}

/// `hefprobe run` against `url`: its exit code, stdout and stderr, and JSON report.
fn judge(probe: &Path, url: &str, extra: &str) -> (i32, String, Value) {
    let json = probe.with_extension("json");
    let _ = std::fs::remove_file(&json);
    let out = hefprobe()
        .args(["run"])
        .arg(probe)
        .args(["--backend", &format!("serve={url},model={MODEL}{extra}"), "--report", "terminal", "--report"])
        .arg(format!("json={}", json.display()))
        .timeout(Duration::from_secs(120))
        .output()
        .unwrap();
    let report = std::fs::read_to_string(&json).map_or(Value::Null, |t| serde_json::from_str(&t).unwrap());
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.code().unwrap_or(-1), said, report)
}

#[test]
fn a_clean_served_model_agrees_and_a_planted_fault_is_found_at_its_first_divergence() {
    let dir = tempfile::tempdir().unwrap();
    let ckpt = checkpoint(dir.path());
    let (url, clean) = serve(&ckpt, &[]);
    let p = probe(dir.path(), &ckpt, "Once upon a time", &[]);
    let (code, err, report) = judge(&p, &url, "");
    let t = &report["comparisons"][0]["tokens"];
    assert_eq!(code, 0, "{err}\n{t:#}");
    assert_eq!(t["agreement"], t["compared"], "{t:#}");
    assert!(t["compared"].as_u64().unwrap() >= 1 && t["divergence"].is_null(), "{t:#}");
    // Asked as a judge must ask hailo-ollama: greedy, no penalty, the user message as `prompt`.
    let (request, _) = clean.log.lock().unwrap()[0].clone();
    assert_eq!(request["prompt"], "Once upon a time");
    let o = &request["options"];
    assert_eq!(
        (o["temperature"].as_f64(), o["frequency_penalty"].as_f64(), o["num_predict"].as_u64()),
        (Some(0.0), Some(1.0), Some(12))
    );

    let planted = "shared-softmax@layers=0";
    let (url, _) = serve(&ckpt, &[planted]);
    let p = probe(
        dir.path(),
        &ckpt,
        "Once upon a time",
        &[planted, "cache-layout:transpose", "rope:interleaved"],
    );
    let (code, err, report) = judge(&p, &url, "");
    let t = &report["comparisons"][0]["tokens"];
    let d = &t["divergence"];
    assert!(d.is_object(), "the planted fault's tokens part from the reference's: {err}\n{t:#}\n{report:#}");
    assert_ne!(d["reference_token"], d["served_token"], "{d:#}");
    assert!(d["rank"].as_u64().unwrap() > 1 && d["gap"].as_f64().unwrap() > 0.0, "{d:#}");
    // Explain names the planted fault by the tokens it predicts: the run fails on it.
    assert_eq!(report["explain"]["best"], planted, "{:#}", report["explain"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("explain: which fault predicts the tokens"), "{err}");
    eprintln!("{err}");
}

#[test]
fn a_prompt_that_continues_another_clients_conversation_is_judged_unpenalised() {
    let dir = tempfile::tempdir().unwrap();
    let ckpt = checkpoint(dir.path());
    let (url, served) = serve(&ckpt, &[]);
    // Another client talks first, with the server's defaults (sampling, the HEF's penalty).
    let body = json!({"model": MODEL, "prompt": "Hi", "options": {"num_predict": 4}}).to_string();
    let mut s = TcpStream::connect(url.trim_start_matches("http://")).unwrap();
    write!(s, "POST /api/generate HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n{body}", body.len())
        .unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).unwrap();
    let last = served.context.lock().unwrap().last_prompt.clone();
    // The judge's prompt extends that conversation: hailo-ollama continues its context, penalty
    // history and all; only frequency_penalty 1.0 keeps the history from changing the tokens.
    let message = format!("{}!", last.strip_prefix("Q: ").unwrap());
    let p = probe(dir.path(), &ckpt, &message, &[]);
    let (code, err, report) = judge(&p, &url, "");
    assert_eq!(served.log.lock().unwrap().len(), 2, "{err}");
    assert!(served.log.lock().unwrap()[1].1, "the server continued the previous context");
    let t = &report["comparisons"][0]["tokens"];
    assert_eq!((code, &t["agreement"]), (0, &t["compared"]), "{err}\n{t:#}");
}

/// A chunked response's head.
fn head(s: &mut TcpStream, status: &str, kind: &str) {
    let _ = write!(s, "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nTransfer-Encoding: chunked\r\n\r\n");
}

/// A server that answers every connection with `reply` (after reading the request).
fn misbehaving(reply: impl Fn(&mut TcpStream) + Send + 'static) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            let _ = read_request(&stream);
            reply(&mut stream);
        }
    });
    url
}

#[test]
fn servers_that_misbehave_exit_3_or_2_naming_what_went_wrong_in_bounded_time() {
    let dir = tempfile::tempdir().unwrap();
    let ckpt = checkpoint(dir.path());
    let p = probe(dir.path(), &ckpt, "Once upon a time", &[]);
    let refused = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", l.local_addr().unwrap())
    };
    let cases: Vec<(&str, String, i32, &str)> = vec![
        ("refused connection", refused, 3, "cannot connect"),
        ("timeout", misbehaving(|_| std::thread::sleep(Duration::from_secs(30))), 3, "timeout"),
        (
            "HTTP 500",
            misbehaving(|s| {
                let _ = write!(
                    s,
                    "HTTP/1.1 500 Internal Server Error\r\nContent-Length: 21\r\n\r\nInternal Server Error"
                );
            }),
            3,
            "HTTP 500",
        ),
        (
            "an HTML error page",
            misbehaving(|s| {
                head(s, "200 OK", "text/html");
                chunk(s, "<html><body><h1>502 Bad Gateway</h1></body></html>\n");
                let _ = s.write_all(b"0\r\n\r\n");
            }),
            3,
            "is not JSON",
        ),
        (
            "malformed NDJSON",
            misbehaving(|s| {
                head(s, "200 OK", "application/x-ndjson");
                chunk(s, "{\"response\":\"a\",\"done\":false}\r\n{\"respon\r\n");
                let _ = s.write_all(b"0\r\n\r\n");
            }),
            3,
            "line 2",
        ),
        (
            "a stream that never says done",
            misbehaving(|s| {
                head(s, "200 OK", "application/x-ndjson");
                while s.write_all(b"1f\r\n{\"response\":\"a\",\"done\":false}\r\n").is_ok() {}
            }),
            3,
            "without `\"done\": true`",
        ),
        (
            "a response larger than any answer",
            misbehaving(|s| {
                let _ = write!(
                    s,
                    "HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\n\r\n{{\"response\":\""
                );
                let block = vec![b'a'; 1 << 16];
                while s.write_all(&block).is_ok() {}
            }),
            3,
            "bytes",
        ),
        (
            "an unknown model",
            misbehaving(|s| {
                let b = r#"{"error":"model 'tiny:1b' not found"}"#;
                let _ = write!(
                    s,
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{b}",
                    b.len()
                );
            }),
            2,
            "model `tiny:1b`",
        ),
    ];
    for (what, url, want, says) in cases {
        let start = Instant::now();
        let (code, err, _) = judge(&p, &url, ",timeout=1");
        let took = start.elapsed();
        assert_eq!(code, want, "{what}: {err}");
        assert!(err.contains(says) && err.contains(&url), "{what}: {err}");
        // A guard against a hang, not a speed target: every case gives up by itself.
        assert!(took < Duration::from_secs(60), "{what} took {took:?}");
    }
}

#[test]
fn a_served_model_is_a_suite_target() {
    let dir = tempfile::tempdir().unwrap();
    let ckpt = checkpoint(dir.path());
    let (url, _) = serve(&ckpt, &[]);
    let p = probe(dir.path(), &ckpt, "Once upon a time", &[]);
    let suite = dir.path().join("suite.toml");
    let text = format!(
        "version = 1\nname = \"served\"\nprobes = [\"served.toml\"]\n[[target]]\nname = \"pi\"\nkind = \"serve\"\n\
         url = \"{url}\"\napi = \"ollama\"\nmodel = \"{MODEL}\"\n[[finding]]\nid = 16\nprobe = \"served\"\n\
         expect = \"fixed\"\nmetric = {{ tap = \"tokens\", figure = \"agreement\", below = 0.5 }}\n"
    );
    std::fs::write(&suite, text).unwrap();
    assert!(p.exists());
    let json = dir.path().join("suite.json");
    let out = hefprobe()
        .args(["suite"])
        .arg(&suite)
        .arg("--report")
        .arg(format!("json={}", json.display()))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let r: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let pair = &r["pairs"][0];
    assert_eq!((pair["target"].as_str(), pair["status"].as_str()), (Some("pi"), Some("pass")), "{pair:#}");
    assert_eq!(pair["figures"]["tokens"]["agreement"], 1.0, "{pair:#}");
    assert_eq!(r["findings"][0]["status"], "fixed", "{:#}", r["findings"]);
}

#[test]
fn the_emulators_greedy_path_is_the_references() {
    // The stand-in server picks tokens from the emulator's logits one step at a time; clean, it
    // must pick the reference's greedy tokens, or the clean agreement above would prove nothing.
    let dir = tempfile::tempdir().unwrap();
    let ckpt = checkpoint(dir.path());
    let (_, served) = serve(&ckpt, &[]);
    let ids = served.tok.encode("Q: Once upon a time\nA:", false).unwrap().ids;
    let mut reference = DecoderBackend::emulator("r", &served.ckpt, &[], None).unwrap();
    let inputs = InputSet { decode: DecodeSpec::Greedy(3), ..InputSet::new(ids.clone()) };
    let run = collect(&mut reference, &inputs, &TapSelection::parse(&["logits".to_string()]).unwrap(), None);
    let mut generated: Vec<u32> = Vec::new();
    for _ in 0..4 {
        let mut l = served.logits(&ids, &generated);
        generated.push(served.next(&mut l, 1.0, true, &Default::default()));
    }
    let want: Vec<u32> = run.record.argmax[run.record.argmax.len() - 4..].to_vec();
    assert_eq!(generated, want);
    assert!(run.record.phases.iter().any(|(p, _, _)| *p == Phase::Decode(0)));
}

#[test]
fn a_bundle_of_a_served_run_carries_its_token_figures_and_verifies_against_the_server() {
    let dir = tempfile::tempdir().unwrap();
    let ckpt = checkpoint(dir.path());
    let (url, served) = serve(&ckpt, &["shared-softmax@layers=0"]);
    let p = probe(dir.path(), &ckpt, "Once upon a time", &[]);
    let bundle = dir.path().join("bundle");
    let spec = format!("serve={url},model={MODEL}");
    let out = hefprobe()
        .args(["run"])
        .arg(&p)
        .args(["--backend", &spec, "--no-explain", "--bundle"])
        .arg(&bundle)
        .output()
        .unwrap();
    assert!(out.status.code().is_some_and(|c| c <= 1), "{}", String::from_utf8_lossy(&out.stderr));
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(bundle.join("report.json")).unwrap()).unwrap();
    assert!(report["comparisons"][0]["tokens"]["divergence"].is_object(), "{report:#}");
    let out = hefprobe().args(["verify"]).arg(&bundle).output().unwrap();
    let said = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{said}");
    assert_eq!(served.log.lock().unwrap().len(), 2, "verify asked the server again");
}
