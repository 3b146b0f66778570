#!/usr/bin/env bash
# Sets up PyTorch for braid's `torch` feature (tch) and exports what torch-sys's build needs.
#
#   source scripts/setup-torch.sh      # in a shell or from scripts/test.sh: exports the variables
#   bash scripts/setup-torch.sh        # only installs/checks, then prints the exports
#
# Idempotent: it reuses the virtual environment at ${BRAID_TORCH_VENV:-$HOME/.cache/braid/torch-venv}
# (outside the repository) and installs torch==2.13.0 from PyPI into it only when that exact
# version is missing (about 4.7 GB on a fresh machine). tch 0.26 links against PyTorch 2.13.0;
# torch-sys's build script finds it through LIBTORCH_USE_PYTORCH=1 and the `python` on PATH
# (`python` when VIRTUAL_ENV is set, `python3` otherwise), so both are exported here.
#
# Nobody needs LD_LIBRARY_PATH: braid-learners' build.rs bakes the torch library directory into
# its test binaries as an rpath, and hands it on to dependants (see crates/learners/build.rs).
#
# Safe under `set -euo pipefail` and safe to source from an interactive shell: it never calls
# `exit` or changes shell options when sourced; failures return non-zero.

braid_torch_setup() {
    local torch_version="2.13.0"
    local venv="${BRAID_TORCH_VENV:-${HOME}/.cache/braid/torch-venv}"
    local python="${venv}/bin/python"

    if [[ ! -x "${python}" ]]; then
        echo "setup-torch: creating virtual environment ${venv}" >&2
        mkdir -p "$(dirname "${venv}")" || return 1
        python3 -m venv "${venv}" || return 1
    fi

    local found
    found="$("${python}" -W ignore -c 'import torch; print(torch.__version__.split("+")[0])' 2>/dev/null || true)"
    if [[ "${found}" != "${torch_version}" ]]; then
        echo "setup-torch: installing torch==${torch_version} into ${venv} (found: '${found:-none}')" >&2
        "${python}" -m pip install --disable-pip-version-check "torch==${torch_version}" >&2 || return 1
        found="$("${python}" -W ignore -c 'import torch; print(torch.__version__.split("+")[0])')" || return 1
        if [[ "${found}" != "${torch_version}" ]]; then
            echo "setup-torch: expected torch ${torch_version}, the venv has ${found}" >&2
            return 1
        fi
    fi

    local torch_lib
    torch_lib="$("${python}" -W ignore -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "lib"))')" || return 1

    export BRAID_TORCH_VENV="${venv}"
    export VIRTUAL_ENV="${venv}"
    case ":${PATH}:" in
        *":${venv}/bin:"*) ;;
        *) export PATH="${venv}/bin:${PATH}" ;;
    esac
    export LIBTORCH_USE_PYTORCH=1
    # Informational: the directory torch-sys links against (build.rs reads torch-sys's own value).
    export BRAID_TORCH_LIB="${torch_lib}"

    echo "setup-torch: torch ${found} in ${venv}" >&2
    echo "export BRAID_TORCH_VENV='${venv}'"
    echo "export VIRTUAL_ENV='${venv}'"
    echo "export PATH='${venv}/bin':\"\$PATH\""
    echo "export LIBTORCH_USE_PYTORCH=1"
    echo "export BRAID_TORCH_LIB='${torch_lib}'"
}

if [[ "${BASH_SOURCE[0]}" == "${0}" ]]; then
    # Executed rather than sourced: strict mode is ours to set.
    set -euo pipefail
    braid_torch_setup
else
    braid_torch_setup >/dev/null
fi
