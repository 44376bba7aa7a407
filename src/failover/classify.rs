//! Failure text → failure class + breaker scope (SPEC §3). Pure: no I/O, no clock.
//!
//! Rules, first match wins:
//!
//! | # | evidence | class | scope |
//! |---|---|---|---|
//! | 1 | the user interrupted the run (and it was not our watchdog) | user_abort | round |
//! | 2 | our watchdog aborted the attempt | endpoint | endpoint |
//! | 3 | content-policy words (English, Chinese) | content_policy | model |
//! | 4 | status 413, context-overflow words — unless the text is about a rate or a quota | context_overflow | round |
//! | 5 | status 402, quota/billing/balance words (so a quota body on a 429 is quota) | quota | provider |
//! | 6 | status 401/403, invalid-key/authentication words | auth | provider |
//! | 7 | status 429, rate-limit words | rate_limit | provider |
//! | 8 | status 408/5xx; overload/transport words unless the status is 400/404/422 | endpoint | endpoint |
//! | 9 | status 400/404/422, model-not-found/unsupported words | model | model |
//! | 10 | anything else | unknown | model |
//!
//! Statuses come only from the *start* of `errorMessage` ([`status_prefix`]); digits inside a
//! body never count, so a 400 whose body mentions "500" is not a server error. Words are
//! matched case-insensitively on a copy of the text where `_` and `-` read as spaces
//! (`insufficient_quota`, `insufficient-quota` and `insufficient quota` are one marker) and
//! links are blanked out (Groq's TPM error links `…/settings/billing`; that is not a bill).
//! Bare "sensitive" is not a content-policy marker ("case-sensitive" is a plain 400): only
//! phrases such as "sensitive content/words/information/topic", 敏感内容, 敏感词, 政治敏感,
//! or a provider stop reason `sensitive` are.
//!
//! Only the first [`MAX_CLASSIFIED`] bytes of a message are searched: evidence sits at the start
//! of a provider's error, and a huge body (an HTML error page, an echoed prompt) must not cost
//! seconds per failure. Every search is linear in that text.

pub use crate::health::class::{FailureClass, Scope};

use super::stated::{Stated, stated_reset};

/// What the runner observed when an attempt ended badly.
#[derive(Debug, Clone, Copy, Default)]
pub struct Observation<'a> {
    /// Pi's `errorMessage` (may be empty).
    pub error_message: &'a str,
    /// Pi's `stopReason` (`error`, `aborted`, ...).
    pub stop_reason: &'a str,
    /// The runner's own watchdog aborted the attempt.
    pub watchdog: bool,
    /// The user interrupted the run (SIGINT/SIGTERM).
    pub user_abort: bool,
    /// When it was observed (unix ms): a reset the provider stated in words ("try again in 30
    /// seconds") is read relative to it.
    pub now_ms: u64,
}

/// The verdict, with the evidence that decided it (for `-v` and `--json`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Classification {
    pub class: FailureClass,
    pub scope: Scope,
    /// HTTP status found at the start of `errorMessage` ([`status_prefix`]), if any.
    pub status: Option<u16>,
    /// The marker that matched, e.g. `status 402`, `insufficient_quota`, `余额不足`, `watchdog`.
    /// A word marker is quoted as it appears in the message (ASCII lower-cased).
    pub matched: String,
    /// When the provider said its limit lifts, read once from the whole text when the
    /// classification is made (quota and rate limits only; `None` when it did not say).
    pub stated: Option<Stated>,
}

/// The marker of an attempt our watchdog cut (no first response, or a stalled stream).
pub const WATCHDOG_MARKER: &str = "watchdog";
/// The marker of an attempt cut at its share of a shared deadline (issue 31), other candidates
/// still to try.
pub const SHARE_MARKER: &str = "deadline share";

impl Classification {
    /// The attempt was cut for silence: by a watchdog, or at its share of the deadline.
    pub fn silence(&self) -> bool {
        self.matched == WATCHDOG_MARKER || self.matched == SHARE_MARKER
    }
}

/// The HTTP status Pi put at the start of `errorMessage`, in any of the shapes Pi's providers
/// produce:
///
/// - `429: {…}` — OpenAI-compatible APIs (and Bedrock/Google when the body is separate);
/// - `529 {…}`, `403 status code (no body)` — the Anthropic SDK's own message;
/// - `OpenAI API error (429): …`, `Throttling error: 429: …` — labelled provider errors;
/// - `{"error":{"code":429,…` or `got status: X. {"error":{"code":429,…` — Google GenAI.
///
/// Only the start of the message is read: numbers later in a body are never a status.
pub fn status_prefix(error_message: &str) -> Option<u16> {
    let s = error_message.trim_start();
    leading_status(s)
        .or_else(|| labelled_status(s))
        .or_else(|| json_error_code(s))
}

/// Three ASCII digits that are not the start of a longer number, as an HTTP status.
fn three_digits(s: &str) -> Option<(u16, &str)> {
    let b = s.as_bytes();
    if b.len() < 3
        || !b[..3].iter().all(u8::is_ascii_digit)
        || b.get(3).is_some_and(u8::is_ascii_digit)
    {
        return None;
    }
    let code: u16 = s[..3].parse().ok()?;
    (100..=599).contains(&code).then_some((code, &s[3..]))
}

/// `NNN: …` or `NNN …`.
fn leading_status(s: &str) -> Option<u16> {
    let (code, rest) = three_digits(s)?;
    (rest.starts_with(": ") || rest.starts_with(' ')).then_some(code)
}

/// `<label> error (NNN): …`, `<label> error: NNN: …`, `Service unavailable: NNN: …`.
fn labelled_status(s: &str) -> Option<u16> {
    const MAX_LABEL: usize = 80;
    let head: String = s
        .chars()
        .take(MAX_LABEL + 16)
        .collect::<String>()
        .to_ascii_lowercase();
    for marker in ["error (", "error: ", "unavailable: "] {
        let Some(at) = head.find(marker) else {
            continue;
        };
        let label = &head[..at];
        if at > MAX_LABEL
            || !label
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || " ._/-".contains(c))
        {
            continue;
        }
        let Some((code, rest)) = s.get(at + marker.len()..).and_then(three_digits) else {
            continue;
        };
        let ok = if marker.ends_with('(') {
            rest.starts_with("): ")
        } else {
            rest.starts_with(": ") || rest.starts_with(' ')
        };
        if ok {
            return Some(code);
        }
    }
    None
}

/// Google GenAI errors carry the status as the first field of a JSON error object.
fn json_error_code(s: &str) -> Option<u16> {
    let s = match s.strip_prefix("got status: ") {
        Some(rest) => &rest[rest.find(". ")? + 2..],
        None => s,
    };
    let (code, _) = three_digits(s.strip_prefix(r#"{"error":{"code":"#)?)?;
    Some(code)
}

/// How one marker is looked for in the normalised text.
#[derive(Debug, Clone, Copy)]
enum Marker {
    /// A substring.
    Sub(&'static str),
    /// A whole ASCII word: no ASCII letter or digit on either side.
    Word(&'static str),
    /// The first string, then one of the others at most `gap` characters after it.
    Near(&'static str, &'static [&'static str], usize),
}

use Marker::{Near, Sub, Word};

/// One row of the table: the statuses and markers that mean `class`.
struct Rule {
    class: FailureClass,
    scope: Scope,
    status: fn(u16) -> bool,
    markers: &'static [Marker],
}

const REFUSAL_STOPS: &[&str] = &[
    "sensitive",
    "safety",
    "image safety",
    "prohibited",
    "image prohibited",
    "blocklist",
    "spii",
    "recitation",
    "refusal",
];

const CONTENT_POLICY: &[Marker] = &[
    Sub("content filter"),
    Sub("contentfilter"),
    Sub("content polic"),
    Sub("content management polic"),
    Sub("content blocked"),
    Sub("moderation"),
    Sub("data inspection failed"),
    Sub("datainspectionfailed"),
    Sub("inappropriate content"),
    Sub("content exists risk"),
    Sub("sensitive content"),
    Sub("sensitivecontent"),
    Sub("sensitive word"),
    Sub("sensitive information"),
    Sub("sensitive topic"),
    Sub("new sensitive"),
    Sub("unsafe content"),
    Sub("prohibited content"),
    // A provider stop reason surfaced by Pi: `Provider stopped with: sensitive`,
    // `Provider finish_reason: sensitive`, `Provider stopped with: SAFETY`.
    Near("stopped with:", REFUSAL_STOPS, 2),
    Near("finish reason:", REFUSAL_STOPS, 2),
    Sub("refused to complete"),
    Sub("safety system"),
    Sub("safety polic"),
    Sub("safety filter"),
    Sub("safety violation"),
    Sub("safety setting"),
    Sub("safety reason"),
    Sub("due to safety"),
    Sub("responsibleai"),
    Sub("responsible ai"),
    Sub("guardrail"),
    Sub("policy violation"),
    Sub("policyviolation"),
    Sub("usage polic"),
    Near("violat", &["polic", "guideline"], 40),
    Near(
        "blocked by",
        &["polic", "safety", "moderation", "filter", "guardrail"],
        20,
    ),
    Sub("high risk"),
    Sub("was flagged"),
    Sub("illegaldetected"),
    Sub("内容审查"),
    Sub("内容审核"),
    Sub("内容安全"),
    Sub("内容违规"),
    Sub("内容被拦截"),
    Sub("安全审核"),
    Sub("审核未通过"),
    Sub("审核不通过"),
    Sub("审核失败"),
    Sub("敏感内容"),
    Sub("敏感词"),
    Sub("敏感信息"),
    Sub("敏感话题"),
    Sub("政治敏感"),
    Sub("涉敏"),
    Sub("涉政"),
    Sub("违规"),
    Sub("不合规"),
    Sub("违法"),
    Near("安全策略", &["拦截", "阻断", "拒绝"], 12),
    Near("风控", &["拦截", "阻断", "拒绝"], 12),
    Near("违反", &["安全", "政策", "规定", "法律", "法规"], 12),
];

const CONTEXT_OVERFLOW: &[Marker] = &[
    Sub("context length"),
    Sub("context window"),
    Sub("context size"),
    Sub("maximum context"),
    Sub("context limit"),
    Sub("too many tokens"),
    Sub("prompt is too long"),
    Sub("prompt too long"),
    Sub("input is too long"),
    Sub("input too long"),
    Sub("prompt exceeds max length"),
    Sub("token limit"),
    Sub("request too large"),
    Sub("input token count"),
    Sub("prompt token count"),
    Sub("maximum prompt length"),
    Sub("reduce the length of the messages"),
    Sub("range of input length"),
    Sub("maximum allowed input length"),
    Sub("maximum number of tokens"),
    Sub("上下文长度"),
    Sub("上下文窗口"),
    Sub("超出上下文"),
    Sub("超过上下文"),
    Sub("超过最大长度"),
    Sub("超出最大长度"),
    Sub("输入过长"),
    Sub("输入长度超"),
    Sub("超长"),
];

/// Words that make "too many tokens"/"token limit"/413 a throughput or account limit rather
/// than a context window (`ThrottlingException: Too many tokens`, Groq's 413 for tokens per
/// minute, "monthly token limit").
const NOT_CONTEXT: &[Marker] = &[
    Sub("rate limit"),
    Sub("ratelimit"),
    Sub("too many requests"),
    Sub("throttl"),
    Sub("per min"),
    Sub("per day"),
    Sub("per month"),
    Sub("monthly"),
    Sub("quota"),
    Sub("billing"),
];

const QUOTA: &[Marker] = &[
    Sub("insufficient quota"),
    Sub("insufficient balance"),
    Sub("insufficient account balance"),
    Sub("insufficient funds"),
    Sub("insufficient credit"),
    Sub("credit balance"),
    Sub("account balance"),
    Sub("balance is insufficient"),
    Sub("balance is too low"),
    Sub("quota"),
    Sub("billing"),
    Sub("out of budget"),
    Sub("budget exceeded"),
    Sub("budget has been exceeded"),
    Sub("usage limit"),
    Sub("monthly limit"),
    Near("monthly", &["limit", "quota", "cap"], 12),
    Sub("spending limit"),
    Sub("payment required"),
    Sub("past due"),
    Sub("overdue"),
    Sub("arrear"),
    Sub("recharge"),
    Sub("余额不足"),
    Sub("账户余额"),
    Sub("欠费"),
    Sub("额度"),
    Sub("配额"),
    Sub("充值"),
    Sub("使用上限"),
    Sub("资源包"),
];

const KEY_PROBLEMS_ZH: &[&str] = &["无效", "错误", "不正确", "过期", "非法"];

const AUTH: &[Marker] = &[
    Sub("invalid api key"),
    Sub("incorrect api key"),
    Sub("invalid x api key"),
    Sub("api key not valid"),
    Sub("api key invalid"),
    Sub("no api key"),
    Sub("missing api key"),
    Sub("api key is missing"),
    Near(
        "api key",
        &[
            "expired",
            "revoked",
            "disabled",
            "does not exist",
            "not found",
        ],
        20,
    ),
    Sub("authentication"),
    Sub("unauthenticated"),
    Sub("unauthorized"),
    Sub("permission denied"),
    Sub("access denied"),
    Sub("access terminated"),
    Sub("forbidden"),
    Near(
        "account",
        &["suspended", "deactivated", "disabled", "banned"],
        30,
    ),
    Near(
        "organization",
        &["suspended", "deactivated", "disabled"],
        30,
    ),
    Sub("鉴权"),
    Sub("认证失败"),
    Sub("身份验证"),
    Sub("未授权"),
    Sub("无效的密钥"),
    Sub("密钥无效"),
    Sub("无效的令牌"),
    Sub("令牌无效"),
    Sub("令牌已过期"),
    Near("api key", KEY_PROBLEMS_ZH, 3),
    Near("apikey", KEY_PROBLEMS_ZH, 3),
    Near("token", &["非法", "无效", "过期"], 2),
];

const RATE_LIMIT: &[Marker] = &[
    Sub("rate limit"),
    Sub("ratelimit"),
    Sub("too many requests"),
    Sub("retry delay"),
    Sub("throttl"),
    Sub("resource exhausted"),
    Sub("requests per min"),
    Sub("tokens per min"),
    Sub("concurrency"),
    Sub("too many concurrent"),
    Sub("限流"),
    Sub("请求过于频繁"),
    Sub("请求过多"),
    Sub("请求太多"),
    Sub("频率"),
    Sub("并发"),
];

/// Overload words that mean an outage even in the body of a 400/404/422.
const OVERLOAD_ON_4XX: &[Marker] = &[
    Sub("overload"),
    Sub("server busy"),
    Sub("server is busy"),
    Sub("service unavailable"),
    Sub("temporarily unavailable"),
    Sub("服务繁忙"),
    Sub("系统繁忙"),
    Sub("服务器繁忙"),
    Sub("负载过高"),
];

const ENDPOINT: &[Marker] = &[
    Sub("terminated"),
    Sub("stream ended"),
    Sub("timed out"),
    Sub("timeout"),
    Sub("etimedout"),
    Sub("connection error"),
    Sub("connection reset"),
    Sub("connection refused"),
    Sub("connection closed"),
    Sub("connection aborted"),
    Sub("connection lost"),
    Sub("econnreset"),
    Sub("econnrefused"),
    Sub("econnaborted"),
    Sub("epipe"),
    Sub("enotfound"),
    Sub("eai again"),
    Sub("ehostunreach"),
    Sub("enetunreach"),
    Sub("getaddrinfo"),
    Sub("other side closed"),
    Sub("premature close"),
    Sub("websocket"),
    Sub("socket"),
    Sub("fetch failed"),
    Sub("network"),
    Word("dns"),
    Word("tls"),
    Word("ssl"),
    Sub("certificate"),
    Sub("und err"),
    Sub("overload"),
    Sub("server busy"),
    Sub("server is busy"),
    Sub("service unavailable"),
    Sub("temporarily unavailable"),
    Sub("capacity"),
    Sub("upstream"),
    Sub("bad gateway"),
    Sub("internal server error"),
    Sub("internal error"),
    Sub("server error"),
    Sub("server had an error"),
    Sub("服务繁忙"),
    Sub("系统繁忙"),
    Sub("服务器繁忙"),
    Sub("服务不可用"),
    Sub("服务暂时不可用"),
    Sub("超时"),
    Sub("网络错误"),
    Sub("网络异常"),
    Sub("连接失败"),
    Sub("访问量过大"),
    Sub("负载过高"),
    Sub("负载已饱和"),
    Sub("上游"),
];

const MODEL: &[Marker] = &[
    Sub("model not found"),
    Sub("does not exist"),
    Sub("model not exist"),
    Sub("no such model"),
    Sub("unknown model"),
    Sub("invalid model"),
    Sub("unsupported model"),
    Sub("model not supported"),
    Sub("unsupported parameter"),
    Sub("unsupported value"),
    Sub("not supported"),
    Sub("not found for api version"),
    Sub("模型不存在"),
    Sub("模型不支持"),
    Sub("不支持该模型"),
    Sub("不支持的参数"),
    Sub("模型未找到"),
    Sub("无效的模型"),
    Sub("模型无效"),
];

fn no_status(_: u16) -> bool {
    false
}

fn is_model_status(s: u16) -> bool {
    matches!(s, 400 | 404 | 422)
}

/// Rules 3–9 of the module table, in order.
const RULES: &[Rule] = &[
    Rule {
        class: FailureClass::ContentPolicy,
        scope: Scope::Model,
        status: no_status,
        markers: CONTENT_POLICY,
    },
    Rule {
        class: FailureClass::ContextOverflow,
        scope: Scope::Round,
        status: |s| s == 413,
        markers: CONTEXT_OVERFLOW,
    },
    Rule {
        class: FailureClass::Quota,
        scope: Scope::Provider,
        status: |s| s == 402,
        markers: QUOTA,
    },
    Rule {
        class: FailureClass::Auth,
        scope: Scope::Provider,
        status: |s| s == 401 || s == 403,
        markers: AUTH,
    },
    Rule {
        class: FailureClass::RateLimit,
        scope: Scope::Provider,
        status: |s| s == 429,
        markers: RATE_LIMIT,
    },
    Rule {
        class: FailureClass::Endpoint,
        scope: Scope::Endpoint,
        status: |s| s == 408 || (500..=599).contains(&s),
        markers: ENDPOINT,
    },
    Rule {
        class: FailureClass::Model,
        scope: Scope::Model,
        status: is_model_status,
        markers: MODEL,
    },
];

/// Classifies one failed attempt: its class and scope, the evidence, and for a quota or a rate
/// limit the reset its provider stated.
pub fn classify(obs: &Observation<'_>) -> Classification {
    let mut verdict = class_of(obs);
    if matches!(verdict.class, FailureClass::Quota | FailureClass::RateLimit) {
        verdict.stated = stated_reset(obs.error_message, obs.now_ms);
    }
    verdict
}

/// The class, scope and evidence of a failed attempt (first rule that matches).
fn class_of(obs: &Observation<'_>) -> Classification {
    let status = status_prefix(obs.error_message);
    let verdict = |class, scope, matched: String| Classification {
        class,
        scope,
        status,
        matched,
        stated: None,
    };
    if obs.user_abort && !obs.watchdog {
        return verdict(FailureClass::UserAbort, Scope::Round, "user abort".into());
    }
    if obs.watchdog {
        return verdict(
            FailureClass::Endpoint,
            Scope::Endpoint,
            WATCHDOG_MARKER.into(),
        );
    }
    let text = head(obs.error_message, MAX_CLASSIFIED);
    let norm = normalise(text);
    let quote = |(start, end): (usize, usize)| {
        // `normalise` keeps byte offsets; should it ever not, quote the normalised text
        // rather than slice the original off a char boundary.
        text.get(start..end)
            .or_else(|| norm.get(start..end))
            .unwrap_or_default()
            .to_ascii_lowercase()
    };
    for rule in RULES {
        if rule.class == FailureClass::ContextOverflow && first_match(&norm, NOT_CONTEXT).is_some()
        {
            continue;
        }
        if let Some(s) = status.filter(|&s| (rule.status)(s)) {
            return verdict(rule.class, rule.scope, format!("status {s}"));
        }
        // A 400/404/422 names a request the model rejected; a transport word in its body
        // (a parameter called `timeout`, "upstream model not found") does not make it an outage.
        // An explicit overload is still an outage whatever the status (SPEC order).
        if rule.class == FailureClass::Endpoint && status.is_some_and(is_model_status) {
            if let Some(range) = first_match(&norm, OVERLOAD_ON_4XX) {
                return verdict(rule.class, rule.scope, quote(range));
            }
            continue;
        }
        if let Some(range) = first_match(&norm, rule.markers) {
            return verdict(rule.class, rule.scope, quote(range));
        }
    }
    verdict(FailureClass::Unknown, Scope::Model, "unrecognised".into())
}

/// How much of an error message is searched for markers (see the module doc).
pub const MAX_CLASSIFIED: usize = 64 * 1024;

/// The longest prefix of `s` of at most `max` bytes that ends on a char boundary.
fn head(s: &str, max: usize) -> &str {
    let mut end = max.min(s.len());
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// Phrases that look like evidence but are not: Google's generic `RESOURCE_EXHAUSTED` text
/// ("Resource has been exhausted (e.g. check quota).") is its per-minute rate limit.
const IGNORED: &[&str] = &["check quota"];

/// ASCII lower-case, links blanked out (a documentation URL such as `…/settings/billing` or
/// `…/rate-limits` is not evidence), `_` and `-` read as spaces, [`IGNORED`] phrases blanked.
/// Every char maps to a char of the same UTF-8 length, so byte offsets in the result are byte
/// offsets in the original.
fn normalise(text: &str) -> String {
    let lower = text.to_ascii_lowercase();
    let mut in_url = vec![false; lower.len()];
    for scheme in ["https://", "http://"] {
        for (start, _) in lower.match_indices(scheme) {
            if in_url[start] {
                // Inside a link already blanked, and it ends where that one does: scanning
                // to its end again made `https://https://…` quadratic.
                continue;
            }
            let len = lower[start..]
                .find(|c: char| !is_url_char(c))
                .unwrap_or(lower.len() - start);
            in_url[start..start + len].fill(true);
        }
    }
    let mut out: String = lower
        .char_indices()
        .map(|(i, c)| match c {
            _ if in_url[i] => ' ',
            '_' | '-' => ' ',
            c => c,
        })
        .collect();
    for phrase in IGNORED {
        out = out.replace(phrase, &" ".repeat(phrase.len()));
    }
    out
}

fn is_url_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || "-._~:/?#[]@!$&*+;=%".contains(c)
}

/// Byte range of the first marker (in list order) found in `norm`.
fn first_match(norm: &str, markers: &[Marker]) -> Option<(usize, usize)> {
    markers.iter().find_map(|m| find(norm, *m))
}

fn find(norm: &str, marker: Marker) -> Option<(usize, usize)> {
    match marker {
        Sub(s) => norm.find(s).map(|i| (i, i + s.len())),
        Word(w) => norm
            .match_indices(w)
            .map(|(i, _)| (i, i + w.len()))
            .find(|&(i, j)| {
                let before = if i == 0 {
                    None
                } else {
                    norm.as_bytes().get(i - 1)
                };
                let after = norm.as_bytes().get(j);
                !before.is_some_and(u8::is_ascii_alphanumeric)
                    && !after.is_some_and(u8::is_ascii_alphanumeric)
            }),
        Near(first, seconds, gap) => norm.match_indices(first).find_map(|(i, _)| {
            let from = i + first.len();
            let rest = &norm[from..];
            seconds
                .iter()
                .filter_map(|s| {
                    // Only a second starting within `gap` chars counts, so it ends within
                    // `gap` + its length: searching further made this quadratic in a text
                    // full of `first`s.
                    let window = head_chars(rest, gap + s.chars().count());
                    window.find(s).map(|j| (j, s.len()))
                })
                .filter(|&(j, _)| rest[..j].chars().count() <= gap)
                .min_by_key(|&(j, _)| j)
                .map(|(j, len)| (i, from + j + len))
        }),
    }
}

/// The first `n` chars of `s`.
fn head_chars(s: &str, n: usize) -> &str {
    &s[..s.char_indices().nth(n).map_or(s.len(), |(i, _)| i)]
}

#[cfg(test)]
#[path = "classify_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "classify_props.rs"]
mod props;
