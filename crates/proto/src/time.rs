//! Timestamps: milliseconds since the Unix epoch, written as RFC 3339 UTC with milliseconds and
//! `Z` (what JavaScript's `toISOString` writes), read from any RFC 3339 form.
//!
//! Nothing here reads a clock: `now` is always a parameter.

use std::fmt;

use crate::error::Error;

/// An instant, in whole milliseconds since 1970-01-01T00:00:00Z.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(pub i64);

/// Earliest and latest instants we accept (years 0000 and 9999, as `toISOString` can write).
const MIN_MS: i64 = -62_167_219_200_000;
const MAX_MS: i64 = 253_402_300_799_999;

impl Timestamp {
    pub const fn from_millis(ms: i64) -> Self {
        Timestamp(ms)
    }

    pub const fn millis(self) -> i64 {
        self.0
    }

    /// This instant plus `ms` (saturating).
    pub const fn plus_ms(self, ms: i64) -> Self {
        Timestamp(self.0.saturating_add(ms))
    }

    /// Parses RFC 3339 (`YYYY-MM-DDTHH:MM:SS[.fff…](Z|±HH:MM)`); fractions below a millisecond
    /// are truncated. Also accepts a plain date `YYYY-MM-DD` as its midnight UTC.
    pub fn parse(text: &str) -> Result<Timestamp, Error> {
        parse_rfc3339(text).ok_or_else(|| Error::malformed(format!("not an RFC 3339 timestamp: {text:?}")))
    }

    /// `YYYY-MM-DDTHH:MM:SS.mmmZ`.
    pub fn to_rfc3339(self) -> String {
        let c = self.civil();
        let (h, mi, s, milli) =
            (c.ms_of_day / 3_600_000, c.ms_of_day / 60_000 % 60, c.ms_of_day / 1000 % 60, c.ms_of_day % 1000);
        format!("{:04}-{:02}-{:02}T{h:02}:{mi:02}:{s:02}.{milli:03}Z", c.year, c.month, c.day)
    }

    /// The UTC calendar date and time of day (clamped to years 0000–9999, as [`Timestamp::to_rfc3339`]).
    pub fn civil(self) -> Civil {
        let ms = self.0.clamp(MIN_MS, MAX_MS);
        let days = ms.div_euclid(86_400_000);
        let (year, month, day) = civil_from_days(days);
        // 1970-01-01 was a Thursday: 0 = Monday … 6 = Sunday.
        let weekday = (days + 3).rem_euclid(7);
        Civil { year, month, day, weekday, ms_of_day: ms.rem_euclid(86_400_000) }
    }
}

/// A [`Timestamp`] as a UTC calendar date and time of day.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Civil {
    pub year: i64,
    /// 1–12.
    pub month: i64,
    /// 1–31.
    pub day: i64,
    /// 0 = Monday … 6 = Sunday.
    pub weekday: i64,
    pub ms_of_day: i64,
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_rfc3339())
    }
}

fn num(text: &[u8], from: usize, len: usize) -> Option<i64> {
    let digits = text.get(from..from + len)?;
    digits.iter().try_fold(0i64, |acc, c| c.is_ascii_digit().then(|| acc * 10 + i64::from(c - b'0')))
}

fn parse_rfc3339(text: &str) -> Option<Timestamp> {
    let t = text.as_bytes();
    let (year, month, day) = (num(t, 0, 4)?, num(t, 5, 2)?, num(t, 8, 2)?);
    if t.get(4) != Some(&b'-') || t.get(7) != Some(&b'-') {
        return None;
    }
    if !(1..=12).contains(&month) || day < 1 || day > days_in_month(year, month) {
        return None;
    }
    let days = days_from_civil(year, month, day);
    if t.len() == 10 {
        return Some(Timestamp(days * 86_400_000));
    }
    if !matches!(t.get(10), Some(b'T' | b't' | b' ')) || t.get(13) != Some(&b':') || t.get(16) != Some(&b':') {
        return None;
    }
    let (h, mi, s) = (num(t, 11, 2)?, num(t, 14, 2)?, num(t, 17, 2)?);
    // Leap seconds (60) are folded into the next second, as JavaScript does.
    if h > 23 || mi > 59 || s > 60 {
        return None;
    }
    let mut pos = 19;
    let mut millis = 0i64;
    if t.get(pos) == Some(&b'.') {
        pos += 1;
        let start = pos;
        while t.get(pos).is_some_and(u8::is_ascii_digit) {
            if pos - start < 3 {
                millis = millis * 10 + i64::from(t.get(pos).copied().unwrap_or(b'0') - b'0');
            }
            pos += 1;
        }
        let n = pos - start;
        if n == 0 {
            return None;
        }
        for _ in n..3 {
            millis *= 10;
        }
    }
    let offset_min = match t.get(pos) {
        Some(b'Z' | b'z') if t.len() == pos + 1 => 0,
        Some(sign @ (b'+' | b'-')) if t.len() == pos + 6 && t.get(pos + 3) == Some(&b':') => {
            let (oh, om) = (num(t, pos + 1, 2)?, num(t, pos + 4, 2)?);
            if oh > 23 || om > 59 {
                return None;
            }
            let m = oh * 60 + om;
            if *sign == b'-' { -m } else { m }
        }
        _ => return None,
    };
    let ms = days * 86_400_000 + ((h * 60 + mi - offset_min) * 60 + s) * 1000 + millis;
    (MIN_MS..=MAX_MS).contains(&ms).then_some(Timestamp(ms))
}

fn is_leap(y: i64) -> bool {
    (y % 4 == 0 && y % 100 != 0) || y % 400 == 0
}

fn days_in_month(y: i64, m: i64) -> i64 {
    match m {
        2 if is_leap(y) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 for a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (if m <= 2 { yoe + era * 400 + 1 } else { yoe + era * 400 }, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_like_to_iso_string() {
        assert_eq!(Timestamp(0).to_rfc3339(), "1970-01-01T00:00:00.000Z");
        assert_eq!(Timestamp(1_788_548_400_123).to_rfc3339(), "2026-09-04T19:00:00.123Z");
        assert_eq!(Timestamp(951_782_400_000).to_rfc3339(), "2000-02-29T00:00:00.000Z");
    }

    #[test]
    fn reads_any_rfc3339() {
        let t = Timestamp(1_788_548_400_000);
        for s in [
            "2026-09-04T19:00:00Z",
            "2026-09-04T19:00:00.000Z",
            "2026-09-04T21:00:00+02:00",
            "2026-09-04t19:00:00.0004z",
            "2026-09-04T16:30:00-02:30",
        ] {
            assert_eq!(Timestamp::parse(s).ok(), Some(t), "{s}");
        }
        assert_eq!(
            Timestamp::parse("2026-09-04").map(|t| t.to_rfc3339()).ok().as_deref(),
            Some("2026-09-04T00:00:00.000Z")
        );
        for bad in [
            "2026-02-30T00:00:00Z",
            "2026-09-04T19:00:00",
            "2026-09-04T24:00:00Z",
            "x",
            "2026-09-04T19:00:00.Z",
            "2026-09-04T19:00:00Z ",
        ] {
            assert!(Timestamp::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn round_trips() {
        for ms in [0, 1, -1, 86_399_999, 1_700_000_000_000, MAX_MS, MIN_MS] {
            assert_eq!(Timestamp::parse(&Timestamp(ms).to_rfc3339()).ok(), Some(Timestamp(ms)));
        }
    }
}
