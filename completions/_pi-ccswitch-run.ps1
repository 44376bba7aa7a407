
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
            [CompletionResult]::new('--provider', '--provider', [CompletionResultType]::ParameterName, 'Forwarded to Pi: provider of the starting model')
            [CompletionResult]::new('--model', '--model', [CompletionResultType]::ParameterName, 'Forwarded to Pi: starting model (pattern or provider/id[:thinking])')
            [CompletionResult]::new('--thinking', '--thinking', [CompletionResultType]::ParameterName, 'Forwarded to Pi: thinking level (off, minimal, low, medium, high, xhigh, max)')
            [CompletionResult]::new('--models', '--models', [CompletionResultType]::ParameterName, 'Forwarded to Pi: comma-separated model patterns; failover stays inside this scope')
            [CompletionResult]::new('--task-complexity', '--task-complexity', [CompletionResultType]::ParameterName, 'Pick a thinking level from the task: auto, low, medium or high (--thinking wins)')
            [CompletionResult]::new('--reactivate', '--reactivate', [CompletionResultType]::ParameterName, 'Close the breakers of a model (provider/model) or of everything (all)')
            [CompletionResult]::new('--disable', '--disable', [CompletionResultType]::ParameterName, 'Exclude a model (provider/model) from every run until reactivated')
            [CompletionResult]::new('--reset', '--reset', [CompletionResultType]::ParameterName, 'Forget the health history of a model (provider/model) or of everything (all)')
            [CompletionResult]::new('--batch', '--batch', [CompletionResultType]::ParameterName, 'Run the JSONL jobs in FILE (`-` = stdin); print one JSONL result per job, in order')
            [CompletionResult]::new('--jobs', '--jobs', [CompletionResultType]::ParameterName, 'Batch workers, each with its own Pi process (default: number of CPUs)')
            [CompletionResult]::new('--no-tools', '--no-tools', [CompletionResultType]::ParameterName, 'Forwarded to Pi: disable all tools')
            [CompletionResult]::new('--no-context-files', '--no-context-files', [CompletionResultType]::ParameterName, 'Forwarded to Pi: do not load AGENTS.md / CLAUDE.md')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More diagnostics on stderr (-v: every failure; -vv: debug)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More diagnostics on stderr (-v: every failure; -vv: debug)')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print one JSON object instead of the plain answer (batch mode always prints JSONL)')
            [CompletionResult]::new('--status', '--status', [CompletionResultType]::ParameterName, 'Show the health of every model (breakers, cooldowns, failures) and exit')
            [CompletionResult]::new('--doctor', '--doctor', [CompletionResultType]::ParameterName, 'Check pi, Node, the agent dir, the available models and the state file, then exit')
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
