#!/usr/bin/env bash
# ci/lint/module-cycles.py on its fixtures: the cycle fixture fails naming the
# cycle and where each edge comes from; the acyclic one passes with exactly
# the edges it has, so a comment, string or plain doc mention read as a
# reference (each would close a cycle there) or a reference missed fails.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
source "$repo/ci/lib/assert.sh"
cd "$repo"
script=ci/lint/module-cycles.py
fixtures=ci/lint/fixtures

cycle_out=$(python3 "$script" "$fixtures/cycle"); cycle_rc=$?
check "the cycle fixture exits 1" expect_eq 1 "$cycle_rc"
check "the cycle fixture names the cycle and each edge's file:line" expect_eq "\
cycle: a -> b -> c -> a
    a -> b: $fixtures/cycle/a.rs:1
    b -> c: $fixtures/cycle/b.rs:1
    c -> a: $fixtures/cycle/c.rs:4" "$(head -n 4 <<<"$cycle_out")"

acyclic_out=$(python3 "$script" "$fixtures/acyclic"); acyclic_rc=$?
check "the acyclic fixture exits 0" expect_eq 0 "$acyclic_rc"
check "the acyclic fixture counts its 4 modules and 5 edges" \
  expect_eq "module-cycles: OK, 4 modules, 5 edges, no cycle in $fixtures/acyclic" "$acyclic_out"

summary
