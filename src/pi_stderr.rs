//! What Pi's stderr says: the line that explains a crash (not the tail of a Node stack), and
//! Pi's advice translated where it names Pi-only flags. Pure.

/// Pi's advice names Pi-only flags; say what the runner offers instead.
pub fn with_runner_advice(line: &str) -> String {
    if line.contains("--list-models") {
        format!("{line} (with pi-ccswitch-run: --status lists every model)")
    } else if line.contains("/login") {
        format!(
            "{line} (/login is for Pi's terminal UI; for pi-ccswitch-run give the provider an \
             apiKey in models.json or set its key variable; --doctor checks the setup)"
        )
    } else {
        line.to_string()
    }
}

/// The line of Pi's stderr that says what went wrong: the last `…Error: …` line that is not a
/// stack frame, else the last three non-empty lines.
pub fn error_line(stderr: &str) -> String {
    let lines: Vec<&str> = stderr
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let is_error = |l: &&&str| {
        !l.starts_with("at ")
            && (l.starts_with("Error")
                || l.split_once(':')
                    .is_some_and(|(head, _)| head.ends_with("Error") && !head.contains(' ')))
    };
    if let Some(line) = lines.iter().rev().find(is_error) {
        return (*line).to_string();
    }
    lines[lines.len().saturating_sub(3)..].join(" | ")
}

#[cfg(test)]
mod tests {
    use super::error_line as pi_error_line;

    #[test]
    fn pi_error_line_skips_the_node_stack() {
        let stderr = "Warning: something harmless\nError: EACCES: permission denied, open \
                      '/ro/agent/auth.json.lock'\n    at Object.openSync (node:fs:573:18)\n    \
                      at lockSync (file:///pi/dist/cli.js:10:3)\n    at main (file:///pi/cli.js:9:1)\n";
        assert_eq!(
            pi_error_line(stderr),
            "Error: EACCES: permission denied, open '/ro/agent/auth.json.lock'"
        );
        assert_eq!(
            pi_error_line("TypeError: x is not a function\n  at y"),
            "TypeError: x is not a function"
        );
        assert_eq!(pi_error_line("a\nb\nc\nd\n"), "b | c | d");
        assert_eq!(pi_error_line(""), "");
    }
}
