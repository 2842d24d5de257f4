#!/usr/bin/env bash
# The head's list of regressions for `ci report` to judge with (sglang-pr-ab.yml's and
# sglang-pr-ab-report.yml's report jobs, run from the bot's checkout): the file $REGRESSIONS of
# the commit $HEAD_SHA, read from GitHub's contents API as data, never checked out, written over
# the bot's own ci/regressions.txt; an empty list when the head has no such file.
set -euo pipefail
list=ci/regressions.txt
: > "$list"
code=$(curl -sS --max-filesize 1048576 -o "$list.new" -w '%{http_code}' \
  -H "Authorization: Bearer $GITHUB_TOKEN" -H "Accept: application/vnd.github.raw+json" \
  "$GITHUB_API_URL/repos/$GITHUB_REPOSITORY/contents/$REGRESSIONS?ref=$HEAD_SHA") || true
case "$code" in
  200) mv "$list.new" "$list" ;;
  404) rm -f "$list.new" ;;
  *) echo "::error::$REGRESSIONS at $HEAD_SHA: GitHub answered HTTP $code" >&2; exit 1 ;;
esac
