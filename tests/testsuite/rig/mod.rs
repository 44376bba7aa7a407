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
// The fake server at the HTTP level (no Pi)

/// Send one raw request on `s`; read the response head and body. For chunked bodies the
/// returned body is the decoded payload plus whether the terminating chunk arrived.
fn http(s: &mut TcpStream, method: &str, path: &str, body: &str) -> (String, String, bool) {
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    read_response(s)
}

fn read_response(s: &mut TcpStream) -> (String, String, bool) {
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut buf = Vec::new();
    let mut tmp = [0u8; 8192];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
        let n = s.read(&mut tmp).expect("read head");
        assert!(
            n > 0,
            "EOF before head: {:?}",
            String::from_utf8_lossy(&buf)
        );
        buf.extend_from_slice(&tmp[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut rest = buf[head_end + 4..].to_vec();
    let lower = head.to_ascii_lowercase();
    if lower.contains("transfer-encoding: chunked") {
        // Read until the terminating chunk or EOF/error.
        let mut done = false;
        loop {
            if rest.windows(5).any(|w| w == b"0\r\n\r\n") {
                done = true;
                break;
            }
            match s.read(&mut tmp) {
                Ok(0) | Err(_) => break,
                Ok(n) => rest.extend_from_slice(&tmp[..n]),
            }
        }
        // Decode chunks (best effort for a truncated body).
        let mut out = Vec::new();
        let mut pos = 0;
        while let Some(e) = rest[pos..].windows(2).position(|w| w == b"\r\n") {
            let size =
                usize::from_str_radix(std::str::from_utf8(&rest[pos..pos + e]).unwrap_or("0"), 16)
                    .unwrap_or(0);
            pos += e + 2;
            if size == 0 || pos + size > rest.len() {
                break;
            }
            out.extend_from_slice(&rest[pos..pos + size]);
            pos += size + 2;
        }
        (head, String::from_utf8_lossy(&out).into_owned(), done)
    } else {
        let len: usize = lower
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .map(|v| v.trim().parse().unwrap())
            .unwrap_or(0);
        while rest.len() < len {
            let n = s.read(&mut tmp).unwrap();
            assert!(n > 0);
            rest.extend_from_slice(&tmp[..n]);
        }
        (
            head,
            String::from_utf8_lossy(&rest[..len]).into_owned(),
            true,
        )
    }
}

fn is_eof(s: &mut TcpStream) -> bool {
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    matches!(s.read(&mut [0u8; 16]), Ok(0))
}

#[test]
fn fake_llm_http_level() {
    let llm = FakeLlm::start();
    let addr = format!("127.0.0.1:{}", llm.port());
    assert_eq!(llm.base_url("a"), format!("http://{addr}/a/v1"));
    let chat = |model: &str| {
        json!({"model": model, "stream": true, "messages": [{"role": "user", "content": "hi"}]})
            .to_string()
    };

    // Script: 500 then Ok (repeats); keep-alive after a 200 stream, close after an error.
    llm.script("a", "m1", vec![Behaviour::Status500, Behaviour::Ok]);
    let mut s = TcpStream::connect(&addr).unwrap();
    let (head, body, _) = http(&mut s, "POST", "/a/v1/chat/completions", &chat("m1"));
    assert!(head.starts_with("HTTP/1.1 500 "), "{head}");
    assert!(head.contains("Connection: close"), "{head}");
    assert!(body.contains("server_error"), "{body}");
    assert!(is_eof(&mut s), "connection not closed after an error");
    let mut s = TcpStream::connect(&addr).unwrap();
    for _ in 0..2 {
        let (head, body, done) = http(&mut s, "POST", "/a/v1/chat/completions", &chat("m1"));
        assert!(head.starts_with("HTTP/1.1 200 "), "{head}");
        assert!(head.contains("Content-Type: text/event-stream"), "{head}");
        assert!(done, "no terminating chunk");
        let events: Vec<&str> = body.split("\n\n").filter(|e| !e.is_empty()).collect();
        assert!(events.iter().all(|e| e.starts_with("data: ")), "{body}");
        assert_eq!(*events.last().unwrap(), "data: [DONE]");
        let parsed: Vec<Value> = events[..events.len() - 1]
            .iter()
            .map(|e| serde_json::from_str(&e["data: ".len()..]).unwrap())
            .collect();
        let text: String = parsed
            .iter()
            .filter_map(|v| v["choices"][0]["delta"]["content"].as_str())
            .collect();
        assert_eq!(text, "Hello from the fake LLM.");
        assert!(
            parsed
                .iter()
                .any(|v| v["choices"][0]["finish_reason"] == "stop")
        );
        assert!(parsed.iter().any(|v| v["usage"]["total_tokens"] == 18));
    }
    let reqs = llm.requests_to("a", "m1");
    assert_eq!(reqs.len(), 3);
    assert_eq!(
        (
            reqs[1].conn,
            reqs[1].req_on_conn,
            reqs[2].conn,
            reqs[2].req_on_conn
        ),
        (2, 1, 2, 2)
    );
    assert_eq!(reqs[0].behaviour, Behaviour::Status500);
    assert_eq!(reqs[2].behaviour, Behaviour::Ok);

    // 429 with Retry-After; wildcard script; default.
    llm.script(
        "b",
        "*",
        vec![Behaviour::Status429 {
            retry_after: "7".into(),
        }],
    );
    let mut s = TcpStream::connect(&addr).unwrap();
    let (head, body, _) = http(&mut s, "POST", "/b/v1/chat/completions", &chat("any"));
    assert!(
        head.starts_with("HTTP/1.1 429 ") && head.contains("Retry-After: 7"),
        "{head}"
    );
    assert!(body.contains("rate_limit_exceeded"));
    llm.set_default(Behaviour::Status(
        418,
        "{\"error\":{\"message\":\"teapot\"}}".into(),
    ));
    let mut s = TcpStream::connect(&addr).unwrap();
    let (head, body, _) = http(&mut s, "POST", "/c/v1/chat/completions", &chat("x"));
    assert!(head.starts_with("HTTP/1.1 418 "), "{head}");
    assert_eq!(body, "{\"error\":{\"message\":\"teapot\"}}");
    llm.set_default(Behaviour::Ok);

    // Tool call stream.
    llm.script(
        "a",
        "tool",
        vec![Behaviour::tool("ls", json!({"path": "."}))],
    );
    let mut s = TcpStream::connect(&addr).unwrap();
    let (_, body, done) = http(&mut s, "POST", "/a/v1/chat/completions", &chat("tool"));
    assert!(
        done && body.contains("\"tool_calls\"")
            && body.contains("\"finish_reason\":\"tool_calls\""),
        "{body}"
    );
    assert!(body.contains(r#""arguments":"{\"path\":\".\"}""#), "{body}");

    // Drop: FIN mid chunked body; Reset: RST.
    llm.script("a", "drop", vec![Behaviour::Drop]);
    let mut s = TcpStream::connect(&addr).unwrap();
    let (_, body, done) = http(&mut s, "POST", "/a/v1/chat/completions", &chat("drop"));
    assert!(!done, "drop sent a terminating chunk");
    assert!(
        body.contains("Hello ") && body.contains("from ") && !body.contains("[DONE]"),
        "{body}"
    );
    llm.script("a", "reset", vec![Behaviour::Reset]);
    let mut s = TcpStream::connect(&addr).unwrap();
    write!(
        s,
        "POST /a/v1/chat/completions HTTP/1.1\r\nContent-Length: {}\r\n\r\n{}",
        chat("reset").len(),
        chat("reset")
    )
    .unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut all = Vec::new();
    let err = loop {
        let mut tmp = [0u8; 4096];
        match s.read(&mut tmp) {
            Ok(0) => panic!("reset closed with FIN: {}", String::from_utf8_lossy(&all)),
            Ok(n) => all.extend_from_slice(&tmp[..n]),
            Err(e) => break e,
        }
    };
    assert_eq!(err.kind(), std::io::ErrorKind::ConnectionReset, "{err}");

    // NoFinish: [DONE] without finish_reason.
    llm.script("a", "nf", vec![Behaviour::NoFinish]);
    let mut s = TcpStream::connect(&addr).unwrap();
    let (_, body, done) = http(&mut s, "POST", "/a/v1/chat/completions", &chat("nf"));
    assert!(
        done && body.contains("[DONE]") && !body.contains("\"stop\""),
        "{body}"
    );

    // GET models lists the scripted ids of the route.
    let mut s = TcpStream::connect(&addr).unwrap();
    let (head, body, _) = http(&mut s, "GET", "/a/v1/models", "");
    assert!(head.starts_with("HTTP/1.1 200 "), "{head}");
    let ids: Vec<String> = serde_json::from_str::<Value>(&body).unwrap()["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(ids, ["drop", "m1", "nf", "reset", "tool"]);

    // Request recording: images, tools, reasoning_effort, tool calls.
    let rich = json!({
    "model": "rich", "stream": true, "reasoning_effort": "high",
    "tools": [{"type": "function", "function": {"name": "ls"}}, {"type": "function", "function": {"name": "read"}}],
    "messages": [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": [{"type": "text", "text": "look"},
            {"type": "image_url", "image_url": {"url": format!("data:image/png;base64,{PNG_1X1}")}}]},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "a.txt"}
    ]});
    llm.clear_requests();
    let mut s = TcpStream::connect(&addr).unwrap();
    http(&mut s, "POST", "/z/v1/chat/completions", &rich.to_string());
    let r = &llm.requests()[0];
    assert_eq!(
        (r.route.as_str(), r.model.as_str(), r.tools),
        ("z", "rich", 2)
    );
    assert_eq!(r.reasoning_effort.as_deref(), Some("high"));
    assert_eq!(r.roles(), ["system", "user", "assistant", "tool"]);
    assert_eq!(r.messages[1].text, "look\n<image>");
    assert_eq!(r.messages[2].text, "<tool_calls:ls>");
    assert_eq!(r.messages[3].text, "a.txt");
    assert_eq!(
        r.images,
        [Image {
            mime: "image/png".into(),
            base64: PNG_1X1.into(),
            bytes: 70
        }]
    );
    assert_eq!(r.body, rich);

    // Connection refused on closed_port().
    let e = TcpStream::connect(("127.0.0.1", closed_port())).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::ConnectionRefused);
    assert_eq!(closed_port(), closed_port());

    // Hang and stall end promptly when the server is dropped.
    llm.clear_requests();
    llm.script("a", "hang", vec![Behaviour::Hang]);
    llm.script("a", "stall", vec![Behaviour::StallMidBody]);
    let mut h = TcpStream::connect(&addr).unwrap();
    write!(
        h,
        "POST /a/v1/chat/completions HTTP/1.1\r\nContent-Length: {}\r\n\r\n{}",
        chat("hang").len(),
        chat("hang")
    )
    .unwrap();
    let mut st = TcpStream::connect(&addr).unwrap();
    write!(
        st,
        "POST /a/v1/chat/completions HTTP/1.1\r\nContent-Length: {}\r\n\r\n{}",
        chat("stall").len(),
        chat("stall")
    )
    .unwrap();
    let mut idle = TcpStream::connect(&addr).unwrap(); // keep-alive connection with no request
    let got = llm.wait_requests(2, Duration::from_secs(5));
    assert!(got.iter().any(|r| r.model == "hang") && got.iter().any(|r| r.model == "stall"));
    // Mid-stall for sure: the start of the body has arrived (the hang is in its wait as soon as
    // its request is recorded).
    st.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut head = Vec::new();
    while !String::from_utf8_lossy(&head).contains("Hello ") {
        let mut buf = [0u8; 4096];
        let n = st.read(&mut buf).expect("the stalled body starts");
        assert!(
            n > 0,
            "EOF before the stall: {}",
            String::from_utf8_lossy(&head)
        );
        head.extend_from_slice(&buf[..n]);
    }
    let t = Instant::now();
    drop(llm);
    assert!(
        t.elapsed() < Duration::from_secs(1),
        "drop took {:?}",
        t.elapsed()
    );
    assert!(is_eof(&mut h));
    let _ = idle.shutdown(Shutdown::Write);
    assert!(is_eof(&mut idle));
    let mut rest = head;
    st.read_to_end(&mut rest).unwrap();
    let rest = String::from_utf8_lossy(&rest);
    assert!(
        rest.starts_with("HTTP/1.1 200 ") && rest.contains("Hello ") && !rest.contains("[DONE]"),
        "{rest}"
    );
}

#[test]
fn models_json_format() {
    let llm = FakeLlm::start();
    let v = models_json(
        &llm,
        &[
            ProviderSpec::new(
                "fake-a",
                "a",
                vec![
                    ModelSpec::vision("alpha-1"),
                    ModelSpec::text("r1").reasoning().context(8192),
                ],
            ),
            ProviderSpec::refused("dead", vec![ModelSpec::text("d1")]),
        ],
    );
    let a = &v["providers"]["fake-a"];
    assert_eq!(a["baseUrl"], llm.base_url("a"));
    assert_eq!(a["api"], "openai-completions");
    assert_eq!(a["apiKey"], "x");
    assert_eq!(
        a["models"][0],
        json!({"id": "alpha-1", "name": "alpha-1", "contextWindow": 128000, "maxTokens": 4096, "input": ["text", "image"], "reasoning": false})
    );
    assert_eq!(a["models"][1]["reasoning"], true);
    assert_eq!(a["models"][1]["input"], json!(["text"]));
    assert_eq!(a["models"][1]["maxTokens"], 4096);
    assert_eq!(
        v["providers"]["dead"]["baseUrl"],
        format!("http://127.0.0.1:{}/v1", closed_port())
    );
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
mod fake_llm_pace;
mod fake_llm_window;
mod fake_pi_scenarios;
mod output_helpers;
mod redis_server;
mod resp_proxy;
