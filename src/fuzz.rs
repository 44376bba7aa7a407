//! Random-input test support (test builds only): one place that decides how many cases a
//! property test runs. `cargo test` runs a few thousand per property in seconds; setting
//! `CCSWITCH_FUZZ_CASES` (e.g. `200000`) runs that many instead, for nightly long runs.
//! Failures are not persisted to files: every input that broke a property becomes a named
//! regression test next to the property instead.

use proptest::test_runner::Config;

/// The property-test configuration: `default_cases` unless `CCSWITCH_FUZZ_CASES` says otherwise.
#[expect(
    clippy::disallowed_methods,
    reason = "test-only knob; the product reads the environment in settings.rs only"
)]
pub fn config(default_cases: u32) -> Config {
    let cases = std::env::var("CCSWITCH_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default_cases);
    Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    }
}
