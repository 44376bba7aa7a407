#!/bin/bash
# pi-ccswitch-nightly-shard: the nightly summaries on N machines that share one directory (NFS
# or the like) and one Redis: machine I runs shard I of N.
#
#   install -m 755 examples/cron-three-machines.sh /usr/local/bin/pi-ccswitch-nightly-shard
#   crontab of machine I (0, 1 or 2):
#     30 2 * * * pi-ccswitch-nightly-shard I/3 /shared/reports /etc/pi-ccswitch-run.env
#
# In DIR, beside the reports (*.md):
#   jobs/DATE.jsonl        tonight's job list: written once, whole, by the first machine to
#                          start; the others read that one; never rewritten
#   results/shard-I.jsonl  the same name every night, so --resume skips what is paid for; the
#                          other shards' files (and a results.jsonl of the one-machine
#                          recipe) are read too, so a report that moves to another shard
#                          when the number of machines changes is not paid for again
#   logs/shard-I.log       this shard's stderr
#   locks/shard-I.lock     one lock per shard: a shard still running is not started twice,
#                          and the other shards are not held up by it
#   summaries/             one file per answered report
# Exit status: 0 when every report of this shard has a summary, but those that can never have
# one (named with why in logs/shard-I.log every night); the batch's own code (details
# in logs/shard-I.log); 75 when this shard still runs; 78 for the env file or a missing
# CCSWITCH_HEALTH_URL; 64 for a bad I/N. Each non-zero exit says why on stderr (cron mails it).
#
# bash, not sh: cron runs commands with /bin/sh, which may be dash, and without pipefail a
# pipeline's status is its last command's.
set -euo pipefail

model='zhipu/glm-4.6'                       # the primary: your choice, not Pi's
models='zhipu/*,dashscope/*,deepseek-cn/*'  # where failover may go, in the order to try them
prompt='Summarise this report in five bullet points.'

me=pi-ccswitch-nightly-shard
usage="usage: $me I/N DIR [ENV_FILE]"
shard=${1:?$usage}
dir=${2:?$usage}
env_file=${3:-/etc/pi-ccswitch-run.env}
if ! [[ $shard =~ ^([0-9]+)/([0-9]+)$ ]] || ((BASH_REMATCH[1] >= BASH_REMATCH[2])); then
  echo "$me: '$shard' is not a shard I/N with 0 <= I < N; $usage" >&2
  exit 64
fi
i=${BASH_REMATCH[1]}

# Cron's environment holds no API keys: they, and the Redis URL, come from an env file that
# only this user can read (KEY=value lines).
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
if [ -z "${CCSWITCH_HEALTH_URL:-}" ]; then
  echo "$me: CCSWITCH_HEALTH_URL is not set in $env_file; the machines would not share health" >&2
  exit 78
fi

cd "$dir"
mkdir -p jobs results logs locks summaries
exec 9>> "locks/shard-$i.lock"
if ! flock -n 9; then
  echo "$me: shard $shard is still running in $dir (locks/shard-$i.lock is held); not starting" >&2
  exit 75
fi
log=logs/shard-$i.log
echo "== $(date -u +%FT%TZ) $me $shard on $(uname -n) starts" >> "$log"

# Tonight's job list. The first machine writes it under a name of its own and links it into
# place: `ln` never replaces a file and either succeeds or fails whole (over NFS too), so every
# machine reads one complete list that nobody is writing. Lists older than a week go.
jobs=jobs/$(date +%F).jsonl
if [ ! -e "$jobs" ]; then
  tmp=jobs/.$(uname -n).$$.tmp
  find . -maxdepth 1 -name '*.md' -type f -printf '%f\n' | sort \
    | jq -R -c --arg prompt "$prompt" '{id: ., prompt: $prompt, files: [.]}' > "$tmp"
  ln "$tmp" "$jobs" 2> /dev/null || true # another machine was first: use its list
  rm -f "$tmp"
fi
find jobs -name '*.jsonl' -mtime +7 -delete

# Answers recorded elsewhere count too: the other shards' and the one-machine recipe's.
from=()
for f in results/shard-*.jsonl results.jsonl; do
  if [ -f "$f" ] && [ "$f" != "results/shard-$i.jsonl" ]; then from+=(--resume-from "$f"); fi
done
results=results/shard-$i.jsonl
before=0
if [ -f "$results" ]; then before=$(wc -l < "$results"); fi

# --rerun-changed: an edited report is summarised again; --permanent-ok: a report that fails in
# itself is named in the log with why, and does not fail the night.
status=0
pi-ccswitch-run --batch "$jobs" --shard "$shard" --jobs 2 --no-tools \
  --model "$model" --models "$models" --output "$results" --resume --rerun-changed \
  --permanent-ok "${from[@]}" 2>> "$log" || status=$?

# One summary per answered report of this shard, after a partial failure too (see
# cron-nightly.sh: tonight's answers are written, older ones only where a summary is missing).
summarise() {
  jq -r 'select(.ok) | [.id, (.answer | sub("\\s+$"; "") | @base64)] | @tsv' \
    | while IFS=$'\t' read -r id b64; do
        out=summaries/$id
        if [ "$1" = missing ] && [ -e "$out" ]; then continue; fi
        { printf '%s' "$b64" | base64 -d; echo; } > "$out.tmp.$i"
        if [ -e "$out" ] && cmp -s "$out.tmp.$i" "$out"; then
          rm "$out.tmp.$i"
          continue
        fi
        if [ -e "$out" ]; then
          echo "$me: rewrote summaries/$id: the report changed since its summary" >> "$log"
        fi
        mv "$out.tmp.$i" "$out"
      done
}
if [ -f "$results" ]; then
  tail -n +"$((before + 1))" "$results" | summarise tonight
  head -n "$before" "$results" | tac | summarise missing # the newest answer of each
fi

if [ "$status" -ne 0 ]; then
  echo "$me: shard $shard in $dir failed with exit $status; see $dir/$log" >&2
  exit "$status"
fi
