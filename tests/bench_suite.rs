//! `bench --suite --threads LIST`: every row at every count, side by side (the figures are
//! checked for presence and sign, never for speed).

use assert_cmd::Command;
use predicates::prelude::*;

fn hefprobe() -> Command {
    Command::cargo_bin("hefprobe").unwrap()
}

#[test]
fn suite_measures_each_row_at_each_thread_count() {
    let out = hefprobe()
        .args(["bench", "--suite", "--preset", "tinystories", "--reps", "1", "--threads", "1,2"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let table = stdout.split("Thread scaling").nth(1).expect("a thread scaling table");
    let head = table.lines().find(|l| l.starts_with("| measurement")).expect("its header");
    assert!(
        head.contains("| 1 thread(s) |") && head.contains("| 2 thread(s) |") && head.contains("2 vs 1"),
        "{head}"
    );
    let rows: Vec<&str> = table.lines().filter(|l| l.starts_with("| tinystories")).collect();
    // prefill, decode and their taps-on and bf16 variants, and the long prefill (both lengths).
    assert_eq!(rows.len(), 8, "{table}");
    for row in rows {
        let cells: Vec<&str> = row.split('|').map(str::trim).filter(|c| !c.is_empty()).collect();
        assert_eq!(cells.len(), 4, "{row}");
        for ms in &cells[1..3] {
            let v: f64 = ms.trim_end_matches(" ms").parse().unwrap_or_else(|_| panic!("{row}"));
            assert!(v.is_finite() && v > 0.0, "{row}");
        }
        let speedup: f64 = cells[3].trim_end_matches('×').parse().unwrap_or_else(|_| panic!("{row}"));
        assert!(speedup.is_finite() && speedup > 0.0, "{row}");
    }
    // The main table is at the list's last count.
    assert!(stdout.contains("| tinystories prefill 128 | 2 |"), "{stdout}");
}

#[test]
fn a_bad_thread_list_is_refused_naming_the_flag() {
    for bad in ["0", "1,0", "", "1,,2", "two"] {
        hefprobe()
            .args(["bench", "--suite", "--preset", "tinystories", "--threads", bad])
            .assert()
            .code(2)
            .stderr(predicate::str::contains("--threads").and(predicate::str::contains("--threads 1,2,4")));
    }
    hefprobe()
        .args(["bench", "--preset", "tinystories", "--threads", "1,2"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("--threads 1,2").and(predicate::str::contains("--suite")));
}
