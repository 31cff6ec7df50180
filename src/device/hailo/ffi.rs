//! The C ABI of shim/hefprobe_shim.h, and the one way hefprobe calls it.
//!
//! Layouts must match that header field for field (`tests::ffi_layouts_match_the_header`).
//! The header's convention: every function returning `int` returns a `hailo_status` and, on
//! failure, writes a NUL-terminated message naming the failing HailoRT call (or the shim's own
//! check) into the caller's error buffer. [`call`] is that convention, written once.

use std::ffi::{c_char, c_int, CString};
use std::marker::{PhantomData, PhantomPinned};
use std::path::Path;

use super::status::Failure;
use crate::error::{Error, Result};

pub const HP_NAME_CAPACITY: usize = 256;

/// Opaque `hp_vdevice`: only ever behind a pointer; not Send/Sync/Unpin.
#[repr(C)]
pub struct HpVdevice {
    _data: [u8; 0],
    _marker: PhantomData<(*mut u8, PhantomPinned)>,
}

/// Opaque `hp_model`.
#[repr(C)]
pub struct HpModel {
    _data: [u8; 0],
    _marker: PhantomData<(*mut u8, PhantomPinned)>,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct HpQuantInfo {
    pub zp: f32,
    pub scale: f32,
    pub min: f32,
    pub max: f32,
}

#[repr(C)]
pub struct HpStreamInfo {
    pub name: [c_char; HP_NAME_CAPACITY],
    pub height: u32,
    pub width: u32,
    pub features: u32,
    pub format_type: u32,
    pub format_order: u32,
    pub frame_size: u64,
    pub quant_info_count: u64,
}

#[repr(C)]
pub struct HpVdeviceInfo {
    pub device_ids: [c_char; HP_NAME_CAPACITY],
    pub architecture: i32,
}

#[repr(C)]
pub struct HpInput {
    pub name: *const c_char,
    pub data: *const u8,
    pub size: usize,
}

#[repr(C)]
pub struct HpOutput {
    pub data: *mut u8,
    pub size: usize,
}

extern "C" {
    pub fn hp_vdevice_create(out: *mut *mut HpVdevice, err: *mut c_char, err_len: usize) -> c_int;
    pub fn hp_vdevice_info_get(vdevice: *const HpVdevice, out: *mut HpVdeviceInfo);
    pub fn hp_vdevice_destroy(vdevice: *mut HpVdevice);

    pub fn hp_hef_network_groups(
        hef_path: *const c_char,
        names: *mut c_char,
        capacity: usize,
        needed: *mut usize,
        err: *mut c_char,
        err_len: usize,
    ) -> c_int;

    pub fn hp_model_create(
        vdevice: *mut HpVdevice,
        hef_path: *const c_char,
        group: *const c_char,
        float_inputs: *const *const c_char,
        float_input_count: usize,
        out: *mut *mut HpModel,
        err: *mut c_char,
        err_len: usize,
    ) -> c_int;
    pub fn hp_model_destroy(model: *mut HpModel);

    pub fn hp_model_stream_count(model: *const HpModel, is_output: c_int) -> usize;
    pub fn hp_model_stream_info(
        model: *const HpModel,
        is_output: c_int,
        index: usize,
        out: *mut HpStreamInfo,
        err: *mut c_char,
        err_len: usize,
    ) -> c_int;
    pub fn hp_model_stream_quant_infos(
        model: *const HpModel,
        is_output: c_int,
        index: usize,
        out: *mut HpQuantInfo,
        capacity: usize,
        count: *mut usize,
        err: *mut c_char,
        err_len: usize,
    ) -> c_int;

    pub fn hp_model_run(
        model: *mut HpModel,
        inputs: *const HpInput,
        input_count: usize,
        outputs: *const HpOutput,
        output_count: usize,
        timeout_ms: u32,
        err: *mut c_char,
        err_len: usize,
    ) -> c_int;

    pub fn hp_model_init_cache(
        model: *mut HpModel,
        read_offset: u32,
        err: *mut c_char,
        err_len: usize,
    ) -> c_int;
    pub fn hp_model_update_cache_offset(
        model: *mut HpModel,
        offset_delta_entries: i32,
        err: *mut c_char,
        err_len: usize,
    ) -> c_int;
    pub fn hp_model_cache_snapshot(
        model: *mut HpModel,
        count: *mut usize,
        err: *mut c_char,
        err_len: usize,
    ) -> c_int;
    pub fn hp_model_cache_entry(
        model: *const HpModel,
        index: usize,
        cache_id: *mut u32,
        size: *mut u64,
        err: *mut c_char,
        err_len: usize,
    ) -> c_int;
    pub fn hp_model_cache_copy(
        model: *const HpModel,
        index: usize,
        dst: *mut u8,
        dst_len: usize,
        err: *mut c_char,
        err_len: usize,
    ) -> c_int;
    pub fn hp_model_cache_release(model: *mut HpModel);
    pub fn hp_model_update_cache_buffer(
        model: *mut HpModel,
        cache_id: u32,
        data: *const u8,
        size: usize,
        err: *mut c_char,
        err_len: usize,
    ) -> c_int;
}

// ---------------------------------------------------------------------------------------------
// Calling the shim.

/// Room for the shim's error messages (it truncates to fit).
const ERR_CAPACITY: usize = 1024;

/// One shim call: `shim` gets a fresh error buffer and its capacity and returns the shim's
/// status. Anything but HAILO_SUCCESS becomes a [`Failure`] carrying the status and the shim's
/// message, or `fallback` (the HailoRT call, as the shim would name it) if it wrote none.
pub(super) fn call(
    fallback: &str,
    shim: impl FnOnce(*mut c_char, usize) -> c_int,
) -> std::result::Result<(), Failure> {
    let mut err: [c_char; ERR_CAPACITY] = [0; ERR_CAPACITY];
    let status = shim(err.as_mut_ptr(), ERR_CAPACITY);
    if status == hailort_sys::HAILO_SUCCESS {
        return Ok(());
    }
    let message = c_chars_to_string(&err);
    let call = if message.is_empty() { fallback.to_string() } else { message };
    Err(Failure { status, call })
}

/// A NUL-terminated `char` array (the shim always terminates) as a String; the whole array if
/// no NUL is present.
pub(super) fn c_chars_to_string(chars: &[c_char]) -> String {
    // to_ne_bytes: c_char is i8 on x86_64 and u8 on aarch64; a cast would be flagged as
    // unnecessary on one of them.
    let bytes: Vec<u8> = chars.iter().take_while(|&&c| c != 0).map(|&c| c.to_ne_bytes()[0]).collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

pub(super) fn c_string(what: &str, value: &str) -> Result<CString> {
    CString::new(value).map_err(|_| Error::usage(format!("{what} `{value}` contains a NUL byte")))
}

pub(super) fn path_c_string(path: &Path) -> Result<CString> {
    let s = path.to_str().ok_or_else(|| {
        Error::input(path.display().to_string(), "the HEF path is not valid UTF-8; rename or move the file")
    })?;
    c_string("HEF path", s)
}
