//! A fault-injecting, OpenAI-compatible streaming chat-completions server for the integration
//! tests, plus writers for Pi's `models.json` / `settings.json`.
//!
//! * Binds `127.0.0.1:0` only; std threads, one per connection; HTTP/1.1 keep-alive.
//! * `POST /<route>/…/chat/completions` answers per the scripted [`Behaviour`]; successful answers
//!   are SSE (`data: {chat.completion.chunk}` lines, a usage chunk, `data: [DONE]`) with chunked
//!   transfer encoding. `GET /<route>/…/models` lists the model ids scripted for that route.
//! * The first path segment is the provider *route*: [`FakeLlm::base_url`]`("a")` =
//!   `http://127.0.0.1:PORT/a/v1`, so one server plays several providers.
//! * Behaviour per request: the script for `(route, model)`, else the script for `(route, "*")`,
//!   else the default (initially [`Behaviour::Ok`]). A script is a list consumed one entry per
//!   request; its last entry repeats. Re-scripting a key restarts it.
//! * Every 4xx/5xx answer carries `Connection: close` and the connection is closed (Pi's next
//!   request on a reused connection after an error was observed to go out late).
//! * Every chat request is recorded ([`Request`]); see [`FakeLlm::requests`].
//! * Per-route concurrency caps answer over-cap requests at once with a real vendor's 429
//!   ([`FakeLlm::set_concurrency_cap`], `fake_llm/capacity.rs`); in-flight counts and maxima are
//!   kept for every route. Real vendors' quota-window, capacity and key-echo bodies are in
//!   [`bodies`] (`fake_llm/bodies.rs`).
//! * Dropping the [`FakeLlm`] stops the server; hanging/stalled handlers end within ~0.1 s.
//! * Keys, usage, costs: providers carry their own `apiKey` (literal or `$ENV`,
//!   [`ProviderSpec::api_key`]); the `EchoKey401*` behaviours quote the key a request carried;
//!   every usage chunk sent is recorded ([`Request::usage_sent`]); models can have prices
//!   ([`ModelSpec::cost`]) so Pi reports a cost.
//! * Layout: this file scripts and records; `fake_llm/wire.rs` reads HTTP and writes answers;
//!   `fake_llm/models_json.rs` writes Pi's config files; `fake_llm/capacity.rs` caps
//!   concurrency; `fake_llm/bodies.rs` holds the vendors' bodies.

// Also compiled into the benches and the demo (by `#[path]`), which use only part of it.
#![allow(dead_code, clippy::disallowed_methods)]

use std::collections::HashMap;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::{Value, json};

/// Answer text of [`Behaviour::Ok`] / [`Behaviour::Slow`] and friends.
pub const DEFAULT_TEXT: &str = "Hello from the fake LLM.";

/// What the fake server does with one chat-completions request.
#[derive(Clone, Debug, PartialEq)]
pub enum Behaviour {
    /// Stream [`DEFAULT_TEXT`] in a few chunks, `finish_reason:"stop"`, usage chunk, `[DONE]`.
    Ok,
    /// Like `Ok` with 0.5 s between content chunks (~2.5 s in all).
    Slow,
    /// [`DEFAULT_TEXT`] at a pace: status and headers at once, the first content chunk
    /// `first_ms` later, then `tokens` chunks in all, `gap_ms` apart (a provider slow to start,
    /// or ~1 s answers of many tokens). See [`Behaviour::first_token_after`].
    Paced {
        first_ms: u64,
        tokens: usize,
        gap_ms: u64,
    },
    /// Reasoning before the answer: `reasoning_content` deltas every `gap_ms` for `think_ms`,
    /// then [`DEFAULT_TEXT`] (a reasoning model thinking aloud; Pi shows it as thinking).
    Thinking { think_ms: u64, gap_ms: u64 },
    /// Like `Paced`, but silent after `after` content chunks (bounded like `Hang`), then the
    /// connection closes without finishing: a stream that stalls after K tokens.
    StallAfter {
        first_ms: u64,
        tokens: usize,
        gap_ms: u64,
        after: usize,
    },
    /// Like `Ok` with this answer text.
    Text(String),
    /// Like `Text` but the answer is cut at the output limit: `finish_reason:"length"`.
    Truncated(String),
    /// Like `Text` but the usage chunk reports negative completion tokens.
    NegativeUsage(String),
    /// 401 `invalid_api_key`.
    Status401,
    /// 402 OpenAI `insufficient_quota`.
    Status402,
    /// 402 with a Chinese balance message (`insufficient_balance`).
    Status402Chinese,
    /// 403 permission denied.
    Status403,
    /// 404 `model_not_found` (the message names the requested model).
    Status404,
    /// 429 rate limit with a `Retry-After` header.
    Status429 { retry_after: String },
    /// 429 whose body is a Chinese "balance exhausted, please top up" message (Zhipu-style code
    /// "1113"), with no English quota keywords.
    QuotaChinese429,
    /// 500 server_error.
    Status500,
    /// 503 overloaded.
    Status503,
    /// Read the request, never answer; the connection closes after the hang limit
    /// ([`FakeLlm::set_hang_limit`], default 60 s) or when the server is dropped.
    Hang,
    /// 200 + SSE headers + the role chunk and one content chunk, then stall (bounded like `Hang`),
    /// then close without finishing the chunked body.
    StallMidBody,
    /// 200 + two content chunks ("Hello ", "from "), then close (FIN) mid chunked body.
    Drop,
    /// Like `Drop` but the close is a TCP RST (SO_LINGER 0).
    Reset,
    /// Full content, usage chunk and `[DONE]`, but no chunk ever carries a `finish_reason`.
    NoFinish,
    /// Stream one tool call (`finish_reason:"tool_calls"`) to `name` with JSON `args`.
    ToolCall { name: String, args: Value },
    /// 400 OpenAI-style moderation rejection (`code:"content_filter"`).
    ContentPolicy,
    /// 400 with a Chinese moderation message only (`code:"data_inspection_failed"`).
    ContentPolicyChinese,
    /// 400 `context_length_exceeded` (8192-token model, 9000-token request).
    ContextLength,
    /// Any status with this raw body (sent as `application/json`).
    Status(u16, String),
    /// 401 OpenAI-style `invalid_api_key` whose message quotes the key the request carried (the
    /// token after `Bearer ` in `Authorization`, the whole header without that prefix, "" without
    /// the header) — the way real providers leak a key into an error text.
    EchoKey401,
    /// Like `EchoKey401` with a Chinese message (Zhipu-style code "1000"): `身份验证失败：API Key 无效：<KEY>`.
    EchoKey401Chinese,
    /// `status` with an OpenAI-style `invalid_api_key` body whose message is `template` with
    /// every `{key}` replaced by the request's key (found as for `EchoKey401`) as `echo` quotes
    /// it; constructors for real wordings: [`Behaviour::echo_key_unauthorized`] and friends.
    EchoKeyWith {
        status: u16,
        template: String,
        echo: KeyEcho,
    },
    /// Like `Text` but the usage chunk reports these token counts (total = their sum).
    TextWithUsage {
        text: String,
        prompt_tokens: u64,
        completion_tokens: u64,
    },
    /// Wait this many milliseconds (ends early when the server stops), then behave like the inner
    /// behaviour. Nothing is sent before the wait ends, not even the status line.
    Delayed(u64, Box<Behaviour>),
    /// Like `before` while the wall clock is before `until_unix_ms`, like `after` from then on
    /// (decided when the request arrives; [`Request::behaviour`] records the one chosen): a
    /// quota window that resets at a known time.
    Until {
        until_unix_ms: u64,
        before: Box<Behaviour>,
        after: Box<Behaviour>,
    },
    /// A given answer per request, whatever order requests arrive in (a batch's jobs at once, a
    /// re-ask in the conversation): the first rule whose needle the request's last user message
    /// contains answers it, else `otherwise` ([`Request::behaviour`] records the one chosen).
    ByPrompt {
        rules: Vec<(String, Behaviour)>,
        otherwise: Box<Behaviour>,
    },
}

impl Behaviour {
    /// `Text(s)`.
    pub fn text(s: impl Into<String>) -> Self {
        Behaviour::Text(s.into())
    }
    /// `Status429 { retry_after: "1" }`.
    pub fn rate_limited() -> Self {
        Behaviour::Status429 {
            retry_after: "1".into(),
        }
    }
    /// `ToolCall { name, args }`.
    pub fn tool(name: impl Into<String>, args: Value) -> Self {
        Behaviour::ToolCall {
            name: name.into(),
            args,
        }
    }
    /// A call of Pi's `bash` tool: `ToolCall { name: "bash", args: {"command": command} }`.
    pub fn bash(command: impl Into<String>) -> Self {
        Behaviour::tool("bash", json!({ "command": command.into() }))
    }
    /// `TextWithUsage { text, prompt_tokens, completion_tokens }`.
    pub fn text_with_usage(
        text: impl Into<String>,
        prompt_tokens: u64,
        completion_tokens: u64,
    ) -> Self {
        Behaviour::TextWithUsage {
            text: text.into(),
            prompt_tokens,
            completion_tokens,
        }
    }
    /// `Until { .. }`: `before` until the wall clock reaches `until_unix_ms`, then `after`.
    pub fn until(until_unix_ms: u64, before: Behaviour, after: Behaviour) -> Self {
        Behaviour::Until {
            until_unix_ms,
            before: Box::new(before),
            after: Box::new(after),
        }
    }
    /// This behaviour as it answers now: an [`Behaviour::Until`] picks its side by the clock.
    pub fn resolved(self) -> Self {
        match self {
            Behaviour::Until {
                until_unix_ms,
                before,
                after,
            } => {
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_millis() as u64);
                if now < until_unix_ms { *before } else { *after }.resolved()
            }
            other => other,
        }
    }
    /// Headers at once, the first token `ms` later, then the rest of [`DEFAULT_TEXT`] at once.
    pub fn first_token_after(ms: u64) -> Self {
        Behaviour::Paced {
            first_ms: ms,
            tokens: 3,
            gap_ms: 0,
        }
    }
    /// `ByPrompt { .. }`: `rules` as (needle in the last user message, behaviour), else
    /// `otherwise`.
    pub fn by_prompt<S: Into<String>>(
        rules: impl IntoIterator<Item = (S, Behaviour)>,
        otherwise: Behaviour,
    ) -> Self {
        Behaviour::ByPrompt {
            rules: rules.into_iter().map(|(n, b)| (n.into(), b)).collect(),
            otherwise: Box::new(otherwise),
        }
    }
    /// This behaviour for a request whose last user message is `last_user`: a
    /// [`Behaviour::ByPrompt`] picks its rule (rules may nest).
    pub fn for_prompt(self, last_user: &str) -> Self {
        match self {
            Behaviour::ByPrompt { rules, otherwise } => rules
                .into_iter()
                .find(|(needle, _)| last_user.contains(needle.as_str()))
                .map_or(*otherwise, |(_, b)| b)
                .resolved()
                .for_prompt(last_user),
            Behaviour::Delayed(ms, inner) => {
                Behaviour::Delayed(ms, Box::new(inner.for_prompt(last_user)))
            }
            other => other,
        }
    }
    /// `Delayed(ms, Box::new(self))`: the same answer, started `ms` milliseconds late.
    pub fn delayed(self, ms: u64) -> Self {
        Behaviour::Delayed(ms, Box::new(self))
    }
    /// The `(prompt_tokens, completion_tokens)` of the usage chunk this behaviour ends with, or
    /// `None` when it sends none (errors, hangs, streams cut before the end).
    pub fn usage(&self) -> Option<(u64, u64)> {
        match self {
            Behaviour::Ok
            | Behaviour::Slow
            | Behaviour::Text(_)
            | Behaviour::Truncated(_)
            | Behaviour::NoFinish
            | Behaviour::Paced { .. }
            | Behaviour::Thinking { .. } => Some(TEXT_USAGE),
            Behaviour::TextWithUsage {
                prompt_tokens,
                completion_tokens,
                ..
            } => Some((*prompt_tokens, *completion_tokens)),
            Behaviour::ToolCall { .. } => Some(TOOL_USAGE),
            Behaviour::Delayed(_, inner) => inner.usage(),
            Behaviour::Until { .. } => self.clone().resolved().usage(),
            _ => None,
        }
    }
}

/// Usage chunk of the text answers (`Ok`, `Text`, `Slow`, `NoFinish`): (prompt, completion).
pub const TEXT_USAGE: (u64, u64) = (11, 7);
/// Usage chunk of a `ToolCall` answer: (prompt, completion).
pub const TOOL_USAGE: (u64, u64) = (20, 5);

/// An image part of a recorded request.
#[derive(Clone, Debug, PartialEq)]
pub struct Image {
    /// Mime type from the data URL (`data:<mime>;base64,…`), "" if not a data URL.
    pub mime: String,
    /// The base64 payload (no `data:` prefix).
    pub base64: String,
    /// Decoded length of the payload in bytes (0 if it does not decode).
    pub bytes: usize,
}

/// One message of a recorded request.
#[derive(Clone, Debug, PartialEq)]
pub struct Msg {
    /// `system`, `developer`, `user`, `assistant`, `tool`.
    pub role: String,
    /// String content as is; array content: text parts and `<image>` for each image part, joined
    /// with "\n"; assistant tool calls appended as `<tool_calls:name1,name2>`.
    pub text: String,
}

/// One recorded chat-completions request.
#[derive(Clone, Debug)]
pub struct Request {
    /// First path segment (`"a"` for `/a/v1/chat/completions`).
    pub route: String,
    /// Full request path.
    pub path: String,
    /// `model` from the body.
    pub model: String,
    pub messages: Vec<Msg>,
    /// Image parts of all messages, in order.
    pub images: Vec<Image>,
    /// Number of entries in `tools`.
    pub tools: usize,
    pub reasoning_effort: Option<String>,
    /// The `Authorization` header, if any.
    pub authorization: Option<String>,
    /// The behaviour the server answered with.
    pub behaviour: Behaviour,
    /// `(prompt_tokens, completion_tokens)` of the usage chunk sent for this request; set just
    /// before the chunk is written (so a client can never see it before the record has it),
    /// `None` when no usage chunk went out (error answers, cut streams, a failed write).
    pub usage_sent: Option<(u64, u64)>,
    /// Sequence number of the request on this server (1-based, never reused; survives
    /// [`FakeLlm::clear_requests`]).
    pub seq: u64,
    /// Connection number (1-based, per server) and request number on that connection (1-based).
    pub conn: u64,
    pub req_on_conn: u64,
    /// When the request was fully read.
    pub at: Instant,
    /// The raw JSON body (`Value::Null` if it did not parse).
    pub body: Value,
    /// Answered at once with the route's capacity body because its concurrency cap was reached
    /// ([`FakeLlm::set_concurrency_cap`]); `behaviour` is then that `Status`.
    pub rejected_for_capacity: bool,
}

impl Request {
    /// Text of the last `user` message.
    pub fn last_user_text(&self) -> Option<&str> {
        self.messages
            .iter()
            .rev()
            .find(|m| m.role == "user")
            .map(|m| m.text.as_str())
    }
    /// Roles in order (e.g. `["system", "user"]`).
    pub fn roles(&self) -> Vec<&str> {
        self.messages.iter().map(|m| m.role.as_str()).collect()
    }
    /// Text of the first `system` or `developer` message (Pi's system prompt; reasoning models
    /// get it as `developer`).
    pub fn system_text(&self) -> Option<&str> {
        self.messages
            .iter()
            .find(|m| m.role == "system" || m.role == "developer")
            .map(|m| m.text.as_str())
    }
    /// Names of the tools offered in the body's `tools` array, in order (`function.name`, or a
    /// top-level `name` for other tool formats).
    pub fn tool_names(&self) -> Vec<&str> {
        self.body
            .get("tools")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|t| {
                t.pointer("/function/name")
                    .or_else(|| t.get("name"))
                    .and_then(Value::as_str)
            })
            .collect()
    }
    /// The API key the request carried: the token after `Bearer ` in `Authorization`.
    pub fn bearer(&self) -> Option<&str> {
        self.authorization
            .as_deref()
            .and_then(|a| a.strip_prefix("Bearer "))
    }
}

struct Script {
    list: Vec<Behaviour>,
    next: usize,
    /// The whole list repeats (else its last entry does).
    cycle: bool,
}

struct State {
    scripts: HashMap<(String, String), Script>,
    default: Behaviour,
    requests: Vec<Request>,
    hang_limit: Duration,
    next_seq: u64,
    capacity: capacity::Capacity,
    windows: window::Windows,
}

struct Shared {
    state: Mutex<State>,
    state_cv: Condvar,
    stop: Mutex<bool>,
    stop_cv: Condvar,
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
    fn stopped(&self) -> bool {
        *self.stop.lock().unwrap_or_else(|e| e.into_inner())
    }
    /// Record on request `seq` the usage about to be sent (or `None` after a failed write).
    fn set_usage_sent(&self, seq: u64, usage: Option<(u64, u64)>) {
        let mut st = self.state();
        if let Some(r) = st.requests.iter_mut().rev().find(|r| r.seq == seq) {
            r.usage_sent = usage;
        }
    }
    /// Sleep up to `d`; returns early (true) when the server is stopping.
    fn sleep(&self, d: Duration) -> bool {
        let g = self.stop.lock().unwrap_or_else(|e| e.into_inner());
        let (g, _) = self
            .stop_cv
            .wait_timeout_while(g, d, |stopped| !*stopped)
            .unwrap_or_else(|e| e.into_inner());
        *g
    }
}

/// The fake server. See the module docs.
pub struct FakeLlm {
    shared: Arc<Shared>,
    addr: SocketAddr,
    acceptor: Option<JoinHandle<()>>,
    conns: Arc<Mutex<Vec<JoinHandle<()>>>>,
}

impl FakeLlm {
    /// Start a server on `127.0.0.1:<ephemeral port>`.
    pub fn start() -> FakeLlm {
        let listener = TcpListener::bind("127.0.0.1:0").expect("fake_llm: bind 127.0.0.1:0");
        let addr = listener.local_addr().expect("fake_llm: local_addr");
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                scripts: HashMap::new(),
                default: Behaviour::Ok,
                requests: Vec::new(),
                hang_limit: Duration::from_secs(60),
                next_seq: 0,
                capacity: Default::default(),
                windows: Default::default(),
            }),
            state_cv: Condvar::new(),
            stop: Mutex::new(false),
            stop_cv: Condvar::new(),
        });
        let conns: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::default();
        let acceptor = {
            let shared = shared.clone();
            let conns = conns.clone();
            thread::Builder::new()
                .name(format!("fake-llm-{}", addr.port()))
                .spawn(move || {
                    let mut conn_id = 0u64;
                    for stream in listener.incoming() {
                        if shared.stopped() {
                            break;
                        }
                        let Ok(stream) = stream else {
                            thread::sleep(Duration::from_millis(5));
                            continue;
                        };
                        conn_id += 1;
                        let shared = shared.clone();
                        let h = thread::spawn(move || handle_conn(stream, &shared, conn_id));
                        let mut list = conns.lock().unwrap_or_else(|e| e.into_inner());
                        list.retain(|h| !h.is_finished());
                        list.push(h);
                    }
                })
                .expect("fake_llm: spawn acceptor")
        };
        FakeLlm {
            shared,
            addr,
            acceptor: Some(acceptor),
            conns,
        }
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// `http://127.0.0.1:PORT/<route>/v1` — an OpenAI-style base URL for provider `route`.
    pub fn base_url(&self, route: &str) -> String {
        format!("http://127.0.0.1:{}/{route}/v1", self.port())
    }

    /// Script the answers for `model` on `route` (`model` "*" = any model of that route without
    /// its own script). One entry per request; the last one repeats. Replaces (restarts) an
    /// earlier script for the same key. An empty list removes the script.
    pub fn script(&self, route: &str, model: &str, list: Vec<Behaviour>) {
        let mut st = self.shared.state();
        let key = (route.to_string(), model.to_string());
        if list.is_empty() {
            st.scripts.remove(&key);
        } else {
            st.scripts.insert(
                key,
                Script {
                    list,
                    next: 0,
                    cycle: false,
                },
            );
        }
    }

    /// Like [`FakeLlm::script`], but the whole list repeats: `[Ok, Ok, Hang]` is silence on
    /// every third request.
    pub fn script_cycle(&self, route: &str, model: &str, list: Vec<Behaviour>) {
        let mut st = self.shared.state();
        let key = (route.to_string(), model.to_string());
        if list.is_empty() {
            st.scripts.remove(&key);
        } else {
            st.scripts.insert(
                key,
                Script {
                    list,
                    next: 0,
                    cycle: true,
                },
            );
        }
    }

    /// `fault` on every `n`th request (the `n`th, the `2n`th, …) to `model` on `route`,
    /// `otherwise` on the others.
    pub fn script_every(
        &self,
        route: &str,
        model: &str,
        n: usize,
        fault: Behaviour,
        otherwise: Behaviour,
    ) {
        let mut list = vec![otherwise; n.max(1) - 1];
        list.push(fault);
        self.script_cycle(route, model, list);
    }

    /// Behaviour for requests without a script (initially `Ok`).
    pub fn set_default(&self, b: Behaviour) {
        self.shared.state().default = b;
    }

    /// Upper bound for `Hang` / `StallMidBody` (default 60 s).
    pub fn set_hang_limit(&self, d: Duration) {
        self.shared.state().hang_limit = d;
    }

    /// All chat requests so far, in arrival order.
    pub fn requests(&self) -> Vec<Request> {
        self.shared.state().requests.clone()
    }

    /// Chat requests for `model` on `route`.
    pub fn requests_to(&self, route: &str, model: &str) -> Vec<Request> {
        self.shared
            .state()
            .requests
            .iter()
            .filter(|r| r.route == route && r.model == model)
            .cloned()
            .collect()
    }

    /// Forget the recorded requests (scripts keep their position).
    pub fn clear_requests(&self) {
        self.shared.state().requests.clear();
    }

    /// Wait until at least `n` requests were recorded (or `timeout`); returns all requests.
    pub fn wait_requests(&self, n: usize, timeout: Duration) -> Vec<Request> {
        let g = self.shared.state();
        let (g, _) = self
            .shared
            .state_cv
            .wait_timeout_while(g, timeout, |st| st.requests.len() < n)
            .unwrap_or_else(|e| e.into_inner());
        g.requests.clone()
    }
}

impl Drop for FakeLlm {
    fn drop(&mut self) {
        *self.shared.stop.lock().unwrap_or_else(|e| e.into_inner()) = true;
        self.shared.stop_cv.notify_all();
        // Wake the blocking accept().
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
        if let Some(h) = self.acceptor.take() {
            let _ = h.join();
        }
        let handles: Vec<_> = self
            .conns
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain(..)
            .collect();
        for h in handles {
            let _ = h.join();
        }
    }
}

/// A loopback port with nothing listening: connecting is refused (RST). The port stays bound
/// (without `listen`) by this process for its lifetime, so nobody else can take it.
pub fn closed_port() -> u16 {
    static HOLDER: OnceLock<(socket2::Socket, u16)> = OnceLock::new();
    HOLDER
        .get_or_init(|| {
            use socket2::{Domain, SockAddr, Socket, Type};
            let s = Socket::new(Domain::IPV4, Type::STREAM, None).expect("closed_port: socket");
            let addr: SocketAddr = "127.0.0.1:0".parse().unwrap();
            s.bind(&SockAddr::from(addr)).expect("closed_port: bind");
            let port = s
                .local_addr()
                .ok()
                .and_then(|a| a.as_socket())
                .map(|a| a.port())
                .expect("closed_port: local_addr");
            (s, port)
        })
        .1
}

#[path = "fake_llm/act.rs"]
mod act;
#[path = "fake_llm/bodies.rs"]
pub mod bodies;
#[path = "fake_llm/capacity.rs"]
mod capacity;
#[path = "fake_llm/messages.rs"]
mod messages;
#[path = "fake_llm/models_json.rs"]
mod models_json;
#[path = "fake_llm/window.rs"]
mod window;
#[path = "fake_llm/wire.rs"]
mod wire;

// The API of this module for test crates; a bench or example including this file uses a part.
use act::{Ctx, act};
pub use bodies::KeyEcho;
use messages::summarize_messages;
#[allow(unused_imports)]
pub use models_json::{
    ApiKey, Endpoint, ModelSpec, ProviderSpec, models_json, write_models_json, write_settings_json,
};
#[allow(unused_imports)]
pub use window::QuotaWindow;
use wire::{Mode, RawRequest, err_body, read_request, send_json, stream_text, stream_tool};

// ---------------------------------------------------------------------------------------------
// Serving

fn handle_conn(mut stream: TcpStream, shared: &Shared, conn: u64) {
    let _ = stream.set_nodelay(true);
    let _ = stream.set_read_timeout(Some(Duration::from_millis(100)));
    let mut buf = Vec::new();
    let mut n = 0u64;
    while let Some(req) = read_request(&mut stream, &mut buf, shared) {
        n += 1;
        if !serve(&mut stream, req, shared, conn, n) {
            break;
        }
    }
    // Dropping `stream` closes it (FIN, or RST when SO_LINGER 0 was set).
}

/// Handle one request; returns whether to keep the connection open.
fn serve(
    stream: &mut TcpStream,
    req: RawRequest,
    shared: &Shared,
    conn: u64,
    req_on_conn: u64,
) -> bool {
    let route = req
        .path
        .trim_start_matches('/')
        .split('/')
        .next()
        .unwrap_or("")
        .to_string();
    let path_only = req
        .path
        .split('?')
        .next()
        .unwrap_or("")
        .trim_end_matches('/')
        .to_string();
    if req.method == "GET" {
        if path_only.ends_with("/models") {
            let st = shared.state();
            let mut ids: Vec<&str> = st
                .scripts
                .keys()
                .filter(|(r, m)| *r == route && m != "*")
                .map(|(_, m)| m.as_str())
                .collect();
            ids.sort_unstable();
            let data: Vec<Value> = ids
                .iter()
                .map(|id| json!({"id": id, "object": "model", "owned_by": "fake"}))
                .collect();
            let body = json!({"object": "list", "data": data}).to_string();
            drop(st);
            return send_json(stream, 200, &body, &[]);
        }
        return send_json(
            stream,
            404,
            &err_body("not found", "invalid_request_error", None),
            &[],
        );
    }
    if req.method != "POST" {
        return send_json(
            stream,
            405,
            &err_body("method not allowed", "invalid_request_error", None),
            &[],
        );
    }
    let body: Value = serde_json::from_slice(&req.body).unwrap_or(Value::Null);
    let model = body
        .get("model")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let is_chat = path_only.ends_with("/chat/completions");
    // Held until the answer is written: the request is in flight on its route till then.
    let mut _slot = None;
    let mut rejected_for_capacity = false;
    let behaviour = if is_chat {
        match capacity::admit(shared, &route) {
            Ok(slot) => {
                _slot = Some(slot);
                match window::take(shared, &route) {
                    Ok(()) => next_behaviour(shared, &route, &model),
                    Err((status, body)) => Behaviour::Status(status, body),
                }
            }
            Err((status, body)) => {
                rejected_for_capacity = true;
                Behaviour::Status(status, body)
            }
        }
    } else {
        Behaviour::Status(
            404,
            err_body(
                &format!("unknown path {}", req.path),
                "invalid_request_error",
                None,
            ),
        )
    };
    let (messages, images) = summarize_messages(&body);
    let last_user = messages
        .iter()
        .rev()
        .find(|m| m.role == "user")
        .map_or("", |m| m.text.as_str());
    let behaviour = behaviour.for_prompt(last_user);
    let authorization = req.header("authorization").map(str::to_string);
    let (seq, hang_limit) = {
        let mut st = shared.state();
        st.next_seq += 1;
        let seq = st.next_seq;
        st.requests.push(Request {
            route,
            path: req.path.clone(),
            model: model.clone(),
            messages,
            images,
            tools: body
                .get("tools")
                .and_then(Value::as_array)
                .map_or(0, Vec::len),
            reasoning_effort: body
                .get("reasoning_effort")
                .and_then(Value::as_str)
                .map(str::to_string),
            authorization: authorization.clone(),
            behaviour: behaviour.clone(),
            usage_sent: None,
            seq,
            conn,
            req_on_conn,
            at: Instant::now(),
            body,
            rejected_for_capacity,
        });
        (seq, st.hang_limit)
    };
    shared.state_cv.notify_all();
    let auth = authorization.unwrap_or_default();
    let ctx = Ctx {
        model: &model,
        key: auth.strip_prefix("Bearer ").unwrap_or(&auth),
        shared,
        hang_limit,
        seq,
    };
    act(stream, &behaviour, &ctx)
}

/// The next scripted behaviour for `model` on `route` (advancing its script), else the default.
fn next_behaviour(shared: &Shared, route: &str, model: &str) -> Behaviour {
    let mut st = shared.state();
    let key = (route.to_string(), model.to_string());
    let key = if st.scripts.contains_key(&key) {
        key
    } else {
        (route.to_string(), "*".to_string())
    };
    match st.scripts.get_mut(&key) {
        Some(s) => {
            let at = if s.cycle {
                s.next % s.list.len()
            } else {
                s.next.min(s.list.len() - 1)
            };
            let b = s.list[at].clone();
            s.next += 1;
            b
        }
        None => st.default.clone(),
    }
    .resolved()
}
