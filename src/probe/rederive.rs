//! What `verify` re-derives beyond the documents: the bundle's own inputs and captures against
//! the replay's (a capture the replay makes again is compared bit for bit, tap by tap, so a
//! zeroed `device.npz` or the reference's capture under the device's name is named even when the
//! manifest was re-hashed), the device each backend ran on field by field, and the files of
//! the bundle against its manifest (a file it does not list is not evidence of anything).

use super::bundle::{Manifest, MANIFEST};
use super::checks::{Check, Verdict};
use super::run::ProbeRun;
use super::runs::capture_file;
use crate::capture::{CaptureFile, Store};
use crate::device::DeviceFacts;
use crate::error::echo;
use crate::inputs::InputSet;
use std::collections::BTreeMap;
use std::path::Path;

/// Every file and folder under `dir` that the manifest does not list (the manifest itself, and
/// the folders of listed files, aside), and every listed file that is a symbolic link (its
/// bytes could be anywhere).
pub fn unlisted(dir: &Path, m: &Manifest, out: &mut Vec<Check>) {
    let mut stack = vec![(dir.to_path_buf(), String::new())];
    while let Some((at, prefix)) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&at) else {
            let why = format!("{} cannot be listed", at.display());
            out.push(Check::new(format!("bundle folder {}", echo(&prefix, 120)), Verdict::Different, why));
            continue;
        };
        for e in entries.flatten() {
            let name = format!("{prefix}{}", e.file_name().to_string_lossy());
            let kind = e.file_type().ok();
            let listed = m.files.contains_key(&name);
            let holds_listed = m.files.keys().any(|f| f.starts_with(&format!("{name}/")));
            let why = match kind {
                Some(t) if t.is_symlink() => {
                    "is a symbolic link: a bundle holds its files, it does not point at them"
                }
                Some(t) if t.is_dir() && holds_listed => {
                    stack.push((e.path(), format!("{name}/")));
                    continue;
                }
                // A folder left empty holds nothing (`captures/` when every capture was past the cap).
                Some(t)
                    if t.is_dir() && std::fs::read_dir(e.path()).is_ok_and(|mut d| d.next().is_none()) =>
                {
                    continue
                }
                _ if listed || (prefix.is_empty() && name == MANIFEST) => continue,
                _ => "is not in the manifest: a bundle holds only what its manifest lists and hashes",
            };
            out.push(Check::new(format!("bundle file {}", echo(&name, 120)), Verdict::Different, why));
        }
    }
}

/// The bundle's `inputs.npz` against what the replay fed, field by field.
pub fn inputs(dir: &Path, replayed: &InputSet, out: &mut Vec<Check>) {
    let what = "bundle file inputs.npz";
    let recorded = match InputSet::from_npz(&dir.join("inputs.npz")) {
        Ok(i) => i,
        Err(e) => {
            let why = format!("it cannot be read as an InputSet: {}", echo(&e.to_string(), 200));
            return out.push(Check::new(what, Verdict::Different, why));
        }
    };
    let fields = [
        ("prompt", format!("{:?}", recorded.prompt), format!("{:?}", replayed.prompt)),
        ("decode", format!("{:?}", recorded.decode), format!("{:?}", replayed.decode)),
        ("chunk", format!("{:?}", recorded.chunk), format!("{:?}", replayed.chunk)),
        ("start_position", recorded.start_position.to_string(), replayed.start_position.to_string()),
    ];
    let check = match fields.iter().find(|(_, a, b)| a != b) {
        None => Check::new(what, Verdict::Same, "the inputs the replay fed"),
        Some((field, a, b)) => Check::new(
            what,
            Verdict::Different,
            format!("`{field}` is {} in the bundle; the probe feeds {}", echo(a, 80), echo(b, 80)),
        ),
    };
    out.push(check);
}

/// Each capture of the bundle against the replay's capture of the same name, bit for bit; a
/// capture of a backend `skip` names (one that cannot run here) is left to the figures' check.
pub fn captures(dir: &Path, m: &Manifest, run: &ProbeRun, skip: &[String], out: &mut Vec<Check>) {
    let mut replayed: BTreeMap<String, &dyn Store> = BTreeMap::new();
    replayed.insert(capture_file("reference"), run.runs.reference.as_ref());
    for b in &run.runs.backends {
        if let Some((label, c, _)) = &b.reference {
            replayed.insert(capture_file(label), c.as_ref());
        }
        if !skip.contains(&b.label) {
            replayed.insert(capture_file(&b.label), b.capture.as_ref());
        }
    }
    let skipped: Vec<String> = skip.iter().map(|l| capture_file(l)).collect();
    let left_out: Vec<&str> = m.left_out.iter().map(|p| p.path.as_str()).collect();
    let names = m.files.keys().filter_map(|n| n.strip_prefix("captures/"));
    for name in names.filter(|n| !skipped.iter().any(|s| s == n)) {
        let what = format!("bundle file captures/{}", echo(name, 120));
        let check = match replayed.remove(name) {
            Some(now) => same_bits(&dir.join("captures").join(name), now),
            None => {
                Err("the replay makes no such capture: the bundle's backends or files were edited".into())
            }
        };
        out.push(match check {
            Ok(n) => Check::new(what, Verdict::Same, format!("{n} taps bit for bit as the replay's")),
            Err(why) => Check::new(what, Verdict::Different, why),
        });
    }
    for name in replayed.keys().filter(|n| !left_out.contains(&format!("captures/{n}").as_str())) {
        let why = "the replay makes it; the bundle has neither the capture nor its hash";
        out.push(Check::new(format!("bundle file captures/{}", echo(name, 120)), Verdict::Different, why));
    }
}

/// Whether the `.npz` at `path` holds exactly `now`'s taps, bit for bit: the number of taps
/// compared, or the first difference.
fn same_bits(path: &Path, now: &dyn Store) -> Result<usize, String> {
    let then =
        CaptureFile::open(path).map_err(|e| format!("it cannot be read: {}", echo(&e.to_string(), 200)))?;
    let (keys, now_keys) = (then.keys(), now.keys());
    if let Some(k) = keys.iter().find(|k| !now.contains(k)) {
        return Err(format!("it holds {}, which the replay does not make", echo(&k.to_string(), 80)));
    }
    if let Some(k) = now_keys.iter().find(|k| !then.contains(k)) {
        return Err(format!("it lacks {}, which the replay makes", echo(&k.to_string(), 80)));
    }
    for k in &keys {
        let unread = |e: crate::error::Error| echo(&e.to_string(), 200);
        let (a, b) = (then.get(k).map_err(unread)?, now.get(k).map_err(unread)?);
        let (Some(a), Some(b)) = (a, b) else { return Err(format!("{k} cannot be read")) };
        if a.shape() != b.shape() {
            return Err(format!("{k} has shape {:?}; the replay's has {:?}", a.shape(), b.shape()));
        }
        if let Some((i, (x, y))) =
            a.iter().zip(b.iter()).enumerate().find(|(_, (x, y))| x.to_bits() != y.to_bits())
        {
            let n = a.iter().zip(b.iter()).filter(|(x, y)| x.to_bits() != y.to_bits()).count();
            return Err(format!(
                "{k} differs from the replay's in {n} of {} values (first at {i}: {x} in the bundle, {y} replayed)",
                a.len()
            ));
        }
    }
    Ok(keys.len())
}

/// A device the bundle records against the one the replay ran on, field by field: None when
/// every field is the same, else the first that is not.
pub fn device_differs(recorded: &DeviceFacts, now: &DeviceFacts) -> Option<String> {
    let (r, n) = (serde_json::to_value(recorded).ok()?, serde_json::to_value(now).ok()?);
    let (r, n) = (r.as_object()?, n.as_object()?);
    r.iter().find(|(k, v)| n.get(*k) != Some(*v)).map(|(k, v)| {
        let now = n.get(k).map_or("nothing".to_string(), |x| echo(&x.to_string(), 80));
        format!(
            "its `{k}` is {} in the bundle; the device it runs on here says {now}",
            echo(&v.to_string(), 80)
        )
    })
}
