#!/usr/bin/env bash
# cnpool's controllers on the freetier-01 incident: no violation of I1–I7 in
# any seed (`cnpool sim` exits 1 on a violation and prints the first failing
# seed with the command that replays it).
set -euo pipefail
seeds=${CNPOOL_SIM_SEEDS:-200}
cnpool sim --scenario scenarios/freetier-01.yaml --seeds "$seeds"
