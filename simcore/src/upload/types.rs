//! What an upload body splits into: its vectors as one matrix, what is
//! wrong with them, and the rest of the body.

/// The body's vectors as rows of one matrix (row i is item i).
#[derive(Debug, Clone, PartialEq)]
pub struct Matrix {
    pub rows: usize,
    pub dim: usize,
    pub values: Vec<f32>,
}

/// What is wrong with the vectors; the message names the item, in the words
/// the element-by-element conversion uses.
#[derive(Debug, Clone, PartialEq)]
pub enum Problem {
    /// Some items carry a vector and some do not.
    Mixed(String),
    /// A vector that is not a list, or holds something other than numbers.
    NotNumbers(String),
    /// A row whose length differs from the first row's.
    Dimension(String),
    /// A number outside the float32 range.
    NonFinite(String),
}

impl Problem {
    pub fn message(&self) -> &str {
        match self {
            Self::Mixed(m) | Self::NotNumbers(m) | Self::Dimension(m) | Self::NonFinite(m) => m,
        }
    }
}

/// A body split into its vectors and the rest.
#[derive(Debug)]
pub struct Split {
    /// The array the vectors came from: `items`, or the legacy `vectors`.
    pub field: &'static str,
    /// The body as JSON with every item's `vector` key removed.
    pub rest: Vec<u8>,
    /// None when no item carries a vector.
    pub vectors: Result<Option<Matrix>, Problem>,
}
