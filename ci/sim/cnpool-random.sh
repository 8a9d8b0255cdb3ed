#!/usr/bin/env bash
# cnpool's controllers on scenarios built from each seed (`--scenario
# random`: pool sizes, claims, migrations and every fault kind drawn from the
# seed): no violation of I1–I7 in any seed.
set -euo pipefail
seeds=${CNPOOL_SIM_SEEDS:-300}
cnpool sim --scenario random --seeds "$seeds"
