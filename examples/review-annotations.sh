#!/bin/sh
# A CI step: review a diff into annotations on the pull request, one per finding. The runner
# holds the answer to review-schema.json (asked again once, then another model), so jq reads
# fields, never prose. Prints GitHub Actions workflow commands (::error file=…,line=…::…);
# exits as the runner did (0, or its code after an ::error line).
# Usage: review-annotations.sh DIFF_FILE    (keys and PI_CODING_AGENT_DIR as for any run)
set -eu
diff=$1
schema=$(dirname "$0")/review-schema.json
status=0
pi-ccswitch-run --json --no-tools --no-context-files --output-schema "$schema" \
  --model zhipu/glm-4.6 --models 'zhipu/*,dashscope/*,deepseek-cn/*' \
  @"$diff" "Review this diff. Report each problem with its file, its line in the new version, a severity and why." \
  > review.json || status=$?
if [ "$status" -ne 0 ]; then
  echo "::error::no review (exit $status): $(jq -r .error review.json)"
  exit "$status"
fi
# Workflow commands need %, CR and LF escaped in a message, and , and : too in a property.
jq -r '
  def esc: gsub("%"; "%25") | gsub("\r"; "%0D") | gsub("\n"; "%0A");
  def prop: esc | gsub(","; "%2C") | gsub(":"; "%3A");
  .structured_output.findings[]
  | "::\(.severity) file=\(.file | prop),line=\(.line)::\(.message | esc)"' review.json
