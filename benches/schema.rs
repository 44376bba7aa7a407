//! `cargo bench --bench schema`: how long judging an answer against a schema takes
//! (`schema::check`: the bounded scan, the parse and the validation) for the largest and the
//! most hostile answers the limits let through, against serde_json parsing the same text
//! measured in the same run (the least any JSON check costs). Inputs are generated in memory.
//! Prints a markdown table on stdout.

#![expect(clippy::print_stdout, reason = "a benchmark reports on stdout")]

use std::hint::black_box;
use std::time::Duration;

use pi_ccswitch_run::clock;
use pi_ccswitch_run::schema::{Schema, check};
use serde_json::json;

const RUNS: usize = 7;

fn median(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times[times.len() / 2]
}

fn time(mut f: impl FnMut()) -> Duration {
    let mut times = Vec::with_capacity(RUNS);
    for _ in 0..RUNS {
        let start = clock::now().instant;
        f();
        times.push(clock::now().instant.duration_since(start));
    }
    median(times)
}

fn ms(d: Duration) -> String {
    format!("{:.2}", d.as_secs_f64() * 1000.0)
}

fn schema(v: serde_json::Value) -> Schema {
    Schema::from_bytes(v.to_string().as_bytes()).expect("a valid schema")
}

fn main() {
    let dates = schema(json!({
        "type": "array", "uniqueItems": true,
        "items": {"type": "string", "format": "date-time"}
    }));
    let pattern = schema(json!({
        "type": "object",
        "properties": {"a": {"type": "string", "pattern": "^(a+)+$"}}
    }));
    let tree = schema(json!({
        "$defs": {"n": {"anyOf": [{"type": "integer"},
                                   {"type": "array", "items": {"$ref": "#/$defs/n"}}]}},
        "$ref": "#/$defs/n"
    }));
    let review = schema(json!({
        "type": "object", "required": ["risk"],
        "properties": {"risk": {"enum": ["low", "high"]}}
    }));
    let wide = format!(
        "[{}]",
        (0..70_000)
            .map(|i| format!(
                "\"2026-12-06T{:02}:{:02}:{:02}Z\"",
                i / 3600,
                i / 60 % 60,
                i % 60
            ))
            .collect::<Vec<_>>()
            .join(",")
    );
    let long = format!("{{\"a\": \"{}b\"}}", "a".repeat(2 * 1024 * 1024 - 20));
    let deep = format!("{}1{}", "[".repeat(64), "]".repeat(64));
    let numbers = format!("[{}]", vec!["[1,[2,[3]]]"; 15_000].join(","));
    let nested = "[".repeat(1024 * 1024);
    let cases: [(&str, &Schema, &str, bool); 6] = [
        (
            "70,000 distinct date-time strings, uniqueItems (1.6 MB)",
            &dates,
            &wide,
            true,
        ),
        ("a 2 MiB string against ^(a+)+$", &pattern, &long, true),
        (
            "nested arrays 64 deep, anyOf through $ref",
            &tree,
            &deep,
            true,
        ),
        (
            "15,000 small trees, anyOf through $ref (160 KB)",
            &tree,
            &numbers,
            true,
        ),
        (
            "a megabyte of [ (refused by the scan)",
            &review,
            &nested,
            false,
        ),
        (
            "an object schema against those 70,000 strings",
            &review,
            &wide,
            true,
        ),
    ];
    println!("| answer | check (ms) | serde_json parse alone (ms) | ratio |");
    println!("|---|---|---|---|");
    for (name, s, text, parses) in cases {
        let checked = time(|| {
            let _ = black_box(check(s, black_box(text)));
        });
        let parse = if parses {
            time(|| {
                let _ = black_box(serde_json::from_str::<serde_json::Value>(black_box(text)));
            })
        } else {
            Duration::ZERO
        };
        let ratio = if parse.is_zero() {
            "—".to_string()
        } else {
            format!("{:.1}×", checked.as_secs_f64() / parse.as_secs_f64())
        };
        println!(
            "| {name} | {} | {} | {ratio} |",
            ms(checked),
            if parses { ms(parse) } else { "—".into() }
        );
    }
}
