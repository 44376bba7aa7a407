//! The fake LLM's concurrency caps, real vendors' quota-window and capacity bodies (with their
//! reset times), key-echo wordings and batch latency: at the HTTP level, and what real Pi (both
//! versions) makes of the GLM capacity and quota bodies.

use std::sync::Barrier;

use super::*;

both_versions!(capacity_and_quota_errors_through_pi);

/// 2026-12-01T19:36:54Z — 2026-12-02 03:36:54 in China Standard Time.
const T: u64 = 1_796_153_814_000;

/// POST a chat request for `model` to `route` of the fake server on `port`, on a fresh
/// connection, with an optional bearer key; returns (status, head, decoded body).
pub(super) fn chat_post(
    port: u16,
    route: &str,
    model: &str,
    key: Option<&str>,
) -> (u16, String, String) {
    let body = json!({"model": model, "stream": true,
                      "messages": [{"role": "user", "content": "hi"}]})
    .to_string();
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect to the fake LLM");
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let auth = key.map_or(String::new(), |k| format!("Authorization: Bearer {k}\r\n"));
    write!(
        s,
        "POST /{route}/v1/chat/completions HTTP/1.1\r\nHost: x\r\n{auth}Content-Type: \
         application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let (head, body, done) = read_response(&mut s);
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status in {head:?}"));
    assert!(done, "unfinished answer: {head}\n{body}");
    (status, head, body)
}

/// The text an SSE answer streamed.
fn streamed_text(body: &str) -> String {
    body.split("\n\n")
        .filter_map(|e| e.strip_prefix("data: "))
        .filter(|d| *d != "[DONE]")
        .map(|d| serde_json::from_str::<Value>(d).expect("SSE data is JSON"))
        .filter_map(|v| {
            v["choices"][0]["delta"]["content"]
                .as_str()
                .map(String::from)
        })
        .collect()
}

/// `error.message` of a JSON error body.
pub(super) fn message_of(body: &str) -> String {
    let v: Value = serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"));
    v["error"]["message"]
        .as_str()
        .unwrap_or_else(|| panic!("no error.message in {body}"))
        .to_string()
}

/// `n` requests for `model` on `route` released together; (status, body, time) each.
fn concurrent(llm: &FakeLlm, route: &str, model: &str, n: usize) -> Vec<(u16, String, Duration)> {
    let start = Arc::new(Barrier::new(n));
    let handles: Vec<_> = (0..n)
        .map(|_| {
            let (start, port) = (start.clone(), llm.port());
            let (route, model) = (route.to_string(), model.to_string());
            std::thread::spawn(move || {
                start.wait();
                let t = Instant::now();
                let (status, _, body) = chat_post(port, &route, &model, None);
                (status, body, t.elapsed())
            })
        })
        .collect();
    handles
        .into_iter()
        .map(|h| h.join().expect("a client thread panicked"))
        .collect()
}

#[test]
fn concurrency_cap_rejects_at_once_with_a_vendor_body() {
    let llm = FakeLlm::start();
    let port = llm.port();
    llm.set_concurrency_cap("g", Some(2));
    llm.script("g", "*", vec![Behaviour::Ok.delayed(2000)]);
    llm.script("g", "fast", vec![Behaviour::Ok]);

    // Five at once: two are served (each holding its slot 2 s), three are rejected at once.
    let answers = concurrent(&llm, "g", "slow", 5);
    let rejected: Vec<_> = answers.iter().filter(|a| a.0 == 429).collect();
    let served: Vec<_> = answers.iter().filter(|a| a.0 == 200).collect();
    assert_eq!((rejected.len(), served.len()), (3, 2), "{answers:#?}");
    for (_, body, took) in &rejected {
        assert_eq!(body, &bodies::glm_1302());
        assert!(*took < Duration::from_secs(1), "a rejection took {took:?}");
    }
    for (_, body, took) in &served {
        assert_eq!(streamed_text(body), DEFAULT_TEXT);
        assert!(*took >= Duration::from_secs(2), "{took:?}");
    }
    assert_eq!(llm.max_in_flight("g"), 2);
    assert_eq!(llm.wait_in_flight("g", 0, Duration::from_secs(5)), 0);
    // Rejections are recorded and marked, with the body they got.
    assert_eq!(llm.rejections("g"), 3);
    let reqs = llm.requests_to("g", "slow");
    assert_eq!(reqs.len(), 5);
    assert_eq!(reqs.iter().filter(|r| r.rejected_for_capacity).count(), 3);
    for r in reqs.iter().filter(|r| r.rejected_for_capacity) {
        assert_eq!(r.behaviour, Behaviour::Status(429, bodies::glm_1302()));
    }
    // Once the in-flight ones finished, a new request is served.
    let (status, _, body) = chat_post(port, "g", "fast", None);
    assert_eq!((status, streamed_text(&body).as_str()), (200, DEFAULT_TEXT));
    assert_eq!(llm.rejections("g"), 3);
    // The server lets go of a slot just after the last byte is written: wait for that.
    assert_eq!(llm.wait_in_flight("g", 0, Duration::from_secs(5)), 0);
    llm.reset_max_in_flight("g");
    assert_eq!(llm.max_in_flight("g"), 0);
    // Uncapped routes are counted too.
    chat_post(port, "free", "m", None);
    assert_eq!(llm.wait_in_flight("free", 0, Duration::from_secs(5)), 0);
    assert_eq!(llm.max_in_flight("free"), 1);

    // Cap 0 rejects everything, with the route's own body; rejections consume no script entry;
    // lifting the cap serves again from the script's first entry.
    llm.set_concurrency_cap("z", Some(0));
    llm.set_capacity_body("z", 429, bodies::anthropic_rate_limit());
    llm.script("z", "m", vec![Behaviour::Status500, Behaviour::Ok]);
    for _ in 0..2 {
        let (status, _, body) = chat_post(port, "z", "m", None);
        assert_eq!((status, body), (429, bodies::anthropic_rate_limit()));
    }
    llm.set_concurrency_cap("z", None);
    assert_eq!(chat_post(port, "z", "m", None).0, 500);
    // As above: the slot goes back just after the last byte, which a busy machine can delay
    // past the client's next request; the maximum is about one request at a time.
    assert_eq!(llm.wait_in_flight("z", 0, Duration::from_secs(5)), 0);
    assert_eq!(chat_post(port, "z", "m", None).0, 200);
    assert_eq!((llm.rejections("z"), llm.max_in_flight("z")), (2, 1));
    // Any status works, and a cap on one route leaves the others alone.
    llm.set_concurrency_cap("z", Some(0));
    llm.set_capacity_body("z", 503, bodies::openai_rate_limit_requests());
    assert_eq!(chat_post(port, "z", "m", None).0, 503);
    assert_eq!(chat_post(port, "a", "m", None).0, 200);
}

#[test]
fn capacity_bodies_are_the_vendors_own() {
    let v =
        |b: String| -> Value { serde_json::from_str(&b).unwrap_or_else(|e| panic!("{e}: {b}")) };
    assert_eq!(
        bodies::glm_1302(),
        r#"{"error":{"code":"1302","message":"High concurrency usage of this API, please reduce concurrency."}}"#
    );
    let zh = v(bodies::glm_1302_chinese());
    assert_eq!(zh["error"]["code"], "1302");
    assert!(
        zh["error"]["message"]
            .as_str()
            .unwrap()
            .contains("并发数过高，请降低并发"),
        "{zh}"
    );
    assert_eq!(
        bodies::openai_rate_limit_requests(),
        r#"{"error":{"message":"Rate limit reached for requests","type":"requests","param":null,"code":"rate_limit_exceeded"}}"#
    );
    let an = bodies::anthropic_rate_limit();
    assert!(an.starts_with(r#"{"type":"error","error":{"type":"rate_limit_error","message":"#));
    assert_eq!(v(an)["error"]["type"], "rate_limit_error");
    assert_eq!(
        Behaviour::glm_1302(),
        Behaviour::Status(429, bodies::glm_1302())
    );
}

#[test]
fn delayed_answers_hold_their_slot_and_batches_run_side_by_side() {
    let llm = FakeLlm::start();
    let port = llm.port();
    // Eight ~1 s answers at once take ~1 s, not 8: each request has its own thread.
    llm.script("b", "*", vec![Behaviour::Ok.delayed(1000)]);
    let t = Instant::now();
    let answers = concurrent(&llm, "b", "m", 8);
    let wall = t.elapsed();
    for (status, body, took) in &answers {
        assert_eq!((*status, streamed_text(body).as_str()), (200, DEFAULT_TEXT));
        assert!(*took >= Duration::from_millis(1000), "{took:?}");
    }
    assert!(
        wall < Duration::from_millis(2500),
        "8 delayed answers took {wall:?}"
    );
    assert_eq!(llm.max_in_flight("b"), 8);
    assert_eq!(llm.wait_in_flight("b", 0, Duration::from_secs(5)), 0);

    // Cap 1: a Delayed(1000) answer holds the slot for its whole second. Probes sent while it
    // is held are rejected — including ones in its last 100 ms.
    llm.set_concurrency_cap("c", Some(1));
    llm.script("c", "held", vec![Behaviour::Ok.delayed(1000)]);
    llm.script("c", "probe", vec![Behaviour::Ok]);
    let t0 = Instant::now();
    let held = std::thread::spawn(move || {
        let (status, _, body) = chat_post(port, "c", "held", None);
        (status, streamed_text(&body), Instant::now())
    });
    assert_eq!(llm.wait_in_flight("c", 1, Duration::from_secs(5)), 1);
    // (sent, answered, status, in_flight seen just before) for each probe.
    let mut probes = Vec::new();
    while !held.is_finished() && t0.elapsed() < Duration::from_secs(10) {
        let seen = llm.in_flight("c");
        let sent = t0.elapsed();
        let (status, _, _) = chat_post(port, "c", "probe", None);
        probes.push((sent, t0.elapsed(), status, seen));
        std::thread::sleep(Duration::from_millis(25));
    }
    let (status, text, done) = held.join().unwrap();
    assert_eq!((status, text.as_str()), (200, DEFAULT_TEXT));
    assert!(done - t0 >= Duration::from_millis(1000), "{:?}", done - t0);
    // The hold ends no earlier than 1 s after the held request was sent: every probe answered
    // before then met a full slot.
    let during: Vec<_> = probes
        .iter()
        .filter(|p| p.1 < Duration::from_millis(1000))
        .collect();
    assert!(
        during.iter().all(|p| p.2 == 429 && p.3 == 1),
        "a probe got through during the hold: {probes:?}"
    );
    assert!(
        during.iter().any(|p| p.0 >= Duration::from_millis(900)),
        "no probe in the last 100 ms of the hold: {probes:?}"
    );
    assert_eq!(llm.wait_in_flight("c", 0, Duration::from_secs(5)), 0);
    assert_eq!(chat_post(port, "c", "probe", None).0, 200);
    assert_eq!(llm.max_in_flight("c"), 1);
    eprintln!(
        "rig[fake-llm] 8 x Delayed(1000) in {wall:?}; {} probes during a 1 s hold",
        during.len()
    );
}

#[test]
fn quota_bodies_state_their_reset_time() {
    // Civil-date arithmetic against a day-by-day count, both ways from 1970-01-01 (±~550 years).
    let days_in = |y: i64, m: u32| match m {
        2 if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    };
    let (mut y, mut m, mut d) = (1970i64, 1u32, 1u32);
    for day in 0..200_000i64 {
        assert_eq!(bodies::civil_from_days(day), (y, m, d), "day {day}");
        d += 1;
        if d > days_in(y, m) {
            d = 1;
            m += 1;
            if m > 12 {
                m = 1;
                y += 1;
            }
        }
    }
    let (mut y, mut m, mut d) = (1970i64, 1u32, 1u32);
    for day in (-200_000..=0i64).rev() {
        assert_eq!(bodies::civil_from_days(day), (y, m, d), "day {day}");
        d -= 1;
        if d == 0 {
            if m == 1 {
                m = 12;
                y -= 1;
            } else {
                m -= 1;
            }
            d = days_in(y, m);
        }
    }
    assert_eq!(bodies::civil_from_days(19_782), (2024, 2, 29));

    // The fixed instant in each form; CST rolls the date over; milliseconds are dropped.
    assert_eq!(bodies::format_cst(T), "2026-12-02 03:36:54");
    assert_eq!(bodies::format_iso_utc(T), "2026-12-01T19:36:54Z");
    assert_eq!(bodies::format_iso_cst(T), "2026-12-02T03:36:54+08:00");
    assert_eq!(bodies::format_cst(T + 999), "2026-12-02 03:36:54");
    assert_eq!(bodies::format_cst(1_798_732_800_000), "2027-01-01 00:00:00");
    assert_eq!(bodies::format_iso_utc(0), "1970-01-01T00:00:00Z");

    // Every body, exactly, and as a scripted 429 over HTTP.
    let cases = [
        (
            Behaviour::glm_1308(T),
            r#"{"error":{"code":"1308","message":"已达到 5 小时的使用上限。您的限额将在 2026-12-02 03:36:54 重置。"}}"#,
        ),
        (
            Behaviour::glm_1308_english(T),
            r#"{"error":{"code":"1308","message":"Usage limit reached for 5 hour. Your limit will reset at 2026-12-02 03:36:54"}}"#,
        ),
        (
            Behaviour::zai_1310(T),
            r#"{"error":{"code":"1310","message":"Weekly/Monthly Limit Exhausted. Your limit will reset at 2026-12-01T19:36:54Z"}}"#,
        ),
        (
            Behaviour::zai_1310_cst(T),
            r#"{"error":{"code":"1310","message":"Weekly/Monthly Limit Exhausted. Your limit will reset at 2026-12-02 03:36:54"}}"#,
        ),
        (
            Behaviour::minimax_2056(T),
            r#"{"type":"error","error":{"type":"rate_limit_error","message":"usage limit exceeded, 5-hour usage limit reached for Token Plan Plus (1500/1500 used), resets at 2026-12-02T03:36:54+08:00 (2056)"}}"#,
        ),
        (
            Behaviour::openai_try_again_in("20m30s"),
            r#"{"error":{"message":"Rate limit reached for gpt-4o-mini in organization org-fake on requests per min (RPM): Limit 3, Used 3, Requested 1. Please try again in 20m30s. Visit https://platform.openai.com/account/rate-limits to learn more.","type":"requests","param":null,"code":"rate_limit_exceeded"}}"#,
        ),
        (
            Behaviour::glm_1113(),
            r#"{"error":{"code":"1113","message":"余额不足或无可用资源包,请充值。"}}"#,
        ),
    ];
    let llm = FakeLlm::start();
    for (i, (b, want)) in cases.iter().enumerate() {
        assert_eq!(b, &Behaviour::Status(429, want.to_string()), "case {i}");
        let model = format!("q{i}");
        llm.script("q", &model, vec![b.clone()]);
        let (status, head, body) = chat_post(llm.port(), "q", &model, None);
        assert_eq!((status, body.as_str()), (429, *want), "case {i}");
        assert!(head.contains("Content-Type: application/json"), "{head}");
    }
}

#[test]
fn key_echo_wordings() {
    let llm = FakeLlm::start();
    let key = "sk-live/ab+c=d 12345678";
    let cases: Vec<(Behaviour, u16, String)> = vec![
        (
            Behaviour::echo_key_unauthorized(),
            401,
            format!("Unauthorized: {key}"),
        ),
        (
            Behaviour::echo_key_auth_failed(),
            401,
            format!("Authentication failed for key '{key}'"),
        ),
        (
            Behaviour::echo_key_revoked(),
            403,
            format!("Your key ({key}) has been revoked"),
        ),
        (
            Behaviour::echo_key_expired(),
            401,
            format!("token {key} expired"),
        ),
        (
            Behaviour::echo_key_in_query(),
            401,
            "API key not valid for request \
             https://gateway.invalid/v1/chat/completions?key=sk-live%2Fab%2Bc%3Dd%2012345678"
                .to_string(),
        ),
        (
            Behaviour::echo_key_split(),
            401,
            "Invalid API key: sk-live/ab+\nc=d 12345678".to_string(),
        ),
        (
            Behaviour::echo_key_prefix12(),
            401,
            "Incorrect API key provided: sk-live/ab+c****************".to_string(),
        ),
        (
            Behaviour::echo_key("{key} twice: {key}"),
            401,
            format!("{key} twice: {key}"),
        ),
    ];
    for (i, (b, status, want)) in cases.iter().enumerate() {
        let model = format!("k{i}");
        llm.script("k", &model, vec![b.clone()]);
        let (got_status, head, body) = chat_post(llm.port(), "k", &model, Some(key));
        assert_eq!(got_status, *status, "{b:?}: {head}");
        assert!(head.contains("Connection: close"), "{head}");
        assert_eq!(&message_of(&body), want, "{b:?}: {body}");
        assert_eq!(b.echo_message(key).as_deref(), Some(want.as_str()));
        let v: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(
            (&v["error"]["type"], &v["error"]["code"]),
            (&json!("invalid_request_error"), &json!("invalid_api_key")),
            "{body}"
        );
    }
    assert!(
        llm.requests()
            .iter()
            .all(|r| r.bearer() == Some(key) && !r.rejected_for_capacity)
    );
    // The transforms on their own: character boundaries, short keys, no key.
    assert_eq!(KeyEcho::SplitByNewline.apply("ключ🔑ab"), "клю\nч🔑ab");
    assert_eq!(KeyEcho::SplitByNewline.apply("k"), "\nk");
    assert_eq!(KeyEcho::SplitByNewline.apply(""), "\n");
    assert_eq!(KeyEcho::Prefix(12).apply("short"), "short");
    assert_eq!(KeyEcho::Prefix(3).apply("ключ"), "клю");
    assert_eq!(
        KeyEcho::PercentEncoded.apply("a-b_c.d~e/é"),
        "a-b_c.d~e%2F%C3%A9"
    );
    assert_eq!(KeyEcho::Plain.apply("x y"), "x y");
    // Without a key the template quotes "" (as EchoKey401 does).
    llm.script("k", "nokey", vec![Behaviour::echo_key_unauthorized()]);
    let (_, _, body) = chat_post(llm.port(), "k", "nokey", None);
    assert_eq!(message_of(&body), "Unauthorized: ");
    assert_eq!(Behaviour::Ok.echo_message(key), None);
}

/// What Pi reports (`errorMessage`) for the GLM capacity rejection (1302, English and Chinese, a
/// real over-cap rejection) and for the quota-window bodies — the strings the classifier must
/// read. Printed for the record; each is `429: ` and the body's `error` object verbatim (so it
/// contains the body's message, reset time included).
fn capacity_and_quota_errors_through_pi(version: &str) {
    let env = TestEnv::new(
        version,
        &[ProviderSpec::new(
            "glm",
            "g",
            vec![ModelSpec::text("glm-4.6")],
        )],
    );
    env.write_settings(&json!({"retry": {"enabled": false}}));
    let llm = &env.llm;
    llm.set_hang_limit(Duration::from_secs(20));

    // Hold route g's only slot with a request of our own: Pi's request is over the cap.
    llm.set_concurrency_cap("g", Some(1));
    llm.script("g", "holder", vec![Behaviour::Hang]);
    let body = json!({"model": "holder", "messages": []}).to_string();
    let mut holder = TcpStream::connect(("127.0.0.1", llm.port())).unwrap();
    write!(
        holder,
        "POST /g/v1/chat/completions HTTP/1.1\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    assert_eq!(llm.wait_in_flight("g", 1, Duration::from_secs(5)), 1);

    let mut rpc = Rpc::spawn(&env, "glm", "glm-4.6");
    let mut seen = Vec::new();
    // Pi's rule, on both versions: `<status>: ` and the body's `error` object as sent.
    let mut ask = |rpc: &mut Rpc, label: &str, body: &str| {
        let at = body.rfind(r#""error":{"#).expect("an error object") + r#""error":"#.len();
        let want = format!("429: {}", &body[at..body.len() - 1]);
        let turn = rpc.prompt(label, "Hello?", None);
        let msg = turn.last_assistant();
        let err = msg["errorMessage"].as_str().unwrap_or("").to_string();
        eprintln!("rig[{version}] {label}: errorMessage = {err}");
        if msg["stopReason"] != "error" || err != want {
            rpc.fail(&format!(
                "{label}: expected errorMessage {want:?}, got stopReason={} errorMessage={err:?}",
                msg["stopReason"]
            ));
        }
        let message = serde_json::from_str::<Value>(body).unwrap()["error"]["message"].clone();
        assert!(err.contains(message.as_str().unwrap()), "{err}");
        seen.push(err);
    };
    ask(&mut rpc, "glm-1302", &bodies::glm_1302());
    let reqs = llm.requests_to("g", "glm-4.6");
    assert!(
        reqs.len() == 1 && reqs[0].rejected_for_capacity,
        "Pi's request was not the rejected one: {reqs:#?}"
    );
    llm.set_capacity_body("g", 429, bodies::glm_1302_chinese());
    ask(&mut rpc, "glm-1302-zh", &bodies::glm_1302_chinese());
    assert_eq!(llm.rejections("g"), 2);
    assert_eq!(llm.max_in_flight("g"), 1);

    // The quota windows, served normally (the cap lifted).
    llm.set_concurrency_cap("g", None);
    let quota = [
        ("glm-1308", Behaviour::glm_1308(T)),
        ("glm-1308-en", Behaviour::glm_1308_english(T)),
        ("zai-1310", Behaviour::zai_1310(T)),
        ("minimax-2056", Behaviour::minimax_2056(T)),
        ("openai-relative", Behaviour::openai_try_again_in("20m30s")),
        ("glm-1113", Behaviour::glm_1113()),
    ];
    for (label, b) in quota {
        let Behaviour::Status(429, body) = &b else {
            panic!("{label}: not a 429: {b:?}")
        };
        let body = body.clone();
        llm.script("g", "glm-4.6", vec![b]);
        ask(&mut rpc, label, &body);
    }
    drop(holder);
    let status = rpc.close();
    assert!(status.success(), "{status}");
    env.assert_no_orphans();
    assert_eq!(seen.len(), 8);
}
