//! The fake LLM's pace faults (issue 31): a first token after N ms on every request, answers of
//! many tokens at a steady pace, a stall after K tokens, and faults on every Nth request — at
//! the HTTP level, and through real Pi (both versions) to pin what Pi shows of them: nothing
//! from the assistant before the first token.

use super::*;

/// POSTs a chat request; returns when the head arrived, the content deltas with when each
/// arrived (from sending), and whether the body finished.
fn timed_chat(addr: &str, model: &str) -> (Duration, Vec<(Duration, String)>, bool) {
    let mut s = TcpStream::connect(addr).unwrap();
    let body = chat(model);
    let t0 = Instant::now();
    write!(
        s,
        "POST /a/v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut buf = Vec::new();
    let mut tmp = [0u8; 8192];
    let mut head_at = None;
    let mut deltas = Vec::new();
    let mut seen = 0;
    loop {
        let n = match s.read(&mut tmp) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        buf.extend_from_slice(&tmp[..n]);
        let text = String::from_utf8_lossy(&buf).into_owned();
        if head_at.is_none() && text.contains("\r\n\r\n") {
            head_at = Some(t0.elapsed());
        }
        // Every complete `data:` line not seen yet.
        let lines: Vec<&str> = text
            .split('\n')
            .filter(|l| l.starts_with("data: {"))
            .collect();
        for l in lines.iter().skip(seen) {
            if let Ok(v) =
                serde_json::from_str::<Value>(l.trim_end_matches('\r').trim_start_matches("data: "))
            {
                if let Some(c) = v["choices"][0]["delta"]["content"]
                    .as_str()
                    .filter(|c| !c.is_empty())
                {
                    deltas.push((t0.elapsed(), c.to_string()));
                }
                seen += 1;
            }
        }
        if text.contains("\r\n0\r\n\r\n") {
            return (head_at.unwrap_or_default(), deltas, true);
        }
    }
    (head_at.unwrap_or_default(), deltas, false)
}

#[test]
fn paced_answers_stalls_and_every_nth_faults_at_http_level() {
    let llm = FakeLlm::start();
    let addr = format!("127.0.0.1:{}", llm.port());
    llm.set_hang_limit(Duration::from_millis(400));

    // Headers at once, the first token 300 ms later, then 4 tokens 100 ms apart.
    llm.script(
        "a",
        "p",
        vec![Behaviour::Paced {
            first_ms: 300,
            tokens: 4,
            gap_ms: 100,
        }],
    );
    let (head, deltas, done) = timed_chat(&addr, "p");
    assert!(done);
    assert!(head < Duration::from_millis(250), "head at {head:?}");
    let text: String = deltas.iter().map(|(_, d)| d.as_str()).collect();
    assert_eq!(text, DEFAULT_TEXT);
    assert_eq!(deltas.len(), 4, "{deltas:?}");
    assert!(deltas[0].0 >= Duration::from_millis(300), "{deltas:?}");
    // The last token comes three gaps after the first. Measured from the request, not from the
    // first token: a late read of the first token shortens the gap seen after it.
    assert!(deltas[3].0 >= Duration::from_millis(600), "{deltas:?}");

    // first_token_after: the same with the rest at once.
    llm.script("a", "f", vec![Behaviour::first_token_after(250)]);
    let (head, deltas, done) = timed_chat(&addr, "f");
    assert!(done && head < Duration::from_millis(200));
    assert!(deltas[0].0 >= Duration::from_millis(250), "{deltas:?}");

    // A stall after 2 of 5 tokens: silence to the hang limit, then the body never finishes.
    llm.script(
        "a",
        "s",
        vec![Behaviour::StallAfter {
            first_ms: 0,
            tokens: 5,
            gap_ms: 0,
            after: 2,
        }],
    );
    let t0 = Instant::now();
    let (_, deltas, done) = timed_chat(&addr, "s");
    assert!(!done);
    assert_eq!(deltas.len(), 2, "{deltas:?}");
    assert!(t0.elapsed() >= Duration::from_millis(400));

    // Silence on every third request; the whole list repeats.
    llm.script_every("a", "n", 3, Behaviour::Hang, Behaviour::Ok);
    let mut got = Vec::new();
    for _ in 0..7 {
        let (_, deltas, done) = timed_chat(&addr, "n");
        got.push(done && !deltas.is_empty());
    }
    assert_eq!(got, [true, true, false, true, true, false, true]);
    let behaviours: Vec<Behaviour> = llm
        .requests_to("a", "n")
        .into_iter()
        .map(|r| r.behaviour)
        .collect();
    assert_eq!(behaviours[2], Behaviour::Hang);
    assert_eq!(behaviours[5], Behaviour::Hang);
    assert_eq!(behaviours[6], Behaviour::Ok);
}

/// Through real Pi: with the headers at once and the first token 1.5 s later, Pi starts the
/// assistant message (`message_start`, `stopReason: pending`) when the headers arrive and sends
/// its first `message_update` with the first token. So the runner's first-response watchdog
/// and the pace it learns wait for a `message_update` (a token, thinking or a tool call), not
/// the assistant's `message_start`: a provider that answers with headers and then nothing is
/// as silent as one that sends nothing.
fn pi_starts_the_message_at_the_headers_and_updates_it_at_the_first_token(version: &str) {
    let env = TestEnv::new(
        version,
        &[ProviderSpec::new(
            "fake-a",
            "a",
            vec![ModelSpec::text("alpha-1")],
        )],
    );
    env.write_settings(&json!({"retry": {"enabled": false}}));
    env.llm
        .script("a", "alpha-1", vec![Behaviour::first_token_after(1500)]);
    let mut rpc = Rpc::spawn(&env, "fake-a", "alpha-1");
    rpc.request(json!({"id": "s", "type": "get_state"}));
    let start = Instant::now();
    rpc.send(&json!({"id": "p", "type": "prompt", "message": "hi"}));
    let deadline = start + Duration::from_secs(30);
    let (mut started, mut updated) = (None, None);
    loop {
        let v = rpc.next(deadline);
        if v["type"] == "message_start" && v["message"]["role"] == "assistant" {
            started.get_or_insert(start.elapsed());
        }
        if v["type"] == "message_update" {
            updated.get_or_insert(start.elapsed());
        }
        if v["type"] == "agent_settled" {
            break;
        }
    }
    let (started, updated) = (started.expect("message_start"), updated.expect("update"));
    assert!(
        started < Duration::from_millis(1000),
        "message_start at {started:?}"
    );
    assert!(
        updated >= Duration::from_millis(1400),
        "first update at {updated:?}"
    );
    let _ = rpc.close();
}

/// Through real Pi: a reasoning model's `reasoning_content` reaches the runner as a stream of
/// `message_update`s (thinking deltas) before the text, so thinking is progress.
fn pi_streams_reasoning_as_updates(version: &str) {
    let env = TestEnv::new(
        version,
        &[ProviderSpec::new(
            "fake-a",
            "a",
            vec![ModelSpec::text("r1").reasoning()],
        )],
    );
    env.write_settings(&json!({"retry": {"enabled": false}}));
    env.llm.script(
        "a",
        "r1",
        vec![Behaviour::Thinking {
            think_ms: 1200,
            gap_ms: 200,
        }],
    );
    let mut rpc = Rpc::spawn_with(
        &env,
        &[
            "--provider",
            "fake-a",
            "--model",
            "r1",
            "--thinking",
            "high",
        ],
    );
    rpc.request(json!({"id": "s", "type": "get_state"}));
    let start = Instant::now();
    rpc.send(&json!({"id": "p", "type": "prompt", "message": "hi"}));
    let deadline = start + Duration::from_secs(30);
    let mut thinking = Vec::new();
    let mut text_at = None;
    loop {
        let v = rpc.next(deadline);
        let kind = v["assistantMessageEvent"]["type"].as_str().unwrap_or("");
        if v["type"] == "message_update" && kind == "thinking_delta" {
            thinking.push(start.elapsed());
        }
        if v["type"] == "message_update" && kind == "text_delta" {
            text_at.get_or_insert(start.elapsed());
        }
        if v["type"] == "agent_settled" {
            break;
        }
    }
    assert!(thinking.len() >= 5, "thinking deltas at {thinking:?}");
    let gaps: Vec<Duration> = thinking.windows(2).map(|w| w[1] - w[0]).collect();
    assert!(
        gaps.iter().all(|g| *g < Duration::from_millis(600)),
        "{gaps:?}"
    );
    assert!(text_at.expect("text") >= Duration::from_millis(1100));
    let _ = rpc.close();
}

both_versions!(
    pi_starts_the_message_at_the_headers_and_updates_it_at_the_first_token,
    pi_streams_reasoning_as_updates
);
