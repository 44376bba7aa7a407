//! The fake LLM at the HTTP level (no Pi): raw requests, chunked answers, `models.json`.

use super::*;

/// A streaming chat request body for `model`, one user message.
pub(super) fn chat(model: &str) -> String {
    json!({"model": model, "stream": true, "messages": [{"role": "user", "content": "hi"}]})
        .to_string()
}

/// Connects to `addr` and sends a chat request for `model` on route `a`, reading nothing: for
/// tests that watch what the connection does next.
pub(super) fn send_chat(addr: &str, model: &str) -> TcpStream {
    let mut s = TcpStream::connect(addr).unwrap();
    write!(
        s,
        "POST /a/v1/chat/completions HTTP/1.1\r\nContent-Length: {}\r\n\r\n{}",
        chat(model).len(),
        chat(model)
    )
    .unwrap();
    s
}

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

pub(super) fn read_response(s: &mut TcpStream) -> (String, String, bool) {
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

pub(super) fn is_eof(s: &mut TcpStream) -> bool {
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    matches!(s.read(&mut [0u8; 16]), Ok(0))
}

#[test]
fn fake_llm_http_level() {
    let llm = FakeLlm::start();
    let addr = format!("127.0.0.1:{}", llm.port());
    assert_eq!(llm.base_url("a"), format!("http://{addr}/a/v1"));

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
    let mut s = send_chat(&addr, "reset");
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
    let mut h = send_chat(&addr, "hang");
    let mut st = send_chat(&addr, "stall");
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
