//! A Redis that is slow, not dead (issue 20): every reply held back, a byte at a time, or
//! never, through a fault-injecting proxy of our own in front of a real `redis-server`. Health
//! I/O has one budget per operation and never holds the run: the answer comes as it would
//! without Redis (give or take the short grace before the first request), `--timeout-ms` and
//! SIGTERM work as always, `elapsed_ms` is what the run took, and a store that blows its budget
//! is down for the run (one warning).

use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::support::*;

const WARNING: &str = "health is not shared this run";

fn env_with_proxy(fault: RespFault) -> (TestEnv, RedisServer, RespProxy) {
    let server = RedisServer::start();
    let proxy = RespProxy::start_for_url(&server.url());
    proxy.set_fault(fault);
    let mut env = TestEnv::new(
        PI_NEWEST,
        &[
            ProviderSpec::new("prov-a", "a", vec![ModelSpec::text("m")]),
            ProviderSpec::new("prov-b", "b", vec![ModelSpec::text("m")]),
        ],
    );
    env.env("CCSWITCH_HEALTH_URL", proxy.url());
    (env, server, proxy)
}

const RUN: [&str; 5] = ["--no-tools", "--provider", "prov-a", "--model", "m"];

fn args<'a>(extra: &[&'a str]) -> Vec<&'a str> {
    RUN.iter().copied().chain(extra.iter().copied()).collect()
}

/// The same run without Redis in the way: the baseline for each bound below.
fn baseline() -> Duration {
    let env = TestEnv::new(
        PI_NEWEST,
        &[ProviderSpec::new("prov-a", "a", vec![ModelSpec::text("m")])],
    );
    let out = env.run(args(&["hi"]));
    out.assert_success();
    out.elapsed
}

/// Every reply 190 ms late (a far region): the run uses the store and is not held by it.
#[test]
fn a_slow_redis_costs_the_run_little_and_is_still_used() {
    let before = baseline();
    let (env, _server, proxy) = env_with_proxy(RespFault::Delay(190));
    env.llm.script("a", "m", vec![Behaviour::Status402]);
    let out = env.run(args(&["hi"]));
    // Measured on both sides: on a loaded machine Pi's start-up alone varies by seconds.
    let base = before.max(baseline());
    eprintln!(
        "every Redis reply 190 ms late: {:?} (baseline {base:?})",
        out.elapsed
    );
    out.assert_success().assert_answer(DEFAULT_TEXT);
    // The store's load and commits are off the path; what is on it: the pre-request grace
    // (250 ms for the first load and the first slot together), the second attempt's slot
    // (waited for: two round trips, behind the first admission's two on the capacity
    // connection, ~760 ms), and at most 1 s of health writes at the exit: about 2 s, measured
    // 1.95 s over an idle baseline.
    out.check(
        out.elapsed < base + Duration::from_millis(2600),
        &format!("baseline {base:?}"),
    );
    out.assert_stderr_lacks(WARNING);
    assert!(proxy.commands("MULTI") >= 1, "the failure was committed");
}

/// Every reply but the login 450 ms late: the store blows its budget. The run sends its first
/// request within the grace, answers, says once that health is not shared, and `--json`'s
/// `elapsed_ms` is the run's wall time.
#[test]
fn a_redis_too_slow_for_its_budget_is_down_and_the_answer_comes_on_time() {
    let (env, _server, _proxy) = env_with_proxy(RespFault::DelayExceptAuth(450));
    let out = run_command(
        env.cmd(args(&["--json", "--timeout-ms", "3000", "hi"])),
        None,
        Duration::from_secs(20),
    );
    out.assert_success();
    let v = out.json();
    let elapsed = v["elapsed_ms"].as_u64().expect("elapsed_ms");
    let wall = u64::try_from(out.elapsed.as_millis()).expect("ms");
    assert!(
        elapsed <= wall && wall - elapsed < 1500,
        "elapsed_ms {elapsed} against {wall} ms of wall time\n{}",
        out.dump()
    );
    assert_eq!(env.llm.requests().len(), 1, "the request was sent in time");
}

/// Replies drip-fed a byte every 300 ms: SIGTERM ends the run with 143 within the usual grace,
/// and no Pi is left behind.
#[test]
fn sigterm_ends_the_run_at_once_whatever_redis_does() {
    let (env, _server, _proxy) = env_with_proxy(RespFault::Drip(300));
    env.llm.set_default(Behaviour::Hang);
    let mut child = env
        .cmd(args(&["hi"]))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    // The request is out (the store did not hold it), then the signal.
    env.llm.wait_requests(1, Duration::from_secs(10));
    assert_eq!(env.llm.requests().len(), 1, "the request went out");
    let pid = i32::try_from(child.id()).expect("pid");
    let signalled = Instant::now();
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    let status = child.wait().expect("wait");
    let took = signalled.elapsed();
    use std::os::unix::process::ExitStatusExt as _;
    assert_eq!(status.code(), Some(143), "{status:?}");
    assert!(status.signal().is_none());
    eprintln!("exit after SIGTERM with Redis drip-feeding: {took:?}");
    assert!(took < Duration::from_secs(5), "took {took:?} after SIGTERM");
    env.assert_no_orphans();
}

/// A Redis that never answers: the run answers with one warning, as with a dead one.
#[test]
fn a_redis_that_never_answers_costs_one_budget_at_most() {
    let base = baseline();
    let (env, _server, _proxy) = env_with_proxy(RespFault::Hang);
    let out = run_command(env.cmd(args(&["hi"])), None, Duration::from_secs(30));
    eprintln!("Redis never answers: {:?} (baseline {base:?})", out.elapsed);
    out.assert_success()
        .assert_answer(DEFAULT_TEXT)
        .assert_stderr_count(WARNING, 1);
    out.check(
        out.elapsed < base + Duration::from_millis(2500),
        &format!("baseline {base:?}"),
    );
}

/// A batch against a Redis 100 ms away: jobs start from what the last job read or wrote, and
/// writes never hold a job; ten jobs take a few seconds, not one round trip-laden job each.
#[test]
fn a_batch_is_not_held_by_a_far_away_redis() {
    let (env, _server, proxy) = env_with_proxy(RespFault::Delay(100));
    let jobs: String = (0..10)
        .map(|i| format!("{{\"id\":{i},\"prompt\":\"p{i}\"}}\n"))
        .collect();
    let mut a: Vec<&str> = RUN.to_vec();
    a.extend(["--batch", "-", "--jobs", "2"]);
    let started = Instant::now();
    let out = env.run_stdin(a, jobs.as_bytes());
    let took = started.elapsed();
    eprintln!("10 jobs, --jobs 2, every Redis reply 100 ms late: {took:?}");
    out.assert_success().assert_stderr_lacks(WARNING);
    assert_eq!(out.json_lines().len(), 10);
    assert!(
        took < Duration::from_secs(9),
        "took {took:?}\n{}",
        out.dump()
    );
    assert!(proxy.total_commands() > 0, "the store was used");
}
