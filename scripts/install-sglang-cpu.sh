#!/usr/bin/env bash
# Installs SGLang's CPU path into its own virtual environment, for budgettune's `sglang` tests and
# for CPU users. Usage: scripts/install-sglang-cpu.sh [VENV_DIR]
#   VENV_DIR (or $BUDGETTUNE_SGLANG_VENV) defaults to .venv-sglang in the repository root.
#   $PYTHON picks the interpreter that creates the venv (default python3.11, else python3).
# What goes in, and why (README, "SGLang on a CPU"):
#   1. torch 2.13.0+cpu (PyPI's Linux torch is the CUDA build; scripts/torch-index.sh).
#   2. sglang 0.5.23 with --no-deps: its requirements pull torch 2.14.1 for CUDA and ~40 CUDA
#      packages. Then scripts/sglang-cpu-requirements.txt, what it imports on a CPU, found by
#      trial, with torch held at 2.13.0+cpu. triton is among them: SGLang imports it
#      unconditionally (it never runs on a CPU).
#   3. torchvision 0.28.0 (SGLang's model configs import it): PyTorch's CPU build when pip can
#      reach it, else PyPI's CUDA build with the two-line patch below.
#   4. scripts/sglang_cpu_shim: the `sgl_kernel` names SGLang imports on a CPU (the registry's
#      sgl-kernel wheels are CUDA builds; SGLang's CPU kernels are built from its source tree).
# Idempotent: when the venv already has this sglang, torch, torchvision and shim and imports them,
# nothing is done. Any failing step stops the script (exit != 0).
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${1:-${BUDGETTUNE_SGLANG_VENV:-$repo_root/.venv-sglang}}"
sglang_version=0.5.23
torch_version=2.13.0
torchvision_version=0.28.0  # the release built against torch 2.13
python="${PYTHON:-$(command -v python3.11 || command -v python3)}"
requirements="$repo_root/scripts/sglang-cpu-requirements.txt"
shim="$repo_root/scripts/sglang_cpu_shim"
shim_version="$(sed -n 's/^version = "\(.*\)"/\1/p' "$shim/pyproject.toml")"

log() { printf '[install-sglang-cpu] %s\n' "$*" >&2; }

installed_ok() {
    [[ -x "$venv/bin/python" ]] || return 1
    SGLANG_USE_CPU_ENGINE=1 "$venv/bin/python" - "$sglang_version" "$torch_version+cpu" \
        "$shim_version" <<'PY' 2>/dev/null
import importlib.metadata as md, importlib, sys
want = dict(zip(("sglang", "torch", "budgettune-sgl-kernel-cpu-shim"), sys.argv[1:]))
for module in ("sgl_kernel", "torchvision", "triton", "sglang.srt.utils"):
    importlib.import_module(module)  # must import, not just be listed
if any(md.version(name) != version for name, version in want.items()):
    sys.exit(1)
for cuda_build in ("sgl-kernel", "sglang-kernel"):  # would shadow the shim
    try:
        md.version(cuda_build)
        sys.exit(1)
    except md.PackageNotFoundError:
        pass
PY
}

# PyPI's torchvision is a CUDA build: its C++ ops (_C.so) need libtorch_cuda and do not load
# beside the CPU torch. torchvision handles that (extension._has_ops() is False; every other
# operator registration checks it), except for the fake kernels of nms and qnms in
# _meta_registrations.py, which register unguarded and fail at import ("operator
# torchvision::nms does not exist"). The patch guards those two as the rest of the file is
# guarded. SGLang's model configs only import torchvision; no op of it runs for a text model.
patch_torchvision() {
    local site meta
    site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
    meta="$site/torchvision/_meta_registrations.py"
    sed -i -E 's/^@torch\.library\.register_fake\("torchvision::(q?nms)"\)$/@(torch.library.register_fake("torchvision::\1") if torchvision.extension._has_ops() else (lambda fn: fn))/' "$meta"
    [[ $(grep -c '_has_ops() else (lambda fn: fn))' "$meta") -eq 2 ]] \
        || { log "ERROR: torchvision's nms/qnms registrations were not found in $meta"; exit 1; }
}

start_s=$(date +%s)
if installed_ok; then
    log "sglang $sglang_version (CPU) already installed in $venv; nothing to do"
else
    if [[ ! -x "$venv/bin/python" ]]; then
        log "creating venv $venv with $python"
        "$python" -m venv "$venv"
    fi
    pip=("$venv/bin/python" -m pip)
    "${pip[@]}" install --upgrade --quiet pip
    source "$repo_root/scripts/torch-index.sh"
    mapfile -t index_args < <(torch_cpu_index_args "$venv/bin/python" "$torch_version")
    log "pip install torch==$torch_version+cpu ${index_args[*]:-(pip finds it)}"
    "${pip[@]}" install --quiet "torch==$torch_version+cpu" "${index_args[@]}"
    log "pip install --no-deps sglang==$sglang_version, then its CPU imports (~1 GB of it triton)"
    "${pip[@]}" install --quiet --no-deps "sglang==$sglang_version"
    constraints="$(mktemp)"
    trap 'rm -f "$constraints"' EXIT
    echo "torch==$torch_version+cpu" >"$constraints"
    # pip then lists SGLang's own CUDA requirements as unmet: expected, and left out here
    "${pip[@]}" install --quiet -r "$requirements" -c "$constraints" "${index_args[@]}" 2>&1 \
        | { grep -vE "^sglang $sglang_version requires |dependency resolver does not" || true; } >&2

    cpu_index="${TORCH_INDEX_URL:-https://download.pytorch.org/whl/cpu}"
    if "${pip[@]}" install --quiet --no-deps --timeout 15 --retries 0 \
        "torchvision==$torchvision_version+cpu" --extra-index-url "$cpu_index" 2>/dev/null; then
        log "torchvision $torchvision_version+cpu from $cpu_index"
    else
        log "torchvision's CPU build is not reachable: PyPI's $torchvision_version, patched"
        "${pip[@]}" install --quiet --no-deps --force-reinstall "torchvision==$torchvision_version"
        patch_torchvision
    fi

    log "installing the sgl_kernel CPU shim $shim_version from $shim"
    build_dir="$(mktemp -d)"
    cp -r "$shim/." "$build_dir"  # build outside the checkout: no build/ or egg-info left there
    "${pip[@]}" install --quiet --no-deps --no-build-isolation --force-reinstall "$build_dir"
    rm -rf "$build_dir"
    installed_ok || {
        log "ERROR: sglang does not import cleanly from $venv after the install"
        exit 1
    }
fi

log "done in $(( $(date +%s) - start_s )) s; venv size $(du -sh "$venv" | cut -f1)"
echo "sglang $sglang_version ($venv/bin/python -m sglang.launch_server; env SGLANG_USE_CPU_ENGINE=1)"
