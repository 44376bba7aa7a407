complete -c pi-ccswitch-run -l timeout-ms -d 'Deadline in milliseconds for the run, or for each job in batch mode (exit 124 when it passes)' -r
complete -c pi-ccswitch-run -l tools -d 'Forwarded to Pi: comma-separated allowlist of tools (e.g. read,ls)' -r
complete -c pi-ccswitch-run -l exclude-tools -d 'Forwarded to Pi: comma-separated denylist of tools (e.g. bash,write)' -r
complete -c pi-ccswitch-run -l system-prompt -d 'Forwarded to Pi: replace Pi\'s coding-assistant system prompt with TEXT' -r
complete -c pi-ccswitch-run -l append-system-prompt -d 'Forwarded to Pi: append TEXT to the system prompt (repeatable)' -r
complete -c pi-ccswitch-run -l provider -d 'Forwarded to Pi: provider of the starting model' -r
complete -c pi-ccswitch-run -l model -d 'Forwarded to Pi: starting model (pattern or provider/id[:thinking])' -r
complete -c pi-ccswitch-run -l thinking -d 'Forwarded to Pi: thinking level (off, minimal, low, medium, high, xhigh, max)' -r
complete -c pi-ccswitch-run -l models -d 'Comma-separated model patterns (Pi\'s syntax, resolved here); failover stays inside this scope' -r
complete -c pi-ccswitch-run -l task-complexity -d 'Pick a thinking level from the task: auto, low, medium or high (--thinking wins)' -r -f -a "auto\t''
low\t''
medium\t''
high\t''"
complete -c pi-ccswitch-run -l max-wait -d 'The most one run or job may wait in all — for breakers, stated resets, capacity slots, a busy key\'s back-off — e.g. 30s; then it fails (exit 1) (overrides CCSWITCH_MAX_WAIT)' -r
complete -c pi-ccswitch-run -l prefer-primary -d 'Wait up to DURATION for the primary model when its provider states when its limit resets (or pauses it for capacity), instead of going to the backups, e.g. 10m (overrides CCSWITCH_PREFER_PRIMARY)' -r
complete -c pi-ccswitch-run -l max-cost -d 'Spend cap: once this run\'s recorded cost reaches COST no new job or attempt starts (exit 3); PROVIDER=COST caps one provider (skipped once reached). Repeatable, comma-separated' -r
complete -c pi-ccswitch-run -l output-schema -d 'The answer must be one JSON value valid against the JSON Schema in FILE; it is printed on one line. A non-conforming answer is asked again once, then fails over (class schema)' -r
complete -c pi-ccswitch-run -l health-url -d 'Share breaker health through Redis (overrides CCSWITCH_HEALTH_URL)' -r
complete -c pi-ccswitch-run -l max-inflight -d 'Most requests in flight per provider, e.g. zhipu=3,dashscope=2 (overrides CCSWITCH_MAX_INFLIGHT); the learned limit never goes above it' -r
complete -c pi-ccswitch-run -l reactivate -d 'Close the breakers of a model (provider/model) or of everything (all)' -r
complete -c pi-ccswitch-run -l disable -d 'Exclude a model (provider/model) from every run until reactivated' -r
complete -c pi-ccswitch-run -l reset -d 'Forget the health history of a model (provider/model) or of everything (all)' -r
complete -c pi-ccswitch-run -l batch -d 'Run the JSONL jobs in FILE (`-` = stdin); print one JSONL result per job, in order' -r
complete -c pi-ccswitch-run -l jobs -d 'Batch workers, each with its own Pi process (default: number of CPUs)' -r
complete -c pi-ccswitch-run -l output -d 'Batch results go to FILE (appended, one flushed line per finished job) instead of stdout' -r
complete -c pi-ccswitch-run -l resume-from -d 'With --resume: also count the results recorded in FILE (another shard\'s, an earlier setup\'s), read before --output\'s (repeatable)' -r
complete -c pi-ccswitch-run -l shard -d 'Run only shard I of N (0 <= I < N), chosen by a stable hash of each job\'s id' -r
complete -c pi-ccswitch-run -l completions -d 'Print the completion script for SHELL (bash, zsh, fish, powershell, elvish) and exit' -r -f -a "bash\t''
elvish\t''
fish\t''
powershell\t''
zsh\t''"
complete -c pi-ccswitch-run -l no-tools -d 'Forwarded to Pi: disable all tools'
complete -c pi-ccswitch-run -l no-builtin-tools -d 'Forwarded to Pi: disable the built-in tools (read, bash, edit, write…)'
complete -c pi-ccswitch-run -l no-context-files -d 'Forwarded to Pi: do not load AGENTS.md / CLAUDE.md'
complete -c pi-ccswitch-run -l no-skills -d 'Forwarded to Pi: do not discover or load skills'
complete -c pi-ccswitch-run -l wait -d 'When every candidate is cooling down, wait for the first breaker to reopen (batch default)'
complete -c pi-ccswitch-run -l no-wait -d 'Never wait for a breaker to reopen: end the run or job at once (single-run default)'
complete -c pi-ccswitch-run -s v -l verbose -d 'More diagnostics on stderr (-v: every failure and switch; -vv: debug)'
complete -c pi-ccswitch-run -l json -d 'Print one JSON object instead of the plain answer (batch mode always prints JSONL)'
complete -c pi-ccswitch-run -l explain -d 'Show which model would serve and why, and the full candidate order; send nothing'
complete -c pi-ccswitch-run -l status -d 'Show the health of every model (breakers, cooldowns, failures) and exit'
complete -c pi-ccswitch-run -l doctor -d 'Check pi, Node, the agent dir, the health store, the models and the tools, then exit'
complete -c pi-ccswitch-run -l resume -d 'Skip the jobs that already have a success in --output FILE; run the rest'
complete -c pi-ccswitch-run -l retry-failed -d 'With --resume: run again the jobs whose recorded failure was in their input (bad attachment content, too large for every model, invalid lines)'
complete -c pi-ccswitch-run -l rerun-changed -d 'With --resume: run again the answered jobs whose attachments changed since their answer'
complete -c pi-ccswitch-run -l permanent-ok -d 'Exit 0 when the only jobs without an answer failed permanently, in their own input (still listed on stderr and in the results)'
complete -c pi-ccswitch-run -s p -l print -d 'Ignored (accepted for compatibility with the old runner)'
complete -c pi-ccswitch-run -l no-session -d 'Ignored (sessions are always ephemeral)'
complete -c pi-ccswitch-run -l no-extensions -d 'Ignored (extensions are always disabled)'
complete -c pi-ccswitch-run -s h -l help -d 'Print help'
complete -c pi-ccswitch-run -s V -l version -d 'Print version'
