//! Stored times far in the future (issue 29, item 9): a record written by a clock 400 days
//! ahead, or forged with year 9999, is read back bounded by what the rules could have written —
//! a cooldown at most 24 h (the longest cap), a probe lease at most 2 minutes — in the state
//! file and in Redis, in `--status` and in the runs that decide by it.

use crate::support::*;
use serde_json::{Value, json};

const YEAR_9999: u64 = 253_402_300_799_000;
const DAY_MS: u64 = 24 * 3_600_000;

fn providers() -> Vec<ProviderSpec> {
    vec![
        ProviderSpec::new("prim", "a", vec![ModelSpec::text("m")]),
        ProviderSpec::new("back", "b", vec![ModelSpec::text("m")]),
    ]
}

fn forged_record() -> Value {
    json!({
        "consecutive_failures": 1,
        "total_failures": 1,
        "last_failure_at": YEAR_9999,
        "cooldown_until": YEAR_9999,
        "lease_until": YEAR_9999,
        "last_class": "endpoint",
        "last_error": "503: forged",
    })
}

#[track_caller]
fn bounded_in_status(out: &Output) {
    out.assert_success();
    let j = out.json();
    let row = j["models"]
        .as_array()
        .expect("models")
        .iter()
        .find(|m| m["model"] == "prim/m")
        .cloned()
        .expect("prim/m");
    let left = row["cooldown_remaining_ms"].as_u64().expect("remaining");
    assert!(left <= DAY_MS, "cooling for {left} ms\n{row}");
    assert!(left > DAY_MS - 60_000, "{row}");
}

fn check_runs(env: &TestEnv, extra: &[&str]) {
    // The run skips the cooling model and answers on the backup, as with any open breaker.
    let args: Vec<&str> = ["--json", "--no-tools", "--provider", "prim", "--model", "m"]
        .into_iter()
        .chain(extra.iter().copied())
        .chain(["hi"])
        .collect();
    let out = env.run(args);
    out.assert_success();
    assert_eq!(out.json()["model"]["provider"], "back", "{}", out.dump());
}

#[test]
fn far_future_times_in_the_state_file_are_bounded() {
    let env = TestEnv::new(PI_MIN, &providers());
    let state = json!({
        "schema_version": 1,
        "updated_at": YEAR_9999,
        "models": {"prim/m": forged_record()},
    });
    std::fs::write(
        env.agent_dir.join("pi-ccswitch-run-state.json"),
        serde_json::to_vec_pretty(&state).expect("json"),
    )
    .expect("write state");
    bounded_in_status(&env.run(["--status", "--json"]));
    check_runs(&env, &[]);
}

#[test]
fn far_future_times_in_redis_are_bounded() {
    let server = RedisServer::start();
    let env = TestEnv::new(PI_NEWEST, &providers());
    let record = forged_record().to_string();
    let prefix = "stored-times:";
    redis_cmd(
        &server,
        &["SET", &format!("{prefix}v1:rec:model:prim/m"), &record],
    );
    redis_cmd(
        &server,
        &["SADD", &format!("{prefix}v1:idx:model"), "prim/m"],
    );
    let url = server.url();
    let flags = ["--health-url", url.as_str()];
    let mut cmd = env.cmd(["--status", "--json", "--health-url", &url]);
    cmd.env("CCSWITCH_HEALTH_PREFIX", prefix);
    bounded_in_status(&run_command(cmd, None, RUN_TIMEOUT));
    let mut env = env;
    env.env("CCSWITCH_HEALTH_PREFIX", prefix);
    check_runs(&env, &flags);
}
