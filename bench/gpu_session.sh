#!/usr/bin/env bash
# Every GPU check the open issues ask for, in one run on a lent device machine (the `device`
# tool's H200: Python 3.12 with CUDA torch, nothing reachable), results under $OUT:
#   - the CUDA test suite (every test marked cuda, the layers' CUDA parity checks, and the
#     2-worker distributed run on one GPU in tests/caffe/parallel/test_cuda.py);
#   - bench/engine_vs_torch.py --device cuda with VGG19 at batch 32 (issue 11, target >= 0.95x);
#   - bench/data_throughput.py --device cuda on the machine's cores (target >= 5,000 images/s
#     into a CUDA blob);
#   - H200 compute profiles of VGG19-22K, ResNet-50 and Inception-V3 (poseidon profile
#     --device cuda), TF32 as the derived H100 profile and FP32 as Caffe, and the device's
#     rates for the cost model;
#   - which collectives work between two processes sharing one GPU (bench/shared_gpu_probe.py).
# Steps go in order of need, each under its own timeout, so that what ran comes back even if
# the device's time ends first.
#
# Prepare here, once (the packages the device image lacks, as cp312 wheels; see
# ../.library/device/README.md):   bench/gpu_wheels.sh
# Then, with the device tool:       run(command="GPU_SECONDS=480 bash bench/gpu_session.sh",
#                                       carry=[".whl"], timeout_s=500)
# (GPU_SECONDS: the tests get what is left of it after the build and the profiles. GPU_STEPS:
# which steps, e.g. GPU_STEPS="cuda_tests profiles_fp32" to re-run only those.) On
# 2026-12-04 the build took 40-70 s, the CUDA tests 76-126 s, the three profiles 60 s.
# and copy what comes back into docs/benchmarks.md with the device's name.
set -uo pipefail
OUT=${OUT:-/tmp/gpu-out}
mkdir -p "$OUT"
exec > >(tee "$OUT/session.log") 2>&1
export PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1 GLOG_minloglevel=1
step() { echo; echo "=== $* ($(date +%T))"; }

step "machine"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv || true
python3 -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name(0))"

step "install the carried wheels and build the project"
if compgen -G ".whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || { echo "wheel install failed"; exit 1; }
  export PYTHONPATH=/tmp/site
fi
python3 -c "import pybind11, google.protobuf as p; print('pybind11', pybind11.__version__,
  'protobuf', p.__version__)"
(PYTHONPATH= python3 -c "import pybind11; print('the image own pybind11', pybind11.__version__)")
c++ --version | head -1
export CMAKE_BUILD_PARALLEL_LEVEL=$(nproc)
# The image's own compiler (CXX=/opt/gcc/bin/g++ there) links libstdc++ statically: a second
# C++ runtime inside _C beside the shared one torch loads, whose locale facets don't match
# (a segfault at import, in ostream << double). The distribution's compiler links it shared.
if [ -x /usr/bin/g++ ]; then export CC=/usr/bin/gcc CXX=/usr/bin/g++; fi
rm -rf build/py  # a warm machine keeps it, with the compiler a CMake cache remembers
# The pybind11 this project builds with here (carried), not whatever the image has.
build() {
  python3 -m pip install -q --no-build-isolation --no-deps \
    --config-settings=cmake.define.POSEIDON_BUILD_TESTS=OFF \
    --config-settings=cmake.define.pybind11_DIR="$(python3 -c 'import pybind11; print(pybind11.get_cmake_dir())')" \
    --config-settings=cmake.build-type=RelWithDebInfo -e . \
    || { echo "the build failed: nothing else can run"; exit 1; }
}
extension() { echo "$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["platlib"])')"/poseidon/_C*.so; }
build
ldd $(extension) | grep "stdc++" || echo "_C links no shared libstdc++ (expect a crash)"

step "import check"
if ! timeout 60 python3 -c "import torch, poseidon._C, caffe.parallel; print('imports ok')"; then
  echo "importing the extension failed; a native backtrace:"
  timeout 120 cuda-gdb -q -batch -ex run -ex bt -ex "info sharedlibrary" \
    --args python3 -c "import torch, poseidon._C" 2>&1 | grep -v "^\[New Thread\|^\[Thread" | head -80
  exit 1
fi

# Each step is a function; GPU_STEPS picks which run and in what order (default: all, in order
# of need), so a second session can re-run only what the first left open.
# TF32 is the regime of the derived A100/H100 profiles (profile_derive.py); FP32 is Caffe's.
# profiles SUFFIX SECONDS [VAR=VALUE...]: the three models' profiles, to $OUT/<model>.SUFFIX.json.
profiles() {
  local suffix=$1 seconds=$2 model
  shift 2
  step "H200 compute profiles, $suffix"
  for model in vgg19_22k resnet50 inception_v3; do
    env "$@" timeout "$seconds" python3 -m poseidon.cli profile --model "$model" --batch 32 \
      --device cuda --iterations 5 --warmup 2 -o "$OUT/$model.$suffix.json" \
      || echo "profile of $model failed"
  done
}
profiles_tf32() { profiles h200 35 CAFFE_ALLOW_TF32=1; }
profiles_fp32() { profiles h200-fp32 40; }

cuda_tests() {
  step "CUDA tests"
  local left=$(( ${GPU_SECONDS:-400} - SECONDS - 10 ))
  timeout $(( left > 200 ? 200 : left )) python3 -m pytest -v -m cuda tests -p no:cacheprovider \
    --timeout 90 --junitxml="$OUT/cuda-tests.xml" > "$OUT/cuda-tests.log" 2>&1
  tail -30 "$OUT/cuda-tests.log"
}

rates() {
  step "device rates for the time-based cost model"
  timeout 40 python3 -m poseidon.cli profile --rates --device cuda --powersgd-rank 4
}

shared_gpu() {
  step "collectives between two processes on one GPU (the local stage when workers share it)"
  timeout 60 python3 bench/shared_gpu_probe.py
}

engine_vs_torch() {
  step "engine vs torch, VGG19 batch 32, CUDA"
  timeout 70 python3 bench/engine_vs_torch.py --device cuda --models vgg19 --batch 32 --rounds 3
}

data_pipeline() {
  step "data pipeline into a CUDA blob"
  local cores
  cores=$(nproc)
  timeout 70 python3 bench/data_throughput.py --device cuda --rounds 1 \
    --threads "1,$((cores / 2)),$cores"
}

for name in ${GPU_STEPS:-profiles_tf32 cuda_tests rates shared_gpu engine_vs_torch data_pipeline profiles_fp32}; do
  "$name"
done
step "done"
