#!/usr/bin/env bash
# Installs budgettune's dependencies, with the test, torch, ray, aic and docs extras, into a virtual
# environment of their own, without budgettune itself: scripts/setup-dev.sh keeps it in a cache
# shared by every checkout, and each checkout's .venv layers its own editable budgettune on top.
# Usage: scripts/install-deps.sh VENV_DIR
#        scripts/install-deps.sh --requirements   (prints what it installs, one per line)
#   torch is pinned to the 2.13.0 CPU build, from PyTorch's CPU wheel index unless pip finds it
#   (PyPI's Linux torch is the multi-GB CUDA build plus NVIDIA wheels; scripts/torch-index.sh).
#   $PYTHON picks the interpreter that creates the venv (default python3.11, else python3).
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
torch_version=2.13.0
extras=(test torch ray aic docs)
python="${PYTHON:-$(command -v python3.11 || command -v python3)}"
log() { printf '[install-deps] %s\n' "$*" >&2; }

# What pyproject.toml asks for, read from it (never a second list to keep in step), plus the
# build backend an editable install of budgettune needs without build isolation.
requirements() {
    "$python" - "$repo_root/pyproject.toml" "${extras[@]}" <<'PY'
import sys, tomllib
with open(sys.argv[1], "rb") as file:
    project = tomllib.load(file)
wanted = list(project["project"]["dependencies"])
for extra in sys.argv[2:]:
    wanted += project["project"]["optional-dependencies"][extra]
wanted += project["build-system"]["requires"]
print("\n".join(wanted))
PY
    echo "torch==$torch_version+cpu"
}

if [[ "${1:-}" == "--requirements" ]]; then
    requirements
    exit 0
fi
venv="${1:?usage: install-deps.sh VENV_DIR | --requirements}"

start_s=$(date +%s)
[[ -x "$venv/bin/python" ]] || { log "creating $venv with $python"; "$python" -m venv "$venv"; }
"$venv/bin/python" -m pip install --quiet --upgrade pip
source "$repo_root/scripts/torch-index.sh"
mapfile -t index_args < <(torch_cpu_index_args "$venv/bin/python" "$torch_version")
log "installing torch $torch_version+cpu ${index_args[*]:-(pip finds it)}"
"$venv/bin/python" -m pip install --quiet "torch==$torch_version+cpu" "${index_args[@]}"
requirements_file="$(mktemp)"
trap 'rm -f "$requirements_file"' EXIT
requirements >"$requirements_file"
log "installing budgettune's dependencies with the ${extras[*]} extras"
"$venv/bin/python" -m pip install --quiet -r "$requirements_file" "${index_args[@]}"
log "done in $(( $(date +%s) - start_s )) s; venv size $(du -sh "$venv" | cut -f1)"
