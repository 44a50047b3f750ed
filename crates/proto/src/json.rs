//! JSON values, a strict parser, and the canonical form (RFC 8785 semantics).
//!
//! The parser accepts RFC 8259 JSON and refuses what would make two readers see different
//! documents: duplicate keys at any depth, lone surrogates, numbers that overflow or lose
//! integer precision, nesting deeper than [`limits::MAX_JSON_DEPTH`], input over the caller's
//! byte limit. [`Value::canonical`] writes what JavaScript's sorted, compact `JSON.stringify`
//! writes: keys ordered by UTF-16 code units, ES6 number formatting, minimal string escaping.

use std::borrow::Cow;
use std::cmp::Ordering;
use std::fmt::Write as _;
use std::ops::Range;

use crate::error::Error;
use crate::kind::ErrorKind;
use crate::limits;
use crate::refusal::Refusal;
use crate::vecmap::{VecMap, sort_by};

/// A JSON object: its members in key order (UTF-8 bytes), keys unique by construction; canonical
/// order (UTF-16) is applied when writing.
pub type Object = VecMap<String, Value>;

/// A JSON value. Numbers are IEEE-754 doubles, exactly as JavaScript holds them.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Null,
    Bool(bool),
    Number(f64),
    String(String),
    Array(Vec<Value>),
    Object(Object),
}

/// The largest integer every JSON reader represents exactly (2^53 - 1), where the limits keep it.
pub use crate::limits::MAX_SAFE_INTEGER;

impl Value {
    /// Parses `input` strictly, refusing anything longer than `max_bytes`.
    pub fn parse(input: &[u8], max_bytes: usize) -> Result<Value, Error> {
        Ok(Parser::new(json_text(input, max_bytes)?, None).document()?.0)
    }

    /// Parses a document that must be a JSON object; `what` names it in the error.
    pub fn parse_object(input: &[u8], max_bytes: usize, what: &str) -> Result<Object, Error> {
        match Value::parse(input, max_bytes)? {
            Value::Object(o) => Ok(o),
            _ => Err(Refusal::BadJson.because(format!("{what} must be a JSON object"))),
        }
    }

    /// Parses a UTF-8 string with the default document limit.
    pub fn parse_str(input: &str) -> Result<Value, Error> {
        Value::parse(input.as_bytes(), limits::MAX_ENVELOPE_BYTES)
    }

    /// The canonical bytes of this value.
    pub fn canonical(&self) -> Vec<u8> {
        let mut out = String::new();
        write_canonical(self, &mut out);
        out.into_bytes()
    }

    /// The canonical text of this value.
    pub fn canonical_string(&self) -> String {
        let mut out = String::new();
        write_canonical(self, &mut out);
        out
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_object(&self) -> Option<&Object> {
        match self {
            Value::Object(o) => Some(o),
            _ => None,
        }
    }

    pub fn as_array(&self) -> Option<&[Value]> {
        match self {
            Value::Array(a) => Some(a),
            _ => None,
        }
    }

    /// An integer within the safe range, or `None` for anything else (fractions included).
    pub fn as_safe_integer(&self) -> Option<i64> {
        match self {
            Value::Number(n) if n.fract() == 0.0 && n.abs() <= MAX_SAFE_INTEGER as f64 => {
                // Exact: the value is integral and within 2^53.
                Some(*n as i64)
            }
            _ => None,
        }
    }

    pub fn is_null(&self) -> bool {
        matches!(self, Value::Null)
    }
}

impl From<&str> for Value {
    fn from(s: &str) -> Self {
        Value::String(s.to_owned())
    }
}

impl From<String> for Value {
    fn from(s: String) -> Self {
        Value::String(s)
    }
}

impl From<i64> for Value {
    fn from(n: i64) -> Self {
        Value::Number(n as f64)
    }
}

impl From<bool> for Value {
    fn from(b: bool) -> Self {
        Value::Bool(b)
    }
}

impl From<Object> for Value {
    fn from(o: Object) -> Self {
        Value::Object(o)
    }
}

impl From<Vec<Value>> for Value {
    fn from(a: Vec<Value>) -> Self {
        Value::Array(a)
    }
}

impl<T: Into<Value>> From<Option<T>> for Value {
    fn from(o: Option<T>) -> Self {
        o.map_or(Value::Null, Into::into)
    }
}

/// Orders two keys by their UTF-16 code units, as RFC 8785 §3.2.3 requires.
pub fn cmp_utf16(a: &str, b: &str) -> Ordering {
    a.encode_utf16().cmp(b.encode_utf16())
}

fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(true) => out.push_str("true"),
        Value::Bool(false) => out.push_str("false"),
        Value::Number(n) => write_number(*n, out),
        Value::String(s) => write_string(s, out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        Value::Object(map) => write_object(map, None, out),
    }
}

/// Whether `a` comes before `b` in canonical order (UTF-16 code units).
fn in_utf16_order(a: &str, b: &str) -> bool {
    if sorts_as_utf16(a) && sorts_as_utf16(b) { a < b } else { cmp_utf16(a, b) == Ordering::Less }
}

/// Whether `key` sorts the same by UTF-8 bytes (an [`Object`]'s order) as by UTF-16 code units.
/// The two orders differ only between characters at U+E000..U+FFFF and beyond U+FFFF, whose UTF-8
/// forms start with a byte of 0xEE or more; keys without such a byte agree in both.
fn sorts_as_utf16(key: &str) -> bool {
    key.bytes().all(|b| b < 0xEE)
}

fn write_object(map: &Object, skip: Option<&str>, out: &mut String) {
    write_object_marking(map, skip, None, out);
}

/// Writes `map` without its member `skip`; returns where the member `mark` was written, as the
/// byte range of `out` whose removal leaves the text `map` has without `mark` (its separating
/// comma included).
fn write_object_marking(
    map: &Object,
    skip: Option<&str>,
    mark: Option<&str>,
    out: &mut String,
) -> Option<Range<usize>> {
    let entries = map.iter().filter(|(k, _)| Some(k.as_str()) != skip);
    out.push('{');
    let span = if map.keys().all(|k| sorts_as_utf16(k)) {
        // The map's own order is already the canonical one: no need to collect and sort.
        write_members(entries, mark, out)
    } else {
        let sorted = sort_by(entries.collect(), |a: &(&String, &Value), b| cmp_utf16(a.0, b.0));
        write_members(sorted.into_iter(), mark, out)
    };
    out.push('}');
    span
}

fn write_members<'a>(
    entries: impl Iterator<Item = (&'a String, &'a Value)>,
    mark: Option<&str>,
    out: &mut String,
) -> Option<Range<usize>> {
    let mut span: Option<Range<usize>> = None;
    for (i, (key, item)) in entries.enumerate() {
        let before = out.len();
        if i > 0 {
            out.push(',');
        }
        let start = out.len();
        write_string(key, out);
        out.push(':');
        write_canonical(item, out);
        if Some(key.as_str()) == mark {
            // Not first: drop it with the comma before it. First: with the comma after it, if any.
            span = Some(if i > 0 { before..out.len() } else { start..out.len() });
        } else if i == 1
            && let Some(s) = span.as_mut()
        {
            s.end = start;
        }
    }
    span
}

/// The canonical bytes of an object, without copying it into a [`Value`].
pub fn canonical_object(map: &Object) -> Vec<u8> {
    let mut out = String::new();
    write_object(map, None, &mut out);
    out.into_bytes()
}

/// The canonical bytes of `map` without its top-level member `skip`: what a signature covers.
pub fn canonical_without(map: &Object, skip: &str) -> Vec<u8> {
    let mut out = String::new();
    write_object(map, Some(skip), &mut out);
    out.into_bytes()
}

/// The canonical text of an object, with what a signature in its top-level member `name` covers:
/// the canonical text without that member, as [`canonical_without`] writes it, is the text with
/// the returned byte range removed (`None`: there is no such member; the text is all of it).
pub fn canonical_marking(map: &Object, name: &str) -> (String, Option<Range<usize>>) {
    let mut out = String::new();
    let span = write_object_marking(map, None, Some(name), &mut out);
    (out, span)
}

/// `input` as text to parse: at most `max_bytes` (413) and UTF-8 (400).
fn json_text(input: &[u8], max_bytes: usize) -> Result<&str, Error> {
    if input.len() > max_bytes {
        return Err(
            Refusal::BodyTooLarge.because(format!("body of {} bytes exceeds the limit of {max_bytes}", input.len()))
        );
    }
    let text = std::str::from_utf8(input).map_err(|_| Refusal::BadJson.because("JSON text is not valid UTF-8"))?;
    Ok(text)
}

/// A JSON text that [`parse_marking`] found to be canonical already, as it came.
#[derive(Debug)]
pub struct AlreadyCanonical<'a> {
    /// The input: exactly what [`canonical_marking`] would write for the parsed value.
    pub text: &'a str,
    /// Where the top-level member named by the caller is in `text`, as [`canonical_marking`]
    /// gives it.
    pub span: Option<Range<usize>>,
}

/// Parses `input` as [`Value::parse`] does, and notes in the same pass whether it is written
/// canonically already: no whitespace, keys in UTF-16 order, strings escaped only where the
/// canonical form escapes, numbers as ES6 writes them. Then its text is its canonical text, with
/// the top-level member `mark` marked as [`canonical_marking`] marks it, and nothing need be
/// written again (an envelope that comes from a house or an agent always is). `None`: it is
/// not; write it with [`canonical_marking`].
pub fn parse_marking<'a>(
    input: &'a [u8],
    max_bytes: usize,
    mark: &str,
) -> Result<(Value, Option<AlreadyCanonical<'a>>), Error> {
    let text = json_text(input, max_bytes)?;
    let (value, canonical, span) = Parser::new(text, Some(mark)).document()?;
    Ok((value, canonical.then_some(AlreadyCanonical { text, span })))
}

/// `label`, a zero byte, then `text` without the byte range `span` (from [`canonical_marking`]),
/// written in one buffer: a signature's framed message (see `crypto::Context::frame`).
pub(crate) fn framed_without_span(label: &str, text: &str, span: Option<&Range<usize>>) -> Vec<u8> {
    let bytes = text.as_bytes();
    let (head, tail) = span.and_then(|s| Some((bytes.get(..s.start)?, bytes.get(s.end..)?))).unwrap_or((bytes, &[]));
    let mut out = Vec::with_capacity(label.len() + 1 + head.len() + tail.len());
    out.extend_from_slice(label.as_bytes());
    out.push(0);
    out.extend_from_slice(head);
    out.extend_from_slice(tail);
    out
}

/// Writes a string as JavaScript's `JSON.stringify` does.
pub fn write_string(s: &str, out: &mut String) {
    out.reserve(s.len() + 2);
    out.push('"');
    // Only `"`, `\` and controls below U+0020 are escaped; everything else, non-ASCII included,
    // is copied as it is, so runs between those ASCII bytes go over in one copy.
    let mut rest = s;
    while let Some(at) = rest.bytes().position(|b| b < 0x20 || b == b'"' || b == b'\\') {
        // `at` is an ASCII byte, so a character boundary; the fallback is never taken.
        let Some((run, tail)) = rest.split_at_checked(at) else {
            rest.chars().for_each(|c| write_char(c, out));
            rest = "";
            break;
        };
        out.push_str(run);
        let mut chars = tail.chars();
        if let Some(c) = chars.next() {
            write_char(c, out);
        }
        rest = chars.as_str();
    }
    out.push_str(rest);
    out.push('"');
}

/// Writes one character of a string, escaped if it is `"`, `\` or a control below U+0020.
fn write_char(c: char, out: &mut String) {
    match c {
        '"' => out.push_str("\\\""),
        '\\' => out.push_str("\\\\"),
        '\u{8}' => out.push_str("\\b"),
        '\u{c}' => out.push_str("\\f"),
        '\n' => out.push_str("\\n"),
        '\r' => out.push_str("\\r"),
        '\t' => out.push_str("\\t"),
        c if (c as u32) < 0x20 => {
            let _ = write!(out, "\\u{:04x}", c as u32);
        }
        c => out.push(c),
    }
}

/// Formats a finite double as ECMAScript's Number::toString (ES2019 §7.1.12.1) does.
pub fn format_number(n: f64) -> String {
    let mut out = String::new();
    write_number(n, &mut out);
    out
}

fn write_number(n: f64, out: &mut String) {
    if n == 0.0 {
        out.push('0'); // also -0
        return;
    }
    if !n.is_finite() {
        // The parser never produces these; JSON.stringify writes null for them.
        out.push_str("null");
        return;
    }
    if n.fract() == 0.0 && n.abs() <= MAX_SAFE_INTEGER as f64 {
        // Below 2^53 every integer is a double of its own, so its shortest digits are its own:
        // what nearly every number in the protocol (amounts, times, counts) is written with.
        let _ = write!(out, "{}", n as i64);
        return;
    }
    write_other_number(n, out);
}

/// Any other finite number, on wasm32 by the host's own `String(n)`: ECMAScript's
/// Number::toString is what RFC 8785 defines the form by, and every wasm32 build of Nyx5 runs
/// inside a JavaScript engine (workerd, Node, a browser). Rust's float formatting, which the
/// native writer ([`write_shortest`]) builds on, is ~9 KB of the Worker's gzipped wasm.
fn write_other_number(n: f64, out: &mut String) {
    #[cfg(target_arch = "wasm32")]
    out.push_str(&js_string(n));
    #[cfg(not(target_arch = "wasm32"))]
    write_shortest(n, out);
}

#[cfg(target_arch = "wasm32")]
#[wasm_bindgen::prelude::wasm_bindgen]
extern "C" {
    #[wasm_bindgen(js_name = String)]
    fn js_string(n: f64) -> String;
    #[wasm_bindgen(js_name = Number)]
    fn js_number(literal: &str) -> f64;
}

/// The double nearest a JSON number literal the grammar has already checked (`integral`: no
/// fraction, no exponent). An integer of at most 15 digits is read here, exactly: what nearly
/// every number in the protocol is. Any other literal goes to Rust's `parse`, or on wasm32 to the
/// host's `Number(literal)`, which rounds to nearest too (every wasm32 build of Nyx5 runs inside a
/// JavaScript engine), sparing the Worker Rust's float parser and its table of powers of five
/// (~10 KB of the wasm, docs/decisions/0067-bundle-back-in-budget.md).
fn read_number(literal: &str, integral: bool) -> Option<f64> {
    let digits = literal.strip_prefix('-').unwrap_or(literal);
    if integral && digits.len() <= 15 {
        // Below 10^15 < 2^53 every integer is a double of its own; `-0` stays negative.
        let mut m: u64 = 0;
        for b in digits.bytes() {
            m = m * 10 + u64::from(b.wrapping_sub(b'0'));
        }
        let n = m as f64;
        return Some(if digits.len() < literal.len() { -n } else { n });
    }
    read_other_number(literal)
}

#[cfg(target_arch = "wasm32")]
fn read_other_number(literal: &str) -> Option<f64> {
    let n = js_number(literal);
    (!n.is_nan()).then_some(n)
}

#[cfg(not(target_arch = "wasm32"))]
fn read_other_number(literal: &str) -> Option<f64> {
    literal.parse().ok()
}

/// ECMAScript's Number::toString in Rust: the shortest digits that round-trip, ties to even,
/// laid out as ES2019 §7.1.12.1 lays them out.
#[cfg(not(target_arch = "wasm32"))]
fn write_shortest(n: f64, out: &mut String) {
    if n < 0.0 {
        out.push('-');
    }
    // Rust's `{:e}` gives the shortest digits that round-trip, e.g. "1.2345e-7".
    let sci = format!("{:e}", n.abs());
    let (mantissa, exp) = sci.split_once('e').unwrap_or((sci.as_str(), "0"));
    let exp = exp.parse::<i32>().unwrap_or(0);
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    let digits = even_on_tie(n.abs(), digits, exp);
    let k = digits.len() as i32;
    // n = 0.digits × 10^point, i.e. the ES spec's `n` is exp + 1.
    let point = exp + 1;
    if k <= point && point <= 21 {
        out.push_str(&digits);
        out.extend(std::iter::repeat_n('0', (point - k) as usize));
    } else if 0 < point && point <= 21 {
        let (int, frac) = digits.split_at(point as usize);
        out.push_str(int);
        out.push('.');
        out.push_str(frac);
    } else if -6 < point && point <= 0 {
        out.push_str("0.");
        out.extend(std::iter::repeat_n('0', (-point) as usize));
        out.push_str(&digits);
    } else {
        let e = point - 1;
        let (first, rest) = digits.split_at(1);
        out.push_str(first);
        if !rest.is_empty() {
            out.push('.');
            out.push_str(rest);
        }
        out.push('e');
        out.push(if e < 0 { '-' } else { '+' });
        let _ = write!(out, "{}", e.abs());
    }
}

/// Rust's shortest digits round an exact tie up; ECMAScript's Number::toString asks, when two
/// shortest digit strings are equally near the value, for the even one (1424953923781206.25
/// is written "1424953923781206.2", not ".3"). `digits` × 10^(exp + 1 - len) is the shortest
/// round-trip form of `abs`; this swaps an odd last digit for its even neighbour on a tie.
#[cfg(not(target_arch = "wasm32"))]
fn even_on_tie(abs: f64, digits: String, exp: i32) -> String {
    let Ok(d) = digits.parse::<u64>() else {
        return digits;
    };
    if d % 2 == 0 || digits.len() > 17 {
        return digits;
    }
    let t = exp - digits.len() as i32; // the midpoint has one digit more than `digits`
    for alt in [d - 1, d + 1] {
        let alt_digits = alt.to_string();
        if alt_digits.len() == digits.len()
            && equals_decimal(abs, d.min(alt) * 10 + 5, t)
            && format!("{alt}e{}", t + 1).parse::<f64>() == Ok(abs)
        {
            return alt_digits.trim_end_matches('0').to_owned();
        }
    }
    digits
}

/// Whether the finite positive double `abs` is exactly `c` × 10^`t`.
#[cfg(not(target_arch = "wasm32"))]
fn equals_decimal(abs: f64, c: u64, t: i32) -> bool {
    // Equality needs 5^t to divide the 53-bit significand (t > 0) or 5^-t to divide `c`
    // (t < 0), so |t| <= 27 and every product below fits in a u128.
    if !(-27..=27).contains(&t) || c == 0 {
        return false;
    }
    let bits = abs.to_bits();
    let biased = ((bits >> 52) & 0x7ff) as i32;
    let fraction = bits & ((1u64 << 52) - 1);
    let (mant, exp2) = if biased == 0 { (fraction, -1074) } else { (fraction | (1u64 << 52), biased - 1075) };
    if mant == 0 {
        return false;
    }
    // mant × 2^exp2 == c × 5^t × 2^t, with the power of five moved to whichever side keeps
    // it a whole number; then compare odd parts and powers of two.
    let pow5 = 5u128.pow(t.unsigned_abs());
    let (lhs, rhs) =
        if t >= 0 { (u128::from(mant), u128::from(c) * pow5) } else { (u128::from(mant) * pow5, u128::from(c)) };
    let (lz, rz) = (lhs.trailing_zeros(), rhs.trailing_zeros());
    lhs >> lz == rhs >> rz && i64::from(exp2) + i64::from(lz) == i64::from(t) + i64::from(rz)
}

struct Parser<'a, 'm> {
    text: &'a [u8],
    /// The same input as text: runs between ASCII delimiters are sliced out of it (a slice at an
    /// ASCII byte is always a character boundary), with no second UTF-8 validation.
    source: &'a str,
    pos: usize,
    /// Whether everything read so far is written as the canonical form writes it. Watched only
    /// when the caller asked for a member to be marked ([`parse_marking`]).
    canonical: bool,
    /// The top-level member whose span [`parse_marking`] reports.
    mark: Option<&'m str>,
    /// Where `mark` is in the input, by [`write_members`]'s rule (meaningful if `canonical`).
    span: Option<Range<usize>>,
}

impl<'a, 'm> Parser<'a, 'm> {
    fn new(source: &'a str, mark: Option<&'m str>) -> Self {
        Parser { text: source.as_bytes(), source, pos: 0, canonical: mark.is_some(), mark, span: None }
    }

    /// The whole input as one value; whether it was canonical, and where `mark` is.
    fn document(mut self) -> Result<(Value, bool, Option<Range<usize>>), Error> {
        self.skip_ws();
        let value = self.value(0)?;
        self.skip_ws();
        if self.pos != self.text.len() {
            return Err(self.fail("trailing characters after the JSON value"));
        }
        Ok((value, self.canonical, self.span))
    }

    fn fail(&self, what: &str) -> Error {
        Refusal::BadJson.because(format!("invalid JSON at byte {}: {what}", self.pos))
    }

    fn peek(&self) -> Option<u8> {
        self.text.get(self.pos).copied()
    }

    fn skip_ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.peek() {
            self.pos += 1;
            self.canonical = false;
        }
    }

    fn expect_literal(&mut self, lit: &str, value: Value) -> Result<Value, Error> {
        let end = self.pos + lit.len();
        if self.text.get(self.pos..end) == Some(lit.as_bytes()) {
            self.pos = end;
            Ok(value)
        } else {
            Err(self.fail("unexpected token"))
        }
    }

    fn value(&mut self, depth: usize) -> Result<Value, Error> {
        match self.peek() {
            None => Err(self.fail("unexpected end of input")),
            Some(b'{') => self.object(depth + 1),
            Some(b'[') => self.array(depth + 1),
            Some(b'"') => Ok(Value::String(self.string()?)),
            Some(b't') => self.expect_literal("true", Value::Bool(true)),
            Some(b'f') => self.expect_literal("false", Value::Bool(false)),
            Some(b'n') => self.expect_literal("null", Value::Null),
            Some(b'-' | b'0'..=b'9') => self.number(),
            Some(_) => Err(self.fail("unexpected character")),
        }
    }

    fn check_depth(&self, depth: usize) -> Result<(), Error> {
        if depth > limits::MAX_JSON_DEPTH {
            Err(self.fail(&format!("nesting deeper than {}", limits::MAX_JSON_DEPTH)))
        } else {
            Ok(())
        }
    }

    fn object(&mut self, depth: usize) -> Result<Value, Error> {
        self.check_depth(depth)?;
        self.pos += 1; // '{'
        // The members as they come, and once one comes out of order, where each later key was:
        // a duplicate is then found when the object ends, by one sort, and named at its place.
        let mut members: Vec<(String, Value)> = Vec::new();
        let mut unordered_from: Option<usize> = None;
        let mut unordered_at: Vec<usize> = Vec::new();
        self.skip_ws();
        if self.peek() == Some(b'}') {
            self.pos += 1;
            return Ok(Value::Object(Object::new()));
        }
        // The top-level object's members are where `mark` may be.
        let marking = if depth == 1 { self.mark } else { None };
        // The previous key, while the text is canonical: as written when it has no escape (an
        // escape is always longer than what it stands for), else decoded.
        let mut previous: Option<Cow<'a, str>> = None;
        let mut index = 0usize;
        loop {
            self.skip_ws();
            if self.peek() != Some(b'"') {
                return Err(self.fail("expected a string key"));
            }
            let key_at = self.pos;
            let key = self.string()?;
            if self.canonical {
                self.canonical = previous.as_deref().is_none_or(|p| in_utf16_order(p, &key));
                previous = match self.source.get(key_at + 1..self.pos - 1) {
                    Some(written) if written.len() == key.len() => Some(Cow::Borrowed(written)),
                    _ => Some(Cow::Owned(key.clone())),
                };
            }
            self.skip_ws();
            if self.peek() != Some(b':') {
                return Err(self.fail("expected ':'"));
            }
            self.pos += 1;
            self.skip_ws();
            let item = self.value(depth)?;
            if let Some(mark) = marking {
                // As `write_members` marks it: with the comma before it, or if first, the one after.
                if key == mark {
                    self.span = Some(if index > 0 { key_at.saturating_sub(1)..self.pos } else { key_at..self.pos });
                } else if index == 1
                    && let Some(span) = self.span.as_mut()
                {
                    span.end = key_at;
                }
            }
            index += 1;
            if unordered_from.is_none() {
                match members.last().map(|(last, _)| last.as_str().cmp(&key)) {
                    None | Some(Ordering::Less) => {}
                    Some(Ordering::Equal) => {
                        self.pos = key_at;
                        return Err(self.fail(&format!("duplicate key {key:?}")));
                    }
                    Some(Ordering::Greater) => unordered_from = Some(members.len()),
                }
            }
            if unordered_from.is_some() {
                unordered_at.push(key_at);
            }
            members.push((key, item));
            self.skip_ws();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b'}') => {
                    self.pos += 1;
                    return match Object::try_from_vec(members) {
                        Ok(map) => Ok(Value::Object(map)),
                        Err((repeat, key)) => {
                            // Only a member out of order repeats a key: those before are ascending.
                            let at = unordered_from.and_then(|from| unordered_at.get(repeat.checked_sub(from)?));
                            self.pos = at.copied().unwrap_or(self.pos);
                            Err(self.fail(&format!("duplicate key {key:?}")))
                        }
                    };
                }
                _ => return Err(self.fail("expected ',' or '}'")),
            }
        }
    }

    fn array(&mut self, depth: usize) -> Result<Value, Error> {
        self.check_depth(depth)?;
        self.pos += 1; // '['
        let mut items = Vec::new();
        self.skip_ws();
        if self.peek() == Some(b']') {
            self.pos += 1;
            return Ok(Value::Array(items));
        }
        loop {
            self.skip_ws();
            items.push(self.value(depth)?);
            self.skip_ws();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b']') => {
                    self.pos += 1;
                    return Ok(Value::Array(items));
                }
                _ => return Err(self.fail("expected ',' or ']'")),
            }
        }
    }

    fn hex4(&mut self) -> Result<u32, Error> {
        let mut v = 0u32;
        for _ in 0..4 {
            let d = match self.peek() {
                Some(c @ b'0'..=b'9') => c - b'0',
                Some(c @ b'a'..=b'f') => c - b'a' + 10,
                Some(c @ b'A'..=b'F') => c - b'A' + 10,
                _ => return Err(self.fail("bad \\u escape")),
            };
            v = v * 16 + u32::from(d);
            self.pos += 1;
        }
        Ok(v)
    }

    fn string(&mut self) -> Result<String, Error> {
        self.pos += 1; // opening quote
        let mut out = String::new();
        loop {
            let start = self.pos;
            while let Some(c) = self.peek() {
                if c == b'"' || c == b'\\' || c < 0x20 {
                    break;
                }
                self.pos += 1;
            }
            // We stopped on ASCII (or the end), so this is a character boundary.
            let run = self.source.get(start..self.pos).ok_or_else(|| self.fail("invalid UTF-8"))?;
            out.push_str(run);
            match self.peek() {
                None => return Err(self.fail("unterminated string")),
                Some(b'"') => {
                    self.pos += 1;
                    return Ok(out);
                }
                Some(b'\\') => {
                    self.pos += 1;
                    let esc = self.peek().ok_or_else(|| self.fail("unterminated escape"))?;
                    self.pos += 1;
                    match esc {
                        b'"' => out.push('"'),
                        b'\\' => out.push('\\'),
                        b'/' => {
                            self.canonical = false;
                            out.push('/');
                        }
                        b'b' => out.push('\u{8}'),
                        b'f' => out.push('\u{c}'),
                        b'n' => out.push('\n'),
                        b'r' => out.push('\r'),
                        b't' => out.push('\t'),
                        b'u' => {
                            let hi = self.hex4()?;
                            let code = if (0xD800..0xDC00).contains(&hi) {
                                if self.text.get(self.pos..self.pos + 2) != Some(b"\\u") {
                                    return Err(self.fail("lone high surrogate"));
                                }
                                self.pos += 2;
                                let lo = self.hex4()?;
                                if !(0xDC00..0xE000).contains(&lo) {
                                    return Err(self.fail("lone high surrogate"));
                                }
                                0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00)
                            } else if (0xDC00..0xE000).contains(&hi) {
                                return Err(self.fail("lone low surrogate"));
                            } else {
                                hi
                            };
                            // The canonical form writes `\u` only for controls that have no short
                            // escape, in lower-case hex.
                            if self.canonical {
                                let hex = self.text.get(self.pos - 4..self.pos).unwrap_or_default();
                                self.canonical = code < 0x20
                                    && !matches!(code, 0x8 | 0x9 | 0xA | 0xC | 0xD)
                                    && !hex.iter().any(u8::is_ascii_uppercase);
                            }
                            out.push(char::from_u32(code).ok_or_else(|| self.fail("bad code point"))?);
                        }
                        _ => return Err(self.fail("unknown escape")),
                    }
                }
                Some(_) => return Err(self.fail("control character in string")),
            }
        }
    }

    fn digits(&mut self) -> usize {
        let start = self.pos;
        while let Some(b'0'..=b'9') = self.peek() {
            self.pos += 1;
        }
        self.pos - start
    }

    fn number(&mut self) -> Result<Value, Error> {
        let start = self.pos;
        if self.peek() == Some(b'-') {
            self.pos += 1;
        }
        match self.peek() {
            Some(b'0') => self.pos += 1,
            Some(b'1'..=b'9') => {
                self.digits();
            }
            _ => return Err(self.fail("bad number")),
        }
        let mut integral = true;
        if self.peek() == Some(b'.') {
            self.pos += 1;
            integral = false;
            if self.digits() == 0 {
                return Err(self.fail("digits expected after '.'"));
            }
        }
        if let Some(b'e' | b'E') = self.peek() {
            self.pos += 1;
            integral = false;
            if let Some(b'+' | b'-') = self.peek() {
                self.pos += 1;
            }
            if self.digits() == 0 {
                return Err(self.fail("digits expected in exponent"));
            }
        }
        let literal = self.source.get(start..self.pos).ok_or_else(|| self.fail("bad number"))?;
        let n = read_number(literal, integral).ok_or_else(|| self.fail("bad number"))?;
        if !n.is_finite() {
            self.pos = start;
            return Err(self.fail("number out of range"));
        }
        // Beyond 2^53 an integer literal must be written as JavaScript writes its double:
        // `9007199254740993` would silently become ...992 and is refused, while
        // `100000000000000000000` (the canonical form of 1e20) reads back exactly.
        if integral && n.abs() > MAX_SAFE_INTEGER as f64 && format_number(n) != literal {
            self.pos = start;
            return Err(self.fail("integer literal beyond 2^53 that loses precision"));
        }
        // A safe integer is written as its digits (the grammar allows no leading zero), but for
        // `-0`; anything else is compared with what ES6 writes.
        if self.canonical {
            let plain = integral && n.abs() <= MAX_SAFE_INTEGER as f64 && literal != "-0";
            self.canonical = plain || format_number(n) == literal;
        }
        Ok(Value::Number(n))
    }
}

/// Small helpers for reading typed fields out of an object with clear errors.
pub mod field {
    use super::{Object, Value};
    use crate::error::Error;
    use crate::refusal::Refusal;

    fn bad(name: &str, what: &str) -> Error {
        Refusal::BadMember.because(format!("field `{name}` {what}"))
    }

    pub fn required<'a>(obj: &'a Object, name: &str) -> Result<&'a Value, Error> {
        obj.get(name).ok_or_else(|| bad(name, "is missing"))
    }

    /// A field that may be absent or `null`.
    pub fn optional<'a>(obj: &'a Object, name: &str) -> Option<&'a Value> {
        obj.get(name).filter(|v| !v.is_null())
    }

    pub fn str<'a>(obj: &'a Object, name: &str) -> Result<&'a str, Error> {
        required(obj, name)?.as_str().ok_or_else(|| bad(name, "must be a string"))
    }

    pub fn opt_str<'a>(obj: &'a Object, name: &str) -> Result<Option<&'a str>, Error> {
        optional(obj, name).map(|v| v.as_str().ok_or_else(|| bad(name, "must be a string or null"))).transpose()
    }

    pub fn object<'a>(obj: &'a Object, name: &str) -> Result<&'a Object, Error> {
        required(obj, name)?.as_object().ok_or_else(|| bad(name, "must be an object"))
    }

    pub fn opt_object<'a>(obj: &'a Object, name: &str) -> Result<Option<&'a Object>, Error> {
        optional(obj, name).map(|v| v.as_object().ok_or_else(|| bad(name, "must be an object or null"))).transpose()
    }

    pub fn array<'a>(obj: &'a Object, name: &str) -> Result<&'a [Value], Error> {
        required(obj, name)?.as_array().ok_or_else(|| bad(name, "must be an array"))
    }

    pub fn opt_array<'a>(obj: &'a Object, name: &str) -> Result<Option<&'a [Value]>, Error> {
        optional(obj, name).map(|v| v.as_array().ok_or_else(|| bad(name, "must be an array or null"))).transpose()
    }

    /// A whole number of tokens (or bits, or bytes): a safe integer, never a fraction.
    pub fn integer(obj: &Object, name: &str) -> Result<i64, Error> {
        required(obj, name)?.as_safe_integer().ok_or_else(|| bad(name, "must be an integer"))
    }

    pub fn opt_integer(obj: &Object, name: &str) -> Result<Option<i64>, Error> {
        optional(obj, name)
            .map(|v| v.as_safe_integer().ok_or_else(|| bad(name, "must be an integer or null")))
            .transpose()
    }

    pub fn opt_bool(obj: &Object, name: &str) -> Result<Option<bool>, Error> {
        match optional(obj, name) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(_) => Err(bad(name, "must be a boolean")),
        }
    }
}

/// Builds an [`Object`] from `(key, value)` pairs: `obj([("a", 1.into())])`; a key given twice
/// keeps its last value.
pub fn obj<const N: usize>(pairs: [(&str, Value); N]) -> Object {
    object_of(&mut pairs.into_iter())
}

/// `obj`'s work, written once for every `N`: `collect()` into a map sorts its input first, and
/// each array length made its own copy of the sort (~2 KB of wasm apiece; benches/README.md,
/// "Bundle").
fn object_of(pairs: &mut dyn Iterator<Item = (&str, Value)>) -> Object {
    let mut object = Object::new();
    for (k, v) in pairs {
        object.insert(k.to_owned(), v);
    }
    object
}

impl Error {
    /// The JSON body sent on the wire. Internal reasons are replaced by a generic text.
    pub fn to_wire(&self) -> Value {
        let reason =
            if self.kind == ErrorKind::Internal { "internal error".to_owned() } else { self.reason.to_string() };
        let mut o = Object::new();
        o.insert("ok".into(), Value::Bool(false));
        o.insert("code".into(), Value::from(i64::from(self.code())));
        let name = if self.kind == ErrorKind::Internal { ErrorKind::Internal.slug() } else { self.name() };
        o.insert("error".into(), Value::from(name));
        o.insert("reason".into(), Value::String(reason));
        Value::Object(o)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_read_as_rust_parses_them() {
        // The integer fast path (and the wasm32 host's `Number`, in its place of `parse`) must
        // give the very double `parse` gives, sign of zero included.
        let mut literals: Vec<String> = [
            "0",
            "-0",
            "1",
            "-1",
            "9",
            "10",
            "42",
            "-42",
            "999999999999999",
            "-999999999999999",
            "1000000000000000",
            "9007199254740992",
            "9007199254740993",
            "100000000000000000000",
            "-100000000000000000000",
            "0.5",
            "-0.0",
            "1e2",
            "1E-7",
            "1.5e+300",
            "1e400",
            "-1e400",
            "1e-400",
            "123456789012345678901234567890",
            "0.1",
            "2.2250738585072014e-308",
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
        let mut x: u64 = 1;
        for digits in 1..=20 {
            for _ in 0..50 {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                let mut lit = (x % 10u64.pow(digits.min(19))).to_string();
                if digits == 20 {
                    lit.push('7');
                }
                literals.push(lit.clone());
                literals.push(format!("-{lit}"));
            }
        }
        for lit in &literals {
            let integral = !lit.contains(['.', 'e', 'E']);
            let want: f64 = lit.parse().unwrap();
            let got = read_number(lit, integral).unwrap();
            assert_eq!(got.to_bits(), want.to_bits(), "{lit}");
        }
    }

    fn canon(s: &str) -> String {
        Value::parse_str(s).map(|v| v.canonical_string()).unwrap_or_else(|e| format!("ERR {e}"))
    }

    #[test]
    fn obj_keeps_every_key_once_with_its_last_value() {
        let o = obj([("b", 1.into()), ("a", 2.into()), ("b", 3.into())]);
        assert_eq!(Value::Object(o).canonical_string(), r#"{"a":2,"b":3}"#);
        assert!(obj([]).is_empty());
    }

    #[test]
    fn orders_keys_by_utf16_and_writes_compact() {
        assert_eq!(canon(r#"{ "b": 1, "a": [true, null] }"#), r#"{"a":[true,null],"b":1}"#);
        // U+1F600 (surrogates D83D..) sorts before U+FB01 in UTF-16, after it in UTF-8.
        assert_eq!(canon("{\"\u{fb01}\":1,\"\u{1f600}\":2}"), "{\"\u{1f600}\":2,\"\u{fb01}\":1}");
    }

    #[test]
    fn refuses_duplicates_depth_and_size() {
        assert!(Value::parse_str(r#"{"a":1,"a":2}"#).is_err());
        assert!(Value::parse_str(r#"{"x":{"a":1,"a":1}}"#).is_err());
        let deep = "[".repeat(33) + &"]".repeat(33);
        assert!(Value::parse_str(&deep).is_err());
        let ok = "[".repeat(32) + &"]".repeat(32);
        assert!(Value::parse_str(&ok).is_ok());
        let e = Value::parse(b"[1,2,3]", 3).unwrap_err();
        assert_eq!(e.refusal(), Some(Refusal::BodyTooLarge));
    }

    #[test]
    fn a_duplicate_is_named_where_it_stands_in_any_order() {
        let reason = |text: &str| Value::parse_str(text).unwrap_err().reason;
        // In order, the repeat is seen at once; out of order, when the object ends.
        assert_eq!(reason(r#"{"a":1,"b":2,"b":3}"#), r#"invalid JSON at byte 13: duplicate key "b""#);
        assert_eq!(reason(r#"{"b":1,"a":2,"b":3}"#), r#"invalid JSON at byte 13: duplicate key "b""#);
        // Two keys repeated out of order: the first repeat in the text is the one named.
        assert_eq!(reason(r#"{"c":1,"b":2,"a":3,"b":4,"c":5}"#), r#"invalid JSON at byte 19: duplicate key "b""#);
        assert_eq!(reason(r#"{"c":1,"b":2,"c":3,"b":4}"#), r#"invalid JSON at byte 13: duplicate key "c""#);
        assert_eq!(reason(r#"{"x":{"z":0,"y":1,"z":2}}"#), r#"invalid JSON at byte 18: duplicate key "z""#);
    }

    #[test]
    fn members_in_any_order_read_as_one_sorted_object() {
        let sorted = Value::parse_str(r#"{"a":1,"b":{"c":2,"d":3},"e":4}"#).unwrap();
        for text in [r#"{"e":4,"b":{"d":3,"c":2},"a":1}"#, r#"{"b":{"c":2,"d":3},"a":1,"e":4}"#] {
            assert_eq!(Value::parse_str(text).unwrap(), sorted, "{text}");
        }
        // 100,000 members in descending order: sorted once when the object ends, not moved
        // one insert at a time (which would be ~5·10⁹ moves).
        let keys: Vec<String> = (0..100_000).rev().map(|i| format!("\"k{i:06}\":0")).collect();
        let text = format!("{{{}}}", keys.join(","));
        let map = Value::parse(text.as_bytes(), text.len()).unwrap().as_object().unwrap().clone();
        assert_eq!(map.len(), 100_000);
        assert!(map.keys().enumerate().all(|(i, k)| *k == format!("k{i:06}")));
    }

    #[test]
    fn nested_objects_count_toward_the_depth_limit_like_arrays() {
        let nested = |n: usize| "{\"a\":".repeat(n) + "1" + &"}".repeat(n);
        let mut at_limit = Value::Number(1.0);
        for _ in 0..limits::MAX_JSON_DEPTH {
            at_limit = Value::Object(obj([("a", at_limit)]));
        }
        assert_eq!(Value::parse_str(&nested(32)), Ok(at_limit));
        // The 33rd '{' is refused where it stands: after 32 times `{"a":`, at byte 160.
        let e = Value::parse_str(&nested(33)).unwrap_err();
        assert_eq!(
            (e.kind, e.reason.as_ref()),
            (crate::ErrorKind::Malformed, "invalid JSON at byte 160: nesting deeper than 32")
        );
        // Objects and arrays share one count.
        let mixed = "[{\"a\":".repeat(16) + "[1]" + &"}]".repeat(16);
        let e = Value::parse_str(&mixed).unwrap_err();
        assert_eq!(e.reason, "invalid JSON at byte 96: nesting deeper than 32");
        assert!(Value::parse_str(&("[{\"a\":".repeat(16) + "1" + &"}]".repeat(16))).is_ok());
    }

    #[test]
    fn opt_bool_gives_a_present_boolean_none_for_absent_or_null_and_refuses_other_values() {
        let o = obj([("yes", true.into()), ("no", false.into()), ("nothing", Value::Null), ("text", "true".into())]);
        assert_eq!(field::opt_bool(&o, "yes"), Ok(Some(true)));
        assert_eq!(field::opt_bool(&o, "no"), Ok(Some(false)));
        assert_eq!(field::opt_bool(&o, "nothing"), Ok(None));
        assert_eq!(field::opt_bool(&o, "absent"), Ok(None));
        let e = field::opt_bool(&o, "text").unwrap_err();
        assert_eq!((e.kind, e.reason.as_ref()), (crate::ErrorKind::Malformed, "field `text` must be a boolean"));
        let e = field::opt_bool(&obj([("n", 1.into())]), "n").unwrap_err();
        assert_eq!(e.reason, "field `n` must be a boolean");
    }

    #[test]
    fn numbers_follow_es6() {
        assert_eq!(format_number(1e21), "1e+21");
        assert_eq!(format_number(1e20), "100000000000000000000");
        assert_eq!(format_number(1.5e-7), "1.5e-7");
        assert_eq!(format_number(0.000001), "0.000001");
        assert_eq!(format_number(-0.0), "0");
        assert_eq!(format_number(123.456), "123.456");
        // Exact ties between two shortest candidates go to the even digit:
        // 1424953923781206.25 and -591340196471289.25 (JCS es6testfile lines 168 and 6552).
        let tie = f64::from_bits(0x4314_3ff3_c1cb_0959);
        assert_eq!(tie, 1424953923781206.0 + 0.25);
        assert_eq!(format_number(tie), "1424953923781206.2");
        let tie = f64::from_bits(0xc300_ce90_f2d1_0fca);
        assert_eq!(tie, -591340196471289.0 - 0.25);
        assert_eq!(format_number(tie), "-591340196471289.2");
        assert_eq!(format_number(0.5), "0.5");
        assert_eq!(format_number(5e-324), "5e-324");
        assert!(Value::parse_str("1e400").is_err());
        assert!(Value::parse_str("9007199254740993").is_err());
        assert!(Value::parse_str("-123123123123123123123123123123").is_err());
        assert_eq!(canon("100000000000000000000"), "100000000000000000000");
        assert_eq!(canon("9007199254740992"), "9007199254740992");
        assert_eq!(canon("1.0"), "1");
    }

    /// The writer before its fast paths: one character at a time, keys sorted by UTF-16.
    fn slow_string(s: &str) -> String {
        let mut out = String::from("\"");
        s.chars().for_each(|c| write_char(c, &mut out));
        out.push('"');
        out
    }

    #[test]
    fn fast_paths_write_what_the_slow_ones_did() {
        let strings = [
            "",
            "plain",
            "\"",
            "a\"b\\c",
            "\u{1}\u{1f}\u{7f}\n",
            "\u{e9}\"\u{20ac}\\\u{1f600}\t",
            "\u{2028}\u{2029}\u{fb01}",
            "ends with \\",
            "\"starts",
        ];
        for s in strings {
            let mut fast = String::new();
            write_string(s, &mut fast);
            assert_eq!(fast, slow_string(s), "{s:?}");
        }
        let keys = ["b", "a", "\u{e000}", "\u{1f600}", "\u{ffff}", "\u{d7ff}", "z\u{10000}", "z\u{e000}"];
        for n in 1..=keys.len() {
            let map: Object = keys.iter().take(n).map(|k| ((*k).to_owned(), Value::Null)).collect();
            let mut sorted: Vec<&String> = map.keys().collect();
            sorted.sort_by(|a, b| cmp_utf16(a, b));
            let slow = format!(
                "{{{}}}",
                sorted.iter().map(|k| format!("{}:null", slow_string(k))).collect::<Vec<_>>().join(",")
            );
            assert_eq!(String::from_utf8(canonical_object(&map)).unwrap(), slow);
        }
    }

    #[test]
    fn marking_a_member_gives_the_text_without_it() {
        let docs = [
            r#"{"signature":{"v":1}}"#,
            r#"{"signature":1,"z":2}"#,
            r#"{"a":1,"signature":[1,{"signature":2}]}"#,
            r#"{"a":1,"signature":"s","z":{"signature":3}}"#,
            r#"{"a":1,"b":"x"}"#,
            r#"{}"#,
            "{\"\u{1f600}\":1,\"signature\":2,\"\u{fb01}\":3}",
            "{\"signature\":2,\"\u{fb01}\":3}",
        ];
        for doc in docs {
            let Value::Object(map) = Value::parse_str(doc).unwrap() else { panic!("{doc}") };
            let (text, span) = canonical_marking(&map, "signature");
            assert_eq!(text.as_bytes(), canonical_object(&map), "{doc}");
            assert_eq!(span.is_some(), map.contains_key("signature"), "{doc}");
            let mut expected = b"label\0".to_vec();
            expected.extend(canonical_without(&map, "signature"));
            assert_eq!(framed_without_span("label", &text, span.as_ref()), expected, "{doc}");
        }
    }

    /// A text is taken as canonical exactly when it is its own canonical form, and then its mark
    /// is where [`canonical_marking`] puts it.
    #[test]
    fn text_already_canonical_is_taken_as_it_is() {
        let docs = [
            (r#"{"signature":{"v":1}}"#, true),
            (r#"{"signature":1,"z":2}"#, true),
            (r#"{"a":1,"signature":[1,{"signature":2}]}"#, true),
            (r#"{"a":1,"signature":"s","z":{"signature":3}}"#, true),
            (r#"{"a":-1.5,"b":"x\n\u001f\"\\","c":[true,false,null,1e+21,0.000001],"d":{}}"#, true),
            ("{\"signature\":2,\"\u{1f600}\":1,\"\u{fb01}\":3}", true),
            ("{\"\u{1f600}\":1,\"signature\":2,\"\u{fb01}\":3}", false),
            (r#"{"\n":1,"\u001f":2,"a":3}"#, true),
            ("{\"a\":\"\u{7f}\u{2028}\",\"b\":{\"signature\":1},\"c\":2}", true),
            (r#"{}"#, true),
            (r#"[1,"signature",{"signature":[]}]"#, true),
            (r#"{"a":1, "b":2}"#, false),
            (" {}", false),
            ("{}\n", false),
            ("[1,\t2]", false),
            (r#"{"b":1,"a":2}"#, false),
            (r#"{"a":1,"a\u0000":2,"\n":3}"#, false),
            ("{\"\u{fb01}\":3,\"\u{1f600}\":1}", false),
            (r#"{"a":"\/"}"#, false),
            (r#"{"a":"\u0041"}"#, false),
            (r#"{"a":"\u001F"}"#, false),
            // Only the escape's own four digits are checked for upper case, not the text before.
            (r#"{"a":"ABCDEFGH\u001f"}"#, true),
            // The space is the first character written as it is.
            (r#"{"a":"\u0020"}"#, false),
            (r#"{"a":"\u000a"}"#, false),
            (r#"{"a":"\u0008"}"#, false),
            (r#"{"a":"\u0009"}"#, false),
            (r#"{"a":"\u000c"}"#, false),
            (r#"{"a":"\u000d"}"#, false),
            (r#"{"a":"\u0022"}"#, false),
            (r#"{"a":"\u005c"}"#, false),
            (r#"{"a":"\u007f"}"#, false),
            (r#"{"a":"\u2028"}"#, false),
            (r#"{"a":"\ud83d\ude00"}"#, false),
            (r#"{"a":1.0}"#, false),
            (r#"{"a":1E2}"#, false),
            (r#"{"a":1e2}"#, false),
            (r#"{"a":-0}"#, false),
            (r#"{"a":1e21}"#, false),
            (r#"{"a\u0062":1}"#, false),
            (r#"{"a":{"c":1,"b":2}}"#, false),
        ];
        for (doc, as_is) in docs {
            let (value, taken) = parse_marking(doc.as_bytes(), 1 << 10, "signature").unwrap();
            assert_eq!(value.canonical_string() == doc, as_is, "{doc}");
            assert_eq!(taken.is_some(), as_is, "{doc}");
            if let (Some(t), Value::Object(map)) = (taken, &value) {
                assert_eq!((t.text.to_owned(), t.span), canonical_marking(map, "signature"), "{doc}");
            }
        }
    }

    #[test]
    fn escapes_like_javascript() {
        assert_eq!(canon(r#""\u0001\u001f/\"\\\b\n""#), r#""\u0001\u001f/\"\\\b\n""#);
        assert_eq!(canon(r#""\u00e9\u20ac""#), "\"é€\"");
        assert!(Value::parse_str(r#""\ud800""#).is_err());
        assert!(Value::parse_str(r#""\udc00x""#).is_err());
    }
}
