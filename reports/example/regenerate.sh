#!/usr/bin/env bash
# Regenerates reports/example: a sweep on the embedded simulated engine (no GPU needed) over the
# project's synthetic chat trace, and the self-contained HTML report built from its run folder.
# Run from anywhere; BUDGETTUNE overrides the command (default: budgettune on PATH).
# Takes about 1-2 minutes: the engine runs in real time. In the seed calibration, as the README's
# recorded example was made (README: Calibrations).
set -euo pipefail
cd "$(dirname "$0")/../.."
out=reports/example
bt=${BUDGETTUNE:-budgettune}
find "$out" -mindepth 1 ! -name regenerate.sh -delete
"$bt" sweep --engine sim --calibration seed --trace traces/chat.jsonl --requests 150 \
    --slo-tbt 25ms --slo-ttft 500ms -o "$out"
"$bt" report "$out"
