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

// ---------------------------------------------------------------------------------------------
// Values announced by key/token phrases, English and Chinese.

#[test]
fn values_after_key_phrases_are_masked_whatever_their_shape() {
    let cases = [
        (
            "401 Incorrect API key provided: hunter22. You can find your API key at https://x.io/k.",
            "401 Incorrect API key provided: [redacted]. You can find your API key at https://x.io/k.",
        ),
        ("Invalid API key: abc", "Invalid API key: [redacted]"),
        (
            "api key provided: p@ss#w0rd!",
            "api key provided: [redacted]",
        ),
        (
            "api key provided hunter22 here",
            "api key provided [redacted] here",
        ),
        ("api_key=hunter22&x=1", "api_key=[redacted]&x=1"),
        (
            "invalid apikey 3f2a9c7e1b8d4c6f0a5e",
            "invalid apikey [redacted]",
        ),
        ("token: hunter22", "token: [redacted]"),
        ("access key 9f3kXq2LmP7wR4tZ1vBn", "access key [redacted]"),
        (
            "secret key: hunter22, retry",
            "secret key: [redacted], retry",
        ),
        ("password: hunter22;", "password: [redacted];"),
        ("(password: hunter22)", "(password: [redacted])"),
        ("password: hunter22<br>", "password: [redacted]<br>"),
        ("API密钥：hunter22，请检查", "API密钥：[redacted]，请检查"),
        ("密钥: hunter22", "密钥: [redacted]"),
        ("秘钥：hunter22。", "秘钥：[redacted]。"),
        ("令牌：hunter22已过期", "令牌：[redacted]已过期"),
        ("口令: hunter22", "口令: [redacted]"),
        ("密码：hunter22", "密码：[redacted]"),
        ("无效的API Key: hunter22", "无效的API Key: [redacted]"),
        ("API Key 无效：hunter22", "API Key 无效：[redacted]"),
        ("密钥无效：hunter22", "密钥无效：[redacted]"),
        ("密码=hunter22&a=1", "密码=[redacted]&a=1"),
        ("x-api-key: 'hunter 22'", "x-api-key: '[redacted]'"),
    ];
    for (input, expected) in cases {
        assert_eq!(redact(input), expected, "input: {input:?}");
    }
}

#[test]
fn prose_after_key_phrases_is_kept() {
    for text in [
        "api key is invalid",
        "token limit exceeded",
        "The API key provided is invalid.",
        "Incorrect API key provided.",
        "invalid apikey format",
        "access key not found",
        "secret key rotation required",
        "密钥错误，请检查",
        "密码错误",
        "令牌已过期",
        "API Key 无效",
        "max_tokens: 4096",
        "tokens: 4096",
        r#"{"key": {"a": 1}}"#,
        "password: (none)",
    ] {
        assert_eq!(redact(text), text);
    }
}

#[test]
fn redis_urls_lose_their_password() {
    assert_eq!(
        redact("connect redis://user:s3cr3t-pw@cache:6379/0 failed"),
        "connect redis://[redacted]@cache:6379/0 failed"
    );
    assert_eq!(
        redact("rediss://:p;ss,w@rd@cache.example.com:6380"),
        "rediss://[redacted]@cache.example.com:6380"
    );
    assert_eq!(redact("redis://cache:6379/0"), "redis://cache:6379/0");
    assert_eq!(
        redact("https://[::1]:8080/v1 and http://h/a@b"),
        "https://[::1]:8080/v1 and http://h/a@b"
    );
}

// ---------------------------------------------------------------------------------------------
// Known secrets. The registry is global and shared by all tests in this process: every test
// registers values of its own and never assumes the registry is empty.

#[test]
fn known_secrets_are_masked_in_every_spelling() {
    let secret = "kn0wn pass\"phrase\\-t1";
    add_known_secrets([secret.to_string()]);
    assert_eq!(
        redact(&format!("login with {secret} failed")),
        "login with [redacted] failed"
    );
    let escaped = serde_json::to_string(secret).unwrap();
    assert_eq!(
        redact(&format!(r#"{{"p":{escaped}}}"#)),
        r#"{"p":"[redacted]"}"#
    );
    // A short human password, masked because the runner knows it.
    add_known_secrets(["hunter2-zebra".to_string()]);
    assert_eq!(
        redact("auth failed for hunter2-zebra at 10:00"),
        "auth failed for [redacted] at 10:00"
    );
    // With a trailing newline in the value: the trimmed value and the cleaned form count too.
    add_known_secrets(["tab\tsep-value\n".to_string()]);
    assert_eq!(redact("x tab\tsep-value y"), "x [redacted] y");
    // Twice registered, twice masked: the same output.
    add_known_secrets(["hunter2-zebra".to_string(), "hunter2-zebra".to_string()]);
    assert_eq!(redact("hunter2-zebrahunter2-zebra"), MASK);
}

#[test]
fn short_numeric_and_boolean_values_are_not_registered() {
    add_known_secrets(
        [
            "x", "abcde", "12345678", "-42.5000", "true", "FALSE", "", "  abc  ",
        ]
        .map(String::from),
    );
    let text = "x abcde 12345678 -42.5000 true FALSE y  abc  z";
    assert_eq!(redact(text), text);
    assert_eq!(MIN_SECRET_CHARS, 6);
}

#[test]
fn a_known_secret_is_masked_before_the_shape_rules_cut_it() {
    // The shape rules would mask the `sk-` tail only, leaving the head of the known value.
    let secret = "my-prefix-sk-0a1b2c3d4e5f";
    add_known_secrets([secret.to_string()]);
    assert_eq!(redact(&format!("key {secret}!")), "key [redacted]!");
}

#[test]
fn precut_never_splits_a_known_secret() {
    let secret = "straddling known secret 77";
    add_known_secrets([secret.to_string()]);
    let cap = 10;
    let limit = cap * 4 + 16 * 1024;
    for offset in 1..secret.len() {
        let head = "a ".repeat((limit - offset) / 2);
        let head = format!("{head}{}", " ".repeat(limit - offset - head.len()));
        let input = format!("{head}{secret} tail");
        let cut = precut(&input, cap);
        assert_eq!(cut, head, "offset {offset}");
    }
}

// ---------------------------------------------------------------------------------------------
// Where known secrets come from.

#[test]
fn secret_environment_names() {
    for name in [
        "OPENAI_API_KEY",
        "ANTHROPIC_AUTH_TOKEN",
        "DB_PASS",
        "db_password",
        "MYSQL_PWD_PASSWD",
        "GPG_PASSPHRASE",
        "AWS_SECRET_ACCESS_KEY",
        "GOOGLE_APPLICATION_CREDENTIALS",
        "DEPLOY_PRIVATE_KEY",
        "SESSION_COOKIE",
        "HTTP_AUTHORIZATION",
        "OAUTH_CLIENT",
        "apiKey",
        "ZHIPU_TOKEN",
        "X_SESSION",
    ] {
        assert!(is_secret_env_name(name), "{name} should be secret");
    }
    for name in [
        "PATH",
        "HOME",
        "LANG",
        "PI_CODING_AGENT_DIR",
        "SSH_AUTH_SOCK",
        "GIT_ASKPASS",
        "SSH_ASKPASS",
        "SUDO_ASKPASS",
        "XAUTHORITY",
        "ICEAUTHORITY",
        "KEYTIMEOUT",
        "XKB_KEYBOARD_LAYOUT",
        "KEYMAP",
        "GIT_AUTHOR_NAME",
        "GIT_AUTHOR_EMAIL",
        "XDG_SESSION_TYPE",
        "XDG_SESSION_ID",
        "DBUS_SESSION_BUS_ADDRESS",
        "SESSION_MANAGER",
        "DESKTOP_SESSION",
        "GNOME_KEYRING_CONTROL",
        "BYPASS_PROXY",
        "PASSENGER_HOME",
        "",
    ] {
        assert!(!is_secret_env_name(name), "{name} should not be secret");
    }
}

#[test]
fn models_json_values_resolve_like_pi() {
    let text = r#"{"providers": {
        "a": {"baseUrl": "http://x", "apiKey": "literal-key-123",
              "headers": {"X-Org": "$ORG_ID", "X-Two": "${PREFIX}_${SUFFIX}"},
              "models": [{"id": "m", "headers": {"X-M": "model-header-value"}}, {"id": "n"}]},
        "b": {"apiKey": "!security find-generic-password -w -s pi"},
        "c": {"apiKey": "$$literal-dollar"},
        "d": {"apiKey": "$!bang-literal"},
        "e": {"apiKey": "${MISSING_VAR}-tail", "headers": {"H": "$EMPTY_VAR"}},
        "f": {"apiKey": "${not a name}"},
        "g": {"apiKey": "cost$5x and ${unclosed"},
        "h": {"apiKey": 42, "headers": "not an object", "models": "not a list"}
    }}"#;
    let env = |name: &str| match name {
        "ORG_ID" => Some("org-abcdef".to_string()),
        "PREFIX" => Some("pre".to_string()),
        "SUFFIX" => Some("suffix-value".to_string()),
        "EMPTY_VAR" => Some(String::new()),
        _ => None,
    };
    assert_eq!(
        secrets_in_models_json(text, &env),
        [
            "literal-key-123",
            "org-abcdef",
            "pre_suffix-value",
            "pre",
            "suffix-value",
            "model-header-value",
            "$literal-dollar",
            "!bang-literal",
            "${not a name}",
            "cost$5x and ${unclosed",
        ]
    );
    let none = |_: &str| None;
    for bad in [
        "",
        "{",
        "[]",
        "null",
        r#"{"providers": 5}"#,
        r#"{"providers": {"a": 5}}"#,
    ] {
        assert!(secrets_in_models_json(bad, &none).is_empty(), "{bad}");
    }
}

#[test]
fn config_files_pi_accepts_give_up_their_keys_too() {
    let none = |_: &str| None;
    // Comments, trailing commas and a BOM: Pi strips them before parsing, so must we.
    let jsonc = "\u{feff}{ // my providers\n \"providers\": { /* zhipu */ \"p\": {\"apiKey\": \"Tr0ub4dor&3x\", \"url\": \"http://a//b, }\", \"models\": [{\"id\": \"m\",},],},},}";
    assert_eq!(secrets_in_models_json(jsonc, &none), ["Tr0ub4dor&3x"]);
    assert_eq!(
        secrets_in_auth_json("\u{feff}{\"p\": {\"type\": \"api_key\", \"key\": \"correcthorse\"}}"),
        ["correcthorse"]
    );
    // An auth header's token is known on its own as well as with its scheme.
    let headers =
        r#"{"providers": {"p": {"headers": {"Authorization": "Bearer hdrSecretValue12345"}}}}"#;
    assert_eq!(
        secrets_in_models_json(headers, &none),
        ["Bearer hdrSecretValue12345", "hdrSecretValue12345"]
    );
}

#[test]
fn auth_json_strings_except_type() {
    let text = r#"{
        "anthropic": {"type": "oauth", "access": "acc-tok-1", "refresh": "ref-tok-2", "expires": 123},
        "openai": {"type": "api_key", "key": "sk-test-xyz"},
        "weird": "plain-string",
        "n": 5
    }"#;
    assert_eq!(
        secrets_in_auth_json(text),
        ["acc-tok-1", "ref-tok-2", "sk-test-xyz", "plain-string"]
    );
    for bad in ["", "{", "[\"a\"]", "null", "\"str\""] {
        assert!(secrets_in_auth_json(bad).is_empty(), "{bad}");
    }
}

// ---------------------------------------------------------------------------------------------
// Inputs that broke a property once.

/// Checks `redact_capped(x, cap)` is a fixed point of itself.
fn assert_idempotent(input: &str, cap: usize) -> String {
    let once = redact_capped(input, cap);
    assert_eq!(redact_capped(&once, cap), once, "input: {input:?}");
    once
}

#[test]
fn url_credentials_before_a_masked_host_and_path() {
    // The host and a key in the path were masked as one chain, swallowing the `/` that ended
    // the authority: the next pass took everything up to the last `@` as credentials.
    assert_eq!(
        assert_idempotent("http://u:p@h/SK-00AAAAA0AAAAA000AA0A@", MAX_CHARS),
        "http://[redacted]@h/[redacted]@"
    );
    assert_idempotent(
        "http://u:p@h/0a0a00a0a0a000a0a00aa0a0aa0a00aa.aAaAaa0AAaaA0aAA[redacted]@",
        MAX_CHARS,
    );
    assert_eq!(
        assert_idempotent(
            "://{bce-v3/ALTAK-AaaA0aa0a0AaAa0AAaaa/aa0aa0aa0a00a0aaa00aaaa0aa0aa0aaa00000a0@",
            MAX_CHARS
        ),
        "://{[redacted]@"
    );
    // A known password is masked by the registry; the URL rule leaves the rest alone.
    add_known_secrets(["url-known-pw-1".to_string()]);
    assert_eq!(
        assert_idempotent("redis://user:url-known-pw-1@cache:6379", MAX_CHARS),
        "redis://user:[redacted]@cache:6379"
    );
}

#[test]
fn a_masked_host_and_path_is_not_credentials() {
    // Host and path were masked as one run, swallowing the `/` that ended the authority; the
    // next pass took `[redacted]$` for credentials.
    assert_eq!(
        assert_idempotent(
            "://aa000a0aaaa000aa0aa00000a0aa0aaabce-v3/ALTAK-0AAaaAA00AA00AaaAAAA/000a0aa00aa0aa0aaa000a000a0aaaa0a0aa00a0$@",
            MAX_CHARS
        ),
        "://[redacted]$@"
    );
}

#[test]
fn a_cut_long_token_is_judged_once() {
    // The whole token (with its `/`) was no key to the loose `密钥` rule, its cut head was.
    let input = "密钥-0a0aa0aa0aa00a0a0000000aaaa000aa.00aaa0aAaAaa00a0apikey-aa0a0aaaa0000a0aa000aa00aa0a0a00.aAA00aAaA0a0AAAA/";
    assert_eq!(assert_idempotent(input, 67), "密钥[redacted]/");
}

#[test]
fn the_rest_of_a_word_glued_to_a_key_goes_with_it() {
    // Left behind after `[redacted]`, the `.aaA00…` tail read as a key of its own next time.
    for input in [
        "SK-000AA0AA000AA00AA0AAaaaa0aaaa0aa000aa00aaaaaaaa00aaa.aaA00aaAa0Aa00Aaprovided",
        "SK-0000AA00AA00AAAA000000aa000000a0a0aaa0aa00a00aaaaa0a.0A00aAaAaAa0AaA000a000aa0aaaaa00aa00aa00aaa0aa00.A00AA00000a0A0aA",
    ] {
        assert_eq!(assert_idempotent(input, MAX_CHARS), MASK);
    }
    assert_eq!(redact("AKIAIOSFODNN7EXAMPLEabc x"), "[redacted] x");
    assert_eq!(redact("key sk-abcdefgh12. Next"), "key [redacted]. Next");
}

#[test]
fn a_chain_cut_short_by_a_mask_is_not_judged_whole() {
    // Pass one masked `ALTAK-…/hex`; pass two saw the chain end at the mask and judged the
    // shorter `AaAaa+aAAprovidedbce-v3` a base64 key.
    let input = "AaAaa+aAAprovidedbce-v3/ALTAK-0aAAa000aAAA0A0AaaAa/a0aa00aaaaaa0a0a0a00a0a00aaa00a0aa0aa00a/provided";
    assert_eq!(
        assert_idempotent(input, MAX_CHARS),
        "AaAaa+aAAprovidedbce-v3/[redacted]/provided"
    );
}

#[test]
fn truncation_never_splits_a_mask() {
    // Cut as `'[redacted…`, the half mask read as an unterminated quoted value next time.
    let out = assert_idempotent("sk-\né密钥\nsk-aaA00a[A a0provided\nx-api-key:'A' ", 52);
    assert_eq!(out, "sk- é密钥 sk-aaA00a[A a0provided x-api-key:'…");
}

// ---------------------------------------------------------------------------------------------
// Properties (random inputs). Every input that once broke one is a named test above or below.

mod properties {
    use super::*;
    use proptest::collection::vec;
    use proptest::prelude::*;
    use proptest::sample::select;

    const HEX: &[u8] = b"0123456789abcdef";
    const BASE62: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    const UPPER36: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";

    /// A string of `len` characters drawn from an ASCII alphabet (cheaper than a regex
    /// strategy: debug-build generation dominates these tests' time).
    fn drawn(alphabet: &'static [u8], len: std::ops::Range<usize>) -> BoxedStrategy<String> {
        vec(select(alphabet), len)
            .prop_map(|v| v.into_iter().map(char::from).collect())
            .boxed()
    }

    fn uuid() -> impl Strategy<Value = String> {
        (drawn(HEX, 32..33), any::<bool>()).prop_map(|(h, upper)| {
            let u = format!(
                "{}-{}-{}-{}-{}",
                &h[..8],
                &h[8..12],
                &h[12..16],
                &h[16..20],
                &h[20..]
            );
            if upper { u.to_uppercase() } else { u }
        })
    }

    fn two_classes(s: &str) -> bool {
        let classes = [
            s.bytes().any(|c| c.is_ascii_uppercase()),
            s.bytes().any(|c| c.is_ascii_lowercase()),
            s.bytes().any(|c| c.is_ascii_digit()),
        ];
        classes.iter().filter(|&&c| c).count() >= 2
    }

    /// Random keys from the families of the corpus, random lengths.
    pub(super) fn secret() -> impl Strategy<Value = String> {
        prop_oneof![
            (drawn(HEX, 32..33), drawn(BASE62, 16..17)).prop_map(|(h, t)| format!("{h}.{t}")),
            uuid(),
            drawn(HEX, 32..65).prop_filter("a hex letter", |h| {
                h.bytes().any(|c| c.is_ascii_alphabetic())
            }),
            (drawn(BASE62, 20..21), drawn(HEX, 40..41))
                .prop_map(|(a, h)| format!("bce-v3/ALTAK-{a}/{h}")),
            (
                select(&["SK", "Sk", "sK", "sk"][..]),
                drawn(UPPER36, 20..49)
            )
                .prop_filter_map("a digit", |(p, t)| t
                    .bytes()
                    .any(|c| c.is_ascii_digit())
                    .then(|| format!("{p}-{t}"))),
            drawn(BASE62, 20..65).prop_filter("two character classes", |s| two_classes(s)),
            (
                select(&["nvapi-", "pplx-", "fw_", "r8_", "csk-", "ak-"][..]),
                drawn(BASE62, 32..65)
            )
                .prop_filter("two character classes", |(_, t)| two_classes(t))
                .prop_map(|(p, t)| format!("{p}{t}")),
            (select(&["ms", "ep", "key"][..]), uuid()).prop_map(|(p, u)| format!("{p}-{u}")),
        ]
    }

    const WORDS: &[&str] = &[
        "error",
        "the",
        "request",
        "failed",
        "模型",
        "余额不足",
        "429",
        "glm-4.6",
        "http://127.0.0.1:8080/v1",
        "insufficient_quota",
        "请检查",
        "retry",
        "after",
        "20s",
        "—",
        "Qwen/Qwen2.5-72B-Instruct",
        "2026-11-30T14:37:37.123Z",
    ];

    fn prose() -> impl Strategy<Value = String> {
        vec(select(WORDS), 0..8).prop_map(|w| w.join(" "))
    }

    const BEFORE: &[&str] = &[
        " ",
        "\n",
        "(",
        "'",
        "\"",
        "`",
        ": ",
        "= ",
        "=",
        ", ",
        "，",
        "：",
        "/",
        "[",
        "<",
        "\t",
        "\u{1b}[1m",
    ];
    const AFTER: &[&str] = &[
        " ",
        ".",
        ",",
        ")",
        "'",
        "\"",
        "\n",
        "。",
        "，",
        ";",
        "!",
        "]",
        ">",
        "\u{1b}[0m",
        ". Next",
    ];
    const PHRASES: &[&str] = &[
        "Incorrect API key provided: ",
        "Invalid API key: ",
        "api key provided: ",
        "api_key=",
        "apikey ",
        "token: ",
        "access key ",
        "secret key: ",
        "password: ",
        "API密钥：",
        "密钥: ",
        "秘钥：",
        "令牌：",
        "口令: ",
        "密码：",
        "无效的API Key: ",
        "API Key 无效：",
        "Authorization: Bearer ",
        "authorization: ",
        "x-api-key: ",
        "Bearer ",
    ];
    const JSON_NAMES: &[&str] = &["id", "key", "api_key", "token", "value", "apiKey"];

    /// A secret in random prose, in JSON (plain or escaped), or after a header or phrase:
    /// (text before, secret, text after).
    fn embedded() -> impl Strategy<Value = (String, String, String)> {
        (
            (prose(), secret(), prose(), 0..4usize),
            (
                select(BEFORE),
                select(AFTER),
                select(PHRASES),
                select(JSON_NAMES),
            ),
        )
            .prop_map(|((p, s, q, kind), (before, after, phrase, name))| {
                let (pre, post) = match kind {
                    0 => (format!("{p}{before}"), format!("{after} {q}")),
                    1 => (format!("{p} {{\"{name}\":\""), format!("\",\"n\":1}} {q}")),
                    2 => (format!(r#"{p} {{\"{name}\":\""#), format!(r#"\"}} {q}"#)),
                    _ => (format!("{p} {phrase}"), format!("{after} {q}")),
                };
                (pre, s, post)
            })
    }

    const FRAGMENTS: &[&str] = &[
        MASK,
        "[redacted",
        "redacted]",
        "[",
        "]",
        "\"",
        "'",
        "\\\"",
        ":",
        "=",
        "：",
        " ",
        ".",
        ",",
        "/",
        "+",
        "-",
        "_",
        "&",
        "?",
        "@",
        "://",
        "provided",
        "Bearer",
        "Authorization:",
        "api key",
        "apikey",
        "token",
        "password",
        "密钥",
        "令牌",
        "无效",
        "http://u:p@h/",
        "?key=",
        "&token=",
        "sk-",
        "SK-",
        "eyJ",
        "abc",
        "123",
        "\n",
        "\u{1b}[31m",
        "é",
        "余额",
        "…",
        "{",
        "}",
        "(",
        ")",
        "x-api-key",
        "redis://",
        "无效的API Key",
        "Digest ",
    ];

    /// Characters that stress the scanners: controls, escapes, multi-byte, bidi overrides,
    /// separators; plus any char at all.
    const NOISE: &[char] = &[
        'a', 'Z', '0', '9', ' ', '-', '_', '.', '/', '+', '=', ':', '"', '\'', '\\', '[', ']', '{',
        '}', '(', ')', '<', '>', '@', '&', '?', '#', '%', ',', ';', '\0', '\n', '\r', '\t',
        '\u{1b}', '\u{7f}', 'é', '密', '钥', '：', '，', '…', '😀', '\u{202e}', '\u{2028}',
        '\u{301}', '\u{fffd}', '\u{feff}',
    ];

    fn noise(len: std::ops::Range<usize>) -> impl Strategy<Value = String> {
        vec(prop_oneof![4 => select(NOISE), 1 => any::<char>()], len)
            .prop_map(|v| v.into_iter().collect())
    }

    /// Text built from the pieces the rules react to: names, separators, quotes, masks, keys.
    fn soup() -> impl Strategy<Value = String> {
        vec(
            prop_oneof![
                4 => select(FRAGMENTS).prop_map(String::from),
                1 => secret(),
                1 => noise(0..12),
            ],
            0..24,
        )
        .prop_map(|v| v.concat())
    }

    /// Secrets of awkward shapes registered by the known-secret properties only (the registry
    /// is global: values unique to these tests): quotes, backslashes, spaces, brackets,
    /// non-ASCII, overlapping each other, part of a mask.
    const KNOWN: &[&str] = &[
        "pröp-idem-sécret",
        "idem pass\"w0rd\\",
        "[idem]-bracket-pw",
        "zz-idem-overlap-zz",
        "overlap-zz-idem-tail",
        "redacted]idem",
        "8-idem-12345",
        "密码idem秘密",
    ];

    fn register_known() {
        add_known_secrets(KNOWN.iter().map(|s| (*s).to_string()));
    }

    fn soup_with_known() -> impl Strategy<Value = String> {
        vec(
            prop_oneof![
                2 => soup(),
                1 => select(KNOWN).prop_map(String::from),
            ],
            0..6,
        )
        .prop_map(|v| v.concat())
    }

    /// Fails when an 8-character window of `secret` is in `out` but not in the text around it.
    fn assert_gone(surrounding: &str, out: &str, secret: &str) -> Result<(), TestCaseError> {
        let chars: Vec<char> = secret.chars().collect();
        for w in chars.windows(8.min(chars.len())) {
            let w: String = w.iter().collect();
            prop_assert!(
                !out.contains(&w) || surrounding.contains(&w),
                "fragment {w:?} of {secret:?} survived: {out:?}"
            );
        }
        Ok(())
    }

    proptest! {
        #![proptest_config(crate::fuzz::config(2000))]

        #[test]
        fn never_panics_and_respects_the_cap(text in noise(0..300), cap in 0usize..600) {
            let out = redact_capped(&text, cap);
            prop_assert!(out.chars().count() <= cap);
            prop_assert!(!out.chars().any(is_unsafe));
            let out = redact(&text);
            prop_assert!(out.chars().count() <= MAX_CHARS);
        }

        #[test]
        fn soup_never_panics_and_respects_the_cap(text in soup(), cap in 0usize..300) {
            prop_assert!(redact_capped(&text, cap).chars().count() <= cap);
        }

        #[test]
        fn redacting_twice_changes_nothing(text in soup(), cap in 0usize..300) {
            let once = redact(&text);
            prop_assert_eq!(redact(&once), once);
            let once = redact_capped(&text, cap);
            prop_assert_eq!(redact_capped(&once, cap), once);
        }

        #[test]
        fn redacting_arbitrary_text_twice_changes_nothing(text in noise(0..300)) {
            let once = redact(&text);
            prop_assert_eq!(redact(&once), once);
        }

        #[test]
        fn redacting_twice_changes_nothing_with_known_secrets(text in soup_with_known()) {
            register_known();
            let once = redact(&text);
            prop_assert_eq!(redact(&once), once);
        }

        #[test]
        fn a_known_secret_never_survives(p in prose(), k in select(KNOWN), q in prose()) {
            register_known();
            let input = format!("{p} {k} {q}");
            let out = redact(&input);
            prop_assert!(!out.contains(k), "{:?} -> {:?}", input, out);
        }

        #[test]
        fn a_secret_never_survives((pre, secret, post) in embedded()) {
            let input = format!("{pre}{secret}{post}");
            let out = redact(&input);
            assert_gone(&format!("{pre}{post}"), &out, &secret)?;
        }
    }

    proptest! {
        #![proptest_config(crate::fuzz::config(48))]

        /// Megabytes of input: bounded time, the cap holds, no key head left at the pre-cut.
        #[test]
        fn huge_input_is_bounded((unit, times) in (soup(), 1usize..20_000), cap in 0usize..2_000) {
            let text = unit.repeat(times);
            let out = redact_capped(&text, cap);
            prop_assert!(out.chars().count() <= cap);
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
