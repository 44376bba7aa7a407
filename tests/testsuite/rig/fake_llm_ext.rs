//! The fake LLM's keys, usage, costs, system-prompt/tool accessors, tool-call scripts and
//! delays: at the HTTP level, in `models.json`, and driven by real Pi (both versions).

use super::*;

/// A literal key with a `$`: Pi would interpolate `$literal` if the writer did not escape it.
const LITERAL_KEY: &str = "sk-rig-$literal-0123456789abcdef";
/// The key passed through the environment (`"apiKey": "$RIG_FAKE_E_KEY"`).
const ENV_KEY: &str = "sk-rig-from-env-fedcba9876543210";

/// POST `body` to `path` with extra header lines; returns (head, decoded body, finished).
fn post(addr: &str, path: &str, headers: &[&str], body: &str) -> (String, String, bool) {
    let mut s = TcpStream::connect(addr).unwrap();
    let mut head = format!(
        "POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n",
        body.len()
    );
    for h in headers {
        head.push_str(h);
        head.push_str("\r\n");
    }
    head.push_str("\r\n");
    s.write_all(head.as_bytes()).unwrap();
    s.write_all(body.as_bytes()).unwrap();
    read_response(&mut s)
}

/// The SSE `data:` payloads of a decoded stream body (without `[DONE]`).
fn sse_objects(body: &str) -> Vec<Value> {
    body.split("\n\n")
        .filter_map(|e| e.strip_prefix("data: "))
        .filter(|d| *d != "[DONE]")
        .map(|d| serde_json::from_str(d).unwrap())
        .collect()
}

#[test]
fn echo_key_usage_and_delay_at_http_level() {
    let llm = FakeLlm::start();
    let addr = format!("127.0.0.1:{}", llm.port());

    // EchoKey401: OpenAI's wording with the bearer token quoted; Connection: close.
    llm.script("a", "k", vec![Behaviour::EchoKey401]);
    let (head, body, _) = post(
        &addr,
        "/a/v1/chat/completions",
        &["Authorization: Bearer sk-live-abc123"],
        &chat("k"),
    );
    assert!(head.starts_with("HTTP/1.1 401 "), "{head}");
    assert!(head.contains("Connection: close"), "{head}");
    assert_eq!(
        body,
        r#"{"error":{"message":"Incorrect API key provided: sk-live-abc123. You can find your API key at https://platform.openai.com/account/api-keys.","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}"#
    );
    // No `Bearer ` prefix: the whole header value; no header at all: an empty key.
    let (_, body, _) = post(
        &addr,
        "/a/v1/chat/completions",
        &["Authorization: Token t-1"],
        &chat("k"),
    );
    assert!(body.contains("provided: Token t-1. You can"), "{body}");
    let (_, body, _) = post(&addr, "/a/v1/chat/completions", &[], &chat("k"));
    assert!(body.contains("provided: . You can"), "{body}");

    llm.script("a", "zh", vec![Behaviour::EchoKey401Chinese]);
    let (head, body, _) = post(
        &addr,
        "/a/v1/chat/completions",
        &["Authorization: Bearer sk-zh-42"],
        &chat("zh"),
    );
    assert!(head.starts_with("HTTP/1.1 401 "), "{head}");
    assert_eq!(
        body,
        r#"{"error":{"code":"1000","message":"身份验证失败：API Key 无效：sk-zh-42"}}"#
    );

    // Scripted usage, recorded per request; none for answers without a usage chunk.
    llm.clear_requests();
    llm.script(
        "a",
        "u",
        vec![
            Behaviour::text_with_usage("Counted words here.", 1234, 567),
            Behaviour::Ok,
            Behaviour::Status500,
            Behaviour::Drop,
            Behaviour::tool("ls", json!({})),
        ],
    );
    let (_, body, done) = post(&addr, "/a/v1/chat/completions", &[], &chat("u"));
    assert!(done);
    let objs = sse_objects(&body);
    let text: String = objs
        .iter()
        .filter_map(|v| v["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(text, "Counted words here.");
    let usage: Vec<&Value> = objs.iter().filter_map(|v| v.get("usage")).collect();
    assert_eq!(
        usage,
        [&json!({"prompt_tokens": 1234, "completion_tokens": 567, "total_tokens": 1801})]
    );
    for _ in 0..4 {
        post(&addr, "/a/v1/chat/completions", &[], &chat("u"));
    }
    let sent: Vec<Option<(u64, u64)>> = llm.requests().iter().map(|r| r.usage_sent).collect();
    assert_eq!(
        sent,
        [
            Some((1234, 567)),
            Some(TEXT_USAGE),
            None,
            None,
            Some(TOOL_USAGE)
        ]
    );
    let expected: Vec<Option<(u64, u64)>> =
        llm.requests().iter().map(|r| r.behaviour.usage()).collect();
    assert_eq!(sent, expected, "Behaviour::usage() predicts usage_sent");
    // Sequence numbers keep counting across clear_requests.
    let seqs: Vec<u64> = llm.requests().iter().map(|r| r.seq).collect();
    assert_eq!(seqs, [5, 6, 7, 8, 9]);

    // Delayed: not a byte before the delay, then the inner answer in full.
    llm.script(
        "a",
        "late",
        vec![Behaviour::text("Late answer.").delayed(600)],
    );
    let t = Instant::now();
    let mut s = send_chat(&addr, "late");
    s.set_read_timeout(Some(Duration::from_millis(400)))
        .unwrap();
    let early = s.read(&mut [0u8; 64]);
    assert!(
        matches!(&early, Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut)),
        "bytes before the delay ended: {early:?}"
    );
    let (head, body, done) = read_response(&mut s);
    let took = t.elapsed();
    assert!(head.starts_with("HTTP/1.1 200 ") && done, "{head}");
    assert!(
        took >= Duration::from_millis(600) && took < Duration::from_secs(3),
        "{took:?}"
    );
    let text: String = sse_objects(&body)
        .iter()
        .filter_map(|v| v["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(text, "Late answer.");
    let r = llm.requests_to("a", "late").pop().unwrap();
    assert_eq!(
        r.behaviour,
        Behaviour::Delayed(600, Box::new(Behaviour::text("Late answer.")))
    );
    assert_eq!(r.usage_sent, Some(TEXT_USAGE));

    // A delayed error is still an error, after the delay.
    llm.script("a", "late-err", vec![Behaviour::Status503.delayed(300)]);
    let t = Instant::now();
    let (head, _, _) = post(&addr, "/a/v1/chat/completions", &[], &chat("late-err"));
    assert!(head.starts_with("HTTP/1.1 503 "), "{head}");
    assert!(
        t.elapsed() >= Duration::from_millis(300),
        "{:?}",
        t.elapsed()
    );

    // A long delay ends promptly when the server is dropped.
    llm.script("a", "forever", vec![Behaviour::Ok.delayed(60_000)]);
    let mut h = send_chat(&addr, "forever");
    let n = llm.requests().len();
    llm.wait_requests(n + 1, Duration::from_secs(5));
    let t = Instant::now();
    drop(llm);
    assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
    assert!(is_eof(&mut h));
}

#[test]
fn request_accessors() {
    let llm = FakeLlm::start();
    let addr = format!("127.0.0.1:{}", llm.port());
    let body = json!({
    "model": "m", "stream": true,
    "tools": [
        {"type": "function", "function": {"name": "read"}},
        {"type": "function", "function": {"name": "bash"}},
        {"name": "flat"},
        {"type": "function"}
    ],
    "messages": [
        {"role": "user", "content": "first"},
        {"role": "developer", "content": [{"type": "text", "text": "You are Pi."}]},
        {"role": "system", "content": "second system"}
    ]});
    post(
        &addr,
        "/a/v1/chat/completions",
        &["Authorization: Bearer sk-acc"],
        &body.to_string(),
    );
    post(&addr, "/a/v1/chat/completions", &[], &chat("plain"));
    let reqs = llm.requests();
    assert_eq!(reqs[0].system_text(), Some("You are Pi."));
    assert_eq!(reqs[0].tool_names(), ["read", "bash", "flat"]);
    assert_eq!(reqs[0].tools, 4);
    assert_eq!(reqs[0].bearer(), Some("sk-acc"));
    assert_eq!(reqs[1].system_text(), None);
    assert!(reqs[1].tool_names().is_empty());
    assert_eq!(reqs[1].bearer(), None);
    assert_eq!(
        Behaviour::bash("touch /tmp/x/marker"),
        Behaviour::ToolCall {
            name: "bash".into(),
            args: json!({"command": "touch /tmp/x/marker"})
        }
    );
}

#[test]
fn models_json_keys_costs_and_explicit_urls() {
    let llm = FakeLlm::start();
    let bh = BlackHole::start();
    let v = models_json(
        &llm,
        &[
            ProviderSpec::new("plain", "a", vec![ModelSpec::text("m")]),
            ProviderSpec::new("lit", "a", vec![ModelSpec::text("m")]).api_key("sk-$x$$y"),
            ProviderSpec::new("bang", "a", vec![ModelSpec::text("m")]).api_key("!rm -rf /"),
            ProviderSpec::new("env", "a", vec![ModelSpec::text("m")]).api_key_env("MY_KEY"),
            ProviderSpec::new(
                "priced",
                "a",
                vec![
                    ModelSpec::text("cheap").cost(0.5, 1.25),
                    ModelSpec::text("free"),
                ],
            ),
            ProviderSpec::at("hole", &bh.base_url(), vec![ModelSpec::text("m")]),
            ProviderSpec::refused("dead", vec![ModelSpec::text("m")]).api_key("k"),
        ],
    );
    let p = &v["providers"];
    assert_eq!(p["plain"]["apiKey"], "x");
    assert_eq!(p["lit"]["apiKey"], "sk-$$x$$$$y");
    assert_eq!(p["bang"]["apiKey"], "$!rm -rf /");
    assert_eq!(p["env"]["apiKey"], "$MY_KEY");
    assert_eq!(p["dead"]["apiKey"], "k");
    assert_eq!(
        p["priced"]["models"][0]["cost"],
        json!({"input": 0.5, "output": 1.25, "cacheRead": 0, "cacheWrite": 0})
    );
    assert!(p["priced"]["models"][1].get("cost").is_none());
    assert_eq!(
        p["hole"]["baseUrl"],
        format!("http://127.0.0.1:{}/v1", bh.port())
    );
    assert_eq!(
        p["dead"]["baseUrl"],
        format!("http://127.0.0.1:{}/v1", closed_port())
    );
    let r = std::panic::catch_unwind(|| {
        ProviderSpec::at("far", "http://10.0.0.1:80/v1", vec![]);
    });
    assert!(r.is_err(), "a non-loopback base URL must be refused");
}

/// Everything the new fake-LLM knobs promise, through real Pi in one session (tools enabled):
/// literal and environment keys echoed in 401s, scripted usage and cost, the system prompt and
/// tool names, a real `bash` tool call, a delayed answer, the system role of reasoning models.
fn keys_usage_tools_through_pi(version: &str) {
    let mut env = TestEnv::new(
        version,
        &[
            ProviderSpec::new(
                "fake-a",
                "a",
                vec![
                    ModelSpec::text("alpha-1"),
                    ModelSpec::text("priced").cost(3.0, 15.0),
                    ModelSpec::text("r1").reasoning(),
                ],
            )
            .api_key(LITERAL_KEY),
            ProviderSpec::new("fake-e", "e", vec![ModelSpec::text("env-1")])
                .api_key_env("RIG_FAKE_E_KEY"),
        ],
    );
    env.env("RIG_FAKE_E_KEY", ENV_KEY);
    env.write_settings(&json!({"retry": {"enabled": false}}));
    let llm = &env.llm;
    let mut rpc = Rpc::spawn_with(&env, &["--provider", "fake-a", "--model", "alpha-1"]);
    let st = rpc.request(json!({"id": "s", "type": "get_state"}));
    assert_eq!(st["data"]["model"]["id"], "alpha-1", "{st}");

    // Keys: the literal one (with its `$` intact) and the one from the environment.
    llm.script("a", "alpha-1", vec![Behaviour::EchoKey401]);
    let turn = rpc.prompt("k1", "Who am I?", None);
    check_turn(
        &rpc,
        "echo-key",
        &turn,
        &Expect::Error(
            "401: ",
            "Incorrect API key provided: sk-rig-$literal-0123456789abcdef.",
        ),
    );
    assert_eq!(
        llm.requests_to("a", "alpha-1")[0].bearer(),
        Some(LITERAL_KEY)
    );
    llm.script("a", "alpha-1", vec![Behaviour::EchoKey401Chinese]);
    let turn = rpc.prompt("k2", "Who am I?", None);
    check_turn(
        &rpc,
        "echo-key-zh",
        &turn,
        &Expect::Error(
            "401: ",
            "身份验证失败：API Key 无效：sk-rig-$literal-0123456789abcdef",
        ),
    );
    let r = rpc.request(
        json!({"id": "m1", "type": "set_model", "provider": "fake-e", "modelId": "env-1"}),
    );
    assert_eq!(r["success"], true, "{r}");
    llm.script("e", "env-1", vec![Behaviour::EchoKey401]);
    let turn = rpc.prompt("k3", "Who am I?", None);
    check_turn(
        &rpc,
        "env-key",
        &turn,
        &Expect::Error(
            "401: ",
            "Incorrect API key provided: sk-rig-from-env-fedcba9876543210.",
        ),
    );
    assert_eq!(llm.requests_to("e", "env-1")[0].bearer(), Some(ENV_KEY));

    // Usage and cost: what Pi reports equals what the server sent, priced per million tokens.
    let r = rpc.request(
        json!({"id": "m2", "type": "set_model", "provider": "fake-a", "modelId": "priced"}),
    );
    assert_eq!(r["success"], true, "{r}");
    llm.script(
        "a",
        "priced",
        vec![Behaviour::text_with_usage("Priced answer.", 1234, 567)],
    );
    let turn = rpc.prompt("u", "How much?", None);
    check_turn(&rpc, "usage", &turn, &Expect::Stop("Priced answer."));
    let usage = &turn.last_assistant()["usage"];
    assert_eq!(
        (&usage["input"], &usage["output"], &usage["totalTokens"]),
        (&json!(1234), &json!(567), &json!(1801)),
        "{usage}"
    );
    let cost = usage["cost"]["total"].as_f64().unwrap();
    let want = 1234.0 * 3.0 / 1e6 + 567.0 * 15.0 / 1e6;
    assert!((cost - want).abs() < 1e-9, "cost {cost} != {want}: {usage}");
    let priced = &llm.requests_to("a", "priced")[0];
    assert_eq!(priced.usage_sent, Some((1234, 567)));

    // System prompt and the default tools.
    let sys = priced.system_text().expect("a system prompt");
    assert!(
        sys.contains(&env.cwd.display().to_string()),
        "Pi's system prompt names the cwd: {sys}"
    );
    assert_eq!(priced.roles()[0], "system");
    assert_eq!(priced.tool_names(), ["read", "bash", "edit", "write"]);

    // A real bash tool call, then the final text.
    let marker = env.dir.path().join("rig-marker");
    let r = rpc.request(
        json!({"id": "m3", "type": "set_model", "provider": "fake-a", "modelId": "alpha-1"}),
    );
    assert_eq!(r["success"], true, "{r}");
    llm.clear_requests();
    llm.script(
        "a",
        "alpha-1",
        vec![
            Behaviour::bash(format!("touch '{}'", marker.display())),
            Behaviour::text("Marker made."),
        ],
    );
    let turn = rpc.prompt("t", "Make the marker.", None);
    check_turn(&rpc, "bash", &turn, &Expect::Stop("Marker made."));
    assert!(marker.is_file(), "the bash tool did not run");
    let reqs = llm.requests();
    assert_eq!(reqs.len(), 2, "{reqs:#?}");
    assert_eq!(
        reqs[1].roles()[reqs[1].messages.len() - 2..],
        ["assistant", "tool"],
        "{:#?}",
        reqs[1]
    );
    assert!(
        reqs[1].messages[reqs[1].messages.len() - 2]
            .text
            .ends_with("<tool_calls:bash>"),
        "{:#?}",
        reqs[1]
    );
    assert!(
        turn.events
            .iter()
            .any(|e| e["type"] == "tool_execution_end" && e["toolName"] == "bash"),
        "no tool_execution_end for bash: {:#?}",
        turn.events
    );

    // A delayed answer takes at least its delay.
    llm.script(
        "a",
        "alpha-1",
        vec![Behaviour::text("Worth the wait.").delayed(800)],
    );
    let turn = rpc.prompt("d", "Take your time.", None);
    check_turn(&rpc, "delayed", &turn, &Expect::Stop("Worth the wait."));
    assert!(
        turn.elapsed >= Duration::from_millis(800),
        "{:?}",
        turn.elapsed
    );

    // Reasoning models: 0.84.4 sends the system prompt as `developer`, 1.6.0 as `system`
    // (observed); system_text() finds it either way.
    let r = rpc
        .request(json!({"id": "m4", "type": "set_model", "provider": "fake-a", "modelId": "r1"}));
    assert_eq!(r["success"], true, "{r}");
    let turn = rpc.prompt("r", "Think.", None);
    check_turn(&rpc, "developer", &turn, &Expect::Stop(DEFAULT_TEXT));
    let r1 = &llm.requests_to("a", "r1")[0];
    let role = if version == PI_MIN {
        "developer"
    } else {
        "system"
    };
    assert_eq!(r1.roles()[0], role, "{r1:#?}");
    assert_eq!(r1.system_text(), Some(sys));

    let status = rpc.close();
    assert!(status.success(), "{status}");
    env.assert_no_orphans();
}

#[test]
fn pi_0_84_4_keys_usage_tools() {
    keys_usage_tools_through_pi(PI_MIN);
}

#[test]
fn pi_1_6_0_keys_usage_tools() {
    keys_usage_tools_through_pi(PI_NEWEST);
}

/// `ByPrompt`: each request gets the answer its last user message asks for, whatever order
/// requests come in; the recorded behaviour is the one chosen (and nests under `Delayed`).
#[test]
fn answers_chosen_by_the_prompt() {
    let llm = FakeLlm::start();
    let addr = format!("127.0.0.1:{}", llm.port());
    llm.script(
        "a",
        "k",
        vec![Behaviour::by_prompt(
            [
                ("job-one", Behaviour::text("{\"n\": 1}")),
                ("job-two", Behaviour::text("two").delayed(10)),
            ],
            Behaviour::Status500,
        )],
    );
    let ask = |text: &str| {
        let body = json!({"model": "k", "stream": true,
            "messages": [{"role": "user", "content": "first job-one"},
                         {"role": "assistant", "content": "x"},
                         {"role": "user", "content": text}]});
        post(&addr, "/a/v1/chat/completions", &[], &body.to_string())
    };
    let content = |body: &str| -> String {
        sse_objects(body)
            .iter()
            .filter_map(|o| {
                o.pointer("/choices/0/delta/content")
                    .and_then(Value::as_str)
            })
            .collect()
    };
    // The last user message decides, not an earlier one.
    let (_, body, _) = ask("now job-two please");
    assert_eq!(content(&body), "two");
    let (_, body, _) = ask("again job-one");
    assert_eq!(content(&body), "{\"n\": 1}");
    let (head, _, _) = ask("something else");
    assert!(head.starts_with("HTTP/1.1 500 "), "{head}");
    let chosen: Vec<Behaviour> = llm.requests().into_iter().map(|r| r.behaviour).collect();
    assert_eq!(
        chosen,
        [
            Behaviour::text("two").delayed(10),
            Behaviour::text("{\"n\": 1}"),
            Behaviour::Status500
        ]
    );
}
