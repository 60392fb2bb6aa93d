#!/usr/bin/env bash
# The packages bench/gpu_session.sh needs that the device machine's image lacks, as wheels
# for its Python 3.12 (x86-64), into .whl/ (ignored by git, carried by the device tool).
# The versions are this machine's, so both sides run the same code.
set -euo pipefail
cd "$(dirname "$0")/.."
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
version() { .venv/bin/python -c "import importlib.metadata as m; print(m.version('$1'))"; }
rm -rf .whl && mkdir .whl
for package in lmdb simplejpeg grpcio-tools grpcio protobuf pybind11; do
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d .whl "$package==$(version "$package")"
done
du -sh .whl
