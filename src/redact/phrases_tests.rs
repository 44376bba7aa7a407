//! Values announced by key/token phrases, known secrets, secret sources, and the cases found
//! by review: masked in every spelling, prose kept.

use super::*;

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
