//! Keys hidden from the masking rules in an error body (issue 29, item 5), through real Pi and
//! the fault server: split by a JSON-escaped line break (`\n` as two characters, as Pi hands a
//! body on that it could not read as an error), spelled in `\u` escapes, shown by its last 12
//! characters, or with a zero-width space inside. The key is the provider's own (models.json):
//! none of it may reach stdout, stderr, `--json`, the state file or the log.

use crate::support::*;

/// No vendor shape: only the runner's knowledge of it can mask it.
const KEY: &str = "Qm7vX2kP9wLr4Tz8Nc1Yb5Hd";

fn bodies() -> Vec<(&'static str, String)> {
    let (a, b) = KEY.split_at(12);
    let escaped: String = KEY
        .chars()
        .map(|c| format!("\\u{:04x}", c as u32))
        .collect();
    vec![
        // A JSON body without `message`: the SDK shows it as JSON text, escapes and all.
        (
            "escaped line breaks",
            format!(r#"{{"error":{{"msg":"Incorrect key provided:\n{a}\n{b}"}}}}"#),
        ),
        // Not JSON: the text as it came, `\u` escapes and all.
        (
            "unicode escapes",
            format!(r#"upstream 401: {{"detail": "Incorrect API key provided: {escaped}"}}"#),
        ),
        (
            "last 12 characters",
            format!("Invalid key ending in ...{}", &KEY[KEY.len() - 12..]),
        ),
        (
            "zero-width space",
            format!("Incorrect key provided: {a}\u{200b}{b} (check your plan)"),
        ),
    ]
}

#[track_caller]
fn no_piece(what: &str, text: &str) {
    let chars: Vec<char> = KEY.chars().collect();
    for w in chars.windows(8) {
        let w: String = w.iter().collect();
        assert!(!text.contains(&w), "{what} leaks {w:?} of the key:\n{text}");
    }
}

fn hidden_keys_never_leak(v: &str) {
    let providers = [
        ProviderSpec::new("leaky", "leaky", vec![ModelSpec::text("m")]).api_key(KEY),
        ProviderSpec::new("safe", "safe", vec![ModelSpec::text("m")]),
    ];
    for (what, body) in bodies() {
        let env = TestEnv::new(v, &providers);
        env.llm
            .script("leaky", "*", vec![Behaviour::Status(401, body.clone())]);
        let out = env.run([
            "--json",
            "-vv",
            "--no-tools",
            "--provider",
            "leaky",
            "--model",
            "m",
            "Summarise.",
        ]);
        out.assert_success();
        let j = out.json();
        assert_eq!(j["attempts"][0]["class"], "auth", "{what}\n{}", out.dump());
        no_piece(&format!("{what}: stdout"), &out.stdout);
        no_piece(&format!("{what}: stderr"), &out.stderr);
        let state = std::fs::read_to_string(env.agent_dir.join("pi-ccswitch-run-state.json"))
            .expect("state file");
        no_piece(&format!("{what}: state"), &state);
        let log =
            std::fs::read_to_string(env.agent_dir.join("pi-ccswitch-run.log")).unwrap_or_default();
        no_piece(&format!("{what}: log"), &log);
    }
}

both_versions!(hidden_keys_never_leak);
