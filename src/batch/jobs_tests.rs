use proptest::prelude::*;
use serde_json::json;

use super::*;

fn err(line: &str) -> Invalid {
    parse_line(line.as_bytes()).expect_err("an invalid line")
}

fn ok(line: &str) -> JobSpec {
    parse_line(line.as_bytes()).expect("a valid line")
}

/// Stands for serde_json's own words in an expected reason: its wording is not ours to pin,
/// only what we put around it.
const SERDE: &str = "<serde_json's words>";

/// `got` is `want`, where a [`SERDE`] in `want` matches any non-empty text.
fn same_reason(got: &str, want: &str) -> bool {
    match want.split_once(SERDE) {
        None => got == want,
        Some((before, after)) => {
            got.len() > before.len() + after.len()
                && got.starts_with(before)
                && got.ends_with(after)
        }
    }
}

#[test]
fn a_full_job_parses() {
    let j = ok(
        r#"{"id":"a","prompt":"one","files":["x.md"],"system":"Be brief.","tools":["read","ls"]}"#,
    );
    assert_eq!(j.id.value(), &json!("a"));
    assert_eq!(j.prompt, "one");
    assert_eq!(j.files, ["x.md"]);
    assert_eq!(j.system.as_deref(), Some("Be brief."));
    assert_eq!(j.tools, Some(vec!["read".to_string(), "ls".to_string()]));
    let j = ok(r#"{"id":2,"prompt":"two","tools":[]}"#);
    assert_eq!(j.id.value(), &json!(2));
    assert_eq!(j.tools, Some(Vec::new()), "tools: [] means no tools");
    assert_eq!(j.system, None);
    assert_eq!(j.schema, None);
    let j = ok(r#"{"id":3,"prompt":"three","schema":"schemas/review.json"}"#);
    assert_eq!(j.schema.as_deref(), Some("schemas/review.json"));
}

#[test]
fn a_schema_field_is_a_path() {
    for (line, want) in [
        (
            r#"{"id":4,"prompt":"p","schema":""}"#,
            "\"schema\" is empty (leave it out for --output-schema)",
        ),
        (
            r#"{"id":4,"prompt":"p","schema":{"type":"object"}}"#,
            "\"schema\" must be a string: the path of a JSON Schema file (got an object)",
        ),
    ] {
        let e = err(line);
        assert_eq!(e.reason, want, "{line}");
        assert_eq!(e.id.as_ref().map(JobId::value), Some(&json!(4)));
    }
}

#[test]
fn messages_are_exact() {
    let cases: &[(&str, Option<Value>, &str)] = &[
        (
            "not json",
            None,
            "not valid JSON: <serde_json's words> at column 2 of that line",
        ),
        (
            "{\"id\":1,",
            Some(json!(1)),
            "not valid JSON: <serde_json's words> at column 8 of that line",
        ),
        // An id that leads the line survives a JSON error after it.
        (
            r#" { "id" : "d", "prompt":"say "hi""}"#,
            Some(json!("d")),
            "not valid JSON: <serde_json's words> at column 31 of that line",
        ),
        (
            r#"{"prompt":"say "hi"", "id":"e"}"#,
            None,
            "not valid JSON: <serde_json's words> at column 17 of that line",
        ),
        (
            r#"{"id":"f" "prompt":"p"}"#,
            None,
            "not valid JSON: <serde_json's words> at column 11 of that line",
        ),
        (
            r#"{"id":[1, "prompt":"p"}"#,
            None,
            "not valid JSON: <serde_json's words> at column 19 of that line",
        ),
        ("[1]", None, "a job must be a JSON object (got a list)"),
        (r#"{"prompt":"p"}"#, None, "\"id\" is missing"),
        (
            r#"{"id":[1],"prompt":"p"}"#,
            None,
            "\"id\" must be a string or an integer (got a list)",
        ),
        (
            r#"{"id":1.5,"prompt":"p"}"#,
            None,
            "\"id\" must be a string or an integer (got 1.5)",
        ),
        (
            r#"{"id":12345678901234567890123,"prompt":"p"}"#,
            None,
            "\"id\" is too large for an integer id (use a string)",
        ),
        (r#"{"id":"c"}"#, Some(json!("c")), "\"prompt\" is missing"),
        (
            r#"{"id":"d","prompt":"  "}"#,
            Some(json!("d")),
            "\"prompt\" is empty",
        ),
        (
            r#"{"id":"d","prompt":7}"#,
            Some(json!("d")),
            "\"prompt\" must be a string (got a number)",
        ),
        (
            r#"{"id":"e","prompt":"p","promt":1}"#,
            Some(json!("e")),
            "unknown field \"promt\" (a job has id, prompt, files, system, tools, schema)",
        ),
        (
            r#"{"id":3,"prompt":"p","files":[""]}"#,
            Some(json!(3)),
            "files[0] is empty (@file requires a path)",
        ),
        (
            r#"{"id":3,"prompt":"p","files":["a","-"]}"#,
            Some(json!(3)),
            "files[1] is \"-\": a batch job cannot attach standard input (it may be the job list \
             itself); name a file",
        ),
        (
            r#"{"id":3,"prompt":"p","files":"a.md"}"#,
            Some(json!(3)),
            "\"files\" must be a list of strings (got a string)",
        ),
        (
            r#"{"id":3,"prompt":"p","files":[1]}"#,
            Some(json!(3)),
            "files[0] must be a string (got a number)",
        ),
        (
            r#"{"id":4,"prompt":"p","system":""}"#,
            Some(json!(4)),
            "\"system\" is empty (leave it out for the default)",
        ),
        (
            r#"{"id":4,"prompt":"p","system":["x"]}"#,
            Some(json!(4)),
            "\"system\" must be a string (got a list)",
        ),
        (
            r#"{"id":5,"prompt":"p","tools":"read"}"#,
            Some(json!(5)),
            "\"tools\" must be a list of strings (got a string)",
        ),
        (
            r#"{"id":5,"prompt":"p","tools":["read",""]}"#,
            Some(json!(5)),
            "tools[1] is empty",
        ),
        (
            r#"{"id":5,"prompt":"p","tools":["read,ls"]}"#,
            Some(json!(5)),
            "tools[0] \"read,ls\" contains a comma (list each tool on its own)",
        ),
    ];
    for (line, id, reason) in cases {
        let e = err(line);
        assert!(
            same_reason(&e.reason, reason),
            "{line}: {} ≠ {reason}",
            e.reason
        );
        assert_eq!(e.id.as_ref().map(JobId::value), id.as_ref(), "{line}");
    }
    assert_eq!(
        err(r#"{"id":"c"}"#).message(7),
        "input line 7: \"prompt\" is missing"
    );
}

#[test]
fn a_line_that_is_not_utf8_says_where() {
    let e = parse_line(b"{\"id\":\"x\",\"prompt\":\"caf\xe9\"}").unwrap_err();
    assert_eq!(e.reason, "not UTF-8 text (first invalid byte at column 24)");
    assert_eq!(e.id, None);
}

#[test]
fn ids_are_canonical_across_their_spellings() {
    let id = |v: Value| JobId::from_value(&v).unwrap();
    assert_eq!(id(json!(7)).canonical(), "7");
    assert_eq!(id(json!("7")).canonical(), "7");
    assert_eq!(id(json!(7)).hash(), id(json!("7")).hash());
    assert_eq!(id(json!(-3)).canonical(), "-3");
    assert_eq!(id(json!(u64::MAX)).canonical(), "18446744073709551615");
    assert_eq!(id(json!("doc-1")).hash(), 0x42d4_e5ab_72fc_8a9b);
    assert_eq!(id(json!("doc-1")).label(), "job doc-1");
    assert_eq!(
        id(json!("a\n[ccswitch] forged\u{1b}[2J")).label(),
        "job a\\n[ccswitch] forged\\u{1b}[2J"
    );
}

#[test]
fn input_hashes_are_the_documented_ones() {
    // The same values as README's Python snippet.
    let a = ok(r#"{"id":1,"prompt":"Summarise.","files":["a.md"]}"#);
    assert_eq!(a.input_hash(), 0x07cf_1a08_c6d6_69a3);
    let b = ok(r#"{"id":1,"prompt":"héllo \"q\"\n","system":"Be brief.","tools":["read","ls"]}"#);
    assert_eq!(b.input_hash(), 0x195b_8d74_3c60_e36d);
    let c = ok(r#"{"id":"other","files":["a.md"],"prompt":"Summarise."}"#);
    assert_eq!(
        c.input_hash(),
        a.input_hash(),
        "the id and key order do not count"
    );
    let d = ok(r#"{"id":1,"prompt":"Summarise.","files":["a.md"],"tools":[]}"#);
    assert_ne!(
        d.input_hash(),
        a.input_hash(),
        "tools: [] differs from no tools"
    );
    // A schema path is a fifth item; lines without one keep their hashes.
    let e = ok(r#"{"id":1,"prompt":"Summarise.","files":["a.md"],"schema":"s.json"}"#);
    assert_eq!(e.input_hash(), 0xbb94_7e43_1b37_c28c);
}

#[test]
fn batch_exit_precedence() {
    use Exit::*;
    assert_eq!(batch_exit(&[Success, Success], None), Success);
    assert_eq!(batch_exit(&[Success, Exhausted], None), Exhausted);
    assert_eq!(batch_exit(&[Exhausted, Error], None), Error);
    assert_eq!(batch_exit(&[Error, Timeout], None), Timeout);
    assert_eq!(batch_exit(&[Timeout, OverBudget, Error], None), OverBudget);
    assert_eq!(batch_exit(&[OverBudget], Some(Interrupt::Int)), Interrupted);
    assert_eq!(batch_exit(&[Success], Some(Interrupt::Term)), Terminated);
    assert_eq!(batch_exit(&[], Some(Interrupt::Int)), Interrupted);
    for a in [Success, Exhausted, Error, OverBudget, Timeout] {
        for b in [Success, Exhausted, Error, OverBudget, Timeout] {
            assert_eq!(worse(a, b), batch_exit(&[a, b], None), "{a:?} {b:?}");
        }
    }
}

/// JSON values of every shape, nested a little.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<u64>().prop_map(|n| json!(n)),
        any::<f64>().prop_map(|f| json!(f)),
        ".{0,12}".prop_map(Value::String),
        prop_oneof![Just(""), Just("-"), Just("a,b"), Just(" "), Just("read")]
            .prop_map(|s| Value::String(s.to_string())),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(
                prop_oneof![
                    Just("id".to_string()),
                    Just("prompt".to_string()),
                    Just("files".to_string()),
                    Just("system".to_string()),
                    Just("tools".to_string()),
                    "[a-z]{1,6}",
                ],
                inner,
                0..6
            )
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Objects that have the job fields, with values of any shape.
fn job_shaped() -> impl Strategy<Value = Value> {
    (
        json_value(),
        json_value(),
        proptest::option::of(json_value()),
        proptest::option::of(json_value()),
        proptest::option::of(json_value()),
    )
        .prop_map(|(id, prompt, files, system, tools)| {
            let mut m = Map::new();
            m.insert("id".into(), id);
            m.insert("prompt".into(), prompt);
            for (k, v) in [("files", files), ("system", system), ("tools", tools)] {
                if let Some(v) = v {
                    m.insert(k.into(), v);
                }
            }
            Value::Object(m)
        })
}

proptest! {
    #![proptest_config(crate::fuzz::config(2000))]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..200)) {
        let _ = parse_line(&bytes);
    }

    #[test]
    fn a_torn_line_keeps_only_the_id_it_opens_with(
        id in prop_oneof![any::<i64>().prop_map(Value::from), "[ -~\u{80}-\u{10ffff}]{0,8}".prop_map(Value::from)],
        prompt in "[ -~\u{80}-\u{3000}]{1,12}",
        cut in any::<prop::sample::Index>(),
    ) {
        let text = json!({"id": id, "prompt": prompt}).to_string();
        let mut at = cut.index(text.len());
        while !text.is_char_boundary(at) {
            at -= 1;
        }
        if let Err(e) = parse_line(&text.as_bytes()[..at]) {
            // The id is kept only once the line is past it (and its comma).
            if let Some(kept) = &e.id {
                prop_assert_eq!(kept.value(), &id);
            }
        }
    }

    #[test]
    fn json_of_any_shape_never_panics_and_keeps_usable_ids(v in prop_oneof![json_value(), job_shaped()]) {
        let text = v.to_string();
        match parse_line(text.as_bytes()) {
            Ok(job) => {
                prop_assert_eq!(Some(job.id.value()), v.get("id"));
                prop_assert!(!job.prompt.trim().is_empty());
                prop_assert!(job.files.iter().all(|f| !f.is_empty() && f != "-"));
                prop_assert!(job.tools.iter().flatten().all(|t| !t.contains(',') && !t.trim().is_empty()));
            }
            Err(e) => {
                prop_assert!(!e.reason.is_empty());
                // An invalid line keeps its id exactly when the id itself is usable.
                if let Some(id) = &e.id {
                    prop_assert_eq!(Some(id.value()), v.get("id"));
                }
                if let Some(id) = v.get("id").filter(|_| v.is_object())
                    && JobId::from_value(id).is_ok()
                {
                    prop_assert!(e.id.is_some(), "{} lost its id: {}", text, e.reason);
                }
            }
        }
    }

    #[test]
    fn valid_jobs_round_trip(
        id in prop_oneof![any::<i64>().prop_map(|n| json!(n)), "[ -~]{0,10}".prop_map(Value::String)],
        prompt in "[ -~]{0,10}[!-~]",
        files in prop::collection::vec("[!-~&&[^-]][ -~]{0,8}", 0..3),
        system in proptest::option::of("[ -~]{0,5}[!-~]"),
        tools in proptest::option::of(prop::collection::vec("[a-z_]{1,8}", 0..3)),
        schema in proptest::option::of("[!-~][ -~]{0,8}"),
    ) {
        let mut m = Map::new();
        m.insert("id".into(), id.clone());
        m.insert("prompt".into(), json!(prompt));
        m.insert("files".into(), json!(files));
        if let Some(s) = &system { m.insert("system".into(), json!(s)); }
        if let Some(t) = &tools { m.insert("tools".into(), json!(t)); }
        if let Some(s) = &schema { m.insert("schema".into(), json!(s)); }
        let job = parse_line(Value::Object(m).to_string().as_bytes()).expect("valid");
        prop_assert_eq!(job.id.value(), &id);
        prop_assert_eq!(job.prompt, prompt);
        prop_assert_eq!(job.files, files);
        prop_assert_eq!(job.system, system);
        prop_assert_eq!(job.tools, tools);
        prop_assert_eq!(job.schema, schema);
    }
}

/// Issue 20: a key given twice is an error, like an unknown field; the result carries the
/// line's id unless the id itself is what was given twice.
#[test]
fn a_field_given_twice_is_refused() {
    let e = parse_line(br#"{"id":"a","id":"b","prompt":"p"}"#).unwrap_err();
    assert_eq!(e.id, None);
    assert!(
        e.reason
            .starts_with("field \"id\" is given twice (at column "),
        "{}",
        e.reason
    );
    let e = parse_line(br#"{"id":"a","prompt":"p","prompt":"q"}"#).unwrap_err();
    assert_eq!(e.id, Some(JobId::from_value(&json!("a")).unwrap()));
    assert!(
        e.reason.contains("field \"prompt\" is given twice"),
        "{}",
        e.reason
    );
    // Nested objects are not job fields; a list is still refused as a whole.
    let e = parse_line(br#"[{"a":1,"a":2}]"#).unwrap_err();
    assert_eq!(e.reason, "a job must be a JSON object (got a list)");
    assert!(parse_line(br#"{"id":1,"prompt":"p","files":["a","a"]}"#).is_ok());
}
