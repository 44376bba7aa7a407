//! Classification tables and fixtures (`classify.rs`).

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
        ..Observation::default()
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
            ..Observation::default()
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
        let expected =
            FailureClass::parse(expected).unwrap_or_else(|| panic!("{name}: unknown class prefix"));
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

/// A classification carries the reset its provider stated from the moment it is made: read
/// once, relative to when the failure was observed, for quotas and rate limits only.
#[test]
fn a_quota_or_rate_limit_carries_its_stated_reset() {
    let now_ms = 1_800_000_000_000;
    let observe = |error_message: &str| {
        classify(&Observation {
            error_message,
            stop_reason: "error",
            now_ms,
            ..Observation::default()
        })
    };
    let c = observe(r#"429: {"error":{"message":"Rate limit reached. Please try again in 30s."}}"#);
    assert_eq!(c.class, FailureClass::RateLimit);
    let stated = c.stated.expect("the provider said when");
    assert_eq!(stated.at_ms, now_ms + 30_000);
    // The same words on a server error state nothing the breakers use.
    let c = observe("503: overloaded. Please try again in 30s.");
    assert_eq!(c.class, FailureClass::Endpoint);
    assert_eq!(c.stated, None);
    // A quota that does not say when: none.
    let c = observe("402: insufficient balance");
    assert_eq!((c.class, c.stated), (FailureClass::Quota, None));
}
