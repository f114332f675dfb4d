//! The crate's one error type; the bindings map each variant to a Python
//! `ValueError` subclass.

use std::fmt;

#[derive(Debug, Clone, PartialEq)]
pub enum SimcoreError {
    /// A vector's length differs from the rows' dimension.
    DimensionMismatch { expected: usize, got: usize },
    /// A NaN or infinity in an input.
    NonFinite { what: &'static str, index: usize },
    /// Anything else malformed about the arguments.
    Invalid(String),
    /// Reading or writing an index's files failed (message names the path).
    Io(String),
}

impl fmt::Display for SimcoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::DimensionMismatch { expected, got } => {
                write!(f, "dimension mismatch: expected {expected}, got {got}")
            }
            Self::NonFinite { what, index } => {
                write!(
                    f,
                    "{what} contains a non-finite value (NaN or inf) at index {index}"
                )
            }
            Self::Invalid(msg) | Self::Io(msg) => f.write_str(msg),
        }
    }
}

impl std::error::Error for SimcoreError {}

/// Rejects NaN and infinities, naming the first offending position.
pub fn check_finite(values: &[f32], what: &'static str) -> Result<(), SimcoreError> {
    match values.iter().position(|v| !v.is_finite()) {
        Some(index) => Err(SimcoreError::NonFinite { what, index }),
        None => Ok(()),
    }
}
