#!/bin/bash
# pi-ccswitch-nightly: every night, summarise the reports (*.md) in DIR that have no summary yet
# or were edited since theirs.
#
#   install -m 755 examples/cron-nightly.sh /usr/local/bin/pi-ccswitch-nightly
#   crontab:  30 2 * * * pi-ccswitch-nightly /srv/reports /etc/pi-ccswitch-run.env
#
# Exit status, for cron and whatever watches it:
#   0    every report has a summary, but those that can never have one (empty, not text, too
#        long for every model): DIR/batch.log names them and why, every night
#   1, 2, 124, ...  the batch's own exit code (pi-ccswitch-run --help); details in DIR/batch.log
#   75   the previous run still holds DIR/.batch.lock: nothing was started
#   78   the env file is missing, not this user's, or readable by others
# Every non-zero exit also says why in one line on stderr, which cron mails to MAILTO.
#
# bash, not sh: cron runs commands with /bin/sh, which may be dash, and without pipefail a
# pipeline's status is its last command's (a failed batch would end with the loop's 0).
set -euo pipefail

model='zhipu/glm-4.6'                       # the primary: your choice, not Pi's
models='zhipu/*,dashscope/*,deepseek-cn/*'  # where failover may go, in the order to try them
prompt='Summarise this report in five bullet points.'

me=pi-ccswitch-nightly
dir=${1:?usage: pi-ccswitch-nightly DIR [ENV_FILE]}
env_file=${2:-/etc/pi-ccswitch-run.env}

# Cron's environment holds no API keys: the "$ZHIPU_API_KEY" of models.json comes from an env
# file that only this user can read (KEY=value lines).
if [ ! -f "$env_file" ] || [ ! -O "$env_file" ]; then
  echo "$me: $env_file is missing or not owned by $(id -un)" >&2
  exit 78
fi
if [ -n "$(find "$env_file" -perm /077)" ]; then
  echo "$me: $env_file can be read by others; chmod 600 $env_file" >&2
  exit 78
fi
set -a
# shellcheck source=/dev/null
. "$env_file"
set +a

cd "$dir"
exec 9>> .batch.lock
if ! flock -n 9; then
  echo "$me: the previous run in $dir still holds .batch.lock; not starting" >&2
  exit 75
fi
echo "== $(date -u +%FT%TZ) $me starts" >> batch.log

# The job list, replaced whole: one line per report, its file name as the id.
find . -maxdepth 1 -name '*.md' -type f -printf '%f\n' | sort \
  | jq -R -c --arg prompt "$prompt" '{id: ., prompt: $prompt, files: [.]}' > jobs.jsonl.tmp
mv jobs.jsonl.tmp jobs.jsonl

# Tonight's results are the lines after these.
before=0
if [ -f results.jsonl ]; then before=$(wc -l < results.jsonl); fi

# --rerun-changed: a report edited since its answer is summarised again. --permanent-ok: a
# report that fails in itself is named in batch.log with why, and does not fail the night.
status=0
pi-ccswitch-run --batch jobs.jsonl --jobs 2 --no-tools --model "$model" --models "$models" \
  --output results.jsonl --resume --rerun-changed --permanent-ok 2>> batch.log || status=$?

# One summary per answered report, after a partial failure too (those answers are paid for).
# summarise tonight: write each answer, and log a summary replaced because its report changed;
# summarise missing: only the summaries that are not there (a night cut short before them).
summarise() {
  jq -r 'select(.ok) | [.id, (.answer | sub("\\s+$"; "") | @base64)] | @tsv' \
    | while IFS=$'\t' read -r id b64; do
        out=summaries/$id
        if [ "$1" = missing ] && [ -e "$out" ]; then continue; fi
        { printf '%s' "$b64" | base64 -d; echo; } > "$out.tmp"
        if [ -e "$out" ] && cmp -s "$out.tmp" "$out"; then
          rm "$out.tmp"
          continue
        fi
        if [ -e "$out" ]; then
          echo "$me: rewrote summaries/$id: the report changed since its summary" >> batch.log
        fi
        mv "$out.tmp" "$out"
      done
}
mkdir -p summaries
if [ -f results.jsonl ]; then
  tail -n +"$((before + 1))" results.jsonl | summarise tonight
  head -n "$before" results.jsonl | tac | summarise missing # the newest answer of each
fi

if [ "$status" -ne 0 ]; then
  echo "$me: the batch in $dir failed with exit $status; see $dir/batch.log" >&2
  exit "$status"
fi
