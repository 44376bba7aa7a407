//! Wall-clock formatting for humans and logs: unix milliseconds → ISO-8601 UTC, or a date and
//! time of day in a zone given as an offset; the calendar is jiff's. Pure: the machine's own zone is read by
//! [`crate::clock::local_offset`] and handed in as a [`LocalOffset`].

/// The machine's offset from UTC at an instant (unix ms), in seconds east; `None` when it cannot
/// be told. [`crate::clock::local_offset`] is the real one; tests pass fixed ones.
pub type LocalOffset = fn(u64) -> Option<i32>;

/// Largest instant formatted (9999-12-31T23:59:59.999Z); later ones are clamped to it.
const MAX_MS: u64 = 253_402_300_799_999;

/// `YYYY-MM-DDTHH:MM:SS.mmmZ` for unix milliseconds (clamped to year 9999).
pub fn iso_utc(ms: u64) -> String {
    let ms = ms.min(MAX_MS);
    let secs = ms / 1000;
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        ms % 1000
    )
}

/// `YYYY-MM-DDTHH:MM:SSZ` (whole seconds, rounded down), for JSON fields people read too.
pub fn iso_utc_seconds(ms: u64) -> String {
    format!("{}Z", wall(ms, 0).replace(' ', "T"))
}

/// `YYYY-MM-DD HH:MM:SS` at `offset_s` seconds east of UTC (milliseconds dropped; clamped to
/// the years 1970–9999).
pub fn wall(ms: u64, offset_s: i32) -> String {
    let secs = i64::try_from(ms.min(MAX_MS) / 1000).unwrap_or(0) + i64::from(offset_s);
    let secs = u64::try_from(secs).unwrap_or(0).min(MAX_MS / 1000);
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// `±HH:MM` for an offset in seconds east of UTC.
pub fn offset(offset_s: i32) -> String {
    let sign = if offset_s < 0 { '-' } else { '+' };
    let abs = offset_s.unsigned_abs();
    format!("{sign}{:02}:{:02}", abs / 3600, abs % 3600 / 60)
}

/// An instant in the machine's local time and in UTC:
/// `2026-12-01 14:36:54 -05:00 (2026-12-01 19:36:54 UTC)`; only the UTC part when the local
/// offset is unknown (`local` is `None` or cannot tell).
pub fn local_and_utc(ms: u64, local: Option<LocalOffset>) -> String {
    let utc = format!("{} UTC", wall(ms, 0));
    match local.and_then(|f| f(ms)) {
        Some(off) => format!("{} {} ({utc})", wall(ms, off), offset(off)),
        None => utc,
    }
}

/// Proleptic Gregorian (year, month, day) of a day count since 1970-01-01 (up to 9999-12-31,
/// which the callers clamp to).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let epoch = jiff::civil::date(1970, 1, 1);
    let date = i64::try_from(days)
        .ok()
        .and_then(|d| epoch.checked_add(jiff::Span::new().try_days(d).ok()?).ok())
        .unwrap_or(jiff::civil::Date::MAX);
    let part = |v: i64| u64::try_from(v).unwrap_or(0);
    (
        part(date.year().into()),
        part(date.month().into()),
        part(date.day().into()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iso_times() {
        assert_eq!(iso_utc(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(iso_utc(68_169_600_000), "1972-02-29T00:00:00.000Z");
        assert_eq!(iso_utc(951_782_400_000), "2000-02-29T00:00:00.000Z");
        assert_eq!(iso_utc(1_234_567_890_001), "2009-02-13T23:31:30.001Z");
        assert_eq!(iso_utc(1_709_210_096_789), "2024-02-29T12:34:56.789Z");
        assert_eq!(iso_utc(4_107_542_399_999), "2100-02-28T23:59:59.999Z");
        assert_eq!(iso_utc(253_402_300_799_999), "9999-12-31T23:59:59.999Z");
        assert_eq!(iso_utc(u64::MAX), "9999-12-31T23:59:59.999Z");
    }

    #[test]
    fn local_and_utc_times() {
        // 2026-12-01T19:36:54.999Z, the reset of the 1308 body.
        let t = 1_796_153_814_999;
        assert_eq!(wall(t, 0), "2026-12-01 19:36:54");
        assert_eq!(wall(t, 8 * 3600), "2026-12-02 03:36:54");
        assert_eq!(iso_utc_seconds(t), "2026-12-01T19:36:54Z");
        assert_eq!(offset(-5 * 3600), "-05:00");
        assert_eq!(offset(5 * 3600 + 45 * 60), "+05:45");
        assert_eq!(offset(0), "+00:00");
        assert_eq!(
            local_and_utc(t, Some(|_| Some(-5 * 3600))),
            "2026-12-01 14:36:54 -05:00 (2026-12-01 19:36:54 UTC)"
        );
        assert_eq!(
            local_and_utc(t, Some(|_| Some(0))),
            "2026-12-01 19:36:54 +00:00 (2026-12-01 19:36:54 UTC)"
        );
        assert_eq!(local_and_utc(t, Some(|_| None)), "2026-12-01 19:36:54 UTC");
        assert_eq!(local_and_utc(t, None), "2026-12-01 19:36:54 UTC");
        // Out of range: clamped, never a panic.
        assert_eq!(wall(0, -3600), "1970-01-01 00:00:00");
        assert_eq!(wall(u64::MAX, 14 * 3600), "9999-12-31 23:59:59");
    }

    #[test]
    fn civil_dates_round_trip_day_by_day() {
        // Every day from 1970 to 2500 follows the previous one.
        let mut prev = civil_from_days(0);
        assert_eq!(prev, (1970, 1, 1));
        for days in 1..194_000 {
            let cur = civil_from_days(days);
            let (y, m, d) = prev;
            let leap = y % 4 == 0 && (y % 100 != 0 || y % 400 == 0);
            let month_len = match m {
                2 if leap => 29,
                2 => 28,
                4 | 6 | 9 | 11 => 30,
                _ => 31,
            };
            let expected = if d < month_len {
                (y, m, d + 1)
            } else if m < 12 {
                (y, m + 1, 1)
            } else {
                (y + 1, 1, 1)
            };
            assert_eq!(cur, expected, "day {days}");
            prev = cur;
        }
    }
}
