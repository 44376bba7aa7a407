
use builtin;
use str;

set edit:completion:arg-completer[pi-ccswitch-run] = {|@words|
    fn spaces {|n|
        builtin:repeat $n ' ' | str:join ''
    }
    fn cand {|text desc|
        edit:complex-candidate $text &display=$text' '(spaces (- 14 (wcswidth $text)))$desc
    }
    var command = 'pi-ccswitch-run'
    for word $words[1..-1] {
        if (str:has-prefix $word '-') {
            break
        }
        set command = $command';'$word
    }
    var completions = [
        &'pi-ccswitch-run'= {
            cand --timeout-ms 'Deadline in milliseconds for the run, or for each job in batch mode (exit 124 when it passes)'
            cand --provider 'Forwarded to Pi: provider of the starting model'
            cand --model 'Forwarded to Pi: starting model (pattern or provider/id[:thinking])'
            cand --thinking 'Forwarded to Pi: thinking level (off, minimal, low, medium, high, xhigh, max)'
            cand --models 'Forwarded to Pi: comma-separated model patterns; failover stays inside this scope'
            cand --task-complexity 'Pick a thinking level from the task: auto, low, medium or high (--thinking wins)'
            cand --reactivate 'Close the breakers of a model (provider/model) or of everything (all)'
            cand --disable 'Exclude a model (provider/model) from every run until reactivated'
            cand --reset 'Forget the health history of a model (provider/model) or of everything (all)'
            cand --batch 'Run the JSONL jobs in FILE (`-` = stdin); print one JSONL result per job, in order'
            cand --jobs 'Batch workers, each with its own Pi process (default: number of CPUs)'
            cand --no-tools 'Forwarded to Pi: disable all tools'
            cand --no-context-files 'Forwarded to Pi: do not load AGENTS.md / CLAUDE.md'
            cand -v 'More diagnostics on stderr (-v: every failure; -vv: debug)'
            cand --verbose 'More diagnostics on stderr (-v: every failure; -vv: debug)'
            cand --json 'Print one JSON object instead of the plain answer (batch mode always prints JSONL)'
            cand --status 'Show the health of every model (breakers, cooldowns, failures) and exit'
            cand --doctor 'Check pi, Node, the agent dir, the available models and the state file, then exit'
            cand -p 'Ignored (accepted for compatibility with the old runner)'
            cand --print 'Ignored (accepted for compatibility with the old runner)'
            cand --no-session 'Ignored (sessions are always ephemeral)'
            cand --no-extensions 'Ignored (extensions are always disabled)'
            cand -h 'Print help'
            cand --help 'Print help'
            cand -V 'Print version'
            cand --version 'Print version'
        }
    ]
    $completions[$command]
}
