//! The one architecture table: a HEF's `hw_arch` (hef.proto's `ProtoHEFHwArch`, HailoRT's
//! `HEFHwArch`) and the device architectures HailoRT 5.2 runs it on
//! (`hailo_device_architecture_t`). `doctor`, the suite and every device open ask it.
//!
//! Sources (HailoRT v5.2.0): `HEFHwArch` in libhailort/src/device_common/device_internal.hpp
//! 45-63 (value 5, HAILO10H, is commented out there as deprecated); the compatibility in
//! `DeviceBase::hef_arch_to_device_compatible_archs`, device_internal.cpp 736-763 (anything
//! else maps to `HAILO_ARCH_MAX_ENUM`, which no device is), checked at configure time by
//! device_internal.cpp 611-621 (`HAILO_HEF_NOT_COMPATIBLE_WITH_DEVICE`).

/// `hw_arch` → (name, device architectures that run it).
const TABLE: &[(i32, &str, &[&str])] = &[
    (0, "HAILO8", &["HAILO8"]),
    (1, "HAILO8P", &["HAILO8"]),
    (2, "HAILO8R", &["HAILO8"]),
    (3, "HAILO8L", &["HAILO8L", "HAILO8"]),
    (4, "HAILO15M", &["HAILO15M", "HAILO15H", "HAILO10H"]),
    (5, "HAILO10H (deprecated id)", &[]),
    (6, "HAILO15L", &["HAILO15L"]),
    (100, "SAGE_A0", &["HAILO8_A0"]),
    (101, "SAGE_B0", &["HAILO8"]),
    (102, "PAPRIKA_B0", &["HAILO8"]),
    (103, "HAILO1XH", &["HAILO15H", "HAILO10H"]),
    (104, "GINGER", &["HAILO15H", "HAILO10H"]),
    (105, "LAVENDER", &["HAILO15H", "HAILO10H"]),
    (106, "PLUTO", &["HAILO15L"]),
    (108, "MARS", &["HAILO12L"]),
];

/// The name hef.proto gives `hw_arch`, or `unknown (N)`.
pub fn hw_arch_name(hw_arch: i32) -> String {
    match TABLE.iter().find(|(a, _, _)| *a == hw_arch) {
        Some((_, name, _)) => name.to_string(),
        None => format!("unknown ({hw_arch})"),
    }
}

/// The device architectures HailoRT accepts a HEF of `hw_arch` on; empty: none.
pub fn compatible_device_archs(hw_arch: i32) -> &'static [&'static str] {
    TABLE.iter().find(|(a, _, _)| *a == hw_arch).map_or(&[], |(_, _, archs)| archs)
}

/// Whether a device of `device_arch` (a `hailo_device_architecture_t` name) runs a HEF of
/// `hw_arch`.
pub fn runs_on(hw_arch: i32, device_arch: &str) -> bool {
    compatible_device_archs(hw_arch).contains(&device_arch)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hailort_5_2_compatibility() {
        assert_eq!(compatible_device_archs(103), &["HAILO15H", "HAILO10H"]);
        assert_eq!(compatible_device_archs(3), &["HAILO8L", "HAILO8"]);
        assert!(runs_on(0, "HAILO8") && !runs_on(0, "HAILO10H"), "hw_arch 0 is HAILO8");
        assert!(!runs_on(5, "HAILO10H") && compatible_device_archs(5).is_empty(), "5 is deprecated: none");
        assert!(runs_on(4, "HAILO10H") && !runs_on(103, "HAILO8") && !runs_on(103, "SOMETHING"));
        assert_eq!(hw_arch_name(7), "unknown (7)");
    }
}
