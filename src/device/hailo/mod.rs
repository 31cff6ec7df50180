//! The real device: HailoRT 5.x's C++ InferModel API through the C shim in `shim/` (feature
//! `hailo`).
//!
//! Why a shim and not hailort-sys: on Hailo-10H the VDevice is an RPC client whose `configure()`
//! returns HAILO_NOT_IMPLEMENTED (libhailort/src/vdevice/vdevice_hrpc_client.cpp), so the C API
//! cannot run a network group there; only the C++ InferModel API can. hailort-sys is used for
//! what it gets right: the named constants of `hailo_status`, `hailo_device_architecture_t` and
//! `hailo_format_type_t`, and `hailo_get_library_version` (all match include/hailo/hailort.h of
//! HailoRT v5.2.0). Several of its other declarations do not exist in v5.2.0, so nothing else of
//! it is used.
//!
//! Everything HailoRT-specific below cites the file of hailo-ai/hailort v5.2.0 it comes from.
//! The pure parts (status → message, version check, frame checks) are unit tested; the FFI
//! parts can only run against real HailoRT.
//!
//! The rooms: `ffi` is the shim's C ABI and `ffi::call`, the one way hefprobe calls it;
//! `status` turns a HailoRT status into an error that says the fix; `checks` holds the pure
//! parts; this file holds the device and the configured model.

use std::collections::BTreeMap;
use std::ffi::{c_char, c_int};
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::time::Duration;

use super::{ConfiguredModel, Device, DeviceFacts, StreamInfo};
use crate::error::{Error, Result};
use crate::hef::{QuantInfo, Shape3};

mod checks;
mod ffi;
mod status;
#[cfg(test)]
mod tests;

pub use checks::{
    architecture_name, check_cache_access, check_cache_snapshot, check_input_frames, check_library_version,
    CHECKED_VERSION, REQUIRED_MAJOR,
};
pub use status::{cache_write_error, status_error, status_label, status_message, CallContext};

use checks::format_type;
use ffi::{c_chars_to_string, c_string, call, path_c_string};

/// `hailo_get_library_version` (hailort.h:1762); hailort-sys declares it with the same
/// signature and `hailo_version_t {major, minor, revision}` layout.
pub fn library_version() -> Result<(u32, u32, u32)> {
    let mut version = hailort_sys::hailo_version_t { major: 0, minor: 0, revision: 0 };
    // SAFETY: `version` is a valid, writable hailo_version_t for the duration of the call; the
    // function only writes its three u32 fields (hailort.cpp:85-92).
    let status = unsafe { hailort_sys::hailo_get_library_version(&mut version) };
    if status != hailort_sys::HAILO_SUCCESS {
        return Err(status_error(
            status,
            &CallContext { call: "hailo_get_library_version()", ..Default::default() },
        ));
    }
    Ok((version.major, version.minor, version.revision))
}

/// What `doctor` asks of the device: create one VDevice (device_count 1, as every run does),
/// read its ids and architecture, release it.
pub fn probe_device() -> Result<super::RealDevice> {
    let (vdevice, device_ids, architecture) = create_vdevice(None)?;
    // SAFETY: the handle came from hp_vdevice_create in create_vdevice, nothing else holds it,
    // and it is destroyed exactly once.
    unsafe { ffi::hp_vdevice_destroy(vdevice.as_ptr()) };
    Ok(super::RealDevice {
        device_ids,
        cache_local: check_cache_access(architecture, "doctor").is_ok(),
        architecture: architecture.map(arch_label),
    })
}

/// Create one VDevice (device_count 1) and read its ids and architecture (None when HailoRT
/// reports none); the caller owns the handle and destroys it. `hef` is named in the error, if
/// given.
fn create_vdevice(hef: Option<&Path>) -> Result<(NonNull<ffi::HpVdevice>, String, Option<i32>)> {
    let mut raw: *mut ffi::HpVdevice = std::ptr::null_mut();
    call("VDevice::create_shared", |err, err_len| {
        // SAFETY: `raw` is valid for writes and `err` for `err_len` chars; on success the shim
        // stores an owned handle in `raw`, which the caller destroys.
        unsafe { ffi::hp_vdevice_create(&mut raw, err, err_len) }
    })
    .map_err(|failure| failure.error(CallContext { hef, ..Default::default() }))?;
    let vdevice = NonNull::new(raw)
        .ok_or_else(|| Error::Device("hp_vdevice_create succeeded but returned no handle".into()))?;
    let mut info = ffi::HpVdeviceInfo { device_ids: [0; ffi::HP_NAME_CAPACITY], architecture: -1 };
    // SAFETY: `vdevice` is a live handle from hp_vdevice_create; `info` is valid for writes.
    unsafe { ffi::hp_vdevice_info_get(vdevice.as_ptr(), &mut info) };
    let architecture = (info.architecture >= 0).then_some(info.architecture);
    Ok((vdevice, c_chars_to_string(&info.device_ids), architecture))
}

/// HailoRT's name for a device architecture, or its number when hefprobe knows no name.
fn arch_label(a: i32) -> String {
    architecture_name(a).map_or_else(|| format!("architecture {a}"), str::to_string)
}

/// The network group names of a HEF, in `Hef::get_network_groups_names()` order.
fn hef_network_groups(hef: &Path) -> Result<Vec<String>> {
    let path = path_c_string(hef)?;
    let mut capacity = 4096usize;
    loop {
        let mut names: Vec<c_char> = vec![0; capacity];
        let mut needed = 0usize;
        let listed = call("Hef::create", |err, err_len| {
            // SAFETY: `path` is NUL-terminated and outlives the call; `names` has `capacity`
            // writable chars; `needed` is valid for writes and `err` for `err_len` chars.
            unsafe {
                ffi::hp_hef_network_groups(
                    path.as_ptr(),
                    names.as_mut_ptr(),
                    capacity,
                    &mut needed,
                    err,
                    err_len,
                )
            }
        });
        match listed {
            // HAILO_INSUFFICIENT_BUFFER: the shim wrote nothing and said how much it needs.
            Err(failure) if failure.status == hailort_sys::HAILO_INSUFFICIENT_BUFFER && needed > capacity => {
                capacity = needed;
            }
            Err(failure) => return Err(failure.error(CallContext { hef: Some(hef), ..Default::default() })),
            Ok(()) => {
                return Ok(names[..needed]
                    .split(|&c| c == 0)
                    .filter(|name| !name.is_empty())
                    .map(c_chars_to_string)
                    .collect())
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Device.

/// A HEF on a real Hailo device: one VDevice (device_count 1) and the HEF's group names.
pub struct HailoDevice {
    vdevice: NonNull<ffi::HpVdevice>,
    hef: PathBuf,
    groups: Vec<String>,
    version: (u32, u32, u32),
    device_ids: String,
    architecture: Option<i32>,
}

impl HailoDevice {
    /// Checks the library version, reads the HEF's group names (on the host, so a bad HEF is
    /// reported before any device is needed), then creates the VDevice.
    pub fn open(hef_path: impl AsRef<Path>) -> Result<Self> {
        let hef = hef_path.as_ref().to_path_buf();
        let version = library_version()?;
        check_library_version(version.0, version.1, version.2)?;
        std::fs::metadata(&hef).map_err(|e| Error::io(&hef, e))?;
        let groups = hef_network_groups(&hef)?;
        if groups.is_empty() {
            return Err(Error::input(
                hef.display().to_string(),
                "HailoRT found no network group in this HEF",
            ));
        }
        // The handle is released in Drop.
        let (vdevice, device_ids, architecture) = create_vdevice(Some(&hef))?;
        Ok(HailoDevice { vdevice, hef, groups, version, device_ids, architecture })
    }

    fn read_streams(model: NonNull<ffi::HpModel>, is_output: bool) -> Result<Vec<StreamInfo>> {
        let side = c_int::from(is_output);
        // SAFETY: `model` is a live handle from hp_model_create.
        let count = unsafe { ffi::hp_model_stream_count(model.as_ptr(), side) };
        let mut streams = Vec::with_capacity(count);
        for index in 0..count {
            let mut info = ffi::HpStreamInfo {
                name: [0; ffi::HP_NAME_CAPACITY],
                height: 0,
                width: 0,
                features: 0,
                format_type: 0,
                format_order: 0,
                frame_size: 0,
                quant_info_count: 0,
            };
            call("hp_model_stream_info", |err, err_len| {
                // SAFETY: live handle; `index` < count; `info` is valid for writes and `err` for
                // `err_len` chars.
                unsafe { ffi::hp_model_stream_info(model.as_ptr(), side, index, &mut info, err, err_len) }
            })
            .map_err(|failure| failure.error(CallContext::default()))?;
            let name = c_chars_to_string(&info.name);

            // get_quant_infos() returns one element in v5.2.0 (infer_model.cpp:53-57), INVALID
            // {0,0,0,0} for per-feature outputs; per-feature values exist only in the HEF.
            let wanted = usize::try_from(info.quant_info_count).unwrap_or(usize::MAX).min(1 << 20);
            let mut quant = vec![ffi::HpQuantInfo::default(); wanted];
            let mut got = 0usize;
            call("hp_model_stream_quant_infos", |err, err_len| {
                // SAFETY: live handle; `quant` has `wanted` writable elements; `got` is valid for
                // writes and `err` for `err_len` chars.
                unsafe {
                    ffi::hp_model_stream_quant_infos(
                        model.as_ptr(),
                        side,
                        index,
                        quant.as_mut_ptr(),
                        wanted,
                        &mut got,
                        err,
                        err_len,
                    )
                }
            })
            .map_err(|failure| failure.error(CallContext::default()))?;
            quant.truncate(got.min(wanted));

            let format = format_type(info.format_type).ok_or_else(|| {
                Error::Device(format!(
                    "stream `{name}`: HailoRT reports format type {}, not one of hailo_format_type_t 0..=3",
                    info.format_type
                ))
            })?;
            let stream = StreamInfo {
                name,
                shape: Shape3::new(info.height, info.width, info.features),
                format,
                quant_infos: quant
                    .iter()
                    .map(|q| QuantInfo { zp: q.zp, scale: q.scale, min: q.min, max: q.max })
                    .collect(),
            };
            // hefprobe sizes frames as h·w·f·bytes; HailoRT differs only for NMS and RGB4 streams
            // (hailort_common.hpp get_frame_size), which an LLM does not have.
            if stream.frame_size() as u64 != info.frame_size {
                return Err(Error::Unsupported(format!(
                    "stream `{}`: HailoRT's frame size is {} bytes, hefprobe's h·w·f·bytes is {} (shape {}, {:?}); \
                     NMS and RGB4 streams are not supported",
                    stream.name,
                    info.frame_size,
                    stream.frame_size(),
                    stream.shape,
                    stream.format
                )));
            }
            streams.push(stream);
        }
        Ok(streams)
    }
}

impl Drop for HailoDevice {
    fn drop(&mut self) {
        // SAFETY: the handle came from hp_vdevice_create and is destroyed exactly once; models
        // hold their own reference to the VDevice (shim: hp_model::vdevice), so they stay valid.
        unsafe { ffi::hp_vdevice_destroy(self.vdevice.as_ptr()) };
    }
}

impl Device for HailoDevice {
    fn describe(&self) -> String {
        let (major, minor, revision) = self.version;
        let arch = self.architecture.map_or_else(|| "architecture unknown".to_string(), arch_label);
        let ids = if self.device_ids.is_empty() { "?" } else { &self.device_ids };
        format!(
            "Hailo device {ids} ({arch}) via HailoRT {major}.{minor}.{revision}, HEF {}",
            self.hef.display()
        )
    }

    fn facts(&self) -> DeviceFacts {
        let (major, minor, revision) = self.version;
        DeviceFacts {
            kind: "hailo".into(),
            library_version: Some(format!("{major}.{minor}.{revision}")),
            device_id: (!self.device_ids.is_empty()).then(|| self.device_ids.clone()),
            architecture: self.architecture.map(arch_label),
            // The 5.2 RPC client has no temperature call the shim exposes (Device is not
            // reachable through a VDeviceHrpcClient); left out rather than guessed.
            temperature_c: None,
            simulator: None,
        }
    }

    fn configure(&mut self, group: &str, float_inputs: &[String]) -> Result<Box<dyn ConfiguredModel>> {
        if !self.groups.iter().any(|g| g == group) {
            let hint = crate::tap::closest(group, self.groups.iter().map(String::as_str))
                .map(|c| format!(" Did you mean `{c}`?"))
                .unwrap_or_default();
            return Err(Error::input(
                self.hef.display().to_string(),
                format!("no network group `{group}`; it has: {}.{hint}", self.groups.join(", ")),
            ));
        }
        let hef_c = path_c_string(&self.hef)?;
        let group_c = c_string("network group", group)?;
        let float_c = float_inputs.iter().map(|n| c_string("input name", n)).collect::<Result<Vec<_>>>()?;
        let float_ptrs: Vec<*const c_char> = float_c.iter().map(|c| c.as_ptr()).collect();

        let mut raw: *mut ffi::HpModel = std::ptr::null_mut();
        call("hp_model_create", |err, err_len| {
            // SAFETY: the vdevice handle is live (owned by self); every string is NUL-terminated
            // and outlives the call (`hef_c`, `group_c`, `float_c` back `float_ptrs`); `raw` is
            // writable and `err` has `err_len` writable chars. On success the shim stores an
            // owned handle in `raw`.
            unsafe {
                ffi::hp_model_create(
                    self.vdevice.as_ptr(),
                    hef_c.as_ptr(),
                    group_c.as_ptr(),
                    float_ptrs.as_ptr(),
                    float_ptrs.len(),
                    &mut raw,
                    err,
                    err_len,
                )
            }
        })
        .map_err(|failure| {
            failure.error(CallContext { hef: Some(&self.hef), group: Some(group), ..Default::default() })
        })?;
        let handle = NonNull::new(raw)
            .ok_or_else(|| Error::Device("hp_model_create succeeded but returned no handle".into()))?;
        // From here on the handle is owned by `model`, so an error below still destroys it.
        let mut model = HailoModel {
            model: handle,
            group: group.to_string(),
            hef: self.hef.clone(),
            architecture: self.architecture,
            inputs: Vec::new(),
            outputs: Vec::new(),
        };
        model.inputs = Self::read_streams(handle, false)?;
        model.outputs = Self::read_streams(handle, true)?;
        Ok(Box::new(model))
    }
}

// ---------------------------------------------------------------------------------------------
// Configured model.

/// One configured network group: `ConfiguredInferModel` with its bindings (inside the shim).
pub struct HailoModel {
    model: NonNull<ffi::HpModel>,
    group: String,
    hef: PathBuf,
    architecture: Option<i32>,
    inputs: Vec<StreamInfo>,
    outputs: Vec<StreamInfo>,
}

impl HailoModel {
    /// What hefprobe knows around any call on this model; a failure adds the call itself.
    fn context(&self) -> CallContext<'_> {
        CallContext { call: "", hef: Some(&self.hef), group: Some(&self.group), timeout: None }
    }

    /// Reads the cache snapshot the shim holds; the caller releases it.
    fn read_cache_snapshot(&mut self, count: usize) -> Result<BTreeMap<u32, Vec<u8>>> {
        let mut entries = Vec::with_capacity(count);
        for index in 0..count {
            let (mut id, mut size) = (0u32, 0u64);
            call("hp_model_cache_entry", |err, err_len| {
                // SAFETY: live handle; `index` < count of the current snapshot; `id`, `size` and
                // `err` (`err_len` chars) writable.
                unsafe {
                    ffi::hp_model_cache_entry(self.model.as_ptr(), index, &mut id, &mut size, err, err_len)
                }
            })
            .map_err(|failure| failure.error(self.context()))?;
            entries.push((id, size));
        }
        check_cache_snapshot(&self.group, &entries)?;

        let mut caches = BTreeMap::new();
        for (index, &(id, size)) in entries.iter().enumerate() {
            let len = usize::try_from(size)
                .map_err(|_| Error::Device(format!("cache {id} of {size} bytes does not fit in memory")))?;
            let mut bytes = vec![0u8; len];
            call("hp_model_cache_copy", |err, err_len| {
                // SAFETY: live handle; `bytes` has exactly `len` writable bytes, the entry's
                // size; `err` has `err_len` writable chars.
                unsafe {
                    ffi::hp_model_cache_copy(
                        self.model.as_ptr(),
                        index,
                        bytes.as_mut_ptr(),
                        len,
                        err,
                        err_len,
                    )
                }
            })
            .map_err(|failure| failure.error(self.context()))?;
            caches.insert(id, bytes);
        }
        Ok(caches)
    }
}

impl Drop for HailoModel {
    fn drop(&mut self) {
        // SAFETY: the handle came from hp_model_create and is destroyed exactly once.
        unsafe { ffi::hp_model_destroy(self.model.as_ptr()) };
    }
}

impl ConfiguredModel for HailoModel {
    fn inputs(&self) -> &[StreamInfo] {
        &self.inputs
    }

    fn outputs(&self) -> &[StreamInfo] {
        &self.outputs
    }

    fn run(&mut self, inputs: &[(String, Vec<u8>)], timeout: Duration) -> Result<Vec<Vec<u8>>> {
        check_input_frames(&self.group, &self.inputs, inputs)?;
        let names = inputs.iter().map(|(n, _)| c_string("input name", n)).collect::<Result<Vec<_>>>()?;
        let c_inputs: Vec<ffi::HpInput> = inputs
            .iter()
            .zip(&names)
            .map(|((_, bytes), name)| ffi::HpInput {
                name: name.as_ptr(),
                data: bytes.as_ptr(),
                size: bytes.len(),
            })
            .collect();
        let mut outputs: Vec<Vec<u8>> = self.outputs.iter().map(|s| vec![0u8; s.frame_size()]).collect();
        let c_outputs: Vec<ffi::HpOutput> =
            outputs.iter_mut().map(|o| ffi::HpOutput { data: o.as_mut_ptr(), size: o.len() }).collect();
        let timeout_ms = u32::try_from(timeout.as_millis()).unwrap_or(u32::MAX);

        call("ConfiguredInferModel::run", |err, err_len| {
            // SAFETY: live handle. Every HpInput points into `inputs` and `names`, every HpOutput
            // into `outputs`, all alive and unmoved until the call returns; the shim copies inputs
            // into its own staging buffers and copies outputs back before returning, keeping no
            // pointer to caller memory. `err` has `err_len` writable chars.
            unsafe {
                ffi::hp_model_run(
                    self.model.as_ptr(),
                    c_inputs.as_ptr(),
                    c_inputs.len(),
                    c_outputs.as_ptr(),
                    c_outputs.len(),
                    timeout_ms,
                    err,
                    err_len,
                )
            }
        })
        .map_err(|failure| failure.error(CallContext { timeout: Some(timeout), ..self.context() }))?;
        Ok(outputs)
    }

    fn init_cache(&mut self, read_offset: u32) -> Result<()> {
        call("ConfiguredInferModel::init_cache", |err, err_len| {
            // SAFETY: live handle; `err` has `err_len` writable chars.
            unsafe { ffi::hp_model_init_cache(self.model.as_ptr(), read_offset, err, err_len) }
        })
        .map_err(|failure| failure.error(self.context()))
    }

    fn update_cache_offset(&mut self, delta_entries: i32) -> Result<()> {
        call("ConfiguredInferModel::update_cache_offset", |err, err_len| {
            // SAFETY: live handle; `err` has `err_len` writable chars.
            unsafe { ffi::hp_model_update_cache_offset(self.model.as_ptr(), delta_entries, err, err_len) }
        })
        .map_err(|failure| failure.error(self.context()))
    }

    fn cache_buffers(&mut self) -> Result<BTreeMap<u32, Vec<u8>>> {
        check_cache_access(self.architecture, "get_cache_buffers")?;
        let mut count = 0usize;
        let snapshot = call("ConfiguredInferModel::get_cache_buffers", |err, err_len| {
            // SAFETY: live handle; `count` is valid for writes and `err` for `err_len` chars. The
            // snapshot is released below on every path.
            unsafe { ffi::hp_model_cache_snapshot(self.model.as_ptr(), &mut count, err, err_len) }
        });
        let result = match snapshot {
            Ok(()) => self.read_cache_snapshot(count),
            Err(failure) => Err(failure.error(self.context())),
        };
        // SAFETY: live handle; releasing the snapshot (possibly empty) is always allowed.
        unsafe { ffi::hp_model_cache_release(self.model.as_ptr()) };
        result
    }

    fn update_cache_buffer(&mut self, cache_id: u32, bytes: &[u8]) -> Result<()> {
        check_cache_access(self.architecture, "update_cache_buffer")?;
        call("ConfiguredInferModel::update_cache_buffer", |err, err_len| {
            // SAFETY: live handle; `bytes` is readable for its length during the call and HailoRT
            // only reads from it (MemoryView::create_const in the shim); `err` has `err_len`
            // writable chars.
            unsafe {
                ffi::hp_model_update_cache_buffer(
                    self.model.as_ptr(),
                    cache_id,
                    bytes.as_ptr(),
                    bytes.len(),
                    err,
                    err_len,
                )
            }
        })
        .map_err(|failure| {
            cache_write_error(
                failure.status,
                bytes.len(),
                self.architecture,
                &failure.context(self.context()),
            )
        })
    }
}
