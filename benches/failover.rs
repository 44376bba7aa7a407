//! Failover latency through real Pi 0.84.4: the time from the failing response to the request
//! that reaches the healthy model, i.e. the final answer's latency minus the healthy model's own
//! answer time. Measured from the fault server's receive times, for provider-level failures
//! (402, 401, 429 persistent) and a persistent 503, once with Pi's auto-retry disabled in
//! settings.json and once with it left at its defaults (on: 3 retries, 2/4/8 s backoff). The
//! baseline, measured in the same run, is plain Pi with its default auto-retry and no runner: how
//! long until Pi's own retry sends the next request (or that it never does).
//!
//! Run: `cargo bench --bench failover` (add `-- N` for N repetitions per cell, default 5).

#![allow(clippy::disallowed_methods)]

#[path = "../tests/testsuite/support/fake_llm.rs"]
mod fake_llm;
#[path = "../tests/testsuite/support/pi_env.rs"]
mod pi_env;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use fake_llm::{
    Behaviour, FakeLlm, ModelSpec, ProviderSpec, write_models_json, write_settings_json,
};
use serde_json::json;

const BIN: &str = env!("CARGO_BIN_EXE_pi-ccswitch-run");

fn providers() -> Vec<ProviderSpec> {
    vec![
        ProviderSpec::new("fake-a", "a", vec![ModelSpec::text("m")]),
        ProviderSpec::new("fake-b", "b", vec![ModelSpec::text("m")]),
    ]
}

/// One runner run; returns ms from the first failing request to the fallback's request.
fn runner_once(pi: &pi_env::PiInstall, behaviour: &Behaviour, retry_enabled: bool) -> f64 {
    let dir = tempfile::tempdir().expect("temp dir");
    let llm = FakeLlm::start();
    write_models_json(dir.path(), &llm, &providers());
    if !retry_enabled {
        write_settings_json(dir.path(), &json!({"retry": {"enabled": false}}));
    }
    llm.script("a", "m", vec![behaviour.clone()]);
    let out = Command::new(BIN)
        .args([
            "--no-tools",
            "--provider",
            "fake-a",
            "--model",
            "m",
            "Say hello.",
        ])
        .env("PATH", pi.path_env())
        .env("PI_BIN", &pi.pi_bin)
        .env("PI_CODING_AGENT_DIR", dir.path())
        .env("HOME", dir.path())
        .current_dir(dir.path())
        .output()
        .expect("run the runner");
    assert!(
        out.status.success(),
        "runner failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let reqs = llm.requests();
    let first = reqs
        .iter()
        .find(|r| r.route == "a")
        .expect("primary asked")
        .at;
    let fallback = reqs
        .iter()
        .find(|r| r.route == "b")
        .expect("fallback asked")
        .at;
    fallback.duration_since(first).as_secs_f64() * 1000.0
}

/// Plain Pi, default settings: ms until Pi itself sends a second request, or None when it
/// gives up without retrying within 20 s.
fn plain_pi_once(pi: &pi_env::PiInstall, behaviour: &Behaviour) -> Option<f64> {
    let dir = tempfile::tempdir().expect("temp dir");
    let llm = FakeLlm::start();
    write_models_json(dir.path(), &llm, &providers());
    llm.script("a", "m", vec![behaviour.clone(), Behaviour::Ok]);
    let mut child = Command::new(&pi.pi_bin)
        .args([
            "--mode",
            "rpc",
            "--no-session",
            "--no-extensions",
            "--no-tools",
            "--provider",
            "fake-a",
            "--model",
            "m",
        ])
        .env("PATH", pi.path_env())
        .env("PI_CODING_AGENT_DIR", dir.path())
        .env("HOME", dir.path())
        .current_dir(dir.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn pi");
    let mut stdin = child.stdin.take().expect("stdin");
    writeln!(
        stdin,
        r#"{{"id":"1","type":"prompt","message":"Say hello."}}"#
    )
    .expect("write");
    let stdout = BufReader::new(child.stdout.take().expect("stdout"));
    let start = Instant::now();
    for line in stdout.lines() {
        let Ok(line) = line else { break };
        if line.contains(r#""type":"agent_settled""#) || start.elapsed() > Duration::from_secs(20) {
            break;
        }
    }
    drop(stdin);
    let _ = child.kill();
    let _ = child.wait();
    let reqs = llm.requests();
    (reqs.len() >= 2).then(|| reqs[1].at.duration_since(reqs[0].at).as_secs_f64() * 1000.0)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let reps: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(5);
    let pi = pi_env::pi(pi_env::PI_MIN);
    let cases = [
        ("402 quota", Behaviour::Status402),
        ("401 auth", Behaviour::Status401),
        ("429 persistent", Behaviour::rate_limited()),
        ("503 persistent", Behaviour::Status503),
    ];
    println!(
        "Failover latency, Pi {} (median of {reps} runs, ms from the failing response to the fallback's request)\n",
        pi.version
    );
    println!(
        "| failure | runner, Pi retry off | runner, Pi retry default | plain Pi, retry default (baseline) | speed-up vs baseline |"
    );
    println!("|---|---|---|---|---|");
    for (name, behaviour) in cases {
        // 503 is retried once on the same model first: the fallback sees the third request.
        let b = if name.starts_with("503") {
            Behaviour::Status503
        } else {
            behaviour.clone()
        };
        let off = median((0..reps).map(|_| runner_once(pi, &b, false)).collect());
        let on = median((0..reps).map(|_| runner_once(pi, &b, true)).collect());
        let base: Vec<f64> = (0..reps.min(3))
            .filter_map(|_| plain_pi_once(pi, &behaviour))
            .collect();
        let (base_txt, ratio) = if base.is_empty() {
            (
                "never (fails)".to_string(),
                "∞ (Pi alone gives up)".to_string(),
            )
        } else {
            let m = median(base);
            (format!("{m:.0}"), format!("{:.0}×", m / on.max(1.0)))
        };
        println!("| {name} | {off:.0} | {on:.0} | {base_txt} | {ratio} |");
    }
}
