//! CPU feature detection, done once per process.
//!
//! `std::is_x86_feature_detected!` checks both CPUID and that the OS has
//! enabled the register state (XCR0 via `xgetbv`), so a level is only chosen
//! when its instructions can actually run. (Some VMs advertise features such
//! as AMX that the OS does not enable; nothing here uses AMX.)
//!
//! The environment variable `SIMCORE_SIMD` (`scalar`, `avx2`, `avx512`,
//! `avx512vnni`) caps the level, e.g. to test a slower path; it can never
//! raise it above what the machine supports.

use std::sync::OnceLock;

/// SIMD levels, ordered from slowest to fastest.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Level {
    Scalar,
    /// AVX2 + FMA.
    Avx2,
    /// AVX-512 F + BW.
    Avx512,
    /// AVX-512 F + BW + VNNI (`vpdpbusd`).
    Avx512Vnni,
}

impl Level {
    pub const ALL: [Level; 4] = [Level::Scalar, Level::Avx2, Level::Avx512, Level::Avx512Vnni];

    pub fn name(self) -> &'static str {
        match self {
            Level::Scalar => "scalar",
            Level::Avx2 => "avx2",
            Level::Avx512 => "avx512",
            Level::Avx512Vnni => "avx512vnni",
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
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn hardware_supports(level: Level) -> bool {
    level == Level::Scalar
}

/// `best`, lowered to the level named by `request` (never raised); an
/// unknown name leaves `best` unchanged.
fn capped(best: Level, request: Option<&str>) -> Level {
    match request.and_then(Level::parse) {
        Some(cap) => best.min(cap),
        None => best,
    }
}

fn detect() -> Level {
    let best = supported().into_iter().max().unwrap_or(Level::Scalar);
    capped(best, std::env::var("SIMCORE_SIMD").ok().as_deref())
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
        assert_eq!(capped(Level::Avx512Vnni, Some("avx2")), Level::Avx2);
        assert_eq!(capped(Level::Avx512Vnni, Some("scalar")), Level::Scalar);
        assert_eq!(capped(Level::Avx2, Some("avx512vnni")), Level::Avx2);
        assert_eq!(capped(Level::Avx2, Some("sse9")), Level::Avx2);
        assert_eq!(capped(Level::Avx512, None), Level::Avx512);
    }

    #[test]
    fn chosen_level_is_supported() {
        assert!(supported().contains(&level()));
    }
}
