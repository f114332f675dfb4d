//! The usual upload body split in one pass over its bytes: every item an
//! object with one `vector` of float32 numbers, all of one length. The
//! vectors are checked strictly here (JSON's number grammar, commas,
//! brackets); every other value is copied to the rest as its raw text and
//! left to the caller's JSON parser to check, as it checks the whole rest.
//! Anything else (an escaped key, a repeated `vector`, a vector that is not
//! all numbers, a length that differs) is not this scanner's to judge: it
//! answers None and `parse` reads the body with serde, which
//! names every problem.

use super::types::{Matrix, Split};

/// The body split, or None when it is not the usual shape (see above).
pub fn split(body: &[u8]) -> Option<Split> {
    let mut s = Scan { b: body, i: 0 };
    let mut out = Out {
        rest: Vec::with_capacity(body.len() / 8 + 64),
        values: Vec::new(),
        dim: None,
        rows: 0,
    };
    let mut field = None;
    s.ws();
    s.expect(b'{')?;
    out.rest.push(b'{');
    let mut first = true;
    loop {
        let key = s.member_key()?;
        if !first {
            out.rest.push(b',');
        }
        first = false;
        out.rest.extend_from_slice(key);
        out.rest.push(b':');
        let name = &key[1..key.len() - 1];
        if name == b"items" || name == b"vectors" {
            if field.is_some() {
                return None; // both, or one twice: serde's reading decides
            }
            field = Some(if name == b"items" { "items" } else { "vectors" });
            items(&mut s, &mut out)?;
        } else {
            s.copy_value(&mut out.rest)?;
        }
        if !s.more_members()? {
            break;
        }
    }
    out.rest.push(b'}');
    s.ws();
    if s.i != body.len() {
        return None;
    }
    let matrix = Matrix {
        rows: out.rows,
        dim: out.dim?,
        values: out.values,
    };
    Some(Split {
        field: field?,
        rest: out.rest,
        vectors: Ok(Some(matrix)),
    })
}

struct Out {
    rest: Vec<u8>,
    values: Vec<f32>,
    dim: Option<usize>,
    rows: usize,
}

/// `[ item, ... ]`, at least one.
fn items(s: &mut Scan, out: &mut Out) -> Option<()> {
    s.expect(b'[')?;
    out.rest.push(b'[');
    loop {
        s.ws();
        item(s, out)?;
        out.rows += 1;
        s.ws();
        match s.next()? {
            b',' => out.rest.push(b','),
            b']' => {
                out.rest.push(b']');
                return Some(());
            }
            _ => return None,
        }
    }
}

/// `{ ..., "vector": [numbers], ... }`: the vector to the matrix, the rest
/// of the object to `out.rest`.
fn item(s: &mut Scan, out: &mut Out) -> Option<()> {
    s.expect(b'{')?;
    out.rest.push(b'{');
    let mut seen_vector = false;
    let mut first = true;
    loop {
        let key = s.member_key()?;
        if key == b"\"vector\"" {
            if seen_vector {
                return None;
            }
            seen_vector = true;
            let len = numbers(s, &mut out.values)?;
            match out.dim {
                None => out.dim = Some(len),
                Some(dim) if dim != len => return None,
                Some(_) => {}
            }
        } else {
            if !first {
                out.rest.push(b',');
            }
            first = false;
            out.rest.extend_from_slice(key);
            out.rest.push(b':');
            s.copy_value(&mut out.rest)?;
        }
        if !s.more_members()? {
            break;
        }
    }
    out.rest.push(b'}');
    seen_vector.then_some(())
}

/// `[n, n, ...]` of at least one JSON number, each within float32; their
/// count. Parsed as Python's float would (correctly rounded f64), then
/// narrowed.
fn numbers(s: &mut Scan, values: &mut Vec<f32>) -> Option<usize> {
    s.expect(b'[')?;
    let start_len = values.len();
    loop {
        s.ws();
        let narrowed = s.number()? as f32;
        if !narrowed.is_finite() {
            return None;
        }
        values.push(narrowed);
        s.ws();
        match s.next()? {
            b',' => continue,
            b']' => return Some(values.len() - start_len),
            _ => return None,
        }
    }
}

/// Every number of one vector's raw JSON text (`[n, ...]`, at least one,
/// each within float32) appended to `values`, read as `split` reads them;
/// false when the text is anything else (`values` may then hold part of it).
pub(crate) fn vector_numbers(text: &[u8], values: &mut Vec<f32>) -> bool {
    let mut s = Scan { b: text, i: 0 };
    s.ws();
    if numbers(&mut s, values).is_none() {
        return false;
    }
    s.ws();
    s.i == text.len()
}

/// Powers of ten an f64 holds exactly.
const EXACT_POWERS: [f64; 23] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16,
    1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
];

struct Scan<'a> {
    b: &'a [u8],
    i: usize,
}

impl<'a> Scan<'a> {
    fn ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.b.get(self.i) {
            self.i += 1;
        }
    }

    fn next(&mut self) -> Option<u8> {
        let c = *self.b.get(self.i)?;
        self.i += 1;
        Some(c)
    }

    fn expect(&mut self, c: u8) -> Option<()> {
        (self.next()? == c).then_some(())
    }

    /// One number in JSON's grammar, as the f64 nearest to it. Its digits
    /// are read once: with at most 2^53 as the digits' integer and a power of
    /// ten up to 22, one exact multiplication or division rounds correctly
    /// (Clinger's fast path); anything longer goes to fast-float2. An integer
    /// zero written "-0" is 0, as JSON parsers read it.
    fn number(&mut self) -> Option<f64> {
        let start = self.i;
        let negative = self.b.get(self.i) == Some(&b'-');
        if negative {
            self.i += 1;
        }
        let mut mantissa: u64 = 0;
        let mut exact = true; // every digit is in `mantissa`
        let mut exponent: i32 = 0;
        let mut digit = |d: u8, mantissa: &mut u64| {
            if *mantissa < 1 << 53 {
                *mantissa = *mantissa * 10 + u64::from(d - b'0');
            } else {
                exact = false;
            }
        };
        match self.b.get(self.i)? {
            b'0' => self.i += 1,
            b'1'..=b'9' => {
                while let Some(&d @ b'0'..=b'9') = self.b.get(self.i) {
                    digit(d, &mut mantissa);
                    self.i += 1;
                }
            }
            _ => return None,
        }
        let mut integer = true;
        if self.b.get(self.i) == Some(&b'.') {
            self.i += 1;
            integer = false;
            let first = self.i;
            while let Some(&d @ b'0'..=b'9') = self.b.get(self.i) {
                digit(d, &mut mantissa);
                exponent -= 1;
                self.i += 1;
            }
            (self.i > first).then_some(())?;
        }
        if let Some(b'e' | b'E') = self.b.get(self.i) {
            self.i += 1;
            integer = false;
            let sign = match self.b.get(self.i) {
                Some(b'-') => {
                    self.i += 1;
                    -1
                }
                Some(b'+') => {
                    self.i += 1;
                    1
                }
                _ => 1,
            };
            let first = self.i;
            let mut written: i32 = 0;
            while let Some(&d @ b'0'..=b'9') = self.b.get(self.i) {
                written = written
                    .saturating_mul(10)
                    .saturating_add(i32::from(d - b'0'));
                self.i += 1;
            }
            (self.i > first).then_some(())?;
            exponent = exponent.saturating_add(sign * written);
        }
        if integer && mantissa == 0 {
            return Some(0.0);
        }
        let power = exponent.unsigned_abs() as usize;
        let value = if exact && mantissa <= 1 << 53 && power < EXACT_POWERS.len() {
            let m = mantissa as f64;
            if exponent >= 0 {
                m * EXACT_POWERS[power]
            } else {
                m / EXACT_POWERS[power]
            }
        } else {
            let unsigned = fast_float2::parse::<f64, _>(&self.b[start + negative as usize..self.i]);
            unsigned.ok()?
        };
        let value = if negative { -value } else { value };
        value.is_finite().then_some(value)
    }

    /// An object member's key and the colon after it, blanks around them.
    fn member_key(&mut self) -> Option<&'a [u8]> {
        self.ws();
        let key = self.key()?;
        self.ws();
        self.expect(b':')?;
        self.ws();
        Some(key)
    }

    /// After a member: true at a comma, false at the object's end.
    fn more_members(&mut self) -> Option<bool> {
        self.ws();
        match self.next()? {
            b',' => Some(true),
            b'}' => Some(false),
            _ => None,
        }
    }

    /// One value copied to `out` as written (see `skip_value`).
    fn copy_value(&mut self, out: &mut Vec<u8>) -> Option<()> {
        let start = self.i;
        self.skip_value()?;
        out.extend_from_slice(&self.b[start..self.i]);
        Some(())
    }

    /// A key with its quotes, as written; None for one with an escape.
    fn key(&mut self) -> Option<&'a [u8]> {
        let start = self.i;
        self.expect(b'"')?;
        loop {
            match self.next()? {
                b'"' => {
                    let b: &'a [u8] = self.b;
                    return Some(&b[start..self.i]);
                }
                b'\\' => return None,
                _ => {}
            }
        }
    }

    /// Past one value, without checking it (the caller's parser does): a
    /// string to its closing quote, an array or object to its closing
    /// bracket (brackets inside strings not counted), else to the next
    /// delimiter.
    fn skip_value(&mut self) -> Option<()> {
        let start = self.i;
        let mut depth = 0usize;
        loop {
            match self.next()? {
                b'"' => self.skip_string()?,
                b'[' | b'{' => depth += 1,
                b']' | b'}' if depth > 0 => depth -= 1,
                b',' | b']' | b'}' | b' ' | b'\t' | b'\n' | b'\r' if depth == 0 => {
                    self.i -= 1;
                    return (self.i > start).then_some(());
                }
                _ => {}
            }
            if depth == 0 && matches!(self.b[self.i - 1], b'"' | b']' | b'}') {
                return Some(());
            }
        }
    }

    /// Past a string whose opening quote was read.
    fn skip_string(&mut self) -> Option<()> {
        loop {
            match self.next()? {
                b'"' => return Some(()),
                b'\\' => {
                    self.next()?;
                }
                _ => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::upload::split_upload;

    fn same_as_serde(body: &str) {
        let fast = split(body.as_bytes()).expect("the usual shape");
        let slow = crate::upload::split_with_serde(body.as_bytes()).expect("serde reads it");
        assert_eq!(fast.field, slow.field);
        assert_eq!(fast.vectors, slow.vectors);
        let parse = |b: &[u8]| serde_json::from_slice::<serde_json::Value>(b).unwrap();
        assert_eq!(parse(&fast.rest), parse(&slow.rest), "{body}");
    }

    #[test]
    fn the_usual_bodies_split_as_serde_splits_them() {
        same_as_serde(r#"{"store_mode":"vector","items":[{"id":"a","vector":[1,2.5,-3e-2]}]}"#);
        same_as_serde(
            r#" { "items" : [ { "vector" : [ 0.1 , -0 , -0.0 , 1E+2 ] , "id" : "x" ,
                "metadata" : {"a": [1, "]}", {"b": "\"}"}], "c": null}, "text": "q\"\\"},
                {"id": "y", "vector": [1, 2, 3, 4], "n": -1.5e3, "t": true} ], "z": [] } "#,
        );
        same_as_serde(r#"{"vectors":[{"id":"a","vector":[16777217]}]}"#);
        // past the fast path: 20 digits, exponents past 22, subnormal and huge f64
        same_as_serde(
            r#"{"items":[{"vector":[0.12345678901234567890123,1e23,-7e-30,1.5e-320,
                3.4028234e38,123456789012345678901234567890,9007199254740993,0.3]}]}"#,
        );
    }

    #[test]
    fn numbers_are_the_nearest_f64_as_std_parses_them() {
        let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for n in 0..200_000 {
            let bits = next();
            let text = match n % 4 {
                0 => format!("{}", f32::from_bits(bits as u32)),
                1 => format!("{:e}", f32::from_bits(bits as u32)),
                2 => format!("{}", f64::from_bits(bits)),
                _ => format!("{}.{}e{}", bits % 1000, bits >> 20, (bits % 60) as i64 - 30),
            };
            let text = text.replace("inf", "1e999").replace("NaN", "0");
            let mut scan = Scan {
                b: text.as_bytes(),
                i: 0,
            };
            let got = scan.number();
            let want: f64 = text.parse().unwrap();
            if want.is_finite() {
                let got = got.unwrap_or_else(|| panic!("{text}"));
                assert_eq!(got.to_bits(), want.to_bits(), "{text}");
                assert_eq!(scan.i, text.len(), "{text}");
            } else {
                assert!(got.is_none(), "{text}");
            }
        }
    }

    #[test]
    fn anything_unusual_is_left_to_serde() {
        for body in [
            r#"{"items":[{"id":"a","vector":[1]},{"id":"b","vector":[1,2]}]}"#,
            r#"{"items":[{"id":"a","vector":[true]}]}"#,
            r#"{"items":[{"id":"a","vector":null}]}"#,
            r#"{"items":[{"id":"a"}]}"#,
            r#"{"items":[{"id":"a","vector":[1],"vector":[2]}]}"#,
            r#"{"items":[{"vec\u0074or":[1]}]}"#,
            r#"{"items":[{"vector":[1]}],"vectors":[]}"#,
            r#"{"items":[]}"#,
            r#"{"items":[{"vector":[]}]}"#,
            r#"{"items":[{"vector":[1e39]}]}"#,
            r#"{"items":[{"vector":[1e999]}]}"#,
            r#"{"items":[{"vector":[01]}]}"#,
            r#"{"items":[{"vector":[1.]}]}"#,
            r#"{"items":[{"vector":[.5]}]}"#,
            r#"{"items":[{"vector":[+1]}]}"#,
            r#"{"items":[{"vector":[1,]}]}"#,
            r#"{"items":[{"vector":[1]},]}"#,
            r#"{"items":[{"vector":[1]}]} x"#,
            r#"{"items":[{"vector":[1]}"#,
            r#"{"items":[{"vector":[1], "t": "unterminated}]}"#,
            r#"[{"vector":[1]}]"#,
        ] {
            assert!(split(body.as_bytes()).is_none(), "{body}");
        }
    }

    #[test]
    fn a_malformed_other_value_reaches_the_rest_as_written() {
        let s = split(br#"{"items":[{"vector":[1],"t":tru}],"x":[1,}}"#).expect("scanned");
        assert!(serde_json::from_slice::<serde_json::Value>(&s.rest).is_err());
        assert!(split_upload(br#"{"items":[{"vector":[1],"t":tru}]}"#).is_some());
    }
}
