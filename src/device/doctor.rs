//! `hefprobe doctor`: what a device host has, checked before anything else runs there — the
//! HailoRT library, the device and its architecture, the server side hefprobe relies on, the
//! HEF's target against the device, and which diagnostics this device allows.
//!
//! Every finding is plain data ([`Finding`]); the command renders them. Nothing here can hang:
//! the one call that talks to a device (creating a VDevice) runs on its own thread and is given
//! up after [`PROBE_TIMEOUT`].

use super::synth_hef::sim_spec;
use super::{RealDevice, SimProfile, RPC_CACHE_UNSUPPORTED};
use crate::error::Result;
use crate::hef::arch::{compatible_device_archs, hw_arch_name};
use crate::hef::Hef;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How long creating the VDevice may take before doctor gives up on it. HailoRT's own RPC
/// requests wait REQUEST_TIMEOUT = 5 s (hrpc_protocol/serializer.hpp); connecting and one
/// request fit in twice that.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(10);

crate::named_enum! {
    /// How a finding bears on a first hardware run.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
    #[serde(rename_all = "snake_case")]
    pub enum Verdict {
        Ok = "ok",
        /// Usable, with a limit the user must know (a diagnostic unavailable, an unchecked version).
        Limited = "limited",
        /// Missing or wrong: the first hardware run cannot work until it is fixed.
        Missing = "MISSING",
        /// Plain information.
        Info = "-",
    }
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Finding {
    pub item: String,
    pub verdict: Verdict,
    pub detail: String,
}

fn finding(item: &str, verdict: Verdict, detail: impl Into<String>) -> Finding {
    Finding { item: item.to_string(), verdict, detail: detail.into() }
}

/// The device side doctor looked at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Probe {
    /// A HEF hefprobe simulates, run on this simulator profile.
    Simulated(SimProfile),
    /// This hefprobe has no HailoRT (built without `--features hailo`).
    NotBuiltIn,
    /// HailoRT is linked; the library and the device answered (or failed, with why).
    Real {
        library: std::result::Result<(u32, u32, u32), String>,
        device: std::result::Result<RealDevice, String>,
    },
}

/// Whether the cache calls may be made: only where the VDevice is local. On Hailo-10H it is an
/// RPC client (vdevice.cpp `VDevice::create`), and an architecture HailoRT did not report may be
/// one.
fn cache_available(probe: &Probe) -> bool {
    match probe {
        Probe::Simulated(p) => !p.over_rpc(),
        Probe::NotBuiltIn => false,
        Probe::Real { device, .. } => device.as_ref().is_ok_and(|d| d.cache_local),
    }
}

/// Every finding for `probe`, and the HEF at `hef` (read on the host) if given. `dev_nodes`
/// are the Hailo device nodes found under /dev.
pub fn findings(probe: &Probe, dev_nodes: &[PathBuf], hef: Option<(&Path, &Hef)>) -> Vec<Finding> {
    let build = if cfg!(feature = "hailo") { "with --features hailo" } else { "without HailoRT" };
    let mut out =
        vec![finding("hefprobe", Verdict::Info, format!("{} ({build})", env!("CARGO_PKG_VERSION")))];
    out.push(nodes_finding(probe, dev_nodes));
    let device_arch = match probe {
        Probe::Simulated(p) => {
            out.extend(simulated_findings(*p));
            None
        }
        Probe::NotBuiltIn => {
            let library = "not linked: this hefprobe was built without HailoRT; build with --features hailo";
            out.push(finding("HailoRT library", Verdict::Missing, library));
            out.push(finding("device", Verdict::Missing, "not probed: no HailoRT in this build"));
            out.push(finding("hailort_server", Verdict::Missing, "not probed: no HailoRT in this build"));
            None
        }
        Probe::Real { library, device } => {
            out.push(library_finding(library));
            out.extend(device_findings(device));
            device.as_ref().ok().and_then(|d| d.architecture.clone())
        }
    };
    if let Some((path, hef)) = hef {
        out.push(hef_finding(probe, device_arch.as_deref(), path, hef));
    }
    out.extend(availability(probe));
    out
}

/// The Hailo device nodes: none is missing on a device host, expected on a simulated one.
fn nodes_finding(probe: &Probe, dev_nodes: &[PathBuf]) -> Finding {
    let nodes = if dev_nodes.is_empty() {
        "none under /dev: load the hailo PCIe driver of the same HailoRT release (`lsmod | grep hailo`)"
            .to_string()
    } else {
        dev_nodes.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
    };
    let simulated = matches!(probe, Probe::Simulated(_));
    let node_verdict = match (dev_nodes.is_empty(), simulated) {
        (false, _) => Verdict::Ok,
        (true, true) => Verdict::Info,
        (true, false) => Verdict::Missing,
    };
    finding("device nodes", node_verdict, nodes)
}

/// The library, device and server lines of a simulated device.
fn simulated_findings(p: SimProfile) -> [Finding; 3] {
    let library = "not needed: the HEF is one hefprobe simulates";
    let what = match p {
        SimProfile::Sim => "simulated local device (`sim`: every InferModel call available)",
        SimProfile::SimH10 => "simulated Hailo-10H (`sim-h10`: HailoRT 5.2's RPC client limits)",
    };
    let server =
        if p.over_rpc() { "simulated: the RPC client's limits apply" } else { "not used: local device" };
    [
        finding("HailoRT library", Verdict::Info, library),
        finding("device", Verdict::Ok, what),
        finding("hailort_server", Verdict::Info, server),
    ]
}

/// The linked HailoRT's version: 5.2 is the one the shim was checked against.
fn library_finding(library: &std::result::Result<(u32, u32, u32), String>) -> Finding {
    let (verdict, detail) = match library {
        Ok((5, 2, r)) => (Verdict::Ok, format!("5.2.{r}")),
        Ok((5, minor, r)) => {
            (Verdict::Limited, format!("5.{minor}.{r}: hefprobe's shim was checked against 5.2.0 only"))
        }
        Ok((major, minor, r)) => {
            (Verdict::Missing, format!("{major}.{minor}.{r}: hefprobe needs HailoRT 5.x"))
        }
        Err(e) => (Verdict::Missing, e.clone()),
    };
    finding("HailoRT library", verdict, detail)
}

/// The device HailoRT opened, and the server a Hailo-10H reaches it through.
fn device_findings(device: &std::result::Result<RealDevice, String>) -> [Finding; 2] {
    match device {
        Ok(d) => {
            let arch = d.architecture.clone().unwrap_or_else(|| "architecture not reported".into());
            let ids = if d.device_ids.is_empty() { "?" } else { &d.device_ids };
            let (verdict, server) = if !d.cache_local {
                // The InferModel actions hefprobe uses, init_cache and update_cache_offset
                // among them: hrpc_protocol/serializer.hpp HailoRpcActionID.
                (
                    Verdict::Ok,
                    "reached over RPC: InferModel runs and cache offsets served, cache reads not used",
                )
            } else {
                (Verdict::Info, "not used: the VDevice is local")
            };
            [
                finding("device", Verdict::Ok, format!("{ids} ({arch})")),
                finding("hailort_server", verdict, server),
            ]
        }
        Err(e) => {
            let server =
                "not reached: on Hailo-10H it runs on the device; try `hailortcli fw-control identify`";
            [
                finding("device", Verdict::Missing, e.clone()),
                finding("hailort_server", Verdict::Missing, server),
            ]
        }
    }
}

/// The HEF's target architecture against the device's.
fn hef_finding(probe: &Probe, device_arch: Option<&str>, path: &Path, hef: &Hef) -> Finding {
    let compatible = compatible_device_archs(hef.hw_arch);
    let runs_on =
        if compatible.is_empty() { "no device HailoRT 5.2 knows".to_string() } else { compatible.join(", ") };
    let target = format!("{} (runs on {runs_on})", hw_arch_name(hef.hw_arch));
    let (verdict, detail) = match (device_arch, probe) {
        (_, Probe::Simulated(_)) => (Verdict::Info, format!("{target}; simulated here")),
        (Some(arch), _) if compatible.contains(&arch) => {
            (Verdict::Ok, format!("{target}; the device is {arch}"))
        }
        (Some(arch), _) => (
            Verdict::Missing,
            format!("{target}; the device is {arch}: HailoRT will refuse this HEF, compile it for {arch}"),
        ),
        (None, _) => (Verdict::Limited, format!("{target}; the device's architecture is unknown")),
    };
    finding(&format!("HEF {}", path.display()), verdict, detail)
}

/// Which diagnostics the device allows: runs and parity need a device, the cache a local one.
fn availability(probe: &Probe) -> [Finding; 3] {
    let device_ok = match probe {
        Probe::Simulated(_) => true,
        Probe::NotBuiltIn => false,
        Probe::Real { library, device } => library.is_ok() && device.is_ok(),
    };
    let (runs, runs_detail) =
        if device_ok { (Verdict::Ok, "available") } else { (Verdict::Missing, "no device") };
    let (verdict, detail) = if !device_ok {
        (Verdict::Missing, "no device".to_string())
    } else if cache_available(probe) {
        (Verdict::Ok, "available: the VDevice is local".to_string())
    } else {
        // The full reason is RPC_CACHE_UNSUPPORTED; the table keeps its first sentence.
        let short = RPC_CACHE_UNSUPPORTED.split(':').next().unwrap_or(RPC_CACHE_UNSUPPORTED);
        (
            Verdict::Limited,
            format!("{short}: get_cache_buffers would overflow hailort_server (docs/HAILO-RUNTIME.md)"),
        )
    };
    [
        finding("capture / run --backend hef=", runs, runs_detail),
        finding("diagnose: repeatability, parity (a)/(b)", runs, runs_detail),
        finding("diagnose: parity (c), cache diff", verdict, detail),
    ]
}

/// Whether the findings leave hefprobe a device to run on.
pub fn device_usable(findings: &[Finding]) -> bool {
    !findings.iter().any(|f| f.verdict == Verdict::Missing)
}

/// Hailo device nodes under `dir` (`/dev` on a device host): `hailo0`, `hailo1`, ...
pub fn device_nodes(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut nodes: Vec<PathBuf> = entries
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with("hailo"))
        .map(|e| e.path())
        .collect();
    nodes.sort();
    nodes
}

/// Runs `f` on its own thread and gives up after `timeout` (the thread is then left behind:
/// a HailoRT call cannot be cancelled, and the process exits soon after).
pub fn with_timeout<T: Send + 'static>(
    timeout: Duration,
    what: &str,
    f: impl FnOnce() -> std::result::Result<T, String> + Send + 'static,
) -> std::result::Result<T, String> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(timeout) {
        Ok(r) => r,
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
            Err(format!("{what} did not answer within {timeout:?}"))
        }
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
            Err(format!("{what} failed without an answer"))
        }
    }
}

/// What doctor probes: the simulator when `hef` is one hefprobe wrote, else the real device
/// (when this build has HailoRT).
pub fn probe(hef: Option<(&Path, &Hef)>, profile: Option<SimProfile>) -> Result<Probe> {
    if let Some((path, h)) = hef {
        if sim_spec(h, &path.display().to_string())?.is_some() {
            return Ok(Probe::Simulated(profile.unwrap_or_default()));
        }
    }
    if let Some(p) = profile {
        return Err(crate::error::Error::usage(format!(
            "device `{}` simulates a device: give doctor a HEF hefprobe wrote (`synth-hef`), or leave the \
             device choice out to check the real device",
            p.name()
        )));
    }
    Ok(real_probe())
}

#[cfg(feature = "hailo")]
fn real_probe() -> Probe {
    let library = super::hailo::library_version().map_err(|e| e.to_string());
    let device = match &library {
        Ok(_) => with_timeout(PROBE_TIMEOUT, "VDevice::create", || {
            super::hailo::probe_device().map_err(|e| e.to_string())
        }),
        Err(_) => Err("not probed: the HailoRT library did not answer".into()),
    };
    Probe::Real { library, device }
}

#[cfg(not(feature = "hailo"))]
fn real_probe() -> Probe {
    Probe::NotBuiltIn
}

#[cfg(test)]
mod tests {
    use super::*;

    fn verdict_of(f: &[Finding], item: &str) -> Verdict {
        f.iter().find(|x| x.item == item).unwrap_or_else(|| panic!("no `{item}` in {f:?}")).verdict
    }

    #[test]
    fn without_hailort_everything_device_side_is_missing_and_says_how_to_fix_it() {
        let f = findings(&Probe::NotBuiltIn, &[], None);
        assert!(!device_usable(&f));
        assert_eq!(verdict_of(&f, "HailoRT library"), Verdict::Missing);
        assert_eq!(verdict_of(&f, "device nodes"), Verdict::Missing);
        let lib = f.iter().find(|x| x.item == "HailoRT library").unwrap();
        assert!(lib.detail.contains("--features hailo"), "{}", lib.detail);
    }

    #[test]
    fn a_hailo10h_gets_runs_but_no_cache_diagnostics() {
        let probe = Probe::Real {
            library: Ok((5, 2, 0)),
            device: Ok(RealDevice {
                device_ids: "0000:01:00.0".into(),
                architecture: Some("HAILO10H".into()),
                cache_local: false,
            }),
        };
        let hef = Hef {
            version: 0,
            hw_arch: 103,
            sdk_version: String::new(),
            groups: Vec::new(),
            resources: Vec::new(),
            extensions: Vec::new(),
        };
        let f = findings(&probe, &[PathBuf::from("/dev/hailo0")], Some((Path::new("m.hef"), &hef)));
        assert_eq!(verdict_of(&f, "diagnose: repeatability, parity (a)/(b)"), Verdict::Ok);
        assert_eq!(verdict_of(&f, "diagnose: parity (c), cache diff"), Verdict::Limited);
        assert_eq!(verdict_of(&f, "HEF m.hef"), Verdict::Ok);
        assert!(device_usable(&f));
        // The same HEF on a Hailo-8 is refused by HailoRT.
        let probe = Probe::Real {
            library: Ok((5, 2, 0)),
            device: Ok(RealDevice {
                device_ids: "x".into(),
                architecture: Some("HAILO8".into()),
                cache_local: true,
            }),
        };
        let f = findings(&probe, &[PathBuf::from("/dev/hailo0")], Some((Path::new("m.hef"), &hef)));
        assert_eq!(verdict_of(&f, "HEF m.hef"), Verdict::Missing);
        assert_eq!(verdict_of(&f, "diagnose: parity (c), cache diff"), Verdict::Ok);
        assert!(!device_usable(&f));
    }

    #[test]
    fn a_device_that_does_not_answer_is_missing_not_waited_for() {
        let started = std::time::Instant::now();
        let r: std::result::Result<(), String> =
            with_timeout(Duration::from_millis(50), "VDevice::create", || {
                std::thread::sleep(Duration::from_secs(5));
                Ok(())
            });
        assert!(started.elapsed() < Duration::from_secs(2));
        assert_eq!(r, Err("VDevice::create did not answer within 50ms".to_string()));
        let probe = Probe::Real { library: Ok((5, 2, 0)), device: r.map(|_| unreachable!()) };
        let f = findings(&probe, &[], None);
        assert_eq!(verdict_of(&f, "device"), Verdict::Missing);
        assert!(!device_usable(&f));
    }

    #[test]
    fn sim_profiles_differ_only_in_the_cache_diagnostics() {
        let f = findings(&Probe::Simulated(SimProfile::Sim), &[], None);
        assert_eq!(verdict_of(&f, "diagnose: parity (c), cache diff"), Verdict::Ok);
        assert!(device_usable(&f));
        let f = findings(&Probe::Simulated(SimProfile::SimH10), &[], None);
        assert_eq!(verdict_of(&f, "diagnose: parity (c), cache diff"), Verdict::Limited);
        assert!(device_usable(&f));
    }
}
