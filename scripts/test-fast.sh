#!/usr/bin/env bash
# The fast tier: every test that starts no real engine (vLLM, SGLang), no browser and no Ray
# cluster, and takes no more than a few seconds (the embedded engine is fine). A few minutes on a
# 2-core machine: run it on every change.
# Usage: scripts/test-fast.sh [--all] [PYTEST_ARGS...]
#   --all         the fast tier, then every other test (the `slow`, `vllm`, `sglang` and `browser`
#                 ones: the engine tier), each test once: the README's test command, and CI's.
#   PYTEST_ARGS   passed to every pytest run (paths, -k, -x, ...).
#   $BUDGETTUNE_TEST_WORKERS  pytest-xdist workers for the tests that run side by side (default 2).
# Tests marked `timing` read the wall clock against the embedded engine or a socket: in the fast
# tier they run on their own after the others. In the engine tier they run beside one other
# worker (their verdicts keep 10+ ms of margin, and both sides were seen to hold so: 55 of 55
# tests, two workers, 2026-12-07). The real engines' tests pin vLLM or SGLang to core 0 and the
# client to core 1, and the `alone` tests start engines on both cores: those run on their own.
# .venv is made first when it is missing (scripts/setup-dev.sh --main-only).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
start_s=$(date +%s)

# The fast tier, written here once. Every other selection is built from it.
FAST_TIER="not vllm and not sglang and not browser and not slow"

run_all=0
if [[ "${1:-}" == "--all" ]]; then
    run_all=1
    shift
fi
[[ -x .venv/bin/python ]] || bash scripts/setup-dev.sh --main-only
workers="${BUDGETTUNE_TEST_WORKERS:-2}"

# stage NAME PYTEST_ARGS...: one pytest run, its seconds printed. "No test selected" (exit 5, a
# path or -k that leaves a stage empty) is not a failure.
stage() {
    local name="$1" stage_start_s rc=0
    shift
    stage_start_s=$(date +%s)
    echo "== test-fast.sh: $name"
    .venv/bin/python -m pytest "$@" || rc=$?
    echo "== test-fast.sh: $name took $(( $(date +%s) - stage_start_s )) s (exit $rc)"
    if [[ $rc -ne 0 && $rc -ne 5 ]]; then
        echo "test-fast.sh: failed in $(( $(date +%s) - start_s )) s"
        exit "$rc"
    fi
}

stage "fast tier, $workers workers" -m "($FAST_TIER) and not timing" \
    -n "$workers" --dist loadgroup "$@"
stage "fast tier, timing tests alone" -m "($FAST_TIER) and timing" -p no:xdist "$@"
echo "== test-fast.sh: the fast tier passed in $(( $(date +%s) - start_s )) s"
if [[ $run_all -eq 1 ]]; then
    ALONE="vllm or sglang or alone"
    stage "engine tier, $workers workers" -m "not ($FAST_TIER) and not ($ALONE)" \
        -n "$workers" --dist loadgroup "$@"
    stage "engine tier, real engines and tests using both cores, alone" \
        -m "not ($FAST_TIER) and ($ALONE)" -p no:xdist "$@"
fi
echo "== test-fast.sh took $(( $(date +%s) - start_s )) s"
