//! A JSON upload body split in one pass: every item's `vector` parsed
//! straight from the bytes into one float32 matrix, and the rest of the body
//! (ids, text, metadata, options) handed back as JSON without the vectors, so
//! the caller validates it as before but never makes a number object per
//! value. Other values are copied as their raw JSON text, unchanged.

//!
//! `fast` takes the usual body in one pass over its bytes; `parse` (serde)
//! takes every other one and names every problem.

mod fast;
mod parse;
mod types;

pub use parse::split_with_serde;
pub use types::{Matrix, Problem, Split};

/// Splits an upload body. None when the body is not one this function
/// handles (not a JSON object, no `items` or `vectors` array of objects, both
/// of them, malformed JSON): the caller then parses it the ordinary way,
/// which also gives the ordinary error for it. The rest may still be
/// malformed JSON (the usual shape's scanner copies values unchecked): the
/// caller's parse of it finds that.
pub fn split_upload(body: &[u8]) -> Option<Split> {
    fast::split(body).or_else(|| split_with_serde(body))
}
