
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
            cand --tools 'Forwarded to Pi: comma-separated allowlist of tools (e.g. read,ls)'
            cand --exclude-tools 'Forwarded to Pi: comma-separated denylist of tools (e.g. bash,write)'
            cand --system-prompt 'Forwarded to Pi: replace Pi''s coding-assistant system prompt with TEXT'
            cand --append-system-prompt 'Forwarded to Pi: append TEXT to the system prompt (repeatable)'
            cand --provider 'Forwarded to Pi: provider of the starting model'
            cand --model 'Forwarded to Pi: starting model (pattern or provider/id[:thinking])'
            cand --thinking 'Forwarded to Pi: thinking level (off, minimal, low, medium, high, xhigh, max)'
            cand --models 'Comma-separated model patterns (Pi''s syntax, resolved here); failover stays inside this scope'
            cand --task-complexity 'Pick a thinking level from the task: auto, low, medium or high (--thinking wins)'
            cand --max-wait 'The most one run or job may wait in all — for breakers, stated resets, capacity slots, a busy key''s back-off — e.g. 30s; then it fails (exit 1) (overrides CCSWITCH_MAX_WAIT)'
            cand --prefer-primary 'Wait up to DURATION for the primary model when its provider states when its limit resets (or pauses it for capacity), instead of going to the backups, e.g. 10m (overrides CCSWITCH_PREFER_PRIMARY)'
            cand --max-cost 'Spend cap: once this run''s recorded cost reaches COST no new job or attempt starts (exit 3); PROVIDER=COST caps one provider (skipped once reached). Repeatable, comma-separated'
            cand --output-schema 'The answer must be one JSON value valid against the JSON Schema in FILE; it is printed on one line. A non-conforming answer is asked again once, then fails over (class schema)'
            cand --health-url 'Share breaker health through Redis (overrides CCSWITCH_HEALTH_URL)'
            cand --max-inflight 'Most requests in flight per provider, e.g. zhipu=3,dashscope=2 (overrides CCSWITCH_MAX_INFLIGHT); the learned limit never goes above it'
            cand --reactivate 'Close the breakers of a model (provider/model) or of everything (all)'
            cand --disable 'Exclude a model (provider/model) from every run until reactivated'
            cand --reset 'Forget the health history of a model (provider/model) or of everything (all)'
            cand --batch 'Run the JSONL jobs in FILE (`-` = stdin); print one JSONL result per job, in order'
            cand --jobs 'Batch workers, each with its own Pi process (default: number of CPUs)'
            cand --output 'Batch results go to FILE (appended, one flushed line per finished job) instead of stdout'
            cand --resume-from 'With --resume: also count the results recorded in FILE (another shard''s, an earlier setup''s), read before --output''s (repeatable)'
            cand --shard 'Run only shard I of N (0 <= I < N), chosen by a stable hash of each job''s id'
            cand --completions 'Print the completion script for SHELL (bash, zsh, fish, powershell, elvish) and exit'
            cand --no-tools 'Forwarded to Pi: disable all tools'
            cand --no-builtin-tools 'Forwarded to Pi: disable the built-in tools (read, bash, edit, write…)'
            cand --no-context-files 'Forwarded to Pi: do not load AGENTS.md / CLAUDE.md'
            cand --no-skills 'Forwarded to Pi: do not discover or load skills'
            cand --wait 'When every candidate is cooling down, wait for the first breaker to reopen (batch default)'
            cand --no-wait 'Never wait for a breaker to reopen: end the run or job at once (single-run default)'
            cand -v 'More diagnostics on stderr (-v: every failure and switch; -vv: debug)'
            cand --verbose 'More diagnostics on stderr (-v: every failure and switch; -vv: debug)'
            cand --json 'Print one JSON object instead of the plain answer (batch mode always prints JSONL)'
            cand --explain 'Show which model would serve and why, and the full candidate order; send nothing'
            cand --status 'Show the health of every model (breakers, cooldowns, failures) and exit'
            cand --doctor 'Check pi, Node, the agent dir, the health store, the models and the tools, then exit'
            cand --resume 'Skip the jobs that already have a success in --output FILE; run the rest'
            cand --retry-failed 'With --resume: run again the jobs whose recorded failure was in their input (bad attachment content, too large for every model, invalid lines)'
            cand --rerun-changed 'With --resume: run again the answered jobs whose attachments changed since their answer'
            cand --permanent-ok 'Exit 0 when the only jobs without an answer failed permanently, in their own input (still listed on stderr and in the results)'
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
