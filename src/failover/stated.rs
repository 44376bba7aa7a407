//! When a provider says its limit lifts: the reset or retry time stated in an error text
//! (issue 24, part 1). Pure: no I/O, no clock, no environment — the current wall time is a
//! parameter, and nothing here reads `TZ` or the machine's zone.
//!
//! [`stated_reset`]`(error_text, now_ms)` reads Pi's `errorMessage` and returns the instant
//! (unix ms) the provider names, or `None` when it names none that can be believed; `None`
//! means "use today's cooldowns".
//!
//! # Forms read
//!
//! | [`Form`] | examples (as providers write them) | read as |
//! |---|---|---|
//! | `Zoned` | `reset at 2026-12-01T19:43:54Z` (Z.AI 1310/1316), `resets at 2026-06-06T05:00:00+08:00 (2056)` (MiniMax), `2026-06-15 00:00:00 +0800 CST`, `…T05:00:00.250-0500`, `2026-06-07 10:00:00 UTC` | that instant |
//! | `ChinaLocal` | `您的限额将在 2026-12-02 03:36:54 重置` (Zhipu 1308/1310), `Your limit will reset at 2026-08-27 21:31:39` | China Standard Time, UTC+8, always |
//! | `Relative` | `Please try again in 20m30s` / `in 1.5s` / `in 250ms` (OpenAI, Groq), `try again after 1 seconds` (Kimi), `Please retry after 7 seconds` (Azure), `Please retry in 37.46s.` and `"retryDelay": "37s"` (Gemini), `Server requested 30s retry delay` (Pi), `Your quota will reset after 1h40m15s`, `Resets in 146h54m51s`, `Retry-After: 30`, `retry_after_ms=500`, `请 30 秒后重试`, `请在 1 小时后再试`, `15分钟后再试` | `now_ms` + the delay |
//!
//! Details of the grammar:
//!
//! - **Absolute times** are `YYYY-MM-DD`, then `T` or one space, then `HH:MM[:SS[.fff]]`, then
//!   a zone: `Z`, `±HH:MM`, `±HHMM`, `±HH`, `UTC` or `GMT` (one space allowed before the zone),
//!   the names optionally followed by an offset whose hour may be one digit (`UTC+8`,
//!   `UTC+08:00`, `UTC +8:00`, `GMT+0800`: how Chinese vendors write Beijing time).
//!   Without a zone only Zhipu's own shape is read — a space, and seconds — and it is China
//!   Standard Time: Zhipu (bigmodel.cn, and Z.AI when it writes no zone) states its resets in
//!   Beijing time whatever the zone of the machine reading them. A zone-less `…T…` or a time
//!   without seconds is someone else's local time in an unknown zone: not read. Dates and times
//!   are validated (month, day of month with leap years, hour ≤ 23, minute and second ≤ 59,
//!   offset ≤ 23:59) and converted with `jiff`'s calendar; years before 1970
//!   or after 9999 are not read. A date alone (`Resets at 2026-06-01.`), a time of day alone
//!   (`Resets at 10:00 UTC`), an HTTP-date `Retry-After` and unix-epoch numbers are not read.
//! - **An absolute time counts only next to a reset word**: within [`CUE_BEFORE`] bytes before
//!   it one of `reset`, `retry`, `try again`, `try after`, `until`, `available`, `after`, 重置,
//!   恢复, 重试, 解除, 解封, 将在, 将于, or within [`CUE_AFTER`] bytes after it one of 重置, 恢复,
//!   重试, 解除, 解封, 之后, 后可. A `"created"` stamp or a request id that happens to be a date is
//!   not a promise about the limit.
//! - **Relative delays** follow a cue, with only spaces, quotes, `:` or `=` between (`-` and `_`
//!   read as spaces, so `Retry-After:` and `"retry_after":` are `retry after`): `try again in`,
//!   `try again after`, `retry in`, `retry after`, `retry after ms`, `reset(s) in`,
//!   `reset(s) after`, `server requested`, `retryDelay`, `retry delay`, `resetDelay`, `wait`,
//!   `wait for`. The delay is one or more `<number>[ ]<unit>` pairs (`1h2m3s`, `7m12.864s`,
//!   `1 minute 30 seconds`) with units `ms`/`msec`/`millisecond(s)`, `s`/`sec(s)`/`second(s)`,
//!   `m`/`min(s)`/`minute(s)`, `h`/`hr(s)`/`hour(s)`, `d`/`day(s)`; a bare number (an HTTP
//!   `Retry-After: 30`) is seconds, or milliseconds after `retry after ms`, provided it ends
//!   like a number and no word follows it (`retry after 2026-12-01` is not 2026 s, `try again
//!   in 5 months` not 5 s). Fractions are rounded *up* to the millisecond: waiting a hair
//!   longer than asked is safe, shorter is not.
//! - **Chinese delays** are `N <unit>[之]后` then a verb — 重试, 再(试), 尝试, 重新, 恢复, 重置,
//!   解除, 解封, 可 — with units 毫秒, 秒(钟), 分(钟), (个)小时, 钟头, 天, 日, optionally
//!   compound (`1分30秒后重试`); an optional 请/请在 before it changes nothing. ASCII digits only.
//!
//! # Precedence: the latest stated time wins
//!
//! A text can state several times: Pi's `Server requested 30s retry delay (max: 2s). 429 Rate
//! limit reached for requests. Please try again in 1s.` carries the provider's `Retry-After`
//! header (30 s, the server's own machine-readable request that Pi reports), Pi's cap for its
//! own retries (`(max: 2s)`: Pi's setting, says nothing about the provider, never read — it has
//! no cue) and the body's prose (1 s). Gemini states `Please retry in 37.46s.` and
//! `"retryDelay": "37s"`. Every statement is a time before which the provider said it would not
//! serve us, so the earliest moment they all agree on is the latest of them: we take the
//! maximum (30 s above). Trusting the smaller one risks another refusal, which costs an attempt
//! and can lengthen a provider's penalty; trusting the larger costs at most the difference.
//! Equal times keep the first in the text.
//!
//! # Bounds: what is believed
//!
//! A stated time is believed only if it is after `now_ms` and at most [`MAX_AHEAD_MS`] (8 days:
//! a weekly window plus slack) ahead. A time in the past or exactly now (a stale or
//! already-lifted limit, or a skewed clock), one further ahead (a monthly cap, or nonsense), or
//! a number too large for the arithmetic (it saturates, so it lands beyond the bound) is
//! skipped, and the latest of the rest wins: a body stating a 5-hour reset in 2 h beside a
//! monthly one in 20 days is the 2-hour reset (issue 29; both limits are real, and only the
//! near one can be waited for). Nothing believable: `None`, and today's cooldowns apply.
//!
//! # Cost
//!
//! Only the first [`MAX_SCANNED`] bytes are read: every form above sits in the provider's
//! message near the start (the largest real body, Gemini's 429 with its quota violations, help
//! links and `RetryInfo` last, is about 2 KiB), while a huge body (an HTML page, an echoed
//! prompt) must not cost time on every failure. The scan is linear in that head: each cue and
//! each date-shaped position is examined once, every window around it is bounded, and no
//! pattern backtracks; numbers of any length are read once with saturating arithmetic.

/// How far ahead a stated time may lie and still be believed: 8 days.
pub const MAX_AHEAD_MS: u64 = crate::health::cooldown::MAX_STATED_AHEAD_MS;

/// How much of an error text is read (see the module doc).
pub const MAX_SCANNED: usize = 16 * 1024;

/// Bytes before an absolute time searched for a reset word.
pub const CUE_BEFORE: usize = 64;

/// Bytes after an absolute time searched for a reset word (Chinese puts the verb after it).
pub const CUE_AFTER: usize = 32;

/// Zhipu's zone: China Standard Time, UTC+8, no daylight saving.
const CHINA_OFFSET_S: i64 = 8 * 3600;

/// The longest quote kept in [`Stated::text`].
const MAX_QUOTE: usize = 96;

/// A reset time read from an error text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stated {
    /// When the limit lifts, unix milliseconds; always in `(now_ms, now_ms + MAX_AHEAD_MS]`.
    pub at_ms: u64,
    /// Which form it was written in.
    pub form: Form,
    /// The words it was read from, as written (at most ~96 bytes), for messages.
    pub text: String,
}

/// How a stated time was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Form {
    /// An absolute time with its zone (`Z`, `+08:00`, `UTC`, …).
    Zoned,
    /// Zhipu's zone-less `YYYY-MM-DD HH:MM:SS`, read as China Standard Time (UTC+8).
    ChinaLocal,
    /// A delay from now (`try again in 20m30s`, `请 30 秒后重试`).
    Relative,
}

impl Form {
    /// A short name for logs and `--json`.
    pub fn as_str(self) -> &'static str {
        match self {
            Form::Zoned => "zoned",
            Form::ChinaLocal => "china-local",
            Form::Relative => "relative",
        }
    }
}

/// The reset time stated in `error_text`, if one can be believed at `now_ms` (see the module
/// doc for the forms, the precedence and the bounds).
pub fn stated_reset(error_text: &str, now_ms: u64) -> Option<Stated> {
    let text = head(error_text, MAX_SCANNED);
    let now = u128::from(now_ms);
    let best = latest(text, now, Some(u128::from(MAX_AHEAD_MS)))?;
    Some(Stated {
        at_ms: u64::try_from(best.at_ms).ok()?,
        form: best.form,
        text: quote(text, best.start, best.end),
    })
}

/// The latest time stated in `text` within `(now, now + ahead]`, or believable or not when
/// `ahead` is `None`.
fn latest(text: &str, now: u128, ahead: Option<u128>) -> Option<Candidate> {
    // Same byte offsets as `text`: only ASCII is changed, ASCII for ASCII.
    let lower = text.to_ascii_lowercase();
    let norm: String = lower
        .chars()
        .map(|c| if c == '-' || c == '_' { ' ' } else { c })
        .collect();
    let mut best: Option<Candidate> = None;
    let mut offer = |c: Candidate| {
        if let Some(ahead) = ahead
            && (c.at_ms <= now || c.at_ms - now > ahead)
        {
            return; // past, or beyond belief: skipped, whatever else the text states
        }
        // Latest wins; on a tie the earlier in the text.
        if best
            .as_ref()
            .is_none_or(|b| c.at_ms > b.at_ms || (c.at_ms == b.at_ms && c.start < b.start))
        {
            best = Some(c);
        }
    };
    absolute_times(lower.as_bytes(), &mut offer);
    english_delays(&norm, lower.as_bytes(), now, &mut offer);
    chinese_delays(lower.as_bytes(), now, &mut offer);
    best
}

/// One stated time found in the text; `at_ms` is wide so that no sum overflows.
struct Candidate {
    at_ms: u128,
    form: Form,
    start: usize,
    end: usize,
}

/// The longest prefix of `s` of at most `max` bytes that ends on a char boundary.
fn head(s: &str, max: usize) -> &str {
    let mut end = max.min(s.len());
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// `text[start..end]`, cut to [`MAX_QUOTE`] bytes on a char boundary.
fn quote(text: &str, start: usize, end: usize) -> String {
    let Some(quoted) = text.get(start..end) else {
        return String::new();
    };
    head(quoted, MAX_QUOTE).trim().to_string()
}

fn is_digit(b: Option<&u8>) -> bool {
    b.is_some_and(u8::is_ascii_digit)
}

/// `n` ASCII digits at `at` as a number (n ≤ 4 here, so no overflow).
fn fixed_digits(b: &[u8], at: usize, n: usize) -> Option<i64> {
    let digits = b.get(at..at.checked_add(n)?)?;
    digits.iter().try_fold(0i64, |acc, &d| {
        d.is_ascii_digit().then(|| acc * 10 + i64::from(d - b'0'))
    })
}

fn byte_is(b: &[u8], at: usize, want: u8) -> Option<()> {
    (b.get(at) == Some(&want)).then_some(())
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && hay.windows(needle.len()).any(|w| w == needle)
}

// ---------------------------------------------------------------------------------------------
// Absolute times

const BEFORE_CUES: &[&str] = &[
    "reset",
    "retry",
    "try again",
    "try after",
    "until",
    "available",
    "after",
    "重置",
    "恢复",
    "重试",
    "解除",
    "解封",
    "将在",
    "将于",
];

const AFTER_CUES: &[&str] = &["重置", "恢复", "重试", "解除", "解封", "之后", "后可"];

/// Every cued `YYYY-MM-DD…` in the lower-cased text.
fn absolute_times(b: &[u8], offer: &mut impl FnMut(Candidate)) {
    for start in 0..b.len() {
        // Cheap test first: a date starts with a digit not preceded by one, and has `-` at +4.
        if b.get(start + 4) != Some(&b'-')
            || !is_digit(b.get(start))
            || (start > 0 && is_digit(b.get(start - 1)))
        {
            continue;
        }
        let Some((at_ms, form, end)) = timestamp(b, start) else {
            continue;
        };
        if cued(b, start, end) {
            offer(Candidate {
                at_ms: u128::from(at_ms),
                form,
                start,
                end,
            });
        }
    }
}

fn cued(b: &[u8], start: usize, end: usize) -> bool {
    let before = b
        .get(start.saturating_sub(CUE_BEFORE)..start)
        .unwrap_or(&[]);
    let after = b
        .get(end..end.saturating_add(CUE_AFTER).min(b.len()))
        .unwrap_or(&[]);
    BEFORE_CUES.iter().any(|c| contains(before, c.as_bytes()))
        || AFTER_CUES.iter().any(|c| contains(after, c.as_bytes()))
}

/// The timestamp starting at `at` in the lower-cased text: (unix ms, form, end).
fn timestamp(b: &[u8], at: usize) -> Option<(u64, Form, usize)> {
    let year = fixed_digits(b, at, 4)?;
    byte_is(b, at + 4, b'-')?;
    let month = fixed_digits(b, at + 5, 2)?;
    byte_is(b, at + 7, b'-')?;
    let day = fixed_digits(b, at + 8, 2)?;
    let sep = *b.get(at + 10)?;
    if sep != b't' && sep != b' ' {
        return None;
    }
    let mut p = at + 11;
    let hour = fixed_digits(b, p, 2)?;
    byte_is(b, p + 2, b':')?;
    let minute = fixed_digits(b, p + 3, 2)?;
    p += 5;
    let mut second = None;
    let mut millis = 0;
    if b.get(p) == Some(&b':') {
        second = Some(fixed_digits(b, p + 1, 2)?);
        p += 3;
        if matches!(b.get(p), Some(b'.' | b',')) && is_digit(b.get(p + 1)) {
            let (ms, end) = fraction_ms(b, p + 1);
            millis = ms;
            p = end;
        }
    }
    let (offset_s, form, end) = match zone(b, p) {
        Zone::Offset(offset_s, end) => (offset_s, Form::Zoned, end),
        // Zhipu's shape only: a space between date and time, and seconds.
        Zone::Absent if sep == b' ' && second.is_some() => (CHINA_OFFSET_S, Form::ChinaLocal, p),
        Zone::Absent | Zone::Malformed => return None,
    };
    if is_digit(b.get(end)) {
        return None; // `…:545`, `+08:001`: not a time we know the end of
    }
    if !(1970..=9999).contains(&year) || second.unwrap_or(0) > 59 {
        return None; // jiff would take a leap second `:60`; no provider means one
    }
    let utc_ms = civil_to_unix_ms(
        year,
        month,
        day,
        hour,
        minute,
        second.unwrap_or(0),
        offset_s,
    )?;
    u64::try_from(utc_ms.checked_add(millis)?)
        .ok()
        .map(|ms| (ms, form, end))
}

/// A validated civil date and time at `offset_s` east of UTC as unix milliseconds (`None` for
/// a date or time that does not exist: month 13, 31 April, 29 February 2027, hour 24).
fn civil_to_unix_ms(
    year: i64,
    month: i64,
    day: i64,
    hour: i64,
    minute: i64,
    second: i64,
    offset_s: i64,
) -> Option<i64> {
    let small = |v: i64| i8::try_from(v).ok();
    let date =
        jiff::civil::Date::new(i16::try_from(year).ok()?, small(month)?, small(day)?).ok()?;
    jiff::civil::Time::new(small(hour)?, small(minute)?, small(second)?, 0).ok()?;
    // Days since the epoch as calendar arithmetic: a `Timestamp` would stop short of the last
    // hours of year 9999, which a civil date reaches.
    let days = jiff::civil::date(1970, 1, 1)
        .until((jiff::Unit::Day, date))
        .ok()?
        .get_days();
    let local_s = i64::from(days) * 86_400 + hour * 3600 + minute * 60 + second;
    Some((local_s - offset_s) * 1000)
}

/// Milliseconds of the fraction digits at `at` (rounded up), and where they end. Any number of
/// digits is consumed; the first nine decide the value.
fn fraction_ms(b: &[u8], at: usize) -> (i64, usize) {
    let mut nanos: i64 = 0;
    let mut place: i64 = 100_000_000;
    let mut rest_nonzero = false;
    let mut p = at;
    while let Some(&d) = b.get(p).filter(|d| d.is_ascii_digit()) {
        let d = i64::from(d - b'0');
        if place > 0 {
            nanos += d * place;
            place /= 10;
        } else if d != 0 {
            rest_nonzero = true;
        }
        p += 1;
    }
    let ms = nanos / 1_000_000 + i64::from(nanos % 1_000_000 != 0 || rest_nonzero);
    (ms, p)
}

/// What follows a time.
enum Zone {
    /// No zone: the time ends here.
    Absent,
    /// Offset east of UTC in seconds, and where the zone ends.
    Offset(i64, usize),
    /// A sign and a digit that are not a valid offset (`+24:00`, `+08:60`, `-1`): not read
    /// as a zone-less time either.
    Malformed,
}

/// The zone at `at`; one space is allowed before it. `UTC` and `GMT` may carry an offset
/// (`UTC+8`, `UTC+08:00`, `UTC +8:00`, `GMT+0800`), as Chinese vendors write Beijing time:
/// after the name one space is allowed and the hour may be one digit, which a bare offset may
/// not (a lone `+8` after a time is not known to be a zone).
fn zone(b: &[u8], at: usize) -> Zone {
    if b.get(at) == Some(&b'z') {
        return Zone::Offset(0, at + 1);
    }
    let q = if b.get(at) == Some(&b' ') { at + 1 } else { at };
    if let Some(name) = b.get(q..q + 3)
        && (name == b"utc" || name == b"gmt")
        && !b.get(q + 3).is_some_and(u8::is_ascii_alphabetic)
    {
        let r = if b.get(q + 3) == Some(&b' ') {
            q + 4
        } else {
            q + 3
        };
        return match offset(b, r, true) {
            // `UTC＋8`, `UTC+ 8`, `UTC−8`: an offset this parser does not read. Taking the
            // name alone would read Beijing time as UTC (8 h off), so the date is skipped.
            Zone::Absent if unread_offset(b, r) => Zone::Malformed,
            Zone::Absent => Zone::Offset(0, q + 3),
            named => named,
        };
    }
    offset(b, q, false)
}

/// Whether `q` starts something offset-like that [`offset`] does not read: a sign (ASCII,
/// full-width `＋`/`－` or `−`), an optional space, and a digit (ASCII or full-width).
fn unread_offset(b: &[u8], q: usize) -> bool {
    let rest = b.get(q..).unwrap_or_default();
    let Some(after) = ["+", "-", "＋", "－", "−"]
        .iter()
        .find_map(|sign| rest.strip_prefix(sign.as_bytes()))
    else {
        return false;
    };
    let after = after.strip_prefix(b" ").unwrap_or(after);
    // Full-width digits `０`..`９` are U+FF10..U+FF19: EF BC 90..99 in UTF-8.
    match after {
        [d, ..] if d.is_ascii_digit() => true,
        [0xEF, 0xBC, 0x90..=0x99, ..] => true,
        _ => false,
    }
}

/// A numeric offset at `q`: `±HH`, `±HHMM`, `±HH:MM`, and with `short_hour` also `±H`, `±H:MM`.
fn offset(b: &[u8], q: usize, short_hour: bool) -> Zone {
    let sign = match b.get(q) {
        Some(b'+') if is_digit(b.get(q + 1)) => 1,
        Some(b'-') if is_digit(b.get(q + 1)) => -1,
        _ => return Zone::Absent,
    };
    let (hours, h_end) = match fixed_digits(b, q + 1, 2) {
        Some(h) => (h, q + 3),
        None if short_hour => match fixed_digits(b, q + 1, 1) {
            Some(h) => (h, q + 2),
            None => return Zone::Malformed,
        },
        None => return Zone::Malformed,
    };
    let (minutes, end) = if b.get(h_end) == Some(&b':') {
        match fixed_digits(b, h_end + 1, 2) {
            Some(m) => (m, h_end + 3),
            None => return Zone::Malformed,
        }
    } else if h_end == q + 3
        && let Some(m) = fixed_digits(b, h_end, 2)
    {
        (m, h_end + 2)
    } else {
        (0, h_end)
    };
    if hours <= 23 && minutes <= 59 {
        Zone::Offset(sign * (hours * 3600 + minutes * 60), end)
    } else {
        Zone::Malformed
    }
}

// ---------------------------------------------------------------------------------------------
// Delays

const MS: u64 = 1;
const SECOND: u64 = 1000;
const MINUTE: u64 = 60 * SECOND;
const HOUR: u64 = 60 * MINUTE;
const DAY: u64 = 24 * HOUR;

/// Cue words (normalised: lower case, `-` and `_` as spaces) and the unit of a bare number.
const DELAY_CUES: &[(&str, u64)] = &[
    ("try again in", SECOND),
    ("try again after", SECOND),
    ("retry in", SECOND),
    ("retry after", SECOND),
    ("retry after ms", MS),
    ("resets in", SECOND),
    ("reset in", SECOND),
    ("resets after", SECOND),
    ("reset after", SECOND),
    ("server requested", SECOND),
    ("retrydelay", SECOND),
    ("retry delay", SECOND),
    ("resetdelay", SECOND),
    ("wait", SECOND),
    ("wait for", SECOND),
];

/// English units, longest first so that `ms` is not read as `m` and `minutes` not as `min`.
const UNITS: &[(&str, u64)] = &[
    ("milliseconds", MS),
    ("millisecond", MS),
    ("msecs", MS),
    ("msec", MS),
    ("ms", MS),
    ("seconds", SECOND),
    ("second", SECOND),
    ("secs", SECOND),
    ("sec", SECOND),
    ("s", SECOND),
    ("minutes", MINUTE),
    ("minute", MINUTE),
    ("mins", MINUTE),
    ("min", MINUTE),
    ("m", MINUTE),
    ("hours", HOUR),
    ("hour", HOUR),
    ("hrs", HOUR),
    ("hr", HOUR),
    ("h", HOUR),
    ("days", DAY),
    ("day", DAY),
    ("d", DAY),
];

const ZH_UNITS: &[(&str, u64)] = &[
    ("毫秒", MS),
    ("秒钟", SECOND),
    ("秒", SECOND),
    ("分钟", MINUTE),
    ("分", MINUTE),
    ("小时", HOUR),
    ("钟头", HOUR),
    ("天", DAY),
    ("日", DAY),
];

/// What may follow `N 秒后`; `再试` before `再` only so that the quote reads well.
const ZH_VERBS: &[&str] = &[
    "重试", "再试", "再次", "再", "尝试", "重新", "恢复", "重置", "解除", "解封", "可",
];

/// Pairs in one compound delay (`1d2h3m4s5ms` is five); a bound on the work per cue.
const MAX_PAIRS: usize = 6;

/// A number: its integer part (saturating), fraction digits (first nine, as nanos of one
/// unit, and whether any later digit is nonzero), and its end.
struct Number {
    int: u64,
    frac_nanos: u64,
    frac_rest: bool,
    end: usize,
}

/// ASCII digits at `at`, with an optional `.` fraction. Reads the whole run, saturating.
fn number(b: &[u8], at: usize) -> Option<Number> {
    if !is_digit(b.get(at)) {
        return None;
    }
    let mut p = at;
    let mut int: u64 = 0;
    while let Some(&d) = b.get(p).filter(|d| d.is_ascii_digit()) {
        int = int.saturating_mul(10).saturating_add(u64::from(d - b'0'));
        p += 1;
    }
    let mut frac_nanos = 0;
    let mut frac_rest = false;
    if b.get(p) == Some(&b'.') && is_digit(b.get(p + 1)) {
        let mut place = 100_000_000;
        p += 1;
        while let Some(&d) = b.get(p).filter(|d| d.is_ascii_digit()) {
            if place > 0 {
                frac_nanos += u64::from(d - b'0') * place;
                place /= 10;
            } else if d != b'0' {
                frac_rest = true;
            }
            p += 1;
        }
    }
    Some(Number {
        int,
        frac_nanos,
        frac_rest,
        end: p,
    })
}

impl Number {
    /// This many `unit_ms`, in milliseconds, the fraction rounded up.
    fn times(&self, unit_ms: u64) -> u64 {
        // frac_nanos < 1e9 and unit_ms ≤ 8.64e7: the product fits in u64.
        let frac = self.frac_nanos * unit_ms;
        let frac_ms = frac / 1_000_000_000
            + u64::from(!frac.is_multiple_of(1_000_000_000) || (self.frac_rest && unit_ms > 0));
        self.int.saturating_mul(unit_ms).saturating_add(frac_ms)
    }
}

/// At most `max` bytes from `set` at `at`; where they end.
fn skip(b: &[u8], at: usize, set: &[u8], max: usize) -> usize {
    let mut p = at;
    while p - at < max && b.get(p).is_some_and(|c| set.contains(c)) {
        p += 1;
    }
    p
}

/// The unit from `units` at `at` (an ASCII unit must not run on into a word), and its end.
fn unit(b: &[u8], at: usize, units: &[(&str, u64)]) -> Option<(u64, usize)> {
    units.iter().find_map(|&(name, ms)| {
        let end = at.checked_add(name.len())?;
        let ascii = name.is_ascii();
        (b.get(at..end) == Some(name.as_bytes())
            && !(ascii && b.get(end).is_some_and(u8::is_ascii_alphabetic)))
        .then_some((ms, end))
    })
}

/// One or more `<number>[ ]<unit>` pairs at `at`: (milliseconds, end). A lone number without a
/// unit is `bare_unit` if given and it ends where a number can end (not `2026-…`, `12:30`).
fn delay(
    b: &[u8],
    at: usize,
    units: &[(&str, u64)],
    bare_unit: Option<u64>,
) -> Option<(u64, usize)> {
    let first = number(b, at)?;
    let q = skip(b, first.end, b" ", 2);
    let Some((unit_ms, end)) = unit(b, q, units) else {
        // Not `5 months` (a unit we do not know), nor `2026-12-01` or `12:30`.
        let unit_ms = bare_unit?;
        let ends_well = match b.get(first.end) {
            None => true,
            Some(b'.') => !is_digit(b.get(first.end + 1)),
            Some(c) => c.is_ascii_whitespace() || b"\"',;)}]".contains(c),
        };
        let word_follows = b.get(q).is_some_and(u8::is_ascii_alphabetic);
        return (ends_well && !word_follows).then(|| (first.times(unit_ms), first.end));
    };
    let mut total = first.times(unit_ms);
    let mut end = end;
    for _ in 1..MAX_PAIRS {
        let p = skip(b, end, b" ", 1);
        let Some(n) = number(b, p) else { break };
        let q = skip(b, n.end, b" ", 2);
        let Some((unit_ms, unit_end)) = unit(b, q, units) else {
            break;
        };
        total = total.saturating_add(n.times(unit_ms));
        end = unit_end;
    }
    Some((total, end))
}

/// Every `<cue> <delay>`: cues are found in the normalised text (`retry-after` is
/// `retry after`), the delay is read from the lower-cased one, where `2026-12-01` is still a
/// date and not three numbers.
fn english_delays(norm: &str, b: &[u8], now: u128, offer: &mut impl FnMut(Candidate)) {
    for &(cue, bare_unit) in DELAY_CUES {
        for (start, _) in norm.match_indices(cue) {
            let at = skip(b, start + cue.len(), b" \t\"':=", 6);
            if let Some((ms, end)) = delay(b, at, UNITS, Some(bare_unit)) {
                offer(Candidate {
                    at_ms: now + u128::from(ms),
                    form: Form::Relative,
                    start,
                    end,
                });
            }
        }
    }
}

/// Every `N <unit>[之]后<verb>` in the lower-cased text.
fn chinese_delays(b: &[u8], now: u128, offer: &mut impl FnMut(Candidate)) {
    for start in 0..b.len() {
        if !is_digit(b.get(start))
            || (start > 0 && (is_digit(b.get(start - 1)) || b.get(start - 1) == Some(&b'.')))
        {
            continue;
        }
        let Some((ms, end)) = chinese_delay(b, start) else {
            continue;
        };
        offer(Candidate {
            at_ms: now + u128::from(ms),
            form: Form::Relative,
            start,
            end,
        });
    }
}

fn chinese_delay(b: &[u8], at: usize) -> Option<(u64, usize)> {
    let mut total: u64 = 0;
    let mut p = at;
    for pair in 0..MAX_PAIRS {
        let Some(n) = number(b, p) else {
            if pair == 0 {
                return None;
            }
            break;
        };
        let mut q = skip(b, n.end, b" ", 2);
        if b.get(q..q + 3) == Some("个".as_bytes()) {
            q += 3;
        }
        let (unit_ms, end) = unit(b, q, ZH_UNITS)?;
        total = total.saturating_add(n.times(unit_ms));
        p = skip(b, end, b" ", 1);
        if !is_digit(b.get(p)) {
            break;
        }
    }
    if b.get(p..p + 3) == Some("之".as_bytes()) {
        p += 3;
    }
    if b.get(p..p + 3) != Some("后".as_bytes()) {
        return None;
    }
    let p = skip(b, p + 3, b" ", 2);
    let verb = ZH_VERBS
        .iter()
        .find(|v| b.get(p..p + v.len()) == Some(v.as_bytes()))?;
    Some((total, p + verb.len()))
}

#[cfg(test)]
#[path = "stated_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "stated_props.rs"]
mod props;
