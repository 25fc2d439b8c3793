# Sourced by setup-dev.sh and install-vllm-cpu.sh (not run on its own).
#
# torch_cpu_index_args PYTHON VERSION prints, one per line, the pip arguments that make torch's
# CPU build VERSION+cpu resolvable by PYTHON's pip. PyPI carries no "+cpu" builds (its Linux torch
# is the CUDA build plus NVIDIA wheels); PyTorch's CPU wheel index does. When that pip can already
# find the build (a local wheel folder or a mirror in its configuration, or the build installed),
# nothing is printed, so a machine that cannot reach download.pytorch.org loses no time on it.
# $TORCH_INDEX_URL, when set, is always passed (a mirror of the index).
torch_cpu_index_args() {
    local python="$1" version="$2"
    if [[ -n "${TORCH_INDEX_URL:-}" ]]; then
        printf '%s\n' --extra-index-url "$TORCH_INDEX_URL"
    elif ! "$python" -m pip install --dry-run --no-deps --quiet "torch==$version+cpu" \
        >/dev/null 2>&1; then
        printf '%s\n' --extra-index-url https://download.pytorch.org/whl/cpu
    fi
}
