//! CPU feature detection, done once per process.
//!
//! `std::is_x86_feature_detected!` checks both CPUID and that the OS has
//! enabled the register state (XCR0 via `xgetbv`), so a level is only chosen
//! when its instructions can actually run. (Some VMs advertise features such
//! as AMX that the OS does not enable; nothing here uses AMX.)
//!
//! On aarch64, `std::arch::is_aarch64_feature_detected!` reads the kernel's
//! hardware capabilities (HWCAP): NEON is part of every ARMv8-A core, SDOT
//! (`dotprod`) of ARMv8.2 and later.
//!
//! The environment variable `SIMCORE_SIMD` (`scalar`, `avx2`, `avx512`,
//! `avx512vnni`, `neon`, `neondot`) caps the level, e.g. to test a slower
//! path; it can never raise it above what the machine supports, and a level
//! of the other architecture caps nothing.

use std::sync::OnceLock;

/// SIMD levels, ordered from slowest to fastest within each architecture
/// (a machine supports the scalar level and those of its own architecture).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Level {
    Scalar,
    /// x86-64: AVX2 + FMA.
    Avx2,
    /// x86-64: AVX-512 F + BW.
    Avx512,
    /// x86-64: AVX-512 F + BW + VNNI (`vpdpbusd`).
    Avx512Vnni,
    /// aarch64: Advanced SIMD.
    Neon,
    /// aarch64: Advanced SIMD + the dot-product extension (`sdot`).
    NeonDot,
}

impl Level {
    pub const ALL: [Level; 6] = [
        Level::Scalar,
        Level::Avx2,
        Level::Avx512,
        Level::Avx512Vnni,
        Level::Neon,
        Level::NeonDot,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Level::Scalar => "scalar",
            Level::Avx2 => "avx2",
            Level::Avx512 => "avx512",
            Level::Avx512Vnni => "avx512vnni",
            Level::Neon => "neon",
            Level::NeonDot => "neondot",
        }
    }

    pub fn parse(name: &str) -> Option<Level> {
        Level::ALL
            .into_iter()
            .find(|l| l.name() == name.trim().to_ascii_lowercase())
    }
}

/// Every level this machine can run, slowest first.
pub fn supported() -> Vec<Level> {
    Level::ALL
        .into_iter()
        .filter(|&l| hardware_supports(l))
        .collect()
}

#[cfg(target_arch = "x86_64")]
fn hardware_supports(level: Level) -> bool {
    match level {
        Level::Scalar => true,
        Level::Avx2 => is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma"),
        Level::Avx512 => {
            is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("avx512bw")
        }
        Level::Avx512Vnni => {
            hardware_supports(Level::Avx512) && is_x86_feature_detected!("avx512vnni")
        }
        Level::Neon | Level::NeonDot => false,
    }
}

#[cfg(target_arch = "aarch64")]
fn hardware_supports(level: Level) -> bool {
    match level {
        Level::Scalar => true,
        Level::Neon => std::arch::is_aarch64_feature_detected!("neon"),
        Level::NeonDot => {
            hardware_supports(Level::Neon) && std::arch::is_aarch64_feature_detected!("dotprod")
        }
        Level::Avx2 | Level::Avx512 | Level::Avx512Vnni => false,
    }
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
fn hardware_supports(level: Level) -> bool {
    level == Level::Scalar
}

/// The best of `supported` (slowest first), lowered to the level named by
/// `request` when that is one of them or scalar (never raised); an unknown
/// name, or a level of another architecture, leaves the best unchanged.
fn capped(supported: &[Level], request: Option<&str>) -> Level {
    let best = supported.iter().copied().max().unwrap_or(Level::Scalar);
    match request.and_then(Level::parse) {
        Some(cap) if supported.contains(&cap) => best.min(cap),
        _ => best,
    }
}

fn detect() -> Level {
    capped(&supported(), std::env::var("SIMCORE_SIMD").ok().as_deref())
}

/// The level in use: the best supported one, capped by `SIMCORE_SIMD`.
pub fn level() -> Level {
    static LEVEL: OnceLock<Level> = OnceLock::new();
    *LEVEL.get_or_init(detect)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scalar_is_always_supported_and_names_round_trip() {
        assert!(supported().contains(&Level::Scalar));
        for l in Level::ALL {
            assert_eq!(Level::parse(l.name()), Some(l));
        }
        assert_eq!(Level::parse("AVX2"), Some(Level::Avx2));
        assert_eq!(Level::parse("sse9"), None);
    }

    #[test]
    fn the_environment_can_lower_the_level_but_never_raise_it() {
        let x86 = [Level::Scalar, Level::Avx2, Level::Avx512, Level::Avx512Vnni];
        assert_eq!(capped(&x86, Some("avx2")), Level::Avx2);
        assert_eq!(capped(&x86, Some("scalar")), Level::Scalar);
        assert_eq!(capped(&x86[..2], Some("avx512vnni")), Level::Avx2);
        assert_eq!(capped(&x86[..2], Some("sse9")), Level::Avx2);
        assert_eq!(capped(&x86[..3], None), Level::Avx512);
        assert_eq!(capped(&x86, Some("neon")), Level::Avx512Vnni);
        let arm = [Level::Scalar, Level::Neon, Level::NeonDot];
        assert_eq!(capped(&arm, Some("neon")), Level::Neon);
        assert_eq!(capped(&arm, Some("scalar")), Level::Scalar);
        assert_eq!(capped(&arm[..2], Some("neondot")), Level::Neon);
        assert_eq!(capped(&arm, Some("avx2")), Level::NeonDot);
    }

    #[test]
    fn chosen_level_is_supported() {
        assert!(supported().contains(&level()));
    }

    /// On an aarch64 machine (or under qemu-aarch64) a NEON level is chosen, not scalar.
    #[cfg(target_arch = "aarch64")]
    #[test]
    fn aarch64_selects_neon() {
        assert!(supported().contains(&Level::Neon));
        let best = supported().into_iter().max();
        assert!(
            matches!(best, Some(Level::Neon | Level::NeonDot)),
            "{best:?}"
        );
        if std::env::var("SIMCORE_SIMD").is_err() {
            assert!(level() >= Level::Neon, "{:?}", level());
        }
    }
}
