//! clap's errors as our one-line usage errors: the option named, a suggestion for a typo, the
//! values expected. No I/O.

use clap::error::{ContextKind, ContextValue, ErrorKind};

use crate::complexity::Complexity;

/// Turns clap's error into the line of our usage error; `None` for help/version output.
pub(super) fn clap_error(e: &clap::Error) -> Option<String> {
    let arg = || match e.get(ContextKind::InvalidArg) {
        Some(ContextValue::String(s)) => s.clone(),
        _ => String::new(),
    };
    let flag_name = |a: String| a.split([' ', '=']).next().unwrap_or_default().to_string();
    let msg = match e.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => return None,
        ErrorKind::UnknownArgument => {
            let suggestion = match e.get(ContextKind::SuggestedArg) {
                Some(ContextValue::String(s)) => format!(" (did you mean {s}?)"),
                Some(ContextValue::Strings(v)) if !v.is_empty() => {
                    format!(" (did you mean {}?)", v.join(" or "))
                }
                _ => String::new(),
            };
            format!("unsupported option: {}{suggestion}", arg())
        }
        ErrorKind::MissingRequiredArgument => {
            let missing = match e.get(ContextKind::InvalidArg) {
                Some(ContextValue::Strings(v)) => v.join(", "),
                _ => String::new(),
            };
            format!("{missing} is required by an option given (see --help)")
        }
        ErrorKind::InvalidValue | ErrorKind::NoEquals => {
            let value = match e.get(ContextKind::InvalidValue) {
                Some(ContextValue::String(s)) => s.clone(),
                _ => String::new(),
            };
            if value.is_empty() {
                format!("{} requires a value", flag_name(arg()))
            } else {
                let valid = match e.get(ContextKind::ValidValue) {
                    Some(ContextValue::Strings(v)) => format!(" (expected {})", v.join(", ")),
                    _ => String::new(),
                };
                format!("invalid value '{value}' for {}{valid}", flag_name(arg()))
            }
        }
        ErrorKind::ValueValidation => {
            let name = flag_name(arg());
            let value = match e.get(ContextKind::InvalidValue) {
                Some(ContextValue::String(s)) => s.clone(),
                _ => String::new(),
            };
            match name.as_str() {
                "--timeout-ms" => {
                    format!("--timeout-ms must be a positive integer (got '{value}')")
                }
                "--jobs" => format!("--jobs must be a whole number from 1 to 256 (got '{value}')"),
                "--max-wait" | "--prefer-primary" => {
                    match crate::settings::parse_duration(&value) {
                        Err(why) => format!("{name} {why}"),
                        Ok(_) => format!("invalid value '{value}' for {name}"),
                    }
                }
                "--task-complexity" => format!(
                    "invalid value '{value}' for --task-complexity (expected {})",
                    Complexity::VALUES.join(", ")
                ),
                _ => format!("invalid value '{value}' for {name}"),
            }
        }
        _ => {
            // clap's own first line, without its "error: " prefix.
            let text = e.render().to_string();
            let line = text.lines().next().unwrap_or("invalid arguments");
            line.trim_start_matches("error: ").to_string()
        }
    };
    Some(msg)
}
