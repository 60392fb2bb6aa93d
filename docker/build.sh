#!/usr/bin/env bash
# The build stages of docker/Dockerfile.cpu and docker/Dockerfile.cuda, one step per image
# layer, so that both files build the same way from any Debian-like base with Python 3.11:
#   build.sh tools     a C++ compiler and Python's headers, unless the base has them
#   build.sh backend   the build backend (Makefile's BUILD_DEPS) in /opt/build-env
#   build.sh wheel     the project's wheel from the sources in /src, into /wheels
#   build.sh deps      the runtime venv /opt/poseidon: torch, then pyproject.toml's
#                      dependencies (and extras)
#   build.sh install   the wheel from /wheels into /opt/poseidon, without dependencies
# The wheel holds no torch, so the CPU and CUDA images share its layers (the C++ build).
# Settings come as build args: TORCH (the requirement for torch, installed first so that
# the project's range never picks another build), EXTRAS (pyproject.toml extras), and pip's
# own PIP_INDEX_URL, PIP_EXTRA_INDEX_URL, PIP_FIND_LINKS, PIP_CERT, which pip reads from the
# environment.
set -euo pipefail
here="$(dirname "$0")"
# A build arg that was not given is an empty variable, and pip reads an empty
# PIP_INDEX_URL as an index at "": drop the empty ones.
for name in PIP_INDEX_URL PIP_EXTRA_INDEX_URL PIP_FIND_LINKS PIP_CERT; do
  [ -n "${!name:-}" ] || unset "$name"
done
export PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1

requirements() {  # into REQS, one per element ('<' and ',' in them are shell-safe only quoted)
  mapfile -t REQS < <(python3 "$here/requirements.py" "$here/pyproject.toml" "$@")
}

case "${1:-}" in
  tools)
    missing=()
    command -v g++ >/dev/null || missing+=(g++)
    # python:3.11-slim ships Python.h beside its own interpreter; Debian's python3 needs -dev.
    python3 -c 'import os, sys, sysconfig
sys.exit(not os.path.isfile(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' \
      || missing+=(python3-dev)
    if [ ${#missing[@]} -gt 0 ]; then
      apt-get update -q
      apt-get install -y -q --no-install-recommends "${missing[@]}"
      rm -rf /var/lib/apt/lists/*
    fi
    ;;
  backend)
    requirements build
    python3 -m venv /opt/build-env
    /opt/build-env/bin/pip install -q "${REQS[@]}" cmake ninja
    ;;
  wheel)
    # --no-build-isolation: the backend just installed, not a fresh download per build.
    /opt/build-env/bin/pip wheel -q --no-build-isolation --no-deps -w /wheels /src
    ;;
  deps)
    : "${TORCH:?set the TORCH build arg}" "${EXTRAS=}"
    requirements run "$EXTRAS"
    python3 -m venv /opt/poseidon
    /opt/poseidon/bin/pip install -q "$TORCH" "${REQS[@]}"
    # Torch's wheel carries its own C++ test programs, a protoc and the headers for building
    # extensions (~190 MB on CPU): the final image has no compiler and runs no such test.
    torch_dir="$(/opt/poseidon/bin/python -c 'import os, torch; print(os.path.dirname(torch.__file__))')"
    rm -rf "$torch_dir/test" "$torch_dir/include"
    find "$torch_dir/bin" -maxdepth 1 -type f ! -name torch_shm_manager -delete
    ;;
  install)
    /opt/poseidon/bin/pip install -q --no-deps /wheels/*.whl
    # Fail the build, not the first run, when the comm core or the schema did not make it.
    /opt/poseidon/bin/python -c 'import caffe.proto.caffe_pb2, poseidon._C'
    ;;
  *)
    echo "usage: $0 tools|backend|wheel|deps|install" >&2
    exit 2
    ;;
esac
