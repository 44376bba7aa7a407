//! Secret masking and truncation for every error that is printed, logged or stored. Pure but
//! for one thing: a process-wide registry of known secret values ([`add_known_secrets`]). No
//! I/O, no clock, no regex — a handful of byte scanners over the text.
//!
//! Masking must not depend on a key's shape: a provider's 401 body (`Incorrect API key
//! provided: <KEY>`) echoes whatever key it got, and providers keep inventing key formats. So
//! four layers, each replacing a secret with `[redacted]` and keeping the text around it:
//! 1. **Known secrets** (`known`): every occurrence of a value the runner registered — the
//!    values of secret-named environment variables (Pi inherits them) and the keys and header
//!    values of Pi's `models.json` and `auth.json` — also in JSON-escaped form. Values under
//!    6 characters, pure decimal numbers and `true`/`false` are not registered (a test
//!    `models.json` uses the dummy key `x`; masking every `x` would destroy the output). The
//!    values are held in memory only, never written, logged or printed anywhere.
//! 2. **Announced values** (`named`): the value after `Authorization` / `api_key` / `x-api-key`
//!    / `token` / `password` / `secret key` … or `密钥` / `令牌` / `密码` …, followed by `:` `=`
//!    `：` or the word `provided` (`Incorrect API key provided: hunter22.` → `…: [redacted].`),
//!    quoted or not, JSON-escaped or not, whatever its shape. Without a separator only a
//!    key-looking word is masked (`invalid apikey 3f2a…`), so `api key is invalid` stays. An
//!    `Authorization` value is masked whole, scheme included; `Bearer <token>` masks the token.
//! 3. **Key shapes** (`scan`, `shape`): vendor prefixes anywhere (`sk-`/`SK-`, `AIza`, `ghp_`,
//!    `AKIA`…), bare JWTs, and — whatever the prefix — long random-looking tokens: UUIDs, 32+
//!    hex digits (so git hashes too: indistinguishable from keys), `hex32.alnum16`,
//!    `bce-v3/ALTAK-…/…`, and runs of 20+ key characters with a random-looking segment. Model
//!    ids, paths, URLs, error codes, dates and numbers are left alone.
//! 4. **URLs**: key/token/signature query parameters and `user:password@` credentials
//!    (`redis://:password@host` too).
//!
//! Environment names (see [`is_secret_env_name`]): a variable is secret when its name contains
//! KEY, TOKEN, SECRET, PASSWORD, PASSWD, PASSPHRASE, AUTH, CREDENTIAL, PRIVATE, COOKIE or
//! SESSION, or has PASS as a `_`-separated word (`DB_PASS`); except `SSH_AUTH_SOCK`,
//! `GIT_ASKPASS`, `SSH_ASKPASS`, `SUDO_ASKPASS`, `XAUTHORITY`, `ICEAUTHORITY`, `KEYTIMEOUT`,
//! `DBUS_SESSION_BUS_ADDRESS`, `SESSION_MANAGER`, `DESKTOP_SESSION`, `GNOME_KEYRING_CONTROL`,
//! `GNOME_KEYRING_PID`, `XDG_SESSION_*`, and words KEYBOARD…, KEYMAP, AUTHOR, AUTHORITY
//! (`GIT_AUTHOR_NAME`); `AUTHORIZATION` still counts. These hold sockets, paths, programs or
//! session plumbing, and masking them would only blank out ordinary words.
//!
//! Control characters (newlines, ESC and whole ANSI sequences, bidi overrides) become a space
//! first; after masking the result is cut to [`MAX_CHARS`] characters with a trailing `…`.
//! Masking runs before cutting, so a cut can never expose the head of a secret. Masks are
//! atomic: `redact(redact(x)) == redact(x)`.

mod bytes;
mod echo;
mod known;
mod named;
mod scan;
mod shape;
mod sources;

pub use bytes::MASK;
use bytes::{ELLIPSIS, clean_controls, unhide};
pub use known::{MIN_SECRET_CHARS, add_known_secrets};
pub use sources::{
    commands_in_config, is_secret_env_name, parse_like_pi, referenced_vars, secrets_in_auth_json,
    secrets_in_models_json,
};

/// Default cap for stored and printed error text, in characters.
pub const MAX_CHARS: usize = 400;

/// Masks secrets, replaces control characters with spaces and caps the length at
/// [`MAX_CHARS`] characters.
#[must_use]
pub fn redact(text: &str) -> String {
    redact_capped(text, MAX_CHARS)
}

/// [`redact`] with a caller-chosen cap (in characters, `…` included).
#[must_use]
pub fn redact_capped(text: &str, max_chars: usize) -> String {
    let text = precut(text, max_chars);
    // What hides a key from every rule goes first: zero-width characters inside it, a key
    // spelled in `\u` escapes, and control characters (an ANSI colour code glued to a key,
    // `\x1b[1msk-…`, must not hide its start from the scanners).
    let clean = clean_controls(&unhide(text));
    // Known secrets before the shape rules: a rule masking part of a known secret would leave
    // the rest of it for nobody to find.
    let masked = mask_all(&clean);
    let mut out = truncate(&masked, max_chars);
    // A cut can turn the head of a long word into something a rule masks (a prefix of a
    // token can look like a key where the whole did not): redact the cut text again until it
    // is stable, so redacting the output changes nothing. Two rounds settle it in practice.
    if out != masked {
        for _ in 0..4 {
            let again = truncate(&mask_all(&out), max_chars);
            if again == out {
                break;
            }
            out = again;
        }
    }
    out
}

/// Masks the runner's known secrets (see [`add_known_secrets`]) in a model's answer and
/// changes nothing else: no shape rules (an answer may legitimately hold `sk-test-…`
/// placeholders, commit hashes, JWT examples or `Authorization:` lines), no cleaning, no cut.
/// Every spelling of a known secret counts, as in errors: JSON-escaped, percent-encoded, split
/// by whitespace, escaped line breaks or zero-width characters, and long leading or trailing
/// parts of it.
#[must_use]
pub fn mask_known_secrets(text: &str) -> String {
    known::mask_known(text)
}

fn mask_all(text: &str) -> String {
    scan::mask(&known::mask_known(text))
}

/// Cuts absurdly long input before scanning, without leaving half a token or half a known
/// secret at the cut (which the scanners might no longer recognise). Only text far beyond the
/// cap is dropped.
fn precut(text: &str, max_chars: usize) -> &str {
    let limit = max_chars.saturating_mul(4).saturating_add(16 * 1024);
    if text.len() <= limit {
        return text;
    }
    let b = text.as_bytes();
    let mut cut = limit;
    loop {
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        let before = cut;
        if bytes::is_tok(b[cut]) {
            while cut > 0 && bytes::is_tok(b[cut - 1]) {
                cut -= 1;
            }
        }
        cut = known::safe_cut(text, cut);
        if cut == before {
            break;
        }
    }
    text.get(..cut).unwrap_or("")
}

/// Control characters as escapes (`\n`, `\u{1b}`), for one-line messages about text that is
/// not secret but not trusted either (a path, a job id, a key read from a shared store).
pub fn printable(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// How far a cut moves back to avoid splitting a word, in bytes.
const MAX_WORD_BACKOFF: usize = 64;

/// At most `max_chars` characters; a cut text ends with `…`. A cut never splits a mask, and a
/// cut inside a word of ordinary length drops the partial word: its head could read as something else (`provided is` cut to
/// `provided i…` would announce a value), which would make redacting twice differ from once.
fn truncate(s: &str, max_chars: usize) -> String {
    if max_chars == 0 {
        return String::new();
    }
    let mut indices = s.char_indices().map(|(i, _)| i);
    let Some(mut cut) = indices.nth(max_chars - 1) else {
        return s.to_string();
    };
    if indices.next().is_none() {
        return s.to_string();
    }
    let b = s.as_bytes();
    // Half a mask (`[reda…`) would read as text to mask on the next pass.
    if let Some(start) = (cut.saturating_sub(MASK.len() - 1)..cut).find(|&k| bytes::mask_at(b, k)) {
        cut = start;
    }
    if cut > 0 && bytes::is_tok(b[cut]) && bytes::is_tok(b[cut - 1]) {
        let start = (cut.saturating_sub(MAX_WORD_BACKOFF)..cut)
            .rev()
            .find(|&k| !bytes::is_tok(b[k]))
            .map(|k| k + 1);
        if let Some(start) = start.filter(|&k| k > 0) {
            cut = start;
        }
    }
    let mut out = s.get(..cut).unwrap_or("").to_string();
    out.push(ELLIPSIS);
    out
}

#[cfg(test)]
mod tests;

#[cfg(test)]
#[path = "hidden_tests.rs"]
mod hidden_tests;
