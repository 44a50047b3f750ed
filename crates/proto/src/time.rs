//! Timestamps: milliseconds since the Unix epoch, written as RFC 3339 UTC with milliseconds and
//! `Z` (what JavaScript's `toISOString` writes), read from any RFC 3339 form.
//!
//! Nothing here reads a clock: `now` is always a parameter.

use std::fmt;

use crate::error::Error;
use crate::refusal::Refusal;

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
        parse_rfc3339(text).ok_or_else(|| Refusal::BadTimestamp.because(format!("not an RFC 3339 timestamp: {text:?}")))
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

    fn parsed(text: &str) -> Option<i64> {
        Timestamp::parse(text).ok().map(Timestamp::millis)
    }

    /// (millis, text, weekday with 0 = Monday), worked out independently with Python's
    /// `datetime` (`(t - datetime(1970, 1, 1))` in ms, `t.weekday()`); year 0, which `datetime`
    /// lacks, as year 400 less one 400-year cycle of 146 097 days (a whole number of weeks).
    const KNOWN: [(i64, &str, i64); 25] = [
        (-62_167_219_200_000, "0000-01-01T00:00:00.000Z", 5),
        (-62_162_078_400_000, "0000-02-29T12:00:00.000Z", 1),
        (-11_670_998_400_000, "1600-02-29T00:00:00.000Z", 1),
        (-2_203_891_200_001, "1900-02-28T23:59:59.999Z", 2),
        (-2_203_891_200_000, "1900-03-01T00:00:00.000Z", 3),
        (-1, "1969-12-31T23:59:59.999Z", 2),
        (0, "1970-01-01T00:00:00.000Z", 3),
        (951_782_400_000, "2000-02-29T00:00:00.000Z", 1),
        (951_868_800_000, "2000-03-01T00:00:00.000Z", 2),
        (1_709_251_199_999, "2024-02-29T23:59:59.999Z", 3),
        (4_107_542_400_000, "2100-03-01T00:00:00.000Z", 0),
        (13_574_563_200_000, "2400-02-29T00:00:00.000Z", 1),
        (253_402_300_799_999, "9999-12-31T23:59:59.999Z", 4),
        (1_675_209_599_999, "2023-01-31T23:59:59.999Z", 1),
        (1_677_628_799_999, "2023-02-28T23:59:59.999Z", 1),
        (1_680_307_199_999, "2023-03-31T23:59:59.999Z", 4),
        (1_682_899_199_999, "2023-04-30T23:59:59.999Z", 6),
        (1_685_577_599_999, "2023-05-31T23:59:59.999Z", 2),
        (1_688_169_599_999, "2023-06-30T23:59:59.999Z", 4),
        (1_690_847_999_999, "2023-07-31T23:59:59.999Z", 0),
        (1_693_526_399_999, "2023-08-31T23:59:59.999Z", 3),
        (1_696_118_399_999, "2023-09-30T23:59:59.999Z", 5),
        (1_698_796_799_999, "2023-10-31T23:59:59.999Z", 1),
        (1_701_388_799_999, "2023-11-30T23:59:59.999Z", 3),
        (1_704_067_199_999, "2023-12-31T23:59:59.999Z", 6),
    ];

    #[test]
    fn known_instants_write_read_and_display_as_computed_independently() {
        for (ms, text, weekday) in KNOWN {
            let t = Timestamp(ms);
            assert_eq!(t.to_rfc3339(), text);
            assert_eq!(t.to_string(), text);
            assert_eq!(format!("[{t}]"), format!("[{text}]"));
            assert_eq!(parsed(text), Some(ms), "{text}");
            let c = t.civil();
            assert_eq!(c.weekday, weekday, "{text}");
            assert_eq!(c.ms_of_day, ms.rem_euclid(86_400_000), "{text}");
            assert_eq!(format!("{:04}-{:02}-{:02}", c.year, c.month, c.day), text[..10], "{text}");
        }
    }

    #[test]
    fn every_day_of_a_whole_400_year_cycle_converts_both_ways() {
        // 1599-01-01 to 2401-12-31 covers every day of a cycle (and its century and era edges).
        let mut n = days_from_civil(1599, 1, 1);
        assert_eq!(n, -135_505); // Python: date(1599, 1, 1) - date(1970, 1, 1)
        for y in 1599..=2401 {
            for m in 1..=12 {
                for d in 1..=days_in_month(y, m) {
                    assert_eq!(days_from_civil(y, m, d), n, "{y}-{m}-{d}");
                    assert_eq!(civil_from_days(n), (y, m, d), "{n}");
                    n += 1;
                }
            }
        }
        assert_eq!(n, days_from_civil(2402, 1, 1));
        assert_eq!(n, 157_785); // Python: date(2402, 1, 1) - date(1970, 1, 1)
    }

    #[test]
    fn leap_years_are_every_fourth_but_not_centuries_unless_every_fourth_century() {
        for y in [0, 4, 1600, 1996, 2000, 2024, 2400, 9996] {
            assert!(is_leap(y), "{y}");
            assert_eq!(days_in_month(y, 2), 29, "{y}");
        }
        for y in [1, 2, 3, 100, 1700, 1800, 1900, 2023, 2100, 2200, 2300, 9999] {
            assert!(!is_leap(y), "{y}");
            assert_eq!(days_in_month(y, 2), 28, "{y}");
        }
        assert_eq!(parsed("2000-02-29"), Some(951_782_400_000));
        assert_eq!(parsed("2024-02-29T00:00:00Z"), Some(1_709_164_800_000));
        assert_eq!(parsed("0000-02-29T12:00:00Z"), Some(-62_162_078_400_000));
        for bad in ["1900-02-29", "2023-02-29T00:00:00Z", "2100-02-29", "2024-02-30"] {
            assert_eq!(parsed(bad), None, "{bad}");
        }
    }

    #[test]
    fn each_month_ends_on_its_last_day_and_not_one_later() {
        let last = [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
        for (m, days) in (1..=12).zip(last) {
            assert_eq!(days_in_month(2023, m), days, "month {m}");
            assert!(parsed(&format!("2023-{m:02}-{days:02}T23:59:59Z")).is_some(), "2023-{m}-{days}");
            assert_eq!(parsed(&format!("2023-{m:02}-{:02}T00:00:00Z", days + 1)), None, "2023-{m}-{}", days + 1);
            assert_eq!(parsed(&format!("2023-{m:02}-00")), None, "2023-{m}-00");
        }
        for bad in ["2023-00-10", "2023-13-01", "2023-13-01T00:00:00Z", "2023-99-01"] {
            assert_eq!(parsed(bad), None, "{bad}");
        }
    }

    #[test]
    fn the_day_runs_from_00_00_00_to_23_59_59_and_a_leap_second_folds_into_the_next() {
        assert_eq!(parsed("2026-09-04T00:00:00Z"), Some(1_788_480_000_000));
        assert_eq!(parsed("2026-09-04T23:59:59Z"), Some(1_788_566_399_000));
        assert_eq!(parsed("2026-09-04T23:59:60Z"), Some(1_788_566_400_000));
        assert_eq!(parsed("2026-09-05T00:00:00Z"), Some(1_788_566_400_000));
        for bad in [
            "2026-09-04T24:00:00Z",
            "2026-09-04T23:60:00Z",
            "2026-09-04T00:60:00Z",
            "2026-09-04T23:59:61Z",
            "2026-09-04T00:00:61Z",
        ] {
            assert_eq!(parsed(bad), None, "{bad}");
        }
    }

    #[test]
    fn separators_must_each_be_in_their_place() {
        assert_eq!(parsed("2026-09-04 19:00:00Z"), Some(1_788_548_400_000));
        for bad in [
            "2026/09-04T19:00:00Z",
            "2026-09/04T19:00:00Z",
            "2026/09-04",
            "2026-09/04",
            "2026-09-04X19:00:00Z",
            "2026-09-04T19-00:00Z",
            "2026-09-04T19:00-00Z",
            "2026-09-04T19:00:00+02-00",
            "2026-09-04T19:00:00+02:00x",
            "2026-09-04T19:00:00+02:000",
            "2026-09-04T19:00:00+0200",
            "2026-09-04T19:00:00+2:00",
            "2026-09-04T19:00:00+02:0",
            "2026-09-04T19:00:00Zx",
        ] {
            assert_eq!(parsed(bad), None, "{bad}");
        }
    }

    #[test]
    fn fractions_count_in_milliseconds_and_digits_past_the_third_are_dropped() {
        let base = 1_788_548_400_000; // 2026-09-04T19:00:00Z
        for (frac, ms) in [
            ("0", 0),
            ("1", 100),
            ("5", 500),
            ("05", 50),
            ("12", 120),
            ("123", 123),
            ("1239", 123),
            ("999", 999),
            ("9999", 999),
            ("999999999", 999),
            ("007", 7),
            ("0009", 0),
        ] {
            assert_eq!(parsed(&format!("2026-09-04T19:00:00.{frac}Z")), Some(base + ms), ".{frac}");
        }
        assert_eq!(parsed("2026-09-04T21:00:00.123+02:00"), Some(base + 123));
        assert_eq!(parsed("2026-09-04T16:30:00.5-02:30"), Some(base + 500));
        assert_eq!(parsed("2026-09-04T19:00:00.Z"), None);
        assert_eq!(parsed("2026-09-04T19:00:00.12a4Z"), None);
    }

    #[test]
    fn offsets_reach_23_59_either_way_and_no_further() {
        // 23:59 ahead of UTC at 23:59 is midnight UTC; 23:59 behind at midnight is 23:59 UTC.
        assert_eq!(parsed("2026-09-04T23:59:00+23:59"), Some(1_788_480_000_000));
        assert_eq!(parsed("2026-09-04T00:00:00-23:59"), Some(1_788_566_340_000));
        assert_eq!(parsed("2026-09-04T19:00:00+00:00"), Some(1_788_548_400_000));
        assert_eq!(parsed("2026-09-04T19:00:00-00:00"), Some(1_788_548_400_000));
        assert_eq!(parsed("2026-09-04T19:59:00+00:59"), Some(1_788_548_400_000));
        assert_eq!(parsed("2026-09-04T19:00:00z"), Some(1_788_548_400_000));
        for bad in [
            "2026-09-04T19:00:00+24:00",
            "2026-09-04T19:00:00-24:00",
            "2026-09-04T19:00:00+00:60",
            "2026-09-04T19:00:00-23:60",
            "2026-09-04T19:00:00*02:00",
            "2026-09-04T19:00:00+ab:00",
        ] {
            assert_eq!(parsed(bad), None, "{bad}");
        }
    }

    #[test]
    fn years_0000_to_9999_are_accepted_and_not_an_instant_beyond() {
        assert_eq!(parsed("0000-01-01T00:00:00Z"), Some(MIN_MS));
        assert_eq!(parsed("0000-01-01"), Some(MIN_MS));
        assert_eq!(parsed("0000-01-01T00:00:00-00:01"), Some(MIN_MS + 60_000));
        assert_eq!(parsed("0000-01-01T00:00:00+00:01"), None);
        assert_eq!(parsed("9999-12-31T23:59:59.999Z"), Some(MAX_MS));
        assert_eq!(parsed("9999-12-31T23:59:59.999+00:01"), Some(MAX_MS - 60_000));
        assert_eq!(parsed("9999-12-31T23:59:59.999-00:01"), None);
        assert_eq!(parsed("9999-12-31T23:59:60Z"), None);
        for bad in ["10000-01-01T00:00:00Z", "-0001-01-01T00:00:00Z", "+2026-09-04"] {
            assert_eq!(parsed(bad), None, "{bad}");
        }
        // Writing clamps to the same years.
        assert_eq!(Timestamp(MAX_MS + 1).to_rfc3339(), "9999-12-31T23:59:59.999Z");
        assert_eq!(Timestamp(i64::MAX).to_rfc3339(), "9999-12-31T23:59:59.999Z");
        assert_eq!(Timestamp(MIN_MS - 1).to_rfc3339(), "0000-01-01T00:00:00.000Z");
        assert_eq!(Timestamp(i64::MIN).to_rfc3339(), "0000-01-01T00:00:00.000Z");
    }
}
