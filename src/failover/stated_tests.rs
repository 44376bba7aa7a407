//! Stated reset times (`stated.rs`): each form exactly, the China rule whatever the machine's
//! zone, the bounds, invalid dates, huge numbers, and the corpus in `fixtures/errors`.

use super::*;

/// 2026-12-01T00:00:00Z, the "now" of these tests.
const NOW: u64 = 1_796_083_200_000;
/// 2026-12-01T19:43:54Z, the Z.AI example of issue 24.
const ZAI_1310: u64 = 1_796_154_234_000;
/// 2026-12-01T19:36:54Z = 2026-12-02 03:36:54 in Beijing, the GLM example of issue 24.
const GLM_1308: u64 = 1_796_153_814_000;

fn read(text: &str) -> Option<Stated> {
    stated_reset(text, NOW)
}

#[track_caller]
fn check(text: &str, at_ms: u64, form: Form, quoted: &str) {
    let s = read(text).unwrap_or_else(|| panic!("nothing read from {text:?}"));
    assert_eq!(
        (s.at_ms, s.form, s.text.as_str()),
        (at_ms, form, quoted),
        "{text}"
    );
}

#[track_caller]
fn none(text: &str) {
    assert_eq!(read(text), None, "{text}");
}

#[test]
fn zoned_times() {
    use Form::Zoned as Z;
    for (text, at, quoted) in [
        (
            "Weekly/Monthly Limit Exhausted. Your limit will reset at 2026-12-01T19:43:54Z",
            ZAI_1310,
            "2026-12-01T19:43:54Z",
        ),
        (
            "5-hour usage limit reached for Token Plan Plus (6596000/6596000 used), resets at 2026-12-02T03:43:54+08:00 (2056)",
            ZAI_1310,
            "2026-12-02T03:43:54+08:00",
        ),
        (
            "reset at 2026-12-01T14:43:54-0500",
            ZAI_1310,
            "2026-12-01T14:43:54-0500",
        ),
        (
            "reset at 2026-12-02T03:43:54+08.",
            ZAI_1310,
            "2026-12-02T03:43:54+08",
        ),
        (
            "reset at 2026-12-01 19:43:54Z",
            ZAI_1310,
            "2026-12-01 19:43:54Z",
        ),
        (
            "reset at 2026-12-01t19:43:54z",
            ZAI_1310,
            "2026-12-01t19:43:54z",
        ),
        (
            "It will reset at 2026-12-02 03:43:54 +0800 CST. We recommend upgrading your plan.",
            ZAI_1310,
            "2026-12-02 03:43:54 +0800",
        ),
        (
            "Resets at 2026-12-01 19:43:54 UTC.",
            ZAI_1310,
            "2026-12-01 19:43:54 UTC",
        ),
        (
            r#"{"resetAt":"2026-12-01T19:43:54GMT"}"#,
            ZAI_1310,
            "2026-12-01T19:43:54GMT",
        ),
        (
            "reset at 2026-12-01T19:43:54.250Z",
            ZAI_1310 + 250,
            "2026-12-01T19:43:54.250Z",
        ),
        // Fractions round up to the millisecond: a hair late is safe, early is not.
        (
            "reset at 2026-12-01T19:43:54.2501Z",
            ZAI_1310 + 251,
            "2026-12-01T19:43:54.2501Z",
        ),
        (
            "reset at 2026-12-01T19:43:54.000000000001Z",
            ZAI_1310 + 1,
            "2026-12-01T19:43:54.000000000001Z",
        ),
        (
            "reset at 2026-12-01T19:43:54,5Z",
            ZAI_1310 + 500,
            "2026-12-01T19:43:54,5Z",
        ),
        // Seconds are optional when a zone is given.
        (
            "Please try after 2026-12-01T19:43Z",
            ZAI_1310 - 54_000,
            "2026-12-01T19:43Z",
        ),
    ] {
        check(text, at, Z, quoted);
    }
}

#[test]
fn zhipus_zoneless_times_are_china_standard_time() {
    use Form::ChinaLocal as C;
    for text in [
        r#"429 {"error":{"code":"1308","message":"已达到 5 小时的使用上限。您的限额将在 2026-12-02 03:36:54 重置。"}}"#,
        r#"429: {"code":"1308","message":"Usage limit reached for 5 hour. Your limit will reset at 2026-12-02 03:36:54"}"#,
        "[1310][Weekly/Monthly Limit Exhausted. Your limit will reset at 2026-12-02 03:36:54]",
        "2026-12-02 03:36:54 后可恢复",
    ] {
        check(text, GLM_1308, C, "2026-12-02 03:36:54");
    }
    // Someone else's zone-less local time (ISO `T`, or no seconds): the zone is unknown.
    none("reset at 2026-12-02T03:36:54");
    none("reset at 2026-12-02 03:36");
}

/// The instants the China rule gives, as constants. Run again by the next test with the
/// machine's zone set elsewhere.
#[test]
fn china_local_instants_are_fixed() {
    let at = |t: &str| read(t).map(|s| s.at_ms);
    assert_eq!(
        at("您的限额将在 2026-12-02 03:36:54 重置。"),
        Some(GLM_1308)
    );
    assert_eq!(
        at("Your limit will reset at 2026-12-02 03:36:54"),
        Some(GLM_1308)
    );
    // Midnight in Beijing is 16:00 the day before in UTC.
    assert_eq!(
        at("您的限额将在 2026-12-02 00:00:00 重置。"),
        Some(GLM_1308 - (3 * 3600 + 36 * 60 + 54) * 1000)
    );
    assert_eq!(at("reset at 2026-12-01T19:43:54Z"), Some(ZAI_1310));
}

/// Nothing here reads `TZ` or the machine's zone: the same text gives the same instant in New
/// York, Beijing and Chatham (UTC+12:45). Setting `TZ` inside this process would race the
/// other test threads (and `set_var` is `unsafe` in edition 2024), so the instants test runs
/// again in a child process with `TZ` set.
#[test]
fn china_local_ignores_the_machines_zone() {
    let exe = std::env::current_exe().expect("the test binary");
    for tz in [
        "America/New_York",
        "Asia/Shanghai",
        "Pacific/Chatham",
        "UTC",
    ] {
        let out = std::process::Command::new(&exe)
            .args([
                "--exact",
                "failover::stated::tests::china_local_instants_are_fixed",
                "--test-threads=1",
            ])
            .env("TZ", tz)
            .output()
            .expect("run the test binary");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "TZ={tz}: {stdout}");
        // The filter matched the test: a typo would pass vacuously.
        assert!(stdout.contains("1 passed"), "TZ={tz}: {stdout}");
    }
}

#[test]
fn an_absolute_time_needs_a_reset_word_beside_it() {
    none(r#"{"created":"2026-12-01T19:43:54Z","message":"Too Many Requests"}"#);
    none("request 2026-12-02 03:36:54 failed");
    // Words after count in Chinese only, where the verb follows the time.
    none("2026-12-01T19:43:54Z reset");
    check(
        "2026-12-02 03:36:54 之后重试",
        GLM_1308,
        Form::ChinaLocal,
        "2026-12-02 03:36:54",
    );
    // The window is bounded: a reset word far before the time does not reach it.
    let far = format!("reset{} 2026-12-01T19:43:54Z", " ".repeat(CUE_BEFORE));
    none(&far);
    let near = format!("reset{} 2026-12-01T19:43:54Z", " ".repeat(CUE_BEFORE - 7));
    assert_eq!(read(&near).map(|s| s.at_ms), Some(ZAI_1310));
}

#[test]
fn english_delays() {
    for (text, ms, quoted) in [
        ("Please try again in 1s.", 1000, "try again in 1s"),
        (
            "Please try again in 20m30s.",
            1_230_000,
            "try again in 20m30s",
        ),
        ("try again in 1.5s", 1500, "try again in 1.5s"),
        ("Please try again in 250ms.", 250, "try again in 250ms"),
        ("Please try again in 6ms.", 6, "try again in 6ms"),
        (
            "Please try again in 7m12.864s.",
            432_864,
            "try again in 7m12.864s",
        ),
        (
            "Please try again in 14m35.04s.",
            875_040,
            "try again in 14m35.04s",
        ),
        ("try again in 1h2m3s", 3_723_000, "try again in 1h2m3s"),
        ("try again in 1d2h", 93_600_000, "try again in 1d2h"),
        ("Please retry in 7m", 420_000, "retry in 7m"),
        (
            "Please retry in 37.466617065s.",
            37_467,
            "retry in 37.466617065s",
        ),
        ("retry after 45 seconds", 45_000, "retry after 45 seconds"),
        ("retry after 45s", 45_000, "retry after 45s"),
        (
            "please try again after 1 seconds",
            1000,
            "try again after 1 seconds",
        ),
        (
            "Please retry after 7 seconds. Please go here: https://aka.ms/oai/quotaincrease",
            7000,
            "retry after 7 seconds",
        ),
        (
            "Rate limit is exceeded. Try again in 30 seconds.",
            30_000,
            "Try again in 30 seconds",
        ),
        (
            "Server requested 30s retry delay (max: 2s).",
            30_000,
            "Server requested 30s",
        ),
        (r#""retryDelay": "37s""#, 37_000, r#"retryDelay": "37s"#),
        (r#"{"retryDelay":"1.5s"}"#, 1500, r#"retryDelay":"1.5s"#),
        (
            r#""quotaResetDelay": "373.801628ms""#,
            374,
            r#"ResetDelay": "373.801628ms"#,
        ),
        (
            "Your quota will reset after 1h40m15s.",
            6_015_000,
            "reset after 1h40m15s",
        ),
        (
            "Individual quota reached. Resets in 146h54m51s.",
            528_891_000,
            "Resets in 146h54m51s",
        ),
        ("Retry-After: 30", 30_000, "Retry-After: 30"),
        ("retry-after-ms=504641", 504_641, "retry-after-ms=504641"),
        (
            r#"{"retry_after": 12, "x": 1}"#,
            12_000,
            r#"retry_after": 12"#,
        ),
        (
            "Please wait 1 minute 30 seconds",
            90_000,
            "wait 1 minute 30 seconds",
        ),
        ("wait for 2 hours", 7_200_000, "wait for 2 hours"),
        ("try again in 0.5ms", 1, "try again in 0.5ms"),
    ] {
        check(text, NOW + ms, Form::Relative, quoted);
    }
}

#[test]
fn chinese_delays() {
    for (text, ms, quoted) in [
        ("请求过于频繁，请 30 秒后重试", 30_000, "30 秒后重试"),
        ("请在 30 秒后重试", 30_000, "30 秒后重试"),
        ("30秒后重试", 30_000, "30秒后重试"),
        ("5分钟后重试", 300_000, "5分钟后重试"),
        ("请求过于频繁，请15分钟后再试", 900_000, "15分钟后再试"),
        ("请在 1 小时后再试", 3_600_000, "1 小时后再试"),
        ("1个小时后恢复", 3_600_000, "1个小时后恢复"),
        ("1分30秒后重试", 90_000, "1分30秒后重试"),
        ("500毫秒后重试", 500, "500毫秒后重试"),
        ("2天后解除限制", 172_800_000, "2天后解除"),
        ("请 10 秒之后重试", 10_000, "10 秒之后重试"),
        ("1.5秒后重试", 1500, "1.5秒后重试"),
    ] {
        check(text, NOW + ms, Form::Relative, quoted);
    }
}

#[test]
fn texts_that_state_no_time() {
    for text in [
        "",
        "try again later",
        "Please try again later.",
        "please wait before trying again",
        "you've reached your hourly usage limit, please wait or upgrade to continue",
        "try again in a few minutes",
        // A bare number must end like a number: this is a date, read (or not) as one.
        "retry after 2026-12-01",
        "(max: 2s)",
        "已达到 5 小时的使用上限。",
        "1分钟内最多请求10次",
        "请稍后再试",
        "30 秒内请勿重复请求",
        "of 30,000 input tokens per minute",
        "Limit 30000, Used 29990, Requested 180.",
        "5 months",
        "try again in 5 months",
        "Retry-After: Wed, 21 Oct 2026 07:28:00 GMT",
        "Free quota used (30 requests / 5h). Resets at 10:00 UTC.",
        "Resets at 2026-06-01.",
        r#"{"reset_time":1796154234}"#,
        "usage limit exceeded (2056)",
        "model gpt-4o-2024-08-06 not found",
    ] {
        none(text);
    }
}

#[test]
fn the_latest_stated_time_wins() {
    // Pi's server-requested delay over the body's, and never Pi's own cap.
    check(
        "Server requested 30s retry delay (max: 2s). 429 Rate limit reached for requests. Please try again in 1s.",
        NOW + 30_000,
        Form::Relative,
        "Server requested 30s",
    );
    // Gemini's prose (to the nanosecond) over its RetryInfo (whole seconds).
    check(
        r#"{"message":"Please retry in 37.466617065s.","details":[{"retryDelay":"37s"}]}"#,
        NOW + 37_467,
        Form::Relative,
        "retry in 37.466617065s",
    );
    // An absolute time later than a delay.
    check(
        "Please try again in 1s. Your limit will reset at 2026-12-01T19:43:54Z",
        ZAI_1310,
        Form::Zoned,
        "2026-12-01T19:43:54Z",
    );
    // A tie keeps the first.
    check(
        "retry after 1 seconds; try again in 1000ms",
        NOW + 1000,
        Form::Relative,
        "retry after 1 seconds",
    );
    // A statement beyond belief is skipped like a past one: the one beside it still counts
    // (a 5-hour reset in 2 h beside a monthly one in 20 days).
    check(
        "try again in 1s. Your limit will reset at 2027-01-01T00:00:00Z",
        NOW + 1000,
        Form::Relative,
        "try again in 1s",
    );
}

#[test]
fn bounds() {
    // In the past, or exactly now.
    none("Your limit will reset at 2026-11-30T23:59:59Z");
    none("Your limit will reset at 2026-12-01T00:00:00Z");
    none("try again in 0s");
    none("请 0 秒后重试");
    // Just after now.
    check(
        "reset at 2026-12-01T00:00:00.001Z",
        NOW + 1,
        Form::Zoned,
        "2026-12-01T00:00:00.001Z",
    );
    // Exactly eight days ahead is believed; a millisecond more is not.
    check(
        "reset at 2026-12-09T00:00:00Z",
        NOW + MAX_AHEAD_MS,
        Form::Zoned,
        "2026-12-09T00:00:00Z",
    );
    none("reset at 2026-12-09T00:00:00.001Z");
    check(
        "try again in 8d",
        NOW + MAX_AHEAD_MS,
        Form::Relative,
        "try again in 8d",
    );
    none("try again in 8d1ms");
    none("try again in 192h0m0.001s");
    // Zhipu's monthly cap, weeks away.
    none("您的限额将在 2027-01-01 00:00:00 重置。");
}

#[test]
fn huge_numbers_saturate_beyond_the_bound() {
    none("try again in 99999999999999999999999999s");
    none("try again in 18446744073709551615ms");
    none("try again in 18446744073709551615d18446744073709551615d");
    none(&format!("retry after {}", "9".repeat(10_000)));
    none(&format!("请 {} 秒后重试", "9".repeat(10_000)));
    none(&format!(
        "try again in 99999999999999999999.{}s",
        "9".repeat(10_000)
    ));
    // Near the end of u64 time, nothing overflows.
    assert_eq!(
        stated_reset("try again in 1ms", u64::MAX - 5).map(|s| s.at_ms),
        Some(u64::MAX - 4)
    );
    assert_eq!(stated_reset("try again in 1ms", u64::MAX), None);
    assert_eq!(stated_reset("try again in 8d", u64::MAX - 1), None);
    // And at the end of the calendar.
    let last = 253_402_300_799_000; // 9999-12-31T23:59:59Z
    assert_eq!(
        stated_reset("reset at 9999-12-31T23:59:59Z", last - 1).map(|s| s.at_ms),
        Some(last)
    );
    assert_eq!(stated_reset("reset at 2026-12-01T19:43:54Z", 0), None);
}

#[test]
fn invalid_dates_and_times_are_not_read() {
    let parse = |s: &str| timestamp(s.to_ascii_lowercase().as_bytes(), 0).map(|t| t.0);
    for bad in [
        "2026-02-29 00:00:00",  // not a leap year
        "2100-02-29 00:00:00",  // a century, not a leap year
        "2026-02-30T00:00:00Z", // no such day
        "2026-04-31T00:00:00Z",
        "2026-13-01T00:00:00Z",
        "2026-00-10T00:00:00Z",
        "2026-12-00T00:00:00Z",
        "2026-12-01T25:00:00Z",
        "2026-12-01T24:00:00Z",
        "2026-12-01T23:60:00Z",
        "2026-12-01T23:59:60Z", // a leap second is not a reset time
        "2026-12-01T12:00:00+24:00",
        "2026-12-01T12:00:00+08:60",
        "2026-12-01 12:00:00 +24:00", // not read as a zone-less time either
        "2026-12-01 12:00:00 -1",
        "1969-12-31T23:59:59Z",
        "2026-12-01T12:00:005Z",
        "2026-12-01 12:00:005",
        "2026-12-01T12:00:00+08:001",
        "2026-1-01T00:00:00Z",
        "2026-12-1T00:00:00Z",
        "2026-12-01T1:00:00Z",
        "2026-12-01_12:00:00Z",
        "2026-12-01",
        "2026-12-01T",
        "2026-12-01T12",
        "2026-12-01T12:",
        "2026-12-01T12:00:",
    ] {
        assert_eq!(parse(bad), None, "{bad}");
    }
    for (good, ms) in [
        ("2000-02-29T00:00:00Z", 951_782_400_000),
        ("2024-02-29T12:34:56Z", 1_709_210_096_000),
        ("2028-02-29T00:00:00Z", 1_835_395_200_000),
        ("1970-01-01T00:00:00Z", 0),
        ("1970-01-01T08:00:00+08:00", 0),
        ("1970-01-01 08:00:00", 0),
        ("9999-12-31T23:59:59Z", 253_402_300_799_000),
    ] {
        assert_eq!(parse(good), Some(ms), "{good}");
    }
    // Before 1970 in UTC once the offset is applied.
    assert_eq!(parse("1970-01-01 07:59:59"), None);
}

/// The calendar (jiff) against `timefmt`'s civil-from-days, written independently: every day
/// from 1970 to 2300, at midnight UTC and at 08:00 in China.
#[test]
fn civil_dates_agree_with_timefmt() {
    for days in 0..120_000i64 {
        let iso = crate::timefmt::iso_utc(u64::try_from(days).unwrap() * 86_400_000);
        let field = |r: std::ops::Range<usize>| iso[r].parse::<i64>().unwrap();
        let (y, m, d) = (field(0..4), field(5..7), field(8..10));
        let ms = days * 86_400_000;
        assert_eq!(civil_to_unix_ms(y, m, d, 0, 0, 0, 0), Some(ms), "{iso}");
        assert_eq!(
            civil_to_unix_ms(y, m, d, 8, 0, 0, 8 * 3600),
            Some(ms),
            "{iso}"
        );
    }
    // Days that do not exist.
    assert_eq!(civil_to_unix_ms(2027, 2, 29, 0, 0, 0, 0), None);
    assert_eq!(civil_to_unix_ms(2026, 4, 31, 0, 0, 0, 0), None);
    assert_eq!(civil_to_unix_ms(2026, 13, 1, 0, 0, 0, 0), None);
    assert_eq!(civil_to_unix_ms(2026, 1, 1, 24, 0, 0, 0), None);
}

#[test]
fn only_the_head_of_a_huge_text_is_read() {
    let pad = "é".repeat(MAX_SCANNED); // two bytes each: the cut falls inside one
    none(&format!("{pad} try again in 5s"));
    check(
        &format!("try again in 5s {pad}"),
        NOW + 5000,
        Form::Relative,
        "try again in 5s",
    );
    // A quote is short even when the number is not.
    let long = format!("try again in {}ms", "0".repeat(1000) + "5");
    let s = read(&long).unwrap();
    assert_eq!(s.at_ms, NOW + 5);
    assert!(s.text.len() <= MAX_QUOTE, "{}", s.text.len());
}

#[test]
fn form_names() {
    assert_eq!(Form::Zoned.as_str(), "zoned");
    assert_eq!(Form::ChinaLocal.as_str(), "china-local");
    assert_eq!(Form::Relative.as_str(), "relative");
}

// ---------------------------------------------------------------------------------------------
// The corpus

/// What a fixture's file name says it states (see `fixtures/errors/README.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Named {
    Nothing,
    /// `…-reset-YYYYMMDDTHHMMSSZ.txt`: this instant, unix ms.
    At(u64),
    /// `…-reset-in-<delay>.txt`: this long after now, ms.
    In(u64),
}

/// Parses the name independently of the code under test (only the calendar is shared, and it
/// is checked against `timefmt` above).
fn named(file: &str) -> Result<Named, String> {
    let stem = file.strip_suffix(".txt").ok_or("not .txt")?;
    let Some(i) = stem.rfind("-reset-") else {
        return Ok(Named::Nothing);
    };
    let when = &stem[i + "-reset-".len()..];
    if let Some(delay) = when.strip_prefix("in-") {
        return compact_delay(delay).map(Named::In);
    }
    let b = when.as_bytes();
    if b.len() != 16 || b[8] != b'T' || b[15] != b'Z' {
        return Err(format!("{when}: expected YYYYMMDDTHHMMSSZ"));
    }
    let num =
        |r: std::ops::Range<usize>| when[r].parse::<i64>().map_err(|e| format!("{when}: {e}"));
    let (y, mo, d) = (num(0..4)?, num(4..6)?, num(6..8)?);
    let (h, mi, s) = (num(9..11)?, num(11..13)?, num(13..15)?);
    let ms = civil_to_unix_ms(y, mo, d, h, mi, s, 0).ok_or(format!("{when}: no such time"))?;
    Ok(Named::At(u64::try_from(ms).map_err(|e| e.to_string())?))
}

/// `20m30s`, `1s`, `37467ms`, `14m35s40ms`: digits then `d`, `h`, `m`, `s` or `ms`, repeated.
fn compact_delay(s: &str) -> Result<u64, String> {
    let mut rest = s;
    let mut total = 0;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        let n: u64 = rest[..digits]
            .parse()
            .map_err(|_| format!("{s}: a number"))?;
        rest = &rest[digits..];
        let (unit, len) = if rest.starts_with("ms") {
            (1, 2)
        } else {
            match rest.as_bytes().first() {
                Some(b's') => (1000, 1),
                Some(b'm') => (60_000, 1),
                Some(b'h') => (3_600_000, 1),
                Some(b'd') => (86_400_000, 1),
                _ => return Err(format!("{s}: a unit")),
            }
        };
        total += n * unit;
        rest = &rest[len..];
    }
    Ok(total)
}

#[test]
fn fixture_names_parse() {
    assert_eq!(named("quota-x.txt"), Ok(Named::Nothing));
    assert_eq!(
        named("quota-zai-1310-weekly-reset-20261201T194354Z.txt"),
        Ok(Named::At(ZAI_1310))
    );
    assert_eq!(
        named("rate_limit-openai-reset-in-20m30s.txt"),
        Ok(Named::In(1_230_000))
    );
    assert_eq!(
        named("rate_limit-groq-reset-in-14m35s40ms.txt"),
        Ok(Named::In(875_040))
    );
    assert!(named("quota-x-reset-2026-12-01.txt").is_err());
    assert!(named("quota-x-reset-in-5y.txt").is_err());
}

/// Every fixture states the reset its name says, and nothing else: an instant is read from an
/// hour before it (and not at it, nor from more than eight days before); a delay is read at a
/// fixed now; a fixture naming no reset states no time at all, believable or not.
#[test]
fn fixtures_state_the_resets_their_names_say() {
    const HOUR: u64 = 3_600_000;
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/errors");
    let mut entries: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "txt"))
        .collect();
    entries.sort();
    let mut failures = Vec::new();
    let mut stating = 0;
    for path in &entries {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let raw = std::fs::read_to_string(path).unwrap();
        let message = raw.strip_suffix('\n').unwrap_or(&raw);
        let mut fail = |what: String| failures.push(format!("{name}: {what}"));
        match named(&name) {
            Err(e) => fail(e),
            Ok(Named::Nothing) => {
                // Not even one beyond belief.
                if let Some(c) = latest(head(message, MAX_SCANNED), u128::from(NOW), None) {
                    let quoted = quote(message, c.start, c.end);
                    fail(format!("names no reset, states {quoted:?}"));
                }
            }
            Ok(Named::At(at)) => {
                stating += 1;
                match stated_reset(message, at - HOUR) {
                    Some(s) if s.at_ms == at && s.form != Form::Relative => {}
                    other => fail(format!("expected {at}, read {other:?}")),
                }
                if let Some(s) = stated_reset(message, at) {
                    fail(format!("believed at its own instant: {s:?}"));
                }
                if let Some(s) = stated_reset(message, at - MAX_AHEAD_MS - 1) {
                    fail(format!("believed more than 8 days ahead: {s:?}"));
                }
            }
            Ok(Named::In(ms)) => {
                stating += 1;
                match stated_reset(message, NOW) {
                    Some(s) if s.at_ms == NOW + ms && s.form == Form::Relative => {}
                    other => fail(format!("expected now + {ms} ms, read {other:?}")),
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(stating >= 20, "expected a real corpus, found {stating}");
}

/// Issue 29: `UTC+8` and its spellings are Beijing time, not UTC (the breaker stayed open 8 h
/// too long), whatever sits between the time, the name and the offset.
#[test]
fn utc_and_gmt_with_an_offset() {
    // 2026-12-02 03:43:54 in Beijing is ZAI_1310.
    for zone in [
        "UTC+8",
        "UTC+08:00",
        "UTC+8:00",
        "GMT+8",
        "GMT+0800",
        "UTC +8",
        "UTC+08",
        " UTC+8",
        " GMT +08:00",
    ] {
        let text = format!("Your limit will reset at 2026-12-02 03:43:54{zone}.");
        let s = read(&text).unwrap_or_else(|| panic!("nothing read from {text:?}"));
        assert_eq!((s.at_ms, s.form), (ZAI_1310, Form::Zoned), "{text}");
        assert!(s.text.ends_with(zone.trim_start()), "{text}: {}", s.text);
    }
    let s = read("reset at 2026-12-02T03:43:54UTC+8").unwrap();
    assert_eq!(s.at_ms, ZAI_1310);
    // West of UTC, and a name with no offset is still UTC.
    assert_eq!(
        read("reset at 2026-12-01 14:43:54 UTC-5").map(|s| s.at_ms),
        Some(ZAI_1310)
    );
    assert_eq!(
        read("reset at 2026-12-01 19:43:54 UTC, then").map(|s| s.at_ms),
        Some(ZAI_1310)
    );
    // Not an offset: out of range, or a bare one-digit hour without a name.
    none("reset at 2026-12-02 03:43:54 UTC+24");
    none("reset at 2026-12-02 03:43:54 UTC+8:60");
    // An offset written in a way not read (full-width sign or digit, a space after the sign)
    // is not taken for UTC: that would be 8 h off; the date is skipped instead.
    for zone in [
        "UTC＋8",
        "UTC+ 8",
        "UTC+８",
        "GMT－0800",
        "UTC −5",
        "UTC+ ８",
    ] {
        none(&format!("reset at 2026-12-02 03:43:54 {zone}"));
    }
    // A dash that is punctuation still leaves the name as UTC.
    assert_eq!(
        read("reset at 2026-12-01 19:43:54 UTC - then retry").map(|s| s.at_ms),
        Some(ZAI_1310)
    );
    assert_eq!(
        read("reset at 2026-12-01T19:43:54+8").map(|s| s.at_ms),
        None,
        "a bare +8 is not a zone"
    );
}

/// Issue 29: a date beyond the 8-day bound is skipped like a past one; another stated reset in
/// the same body still counts (a 5-hour reset in 2 h and a monthly one in 20 days).
#[test]
fn a_date_beyond_the_bound_does_not_spoil_the_rest() {
    const TWO_HOURS: u64 = 2 * 3_600_000;
    for text in [
        "5-hour limit: resets at 2026-12-01T02:00:00Z. Monthly limit: resets at 2026-12-21T00:00:00Z.",
        "Monthly limit: resets at 2026-12-21T00:00:00Z. 5-hour limit: resets at 2026-12-01T02:00:00Z.",
        "您的5小时限额将在 2026-12-01 10:00:00 重置，月度限额将在 2026-12-21 08:00:00 重置",
        "Monthly limit resets at 2026-12-21T00:00:00Z; please try again in 2h",
    ] {
        let s = read(text).unwrap_or_else(|| panic!("nothing read from {text:?}"));
        assert_eq!(s.at_ms, NOW + TWO_HOURS, "{text}");
    }
    // Only beyond-belief statements: nothing.
    none("resets at 2026-12-21T00:00:00Z, or try again in 20d");
}
