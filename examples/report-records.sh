#!/bin/sh
# One JSON record per report: every REPORTS/*.md gets RECORDS/<name>.json, a record that
# report-schema.json validates (the runner asks again once, then another model). A report
# already recorded is not paid for again (--resume) unless it changed (--rerun-changed).
# Usage: report-records.sh REPORTS RECORDS    (keys and PI_CODING_AGENT_DIR as for any run)
set -eu
reports=$1
records=$2
schema=$(dirname "$0")/report-schema.json
mkdir -p "$records/.batch"
for f in "$reports"/*.md; do
  [ -e "$f" ] || continue
  jq -cn --arg id "$(basename "$f" .md)" --arg f "$f" \
    '{id: $id, files: [$f], prompt: "Make a record of this report: its title, its date, its status and its three main points."}'
done > "$records/.batch/jobs.jsonl"
status=0
pi-ccswitch-run --batch "$records/.batch/jobs.jsonl" --output "$records/.batch/results.jsonl" \
  --resume --rerun-changed --no-tools --output-schema "$schema" \
  --model zhipu/glm-4.6 --models 'zhipu/*,dashscope/*,deepseek-cn/*' || status=$?
# Each report's latest answer becomes its record file.
jq -c 'select(.ok) | [.id, .structured_output]' "$records/.batch/results.jsonl" |
  while IFS= read -r pair; do
    printf '%s\n' "$pair" | jq '.[1]' > "$records/$(printf '%s\n' "$pair" | jq -r '.[0]').json"
  done
exit "$status"
