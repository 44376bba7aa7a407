//! Carrying out one request's [`Behaviour`]: the answer, the fault, or the silence.

use super::*;

/// What an answer needs besides its behaviour.
pub(super) struct Ctx<'a> {
    /// `model` of the request (echoed in chunks and 404 texts).
    pub(super) model: &'a str,
    /// The API key the request carried (for the `EchoKey401` family).
    pub(super) key: &'a str,
    pub(super) shared: &'a Shared,
    pub(super) hang_limit: Duration,
    /// The request's [`Request::seq`], to record `usage_sent`.
    pub(super) seq: u64,
}

pub(super) fn act(stream: &mut TcpStream, b: &Behaviour, ctx: &Ctx<'_>) -> bool {
    let model = ctx.model;
    let text =
        |stream: &mut TcpStream, t: &str, mode: Mode| stream_text(stream, t, mode, TEXT_USAGE, ctx);
    match b {
        Behaviour::Ok => text(stream, DEFAULT_TEXT, Mode::Normal),
        Behaviour::Text(t) => text(stream, t, Mode::Normal),
        Behaviour::Truncated(t) => text(stream, t, Mode::Length),
        Behaviour::NegativeUsage(t) => text(stream, t, Mode::NegativeUsage),
        Behaviour::TextWithUsage {
            text: t,
            prompt_tokens,
            completion_tokens,
        } => stream_text(
            stream,
            t,
            Mode::Normal,
            (*prompt_tokens, *completion_tokens),
            ctx,
        ),
        Behaviour::Slow => text(stream, DEFAULT_TEXT, Mode::Slow),
        Behaviour::NoFinish => text(stream, DEFAULT_TEXT, Mode::NoFinish),
        Behaviour::Drop => text(stream, DEFAULT_TEXT, Mode::Drop),
        Behaviour::Reset => text(stream, DEFAULT_TEXT, Mode::Reset),
        Behaviour::StallMidBody => text(stream, DEFAULT_TEXT, Mode::Stall),
        Behaviour::Paced {
            first_ms,
            tokens,
            gap_ms,
        } => text(
            stream,
            DEFAULT_TEXT,
            Mode::Paced {
                first_ms: *first_ms,
                tokens: *tokens,
                gap_ms: *gap_ms,
                stall_after: None,
            },
        ),
        Behaviour::Thinking { think_ms, gap_ms } => text(
            stream,
            DEFAULT_TEXT,
            Mode::Think {
                think_ms: *think_ms,
                gap_ms: *gap_ms,
            },
        ),
        Behaviour::StallAfter {
            first_ms,
            tokens,
            gap_ms,
            after,
        } => text(
            stream,
            DEFAULT_TEXT,
            Mode::Paced {
                first_ms: *first_ms,
                tokens: *tokens,
                gap_ms: *gap_ms,
                stall_after: Some(*after),
            },
        ),
        Behaviour::ToolCall { name, args } => stream_tool(stream, name, args, ctx),
        Behaviour::Delayed(ms, inner) => {
            if ctx.shared.sleep(Duration::from_millis(*ms)) {
                return false;
            }
            act(stream, inner, ctx)
        }
        Behaviour::Until { .. } => act(stream, &b.clone().resolved(), ctx),
        // Chosen by the request's prompt before it is recorded (`for_prompt`); only a rule that
        // nests one under another behaviour gets here, and answers with its fallback.
        Behaviour::ByPrompt { otherwise, .. } => act(stream, otherwise, ctx),
        Behaviour::Hang => {
            ctx.shared.sleep(ctx.hang_limit);
            false
        }
        Behaviour::EchoKey401 => send_json(
            stream,
            401,
            &err_body(
                &format!(
                    "Incorrect API key provided: {}. You can find your API key at \
                     https://platform.openai.com/account/api-keys.",
                    ctx.key
                ),
                "invalid_request_error",
                Some("invalid_api_key"),
            ),
            &[],
        ),
        Behaviour::EchoKey401Chinese => send_json(
            stream,
            401,
            &json!({"error": {"code": "1000", "message": format!("身份验证失败：API Key 无效：{}", ctx.key)}})
                .to_string(),
            &[],
        ),
        Behaviour::EchoKeyWith {
            status,
            template,
            echo,
        } => send_json(
            stream,
            *status,
            &err_body(
                &template.replace(bodies::KEY, &echo.apply(ctx.key)),
                "invalid_request_error",
                Some("invalid_api_key"),
            ),
            &[],
        ),
        Behaviour::Status401 => send_json(
            stream,
            401,
            &err_body(
                "Incorrect API key provided: x.",
                "invalid_request_error",
                Some("invalid_api_key"),
            ),
            &[],
        ),
        Behaviour::Status402 => send_json(
            stream,
            402,
            &err_body(
                "You exceeded your current quota, please check your plan and billing details.",
                "insufficient_quota",
                Some("insufficient_quota"),
            ),
            &[],
        ),
        Behaviour::Status402Chinese => send_json(
            stream,
            402,
            &json!({"error": {"message": "账户余额不足，请充值后再试", "type": "insufficient_balance"}})
                .to_string(),
            &[],
        ),
        Behaviour::Status403 => send_json(
            stream,
            403,
            &err_body(
                "Permission denied for this model.",
                "permission_error",
                Some("forbidden"),
            ),
            &[],
        ),
        Behaviour::Status404 => send_json(
            stream,
            404,
            &err_body(
                &format!("The model `{model}` does not exist or you do not have access to it."),
                "invalid_request_error",
                Some("model_not_found"),
            ),
            &[],
        ),
        Behaviour::Status429 { retry_after } => send_json(
            stream,
            429,
            &err_body(
                "Rate limit reached for requests. Please try again in 1s.",
                "rate_limit_exceeded",
                Some("rate_limit_exceeded"),
            ),
            &[("Retry-After", retry_after)],
        ),
        Behaviour::QuotaChinese429 => send_json(
            stream,
            429,
            &json!({"error": {"code": "1113", "message": "余额不足或无可用资源包,请充值。"}}).to_string(),
            &[],
        ),
        Behaviour::Status500 => send_json(
            stream,
            500,
            &err_body(
                "The server had an error while processing your request.",
                "server_error",
                None,
            ),
            &[],
        ),
        Behaviour::Status503 => send_json(
            stream,
            503,
            &err_body(
                "The engine is currently overloaded, please try again later.",
                "server_error",
                None,
            ),
            &[],
        ),
        Behaviour::ContentPolicy => send_json(
            stream,
            400,
            &err_body(
                "Your request was rejected by our content moderation policy (content_filter)",
                "invalid_request_error",
                Some("content_filter"),
            ),
            &[],
        ),
        Behaviour::ContentPolicyChinese => send_json(
            stream,
            400,
            &err_body(
                "内容审查未通过：输入包含敏感内容",
                "invalid_request_error",
                Some("data_inspection_failed"),
            ),
            &[],
        ),
        Behaviour::ContextLength => send_json(
            stream,
            400,
            &err_body(
                "This model's maximum context length is 8192 tokens. However, your messages resulted in 9000 tokens.",
                "invalid_request_error",
                Some("context_length_exceeded"),
            ),
            &[],
        ),
        Behaviour::Status(code, body) => send_json(stream, *code, body, &[]),
    }
}
