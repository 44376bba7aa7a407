//! Where known secrets come from: which environment variables hold one (by name), and which
//! values in Pi's `models.json` and `auth.json` are keys. Pure: parses text it is handed and
//! resolves `$NAME` through a lookup it is handed; never reads a file or the environment, and
//! never runs a `!command` value (Pi would; we skip it).

use serde_json::Value;

/// Name parts (case-insensitive, anywhere in the name) that make a variable's value a secret.
const SECRET_NAME_PARTS: &[&str] = &[
    "KEY",
    "TOKEN",
    "SECRET",
    "PASSWORD",
    "PASSWD",
    "PASSPHRASE",
    "AUTH",
    "CREDENTIAL",
    "PRIVATE",
    "COOKIE",
    "SESSION",
];

/// Variables whose names match but which hold no secret: agent sockets, password-prompt
/// programs, X11/ICE authority files, zsh's key timeout, desktop-session plumbing.
const NOT_SECRET_NAMES: &[&str] = &[
    "SSH_AUTH_SOCK",
    "GIT_ASKPASS",
    "SSH_ASKPASS",
    "SUDO_ASKPASS",
    "XAUTHORITY",
    "ICEAUTHORITY",
    "KEYTIMEOUT",
    "DBUS_SESSION_BUS_ADDRESS",
    "SESSION_MANAGER",
    "DESKTOP_SESSION",
    "GNOME_KEYRING_CONTROL",
    "GNOME_KEYRING_PID",
];

/// Prefixes of such variables (`XDG_SESSION_ID`, `XDG_SESSION_TYPE`, …).
const NOT_SECRET_PREFIXES: &[&str] = &["XDG_SESSION_"];

/// Words that contain a secret part but name something else (`KEYBOARD_LAYOUT`, `KEYMAP`).
/// `AUTHOR`/`AUTHORITY` are handled apart: `AUTHORIZATION` must still match.
const NOT_SECRET_WORDS: &[&str] = &["KEYBOARD", "KEYMAP", "KEYTIMEOUT"];

/// Whether an environment variable holds a secret, judged by its name (see the module doc of
/// `redact` for the rule and its exceptions).
#[must_use]
pub fn is_secret_env_name(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    if NOT_SECRET_NAMES.contains(&upper.as_str())
        || NOT_SECRET_PREFIXES.iter().any(|p| upper.starts_with(p))
    {
        return false;
    }
    upper
        .split(|c: char| !c.is_ascii_alphanumeric())
        .any(|word| {
            if word == "PASS" {
                return true;
            }
            let mut word = word.to_string();
            for other in NOT_SECRET_WORDS {
                word = word.replace(other, "#");
            }
            let word = without_author(&word);
            SECRET_NAME_PARTS.iter().any(|part| word.contains(part))
        })
}

/// `AUTHOR`, `AUTHORS`, `AUTHORITY` (`GIT_AUTHOR_NAME`, `XAUTHORITY`) are not `AUTH`;
/// `AUTHORIZATION`/`AUTHORISATION` are.
fn without_author(word: &str) -> String {
    let mut out = String::with_capacity(word.len());
    let mut rest = word;
    while let Some(at) = rest.find("AUTHOR") {
        let after = &rest[at + "AUTHOR".len()..];
        out.push_str(&rest[..at]);
        if after.starts_with("IZ") || after.starts_with("IS") {
            out.push_str("AUTHOR");
        } else {
            out.push('#');
        }
        rest = after;
    }
    out.push_str(rest);
    out
}

/// The secrets in Pi's `models.json`: each provider's `apiKey` and `headers` values and each
/// model's `headers` values, resolved as Pi resolves them — a literal; `$NAME` / `${NAME}`
/// replaced through `env` (also inside a longer literal); `$$` → `$`; `$!` → `!`. A value that
/// references a variable `env` does not know (or knows as empty) is skipped, as Pi skips it,
/// but the variables it does know are returned on their own too (a key split over variables
/// leaks by parts). `!command` values are skipped here (see [`commands_in_config`]). Malformed
/// JSON → empty.
#[must_use]
pub fn secrets_in_models_json(text: &str, env: &dyn Fn(&str) -> Option<String>) -> Vec<String> {
    let mut out = Vec::new();
    let Some(root) = parse_like_pi(text) else {
        return out;
    };
    let Some(providers) = root.get("providers").and_then(Value::as_object) else {
        return out;
    };
    for provider in providers.values() {
        config_value(provider.get("apiKey"), env, &mut out);
        header_values(provider.get("headers"), env, &mut out);
        for model in provider
            .get("models")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            header_values(model.get("headers"), env, &mut out);
        }
    }
    out
}

/// The secrets in Pi's `auth.json` (`{"<provider>": {"type": "api_key", "key": "…"}, …}`,
/// OAuth entries with `access`/`refresh`): every string value except the `type` fields.
/// Malformed JSON → empty.
#[must_use]
pub fn secrets_in_auth_json(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(Value::Object(providers)) = parse_like_pi(text) {
        for entry in providers.values() {
            strings_except_type(entry, &mut out);
        }
    }
    out
}

/// The `!command` values of Pi's `models.json` (`apiKey`, header values) and `auth.json` (any
/// credential string): Pi runs each with `sh -c` and uses its trimmed output as the key, so the
/// runner must learn those keys the same way to mask them (see `secrets.rs`). The commands,
/// without their `!`, each once. Malformed JSON → none.
#[must_use]
pub fn commands_in_config(models_json: Option<&str>, auth_json: Option<&str>) -> Vec<String> {
    let mut values = Vec::new();
    if let Some(providers) = models_json
        .and_then(parse_like_pi)
        .as_ref()
        .and_then(|root| root.get("providers"))
        .and_then(Value::as_object)
    {
        for provider in providers.values() {
            if let Some(Value::String(key)) = provider.get("apiKey") {
                push_unique(&mut values, key);
            }
            let headers = std::iter::once(provider.get("headers")).chain(
                provider
                    .get("models")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .map(|m| m.get("headers")),
            );
            for h in headers.flatten().filter_map(Value::as_object) {
                for v in h.values().filter_map(Value::as_str) {
                    push_unique(&mut values, v);
                }
            }
        }
    }
    if let Some(Value::Object(providers)) = auth_json.and_then(parse_like_pi) {
        for entry in providers.values() {
            strings_except_type(entry, &mut values);
        }
    }
    values
        .iter()
        .filter_map(|v| v.strip_prefix('!'))
        .filter(|c| !c.trim().is_empty())
        .map(str::to_string)
        .collect()
}

/// Parses a Pi config file as Pi does: a leading UTF-8 BOM is ignored, and `//` and `/* */`
/// comments and trailing commas are allowed (Pi strips them before `JSON.parse`). A file Pi
/// accepts must give up its keys for masking as well as a strict one does (and `catalog::origin`
/// must see the providers Pi sees).
pub fn parse_like_pi(text: &str) -> Option<Value> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    serde_json::from_str(text)
        .ok()
        .or_else(|| serde_json::from_str(&strip_jsonc(text)).ok())
}

/// `text` without comments and trailing commas (string contents untouched), in one pass.
fn strip_jsonc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    // Index in `out` of a comma that may turn out to be trailing.
    let mut pending_comma: Option<usize> = None;
    while let Some(c) = chars.next() {
        match c {
            '"' => {
                pending_comma = None;
                out.push(c);
                while let Some(c) = chars.next() {
                    out.push(c);
                    match c {
                        '\\' => {
                            if let Some(n) = chars.next() {
                                out.push(n);
                            }
                        }
                        '"' => break,
                        _ => {}
                    }
                }
            }
            '/' if chars.peek() == Some(&'/') => {
                for c in chars.by_ref() {
                    if c == '\n' {
                        out.push('\n');
                        break;
                    }
                }
            }
            '/' if chars.peek() == Some(&'*') => {
                chars.next();
                let mut last = ' ';
                for c in chars.by_ref() {
                    if last == '*' && c == '/' {
                        break;
                    }
                    last = c;
                }
                out.push(' ');
            }
            ',' => {
                pending_comma = Some(out.len());
                out.push(c);
            }
            '}' | ']' => {
                if let Some(at) = pending_comma.take() {
                    out.replace_range(at..=at, " ");
                }
                out.push(c);
            }
            c if c.is_whitespace() => out.push(c),
            c => {
                pending_comma = None;
                out.push(c);
            }
        }
    }
    out
}

fn strings_except_type(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::String(s) => push_unique(out, s),
        Value::Array(items) => items.iter().for_each(|v| strings_except_type(v, out)),
        Value::Object(fields) => fields
            .iter()
            .filter(|(k, _)| k.as_str() != "type")
            .for_each(|(_, v)| strings_except_type(v, out)),
        _ => {}
    }
}

fn header_values(
    headers: Option<&Value>,
    env: &dyn Fn(&str) -> Option<String>,
    out: &mut Vec<String>,
) {
    for value in headers
        .and_then(Value::as_object)
        .into_iter()
        .flat_map(|h| h.values())
    {
        config_value(Some(value), env, out);
    }
}

fn config_value(
    value: Option<&Value>,
    env: &dyn Fn(&str) -> Option<String>,
    out: &mut Vec<String>,
) {
    let Some(text) = value.and_then(Value::as_str) else {
        return;
    };
    let resolved = resolve_like_pi(text, env);
    if let Some(whole) = resolved.value {
        push_unique(out, &whole);
        // `Bearer TOKEN`, `Basic CREDENTIALS`: an error body may echo the token alone.
        if let Some((scheme, token)) = whole.trim().split_once(char::is_whitespace) {
            let token = token.trim();
            if scheme.chars().all(|c| c.is_ascii_alphabetic())
                && !token.contains(char::is_whitespace)
            {
                push_unique(out, token);
            }
        }
    }
    for part in resolved.env_values {
        push_unique(out, &part);
    }
}

fn push_unique(out: &mut Vec<String>, value: &str) {
    if !value.is_empty() && !out.iter().any(|v| v == value) {
        out.push(value.to_string());
    }
}

/// A config value after Pi's resolution: the value (None for commands and unresolvable
/// references) and the values of the variables it referenced.
struct Resolved {
    value: Option<String>,
    env_values: Vec<String>,
}

/// The environment variables a config value refers to (`$NAME`, `${NAME}`), in order, each
/// once, as Pi reads them: `$$` and `$!` are escapes, a `!command` value refers to none. Pi
/// treats the value as unset when any of them is unset or empty.
#[must_use]
pub fn referenced_vars(text: &str) -> Vec<String> {
    let names = std::cell::RefCell::new(Vec::<String>::new());
    resolve_like_pi(text, &|name: &str| {
        let mut names = names.borrow_mut();
        if !names.iter().any(|n| n == name) {
            names.push(name.to_string());
        }
        None
    });
    names.into_inner()
}

fn resolve_like_pi(text: &str, env: &dyn Fn(&str) -> Option<String>) -> Resolved {
    let mut resolved = Resolved {
        value: None,
        env_values: Vec::new(),
    };
    if text.starts_with('!') {
        return resolved;
    }
    let mut value = String::new();
    let mut missing = false;
    let mut lookup = |name: &str, value: &mut String| match env(name).filter(|v| !v.is_empty()) {
        Some(v) => {
            value.push_str(&v);
            resolved.env_values.push(v);
        }
        None => missing = true,
    };
    let mut rest = text;
    while let Some(dollar) = rest.find('$') {
        value.push_str(&rest[..dollar]);
        let after = &rest[dollar + 1..];
        match after.chars().next() {
            Some(c @ ('$' | '!')) => {
                value.push(c);
                rest = &after[1..];
            }
            Some('{') => match after[1..].find('}') {
                None => {
                    value.push('$');
                    rest = after;
                }
                Some(close) => {
                    let name = &after[1..1 + close];
                    if env_name_len(name) == name.len() && !name.is_empty() {
                        lookup(name, &mut value);
                    } else {
                        value.push('$');
                        value.push_str(&after[..close + 2]);
                    }
                    rest = &after[close + 2..];
                }
            },
            _ => {
                let len = env_name_len(after);
                if len > 0 {
                    lookup(&after[..len], &mut value);
                } else {
                    value.push('$');
                }
                rest = &after[len..];
            }
        }
    }
    value.push_str(rest);
    if !missing {
        resolved.value = Some(value);
    }
    resolved
}

/// Length of the environment-variable name at the start of `text`: `[A-Za-z_][A-Za-z0-9_]*`.
fn env_name_len(text: &str) -> usize {
    let b = text.as_bytes();
    if !b
        .first()
        .is_some_and(|&c| c.is_ascii_alphabetic() || c == b'_')
    {
        return 0;
    }
    b.iter()
        .take_while(|&&c| c.is_ascii_alphanumeric() || c == b'_')
        .count()
}
