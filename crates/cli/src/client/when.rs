//! Times as people type them: RFC 3339 (`2026-09-04T19:00:00Z`, a bare date) or an offset from
//! now, ahead (`+30s`, `+10m`, `+2h`, `+1d`, `+1w`) or back (`-1d`, for `nyx5 find --since`).

use nyx5_proto::Timestamp;

/// The longest offset accepted: ten years.
const MAX_OFFSET_MS: i64 = 10 * 366 * 86_400_000;

/// Reads `text` as an instant, relative offsets counted from `now`.
pub(crate) fn parse(text: &str, now: Timestamp) -> Result<Timestamp, String> {
    let t = text.trim();
    let (sign, rest) = match (t.strip_prefix('+'), t.strip_prefix('-')) {
        (Some(rest), _) => (1, Some(rest)),
        (_, Some(rest)) => (-1, Some(rest)),
        _ => (1, None),
    };
    if let Some(rest) = rest {
        let split = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
        let (digits, unit) = rest.split_at(split);
        let n: i64 = digits.parse().map_err(|_| format!("{text:?}: expected +N followed by s, m, h, d or w"))?;
        let unit_ms = match unit {
            "s" => 1_000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            "w" => 7 * 86_400_000,
            _ => return Err(format!("{text:?}: the unit must be s, m, h, d or w (as in +10m)")),
        };
        let ms = n
            .checked_mul(unit_ms)
            .filter(|ms| *ms <= MAX_OFFSET_MS)
            .ok_or_else(|| format!("{text:?} is too far from now"))?;
        return Ok(now.plus_ms(sign * ms));
    }
    Timestamp::parse(t)
        .map_err(|_| format!("{text:?} is not a time: use RFC 3339 (2026-09-04T19:00:00Z) or +10m, +2h, +1d"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_and_rfc3339() {
        let now = Timestamp(1_000_000);
        assert_eq!(parse("+10m", now), Ok(Timestamp(1_000_000 + 600_000)));
        assert_eq!(parse("+2h", now), Ok(Timestamp(1_000_000 + 7_200_000)));
        assert_eq!(parse("+1d", now), Ok(Timestamp(1_000_000 + 86_400_000)));
        assert_eq!(parse("+30s", now), Ok(Timestamp(1_030_000)));
        assert_eq!(parse("-1s", now), Ok(Timestamp(999_000)));
        assert_eq!(parse("2026-01-01T00:00:00Z", now), Ok(Timestamp(1_767_225_600_000)));
        for bad in ["+", "+10", "+10y", "+-1m", "tomorrow", "+99999999999999d"] {
            assert!(parse(bad, now).is_err(), "{bad}");
        }
    }
}
