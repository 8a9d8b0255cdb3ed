#!/usr/bin/env bash
# No source file under the given directory holds more than the given number
# of lines: a file that grows past it holds more than one job (issue 24).
#   ci/lint/file-lines.sh DIR MAX
set -euo pipefail
dir=$1 max=$2
over=$(find "$dir" -name '*.rs' -print0 | xargs -0 wc -l | awk -v max="$max" '$2 != "total" && $1 > max')
if [ -n "$over" ]; then
  echo "files over $max lines in $dir (split them by job):" >&2
  echo "$over" >&2
  exit 1
fi
echo "file-lines: OK, no file in $dir over $max lines"
