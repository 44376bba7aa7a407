//! Health shared through Redis, end to end: the real binary, real Pi, the fake provider and a
//! real `redis-server`. Many runs and one probe, two machines, an outage in the middle of a
//! batch, the management flags, and credentials that never show.

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::support::*;
use pi_ccswitch_run::failover::classify::{FailureClass, Scope};
use pi_ccswitch_run::health::Delta;
use pi_ccswitch_run::health::store::{HealthStore, RedisStore};
use serde_json::Value;

const STATE: &str = "pi-ccswitch-run-state.json";
const LOG: &str = "pi-ccswitch-run.log";
const PREFIX: &str = "pi-ccswitch-run:";
const WARNING: &str = "health is not shared this run";

fn providers() -> Vec<ProviderSpec> {
    vec![
        ProviderSpec::new("prov-a", "a", vec![ModelSpec::text("m")]),
        ProviderSpec::new("prov-b", "b", vec![ModelSpec::text("m")]),
    ]
}

fn run_args(url: &str, prompt: &str) -> Vec<String> {
    [
        "--no-tools",
        "--provider",
        "prov-a",
        "--model",
        "m",
        "--health-url",
        url,
        prompt,
    ]
    .iter()
    .map(|s| (*s).to_string())
    .collect()
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_millis() as u64
}

fn redis_health(server: &RedisServer) -> pi_ccswitch_run::health::Health {
    RedisStore::open(&server.url(), PREFIX)
        .expect("url")
        .load(now_ms())
        .expect("load")
        .health
}

/// Every key under the default prefix.
fn keys(server: &RedisServer) -> Vec<String> {
    match redis_cmd(server, &["KEYS", &format!("{PREFIX}*")]) {
        Resp::Array(items) => items
            .iter()
            .filter_map(|k| k.as_str().map(str::to_string))
            .collect(),
        other => panic!("KEYS: {other:?}"),
    }
}

#[test]
fn eight_runs_facing_an_expired_cooldown_send_exactly_one_probe() {
    let server = RedisServer::start();
    let env = TestEnv::new(PI_MIN, &providers());
    env.llm.script("a", "m", vec![Behaviour::Status402]);
    // prov-a failed an hour ago: its 30 min cooldown is over, the next request is a probe.
    let an_hour_ago = now_ms() - 3_600_000;
    RedisStore::open(&server.url(), PREFIX)
        .expect("url")
        .commit(
            &[Delta::Failure {
                at: an_hour_ago,
                key: "prov-a".into(),
                scope: Scope::Provider,
                class: FailureClass::Quota,
                error: "402: quota".into(),
            }],
            an_hour_ago,
        )
        .expect("seed");
    let url = server.url();
    let runs: Vec<_> = (0..8)
        .map(|i| {
            let cmd = env.cmd(run_args(&url, &format!("run {i}")));
            std::thread::spawn(move || run_command(cmd, None, RUN_TIMEOUT))
        })
        .collect();
    let outs: Vec<Output> = runs.into_iter().map(|t| t.join().expect("run")).collect();
    for out in &outs {
        out.assert_success().assert_stderr_lacks(WARNING);
        assert_eq!(out.stdout, "Hello from the fake LLM.\n", "{}", out.dump());
    }
    let probes = env.llm.requests_to("a", "m").len();
    assert_eq!(
        probes,
        1,
        "exactly one probe\n{}",
        outs.iter().map(Output::dump).collect::<Vec<_>>().join("\n")
    );
    let h = redis_health(&server);
    assert_eq!(h.providers["prov-a"].total_failures, 2);
    assert_eq!(h.providers["prov-a"].consecutive_failures, 2, "doubled");
    assert_eq!(h.models["prov-b/m"].total_successes, 8);
    assert!(!env.agent_dir.join(STATE).exists(), "Redis is the store");
}

#[test]
fn a_second_machine_skips_a_provider_the_first_found_dead() {
    let server = RedisServer::start();
    // Two agent dirs, two fake servers: nothing shared but the Redis.
    let one = TestEnv::new(PI_MIN, &providers());
    let two = TestEnv::new(PI_MIN, &providers());
    one.llm.script("a", "m", vec![Behaviour::Status402]);
    let url = server.url();
    one.run(run_args(&url, "first"))
        .assert_success()
        .assert_stderr_contains("switch prov-a/m → prov-b/m (quota)");
    assert_eq!(one.llm.requests_to("a", "m").len(), 1);

    let out = two.run(run_args(&url, "second"));
    out.assert_success()
        .assert_stderr_contains("start: prov-a/m is provider breaker open");
    assert_eq!(out.stdout, "Hello from the fake LLM.\n");
    assert!(
        two.llm.requests_to("a", "m").is_empty(),
        "nothing sent to the dead provider\n{}",
        out.dump()
    );
    for env in [&one, &two] {
        assert!(!env.agent_dir.join(STATE).exists());
    }
    // The run log stays a local file.
    let log = std::fs::read_to_string(one.agent_dir.join(LOG)).expect("local run log");
    assert!(log.contains("fail provider prov-a (quota)"), "{log}");
}

#[test]
fn redis_killed_in_the_middle_of_a_batch_costs_no_answer() {
    let mut server = RedisServer::start();
    let env = TestEnv::new(PI_MIN, &providers());
    env.llm.set_default(Behaviour::Ok.delayed(150));
    let n = 10;
    let path = env.dir.path().join("jobs.jsonl");
    let jobs: String = (0..n)
        .map(|i| format!("{{\"id\":\"job-{i}\",\"prompt\":\"Summarise {i}.\"}}\n"))
        .collect();
    std::fs::write(&path, jobs).expect("jobs");
    let mut cmd = env.cmd([
        "--batch",
        path.to_str().expect("utf-8"),
        "--jobs",
        "2",
        "--no-tools",
        "--provider",
        "prov-a",
        "--model",
        "m",
        "--health-url",
        &server.url(),
    ]);
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("spawn batch");
    let stdout = child.stdout.take().expect("stdout");
    let stderr = child.stderr.take().expect("stderr");
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut { stderr }, &mut s);
        s
    });
    let mut lines = Vec::new();
    for line in BufReader::new(stdout).lines() {
        let line = line.expect("line");
        lines.push(line);
        if lines.len() == 3 {
            server.kill();
        }
    }
    let status = child.wait().expect("wait");
    let stderr = err_reader.join().expect("stderr");
    let dump = format!("{}\n--- stderr ---\n{stderr}", lines.join("\n"));
    assert!(status.success(), "{status}\n{dump}");
    assert_eq!(lines.len(), n, "{dump}");
    for (i, line) in lines.iter().enumerate() {
        let v: Value = serde_json::from_str(line).expect("JSON line");
        assert_eq!(v["id"], format!("job-{i}"), "{dump}");
        assert_eq!(v["exit_code"], 0, "{dump}");
    }
    assert_eq!(stderr.matches(WARNING).count(), 1, "{dump}");
    assert!(!stderr.contains(server.password()), "{dump}");
}

#[test]
fn management_flags_work_against_redis_and_never_show_the_password() {
    let server = RedisServer::start();
    let mut env = TestEnv::new(PI_MIN, &providers());
    env.llm.script("a", "m", vec![Behaviour::Status402]);
    let url = server.url();
    let pw = server.password().to_string();
    let mut outputs: Vec<Output> = Vec::new();
    outputs.push(env.run(run_args(&url, "hello")));
    outputs.last().expect("run").assert_success();

    // The environment variable works as well as the flag.
    env.env("CCSWITCH_HEALTH_URL", &url);
    let status = env.run(["--status", "--json"]);
    status.assert_success();
    let j = status.json();
    assert_eq!(j["cooling"], 1, "{}", status.dump());
    assert_eq!(j["switches"], 1);
    assert_eq!(j["models"][0]["model"], "prov-a/m");
    assert_eq!(j["models"][0]["blocked_by"], "provider");
    outputs.push(status);

    let out = env.run(["--disable", "prov-b/m"]);
    out.assert_success().assert_stdout_eq("disabled prov-b/m\n");
    outputs.push(out);
    assert!(redis_health(&server).models["prov-b/m"].disabled);

    let out = env.run(["--reactivate", "prov-a/m", "--json"]);
    out.assert_success();
    assert_eq!(out.json()["ok"], true);
    outputs.push(out);
    let j = env.run(["--status", "--json"]).json();
    assert_eq!(j["cooling"], 0);
    assert_eq!(j["disabled"], 1);

    let out = env.run(["--reset", "all"]);
    out.assert_success().assert_stdout_eq("reset all\n");
    outputs.push(out);
    assert!(keys(&server).is_empty(), "{:?}", keys(&server));
    let status = env.run(["--status"]);
    status
        .assert_success()
        .assert_stdout_contains("2 models: 2 healthy, 0 cooling, 0 disabled");
    outputs.push(status);

    let doctor = env.run(["--doctor"]);
    doctor.assert_success();
    for line in [
        "ok   health store: redis://:***@127.0.0.1:",
        "ok   redis connection: 127.0.0.1:",
        "ok   redis auth: password accepted",
        "ok   redis round trip: PING ",
        "ok   redis version: 7.",
        "ok   redis health: 0 model, 0 provider and 0 endpoint records, 0 switches",
    ] {
        assert!(
            doctor.stdout.contains(line),
            "missing {line:?}\n{}",
            doctor.dump()
        );
    }
    assert!(!doctor.stdout.contains("state file"), "{}", doctor.dump());
    outputs.push(doctor);

    let wrong = format!("redis://:{pw}0@127.0.0.1:{}/0", server.port());
    let doctor = env.run(["--doctor", "--health-url", &wrong]);
    doctor.assert_code(2);
    assert!(
        doctor
            .stdout
            .contains("FAIL redis auth: the server refused the login (WRONGPASS"),
        "{}",
        doctor.dump()
    );
    outputs.push(doctor);
    let status = env.run(["--status", "--health-url", &wrong]);
    status
        .assert_code(2)
        .assert_stderr_contains("login refused");
    outputs.push(status);

    for out in &outputs {
        assert!(
            !out.stdout.contains(&pw),
            "password in stdout\n{}",
            out.dump()
        );
        assert!(
            !out.stderr.contains(&pw),
            "password in stderr\n{}",
            out.dump()
        );
    }
    assert!(!env.agent_dir.join(STATE).exists());
}

#[test]
fn a_bad_or_dead_health_url() {
    let env = TestEnv::new(PI_MIN, &providers());
    // A bad URL is a configuration error (exit 2) naming the problem, not the password.
    let out = env.run(run_args("redis://:sekrit-pw@127.0.0.1:99999/0", "hi"));
    out.assert_fails_with(
        2,
        "invalid health URL (--health-url or CCSWITCH_HEALTH_URL): the port is not a number from 1 to 65535",
    );
    out.assert_stderr_lacks("sekrit");
    let mut cmd = env.cmd(["--status"]);
    cmd.env("CCSWITCH_HEALTH_URL", "redis://:sekrit-pw@host/x");
    let out = run_command(cmd, None, RUN_TIMEOUT);
    out.assert_code(2)
        .assert_stderr_contains("the database is not a number")
        .assert_stderr_lacks("sekrit");

    // A dead address: the run answers, warns once, and says where health could not be kept.
    let dead = format!("redis://:sekrit-pw@127.0.0.1:{}/0", closed_port());
    let out = env.run(run_args(&dead, "hi"));
    out.assert_success()
        .assert_stderr_count(WARNING, 1)
        // The location shows `:***@`; the stderr writer masks URL credentials once more.
        .assert_stderr_contains("redis://[redacted]@127.0.0.1:")
        .assert_stderr_lacks("sekrit");
    assert_eq!(out.stdout, "Hello from the fake LLM.\n");
    let hole = BlackHole::start();
    let out = env.run(run_args(&hole.redis_url(), "hi"));
    out.assert_success().assert_stderr_count(WARNING, 1);
    assert!(out.elapsed < Duration::from_secs(30));
}

/// A `redis-server` speaking TLS only, with the test certificate of `fixtures/redis-tls`
/// (a private CA; the server certificate names 127.0.0.1 and localhost). Killed on drop.
struct TlsRedis {
    child: std::process::Child,
    port: u16,
    password: String,
    _dir: tempfile::TempDir,
}

impl TlsRedis {
    fn start() -> TlsRedis {
        let fixtures = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/redis-tls");
        let dir = tempfile::tempdir().expect("temp dir");
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("free port")
            .port();
        let password = "tls-pw-4f9c2e".to_string();
        let file = |name: &str| fixtures.join(name).to_string_lossy().into_owned();
        let child = std::process::Command::new(redis_server_bin())
            .args(["--port", "0", "--tls-port", &port.to_string()])
            .args(["--bind", "127.0.0.1", "--requirepass", &password])
            .args(["--tls-cert-file", &file("server.crt")])
            .args(["--tls-key-file", &file("server.key")])
            .args(["--tls-ca-cert-file", &file("ca.crt")])
            .args([
                "--tls-auth-clients",
                "no",
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .arg("--dir")
            .arg(dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start redis-server with TLS");
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                std::time::Instant::now() < deadline,
                "TLS redis-server did not listen"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        TlsRedis {
            child,
            port,
            password,
            _dir: dir,
        }
    }

    fn url(&self) -> String {
        format!("rediss://:{}@127.0.0.1:{}/0", self.password, self.port)
    }
}

impl Drop for TlsRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn rediss_urls_use_tls_and_verify_the_certificate() {
    let server = TlsRedis::start();
    let env = TestEnv::new(PI_MIN, &providers());
    env.llm.script("a", "m", vec![Behaviour::Status402]);
    let ca = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/redis-tls/ca.crt");
    let trusted = |args: Vec<String>| {
        let mut cmd = env.cmd(args);
        cmd.env("SSL_CERT_FILE", &ca);
        run_command(cmd, None, RUN_TIMEOUT)
    };
    let doctor = trusted(vec!["--doctor".into(), "--health-url".into(), server.url()]);
    doctor.assert_success();
    for line in [
        format!(
            "ok   redis connection: 127.0.0.1:{} (TLS) connected in ",
            server.port
        ),
        "ok   redis auth: password accepted".to_string(),
        "ok   redis version: 7.".to_string(),
    ] {
        assert!(
            doctor.stdout.contains(&line),
            "missing {line:?}\n{}",
            doctor.dump()
        );
    }
    let out = trusted(run_args(&server.url(), "hello"));
    out.assert_success().assert_stderr_lacks(WARNING);
    let status = trusted(vec![
        "--status".into(),
        "--json".into(),
        "--health-url".into(),
        server.url(),
    ]);
    assert_eq!(status.json()["cooling"], 1, "{}", status.dump());

    // Without the private CA the certificate is not trusted: no connection, said so.
    let doctor = env.run(["--doctor", "--health-url", &server.url()]);
    doctor.assert_code(2);
    assert!(
        doctor.stdout.contains(&format!(
            "FAIL redis connection: cannot reach 127.0.0.1:{} (TLS): ",
            server.port
        )),
        "{}",
        doctor.dump()
    );
    assert!(
        doctor.stdout.to_lowercase().contains("certificate"),
        "{}",
        doctor.dump()
    );
    for out in [&doctor, &out, &status] {
        assert!(!out.stdout.contains(&server.password) && !out.stderr.contains(&server.password));
    }
}

/// Issue 20: `--reset all` is the recovery command, so it works whatever state the keys are
/// in: an index set overwritten as a string (any read fails with WRONGTYPE) and a record that
/// became a list are deleted with everything else under the prefix. Keys of other prefixes
/// are left alone.
#[test]
fn reset_all_deletes_what_is_ours_whatever_its_type() {
    let server = RedisServer::start();
    let mut env = TestEnv::new(PI_MIN, &providers());
    env.llm.script("a", "m", vec![Behaviour::Status402]);
    env.run(run_args(&server.url(), "hello")).assert_success();
    redis_cmd(&server, &["SET", &format!("{PREFIX}v1:idx:models"), "oops"]);
    redis_cmd(
        &server,
        &["DEL", &format!("{PREFIX}v1:rec:provider:prov-a")],
    );
    redis_cmd(
        &server,
        &["LPUSH", &format!("{PREFIX}v1:rec:provider:prov-a"), "x"],
    );
    redis_cmd(&server, &["SET", "someone-else:key", "keep"]);
    env.env("CCSWITCH_HEALTH_URL", server.url());
    let out = env.run(["--reset", "all"]);
    out.assert_success().assert_stdout_eq("reset all\n");
    assert!(keys(&server).is_empty(), "{:?}", keys(&server));
    assert_eq!(
        redis_cmd(&server, &["GET", "someone-else:key"]).as_str(),
        Some("keep")
    );
    env.run(["--status"]).assert_success();
}

/// Issue 29: a password written where the user name goes (`redis://PASSWORD@host`) is not
/// shown by `--doctor`, `--status` or `--status --json` (it was, in clear).
#[test]
fn a_password_in_the_user_name_place_is_never_shown() {
    let server = RedisServer::start();
    let env = TestEnv::new(PI_MIN, &providers());
    let pw = server.password().to_string();
    let url = format!("redis://{pw}@127.0.0.1:{}/0", server.port());
    for args in [&["--doctor"][..], &["--status"], &["--status", "--json"]] {
        let mut cmd = env.cmd(args);
        cmd.env("CCSWITCH_HEALTH_URL", &url);
        let out = run_command(cmd, None, RUN_TIMEOUT);
        assert!(
            out.stdout.contains("redis://***@127.0.0.1:") || out.stderr.contains("redis://"),
            "{args:?}: the store is named\n{}",
            out.dump()
        );
        assert!(
            !out.stdout.contains(&pw),
            "{args:?}: password in stdout\n{}",
            out.dump()
        );
        assert!(
            !out.stderr.contains(&pw),
            "{args:?}: password in stderr\n{}",
            out.dump()
        );
    }
}
