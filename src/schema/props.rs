//! No answer text makes extraction or validation panic, hang or grow without bound: random
//! text, random JSON-ish text (brackets, quotes, escapes, fences), and values built to be
//! deep, wide or long, against schemas that walk every part of a value.

use proptest::prelude::*;
use serde_json::json;

use super::limits::{MAX_ANSWER_BYTES, MAX_ERROR_CHARS, MAX_ERRORS};
use super::*;

/// Compiled once: compiling is not what is tested here.
static SCHEMAS: std::sync::LazyLock<Vec<Schema>> = std::sync::LazyLock::new(|| {
    [
        json!(true),
        json!({"type": "object", "required": ["a"], "properties": {"a": {"type": "string", "pattern": "^(a+)+$"}}}),
        json!({"$defs": {"n": {"anyOf": [{"type": "integer"}, {"type": "array", "items": {"$ref": "#/$defs/n"}}]}}, "$ref": "#/$defs/n"}),
        json!({"type": "array", "uniqueItems": true, "items": {"type": "string", "format": "date-time"}}),
        json!({"$schema": "http://json-schema.org/draft-07/schema#", "type": "object", "additionalProperties": {"type": "number", "multipleOf": 0.01}}),
    ]
    .iter()
    .map(|v| Schema::from_bytes(v.to_string().as_bytes()).expect("schema"))
    .collect()
});

fn schemas() -> &'static [Schema] {
    &SCHEMAS
}

/// Text made of the characters that matter to the scan and the fences.
fn jsonish() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        Just("[".to_string()),
        Just("]".to_string()),
        Just("{".to_string()),
        Just("}".to_string()),
        Just("\"".to_string()),
        Just("\\".to_string()),
        Just(",".to_string()),
        Just(":".to_string()),
        Just("```".to_string()),
        Just("```json\n".to_string()),
        Just("\n".to_string()),
        Just(" ".to_string()),
        Just("\"a\"".to_string()),
        Just("1e999".to_string()),
        Just("-0.5".to_string()),
        Just("null".to_string()),
        Just("é".to_string()),
        Just("\u{feff}".to_string()),
        prop::collection::vec(prop::char::range('a', 'z'), 0..3)
            .prop_map(|c| c.into_iter().collect::<String>()),
    ];
    prop::collection::vec(piece, 0..200).prop_map(|v| v.concat())
}

/// Every rejection is short, whatever the answer.
fn bounded(r: &Rejection) {
    let list = r.errors();
    assert!(list.len() <= MAX_ERRORS + 1, "{list:?}");
    for e in &list {
        assert!(e.chars().count() <= MAX_ERROR_CHARS + 200, "{e}");
    }
}

/// proptest's default ChaCha generator, unoptimised in test builds, took most of the time of
/// these properties (its cost grew with the case count); XorShift draws the same kinds of cases.
fn config() -> proptest::test_runner::Config {
    proptest::test_runner::Config {
        rng_algorithm: proptest::test_runner::RngAlgorithm::XorShift,
        ..crate::fuzz::config(2000)
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn random_text_never_panics(text in any::<String>()) {
        for s in schemas() {
            if let Err(r) = check(s, &text) { bounded(&r) }
        }
    }

    #[test]
    fn jsonish_text_never_panics(text in jsonish()) {
        for s in schemas() {
            match check(s, &text) {
                Ok(ok) => {
                    // What stdout gets is one line of JSON equal to the value.
                    prop_assert!(!ok.compact.contains('\n'));
                    let again: serde_json::Value = serde_json::from_str(&ok.compact).unwrap();
                    prop_assert_eq!(again, ok.value);
                }
                Err(r) => bounded(&r),
            }
        }
    }

    #[test]
    fn deep_wide_and_long_values_stay_bounded(
        depth in 0usize..200,
        width in 0usize..3000,
        open in prop::sample::select(vec!["[", "{\"k\":"]),
        fenced in any::<bool>(),
    ) {
        let close = if open == "[" { "]" } else { "}" };
        let inner = vec!["1"; width].join(",");
        let mut text = format!("{}[{inner}]{}", open.repeat(depth), close.repeat(depth));
        if fenced {
            text = format!("```json\n{text}\n```");
        }
        for s in schemas() {
            if let Err(r) = check(s, &text) { bounded(&r) }
        }
    }
}

/// The largest answers the limits let through are judged in bounded time: a loose ceiling that
/// only an exponential path could reach (speed itself is not measured here).
#[test]
#[expect(
    clippy::disallowed_methods,
    reason = "a ceiling on a whole test, not a clock read by the product"
)]
fn the_largest_answers_are_judged_in_bounded_time() {
    let schemas = schemas();
    let started = std::time::Instant::now();
    let wide = format!("[{}]", vec!["\"2026-12-06T00:00:00Z\""; 80_000].join(","));
    assert!(wide.len() < MAX_ANSWER_BYTES);
    let strings = format!("{{\"a\": \"{}b\"}}", "a".repeat(MAX_ANSWER_BYTES - 20));
    let deep = format!("{}1{}", "[".repeat(64), "]".repeat(64));
    for text in [&wide, &strings, &deep] {
        for s in schemas {
            if let Err(r) = check(s, text) {
                bounded(&r);
            }
        }
    }
    // Generous for a loaded 2-core machine: the point is that nothing is exponential.
    assert!(
        started.elapsed() < std::time::Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
}
