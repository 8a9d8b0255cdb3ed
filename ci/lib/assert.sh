# Assertions for the shell end-to-end suites. Source it, call `check` (with
# `wait_for` for what comes in time), and end with `summary`, which prints
# "N passed, N failed" and sets the exit code.
passed=0
failed=0

# check NAME COMMAND...: runs COMMAND; passes when it exits 0.
check() {
  local name=$1; shift
  local out
  if out=$("$@" 2>&1); then
    passed=$((passed + 1)); printf 'ok   %s\n' "$name"
  else
    failed=$((failed + 1)); printf 'FAIL %s\n%s\n' "$name" "$out" | sed '2,$s/^/     /'
  fi
}

# expect_eq WANT GOT: a command for check.
expect_eq() {
  [[ $1 == "$2" ]] || { printf 'want: %s\ngot:  %s\n' "$1" "$2"; return 1; }
}

# expect_match REGEX TEXT: a command for check.
expect_match() {
  [[ $2 =~ $1 ]] || { printf 'want a match for: %s\ngot: %s\n' "$1" "$2"; return 1; }
}

# wait_for SECONDS COMMAND...: retries COMMAND every 0.2 s until it exits 0.
wait_for() {
  local deadline=$(( $(date +%s) + $1 )); shift
  until "$@" >/dev/null 2>&1; do
    (( $(date +%s) >= deadline )) && return 1
    sleep 0.2
  done
}

summary() {
  printf '%s passed, %s failed\n' "$passed" "$failed"
  [[ $failed -eq 0 ]]
}
