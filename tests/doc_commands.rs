//! The docs are tests: every shell block of README.md and docs/*.md is checked against the
//! hefprobe of this build, as docs/EXAMPLES.md states (the placeholders' preamble and the
//! marking convention live there, for the writers of the docs).
//!
//! - Every block: `bash -n` (syntax), and every `hefprobe` command it would run (each loop turn,
//!   each side of `&&`; `cargo run ... --` is hefprobe) parsed by the command line itself, so a
//!   renamed or removed flag, a missing argument or an unknown command fails here.
//! - A block marked `run` (the default) also runs, in one folder the preamble made, with
//!   `hefprobe` this build's binary: each command must exit as its line says (`# exit N`,
//!   default 0), print what its comment quotes (`"..."`), and be reached (a `&&` after a command
//!   that failed is a broken example); a `<!-- regen:NAME -->` block right after it is output it
//!   must print, line for line.
//! - A block marked `parse: WHY` (a Hailo device, a real downloaded model, minutes of work) is
//!   checked for syntax and flags only. A block marked `preamble` runs first.

use clap::Parser;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

fn repo(p: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(p)
}

#[derive(Debug, Clone, PartialEq)]
enum Mode {
    Run,
    Preamble,
    Parse(String),
}

#[derive(Debug, Clone)]
struct Block {
    /// `README.md:91`: the document and the line of the opening fence.
    at: String,
    mode: Mode,
    text: String,
    /// The lines of a `<!-- regen:NAME -->` block that follows this one before any other block.
    shown: Option<Vec<String>>,
}

/// The README and every guide under docs/.
fn documents() -> Vec<PathBuf> {
    let mut docs = vec![repo("README.md")];
    let mut guides: Vec<PathBuf> = std::fs::read_dir(repo("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    guides.sort();
    docs.extend(guides);
    docs
}

/// The marker on the line before a fence: `<!-- doc-test: MODE -->` or `<!-- doc-test: MODE: WHY -->`.
fn marker(line: &str) -> Option<Mode> {
    let inner = line.trim().strip_prefix("<!-- doc-test:")?.strip_suffix("-->")?.trim();
    let (mode, why) = inner.split_once(':').map_or((inner, ""), |(m, w)| (m.trim(), w.trim()));
    match mode {
        "run" => Some(Mode::Run),
        "preamble" => Some(Mode::Preamble),
        "parse" => {
            assert!(!why.is_empty(), "`{line}`: say why the block only parses (`parse: needs a Hailo-10H`)");
            Some(Mode::Parse(why.to_string()))
        }
        other => panic!("`{line}`: doc-test mode `{other}` is none of run, parse, preamble"),
    }
}

/// Every shell block (```sh, ```bash) of every document, with its mode and the output shown after it.
fn blocks() -> Vec<Block> {
    let mut out: Vec<Block> = Vec::new();
    for doc in documents() {
        let name = doc.strip_prefix(repo("")).unwrap().display().to_string();
        let text = std::fs::read_to_string(&doc).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        let mut i = 0;
        let mut last_shell: Option<usize> = None;
        while i < lines.len() {
            let Some(lang) = lines[i].strip_prefix("```") else {
                if lines[i].starts_with("<!-- regen:") {
                    // The output block after it, if a shell block came just before.
                    let body: Vec<String> = lines[i + 2..]
                        .iter()
                        .take_while(|l| !l.starts_with("```"))
                        .map(|l| l.to_string())
                        .collect();
                    if let Some(b) = last_shell.take() {
                        out[b].shown = Some(body);
                    }
                }
                i += 1;
                continue;
            };
            let start = i;
            i += 1;
            let body: Vec<&str> = lines[i..].iter().take_while(|l| !l.starts_with("```")).copied().collect();
            i += body.len() + 1;
            let lang = lang.split_whitespace().next().unwrap_or("");
            let mark = start.checked_sub(1).and_then(|p| marker(lines[p]));
            if !matches!(lang, "sh" | "bash") {
                assert!(
                    mark.is_none(),
                    "{name}:{}: a doc-test marker on a ```{lang} block; shell blocks are ```sh",
                    start + 1
                );
                assert!(
                    !(lang.is_empty() && body.first().is_some_and(|l| l.starts_with("hefprobe "))),
                    "{name}:{}: a block of commands without a language: fence it ```sh so it is tested",
                    start + 1
                );
                last_shell = None;
                continue;
            }
            out.push(Block {
                at: format!("{name}:{}", start + 1),
                mode: mark.unwrap_or(Mode::Run),
                text: body.join("\n") + "\n",
                shown: None,
            });
            last_shell = Some(out.len() - 1);
        }
    }
    out
}

/// Shell functions both passes share: `cargo run ... -- ARGS` is `hefprobe ARGS`; every other
/// cargo command (build, test, install, deb) is not run from a test.
const CARGO: &str =
    "cargo() { if [ \"$1\" = run ]; then while [ $# -gt 0 ] && [ \"$1\" != -- ]; do shift; done; \
                     shift; hefprobe \"$@\"; else return 0; fi; }\n";

/// Record one hefprobe command: the line it was called from, then each argument in hex (so any
/// byte survives), into a file of `$REC` named by when it ran.
const RECORD: &str = "record() { local f; f=$(/usr/bin/mktemp \"$REC/$(/usr/bin/date +%s%N)-XXXX\"); \
                      echo \"${BASH_LINENO[1]}\" > \"$f\"; for a in hefprobe \"$@\"; do printf '%s' \"$a\" | \
                      /usr/bin/od -An -tx1 -v | /usr/bin/tr -d ' \\n' >> \"$f\"; echo >> \"$f\"; done; echo \"$f\"; }\n";

/// One recorded command: the line it was called from, its arguments, and (run pass) its exit
/// code and output.
#[derive(Debug)]
struct Call {
    line: usize,
    argv: Vec<String>,
    rc: Option<i32>,
    output: String,
}

fn unhex(s: &str) -> String {
    let bytes: Vec<u8> =
        (0..s.len() / 2).map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap()).collect();
    String::from_utf8(bytes).unwrap()
}

fn calls(rec: &Path) -> Vec<Call> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(rec)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_none())
        .collect();
    files.sort();
    files
        .iter()
        .map(|f| {
            let text = std::fs::read_to_string(f).unwrap();
            let mut lines = text.lines();
            let line = lines.next().unwrap().parse().unwrap();
            let argv = lines.map(unhex).collect();
            let read = |ext: &str| std::fs::read_to_string(f.with_extension(ext)).ok();
            Call {
                line,
                argv,
                rc: read("rc").map(|r| r.trim().parse().unwrap()),
                output: read("out").unwrap_or_default() + &read("err").unwrap_or_default(),
            }
        })
        .collect()
}

/// Run `script` with bash in `cwd`, recording each hefprobe command into a fresh folder. `run`:
/// this build's binary runs them; otherwise nothing outside bash runs (no PATH), only the
/// commands are recorded.
fn bash(script: &str, cwd: &Path, run: bool) -> (std::process::Output, Vec<Call>) {
    let rec = tempfile::tempdir().unwrap();
    let empty = tempfile::tempdir().unwrap();
    let hefprobe = if run {
        "hefprobe() { local f; f=$(record \"$@\"); \"$HEFPROBE_BIN\" \"$@\" > \"$f.out\" 2> \"$f.err\"; local rc=$?; \
         echo $rc > \"$f.rc\"; /usr/bin/cat \"$f.out\"; /usr/bin/cat \"$f.err\" >&2; return $rc; }\n"
    } else {
        "hefprobe() { record \"$@\" > /dev/null; }\ncommand_not_found_handle() { return 0; }\n\
         seq() { /usr/bin/seq \"$@\"; }\n"
    };
    let full = format!("{RECORD}{CARGO}{hefprobe}{script}");
    let mut c = Command::new("/bin/bash");
    c.arg("-c").arg(&full).current_dir(cwd).env("REC", rec.path());
    c.env("HEFPROBE_BIN", env!("CARGO_BIN_EXE_hefprobe")).env_remove("COLUMNS");
    for v in
        ["GITHUB_STEP_SUMMARY", "CI_NODE_INDEX", "CI_NODE_TOTAL", "JOB_COMPLETION_INDEX", "HEFPROBE_PROBES"]
    {
        c.env_remove(v);
    }
    if !run {
        c.env("PATH", empty.path());
    }
    let out = c.output().unwrap();
    // The script's own lines are numbered after the functions above it.
    let offset = format!("{RECORD}{CARGO}{hefprobe}").lines().count();
    let mut calls = calls(rec.path());
    for c in &mut calls {
        c.line = c.line.saturating_sub(offset);
    }
    (out, calls)
}

/// The comment of the command on `line` (1-based in `text`), its continuation lines included.
fn comment_of(text: &str, line: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let mut first = line.saturating_sub(1).min(lines.len().saturating_sub(1));
    while first > 0 && lines[first - 1].trim_end().ends_with('\\') {
        first -= 1;
    }
    let mut last = first;
    while last + 1 < lines.len() && lines[last].trim_end().ends_with('\\') {
        last += 1;
    }
    lines[first..=last]
        .iter()
        .filter_map(|l| l.split_once(" # ").map(|(_, c)| c))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Every shell block is valid bash, and every hefprobe command in it is one the command line
/// takes as written.
#[test]
fn every_documented_command_parses() {
    let blocks = blocks();
    assert!(
        blocks.len() >= 15,
        "only {} shell blocks found: the fence pattern no longer matches",
        blocks.len()
    );
    let sandbox = tempfile::tempdir().unwrap();
    let mut commands = 0;
    for b in &blocks {
        let syntax = Command::new("/bin/bash").arg("-n").arg("-c").arg(&b.text).output().unwrap();
        assert!(
            syntax.status.success(),
            "{}: not valid bash: {}",
            b.at,
            String::from_utf8_lossy(&syntax.stderr)
        );
        let (_, calls) = bash(&b.text, sandbox.path(), false);
        for c in calls {
            commands += 1;
            if let Err(e) = hefprobe::cli::Cli::try_parse_from(&c.argv) {
                if !matches!(
                    e.kind(),
                    clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion
                ) {
                    panic!("{} line {}: `{}` does not parse:\n{e}", b.at, c.line, c.argv.join(" "));
                }
            }
        }
    }
    assert!(commands >= 40, "only {commands} hefprobe commands found in the docs");
}

/// The blocks marked `run` (and the preamble before them) run as written, exit as they say,
/// print what they quote and what the docs show after them.
#[test]
fn the_documented_commands_run_as_written() {
    let blocks = blocks();
    let sandbox = tempfile::tempdir().unwrap();
    let s = sandbox.path();
    #[cfg(unix)]
    std::os::unix::fs::symlink(repo("probes"), s.join("probes")).unwrap();
    let (preamble, rest): (Vec<&Block>, Vec<&Block>) = blocks.iter().partition(|b| b.mode == Mode::Preamble);
    assert_eq!(preamble.len(), 1, "one preamble (docs/EXAMPLES.md) makes the placeholders");
    let mut ran = 0;
    let exit = regex::Regex::new(r"\bexit (\d)\b").unwrap();
    let quoted = regex::Regex::new(r#""([^"]+)""#).unwrap();
    for b in preamble.iter().chain(rest.iter().filter(|b| b.mode == Mode::Run)) {
        for banned in ["sudo ", "apt ", "apt-get ", "pip ", "git clone", "rustup ", "curl ", "wget "] {
            assert!(
                !b.text.contains(banned),
                "{}: runs `{banned}`: mark it `<!-- doc-test: parse: WHY -->`",
                b.at
            );
        }
        let (_, expected) = bash(&b.text, s, false);
        let (out, calls) = bash(&b.text, s, true);
        let said = format!(
            "{}:\n{}\nstdout:\n{}\nstderr:\n{}",
            b.at,
            b.text,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            calls.len(),
            expected.len(),
            "{said}\n{} of {} commands reached",
            calls.len(),
            expected.len()
        );
        for c in &calls {
            ran += 1;
            let comment = comment_of(&b.text, c.line);
            let want: i32 = exit.captures(&comment).map_or(0, |m| m[1].parse().unwrap());
            assert_eq!(
                c.rc,
                Some(want),
                "{said}\n`{}` (line {}): exit {:?}, the doc says {want}",
                c.argv.join(" "),
                c.line,
                c.rc
            );
            for q in quoted.captures_iter(&comment) {
                assert!(
                    c.output.contains(&q[1]),
                    "{said}\n`{}` does not print \"{}\"",
                    c.argv.join(" "),
                    &q[1]
                );
            }
        }
        if let Some(shown) = &b.shown {
            let printed: BTreeMap<usize, &str> =
                calls.iter().enumerate().map(|(i, c)| (i, c.output.as_str())).collect();
            let all = shown.iter().all(|l| printed.values().any(|o| o.lines().any(|p| p == l)));
            assert!(
                all,
                "{said}\nthe output the doc shows after {} is not what it prints:\n{}",
                b.at,
                shown.join("\n")
            );
        }
    }
    assert!(ran >= 4, "only {ran} documented commands ran");
}
