//! What a chat request carried: its messages and images, summarised for the tests' checks.

use super::*;

pub(super) fn summarize_messages(body: &Value) -> (Vec<Msg>, Vec<Image>) {
    let mut msgs = Vec::new();
    let mut images = Vec::new();
    for m in body
        .get("messages")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let role = m
            .get("role")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let mut text = match m.get("content") {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Array(parts)) => {
                let mut out = Vec::new();
                for p in parts {
                    match p.get("type").and_then(Value::as_str) {
                        Some("text") => out.push(
                            p.get("text")
                                .and_then(Value::as_str)
                                .unwrap_or("")
                                .to_string(),
                        ),
                        Some("image_url") | Some("input_image") => {
                            out.push("<image>".to_string());
                            let url = p
                                .get("image_url")
                                .and_then(|u| u.get("url").or(Some(u)))
                                .and_then(Value::as_str)
                                .unwrap_or("");
                            images.push(parse_data_url(url));
                        }
                        _ => out.push(p.to_string()),
                    }
                }
                out.join("\n")
            }
            Some(Value::Null) | None => String::new(),
            Some(other) => other.to_string(),
        };
        if let Some(calls) = m.get("tool_calls").and_then(Value::as_array) {
            let names: Vec<&str> = calls
                .iter()
                .map(|c| {
                    c.pointer("/function/name")
                        .and_then(Value::as_str)
                        .unwrap_or("?")
                })
                .collect();
            text.push_str(&format!("<tool_calls:{}>", names.join(",")));
        }
        msgs.push(Msg { role, text });
    }
    (msgs, images)
}

fn parse_data_url(url: &str) -> Image {
    let Some(rest) = url.strip_prefix("data:") else {
        return Image {
            mime: String::new(),
            base64: String::new(),
            bytes: 0,
        };
    };
    let (meta, payload) = rest.split_once(',').unwrap_or((rest, ""));
    let mime = meta.split(';').next().unwrap_or("").to_string();
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(payload)
        .map_or(0, |v| v.len());
    Image {
        mime,
        base64: payload.to_string(),
        bytes,
    }
}
