//! Real vendors' error bodies for the fake server: capacity (concurrency) rejections, quota
//! windows that state their reset time, balance, and key-echoing 401 wordings — so the
//! classifier is tested against what providers actually send, not against our own paraphrase.
//!
//! Wordings were taken from public reports of real answers (issue threads quoting the bodies)
//! and the vendors' error-code tables; where a vendor varies a detail (the reset-time form),
//! the variant is named for it. Reset times are computed from a unix-ms instant with our own
//! civil-date arithmetic (no date crate): China Standard Time is UTC+8 all year (no DST).
//!
//! Bodies are JSON text written with their keys in the vendor's order (Pi re-serialises the
//! error object in that order into `errorMessage`), so they are built with `format!`, not with
//! `json!` (which would sort the keys).

use serde_json::Value;

use super::Behaviour;
use super::wire::err_body;

/// China Standard Time (GLM/Zhipu, MiniMax): UTC+8, no daylight saving.
pub const CST_OFFSET_SECS: i64 = 8 * 3600;

/// A date and time of day.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Civil {
    pub year: i64,
    pub month: u32,
    pub day: u32,
    pub hour: u32,
    pub minute: u32,
    pub second: u32,
}

/// `(year, month, day)` of the day `days` after 1970-01-01 in the proleptic Gregorian calendar
/// (Howard Hinnant's `civil_from_days`: eras of 400 years, March-based years so the leap day
/// comes last).
pub fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468; // days since 0000-03-01
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097); // day of era, [0, 146096]
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365; // year of era, [0, 399]
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100); // day of (March-based) year, [0, 365]
    let mp = (5 * doy + 2) / 153; // March = 0, [0, 11]
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// The wall-clock time `offset_secs` east of UTC at `unix_ms` (milliseconds are dropped).
pub fn civil(unix_ms: u64, offset_secs: i64) -> Civil {
    let secs = (unix_ms / 1000) as i64 + offset_secs;
    let (year, month, day) = civil_from_days(secs.div_euclid(86_400));
    let sod = secs.rem_euclid(86_400) as u32;
    Civil {
        year,
        month,
        day,
        hour: sod / 3600,
        minute: sod / 60 % 60,
        second: sod % 60,
    }
}

/// `YYYY-MM-DD HH:MM:SS` in China Standard Time (GLM's reset times).
pub fn format_cst(unix_ms: u64) -> String {
    let c = civil(unix_ms, CST_OFFSET_SECS);
    format!(
        "{:04}-{:02}-{:02} {:02}:{:02}:{:02}",
        c.year, c.month, c.day, c.hour, c.minute, c.second
    )
}

/// ISO 8601 in UTC: `YYYY-MM-DDTHH:MM:SSZ`.
pub fn format_iso_utc(unix_ms: u64) -> String {
    let c = civil(unix_ms, 0);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z",
        c.year, c.month, c.day, c.hour, c.minute, c.second
    )
}

/// ISO 8601 in China Standard Time: `YYYY-MM-DDTHH:MM:SS+08:00`.
pub fn format_iso_cst(unix_ms: u64) -> String {
    let c = civil(unix_ms, CST_OFFSET_SECS);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}+08:00",
        c.year, c.month, c.day, c.hour, c.minute, c.second
    )
}

/// A JSON string literal.
fn q(s: &str) -> String {
    Value::from(s).to_string()
}

/// GLM/Zhipu's `{"error":{"code":…,"message":…}}`.
fn glm(code: &str, message: &str) -> String {
    format!(
        r#"{{"error":{{"code":{},"message":{}}}}}"#,
        q(code),
        q(message)
    )
}

/// Anthropic's `{"type":"error","error":{"type":…,"message":…}}`.
fn anthropic(typ: &str, message: &str) -> String {
    format!(
        r#"{{"type":"error","error":{{"type":{},"message":{}}}}}"#,
        q(typ),
        q(message)
    )
}

// ---------------------------------------------------------------------------------------------
// Capacity: too many requests in flight (what `FakeLlm::set_concurrency_cap` answers with)

/// GLM/Z.AI 1302 in English (HTTP 429): the default capacity body.
pub fn glm_1302() -> String {
    glm(
        "1302",
        "High concurrency usage of this API, please reduce concurrency.",
    )
}

/// GLM/Zhipu 1302 in Chinese (HTTP 429), as open.bigmodel.cn sends it.
pub fn glm_1302_chinese() -> String {
    glm(
        "1302",
        "您当前使用该API的并发数过高，请降低并发，或联系客服增加限额。",
    )
}

/// OpenAI-style request rate limit (HTTP 429), as DeepSeek/Qwen-compatible gateways send it.
pub fn openai_rate_limit_requests() -> String {
    err_body(
        "Rate limit reached for requests",
        "requests",
        Some("rate_limit_exceeded"),
    )
}

/// Anthropic's rate limit (HTTP 429).
pub fn anthropic_rate_limit() -> String {
    anthropic(
        "rate_limit_error",
        "This request would exceed your account's rate limit. Please try again later.",
    )
}

// ---------------------------------------------------------------------------------------------
// Quota windows that say when they reset (HTTP 429)

/// GLM 1308 in Chinese: the 5-hour window is used up; resets at `reset_unix_ms` (CST).
pub fn glm_1308(reset_unix_ms: u64) -> String {
    glm(
        "1308",
        &format!(
            "已达到 5 小时的使用上限。您的限额将在 {} 重置。",
            format_cst(reset_unix_ms)
        ),
    )
}

/// GLM 1308 in English (Z.AI); the time is CST too.
pub fn glm_1308_english(reset_unix_ms: u64) -> String {
    glm(
        "1308",
        &format!(
            "Usage limit reached for 5 hour. Your limit will reset at {}",
            format_cst(reset_unix_ms)
        ),
    )
}

/// A Chinese vendor's English quota body with Beijing time written `UTC+8` (issue 29).
pub fn utc_plus_8(reset_unix_ms: u64) -> String {
    glm(
        "1308",
        &format!(
            "Usage limit reached for 5 hour. Your limit will reset at {} UTC+8",
            format_cst(reset_unix_ms)
        ),
    )
}

/// Zhipu's body stating two windows: the 5-hour one at `reset_unix_ms` and the monthly one 20
/// days later, past the runner's 8-day bound (issue 29).
pub fn glm_two_windows(reset_unix_ms: u64) -> String {
    let monthly = reset_unix_ms + 20 * 24 * 3_600_000;
    glm(
        "1308",
        &format!(
            "已达到 5 小时的使用上限。您的限额将在 {} 重置，每月限额将在 {} 重置。",
            format_cst(reset_unix_ms),
            format_cst(monthly)
        ),
    )
}

/// Z.AI 1310 (weekly/monthly window) with the reset time in ISO 8601 UTC.
pub fn zai_1310(reset_unix_ms: u64) -> String {
    glm(
        "1310",
        &format!(
            "Weekly/Monthly Limit Exhausted. Your limit will reset at {}",
            format_iso_utc(reset_unix_ms)
        ),
    )
}

/// Z.AI 1310 with the reset time as GLM's plain `YYYY-MM-DD HH:MM:SS` (CST) — the form quoted
/// in public reports of this error.
pub fn zai_1310_cst(reset_unix_ms: u64) -> String {
    glm(
        "1310",
        &format!(
            "Weekly/Monthly Limit Exhausted. Your limit will reset at {}",
            format_cst(reset_unix_ms)
        ),
    )
}

/// MiniMax 2056 ("usage limit exceeded", its 5-hour Token Plan window) as its
/// Anthropic-compatible endpoint words it, with the reset time in ISO 8601 at `+08:00`.
pub fn minimax_2056(reset_unix_ms: u64) -> String {
    anthropic(
        "rate_limit_error",
        &format!(
            "usage limit exceeded, 5-hour usage limit reached for Token Plan Plus (1500/1500 \
             used), resets at {} (2056)",
            format_iso_cst(reset_unix_ms)
        ),
    )
}

/// OpenAI's request-rate limit with a relative wait (`after` like `20m30s`, `6ms`, `1.5s`).
pub fn openai_try_again_in(after: &str) -> String {
    err_body(
        &format!(
            "Rate limit reached for gpt-4o-mini in organization org-fake on requests per min \
             (RPM): Limit 3, Used 3, Requested 1. Please try again in {after}. Visit \
             https://platform.openai.com/account/rate-limits to learn more."
        ),
        "requests",
        Some("rate_limit_exceeded"),
    )
}

/// GLM 1113: balance used up (no reset time; only a top-up helps).
pub fn glm_1113() -> String {
    glm("1113", "余额不足或无可用资源包,请充值。")
}

impl Behaviour {
    /// 429 [`glm_1302`] (a capacity rejection as a scripted answer).
    pub fn glm_1302() -> Self {
        Behaviour::Status(429, glm_1302())
    }
    /// 429 [`glm_1308`]: Chinese 5-hour window, resets at `reset_unix_ms` (CST).
    pub fn glm_1308(reset_unix_ms: u64) -> Self {
        Behaviour::Status(429, glm_1308(reset_unix_ms))
    }
    /// 429 [`glm_1308_english`].
    pub fn glm_1308_english(reset_unix_ms: u64) -> Self {
        Behaviour::Status(429, glm_1308_english(reset_unix_ms))
    }
    /// 429 [`utc_plus_8`].
    pub fn utc_plus_8(reset_unix_ms: u64) -> Self {
        Behaviour::Status(429, utc_plus_8(reset_unix_ms))
    }
    /// 429 [`glm_two_windows`].
    pub fn glm_two_windows(reset_unix_ms: u64) -> Self {
        Behaviour::Status(429, glm_two_windows(reset_unix_ms))
    }
    /// 429 [`zai_1310`] (ISO 8601 UTC reset time).
    pub fn zai_1310(reset_unix_ms: u64) -> Self {
        Behaviour::Status(429, zai_1310(reset_unix_ms))
    }
    /// 429 [`zai_1310_cst`] (CST reset time).
    pub fn zai_1310_cst(reset_unix_ms: u64) -> Self {
        Behaviour::Status(429, zai_1310_cst(reset_unix_ms))
    }
    /// 429 [`minimax_2056`] (`+08:00` reset time).
    pub fn minimax_2056(reset_unix_ms: u64) -> Self {
        Behaviour::Status(429, minimax_2056(reset_unix_ms))
    }
    /// 429 [`openai_try_again_in`] (relative wait).
    pub fn openai_try_again_in(after: &str) -> Self {
        Behaviour::Status(429, openai_try_again_in(after))
    }
    /// 429 [`glm_1113`] (balance, no reset time).
    pub fn glm_1113() -> Self {
        Behaviour::Status(429, glm_1113())
    }
}

// ---------------------------------------------------------------------------------------------
// Key echoes (`Behaviour::EchoKeyWith`)

/// How the request's key is quoted into an echo template.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KeyEcho {
    /// As it is.
    Plain,
    /// Percent-encoded as in a query string (RFC 3986 unreserved bytes kept, the rest `%XX`).
    PercentEncoded,
    /// Split by a line break in the middle (by characters), as a wrapped log line shows it.
    SplitByNewline,
    /// Only its first this many characters.
    Prefix(usize),
}

impl KeyEcho {
    /// `key` as this echo quotes it.
    pub fn apply(&self, key: &str) -> String {
        match self {
            KeyEcho::Plain => key.to_string(),
            KeyEcho::PercentEncoded => key
                .bytes()
                .map(|b| {
                    if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                        char::from(b).to_string()
                    } else {
                        format!("%{b:02X}")
                    }
                })
                .collect(),
            KeyEcho::SplitByNewline => {
                let mid = key.chars().count() / 2;
                let at = key.char_indices().nth(mid).map_or(key.len(), |(i, _)| i);
                format!("{}\n{}", &key[..at], &key[at..])
            }
            KeyEcho::Prefix(n) => key.chars().take(*n).collect(),
        }
    }
}

/// The placeholder an echo template quotes the key at.
pub const KEY: &str = "{key}";

impl Behaviour {
    /// 401 whose message is `template` with [`KEY`] replaced by the request's key.
    pub fn echo_key(template: impl Into<String>) -> Self {
        Behaviour::echo_key_with(401, template, KeyEcho::Plain)
    }
    /// `status` whose message is `template` with [`KEY`] replaced by the key as `echo` quotes it.
    pub fn echo_key_with(status: u16, template: impl Into<String>, echo: KeyEcho) -> Self {
        Behaviour::EchoKeyWith {
            status,
            template: template.into(),
            echo,
        }
    }
    /// `Unauthorized: KEY`.
    pub fn echo_key_unauthorized() -> Self {
        Behaviour::echo_key("Unauthorized: {key}")
    }
    /// `Authentication failed for key 'KEY'`.
    pub fn echo_key_auth_failed() -> Self {
        Behaviour::echo_key("Authentication failed for key '{key}'")
    }
    /// 403 `Your key (KEY) has been revoked`.
    pub fn echo_key_revoked() -> Self {
        Behaviour::echo_key_with(403, "Your key ({key}) has been revoked", KeyEcho::Plain)
    }
    /// `token KEY expired`.
    pub fn echo_key_expired() -> Self {
        Behaviour::echo_key("token {key} expired")
    }
    /// The key percent-encoded in a query string, as a gateway quoting the request URL does.
    pub fn echo_key_in_query() -> Self {
        Behaviour::echo_key_with(
            401,
            "API key not valid for request https://gateway.invalid/v1/chat/completions?key={key}",
            KeyEcho::PercentEncoded,
        )
    }
    /// The key split by a line break in the middle.
    pub fn echo_key_split() -> Self {
        Behaviour::echo_key_with(401, "Invalid API key: {key}", KeyEcho::SplitByNewline)
    }
    /// Only the first 12 characters of the key, as providers that mask the rest do.
    pub fn echo_key_prefix12() -> Self {
        Behaviour::echo_key_with(
            401,
            "Incorrect API key provided: {key}****************",
            KeyEcho::Prefix(12),
        )
    }
    /// The message `EchoKeyWith` sends for `key` (tests compare against it).
    pub fn echo_message(&self, key: &str) -> Option<String> {
        match self {
            Behaviour::EchoKeyWith { template, echo, .. } => {
                Some(template.replace(KEY, &echo.apply(key)))
            }
            _ => None,
        }
    }
}
