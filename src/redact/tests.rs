//! Tests of `redact`: fixed examples per rule, the provider-key corpus, the registry, the
//! config parsers, and random-input properties.

use super::*;
use crate::redact::bytes::is_unsafe;

const OPENAI: &str =
    "sk-proj-Xb7qJ2mWv9LdR4tZk1NcY8uHs3FpGe6Aa0Vi5Or-OxTQnB2_Ew9KzUm4Jy7Dc1Sg8Rh3Pl6Wf0Ae5Tb";
const ANTHROPIC: &str =
    "sk-ant-api03-q8Zr4Kx1Vn7Tb2Lm9Pw5Hc3Jd6Fs0Ga-Ye4Uo8Ri1Qt7Nk2Mv5Lx9Bz3Cw6Ds0Ef-Gh1Ij4Kl7MnAA";
const DEEPSEEK: &str = "sk-3f9c2a7e1b8d4c6f0a5e9b2d7c1f4a8e";
const JWT: &str = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6InBpIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U";
const BASIC: &str = "cGktdXNlcjpodW50ZXIyLXN1cGVyLXNlY3JldA==";
const GOOGLE: &str = "AIzaSyD-9tSrke72PouQMnMX-a7eZSW0jkFMBWY";
const SIG: &str = "fe5f80f77d5fa3beca038a248ff027d0445342fe2855ddc963176630326f1024";
const OPAQUE: &str = "tok_9Qm2Xv7Lp4Rz8Kw1";
const ZHIPU: &str = "3c5e7a9b1d2f4e6a8c0b2d4f6a8c0e2f.Xq7PzLm2Wk9RtYb4";

/// Fails when any 8-character window of `secret` is still in `out`.
fn assert_no_secret(input: &str, out: &str, secret: &str) {
    let chars: Vec<char> = secret.chars().collect();
    for w in chars.windows(8.min(chars.len())) {
        let w: String = w.iter().collect();
        assert!(
            !out.contains(&w),
            "secret fragment {w:?} survived\n  input:  {input:?}\n  output: {out:?}"
        );
    }
}

fn check(input: &str, secrets: &[&str]) -> String {
    let out = redact(input);
    for s in secrets {
        assert_no_secret(input, &out, s);
    }
    assert!(out.contains(MASK), "nothing masked in {out:?}");
    assert!(!out.chars().any(is_unsafe), "control char left in {out:?}");
    out
}

#[test]
fn openai_project_key_in_a_real_error() {
    let input = format!(
        "401: Incorrect API key provided: {OPENAI}. You can find your API key at https://platform.openai.com/account/api-keys."
    );
    let out = check(&input, &[OPENAI]);
    assert_eq!(
        out,
        "401: Incorrect API key provided: [redacted]. You can find your API key at https://platform.openai.com/account/api-keys."
    );
}

#[test]
fn anthropic_key_in_header_and_json() {
    let input = format!(
        r#"401: {{"type":"error","error":{{"type":"authentication_error","message":"invalid x-api-key"}}}} sent x-api-key: {ANTHROPIC}"#
    );
    let out = check(&input, &[ANTHROPIC]);
    assert!(out.ends_with("sent x-api-key: [redacted]"), "{out}");
    assert!(out.contains("invalid x-api-key"), "prose is kept: {out}");
}

#[test]
fn bearer_token_itself_is_masked_not_just_the_word() {
    // The reference runner's bug: `Authorization: Bearer X` kept X unless X was an sk- key.
    for input in [
        format!("Authorization: Bearer {JWT}"),
        format!("authorization:Bearer {JWT} rejected"),
        format!("request failed; bearer {JWT}"),
        format!("header Bearer%20{JWT}"),
        format!("BEARER {OPAQUE}"),
    ] {
        check(&input, &[JWT, OPAQUE]);
    }
    assert_eq!(
        redact(&format!("Authorization: Bearer {JWT}")),
        "Authorization: [redacted]"
    );
    assert_eq!(
        redact(&format!("got Bearer {OPAQUE}, denied")),
        "got Bearer [redacted], denied"
    );
    assert_eq!(
        redact(&format!("jwt {JWT} expired")),
        "jwt [redacted] expired"
    );
}

#[test]
fn authorization_values_are_masked_whole_scheme_included() {
    let out = check(&format!("Authorization: Basic {BASIC}\nnext"), &[BASIC]);
    assert_eq!(out, "Authorization: [redacted] next");
    let out = check(&format!("authorization={BASIC}&x=1"), &[BASIC]);
    assert_eq!(out, "authorization=[redacted]&x=1");
    let out = check(&format!("Proxy-Authorization: token {OPAQUE}"), &[OPAQUE]);
    assert_eq!(out, "Proxy-Authorization: [redacted]");
    let aws = format!(
        "Authorization: AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20240101/us-east-1/bedrock/aws4_request, SignedHeaders=host;x-amz-date, Signature={SIG}\nbody"
    );
    let out = check(&aws, &[SIG, "AKIAIOSFODNN7EXAMPLE"]);
    // Parameter-list schemes are masked to the end of the text: over-masking beats a leak.
    assert_eq!(out, "Authorization: [redacted]");
}

#[test]
fn query_parameters_in_urls() {
    let input = format!(
        "POST https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse&key={GOOGLE} failed"
    );
    let out = check(&input, &[GOOGLE]);
    assert_eq!(
        out,
        "POST https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse&key=[redacted] failed"
    );
    let input = format!(
        "GET https://b.s3.amazonaws.com/o?X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F20240101&X-Amz-Signature={SIG}&sig=Zm9vYmFy&token={OPAQUE}#frag"
    );
    let out = check(&input, &[SIG, OPAQUE, "AKIAIOSFODNN7EXAMPLE", "Zm9vYmFy"]);
    assert_eq!(
        out,
        "GET https://b.s3.amazonaws.com/o?X-Amz-Credential=[redacted]&X-Amz-Signature=[redacted]&sig=[redacted]&token=[redacted]#frag"
    );
    let out = check(
        &format!("see https://x.io/cb?a=1&amp;access_token={OPAQUE}"),
        &[OPAQUE],
    );
    assert!(out.ends_with("&amp;access_token=[redacted]"), "{out}");
    let out = check(
        "proxy http://admin:hunter2secret@10.0.0.1:8080/v1",
        &["hunter2secret"],
    );
    assert_eq!(out, "proxy http://[redacted]@10.0.0.1:8080/v1");
}

#[test]
fn json_fields_plain_and_escaped() {
    let input =
        format!(r#"{{"api_key":"{ZHIPU}","authorization":"Bearer {OPAQUE}","model":"glm-4.6"}}"#);
    let out = check(&input, &[ZHIPU, OPAQUE]);
    assert_eq!(
        out,
        r#"{"api_key":"[redacted]","authorization":"[redacted]","model":"glm-4.6"}"#
    );
    let input = format!(r#"400: {{\"token\": \"{ZHIPU}\", \"n\": 1}}"#);
    let out = check(&input, &[ZHIPU]);
    assert_eq!(out, r#"400: {\"token\": \"[redacted]\", \"n\": 1}"#);
    let input = format!("{{'Authorization': 'Basic {BASIC}', 'secret': '{OPAQUE}'}}");
    let out = check(&input, &[BASIC, OPAQUE]);
    assert_eq!(
        out,
        "{'Authorization': '[redacted]', 'secret': '[redacted]'}"
    );
    let out = check(&format!("OPENAI_API_KEY={ZHIPU} set"), &[ZHIPU]);
    assert_eq!(out, "OPENAI_API_KEY=[redacted] set");
}

#[test]
fn chinese_text_around_keys() {
    let input = format!("错误：无效的API密钥{DEEPSEEK}，请检查后重试");
    let out = check(&input, &[DEEPSEEK]);
    assert_eq!(out, "错误：无效的API密钥[redacted]，请检查后重试");
    let input = format!("认证失败 api_key：{ZHIPU} 余额不足");
    let out = check(&input, &[ZHIPU]);
    assert_eq!(out, "认证失败 api_key：[redacted] 余额不足");
    let input = format!("令牌 Bearer {OPAQUE}，已过期");
    assert_eq!(check(&input, &[OPAQUE]), "令牌 Bearer [redacted]，已过期");
}

#[test]
fn keys_at_the_end_of_the_text() {
    assert_eq!(redact(&format!("key {DEEPSEEK}")), "key [redacted]");
    assert_eq!(
        redact(&format!("x-api-key:{ANTHROPIC}")),
        "x-api-key:[redacted]"
    );
    assert_eq!(redact(&format!("Bearer {OPAQUE}")), "Bearer [redacted]");
    assert_eq!(redact(&format!("?key={GOOGLE}")), "?key=[redacted]");
    assert_eq!(
        redact(&format!(r#""api_key": "{ZHIPU}"#)),
        r#""api_key": "[redacted]"#
    );
    assert_eq!(
        redact(&format!("invalid apikey {ZHIPU}")),
        "invalid apikey [redacted]"
    );
}

#[test]
fn multi_line_errors_and_escape_sequences_become_single_spaces() {
    let input = format!(
        "upstream error\r\nAuthorization: Bearer {JWT}\nx-api-key: {OPAQUE}\n\t\u{1b}[31mfatal\u{1b}[0m\u{0}end\u{202e}x"
    );
    let out = check(&input, &[JWT, OPAQUE]);
    assert_eq!(
        out,
        "upstream error Authorization: [redacted] x-api-key: [redacted] fatal end x"
    );
}

#[test]
fn truncation_is_char_safe_and_marked() {
    let long = "é".repeat(1000);
    let out = redact(&long);
    assert_eq!(out.chars().count(), MAX_CHARS);
    assert!(out.ends_with('…'));
    assert!(out.starts_with("éé"));
    let cjk = format!("额度{}", "不足".repeat(300));
    let out = redact_capped(&cjk, 7);
    assert_eq!(out, "额度不足不足…");
    assert_eq!(redact_capped("abc", 3), "abc");
    assert_eq!(redact_capped("abcd", 3), "ab…");
    assert_eq!(redact_capped("abcd", 1), "…");
    assert_eq!(redact_capped("abcd", 0), "");
    assert_eq!(redact(""), "");
    // The cap applies after masking: a key across the cap never shows its head.
    let input = format!("{}{OPENAI}", "x ".repeat(195));
    let out = redact(&input);
    assert_no_secret(&input, &out, OPENAI);
    assert!(out.ends_with("[redacted]") || out.ends_with('…'), "{out}");
}

#[test]
fn huge_input_is_cut_without_exposing_a_half_key() {
    // Masking shrinks the text, so what lies near the pre-scan cut can end up inside the
    // cap: the cut must never leave the head of a key behind.
    let cap = 10_000;
    let limit = cap * 4 + 16 * 1024;
    let unit = format!("{OPENAI} ");
    let head = unit.repeat((limit - 200) / unit.len());
    for offset in 1..OPENAI.len() {
        let pad = " ".repeat(limit - offset - head.len());
        let input = format!("{head}{pad}{OPENAI} end");
        let out = redact_capped(&input, cap);
        assert_no_secret(&input, &out, OPENAI);
        let input = format!("{head}{pad}Bearer {OPAQUE} end");
        let out = redact_capped(&input, cap);
        assert_no_secret(&input, &out, OPAQUE);
    }
    let input = format!("{} {OPENAI}", "word ".repeat(1_000_000));
    let out = redact(&input);
    assert_eq!(out.chars().count(), MAX_CHARS);
}

#[test]
fn prose_without_secrets_is_unchanged() {
    for text in [
        "429: rate limit exceeded, retry after 20s",
        "task-force disk-usage mask-rcnn risk-based",
        "max_tokens: 4096 exceeds the context length; too many tokens",
        "Authorization header is missing",
        "API key not valid. Please pass a valid API key.",
        "invalid x-api-key",
        "Bearer",
        "skip sk-short",
        "模型不存在 (model_not_found)",
        "https://api.example.com/v1/chat?stream=true&model=glm-4.6",
    ] {
        assert_eq!(redact(text), text);
    }
}

#[test]
fn redaction_is_idempotent() {
    for input in [
        format!("Authorization: Bearer {JWT} and {OPENAI} at https://h/?key={GOOGLE}"),
        format!(r#"{{"api_key":"{ZHIPU}"}} Bearer {OPAQUE}"#),
        "x".repeat(1000),
    ] {
        let once = redact(&input);
        assert_eq!(redact(&once), once);
    }
}

/// Every secret shape in every surrounding: nothing of the secret survives.
#[test]
fn no_secret_survives_in_any_context() {
    let shaped = [
        OPENAI,
        ANTHROPIC,
        DEEPSEEK,
        GOOGLE,
        JWT,
        "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",
        "ghp_Z8yX7wV6uT5sR4qP3oN2mL1kJ0iH9gF8eD7c",
        "gsk_Q1w2E3r4T5y6U7i8O9p0A1s2D3f4G5h6J7k8L9z0",
        "xai-Zq8Wx7Ec6Rv5Tb4Yn3Um2Ik1Ol0Pa9Sd8Fg7Hj6",
        "hf_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789",
    ];
    let named = [BASIC, SIG, OPAQUE, ZHIPU];
    let contexts: &[(&str, &str)] = &[
        ("", ""),
        ("error: ", "."),
        ("密钥", "，请检查"),
        ("line one\n", "\nline three"),
        ("(", ")"),
        ("\"", "\""),
        ("'", "'"),
        ("`", "`"),
        ("<", ">"),
        ("\u{1b}[1m", "\u{1b}[0m"),
    ];
    let wrappers_shaped: &[fn(&str) -> String] = &[
        |s| s.to_string(),
        |s| format!("key {s}"),
        |s| format!("Authorization: Bearer {s}"),
        |s| format!("https://h/v1?key={s}&x=1"),
        |s| format!(r#"{{"api_key":"{s}"}}"#),
    ];
    let wrappers_named: &[fn(&str) -> String] = &[
        |s| format!("Authorization: Bearer {s}"),
        |s| format!("Authorization: Basic {s}"),
        |s| format!("authorization={s}"),
        |s| format!("Bearer {s}"),
        |s| format!("x-api-key: {s}"),
        |s| format!("api-key:{s}"),
        |s| format!("apikey={s}"),
        |s| format!("https://h/v1?signature={s}"),
        |s| format!("https://h/v1?a=b&sig={s}"),
        |s| format!("https://h/v1?access_token={s}"),
        |s| format!(r#"{{"api_key": "{s}"}}"#),
        |s| format!(r#"{{"authorization":"Bearer {s}"}}"#),
        |s| format!(r#"{{\"token\":\"{s}\"}}"#),
        |s| format!("password={s}"),
    ];
    let mut cases = 0;
    for (pre, post) in contexts {
        for secret in shaped {
            for wrap in wrappers_shaped {
                let input = format!("{pre}{}{post}", wrap(secret));
                check(&input, &[secret]);
                cases += 1;
            }
        }
        for secret in named {
            for wrap in wrappers_named {
                let input = format!("{pre}{}{post}", wrap(secret));
                check(&input, &[secret]);
                cases += 1;
            }
        }
    }
    assert!(cases > 900);
}

#[test]
fn review_findings_are_masked() {
    let cases = [
        (
            "无效的令牌 token=abcdef1234567890abcdef1234567890 鉴权失败",
            "abcdef1234567890",
        ),
        ("secret=mysecretvalue123", "mysecretvalue123"),
        (
            "Bearer: \"quoted-token-value-123456\"",
            "quoted-token-value",
        ),
        ("bearer_token=0123456789abcdefABCDEF", "0123456789abcdef"),
        ("key: sk_live_51HxAbCdEfGhIjKlMn", "51HxAbCdEfGh"),
        (
            "{\"error\":\"Authorization: Bearer \\\"zzTopSecret987654321\\\"\"}",
            "zzTopSecret",
        ),
    ];
    for (text, secret) in cases {
        let out = redact(text);
        assert!(!out.contains(secret), "{text:?} -> {out:?}");
        assert!(out.contains(MASK), "{text:?} -> {out:?}");
    }
    assert_eq!(redact("the token was rejected"), "the token was rejected");
}

// ---------------------------------------------------------------------------------------------
// Keys of any shape (issue: masking must not depend on the key's shape).

/// Keys real providers use that have no vendor prefix the scanners know.
const CORPUS_KEYS: &[&str] = &[
    "1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d.AbCdEfGhIjKlMnOp",
    "3f2504e0-4f89-11d3-9a0c-0305e82c3301",
    "da39a3ee5e6b4b0d3255bfef95601890afd80709",
    "bce-v3/ALTAK-AbCdEfGh1234567890/0123456789abcdef0123456789abcdef01234567",
    "SK-ABCDEF1234567890ABCDEF12",
    "Zq8vR2mX9kLp4TnW7yBc",
    "nvapi-Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z",
    "ms-4f8a9c2e-1b3d-4e5f-8a9b-0c1d2e3f4a5b",
    "AbCdEfGhIjKlMnOpQrStUvWxYz012345",
];

/// Text that must come out exactly as it went in.
const CORPUS_KEEP: &[&str] = &[
    "claude-3-5-sonnet-20241022",
    "qwen3-235b-a22b-instruct-2507",
    "deepseek-v3.1-terminus",
    "gpt-4o-mini-2024-07-18",
    "glm-4.6",
    "moonshot-v1-128k",
    "zai-org/GLM-4.6",
    "fake-a/alpha-1",
    "Qwen/Qwen2.5-72B-Instruct",
    "meta-llama/Llama-3.3-70B-Instruct-Turbo",
    "http://127.0.0.1:40215/a/v1/chat/completions",
    "/tmp/pccr-test-Ab12Cd/agent/pi-ccswitch-run-state.json",
    "/home/me/.pi/agent/models.json",
    "fake-a@http://127.0.0.1:8080/a/v1",
    "insufficient_quota",
    "rate_limit_exceeded",
    "context_length_exceeded",
    "invalid_request_error",
    "ECONNREFUSED",
    "UND_ERR_SOCKET",
    "ERR_UNKNOWN_BUILTIN_MODULE",
    "internationalization",
    "2026-11-30T14:37:37.123Z",
    "1764513457123",
    "pi-ccswitch-run-state.json.corrupt-1764513457123",
    "余额不足，请充值",
    "[ccswitch] switch zai/glm-4.6 → dashscope/qwen3-max (quota)",
];

/// Identifiers of sixteen or more characters without separators, as error text carries them.
const IDENTIFIERS: &[&str] = &[
    "ReadableStreamDefaultReader",
    "XMLHttpRequestUpload",
    "HTTPSConnectionPool",
    "claude35sonnet20241022",
    "getAvailableModelsResponse",
    "UnhandledPromiseRejection",
    "SocketConnectTimeoutError",
    "ThrottlingException",
    "ServiceUnavailableException",
    "ModelStreamErrorException",
    "ResourceNotFoundException",
    "AuthenticationError",
    "UnprocessableEntityError",
    "maxCompletionTokens",
    "thinkingBudgetTokens",
    "contextWindowExceeded",
    "textEmbedding3Large",
    "sha256WithRSAEncryption",
    "base64encodedString",
    "WindowsKeyboardLayout",
    "ERR_STREAM_PREMATURE_CLOSE",
];

#[test]
fn corpus_keys_are_masked_whole_wherever_they_appear() {
    for key in CORPUS_KEYS {
        let cases = [
            (key.to_string(), MASK.to_string()),
            (
                format!("error: {key} rejected"),
                format!("error: {MASK} rejected"),
            ),
            (
                format!("bad credential {key}."),
                format!("bad credential {MASK}."),
            ),
            (
                format!(r#"{{"id":"{key}","n":1}}"#),
                format!(r#"{{"id":"{MASK}","n":1}}"#),
            ),
            (
                format!(r#"400: {{\"detail\":\"{key}\"}}"#),
                format!(r#"400: {{\"detail\":\"{MASK}\"}}"#),
            ),
            (format!("KEY={key} next"), format!("KEY={MASK} next")),
            (format!("x={key}&y=2"), format!("x={MASK}&y=2")),
            (format!("({key})"), format!("({MASK})")),
            (
                format!("密钥无效 {key}，请检查"),
                format!("密钥无效 {MASK}，请检查"),
            ),
            (format!("'{key}'"), format!("'{MASK}'")),
            (format!("\u{1b}[1m{key}\u{1b}[0m"), format!(" {MASK} ")),
        ];
        for (input, expected) in cases {
            assert_eq!(redact(&input), expected, "input: {input:?}");
        }
    }
}

#[test]
fn corpus_text_is_never_changed() {
    for text in CORPUS_KEEP.iter().chain(IDENTIFIERS) {
        for input in [
            text.to_string(),
            format!("model {text} failed: 429"),
            format!(r#"{{"model":"{text}","n":1}}"#),
            format!("model={text}&x=1"),
            format!("see {text}."),
        ] {
            assert_eq!(redact(&input), input);
        }
    }
    let real = "[ccswitch] fail fake-a/alpha-1 (quota, provider scope, matched \"insufficient_quota\"): 429 You exceeded your current quota (insufficient_quota) at 2026-11-30T14:37:37.123Z";
    assert_eq!(redact(real), real);
}

#[test]
fn real_provider_errors_keep_their_words() {
    let cases = [
        (
            r#"{"error":{"message":"Incorrect API key provided: sk-proj-****abcd. You can find your API key at https://platform.openai.com/account/api-keys.","type":"invalid_request_error","code":"invalid_api_key"}}"#,
            r#"{"error":{"message":"Incorrect API key provided: [redacted]. You can find your API key at https://platform.openai.com/account/api-keys.","type":"invalid_request_error","code":"invalid_api_key"}}"#,
        ),
        (
            r#"{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"},"request_id":"req_011CSHoEeqs5C35K2UUqR7Fy"}"#,
            r#"{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"},"request_id":"[redacted]"}"#,
        ),
        (
            r#"{"code":"InvalidApiKey","message":"Invalid API-key provided.","request_id":"3f2504e0-4f89-11d3-9a0c-0305e82c3301"}"#,
            r#"{"code":"InvalidApiKey","message":"Invalid API-key provided.","request_id":"[redacted]"}"#,
        ),
        (
            "Authentication Fails, Your api key: ****abcd is invalid",
            "Authentication Fails, Your api key: [redacted] is invalid",
        ),
    ];
    for (input, expected) in cases {
        assert_eq!(redact(input), expected);
    }
    for kept in [
        r#"{"error":{"code":"1113","message":"余额不足或无可用资源包,请充值。"}}"#,
        "No API key found for provider fake-a",
        "429 Rate limit reached for gpt-4o-mini in organization org-AbCdEf123456 on tokens per min (TPM): Limit 200000, Used 199812, Requested 1234.",
        "SyntaxError: Unexpected token: < in JSON at position 0",
        "Unexpected token '<', \"<!DOCTYPE \"... is not valid JSON",
        "Cannot find module '/home/me/.npm-global/lib/node_modules/@earendil-works/pi-coding-agent/dist/cli.js'",
        "pi 0.84.4 (node v22.19.0) at /home/me/.nvm/versions/node/v22.19.0/bin/pi",
        r#"400 {"error":{"message":"This model's maximum context length is 128000 tokens. However, your messages resulted in 130532 tokens.","code":"context_length_exceeded"}}"#,
        "The model `deepseek-ai/DeepSeek-V3.1-Terminus` does not exist",
        "ThrottlingException: Too many requests (Service: BedrockRuntime, Status Code: 429)",
        "model: claude-sonnet-4-5-20250929, anthropic-beta: interleaved-thinking-2025-05-14",
        "wrote /tmp/.tmpAbC123/agent/pi-ccswitch-run-state.json.lock",
    ] {
        assert_eq!(redact(kept), kept);
    }
}

#[test]
fn shape_rule_boundaries() {
    // A URL path holding a key masks the key component only.
    assert_eq!(
        redact("GET https://h/v1/files/3f2504e0-4f89-11d3-9a0c-0305e82c3301/content"),
        "GET https://h/v1/files/[redacted]/content"
    );
    // Base64 padding goes with the key; an AWS-style secret with `/` and `+` is one key.
    assert_eq!(
        redact("secret wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY= ok"),
        "secret [redacted] ok"
    );
    assert_eq!(
        redact("got Zq8vR2mX9kLp4TnW7yBc== back"),
        "got [redacted] back"
    );
    // Too short, one character class, or plain hex under 32 digits: not keys by shape.
    for text in [
        "Zq8vR2mX9kLp4Tn",
        "ABCDEFGHIJKLMNOPQRSTUVWXYZ",
        "abcdefghijklmnopqrstuvwxyz",
        "0123456789012345678901234567890123456789",
        "commit 3f2504e",
        "SK-Hynix memory",
        "sk-learn",
    ] {
        assert_eq!(redact(text), text);
    }
    // Upper-case `SK-` and mixed-case `Sk-` need a digit; lower-case `sk-` does not.
    assert_eq!(redact("SK-ABCDEFGH1"), MASK);
    assert_eq!(redact("Sk-abcdefgh2"), MASK);
    assert_eq!(redact("sk-abcdefgh"), MASK);
}

#[test]
fn random_base62_segments_are_caught() {
    // A fixed-seed xorshift: the test is deterministic and fails if the rule gets weaker.
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut draw = |alphabet: &[u8], len: usize| -> Vec<u8> {
        (0..len)
            .map(|_| alphabet[usize::try_from(next() % alphabet.len() as u64).unwrap()])
            .collect()
    };
    let base62 = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    let base36 = b"abcdefghijklmnopqrstuvwxyz0123456789";
    // Measured with 300 000 draws each: base-62 misses 3 at length 20, 2 at 24, 0 at 32;
    // lower-case base-36 misses 30 at 20, 0 at 32.
    for (alphabet, len, max_misses) in [
        (&base62[..], 20, 2),
        (&base62[..], 32, 0),
        (&base36[..], 32, 0),
    ] {
        let mut misses = Vec::new();
        for _ in 0..20_000 {
            let s = draw(alphabet, len);
            let classes = [
                s.iter().any(u8::is_ascii_uppercase),
                s.iter().any(u8::is_ascii_lowercase),
                s.iter().any(u8::is_ascii_digit),
            ];
            if classes.iter().filter(|&&c| c).count() >= 2 && !shape::random_looking(&s) {
                misses.push(String::from_utf8(s).unwrap());
            }
        }
        assert!(misses.len() <= max_misses, "len {len}: {misses:?}");
    }
    for id in IDENTIFIERS {
        for segment in id.split('_') {
            assert!(!shape::random_looking(segment.as_bytes()), "{segment}");
        }
    }
}

/// Issue 20: echoes that transform a known key still mask it — percent-encoded in a URL,
/// split by a line break, or only its first characters shown.
#[test]
fn transformed_echoes_of_known_secrets_are_masked() {
    add_known_secrets(["horse/battery+staple=07".to_string()]);
    for text in [
        "API key not valid for request https://gw.invalid/v1?key=horse%2Fbattery%2Bstaple%3D07",
        "invalid key=horse%2fbattery%2bstaple%3d07 given",
    ] {
        let out = redact(text);
        assert!(!out.contains("battery"), "{out}");
    }
    let key = "zq7Lm2Xv9Rt4Wp8Ks1Hd6Fg3Jc5Nb0";
    add_known_secrets([key.to_string()]);
    let split = format!("Invalid API key: {}\n{}", &key[..13], &key[13..]);
    let out = redact(&split);
    assert!(
        !out.contains(&key[..13]) && !out.contains(&key[13..]),
        "{out}"
    );
    assert!(out.starts_with("Invalid API key: "), "{out}");
    let prefix = format!("Incorrect API key provided: {}****************", &key[..12]);
    let out = redact(&prefix);
    assert!(!out.contains(&key[..12]), "{out}");
    // Short common heads are not a leak: `sk-proj-` of a long key stays readable in prose.
    add_known_secrets(["sk-proj-QmT4vX8nL2pR6sW0yB3dF7hJ9kZ".to_string()]);
    assert_eq!(
        redact("keys start with sk-proj- here"),
        "keys start with sk-proj- here"
    );
    assert!(redact("(key: sk-proj-QmT4vX8n…)").contains(MASK));
}

#[path = "phrases_tests.rs"]
mod phrases;
#[path = "properties_tests.rs"]
mod properties;
