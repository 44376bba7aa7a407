//! Random-input tests of the stated-reset parser: any text or bytes never panic and only ever
//! yield a time within `(now, now + 8 days]`; a valid stated time embedded in random text is
//! still found, exactly; long adversarial texts cost little.

use proptest::prelude::*;

use super::*;
use crate::timefmt::iso_utc;

/// 2026-12-01T00:00:00Z.
const NOW: u64 = 1_796_083_200_000;

/// Pieces that make parser-shaped text: digits, separators, zones, units and every cue.
const PIECES: &[&str] = &[
    "0",
    "1",
    "9",
    "12",
    "2026",
    "99999999999999999999",
    "-",
    ":",
    ".",
    ",",
    " ",
    "T",
    "t",
    "Z",
    "+",
    "+08:00",
    "-0500",
    " UTC",
    "2026-12-01",
    "2026-12-02 03:36:54",
    "19:43:54",
    "T19:43:54Z",
    "s",
    "ms",
    "m",
    "h",
    "d",
    "seconds",
    "minute",
    "try again in ",
    "retry after ",
    "Retry-After: ",
    "retry_after_ms=",
    "Server requested ",
    "\"retryDelay\": \"",
    "Resets in ",
    "reset at ",
    "will reset after ",
    "wait ",
    "(max: 2s)",
    "秒",
    "分钟",
    "小时",
    "个",
    "后",
    "之",
    "重试",
    "再试",
    "请",
    "将在",
    "重置",
    "é",
    "İ",
    "\u{301}",
    "😀",
    "\n",
    "\"",
];

fn made_of(pieces: &'static [&'static str], max: usize) -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(pieces), 0..max).prop_map(|v| v.concat())
}

#[track_caller]
fn within_bounds(s: &Option<Stated>, now: u64, text: &str) -> Result<(), TestCaseError> {
    if let Some(s) = s {
        prop_assert!(s.at_ms > now, "{:?} not after {} in {:?}", s, now, text);
        prop_assert!(
            s.at_ms - now <= MAX_AHEAD_MS,
            "{:?} beyond 8 days of {} in {:?}",
            s,
            now,
            text
        );
        prop_assert!(s.text.len() <= MAX_QUOTE);
        prop_assert!(
            text.contains(&s.text),
            "quote {:?} not in {:?}",
            s.text,
            text
        );
    }
    Ok(())
}

/// A valid statement of a reset `offset_ms` after [`NOW`], in one of the forms read, with the
/// form it must be read as. Absolute times are formatted by `timefmt` (the inverse
/// arithmetic), then re-zoned by hand.
fn statement() -> impl Strategy<Value = (String, u64, Form)> {
    let delay = (0u64..48, 0u64..60, 0u64..60, 0u64..1000, 0usize..6)
        .prop_filter("a wait", |&(h, m, s, ms, _)| h + m + s + ms > 0)
        .prop_map(|(h, m, s, ms, how)| {
            let total = ((h * 60 + m) * 60 + s) * 1000 + ms;
            let secs = total.div_ceil(1000);
            let (text, at) = match how {
                0 => (format!("Please try again in {h}h{m}m{s}s{ms}ms."), total),
                1 => (format!("Please try again in {total}ms."), total),
                2 => (format!("Please retry after {secs} seconds."), secs * 1000),
                3 => (format!("请 {secs} 秒后重试。"), secs * 1000),
                4 => (format!("Retry-After: {secs}\n"), secs * 1000),
                _ => (
                    format!("Please retry in {}.{:03}s.", total / 1000, total % 1000),
                    total,
                ),
            };
            (text, at, Form::Relative)
        });
    let absolute = (1u64..=MAX_AHEAD_MS / 1000, 0usize..5).prop_map(|(secs, how)| {
        let at = NOW + secs * 1000;
        let in_zone = |offset_h: u64, west: bool| {
            let shifted = if west {
                at - offset_h * 3_600_000
            } else {
                at + offset_h * 3_600_000
            };
            iso_utc(shifted)[..19].to_string()
        };
        let (text, form) = match how {
            0 => (
                format!("Your limit will reset at {}Z.", in_zone(0, false)),
                Form::Zoned,
            ),
            1 => (
                format!("resets at {}+08:00 (2056)", in_zone(8, false)),
                Form::Zoned,
            ),
            2 => (format!("reset at {}-05:00.", in_zone(5, true)), Form::Zoned),
            3 => (
                format!(
                    "您的限额将在 {} 重置。",
                    in_zone(8, false).replace('T', " ")
                ),
                Form::ChinaLocal,
            ),
            _ => (
                format!(
                    "Your limit will reset at {}.",
                    in_zone(8, false).replace('T', " ")
                ),
                Form::ChinaLocal,
            ),
        };
        (text, at - NOW, form)
    });
    prop_oneof![delay, absolute]
}

proptest! {
    #![proptest_config(crate::fuzz::config(2000))]

    #[test]
    fn any_string_never_panics(text in any::<String>(), now in any::<u64>()) {
        let s = stated_reset(&text, now);
        within_bounds(&s, now, &text)?;
    }

    #[test]
    fn any_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..600), now in any::<u64>()) {
        let text = String::from_utf8_lossy(&bytes);
        let s = stated_reset(&text, now);
        within_bounds(&s, now, &text)?;
    }

    /// Parser-shaped text, near and far from the times it mentions.
    #[test]
    fn adversarial_text_stays_in_bounds(
        text in made_of(PIECES, 60),
        now in prop_oneof![Just(NOW), NOW - 10 * MAX_AHEAD_MS..NOW + 10 * MAX_AHEAD_MS, any::<u64>()],
    ) {
        let s = stated_reset(&text, now);
        within_bounds(&s, now, &text)?;
    }

    /// A valid statement inside random text without ASCII digits (which cannot state a time of
    /// its own, so cannot outbid it) is found, exactly.
    #[test]
    fn an_embedded_statement_is_found(
        (phrase, offset, form) in statement(),
        lead in any::<String>(),
        tail in any::<String>(),
    ) {
        let strip = |s: String| s.chars().filter(|c| !c.is_ascii_digit()).collect::<String>();
        let text = format!("{} {phrase} {}", strip(lead), strip(tail));
        let s = stated_reset(&text, NOW);
        within_bounds(&s, NOW, &text)?;
        let s = s.ok_or_else(|| TestCaseError::fail(format!("nothing read from {text:?}")))?;
        prop_assert_eq!((s.at_ms, s.form), (NOW + offset, form), "{}", text);
        prop_assert!(phrase.contains(&s.text), "{:?} not from {:?}", s.text, phrase);
    }
}

proptest! {
    // Each case builds a MiB; a few cases suffice, the fixed worst cases are below.
    #![proptest_config(crate::fuzz::config(8))]

    /// A MiB of one random piece pattern, repeated.
    #[test]
    fn a_mebibyte_of_adversarial_text_costs_little(
        // At least one piece: an empty pattern has nothing to repeat, and rejecting it instead
        // aborted long runs (`CCSWITCH_FUZZ_CASES=10000`: too many global rejects).
        pattern in prop::collection::vec(prop::sample::select(PIECES), 1..8)
            .prop_map(|v| v.concat())
    ) {
        prop_assert!(!pattern.is_empty());
        let text = pattern.repeat((1 << 20) / pattern.len() + 1);
        let s = within_a_second(|| stated_reset(&text, NOW));
        within_bounds(&s, NOW, &text)?;
    }
}

/// Patterns that maximise the work per byte: every position a date start or a cue, numbers
/// that never end, windows full of cue words.
#[test]
fn worst_case_texts_cost_linear_time() {
    for pattern in [
        "9",
        "1-",
        "1.",
        "12:",
        "2026-",
        "2026-12-01 ",
        "2026-12-01T19:43:54",
        "reset 2026-12-01T19:43:54Z ",
        "reset 2026-12-02 03:36:54 ",
        "将在 2026-12-02 03:36:54 重置 ",
        "try again in 1",
        "try again in 1h",
        "try again in ",
        "retry after ",
        "wait",
        "1秒",
        "1 秒后",
        "1分1",
        "+08:00",
    ] {
        let mib = pattern.repeat((1 << 20) / pattern.len() + 1);
        // The whole head is the pattern; what is scanned is MAX_SCANNED of it.
        let s = within_a_second(|| stated_reset(&mib, NOW));
        assert!(
            s.as_ref()
                .is_none_or(|s| s.at_ms > NOW && s.at_ms - NOW <= MAX_AHEAD_MS),
            "{pattern}: {s:?}"
        );
    }
}

#[expect(
    clippy::disallowed_methods,
    reason = "a test's bound on time, not the product's clock"
)]
#[track_caller]
fn within_a_second<T>(f: impl FnOnce() -> T) -> T {
    let start = std::time::Instant::now();
    let out = f();
    let took = start.elapsed();
    // Linear work on 16 KiB takes milliseconds even unoptimised; a quadratic scan takes seconds.
    assert!(took < std::time::Duration::from_secs(3), "took {took:?}");
    out
}
