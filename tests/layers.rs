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
    &["request"],
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
    &["error", "alloc", "console", "named"],
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

/// A file of tests only: `*_tests.rs` or a folder's `tests.rs`.
fn test_file(path: &Path) -> bool {
    let name = path.file_name().unwrap().to_string_lossy();
    name.ends_with("_tests.rs") || name == "tests.rs"
}

/// The production code of a file: every line but a top-level `#[cfg(test)]` item (the attribute,
/// any attributes after it, and the item through its closing `}` at the start of a line, or its
/// `;`). "Production lines" (docs/ARCHITECTURE.md) are these lines of every `.rs` file under
/// `src/` and `python/src/` that is not a test file ([`test_file`]).
fn production(code: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut lines = code.lines();
    while let Some(line) = lines.next() {
        if !line.starts_with("#[cfg(test)]") {
            out.push(line);
            continue;
        }
        let mut item = lines.next();
        while item.is_some_and(|l| l.starts_with("#[")) {
            item = lines.next();
        }
        if item.is_some_and(|l| !l.trim_end().ends_with(';')) {
            for l in lines.by_ref() {
                if l == "}" {
                    break;
                }
            }
        }
    }
    out
}

/// Every production file under `src/` and `python/src/`, by its path from the repository.
fn production_files() -> Vec<(String, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    walk(&root.join("src"), &mut files);
    walk(&root.join("python/src"), &mut files);
    files.sort();
    files
        .into_iter()
        .filter(|f| !test_file(f))
        .map(|f| (f.strip_prefix(root).unwrap().display().to_string(), std::fs::read_to_string(&f).unwrap()))
        .collect()
}

/// No file over 600 production lines. Prints the total (`cargo test --test layers -- --nocapture`).
#[test]
fn no_file_is_over_600_production_lines() {
    let mut total = 0;
    let mut wrong = Vec::new();
    for (rel, code) in production_files() {
        let n = production(&code).len();
        total += n;
        if n > 600 {
            wrong.push(format!("{rel}: {n} production lines"));
        }
    }
    eprintln!("production lines in src/ and python/src: {total}");
    assert!(wrong.is_empty(), "files over 600 production lines:\n{}", wrong.join("\n"));
}

#[test]
fn production_lines_leave_out_test_items_only() {
    let code = "fn a() {}\n#[cfg(test)]\nmod t;\nfn b() {}\n#[cfg(test)]\n#[path = \"x.rs\"]\nmod tests {\n    fn c() {}\n}\nfn d() {}\n";
    assert_eq!(production(code), ["fn a() {}", "fn b() {}", "fn d() {}"]);
}

/// Whether a line (trimmed) starts a function: `fn`, after any visibility and qualifiers.
fn starts_fn(line: &str) -> bool {
    let mut t = line;
    if let Some(rest) = t.strip_prefix("pub") {
        t = match rest.strip_prefix('(') {
            Some(r) => r.split_once(')').map_or("", |(_, r)| r),
            None => rest,
        }
        .trim_start();
    }
    let qualifiers = ["const ", "async ", "unsafe ", "extern \"C\" "];
    while let Some(rest) = qualifiers.iter().find_map(|q| t.strip_prefix(q)) {
        t = rest;
    }
    t.starts_with("fn ")
}

/// Every function of `code` over 80 lines, counted from its `fn` line to its closing brace:
/// (line, length, the `fn` line).
fn long_functions(code: &str) -> Vec<(usize, usize, String)> {
    let lines: Vec<&str> = code.lines().collect();
    let mut out = Vec::new();
    for (i, l) in lines.iter().enumerate() {
        let t = l.trim_start();
        if !starts_fn(t) {
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
            out.push((i + 1, end + 1 - i, t.to_string()));
        }
    }
    out
}

/// No function over 80 lines in any production file under `src/` and `python/src/` (a file of
/// tests is left out: its long tables of cases are read, not run through), and no function
/// under `src/` that needs clippy's leave to take too many arguments (group them by the step
/// that uses them).
#[test]
fn no_function_is_over_80_lines_and_none_takes_ungrouped_arguments() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    walk(&root.join("src"), &mut files);
    walk(&root.join("python/src"), &mut files);
    files.sort();
    let mut wrong = Vec::new();
    for f in &files {
        let code = std::fs::read_to_string(f).unwrap();
        let rel = f.strip_prefix(root).unwrap().display().to_string();
        // A Python function's arguments are its keyword arguments: python/src may list them.
        if rel.starts_with("src/") && code.contains(&["allow(clippy::", "too_many_arguments)"].concat()) {
            wrong.push(format!("{rel}: allows too_many_arguments"));
        }
        if test_file(f) {
            continue;
        }
        for (line, n, t) in long_functions(&code) {
            wrong.push(format!("{rel}:{line}: {n} lines: {t}"));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn the_length_checker_sees_every_kind_of_fn() {
    for head in
        ["fn f() {", "pub fn f() {", "pub(crate) fn f() {", "pub(super) unsafe fn f() {", "const fn f() {"]
    {
        let code = format!("{head}\n{}}}\n", "    x();\n".repeat(79));
        assert_eq!(long_functions(&code), [(1, 81, head.to_string())], "{head}");
        let code = format!("{head}\n{}}}\n", "    x();\n".repeat(78));
        assert!(long_functions(&code).is_empty(), "{head}");
    }
    assert!(!starts_fn("let fn_name = 1;"));
    assert!(!starts_fn("// fn f() {"));
}

/// The Python module builds the library's requests; it never names the command line's types.
#[test]
fn python_names_no_cli_item() {
    let wrong: Vec<String> = production_files()
        .into_iter()
        .filter(|(rel, _)| rel.starts_with("python/"))
        .flat_map(|(rel, code)| {
            let hits: Vec<String> = code
                .lines()
                .enumerate()
                .filter(|(_, l)| l.split("//").next().unwrap_or("").contains("cli::"))
                .map(|(n, l)| format!("{rel}:{}: {}", n + 1, l.trim()))
                .collect();
            hits
        })
        .collect();
    assert!(wrong.is_empty(), "the Python module names cli items:\n{}", wrong.join("\n"));
}

/// Whether a line dispatches on a report format: an arm, a comparison or a `matches!` of
/// `Format::X` (`FormatType::X`, a tensor's format, is another type).
fn dispatches_on_format(line: &str) -> bool {
    let code = line.split("//").next().unwrap_or("");
    let names = code
        .match_indices("Format::")
        .any(|(i, _)| !code[..i].ends_with(|c: char| c.is_alphanumeric() || c == '_'));
    names && ["=>", "==", "!=", "matches!("].iter().any(|op| code.contains(op))
}

/// Report formats are dispatched in one place, `report::deliver`'s: a command's result
/// implements `report::Document` and never matches on a format itself.
#[test]
fn no_match_on_report_formats_outside_report() {
    let wrong: Vec<String> = production_files()
        .into_iter()
        .filter(|(rel, _)| !rel.starts_with("src/report/"))
        .flat_map(|(rel, code)| {
            let hits: Vec<String> = production(&code)
                .into_iter()
                .enumerate()
                .filter(|(_, l)| dispatches_on_format(l))
                .map(|(n, l)| format!("{rel}:{}: {}", n + 1, l.trim()))
                .collect();
            hits
        })
        .collect();
    assert!(wrong.is_empty(), "report formats matched outside src/report/:\n{}", wrong.join("\n"));
}

#[test]
fn the_format_checker_sees_arms_and_tests() {
    assert!(dispatches_on_format("        Format::Json => d.json(),"));
    assert!(dispatches_on_format("    for t in targets.iter().filter(|t| t.format == Format::Svg) {"));
    assert!(!dispatches_on_format("    ReportTarget::or(t, Format::Terminal)"));
    assert!(!dispatches_on_format("        Ok(match s.format {"));
    assert!(!dispatches_on_format("        if emb.format != FormatType::Uint16 {"));
}

/// The module (path from `crate`) each production file under `src/` defines.
fn modules() -> BTreeMap<Vec<String>, String> {
    production_files()
        .into_iter()
        .filter_map(|(rel, code)| {
            let rel = rel.strip_prefix("src/")?.trim_end_matches(".rs").to_string();
            let mut parts: Vec<String> = rel.split('/').map(String::from).collect();
            if parts.last().is_some_and(|p| p == "mod") || rel == "lib" {
                parts.pop();
            }
            (rel != "main").then(|| (parts, production(&code).join("\n")))
        })
        .collect()
}

/// The paths a module's code names: `crate::a::b`, `super::a`, `self::a`, a path that starts
/// with one of its `children` (`a::f()`), and each path of a group (`crate::a::{b, c::d}`), as
/// segments from the crate root.
fn named_paths(code: &str, me: &[String], children: &[String]) -> Vec<Vec<String>> {
    let code: String =
        code.lines().map(|l| l.split("//").next().unwrap_or("")).collect::<Vec<_>>().join("\n");
    let word = |s: &str| s.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect::<String>();
    let mut out = Vec::new();
    // `super` of `a/b.rs` and of `a/b/mod.rs` alike is `a`.
    let parent = me[..me.len().saturating_sub(1)].to_vec();
    let mut roots =
        vec![("crate::".to_string(), Vec::new()), ("super::".into(), parent), ("self::".into(), me.to_vec())];
    roots.extend(children.iter().map(|c| (format!("{c}::"), [me, std::slice::from_ref(c)].concat())));
    for (root, base) in roots {
        for (i, _) in code.match_indices(root.as_str()) {
            if code[..i].ends_with(|c: char| c.is_alphanumeric() || c == '_' || c == ':' || c == '.') {
                continue;
            }
            let mut rest = &code[i + root.len()..];
            let mut path = base.clone();
            loop {
                let w = word(rest);
                if w.is_empty() {
                    break;
                }
                rest = &rest[w.len()..];
                path.push(w);
                match rest.strip_prefix("::") {
                    Some(r) => rest = r,
                    None => break,
                }
            }
            let Some(group) = rest.strip_prefix('{') else {
                out.push(path);
                continue;
            };
            let (mut depth, mut start, mut item) = (0, true, String::new());
            for c in group.chars() {
                if start && (c.is_alphanumeric() || c == '_' || c == ':' && !item.is_empty()) {
                    item.push(c);
                    continue;
                }
                if !item.is_empty() {
                    let mut p = path.clone();
                    p.extend(item.split("::").filter(|s| !s.is_empty()).map(String::from));
                    out.push(p);
                    item.clear();
                    start = false;
                }
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => start = true,
                    _ => {}
                }
            }
        }
    }
    out
}

/// A module's code without its re-exports (`pub use …;`, `pub(crate) use …;`), and the
/// re-exports alone. Declarations (`mod x;`) name no path.
fn split_reexports(code: &str) -> (String, String) {
    let (mut rest, mut reexports) = (String::new(), String::new());
    let mut tail = code;
    while let Some(i) =
        ["pub use ", "pub(crate) use ", "pub(super) use "].iter().filter_map(|p| tail.find(p)).min()
    {
        let end = tail[i..].find(';').map_or(tail.len(), |e| i + e + 1);
        rest.push_str(&tail[..i]);
        reexports.push_str(&tail[i..end]);
        reexports.push('\n');
        tail = &tail[end..];
    }
    rest.push_str(tail);
    (rest, reexports)
}

/// Each module's imports, as the modules they name (see [`no_import_circle_anywhere`]): a name
/// reached through a parent's re-export of its child (`crate::a::X` with `pub use b::X;` in `a`)
/// is an import of the child that defines it, followed down a chain of re-exports.
fn import_edges(modules: &BTreeMap<Vec<String>, String>) -> BTreeMap<Vec<String>, Vec<Vec<String>>> {
    let children_of = |me: &Vec<String>| -> Vec<String> {
        modules
            .keys()
            .filter(|m| m.len() == me.len() + 1 && m.starts_with(me))
            .map(|m| m[me.len()].clone())
            .collect()
    };
    let module_of = |path: &[String]| {
        (1..=path.len()).rev().map(|n| path[..n].to_vec()).find(|p| modules.contains_key(p))
    };
    // What each module re-exports from its own children, by name: `crate::a::X` names the
    // child that defines `X`, not `a` (a circle through a re-export is still a circle).
    let mut reexported_names: BTreeMap<Vec<String>, BTreeMap<String, Vec<String>>> = BTreeMap::new();
    for (me, code) in modules {
        let (_, reexports) = split_reexports(code);
        for path in named_paths(&reexports, me, &children_of(me)) {
            if let Some(target) = module_of(&path).filter(|t| t.len() > me.len() && t.starts_with(me)) {
                let name = path.last().cloned().unwrap_or_default();
                reexported_names.entry(me.clone()).or_default().insert(name, target);
            }
        }
    }
    let resolve = |path: &[String]| {
        let mut m = module_of(path)?;
        // The name after the module, followed down a chain of re-exports (each one deeper).
        if let Some(n) = path.get(m.len()) {
            while let Some(t) = reexported_names.get(&m).and_then(|names| names.get(n)) {
                m = t.clone();
            }
        }
        Some(m)
    };
    let mut edges = BTreeMap::new();
    for (me, code) in modules {
        let children = children_of(me);
        let (rest, reexports) = split_reexports(code);
        let reexported = named_paths(&reexports, me, &children).into_iter().filter_map(|p| resolve(&p));
        let targets: Vec<Vec<String>> = named_paths(&rest, me, &children)
            .into_iter()
            .filter_map(|p| resolve(&p))
            .filter(|t| t != me)
            .chain(reexported.filter(|t| !t.starts_with(me)))
            .collect();
        edges.insert(me.clone(), targets);
    }
    edges
}

/// No import circle anywhere: a module (one file) never reaches itself through the modules its
/// code names. A module declaring and re-exporting its own children (`mod x;`, `pub use
/// x::Y;`) is structure, not an import, and is left out; any other use of a child (an import
/// for its own code, a path `x::f()`) counts, and so does a child naming its parent.
#[test]
fn no_import_circle_anywhere() {
    let modules = modules();
    let name = |m: &[String]| if m.is_empty() { "lib".to_string() } else { m.join("/") };
    let edges = import_edges(&modules);
    // Depth-first from `start`, keeping the path: every way back to `start`.
    let circles_from = |start: &Vec<String>| {
        let mut circles = Vec::new();
        let mut todo = vec![(start.clone(), vec![name(start)])];
        let mut seen = std::collections::BTreeSet::new();
        while let Some((m, path)) = todo.pop() {
            for next in edges.get(&m).into_iter().flatten() {
                if next == start {
                    circles.push(format!("{} → {}", path.join(" → "), name(start)));
                } else if seen.insert(next.clone()) {
                    todo.push((next.clone(), [path.clone(), vec![name(next)]].concat()));
                }
            }
        }
        circles
    };
    let mut circles: Vec<String> = modules.keys().flat_map(circles_from).collect();
    circles.sort();
    circles.dedup();
    assert!(circles.is_empty(), "import circles:\n{}", circles.join("\n"));
}

#[test]
fn the_path_reader_sees_crate_super_and_groups() {
    let me: Vec<String> = ["model", "gguf", "tokenizer"].map(String::from).to_vec();
    let code = "use super::GgufFile;\nuse crate::{model::tokenizer::x, files::{a, b}};\nlet y = crate::error::f(); // crate::cli::no\n";
    let got: Vec<String> = named_paths(code, &me, &[]).iter().map(|p| p.join("::")).collect();
    assert_eq!(got, ["model::tokenizer::x", "files", "error::f", "model::gguf::GgufFile"]);
}

#[test]
fn the_path_reader_sees_a_mod_rs_using_its_children_but_not_re_exporting_them() {
    let me: Vec<String> = vec!["report".into()];
    let children = ["svg".to_string(), "document".to_string()];
    let code = "mod document;\npub mod svg;\npub use document::{deliver, Document};\nuse self::svg::PALETTE;\nfn f() { svg::write(); }\nfn g() { my_svg::no(); x.svg::<u8>(); }\n";
    let (rest, reexports) = split_reexports(code);
    let got: Vec<String> = named_paths(&rest, &me, &children).iter().map(|p| p.join("::")).collect();
    assert_eq!(got, ["report::svg::PALETTE", "report::svg::write"]);
    let got: Vec<String> = named_paths(&reexports, &me, &children).iter().map(|p| p.join("::")).collect();
    assert_eq!(got, ["report::document::deliver", "report::document::Document"]);
}

#[test]
fn a_name_reached_through_a_re_export_is_an_import_of_the_child_that_defines_it() {
    let m =
        |path: &str, code: &str| (path.split('/').map(String::from).collect::<Vec<_>>(), code.to_string());
    let modules: BTreeMap<Vec<String>, String> = [
        m("a", "mod b;\nmod c;\npub use b::X;\nfn f() { c::g(); }\n"),
        m("a/b", "pub struct X;\n"),
        m("a/c", "use super::X;\npub fn g() {}\n"),
        m("d", "use crate::a::X;\nfn h() { crate::a::c::g(); }\n"),
    ]
    .into_iter()
    .collect();
    let edges = import_edges(&modules);
    let names = |k: &str| -> Vec<String> {
        edges[&k.split('/').map(String::from).collect::<Vec<_>>()].iter().map(|t| t.join("/")).collect()
    };
    assert_eq!(names("a"), ["a/c"]);
    assert_eq!(names("a/c"), ["a/b"]);
    assert_eq!(names("d"), ["a/b", "a/c"]);
    assert!(names("a/b").is_empty());
}
