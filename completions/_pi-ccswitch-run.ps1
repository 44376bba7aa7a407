
using namespace System.Management.Automation
using namespace System.Management.Automation.Language

Register-ArgumentCompleter -Native -CommandName 'pi-ccswitch-run' -ScriptBlock {
    param($wordToComplete, $commandAst, $cursorPosition)

    $commandElements = $commandAst.CommandElements
    $command = @(
        'pi-ccswitch-run'
        for ($i = 1; $i -lt $commandElements.Count; $i++) {
            $element = $commandElements[$i]
            if ($element -isnot [StringConstantExpressionAst] -or
                $element.StringConstantType -ne [StringConstantType]::BareWord -or
                $element.Value.StartsWith('-') -or
                $element.Value -eq $wordToComplete) {
                break
        }
        $element.Value
    }) -join ';'

    $completions = @(switch ($command) {
        'pi-ccswitch-run' {
            [CompletionResult]::new('--timeout-ms', '--timeout-ms', [CompletionResultType]::ParameterName, 'Deadline in milliseconds for the run, or for each job in batch mode (exit 124 when it passes)')
            [CompletionResult]::new('--tools', '--tools', [CompletionResultType]::ParameterName, 'Forwarded to Pi: comma-separated allowlist of tools (e.g. read,ls)')
            [CompletionResult]::new('--exclude-tools', '--exclude-tools', [CompletionResultType]::ParameterName, 'Forwarded to Pi: comma-separated denylist of tools (e.g. bash,write)')
            [CompletionResult]::new('--system-prompt', '--system-prompt', [CompletionResultType]::ParameterName, 'Forwarded to Pi: replace Pi''s coding-assistant system prompt with TEXT')
            [CompletionResult]::new('--append-system-prompt', '--append-system-prompt', [CompletionResultType]::ParameterName, 'Forwarded to Pi: append TEXT to the system prompt (repeatable)')
            [CompletionResult]::new('--provider', '--provider', [CompletionResultType]::ParameterName, 'Forwarded to Pi: provider of the starting model')
            [CompletionResult]::new('--model', '--model', [CompletionResultType]::ParameterName, 'Forwarded to Pi: starting model (pattern or provider/id[:thinking])')
            [CompletionResult]::new('--thinking', '--thinking', [CompletionResultType]::ParameterName, 'Forwarded to Pi: thinking level (off, minimal, low, medium, high, xhigh, max)')
            [CompletionResult]::new('--models', '--models', [CompletionResultType]::ParameterName, 'Comma-separated model patterns (Pi''s syntax, resolved here); failover stays inside this scope')
            [CompletionResult]::new('--task-complexity', '--task-complexity', [CompletionResultType]::ParameterName, 'Pick a thinking level from the task: auto, low, medium or high (--thinking wins)')
            [CompletionResult]::new('--max-wait', '--max-wait', [CompletionResultType]::ParameterName, 'The most one run or job may wait in all — for breakers, stated resets, capacity slots, a busy key''s back-off — e.g. 30s; then it fails (exit 1) (overrides CCSWITCH_MAX_WAIT)')
            [CompletionResult]::new('--prefer-primary', '--prefer-primary', [CompletionResultType]::ParameterName, 'Wait up to DURATION for the primary model when its provider states when its limit resets (or pauses it for capacity), instead of going to the backups, e.g. 10m (overrides CCSWITCH_PREFER_PRIMARY)')
            [CompletionResult]::new('--max-cost', '--max-cost', [CompletionResultType]::ParameterName, 'Spend cap: once this run''s recorded cost reaches COST no new job or attempt starts (exit 3); PROVIDER=COST caps one provider (skipped once reached). Repeatable, comma-separated')
            [CompletionResult]::new('--output-schema', '--output-schema', [CompletionResultType]::ParameterName, 'The answer must be one JSON value valid against the JSON Schema in FILE; it is printed on one line. A non-conforming answer is asked again once, then fails over (class schema)')
            [CompletionResult]::new('--health-url', '--health-url', [CompletionResultType]::ParameterName, 'Share breaker health through Redis (overrides CCSWITCH_HEALTH_URL)')
            [CompletionResult]::new('--max-inflight', '--max-inflight', [CompletionResultType]::ParameterName, 'Most requests in flight per provider, e.g. zhipu=3,dashscope=2 (overrides CCSWITCH_MAX_INFLIGHT); the learned limit never goes above it')
            [CompletionResult]::new('--reactivate', '--reactivate', [CompletionResultType]::ParameterName, 'Close the breakers of a model (provider/model) or of everything (all)')
            [CompletionResult]::new('--disable', '--disable', [CompletionResultType]::ParameterName, 'Exclude a model (provider/model) from every run until reactivated')
            [CompletionResult]::new('--reset', '--reset', [CompletionResultType]::ParameterName, 'Forget the health history of a model (provider/model) or of everything (all)')
            [CompletionResult]::new('--batch', '--batch', [CompletionResultType]::ParameterName, 'Run the JSONL jobs in FILE (`-` = stdin); print one JSONL result per job, in order')
            [CompletionResult]::new('--jobs', '--jobs', [CompletionResultType]::ParameterName, 'Batch workers, each with its own Pi process (default: number of CPUs)')
            [CompletionResult]::new('--output', '--output', [CompletionResultType]::ParameterName, 'Batch results go to FILE (appended, one flushed line per finished job) instead of stdout')
            [CompletionResult]::new('--resume-from', '--resume-from', [CompletionResultType]::ParameterName, 'With --resume: also count the results recorded in FILE (another shard''s, an earlier setup''s), read before --output''s (repeatable)')
            [CompletionResult]::new('--shard', '--shard', [CompletionResultType]::ParameterName, 'Run only shard I of N (0 <= I < N), chosen by a stable hash of each job''s id')
            [CompletionResult]::new('--completions', '--completions', [CompletionResultType]::ParameterName, 'Print the completion script for SHELL (bash, zsh, fish, powershell, elvish) and exit')
            [CompletionResult]::new('--no-tools', '--no-tools', [CompletionResultType]::ParameterName, 'Forwarded to Pi: disable all tools')
            [CompletionResult]::new('--no-builtin-tools', '--no-builtin-tools', [CompletionResultType]::ParameterName, 'Forwarded to Pi: disable the built-in tools (read, bash, edit, write…)')
            [CompletionResult]::new('--no-context-files', '--no-context-files', [CompletionResultType]::ParameterName, 'Forwarded to Pi: do not load AGENTS.md / CLAUDE.md')
            [CompletionResult]::new('--no-skills', '--no-skills', [CompletionResultType]::ParameterName, 'Forwarded to Pi: do not discover or load skills')
            [CompletionResult]::new('--wait', '--wait', [CompletionResultType]::ParameterName, 'When every candidate is cooling down, wait for the first breaker to reopen (batch default)')
            [CompletionResult]::new('--no-wait', '--no-wait', [CompletionResultType]::ParameterName, 'Never wait for a breaker to reopen: end the run or job at once (single-run default)')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More diagnostics on stderr (-v: every failure and switch; -vv: debug)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More diagnostics on stderr (-v: every failure and switch; -vv: debug)')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print one JSON object instead of the plain answer (batch mode always prints JSONL)')
            [CompletionResult]::new('--explain', '--explain', [CompletionResultType]::ParameterName, 'Show which model would serve and why, and the full candidate order; send nothing')
            [CompletionResult]::new('--status', '--status', [CompletionResultType]::ParameterName, 'Show the health of every model (breakers, cooldowns, failures) and exit')
            [CompletionResult]::new('--doctor', '--doctor', [CompletionResultType]::ParameterName, 'Check pi, Node, the agent dir, the health store, the models and the tools, then exit')
            [CompletionResult]::new('--resume', '--resume', [CompletionResultType]::ParameterName, 'Skip the jobs that already have a success in --output FILE; run the rest')
            [CompletionResult]::new('--retry-failed', '--retry-failed', [CompletionResultType]::ParameterName, 'With --resume: run again the jobs whose recorded failure was in their input (bad attachment content, too large for every model, invalid lines)')
            [CompletionResult]::new('--rerun-changed', '--rerun-changed', [CompletionResultType]::ParameterName, 'With --resume: run again the answered jobs whose attachments changed since their answer')
            [CompletionResult]::new('--permanent-ok', '--permanent-ok', [CompletionResultType]::ParameterName, 'Exit 0 when the only jobs without an answer failed permanently, in their own input (still listed on stderr and in the results)')
            [CompletionResult]::new('-p', '-p', [CompletionResultType]::ParameterName, 'Ignored (accepted for compatibility with the old runner)')
            [CompletionResult]::new('--print', '--print', [CompletionResultType]::ParameterName, 'Ignored (accepted for compatibility with the old runner)')
            [CompletionResult]::new('--no-session', '--no-session', [CompletionResultType]::ParameterName, 'Ignored (sessions are always ephemeral)')
            [CompletionResult]::new('--no-extensions', '--no-extensions', [CompletionResultType]::ParameterName, 'Ignored (extensions are always disabled)')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
    })

    $completions.Where{ $_.CompletionText -like "$wordToComplete*" } |
        Sort-Object -Property ListItemText
}
