//! The house's layering (docs/ARCHITECTURE.md): an import only ever points down.
//!
//! `cli` → `suite`, `bench` → `probe`, `diagnose` → `report` → `explain` → `compare` → `backend` → `device` →
//! `fault` → `model` → `hef` → the plain types (`inputs`, `capture`, `tap`, `budget`, `output`,
//! `error`).
//! This test reads every file under `src/` and fails on any `crate::X` path that names a
//! module above the file's own, so a staircase cannot come back unnoticed.

use std::collections::BTreeMap;
use std::path::Path;

const LAYERS: &[&[&str]] = &[
    &["cli"],
    &["suite", "bench"],
    &["probe", "diagnose"],
    &["report"],
    &["explain"],
    &["compare"],
    &["backend"],
    &["device"],
    &["fault"],
    &["model"],
    &["hef"],
    &["inputs", "capture"],
    &["tap"],
    &["budget", "output"],
    &["files"],
    &["error"],
];

fn rank(module: &str) -> Option<usize> {
    LAYERS.iter().position(|l| l.contains(&module))
}

/// Top-level modules a file's code names through `crate::`, with the line they appear on.
fn imports(code: &str) -> Vec<(String, usize)> {
    let mut out = Vec::new();
    for (n, line) in code.lines().enumerate() {
        let code = line.split("//").next().unwrap_or("");
        let mut rest = code;
        while let Some(i) = rest.find("crate::") {
            rest = &rest[i + "crate::".len()..];
            if let Some(group) = rest.strip_prefix('{') {
                // `crate::{a::x, b::{y, z}}`: every path that starts a group element.
                let body: String = group.chars().take_while(|&c| c != ';').collect();
                let mut depth = 0;
                let mut start = true;
                let mut word = String::new();
                for c in body.chars() {
                    match c {
                        '{' => depth += 1,
                        '}' => depth -= 1,
                        ',' if depth == 0 => start = true,
                        _ => {}
                    }
                    if start && (c.is_alphanumeric() || c == '_') {
                        word.push(c);
                    } else if !word.is_empty() {
                        out.push((std::mem::take(&mut word), n + 1));
                        start = false;
                    }
                    if depth < 0 {
                        break;
                    }
                }
            } else {
                let word: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                out.push((word, n + 1));
            }
        }
    }
    out
}

fn walk(dir: &Path, files: &mut Vec<std::path::PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            walk(&p, files);
        } else if p.extension().is_some_and(|x| x == "rs") {
            files.push(p);
        }
    }
}

#[test]
fn imports_only_point_down() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    walk(&src, &mut files);
    let mut wrong = Vec::new();
    let mut edges: BTreeMap<(String, String), usize> = BTreeMap::new();
    for f in &files {
        let rel = f.strip_prefix(&src).unwrap();
        let top = rel
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy()
            .trim_end_matches(".rs")
            .to_string();
        if top == "lib" || top == "main" {
            continue;
        }
        let from = rank(&top)
            .unwrap_or_else(|| panic!("src/{} is in no layer; add `{top}` to LAYERS", rel.display()));
        let code = std::fs::read_to_string(f).unwrap();
        for (module, line) in imports(&code) {
            let module = match module.as_str() {
                "Error" | "Result" => "error".to_string(),
                _ => module,
            };
            if module == top {
                continue;
            }
            let Some(to) = rank(&module) else { continue };
            *edges.entry((top.clone(), module.clone())).or_default() += 1;
            if to < from {
                wrong.push(format!(
                    "src/{}:{line}: `{top}` imports `{module}`, a higher layer",
                    rel.display()
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "imports that run back up the layers:\n{}", wrong.join("\n"));
    // Same-layer modules (inputs, capture) may not import each other both ways.
    for (a, b) in edges.keys() {
        assert!(!edges.contains_key(&(b.clone(), a.clone())), "`{a}` and `{b}` import each other");
    }
}

#[test]
fn the_checker_sees_grouped_and_plain_paths() {
    let code = "use crate::{compare::x, model::{a, b}};\nlet y = crate::report::f(); // crate::cli::no\n";
    let found: Vec<String> = imports(code).into_iter().map(|(m, _)| m).collect();
    assert_eq!(found, vec!["compare", "model", "report"]);
}
