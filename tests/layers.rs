//! The house's layering (docs/ARCHITECTURE.md): an import only ever points down.
//!
//! `cli` → `suite`, `bench` → `probe`, `diagnose` → `report` → `explain` → `compare` → `backend` → `device` →
//! `fault` → `model` → `hef` → the plain types (`inputs`, `capture`, `tap`, `output`, `files`,
//! `budget`, `error`).
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
    &["output"],
    &["files", "progress"],
    &["budget"],
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

/// The files of one folder (`mod.rs`'s children) that a file's code names: `super::x` and
/// `crate::folder::x`. Test modules are left out: a test may import what it tests from anywhere.
fn sibling_imports(code: &str, folder: &str, siblings: &[String], me: &str) -> Vec<String> {
    let code: String = match code.find("#[cfg(test)]") {
        Some(i) => code[..i].to_string(),
        None => code.to_string(),
    };
    let code: String =
        code.lines().map(|l| l.split("//").next().unwrap_or("")).collect::<Vec<_>>().join("\n");
    let named = |s: &str| {
        let prefixes = [format!("super::{s}"), format!("crate::{folder}::{s}")];
        prefixes.iter().any(|p| {
            code.match_indices(p.as_str()).any(|(i, _)| {
                let next = code[i + p.len()..].chars().next();
                !next.is_some_and(|c| c.is_alphanumeric() || c == '_')
            })
        }) || code.contains("super::{") && {
            // `use super::{a, b::c}`: the names a group opens with.
            code.split("super::{").skip(1).any(|g| {
                g.split('}')
                    .next()
                    .unwrap_or("")
                    .split(',')
                    .any(|part| part.trim().split("::").next() == Some(s))
            })
        }
    };
    siblings.iter().filter(|s| *s != me && named(s)).cloned().collect()
}

#[test]
fn no_two_files_of_a_folder_import_each_other_in_a_circle() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    walk(&src, &mut files);
    let mut folders: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    for f in files.iter().filter(|f| {
        let name = f.file_name().unwrap().to_string_lossy();
        !name.ends_with("_tests.rs") && name != "tests.rs"
    }) {
        let rel = f.strip_prefix(&src).unwrap();
        let mut parts: Vec<String> = rel
            .components()
            .map(|c| c.as_os_str().to_string_lossy().trim_end_matches(".rs").to_string())
            .collect();
        if parts.last().is_some_and(|p| p == "mod") {
            parts.pop();
        }
        let Some(name) = parts.pop() else { continue };
        folders.entry(parts.join("::")).or_default().insert(name, std::fs::read_to_string(f).unwrap());
    }
    let mut circles = Vec::new();
    for (folder, files) in &folders {
        if folder.is_empty() {
            continue;
        }
        let names: Vec<String> = files.keys().cloned().collect();
        let edges: BTreeMap<&String, Vec<String>> =
            files.iter().map(|(n, code)| (n, sibling_imports(code, folder, &names, n))).collect();
        // A circle: a file reaches itself through its siblings.
        for start in &names {
            let mut seen = vec![start.clone()];
            let mut todo = edges[start].clone();
            while let Some(n) = todo.pop() {
                if n == *start {
                    circles.push(format!("src/{folder}: {start} imports itself through its siblings"));
                    break;
                }
                if !seen.contains(&n) {
                    seen.push(n.clone());
                    todo.extend(edges.get(&n).cloned().unwrap_or_default());
                }
            }
        }
    }
    assert!(circles.is_empty(), "import circles inside folders:\n{}", circles.join("\n"));
}

#[test]
fn the_circle_checker_sees_super_paths_and_groups() {
    let siblings = ["run".to_string(), "spill".to_string(), "schema".to_string()];
    let code = "use super::{spill::SpillDir, schema};\nuse crate::probe::runner::x;\n// super::run\n";
    assert_eq!(sibling_imports(code, "probe", &siblings, "cleanup"), ["spill", "schema"]);
    assert_eq!(sibling_imports("let x = crate::probe::run::f();", "probe", &siblings, "spill"), ["run"]);
}

/// Short functions where the stages of a run live, and no function that needs clippy's leave
/// to take too many arguments anywhere (group them by the stage that uses them).
#[test]
fn stage_functions_stay_short_and_take_grouped_arguments() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    walk(&src, &mut files);
    let mut wrong = Vec::new();
    for f in &files {
        let code = std::fs::read_to_string(f).unwrap();
        let rel = f.strip_prefix(&src).unwrap().display().to_string();
        if code.contains(&["allow(clippy::", "too_many_arguments)"].concat()) {
            wrong.push(format!("src/{rel}: allows too_many_arguments"));
        }
        if !["probe/", "explain/", "suite/"].iter().any(|d| rel.starts_with(d)) {
            continue;
        }
        let lines: Vec<&str> = code.lines().collect();
        for (i, l) in lines.iter().enumerate() {
            let t = l.trim_start();
            let is_fn = ["fn ", "pub fn ", "pub(crate) fn ", "pub(super) fn ", "unsafe fn "]
                .iter()
                .any(|p| t.starts_with(p));
            if !is_fn {
                continue;
            }
            let (mut depth, mut opened, mut end) = (0i32, false, i);
            for (j, body) in lines.iter().enumerate().skip(i) {
                let body = body.split("//").next().unwrap_or("");
                depth += body.matches('{').count() as i32 - body.matches('}').count() as i32;
                opened |= body.contains('{');
                if !opened && body.trim_end().ends_with(';') || opened && depth <= 0 {
                    end = j;
                    break;
                }
            }
            if end + 1 - i > 80 {
                wrong.push(format!("src/{rel}:{}: {} lines: {}", i + 1, end + 1 - i, t));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
