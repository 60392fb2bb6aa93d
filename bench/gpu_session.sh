#!/usr/bin/env bash
# Every GPU check the open issues ask for, in one run on a lent device machine (the `device`
# tool's H200: Python 3.12 with CUDA torch, nothing reachable), results under $OUT:
#   - the CUDA test suite (every test marked cuda, the layers' CUDA parity checks, and the
#     2-worker distributed run on one GPU in tests/caffe/parallel/test_cuda.py);
#   - bench/engine_vs_torch.py --device cuda with VGG19 at batch 32 (issue 11, target >= 0.95x);
#   - bench/data_throughput.py --device cuda on the machine's cores (target >= 5,000 images/s
#     into a CUDA blob);
#   - H200 compute profiles of the paper's models (poseidon profile --device cuda).
#
# Prepare here, once (the packages the device image lacks, as cp312 wheels; see
# ../.library/device/README.md):   bench/gpu_wheels.sh
# Then, with the device tool:       run(command="bash bench/gpu_session.sh", carry=[".whl"],
#                                       timeout_s=540)
# and copy what comes back into docs/benchmarks.md with the device's name.
set -uo pipefail
OUT=${OUT:-/tmp/gpu-out}
mkdir -p "$OUT"
exec > >(tee "$OUT/session.log") 2>&1
export PYTHONUNBUFFERED=1 GLOG_minloglevel=1
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
python3 -m pip install -q --no-build-isolation --no-deps \
  --config-settings=cmake.define.POSEIDON_BUILD_TESTS=OFF -e . \
  || { echo "the build failed: nothing else can run"; exit 1; }

step "CUDA tests"
timeout 240 python3 -m pytest -q -m cuda tests -p no:cacheprovider --junitxml="$OUT/cuda-tests.xml" \
  | tail -40

step "engine vs torch, VGG19 batch 32, CUDA"
timeout 120 python3 bench/engine_vs_torch.py --device cuda --models vgg19 --batch 32 --rounds 5

step "data pipeline into a CUDA blob"
cores=$(nproc)
timeout 150 python3 bench/data_throughput.py --device cuda --rounds 2 \
  --threads "1,$((cores / 4)),$((cores / 2)),$cores"

step "H200 compute profiles"
for model in vgg19_22k inception_v3; do
  timeout 60 python3 -m poseidon.cli profile --model "$model" --batch 32 --device cuda \
    --iterations 5 --warmup 2 -o "$OUT/$model.h200.json" || echo "profile of $model failed"
done
step "done"
