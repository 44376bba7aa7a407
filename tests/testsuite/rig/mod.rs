//! Tests of the test rig itself: provisioning, the fake LLM at the HTTP level, and the fake LLM
//! driven by REAL Pi (0.84.4 and 1.6.0) over `pi --mode rpc` — without the project binary.
//! In tests/rig/: the fake LLM's keys/usage/costs/delays (also through real Pi), its concurrency
//! caps, vendor quota/capacity bodies and key echoes (also through real Pi), the fake Pi's
//! scenarios (checked against real Pi where they imitate it), the real Redis, the RESP proxy in
//! front of it and the black hole, and `Output`'s assertion helpers.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::process::{Child, ChildStdin, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::support::*;
use serde_json::{Value, json};

/// A 1x1 PNG.
const PNG_1X1: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==";

// ---------------------------------------------------------------------------------------------
// A minimal RPC driver for Pi (test-local; the project has its own).

struct Rpc {
    child: Child,
    stdin: Option<ChildStdin>,
    rx: Receiver<Value>,
    stderr: Arc<Mutex<String>>,
    /// Every stdout line so far (for failure messages).
    seen: Vec<Value>,
}

/// Events of one prompt: from its response to `agent_settled`.
struct Turn {
    response: Value,
    events: Vec<Value>,
    elapsed: Duration,
}

impl Turn {
    fn last_assistant(&self) -> &Value {
        self.events
            .iter()
            .rev()
            .find(|e| e["type"] == "message_end" && e["message"]["role"] == "assistant")
            .map(|e| &e["message"])
            .unwrap_or_else(|| panic!("no assistant message_end in {:#?}", self.events))
    }
}

fn assistant_text(msg: &Value) -> String {
    msg["content"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| c["type"] == "text")
        .filter_map(|c| c["text"].as_str())
        .collect()
}

impl Rpc {
    /// `pi --mode rpc` without tools on `provider`/`model`.
    fn spawn(env: &TestEnv, provider: &str, model: &str) -> Rpc {
        Rpc::spawn_with(
            env,
            &["--no-tools", "--provider", provider, "--model", model],
        )
    }

    /// `pi --mode rpc` with the quiet flags (no session, offline, no discovery) plus `extra`.
    fn spawn_with(env: &TestEnv, extra: &[&str]) -> Rpc {
        let mut cmd = env.pi_cmd(
            [
                "--mode",
                "rpc",
                "--no-session",
                "--offline",
                "--no-extensions",
                "--no-context-files",
                "--no-skills",
                "--no-prompt-templates",
                "--no-themes",
            ]
            .iter()
            .chain(extra),
        );
        cmd.env("PI_OFFLINE", "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("spawn pi");
        let stdin = child.stdin.take();
        let out = child.stdout.take().unwrap();
        let mut err = child.stderr.take().unwrap();
        let (tx, rx) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                let v = serde_json::from_str(&line).unwrap_or(Value::String(line));
                if tx.send(v).is_err() {
                    break;
                }
            }
        });
        let stderr = Arc::new(Mutex::new(String::new()));
        let e2 = stderr.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = err.read(&mut buf) {
                if n == 0 {
                    break;
                }
                e2.lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        Rpc {
            child,
            stdin,
            rx,
            stderr,
            seen: Vec::new(),
        }
    }

    fn send(&mut self, v: &Value) {
        let w = self.stdin.as_mut().expect("stdin open");
        writeln!(w, "{v}")
            .and_then(|_| w.flush())
            .expect("write to pi");
    }

    fn fail(&self, why: &str) -> ! {
        let tail: Vec<String> = self
            .seen
            .iter()
            .rev()
            .take(40)
            .rev()
            .map(|v| v.to_string())
            .collect();
        panic!(
            "{why}\n--- last stdout lines ---\n{}\n--- stderr ---\n{}",
            tail.join("\n"),
            self.stderr.lock().unwrap()
        );
    }

    fn next(&mut self, deadline: Instant) -> Value {
        match self
            .rx
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
        {
            Ok(v) => {
                self.seen.push(v.clone());
                v
            }
            Err(RecvTimeoutError::Timeout) => self.fail("timed out waiting for pi"),
            Err(RecvTimeoutError::Disconnected) => self.fail("pi closed stdout"),
        }
    }

    /// Send a command and wait for its response.
    fn request(&mut self, cmd: Value) -> Value {
        let id = cmd["id"].clone();
        self.send(&cmd);
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let v = self.next(deadline);
            if v["type"] == "response" && v["id"] == id {
                return v;
            }
        }
    }

    /// Send a prompt and collect events until `agent_settled`.
    fn prompt(&mut self, id: &str, message: &str, images: Option<Value>) -> Turn {
        let mut cmd = json!({"id": id, "type": "prompt", "message": message});
        if let Some(imgs) = images {
            cmd["images"] = imgs;
        }
        let start = Instant::now();
        self.send(&cmd);
        let deadline = start + Duration::from_secs(30);
        let mut response = Value::Null;
        let mut events = Vec::new();
        loop {
            let v = self.next(deadline);
            if v["type"] == "response" && v["id"] == id {
                if v["success"] != true {
                    self.fail(&format!("prompt {id} rejected: {v}"));
                }
                response = v;
            } else if v["type"] == "agent_settled" {
                if response.is_null() {
                    self.fail("agent_settled before the prompt response");
                }
                return Turn {
                    response,
                    events,
                    elapsed: start.elapsed(),
                };
            } else {
                events.push(v);
            }
        }
    }

    /// Close stdin (Pi exits at once) and wait for the exit.
    fn close(mut self) -> std::process::ExitStatus {
        drop(self.stdin.take());
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                return st;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                self.fail("pi did not exit after stdin EOF");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Real Pi against the fake server

#[derive(Debug)]
enum Expect {
    /// stopReason "stop" with exactly this text.
    Stop(&'static str),
    /// stopReason "error", errorMessage starts with the first string and contains the second.
    Error(&'static str, &'static str),
    /// Like `Error` and the (partial) content text is exactly this.
    ErrorWithText(&'static str, &'static str, &'static str),
}

fn check_turn(rpc: &Rpc, label: &str, turn: &Turn, expect: &Expect) {
    let msg = turn.last_assistant();
    let stop = msg["stopReason"].as_str().unwrap_or("");
    let err = msg["errorMessage"].as_str().unwrap_or("");
    let text = assistant_text(msg);
    let ok = match expect {
        Expect::Stop(t) => stop == "stop" && text == *t,
        Expect::Error(p, c) => stop == "error" && err.starts_with(p) && err.contains(c),
        Expect::ErrorWithText(p, c, t) => {
            stop == "error" && err.starts_with(p) && err.contains(c) && text == *t
        }
    };
    if !ok {
        rpc.fail(&format!(
            "{label}: expected {expect:?}, got stopReason={stop:?} errorMessage={err:?} text={text:?}"
        ));
    }
}

fn fault_surfaces(version: &str) {
    let t0 = Instant::now();
    let env = TestEnv::new(
        version,
        &[
            ProviderSpec::new(
                "fake-a",
                "a",
                vec![ModelSpec::vision("alpha-1"), ModelSpec::text("alpha-2")],
            ),
            ProviderSpec::refused("fake-dead", vec![ModelSpec::text("dead-1")]),
        ],
    );
    env.write_settings(&json!({"retry": {"enabled": false}, "httpIdleTimeoutMs": 2000}));
    env.llm.set_hang_limit(Duration::from_secs(8));
    let llm = &env.llm;

    let mut rpc = Rpc::spawn(&env, "fake-a", "alpha-1");
    let st = rpc.request(json!({"id": "1", "type": "get_state"}));
    assert_eq!(st["success"], true, "{st}");
    assert_eq!(st["data"]["model"]["id"], "alpha-1", "{st}");
    assert_eq!(st["data"]["model"]["provider"], "fake-a", "{st}");
    assert_eq!(st["data"]["model"]["baseUrl"], llm.base_url("a"), "{st}");
    let t_ready = t0.elapsed();
    assert!(
        !pids_with_env_marker(&env.marker()).is_empty(),
        "pids_with_env_marker does not see the running pi"
    );

    let ts = Behaviour::Status429 {
        retry_after: "7".into(),
    };
    let cases: Vec<(&str, Vec<Behaviour>, Expect)> = vec![
        (
            "ok",
            vec![Behaviour::Ok],
            Expect::Stop("Hello from the fake LLM."),
        ),
        (
            "text",
            vec![Behaviour::text("Bonjour, monde. 你好")],
            Expect::Stop("Bonjour, monde. 你好"),
        ),
        (
            "401",
            vec![Behaviour::Status401],
            Expect::Error("401: ", "invalid_api_key"),
        ),
        (
            "402",
            vec![Behaviour::Status402],
            Expect::Error("402: ", "insufficient_quota"),
        ),
        (
            "402zh",
            vec![Behaviour::Status402Chinese],
            Expect::Error("402: ", "账户余额不足"),
        ),
        (
            "403",
            vec![Behaviour::Status403],
            Expect::Error("403: ", "Permission denied"),
        ),
        (
            "404",
            vec![Behaviour::Status404],
            Expect::Error("404: ", "model_not_found"),
        ),
        (
            "429",
            vec![ts],
            Expect::Error(
                r#"429: {"message":"Rate limit reached for requests."#,
                r#""code":"rate_limit_exceeded"}"#,
            ),
        ),
        (
            "429zh",
            vec![Behaviour::QuotaChinese429],
            Expect::Error("429: ", "余额不足"),
        ),
        (
            "500",
            vec![Behaviour::Status500],
            Expect::Error("500: ", "server_error"),
        ),
        (
            "503",
            vec![Behaviour::Status503],
            Expect::Error("503: ", "overloaded"),
        ),
        (
            "418",
            vec![Behaviour::Status(
                418,
                r#"{"error":{"message":"teapot"}}"#.into(),
            )],
            Expect::Error("418: ", "teapot"),
        ),
        (
            "content",
            vec![Behaviour::ContentPolicy],
            Expect::Error("400: ", "content_filter"),
        ),
        (
            "content-zh",
            vec![Behaviour::ContentPolicyChinese],
            Expect::Error("400: ", "内容审查未通过"),
        ),
        (
            "context",
            vec![Behaviour::ContextLength],
            Expect::Error("400: ", "maximum context length"),
        ),
        (
            "drop",
            vec![Behaviour::Drop],
            Expect::ErrorWithText("terminated", "", "Hello from "),
        ),
        (
            "reset",
            vec![Behaviour::Reset],
            Expect::ErrorWithText("terminated", "", "Hello from "),
        ),
        (
            "nofinish",
            vec![Behaviour::NoFinish],
            Expect::ErrorWithText(
                "Stream ended without finish_reason",
                "",
                "Hello from the fake LLM.",
            ),
        ),
        (
            "slow",
            vec![Behaviour::Slow],
            Expect::Stop("Hello from the fake LLM."),
        ),
        (
            "hang",
            vec![Behaviour::Hang],
            Expect::Error("Request timed out", ""),
        ),
        (
            "stall",
            vec![Behaviour::StallMidBody],
            Expect::ErrorWithText("terminated", "", "Hello "),
        ),
    ];
    let mut timings = Vec::new();
    for (i, (label, script, expect)) in cases.iter().enumerate() {
        llm.script("a", "alpha-1", script.clone());
        llm.clear_requests();
        let message = format!("Say hello ({label}).");
        let turn = rpc.prompt(&format!("p{i}"), &message, None);
        // 0.84.4: no data; 1.6.0: {"disposition":"started"}.
        let disp = &turn.response["data"]["disposition"];
        assert!(
            disp.is_null() || disp == "started",
            "{label}: {}",
            turn.response
        );
        check_turn(&rpc, label, &turn, expect);
        let reqs = llm.requests();
        assert_eq!(reqs.len(), 1, "{label}: requests {reqs:#?}");
        let r = &reqs[0];
        assert_eq!(
            (r.route.as_str(), r.model.as_str()),
            ("a", "alpha-1"),
            "{label}"
        );
        assert_eq!(r.path, "/a/v1/chat/completions", "{label}");
        assert_eq!(
            r.last_user_text(),
            Some(message.as_str()),
            "{label}: {r:#?}"
        );
        assert_eq!(r.tools, 0, "{label}");
        assert_eq!(r.authorization.as_deref(), Some("Bearer x"), "{label}");
        assert_eq!(r.body["stream"], true, "{label}");
        assert_eq!(&r.behaviour, &script[0], "{label}");
        if std::env::var_os("RIG_VERBOSE").is_some() {
            let m = turn.last_assistant();
            let types: Vec<&str> = turn
                .events
                .iter()
                .filter_map(|e| e["type"].as_str())
                .collect();
            eprintln!(
                "rig[{version}] {label}: stopReason={} errorMessage={} events={types:?}",
                m["stopReason"], m["errorMessage"]
            );
            for e in turn
                .events
                .iter()
                .filter(|e| e["type"] == "entry_appended" || e["type"] == "agent_end")
            {
                eprintln!("rig[{version}] {label}: {e}");
            }
        }
        timings.push(format!("{label}={}ms", turn.elapsed.as_millis()));
    }

    // Connection refused: switch to the dead provider and back.
    let r = rpc.request(
        json!({"id": "sm1", "type": "set_model", "provider": "fake-dead", "modelId": "dead-1"}),
    );
    assert_eq!(r["success"], true, "{r}");
    llm.clear_requests();
    let turn = rpc.prompt("refused", "Say hello (refused).", None);
    check_turn(
        &rpc,
        "refused",
        &turn,
        &Expect::Error("Connection error", ""),
    );
    assert!(llm.requests().is_empty());
    timings.push(format!("refused={}ms", turn.elapsed.as_millis()));
    let r = rpc.request(
        json!({"id": "sm2", "type": "set_model", "provider": "fake-a", "modelId": "alpha-1"}),
    );
    assert_eq!(r["success"], true, "{r}");

    // Tool call round trip (Pi has no tools: it answers the call with an error tool result).
    llm.script(
        "a",
        "alpha-1",
        vec![
            Behaviour::tool("ls", json!({"path": "."})),
            Behaviour::text("done"),
        ],
    );
    llm.clear_requests();
    let turn = rpc.prompt("tool", "List files.", None);
    check_turn(&rpc, "tool", &turn, &Expect::Stop("done"));
    assert!(
        turn.events
            .iter()
            .any(|e| e["type"] == "message_end" && e["message"]["stopReason"] == "toolUse"),
        "no toolUse message: {:#?}",
        turn.events
    );
    let reqs = llm.requests();
    assert_eq!(reqs.len(), 2, "{reqs:#?}");
    let second = &reqs[1];
    let n = second.messages.len();
    assert!(n >= 2, "{second:#?}");
    assert_eq!(second.messages[n - 2].role, "assistant", "{second:#?}");
    assert!(
        second.messages[n - 2].text.contains("<tool_calls:ls>"),
        "{second:#?}"
    );
    assert_eq!(second.messages[n - 1].role, "tool", "{second:#?}");
    timings.push(format!("tool={}ms", turn.elapsed.as_millis()));

    // Image prompt on a vision model.
    llm.script("a", "alpha-1", vec![Behaviour::Ok]);
    llm.clear_requests();
    let imgs = json!([{"type": "image", "data": PNG_1X1, "mimeType": "image/png"}]);
    let turn = rpc.prompt("img", "Describe this.", Some(imgs));
    check_turn(
        &rpc,
        "image",
        &turn,
        &Expect::Stop("Hello from the fake LLM."),
    );
    let reqs = llm.requests();
    assert_eq!(reqs.len(), 1);
    let images = &reqs[0].images;
    assert_eq!(images.len(), 1, "{:#?}", reqs[0]);
    assert_eq!(images[0].mime, "image/png");
    assert_eq!(
        images[0].base64, PNG_1X1,
        "image payload changed on the way"
    );
    assert!(images[0].bytes > 50, "{:?}", images[0]);
    let last_user = reqs[0]
        .messages
        .iter()
        .rev()
        .find(|m| m.role == "user")
        .unwrap();
    assert!(
        last_user.text.contains("Describe this.") && last_user.text.contains("<image>"),
        "{last_user:?}"
    );

    let status = rpc.close();
    assert!(status.success(), "pi exit status after stdin EOF: {status}");
    env.assert_no_orphans();
    eprintln!(
        "rig[{version}]: ready after {:.2}s, total {:.2}s; {}",
        t_ready.as_secs_f64(),
        t0.elapsed().as_secs_f64(),
        timings.join(" ")
    );
}

#[test]
fn pi_0_84_4_fault_surfaces() {
    fault_surfaces(PI_MIN);
}

#[test]
fn pi_1_6_0_fault_surfaces() {
    fault_surfaces(PI_NEWEST);
}

#[test]
fn provisioning() {
    for v in [PI_MIN, PI_NEWEST] {
        let p = pi(v);
        assert!(p.pi_bin.exists(), "{p:?}");
        assert!(p.node_bin_dir.join("node").is_file(), "{p:?}");
        if v == PI_NEWEST || std::env::var_os("PI_BIN").is_none() {
            assert_eq!(p.version, v);
        }
        let path = p.path_env();
        let first = std::env::split_paths(&path).next().unwrap();
        assert_eq!(first, p.node_bin_dir);
        let out = std::process::Command::new(&p.pi_bin)
            .arg("--version")
            .env_clear()
            .env("PATH", &path)
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), p.version);
    }
    // Same instance on repeated calls.
    assert!(std::ptr::eq(pi(PI_MIN), pi(PI_MIN)));
}

// ---------------------------------------------------------------------------------------------
// The harness (no project binary needed)

#[test]
fn harness_run_command_and_markers() {
    use std::process::Command;
    let mut c = Command::new("sh");
    c.args(["-c", "echo out; echo err >&2; exit 3"]);
    let out = run_command(c, None, Duration::from_secs(10));
    assert_eq!(
        (out.code, out.stdout.as_str(), out.stderr.as_str()),
        (3, "out\n", "err\n")
    );

    let mut c = Command::new("sh");
    c.args(["-c", "cat; echo done"]);
    let out = run_command(c, Some(b"piped\n"), Duration::from_secs(10));
    out.assert_success().assert_stdout_contains("piped\ndone");

    // Timeout: the whole process group is killed and the call panics with the output.
    let mut c = Command::new("sh");
    c.args(["-c", "echo started; sleep 30 & sleep 30"]);
    let t = Instant::now();
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        run_command(c, None, Duration::from_millis(300))
    }));
    let msg = r.expect_err("no timeout panic");
    let msg = msg.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(
        msg.contains("timed out") && msg.contains("started"),
        "{msg}"
    );
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());

    // Env markers find descendants; TestEnv sets a clean environment.
    let env = TestEnv::new(
        PI_MIN,
        &[ProviderSpec::new(
            "fake-a",
            "a",
            vec![ModelSpec::text("alpha-1")],
        )],
    );
    let mut c = env.pi_cmd(Vec::<&str>::new());
    c.env_remove("PI_BIN");
    let envs: Vec<(String, String)> = c
        .get_envs()
        .filter_map(|(k, v)| Some((k.to_str()?.to_string(), v?.to_str()?.to_string())))
        .collect();
    let keys: Vec<&str> = envs.iter().map(|(k, _)| k.as_str()).collect();
    for k in ["PATH", "HOME", "PI_CODING_AGENT_DIR", "LANG"] {
        assert!(keys.contains(&k), "{envs:?}");
    }
    let cmd = env.cmd(["--help"]);
    assert_eq!(cmd.get_program(), BIN);
    assert_eq!(cmd.get_current_dir(), Some(env.cwd.as_path()));
    assert!(env.agent_dir.join("models.json").is_file());
    let mut sleeper = Command::new("sh")
        .args(["-c", "sleep 30 & wait"])
        .env("PI_CODING_AGENT_DIR", &env.agent_dir)
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while pids_with_env_marker(&env.marker()).len() < 2 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    let pids = pids_with_env_marker(&env.marker());
    assert_eq!(pids.len(), 2, "sh and sleep: {pids:?}");
    let left = wait_no_pids_with_env_marker(&env.marker(), Duration::from_millis(100));
    assert_eq!(left.len(), 2, "{left:?}");
    drop(env); // kills both
    let _ = sleeper.wait();
    let left: Vec<u32> = pids
        .iter()
        .copied()
        .filter(|p| std::path::Path::new(&format!("/proc/{p}")).exists())
        .collect();
    assert!(
        left.is_empty() || left.iter().all(|p| cmdline(*p).is_empty()),
        "{left:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// The rig's extensions, one file each (modules of this test crate, under tests/rig/).

mod fake_llm_capacity;
mod fake_llm_ext;
mod fake_llm_http;
use fake_llm_http::{chat, is_eof, read_response, send_chat};
mod fake_llm_pace;
mod fake_llm_window;
mod fake_pi_scenarios;
mod output_helpers;
mod redis_server;
mod resp_proxy;
