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
    /// The `--max-cost` budget was reached: no new job or attempt was started.
    OverBudget,
    /// The `--timeout-ms` deadline passed.
    Timeout,
    /// Interrupted by SIGINT.
    Interrupted,
    /// Terminated by SIGTERM (or SIGHUP).
    Terminated,
}

impl Exit {
    /// Every exit, in table order.
    pub const ALL: [Exit; 7] = [
        Exit::Success,
        Exit::Exhausted,
        Exit::Error,
        Exit::OverBudget,
        Exit::Timeout,
        Exit::Interrupted,
        Exit::Terminated,
    ];

    /// What the code means, as `--help`, the man page and README say it.
    pub fn meaning(self) -> &'static str {
        match self {
            Exit::Success => "success: a model gave a complete answer (or --help/--version)",
            Exit::Exhausted => {
                "failover exhausted: no healthy candidate left, or the round window ran out"
            }
            Exit::Error => "usage, attachment, configuration or Pi/RPC error",
            Exit::OverBudget => {
                "the --max-cost budget was reached: no new job or attempt was started"
            }
            Exit::Timeout => "the --timeout-ms deadline passed",
            Exit::Interrupted => "interrupted by SIGINT",
            Exit::Terminated => "terminated by SIGTERM or SIGHUP",
        }
    }

    pub fn code(self) -> u8 {
        match self {
            Exit::Success => 0,
            Exit::Exhausted => 1,
            Exit::Error => 2,
            Exit::OverBudget => 3,
            Exit::Timeout => 124,
            Exit::Interrupted => 130,
            Exit::Terminated => 143,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Exit;

    /// `--help` repeats the table: every code with its meaning.
    #[test]
    fn help_lists_every_exit_code() {
        let help = crate::cli::command().render_help().to_string();
        for exit in Exit::ALL {
            let code = exit.code();
            assert!(
                help.lines()
                    .any(|l| l.trim_start().starts_with(&format!("{code} "))),
                "--help lacks exit code {code}:\n{help}"
            );
        }
        for exit in [
            Exit::Success,
            Exit::Exhausted,
            Exit::Error,
            Exit::OverBudget,
            Exit::Timeout,
        ] {
            assert!(
                help.contains(exit.meaning()),
                "--help lacks {:?}",
                exit.meaning()
            );
        }
    }

    #[test]
    fn codes_match_the_documented_table() {
        let table = [
            (Exit::Success, 0),
            (Exit::Exhausted, 1),
            (Exit::Error, 2),
            (Exit::OverBudget, 3),
            (Exit::Timeout, 124),
            (Exit::Interrupted, 130),
            (Exit::Terminated, 143),
        ];
        for (exit, code) in table {
            assert_eq!(exit.code(), code, "{exit:?}");
        }
    }
}
