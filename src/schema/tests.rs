//! Loading, extracting and checking, on hand-made schemas and answers.

use serde_json::json;

use super::limits::{MAX_ANSWER_BYTES, MAX_DEPTH, MAX_ERRORS, MAX_VALUES};
use super::*;

fn schema(v: serde_json::Value) -> Schema {
    Schema::from_bytes(v.to_string().as_bytes()).expect("a valid schema")
}

fn refused(text: &str) -> SchemaError {
    Schema::from_bytes(text.as_bytes()).expect_err("refused")
}

fn review() -> Schema {
    schema(json!({
        "type": "object",
        "required": ["risk", "summary"],
        "properties": {
            "risk": {"enum": ["low", "medium", "high"]},
            "summary": {"type": "string", "maxLength": 200},
            "files": {"type": "array", "items": {"type": "string"}}
        },
        "additionalProperties": false
    }))
}

#[test]
fn a_conforming_answer_alone_or_in_one_fence() {
    let s = review();
    let plain = "  {\"risk\": \"low\",\n \"summary\": \"fine\"}\n";
    let ok = check(&s, plain).expect("conforms");
    assert_eq!(ok.compact, r#"{"risk":"low","summary":"fine"}"#);
    assert_eq!(ok.value, json!({"risk": "low", "summary": "fine"}));
    for fenced in [
        "```json\n{\"risk\": \"low\", \"summary\": \"fine\"}\n```",
        "```\n{\"risk\": \"low\", \"summary\": \"fine\"}\n```\n",
        "```JSON\r\n{\"risk\": \"low\", \"summary\": \"fine\"}\r\n```",
        "````json\n{\"risk\": \"low\", \"summary\": \"fine\"}\n````",
    ] {
        assert_eq!(
            check(&s, fenced).expect(fenced).compact,
            ok.compact,
            "{fenced:?}"
        );
    }
}

#[test]
fn the_models_key_order_and_numbers_are_kept_on_stdout() {
    let s = schema(json!({"type": "object"}));
    let ok = check(&s, "{ \"z\": 1.50, \"a\": \"x y\\n\", \"m\": 1e3 }").unwrap();
    assert_eq!(ok.compact, r#"{"z":1.50,"a":"x y\n","m":1e3}"#);
    assert!(!ok.compact.contains('\n'));
}

#[test]
fn text_around_the_json_is_refused() {
    let s = review();
    let good = r#"{"risk":"low","summary":"fine"}"#;
    for (answer, want) in [
        (format!("Here you go: {good}"), "starts with text"),
        (
            format!("{good}\nHope this helps!"),
            "text after the JSON value",
        ),
        (format!("Sure!\n```json\n{good}\n```"), "text around"),
        (format!("```json\n{good}\n```\nDone."), "text around"),
        (
            format!("```json\n{good}\n```\n```json\n{good}\n```"),
            "text around",
        ),
        (format!("```json\n{good}"), "text around"),
        (format!("```python\n{good}\n```"), "marked `python`"),
        ("I cannot help with that.".to_string(), "starts with text"),
        (String::new(), "empty"),
        ("```json\n```".to_string(), "empty"),
        (format!("{good}{good}"), "text after"),
    ] {
        let r = check(&s, &answer).expect_err(&answer);
        assert!(r.to_string().contains(want), "{answer:?}: {r}");
        assert_eq!(r.errors().len(), 1);
    }
}

#[test]
fn a_value_the_schema_rejects_lists_its_errors_briefly() {
    let s = review();
    let r = check(&s, r#"{"risk": "maybe", "extra": 1}"#).unwrap_err();
    let Rejection::Invalid { errors, more } = &r else {
        panic!("{r:?}")
    };
    assert_eq!(*more, Some(0));
    let all = errors.join("\n");
    assert!(all.contains("at /risk: \"maybe\" is not one of"), "{all}");
    assert!(all.contains("\"summary\" is a required property"), "{all}");
    assert!(all.contains("at the top level"), "{all}");
    assert!(all.contains("extra"), "{all}");
    // Many wrong items: the first few, and how many more.
    let s = schema(json!({"type": "array", "items": {"type": "string"}}));
    let items: Vec<u32> = (0..50).collect();
    let r = check(&s, &serde_json::to_string(&items).unwrap()).unwrap_err();
    let list = r.errors();
    assert_eq!(list.len(), MAX_ERRORS + 1, "{list:?}");
    assert_eq!(list.last().unwrap(), "… and 45 more");
    assert!(
        list[0].starts_with("at /0: 0 is not of type \"string\""),
        "{list:?}"
    );
}

#[test]
fn an_error_quoting_a_huge_value_is_cut() {
    let s = schema(json!({"type": "object"}));
    let big = format!("[\"{}\"]", "x".repeat(100_000));
    let list = check(&s, &big).unwrap_err().errors();
    assert!(list[0].chars().count() < 300, "{}", list[0].len());
    assert!(list[0].ends_with('…'));
}

#[test]
fn limits_are_checked_before_parsing() {
    let s = schema(json!(true));
    let deep = format!("{}{}", "[".repeat(MAX_DEPTH + 1), "]".repeat(MAX_DEPTH + 1));
    assert_eq!(check(&s, &deep), Err(Rejection::TooDeep));
    let ok = format!("{}{}", "[".repeat(MAX_DEPTH), "]".repeat(MAX_DEPTH));
    assert!(check(&s, &ok).is_ok());
    // Brackets inside strings do not count.
    let quoted = format!("\"{}\"", "[".repeat(10_000));
    assert!(check(&s, &quoted).is_ok());
    let many = format!("[{}0]", "0,".repeat(MAX_VALUES));
    assert_eq!(check(&s, &many), Err(Rejection::TooMany));
    let large = format!("\"{}\"", "x".repeat(MAX_ANSWER_BYTES));
    assert!(matches!(check(&s, &large), Err(Rejection::TooLarge { .. })));
    // A megabyte of nested arrays: refused at once, as too deep.
    let mega = "[".repeat(1024 * 1024);
    assert_eq!(check(&s, &mega), Err(Rejection::TooDeep));
}

#[test]
fn a_large_wrong_value_reports_its_first_error_only() {
    let s = schema(json!({"type": "array", "items": {"type": "string"}}));
    let items: Vec<u32> = (0..50_000).collect();
    let r = check(&s, &serde_json::to_string(&items).unwrap()).unwrap_err();
    let list = r.errors();
    assert_eq!(list.len(), 2, "{list:?}");
    assert!(list[1].contains("only its first error"), "{list:?}");
}

#[test]
fn drafts_2020_12_and_7_and_their_own_keywords() {
    let d2020 = schema(json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "array", "prefixItems": [{"type": "integer"}], "items": false
    }));
    assert_eq!(d2020.draft_name(), "2020-12");
    assert!(check(&d2020, "[1]").is_ok());
    assert!(check(&d2020, "[1, 2]").is_err());
    let d7 = schema(json!({
        "$schema": "http://json-schema.org/draft-07/schema#",
        "type": "array", "items": [{"type": "integer"}], "additionalItems": false
    }));
    assert_eq!(d7.draft_name(), "7");
    assert!(check(&d7, "[1]").is_ok());
    assert!(check(&d7, "[1, 2]").is_err());
    // No $schema: 2020-12.
    assert_eq!(schema(json!({"type": "object"})).draft_name(), "2020-12");
    // Formats are asserted in every draft.
    let dated = schema(json!({"type": "string", "format": "date"}));
    assert!(check(&dated, "\"2026-12-06\"").is_ok());
    assert!(check(&dated, "\"next tuesday\"").is_err());
    // Local references resolve.
    let refs = schema(json!({
        "$defs": {"risk": {"enum": ["low", "high"]}},
        "type": "object", "properties": {"risk": {"$ref": "#/$defs/risk"}}
    }));
    assert!(check(&refs, r#"{"risk": "low"}"#).is_ok());
    assert!(check(&refs, r#"{"risk": "odd"}"#).is_err());
}

#[test]
fn bad_schema_files_are_refused_with_their_reason() {
    assert!(matches!(
        refused("{\"type\": "),
        SchemaError::NotJson { .. }
    ));
    assert!(matches!(refused("not json"), SchemaError::NotJson { .. }));
    assert!(matches!(refused("[1, 2]"), SchemaError::NotASchema { .. }));
    let e = refused(r#"{"type": "strnig"}"#);
    assert!(matches!(e, SchemaError::NotASchema { .. }), "{e}");
    assert!(e.to_string().contains("strnig"), "{e}");
    let e = refused(r#"{"minLength": -1}"#);
    assert!(matches!(e, SchemaError::NotASchema { .. }), "{e}");
    let e = refused(r#"{"$schema": "https://example.com/my-meta", "type": "object"}"#);
    assert!(matches!(e, SchemaError::UnknownDraft { .. }), "{e}");
    let big = format!("{{\"description\": \"{}\"}}", "x".repeat(300 * 1024));
    assert!(matches!(refused(&big), SchemaError::TooLarge { .. }));
    assert!(matches!(
        Schema::from_bytes(b"\xff\xfe{}"),
        Err(SchemaError::NotJson { .. })
    ));
}

#[test]
fn references_outside_the_file_are_never_fetched() {
    for r in [
        "https://example.com/schema.json",
        "http://127.0.0.1:9/schema.json",
        "file:///etc/passwd",
        "other.json",
        "#/$defs/missing",
    ] {
        let text = json!({"type": "object", "properties": {"a": {"$ref": r}}}).to_string();
        let e = refused(&text);
        assert!(matches!(e, SchemaError::NotASchema { .. }), "{r}: {e}");
    }
}

#[test]
fn patterns_run_on_the_linear_time_engine() {
    let s = schema(json!({"type": "string", "pattern": "^(a+)+$"}));
    // Catastrophic for a backtracking engine; linear here.
    let answer = format!("\"{}b\"", "a".repeat(100_000));
    assert!(check(&s, &answer).is_err());
    assert!(check(&s, "\"aaa\"").is_ok());
    // Look-arounds need backtracking: refused before anything is sent.
    let e = refused(r#"{"type": "string", "pattern": "^(?!x)"}"#);
    assert!(matches!(e, SchemaError::NotASchema { .. }), "{e}");
}

#[test]
fn unsatisfiable_schemas_are_refused_as_such() {
    for text in [
        "false",
        r#"{"type": "integer", "minimum": 10, "maximum": 5}"#,
        r#"{"type": "string", "minLength": 5, "maxLength": 2}"#,
        r#"{"allOf": [{"type": "string"}, {"type": "number"}]}"#,
        r#"{"const": "a", "type": "integer"}"#,
        r#"{"type": "object", "required": ["a"], "properties": {"a": false}}"#,
        r##"{"type": "object", "required": ["a"], "properties": {"a": {"$ref": "#"}}}"##,
    ] {
        let e = refused(text);
        assert!(
            matches!(e, SchemaError::Unsatisfiable { .. }),
            "{text}: {e}"
        );
        assert!(e.to_string().contains("accepts no JSON value"), "{e}");
    }
    // Hard to satisfy is not unsatisfiable.
    for text in [
        "true",
        "{}",
        r#"{"type": "integer", "minimum": 5, "maximum": 5}"#,
        r##"{"type": "object", "properties": {"a": {"$ref": "#"}}}"##,
    ] {
        Schema::from_bytes(text.as_bytes()).expect(text);
    }
}

#[test]
fn the_prompt_carries_the_schema_and_the_reask_the_errors() {
    let s = review();
    let message = prompt::with_instruction("Review this diff", &s);
    assert!(message.starts_with("Review this diff\n\nAnswer with exactly one JSON value"));
    assert!(message.ends_with(s.text()));
    assert!(message.contains("draft 2020-12"));
    let again = prompt::reask(&["at /risk: \"maybe\" is not one of".to_string()]);
    assert!(
        again.contains("- at /risk: \"maybe\" is not one of\n"),
        "{again}"
    );
    assert!(again.ends_with("(no explanation)."));
}

#[test]
fn bounded_display_cuts_and_keeps_one_line() {
    assert_eq!(bounded::display(&"abc", 5), "abc");
    assert_eq!(bounded::display(&"abcdef", 3), "abc…");
    assert_eq!(bounded::display(&"a\nb", 10), "a\\nb");
}
