//! The exit-code table. The only place where exit codes are numbers.

/// How the process ends. `--help` and README repeat this table; tests pin each code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// A model gave a complete answer (or `--help`/`--version`).
    Success,
    /// Failover exhausted: no healthy candidate left, or the round window ran out.
    Exhausted,
    /// Usage, attachment, configuration or Pi/RPC error.
    Error,
    /// The `--timeout-ms` deadline passed.
    Timeout,
    /// Interrupted by SIGINT.
    Interrupted,
    /// Terminated by SIGTERM (or SIGHUP).
    Terminated,
}

impl Exit {
    pub fn code(self) -> u8 {
        match self {
            Exit::Success => 0,
            Exit::Exhausted => 1,
            Exit::Error => 2,
            Exit::Timeout => 124,
            Exit::Interrupted => 130,
            Exit::Terminated => 143,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Exit;

    #[test]
    fn codes_match_the_documented_table() {
        let table = [
            (Exit::Success, 0),
            (Exit::Exhausted, 1),
            (Exit::Error, 2),
            (Exit::Timeout, 124),
            (Exit::Interrupted, 130),
            (Exit::Terminated, 143),
        ];
        for (exit, code) in table {
            assert_eq!(exit.code(), code, "{exit:?}");
        }
    }
}
