//! Runners whose clocks disagree share one key's slots all the same (issue 29, item 1): every
//! lease operation is judged by the store's clock (Redis's `TIME`; the file system's for the
//! file store), never the caller's. A runner is put on a skewed clock with the binary's test
//! offset (`CCSWITCH_TEST_CLOCK_OFFSET_MS`, as `faketime` would do); the fault server refuses
//! anything over the key's cap of 2 at once, so a broken cap shows as a refusal.

use std::process::Command;
use std::time::Duration;

use crate::support::batch::{FROM_PRIM, jobs, successes, write_file};
use crate::support::*;

const HOUR_MS: i64 = 3_600_000;
const CAP: usize = 2;

fn prim() -> Vec<ProviderSpec> {
    vec![ProviderSpec::new("prim", "a", vec![ModelSpec::text("m")])]
}

enum Store {
    Redis(RedisServer),
    File,
}

/// A runner on a clock `offset_ms` off, sharing `store`, under `--max-inflight prim=2`.
fn runner(env: &TestEnv, store: &Store, offset_ms: i64, args: &[&str]) -> Command {
    let mut all: Vec<String> = FROM_PRIM
        .iter()
        .chain(["--max-inflight", "prim=2"].iter())
        .chain(args)
        .map(|s| s.to_string())
        .collect();
    if let Store::Redis(server) = store {
        all.extend(["--health-url".to_string(), server.url()]);
    }
    let mut cmd = env.cmd(all);
    cmd.env("CCSWITCH_TEST_CLOCK_OFFSET_MS", offset_ms.to_string());
    cmd
}

#[track_caller]
fn all_answered(out: &Output, n: usize) {
    out.assert_success();
    let lines = out.json_lines();
    assert_eq!(successes(&lines).len(), n, "{}", out.dump());
}

/// The case: a runner an hour behind holds a slot on a request longer than a lease
/// (renewed meanwhile: each renewal must extend it on the store's clock, not set its end an
/// hour in the past), while a runner on the right clock runs a batch: never 3 in flight.
fn behind_by_an_hour(v: &str, store: &Store) {
    let env = TestEnv::new(v, &prim());
    env.llm.set_concurrency_cap("a", Some(CAP));
    let mut script = vec![Behaviour::Ok.delayed(18_000)];
    script.extend(std::iter::repeat_n(Behaviour::Ok.delayed(700), 10));
    env.llm.script("a", "m", script);
    let slow = runner(&env, store, -HOUR_MS, &["--json", "Take your time."]);
    let input = write_file(&env, "jobs.jsonl", &jobs(6));
    std::thread::scope(|s| {
        let first = s.spawn(|| run_command(slow, None, RUN_TIMEOUT));
        assert_eq!(
            env.llm.wait_in_flight("a", 1, Duration::from_secs(30)),
            1,
            "the slow request is out"
        );
        let batch = runner(&env, store, 0, &["--batch", &input, "--jobs", "2"]);
        let second = run_command(batch, None, RUN_TIMEOUT);
        let first = first.join().expect("the slow run");
        first.assert_success();
        all_answered(&second, 6);
        assert_eq!(
            env.llm.rejections("a"),
            0,
            "over the cap\n{}{}",
            first.dump(),
            second.dump()
        );
    });
    assert!(env.llm.max_in_flight("a") <= CAP);
    env.assert_no_orphans();
}

/// Runners an hour ahead and an hour behind run batches beside one on the right clock: the
/// one ahead must not wipe the others' leases when it gives its own back.
fn ahead_and_behind(v: &str, store: &Store) {
    let env = TestEnv::new(v, &prim());
    env.llm.set_concurrency_cap("a", Some(CAP));
    env.llm.set_default(Behaviour::Ok.delayed(600));
    let input = write_file(&env, "jobs.jsonl", &jobs(4));
    let cmds: Vec<Command> = [HOUR_MS, 0, -HOUR_MS]
        .into_iter()
        .map(|offset| runner(&env, store, offset, &["--batch", &input, "--jobs", "2"]))
        .collect();
    let outs: Vec<Output> = std::thread::scope(|s| {
        let running: Vec<_> = cmds
            .into_iter()
            .map(|cmd| s.spawn(move || run_command(cmd, None, RUN_TIMEOUT)))
            .collect();
        running
            .into_iter()
            .map(|h| h.join().expect("runner"))
            .collect()
    });
    for out in &outs {
        all_answered(out, 4);
    }
    assert_eq!(
        env.llm.rejections("a"),
        0,
        "over the cap\n{}",
        outs.iter().map(Output::dump).collect::<String>()
    );
    env.assert_no_orphans();
}

#[test]
fn a_runner_an_hour_behind_keeps_the_cap_through_redis() {
    behind_by_an_hour(PI_NEWEST, &Store::Redis(RedisServer::start()));
}

#[test]
fn a_runner_an_hour_behind_keeps_the_cap_through_the_file_store() {
    behind_by_an_hour(PI_MIN, &Store::File);
}

#[test]
fn skewed_runners_keep_the_cap_through_redis() {
    ahead_and_behind(PI_MIN, &Store::Redis(RedisServer::start()));
}

#[test]
fn skewed_runners_keep_the_cap_through_the_file_store() {
    ahead_and_behind(PI_NEWEST, &Store::File);
}

/// Issue 29: a forged lease with a far-future end holds its slot no longer than the documented
/// 15 s TTL (it held it for 60 s: a run with a 20 s deadline timed out).
#[test]
fn a_forged_far_future_lease_lasts_at_most_the_ttl() {
    let env = TestEnv::new(PI_MIN, &prim());
    let forged = serde_json::json!({
        "version": 1,
        "providers": {"prim": {"limit": 1, "leases": {
            "forged:1:0": {"until": u64::MAX, "generation": 0}
        }}}
    });
    std::fs::write(
        env.agent_dir.join("pi-ccswitch-run-capacity.json"),
        forged.to_string(),
    )
    .expect("forge the capacity file");
    let out = env.run(FROM_PRIM.iter().copied().chain([
        "--json",
        "--max-inflight",
        "prim=1",
        "--timeout-ms",
        "20000",
        "hi",
    ]));
    out.assert_success();
    let waited = out.json()["capacity_wait_ms"].as_u64().expect("waited");
    assert!(
        (10_000..=16_500).contains(&waited),
        "waited {waited} ms for the forged slot\n{}",
        out.dump()
    );
}

/// Issue 29: Redis keeps a provider's capacity record as the file store does — the learned
/// limit is the next start however long until the next batch (it expired after an hour idle,
/// so every nightly batch started cold).
#[test]
fn redis_keeps_the_learned_limit_like_the_file_store() {
    let store = Store::Redis(RedisServer::start());
    let env = TestEnv::new(PI_NEWEST, &prim());
    let input = write_file(&env, "jobs.jsonl", &jobs(2));
    all_answered(
        &run_command(
            runner(&env, &store, 0, &["--batch", &input]),
            None,
            RUN_TIMEOUT,
        ),
        2,
    );
    let Store::Redis(server) = &store else {
        unreachable!()
    };
    let key = "pi-ccswitch-run:v1:cap:prim";
    assert!(
        matches!(redis_cmd(server, &["EXISTS", key]), Resp::Int(1)),
        "{key} written"
    );
    assert_eq!(
        redis_cmd(server, &["PTTL", key]),
        Resp::Int(-1),
        "the record does not expire"
    );
}

/// Issue 29, item 7: a batch SIGSTOPped while it holds both of a key's slots lets its leases
/// lapse; another runner (here: the test, through the store) takes the slots. When the batch
/// continues it does not go on past the cap: it gives its lapsed slots up (the store counts
/// no more than the cap), stops its requests and sends them again only once it has slots
/// again, and every job is answered.
#[test]
fn a_stopped_batch_takes_its_slots_again_before_sending() {
    use pi_ccswitch_run::capacity::ops::{CapacityOp, CapacityReply, Choice};
    use pi_ccswitch_run::capacity::{CapacityDelta, DEFAULT_LEASE_TTL_MS, Limits};
    use pi_ccswitch_run::health::store::{FileStore, HealthStore};
    use std::os::unix::process::CommandExt;

    let env = TestEnv::new(PI_NEWEST, &prim());
    let mut script = vec![Behaviour::Ok.delayed(40_000); 2];
    script.extend(std::iter::repeat_n(Behaviour::Ok.delayed(300), 6));
    env.llm.script("a", "m", script);
    let input = write_file(&env, "jobs.jsonl", &jobs(2));
    let mut cmd = runner(
        &env,
        &Store::File,
        0,
        &["--batch", &input, "--jobs", "2", "-v"],
    );
    cmd.stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .process_group(0);
    let child = cmd.spawn().expect("spawn the batch");
    let pid = i32::try_from(child.id()).expect("pid");
    assert_eq!(env.llm.wait_in_flight("a", 2, Duration::from_secs(30)), 2);
    // SAFETY: kill(2) on the runner this test started.
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    std::thread::sleep(Duration::from_millis(DEFAULT_LEASE_TTL_MS + 2_000));

    let now = || {
        u64::try_from(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .expect("clock")
                .as_millis(),
        )
        .expect("ms")
    };
    let limits = Limits {
        initial: 2,
        cap: Some(2),
    };
    let mut store = FileStore::open(&env.agent_dir);
    for slot in ["other:1:0", "other:1:1"] {
        let op = CapacityOp::Admit {
            slot: slot.to_string(),
            ttl_ms: DEFAULT_LEASE_TTL_MS,
            choices: vec![Choice {
                provider: "prim".into(),
                limits,
            }],
            release: None,
            hold_first_ms: 0,
        };
        let reply = store.capacity(&op, now()).expect("admit");
        assert!(
            matches!(reply, CapacityReply::Admitted { .. }),
            "the stopped batch's leases lapsed: {reply:?}"
        );
    }
    let sent_before = env.llm.requests().len();
    // SAFETY: as above.
    unsafe { libc::kill(pid, libc::SIGCONT) };
    std::thread::sleep(Duration::from_millis(3_000));
    let in_flight = |store: &mut FileStore| {
        store
            .load_capacity(now())
            .expect("load")
            .get("prim")
            .map_or(0, |r| r.in_flight(now()))
    };
    assert_eq!(
        in_flight(&mut store),
        2,
        "the continued batch counts itself on top of the cap"
    );
    assert_eq!(
        env.llm.requests().len(),
        sent_before,
        "nothing sent while the slots are another's"
    );
    for slot in ["other:1:0", "other:1:1"] {
        let op = CapacityOp::Apply {
            provider: "prim".into(),
            delta: CapacityDelta::Release {
                at: now(),
                slot: slot.to_string(),
            },
        };
        store.capacity(&op, now()).expect("release");
    }
    let done = child.wait_with_output().expect("the batch ends");
    let out = Output {
        code: done.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&done.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&done.stderr).into_owned(),
        elapsed: Duration::ZERO,
    };
    all_answered(&out, 2);
    out.assert_stderr_contains("lease lapsed");
    assert_eq!(env.llm.requests().len(), sent_before + 2, "{}", out.dump());
    env.assert_no_orphans();
}
