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

/// Classifies one failed attempt.
pub fn classify(obs: &Observation<'_>) -> Classification {
    let status = status_prefix(obs.error_message);
    let verdict = |class, scope, matched: String| Classification {
        class,
        scope,
        status,
        matched,
    };
    if obs.user_abort && !obs.watchdog {
        return verdict(FailureClass::UserAbort, Scope::Round, "user abort".into());
    }
    if obs.watchdog {
        return verdict(FailureClass::Endpoint, Scope::Endpoint, "watchdog".into());
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
mod tests {
    use super::*;

    fn text(error_message: &str) -> Classification {
        classify(&Observation {
            error_message,
            stop_reason: "error",
            ..Observation::default()
        })
    }

    #[track_caller]
    fn check(error_message: &str, class: FailureClass, matched: &str) {
        let c = text(error_message);
        assert_eq!(
            (c.class, c.matched.as_str()),
            (class, matched),
            "{error_message}"
        );
    }

    #[test]
    fn scopes_follow_the_class() {
        use FailureClass::*;
        for (msg, class, scope) in [
            ("content_filter", ContentPolicy, Scope::Model),
            ("context length exceeded", ContextOverflow, Scope::Round),
            ("402: x", Quota, Scope::Provider),
            ("401: x", Auth, Scope::Provider),
            ("429: x", RateLimit, Scope::Provider),
            ("503: x", Endpoint, Scope::Endpoint),
            ("404: x", Model, Scope::Model),
            ("something odd", Unknown, Scope::Model),
        ] {
            let c = text(msg);
            assert_eq!((c.class, c.scope), (class, scope), "{msg}");
        }
    }

    #[test]
    fn an_overload_beats_a_4xx_status_but_a_transport_word_does_not() {
        let c = text(r#"400: {"message":"The server is overloaded, please retry"}"#);
        assert_eq!(
            (c.class, c.matched.as_str()),
            (FailureClass::Endpoint, "overload")
        );
        let c = text(r#"400: {"message":"Unsupported parameter: 'timeout'"}"#);
        assert_eq!(c.class, FailureClass::Model);
    }

    #[test]
    fn status_prefix_shapes() {
        assert_eq!(status_prefix(r#"429: {"message":"x"}"#), Some(429));
        assert_eq!(status_prefix(r#"529 {"type":"error"}"#), Some(529));
        assert_eq!(status_prefix("403 status code (no body)"), Some(403));
        assert_eq!(
            status_prefix("OpenAI API error (429): {\"x\":1}"),
            Some(429)
        );
        assert_eq!(
            status_prefix("github-copilot API error (413): failed"),
            Some(413)
        );
        assert_eq!(status_prefix("Throttling error: 429: {\"m\":1}"), Some(429));
        assert_eq!(status_prefix("Service unavailable: 503: busy"), Some(503));
        assert_eq!(
            status_prefix(r#"{"error":{"code":429,"message":"x"}}"#),
            Some(429)
        );
        assert_eq!(
            status_prefix(r#"got status: UNAVAILABLE. {"error":{"code":503,"message":"x"}}"#),
            Some(503)
        );
        // Not statuses.
        assert_eq!(
            status_prefix("Connection error.: connect ECONNREFUSED 127.0.0.1:33709"),
            None
        );
        assert_eq!(
            status_prefix("Request timed out.: This operation was aborted (20)"),
            None
        );
        assert_eq!(
            status_prefix("Server requested 30s retry delay (max: 2s). 429 Rate limit"),
            None
        );
        assert_eq!(status_prefix("4290: x"), None);
        assert_eq!(status_prefix("12: x"), None);
        assert_eq!(status_prefix("128000 tokens"), None);
        assert_eq!(status_prefix("700: x"), None);
        assert_eq!(status_prefix("42"), None);
        assert_eq!(status_prefix(""), None);
        assert_eq!(status_prefix("terminated"), None);
        let long_label = format!("{} error (500): x", "x".repeat(81));
        assert_eq!(status_prefix(&long_label), None);
        assert_eq!(
            status_prefix(
                "a label far too long to be a provider prefix, so the status in it is part of a sentence, not a prefix: error (500): x"
            ),
            None
        );
    }

    #[test]
    fn user_abort_wins_and_never_fails_over() {
        let c = classify(&Observation {
            error_message: "429: rate limit",
            stop_reason: "aborted",
            watchdog: false,
            user_abort: true,
        });
        assert_eq!(
            (c.class, c.scope, c.matched.as_str()),
            (FailureClass::UserAbort, Scope::Round, "user abort")
        );
        assert_eq!(c.status, Some(429));
    }

    #[test]
    fn watchdog_is_an_endpoint_timeout_even_with_user_abort_flag() {
        for user_abort in [false, true] {
            let c = classify(&Observation {
                error_message: "Request aborted",
                stop_reason: "aborted",
                watchdog: true,
                user_abort,
            });
            assert_eq!(
                (c.class, c.scope, c.matched.as_str()),
                (FailureClass::Endpoint, Scope::Endpoint, "watchdog")
            );
        }
    }

    #[test]
    fn content_policy_english_and_chinese() {
        use FailureClass::ContentPolicy as C;
        check(
            "Provider finish_reason: content_filter",
            C,
            "content_filter",
        );
        check(
            "Provider stopped with: sensitive",
            C,
            "stopped with: sensitive",
        );
        check(
            "Provider finish_reason: sensitive",
            C,
            "finish_reason: sensitive",
        );
        check("Provider stopped with: SAFETY", C, "stopped with: safety");
        check(
            "Provider stopped with: PROHIBITED_CONTENT",
            C,
            "prohibited_content",
        );
        check(
            "The model refused to complete the request",
            C,
            "refused to complete",
        );
        check(
            r#"400: {"message":"The response was filtered due to the prompt triggering Azure OpenAI's content management policy.","type":null,"param":"prompt","code":"content_filter"}"#,
            C,
            "content_filter",
        );
        check(
            "Your request was rejected as a result of our safety system.",
            C,
            "safety system",
        );
        check("ResponsibleAIPolicyViolation", C, "responsibleai");
        check("Guardrail intervened", C, "guardrail");
        check("Request blocked by our content policy", C, "content polic");
        check(
            "request was blocked by upstream safety checks",
            C,
            "blocked by upstream safety",
        );
        check(
            "This prompt violates our usage guidelines",
            C,
            "violates our usage guideline",
        );
        check(
            r#"400: {"message":"Content Exists Risk","type":"invalid_request_error"}"#,
            C,
            "content exists risk",
        );
        check(
            "The request failed because the input text may contain sensitive information.",
            C,
            "sensitive information",
        );
        check("InputTextSensitiveContentDetected", C, "sensitivecontent");
        check("input new_sensitive", C, "new_sensitive");
        check(
            "系统检测到输入或生成内容可能包含不安全或敏感内容，请您避免输入易产生敏感内容的提示语",
            C,
            "敏感内容",
        );
        check("内容审查未通过", C, "内容审查");
        check("输入审核未通过", C, "审核未通过");
        check("文本包含违法违规信息，审核不通过。", C, "审核不通过");
        check("请求包含敏感词", C, "敏感词");
        check("涉政内容", C, "涉政");
        check("输出内容不合规", C, "不合规");
        check("触发安全策略，请求被拦截", C, "安全策略，请求被拦截");
        check("风控系统已拒绝本次请求", C, "风控系统已拒绝");
        check("违反了平台安全规定", C, "违反了平台安全");
        // A 400 status does not beat the content rule.
        check(
            r#"400: {"message":"<400> InternalError.Algo.DataInspectionFailed: Input text data may contain inappropriate content.","type":"data_inspection_failed"}"#,
            C,
            "data_inspection_failed",
        );
    }

    #[test]
    fn sensitive_alone_is_not_content_policy() {
        check(
            r#"400: {"message":"Parameter names are case-sensitive: 'Temperature' is not valid"}"#,
            FailureClass::Model,
            "status 400",
        );
        check(
            "header value is sensitive",
            FailureClass::Unknown,
            "unrecognised",
        );
        check(
            "The field is case sensitive",
            FailureClass::Unknown,
            "unrecognised",
        );
        check(
            "这个参数对大小写敏感",
            FailureClass::Unknown,
            "unrecognised",
        );
        check(
            "policy document updated",
            FailureClass::Unknown,
            "unrecognised",
        );
        check(
            "content-type must be application/json",
            FailureClass::Unknown,
            "unrecognised",
        );
    }

    #[test]
    fn context_overflow_english_and_chinese() {
        use FailureClass::ContextOverflow as C;
        check(
            r#"400: {"message":"This model's maximum context length is 128000 tokens. However, your messages resulted in 130512 tokens.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}"#,
            C,
            "context length",
        );
        check(
            r#"400 {"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 213462 tokens > 200000 maximum"}}"#,
            C,
            "prompt is too long",
        );
        check(
            "Your input exceeds the context window of this model",
            C,
            "context window",
        );
        check(
            "The input token count (1196265) exceeds the maximum number of tokens allowed (1048575)",
            C,
            "input token count",
        );
        check(
            "Invalid request: Your request exceeded model token limit: 262144",
            C,
            "token limit",
        );
        check(
            "Range of input length should be [1, 30720]",
            C,
            "range of input length",
        );
        check(
            r#"413 {"type":"error","error":{"type":"request_too_large","message":"Request exceeds the maximum size"}}"#,
            C,
            "status 413",
        );
        check("413: Payload Too Large", C, "status 413");
        check("输入长度超过模型上下文长度限制", C, "上下文长度");
        check(r#"{"code":"1261","message":"Prompt 超长"}"#, C, "超长");
        let c = text("prompt is too long");
        assert_eq!(c.scope, Scope::Round);
    }

    #[test]
    fn throughput_limits_are_not_context_overflow() {
        check(
            "Throttling error: ThrottlingException: Too many tokens, please wait before trying again.",
            FailureClass::RateLimit,
            "throttl",
        );
        check(
            r#"413: {"message":"Request too large for model `llama-3.3-70b` on tokens per minute (TPM): Limit 6000, Requested 9000. Visit https://console.groq.com/docs/rate-limits"}"#,
            FailureClass::RateLimit,
            "tokens per min",
        );
        check(
            "You have exceeded your monthly token limit",
            FailureClass::Quota,
            "monthly token limit",
        );
    }

    #[test]
    fn quota_english_chinese_and_on_a_429() {
        use FailureClass::Quota as Q;
        check(
            r#"402: {"message":"You exceeded your current quota, please check your plan and billing details.","type":"insufficient_quota","param":null,"code":"insufficient_quota"}"#,
            Q,
            "status 402",
        );
        check(
            r#"429: {"message":"You exceeded your current quota, please check your plan and billing details.","type":"insufficient_quota","param":null,"code":"insufficient_quota"}"#,
            Q,
            "insufficient_quota",
        );
        check(
            r#"429: {"error":{"code":"1113","message":"余额不足或无可用资源包,请充值。"}}"#,
            Q,
            "余额不足",
        );
        check(
            r#"429: {"error":{"code":"1113","message":"您的账户已欠费，请充值后重试。"}}"#,
            Q,
            "欠费",
        );
        check(
            r#"429 {"type":"error","error":{"type":"rate_limit_error","code":"1113","message":"[1113][Insufficient balance or no resource package. Please recharge.]"}}"#,
            Q,
            "insufficient balance",
        );
        check(
            r#"400 {"type":"error","error":{"type":"invalid_request_error","message":"Your credit balance is too low to access the Anthropic API. Please go to Plans & Billing to upgrade or purchase credits."}}"#,
            Q,
            "credit balance",
        );
        check(
            r#"403: {"message":"Access denied, please make sure your account is in good standing.","type":"Arrearage","code":"Arrearage"}"#,
            Q,
            "arrear",
        );
        check(
            r#"429: {"error":{"code":"1308","message":"已达到 5 小时的使用上限。"}}"#,
            Q,
            "使用上限",
        );
        check("本月额度已用完", Q, "额度");
        check(
            "Budget has been exceeded! Current cost: 10.2",
            Q,
            "budget has been exceeded",
        );
    }

    #[test]
    fn auth_english_and_chinese() {
        use FailureClass::Auth as A;
        check(
            r#"401: {"message":"Incorrect API key provided: x.","type":"invalid_request_error","param":null,"code":"invalid_api_key"}"#,
            A,
            "status 401",
        );
        check(
            r#"403: {"message":"Permission denied for this model.","type":"permission_error","param":null,"code":"forbidden"}"#,
            A,
            "status 403",
        );
        check("invalid x-api-key", A, "invalid x-api-key");
        check(
            r#"{"error":{"code":400,"message":"API key not valid. Please pass a valid API key.","status":"INVALID_ARGUMENT"}}"#,
            A,
            "api key not valid",
        );
        check("No API key found for the selected model.", A, "no api key");
        check("Authentication Fails (no such user)", A, "authentication");
        check(
            r#"{"error":{"code":"1000","message":"身份验证失败。"}}"#,
            A,
            "身份验证",
        );
        check("鉴权失败，请检查 API Key", A, "鉴权");
        check("API Key 无效", A, "api key 无效");
        check(
            "Authorization Token非法，请确认Authorization Token正确传递。",
            A,
            "token非法",
        );
    }

    #[test]
    fn rate_limit_english_and_chinese() {
        use FailureClass::RateLimit as R;
        check(
            r#"429: {"message":"Rate limit reached for requests. Please try again in 1s.","type":"rate_limit_exceeded","param":null,"code":"rate_limit_exceeded"}"#,
            R,
            "status 429",
        );
        check(
            "Server requested 30s retry delay (max: 2s). 429 Rate limit reached for requests. Please try again in 1s.",
            R,
            "rate limit",
        );
        check("Too Many Requests", R, "too many requests");
        check(
            r#"{"error":{"code":"1302","message":"High concurrency usage of this API, please reduce concurrency"}}"#,
            R,
            "concurrency",
        );
        check("您当前使用该API的并发数过高，请降低并发", R, "并发");
        check("请求过于频繁，请稍后再试", R, "请求过于频繁");
        check("触发限流", R, "限流");
    }

    #[test]
    fn endpoint_statuses_transport_and_chinese() {
        use FailureClass::Endpoint as E;
        check(
            r#"500: {"message":"The server had an error while processing your request.","type":"server_error"}"#,
            E,
            "status 500",
        );
        check(
            r#"503: {"message":"The engine is currently overloaded, please try again later.","type":"server_error"}"#,
            E,
            "status 503",
        );
        check(
            r#"529 {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
            E,
            "status 529",
        );
        check("408: Request Timeout", E, "status 408");
        check("terminated", E, "terminated");
        check(
            "terminated: other side closed (UND_ERR_SOCKET)",
            E,
            "terminated",
        );
        check("terminated: read ECONNRESET", E, "terminated");
        check(
            "terminated: Body Timeout Error (UND_ERR_BODY_TIMEOUT)",
            E,
            "terminated",
        );
        check("Connection error.", E, "connection error");
        check(
            "Connection error.: connect ECONNREFUSED 127.0.0.1:33709",
            E,
            "connection error",
        );
        check("Request timed out.", E, "timed out");
        check(
            "Request timed out.: This operation was aborted (20)",
            E,
            "timed out",
        );
        check("Stream ended without finish_reason", E, "stream ended");
        check(
            "Google stream ended without a finish reason",
            E,
            "stream ended",
        );
        check(
            "fetch failed: getaddrinfo ENOTFOUND api.example.com",
            E,
            "enotfound",
        );
        check("read ECONNRESET", E, "econnreset");
        check("DNS lookup failed", E, "dns");
        check(
            "Client network socket disconnected before secure TLS connection was established",
            E,
            "socket",
        );
        check("Provider finish_reason: network_error", E, "network");
        check(
            r#"{"error":{"code":503,"message":"The model is overloaded. Please try again later.","status":"UNAVAILABLE"}}"#,
            E,
            "status 503",
        );
        check("服务繁忙，请稍后重试", E, "服务繁忙");
        check("请求超时", E, "超时");
        check("网络错误", E, "网络错误");
        check(
            "[1305][该模型当前访问量过大，请您稍后再试]",
            E,
            "访问量过大",
        );
    }

    #[test]
    fn links_and_generic_hints_are_not_evidence() {
        check(
            r#"413: {"message":"Request too large for model `llama-3.3-70b-versatile` in organization `org_01` service tier `on_demand` on tokens per minute (TPM): Limit 12000, Requested 18541, please reduce your message size and try again. Need more tokens? Upgrade to Dev Tier today at https://console.groq.com/settings/billing","type":"tokens","code":"rate_limit_exceeded"}"#,
            FailureClass::RateLimit,
            "rate_limit",
        );
        check(
            r#"{"error":{"code":429,"message":"Resource has been exhausted (e.g. check quota).","status":"RESOURCE_EXHAUSTED"}}"#,
            FailureClass::RateLimit,
            "status 429",
        );
        check(
            "see https://example.com/docs/quota-and-billing#content-filter",
            FailureClass::Unknown,
            "unrecognised",
        );
        // The message proper still counts when a link follows it.
        check(
            "Input data may contain inappropriate content. For details, see: https://help.aliyun.com/zh/model-studio/error-code#inappropriate-content",
            FailureClass::ContentPolicy,
            "inappropriate content",
        );
    }

    #[test]
    fn digits_in_a_body_are_never_a_status() {
        check(
            r#"400: {"message":"max_tokens must be below 500"}"#,
            FailureClass::Model,
            "status 400",
        );
        check(
            r#"404: {"message":"see error 503 in the docs"}"#,
            FailureClass::Model,
            "status 404",
        );
        check(
            "error 500 happened somewhere",
            FailureClass::Unknown,
            "unrecognised",
        );
        check(
            "the 429 page says hi",
            FailureClass::Unknown,
            "unrecognised",
        );
    }

    #[test]
    fn model_statuses_beat_transport_words_in_their_body() {
        check(
            r#"400: {"message":"Invalid value for 'timeout': must be an integer"}"#,
            FailureClass::Model,
            "status 400",
        );
        check(
            r#"404: {"message":"upstream model not found"}"#,
            FailureClass::Model,
            "status 404",
        );
        // Without a status the words still count.
        check("upstream connect error", FailureClass::Endpoint, "upstream");
    }

    #[test]
    fn model_english_and_chinese() {
        use FailureClass::Model as M;
        check(
            r#"404: {"message":"The model `alpha-1` does not exist or you do not have access to it.","type":"invalid_request_error","param":null,"code":"model_not_found"}"#,
            M,
            "status 404",
        );
        check("422: Unprocessable Entity", M, "status 422");
        check("Model not found: fake-b/nope", M, "model not found");
        check(
            "Unsupported parameter: 'max_tokens' is not supported with this model.",
            M,
            "unsupported parameter",
        );
        check("模型不存在，请检查模型代码", M, "模型不存在");
    }

    #[test]
    fn unknown_and_empty() {
        check("", FailureClass::Unknown, "unrecognised");
        check("Request aborted", FailureClass::Unknown, "unrecognised");
        check(
            "An unknown error occurred",
            FailureClass::Unknown,
            "unrecognised",
        );
        check("410: Gone", FailureClass::Unknown, "unrecognised");
        assert_eq!(text("410: Gone").status, Some(410));
    }

    #[test]
    fn rule_order_is_first_match_wins() {
        // content before everything, including a status of another class
        check(
            "429: content_filter triggered",
            FailureClass::ContentPolicy,
            "content_filter",
        );
        // context before quota/auth/rate statuses
        check(
            "401: context window exceeded",
            FailureClass::ContextOverflow,
            "context window",
        );
        // quota before auth status
        check(
            "401: billing account closed",
            FailureClass::Quota,
            "billing",
        );
        // auth before rate status
        check(
            "429: invalid api key",
            FailureClass::Auth,
            "invalid api key",
        );
        // rate before endpoint status
        check(
            "503: rate limit exceeded",
            FailureClass::RateLimit,
            "rate limit",
        );
        // endpoint status before model keywords
        check("500: model not found", FailureClass::Endpoint, "status 500");
    }

    #[test]
    fn pi_fixtures_in_fixtures_errors_classify_as_their_file_names_say() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/errors");
        let mut entries: Vec<_> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "txt"))
            .collect();
        entries.sort();
        assert!(
            entries.len() >= 40,
            "expected a real corpus, found {}",
            entries.len()
        );
        let mut failures = Vec::new();
        for path in &entries {
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            let expected = name.split('-').next().unwrap();
            let expected = FailureClass::parse(expected)
                .unwrap_or_else(|| panic!("{name}: unknown class prefix"));
            let raw = std::fs::read_to_string(path).unwrap();
            let message = raw.strip_suffix('\n').unwrap_or(&raw);
            let c = text(message);
            if c.class != expected {
                failures.push(format!(
                    "{name}: expected {expected}, got {} ({})",
                    c.class, c.matched
                ));
            }
        }
        assert!(failures.is_empty(), "{}", failures.join("\n"));
    }
}

#[cfg(test)]
#[path = "classify_props.rs"]
mod props;
