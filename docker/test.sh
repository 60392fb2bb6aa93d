#!/usr/bin/env bash
# Builds the CPU image and tests it, then a compose cluster of it, with podman (as root):
#   docker/test.sh [--keep-images] [--cuda]
# 1. a base image from Debian's packages (mmdebstrap), unless BASE names one already made;
# 2. docker/Dockerfile.cpu on that base, with this machine's pip settings (local wheels);
# 3. in the image: `caffe --version`, `poseidon --help`, `poseidon demo` (>= 97%) and a
#    pytest smoke subset (an image on top with pytest and tests/);
# 4. docker/compose.yaml under podman-compose: coordinator, 2 shards, 2 workers, each its own
#    container; trains LeNet to >= 97%; then again, killing worker 1 mid-run: every other
#    container must exit within 10 s, naming it.
# --cuda also builds docker/Dockerfile.cuda (torch's CUDA wheels: GB, minutes) and checks
# that `caffe device_query` in it says plainly that there is no GPU.
# Exit status: 0 passed, 1 failed, 77 skipped (not root, or podman cannot be had or run
# here; the reason on the last line). Everything the run starts or writes is removed at the
# end, also on failure or Ctrl-C; so are the images it built, unless --keep-images.
set -euo pipefail

REPO="$(cd "$(dirname "$0")/.." && pwd)"
RUN_ID="poseidon-test-$(od -An -N4 -tx1 /dev/urandom | tr -d ' \n')"
readonly REPO RUN_ID
readonly LABEL="org.poseidon.test.run=$RUN_ID"  # on every image and container of this run
readonly IMAGE="localhost/$RUN_ID/poseidon:cpu"
readonly PODMAN_COMPOSE="podman-compose==1.6.0"  # the version this script was tested with
readonly SKIPPED=77
# The pytest smoke subset (~30 s): the schema and a net; the comm core through its bindings;
# real node processes killed mid-round; JPEG decoding (the images extra); and one case of
# distributed == single process.
readonly SMOKE_TESTS=(
  tests/caffe/test_proto_schema.py
  tests/caffe/test_net.py
  tests/caffe/data/test_jpeg_fast.py
  tests/poseidon/test_bindings.py
  tests/poseidon/test_faults.py
  "tests/caffe/parallel/test_equivalence.py::test_distributed_equals_single_process[poseidon-auto-2-2]"
)
KEEP_IMAGES=0
CUDA=0
for arg in "$@"; do
  case "$arg" in
    --keep-images) KEEP_IMAGES=1 ;;
    --cuda) CUDA=1 ;;
    *) echo "usage: $0 [--keep-images] [--cuda]" >&2; exit 2 ;;
  esac
done

say() { echo "[test.sh] $*"; }
fail() { echo "[test.sh] FAILED: $*" >&2; exit 1; }
skip() { echo "docker/test.sh skipped: $*"; exit "$SKIPPED"; }

# ----- cleanup: whatever this run created, on any exit -----------------------------------
WORK=""
CHILD=""  # the long command running now, in the background so that a signal interrupts it
cleanup() {
  local status=$?
  trap - EXIT INT TERM
  if [ -n "$CHILD" ]; then kill "$CHILD" 2>/dev/null || true; wait "$CHILD" 2>/dev/null || true; fi
  if command -v podman >/dev/null; then
    # Compose's and our own containers both carry the run's label (--podman-run-args).
    mapfile -t containers < <(podman ps -aq --filter "label=$LABEL" 2>/dev/null || true)
    # A build stopped midway leaves buildah's working containers, which carry no label
    # (podman ps --filter passes them all): this run's hold its build arg in buildah.json.
    local store id
    store="$(podman info --format '{{.Store.GraphRoot}}/{{.Store.GraphDriverName}}-containers' 2>/dev/null || true)"
    for id in $(podman ps -aq --external --no-trunc 2>/dev/null || true); do
      if grep -qsF "$RUN_ID" "$store/$id/userdata/buildah.json"; then containers+=("$id"); fi
    done
    if [ ${#containers[@]} -gt 0 ]; then podman rm -f "${containers[@]}" >/dev/null 2>&1 || true; fi
    if [ "$KEEP_IMAGES" = 0 ]; then
      # Layers reused from an earlier run's cache carry that run's label and stay.
      mapfile -t images < <(podman images -aq --filter "label=$LABEL" 2>/dev/null || true)
      if [ ${#images[@]} -gt 0 ]; then podman rmi -f "${images[@]}" >/dev/null 2>&1 || true; fi
    else
      say "kept the images of this run: podman images --filter label=$LABEL"
    fi
  fi
  if [ -n "$WORK" ]; then rm -rf "$WORK"; fi
  exit "$status"
}
trap cleanup EXIT
trap 'say "interrupted (SIGINT); cleaning up"; exit 130' INT
trap 'say "interrupted (SIGTERM); cleaning up"; exit 143' TERM

# step NAME LIMIT_S COMMAND...: runs COMMAND (a program: `timeout` runs no shell function)
# with a time limit, its output in $WORK/NAME.log, shown (the end of it) only when it fails.
step() {
  local name=$1 limit=$2 status=0 start=$SECONDS
  shift 2
  timeout -k 10 "$limit" "$@" >"$WORK/$name.log" 2>&1 &
  CHILD=$!
  wait "$CHILD" || status=$?
  CHILD=""
  if [ "$status" != 0 ]; then
    tail -n 60 "$WORK/$name.log" >&2
    [ "$status" != 124 ] || fail "$name: no result within ${limit} s"
    fail "$name (exit status $status; its output above)"
  fi
  say "$name: ok ($((SECONDS - start)) s)"
}

# ----- what this needs: root, podman, runc, mmdebstrap ------------------------------------
[ "$(id -u)" = 0 ] || skip "needs root (rootful podman; run it as root)"
missing=()
for tool in podman runc mmdebstrap; do command -v "$tool" >/dev/null || missing+=("$tool"); done
if [ ${#missing[@]} -gt 0 ]; then
  command -v apt-get >/dev/null || skip "no apt-get to install ${missing[*]}"
  say "installing ${missing[*]} (apt-get)"
  { timeout 300 apt-get update -q && DEBIAN_FRONTEND=noninteractive timeout 600 \
      apt-get install -y -q "${missing[@]}"; } >/dev/null 2>&1 \
    || skip "apt-get could not install ${missing[*]}"
fi
WORK="$(mktemp -d "/tmp/$RUN_ID.XXXX")"
# Podman's settings for this run alone: runc, because crun fails on hybrid cgroups (as on
# this project's machines); rlimits no higher than the host's, which may not be raised; and
# the host's network, which reaches the package registries where podman's own may not.
cat >"$WORK/containers.conf" <<'EOF'
[containers]
default_ulimits = ["nofile=1024:1024", "nproc=1024:1024"]
netns = "host"
[engine]
runtime = "runc"
EOF
export CONTAINERS_CONF="$WORK/containers.conf"
podman info >/dev/null 2>&1 || skip "podman does not work here: $(podman info 2>&1 | tail -n 1)"
say "run $RUN_ID in $WORK; podman $(podman version --format '{{.Client.Version}}')"

# pip's settings here (environment, else pip's configuration), handed to the builds so that
# pip in the image finds what pip here finds; local wheels and indexes are mounted read-only
# at the same paths, and the certificates pip here trusts are trusted there. The CUDA build
# gets no find-links: a local CPU wheel of torch (2.13.0+cpu) would win over the registry's
# CUDA build of the same version (a local version label sorts higher).
BUILD_FLAGS=(--format docker --network host --label "$LABEL" --build-arg "POSEIDON_TEST_RUN=$RUN_ID"
             -v /etc/ssl/certs:/etc/ssl/certs:ro)
pip_setting() {  # pip_setting ENV_NAME CONFIG_KEY
  if [ -n "${!1:-}" ]; then echo "${!1}"; return; fi
  python3 -m pip config get "$2" 2>/dev/null || true
}
mount_spec() {  # a local path or file:// URL is mounted; an index's .../simple by its parent
  local path="${1#file://}"
  case "$path" in /*) ;; *) return ;; esac
  [ "$(basename "$path")" != simple ] || path="$(dirname "$path")"
  [ -d "$path" ] || path="$(dirname "$path")"
  echo "$path:$path:ro"
}
CUDA_BUILD_FLAGS=("${BUILD_FLAGS[@]}")
for setting in PIP_INDEX_URL:global.index-url PIP_EXTRA_INDEX_URL:global.extra-index-url \
               PIP_FIND_LINKS:global.find-links PIP_CERT:global.cert; do
  name="${setting%%:*}"
  value="$(pip_setting "$name" "${setting#*:}" | tr '\n' ' ' | sed 's/ *$//')"
  [ -n "$value" ] || continue
  flags=(--build-arg "$name=$value")
  for entry in $value; do
    mount="$(mount_spec "$entry")"
    if [ -n "$mount" ] && [ "$mount" != /etc/ssl/certs:/etc/ssl/certs:ro ]; then flags+=(-v "$mount"); fi
  done
  BUILD_FLAGS+=("${flags[@]}")
  [ "$name" = PIP_FIND_LINKS ] || CUDA_BUILD_FLAGS+=("${flags[@]}")
done

# ----- 1. the base --------------------------------------------------------------------------
if [ -n "${BASE:-}" ]; then
  say "base: $BASE (given)"
else
  BASE="localhost/$RUN_ID/base:bookworm"
  # minbase + Python: what the Dockerfiles' ARG BASE needs (python3, venv; ca-certificates
  # for pip); documentation is left out of it, the licences kept.
  step base 900 bash -o pipefail -c "mmdebstrap --variant=minbase \
    --include=python3,python3-venv,ca-certificates \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/locale/*' \
    bookworm - | podman import --change 'LABEL $LABEL' - '$BASE'"
fi

# ----- 2. the CPU image --------------------------------------------------------------------
start=$SECONDS
step build-cpu 2400 podman build "${BUILD_FLAGS[@]}" --build-arg "BASE=$BASE" \
  -f "$REPO/docker/Dockerfile.cpu" -t "$IMAGE" "$REPO"
size() { podman image inspect --format '{{.Size}}' "$1" | awk '{printf "%.0f MB", $1 / 1e6}'; }
say "image $IMAGE: $(size "$IMAGE"), built in $((SECONDS - start)) s (base $(size "$BASE"))"

# ----- 3. in the image ------------------------------------------------------------------------
# --no-healthcheck: podman schedules health checks with systemd timers, which a machine
# without systemd lacks (it says so, loudly); the compose test runs them by hand.
IN_IMAGE=(podman run --rm --no-healthcheck --label "$LABEL")
step version 120 "${IN_IMAGE[@]}" --name "$RUN_ID-version" "$IMAGE" sh -c 'caffe --version && poseidon --help'
grep -q "caffe version" "$WORK/version.log" || fail "caffe --version printed no version"
# The health check must not pass a node that does not listen (the compose test sees it pass).
status=0
"${IN_IMAGE[@]}" -e POSEIDON_ROLE=worker "$IMAGE" python /opt/poseidon/healthcheck.py >/dev/null || status=$?
[ "$status" = 1 ] || fail "the health check gave $status, not 1, for a worker that does not listen"
step demo 900 "${IN_IMAGE[@]}" --name "$RUN_ID-demo" "$IMAGE" poseidon demo
say "$(grep '\[demo\] final test accuracy' "$WORK/demo.log")"

cat >"$WORK/Dockerfile.smoke" <<EOF
FROM $IMAGE
USER root
ARG PIP_INDEX_URL PIP_EXTRA_INDEX_URL PIP_FIND_LINKS PIP_CERT
RUN for v in PIP_INDEX_URL PIP_EXTRA_INDEX_URL PIP_FIND_LINKS PIP_CERT; do \
      [ -n "\$(printenv \$v)" ] || unset \$v; done; \
    /opt/poseidon/bin/pip install -q pytest pytest-timeout
COPY pyproject.toml /opt/poseidon-tests/
COPY tests /opt/poseidon-tests/tests
USER poseidon
WORKDIR /opt/poseidon-tests
EOF
step build-smoke 900 podman build "${BUILD_FLAGS[@]}" -f "$WORK/Dockerfile.smoke" \
  -t "$IMAGE-smoke" "$REPO"
step pytest 600 "${IN_IMAGE[@]}" --name "$RUN_ID-pytest" "$IMAGE-smoke" \
  python -m pytest -q -p no:cacheprovider "${SMOKE_TESTS[@]}"
say "pytest: $(tail -n 1 "$WORK/pytest.log")"

# ----- 4. the compose cluster -------------------------------------------------------------
step venv 300 python3 -m venv "$WORK/venv"
step podman-compose 300 "$WORK/venv/bin/pip" install -q "$PODMAN_COMPOSE"
mkdir -m 700 "$WORK/cluster"
chown 10001:10001 "$WORK/cluster"  # the image's user writes there (rank 0's snapshots)
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
( umask 077
  cat >"$WORK/cluster.env" <<EOF
POSEIDON_TOKEN=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
POSEIDON_COORDINATOR=127.0.0.1:$(free_port)
POSEIDON_WORK=$WORK/cluster
POSEIDON_IMAGE=$IMAGE
EOF
)
COMPOSE=("$WORK/venv/bin/podman-compose" --env-file "$WORK/cluster.env"
         -f "$REPO/docker/compose.yaml" --in-pod false --podman-run-args "--label $LABEL")
container() {  # container PROJECT SERVICE: its id
  podman ps -aq --filter "label=com.docker.compose.project=$1" \
    --filter "label=com.docker.compose.service=$2"
}
exit_code() { podman inspect --format '{{.State.ExitCode}}' "$1"; }
# A container's output, whole: `podman logs | grep -q` would fail under pipefail when grep
# stops reading at its first match.
logs() { podman logs "$1" 2>&1; }
wait_for_log() {  # wait_for_log CONTAINER REGEX LIMIT_S WHAT
  local deadline=$((SECONDS + $3))
  until grep -qE "$2" <<<"$(logs "$1")"; do
    [ "$SECONDS" -lt "$deadline" ] || fail "no '$2' from $4 within $3 s"
    [ "$(podman inspect --format '{{.State.Running}}' "$1")" = true ] \
      || { logs "$1" | tail -n 30 >&2; fail "$4 exited before '$2'"; }
    sleep 0.5
  done
}
SERVICES=(coordinator server0 server1 worker0 worker1)

step prepare 300 "${IN_IMAGE[@]}" --name "$RUN_ID-prepare" -v "$WORK/cluster:/work" "$IMAGE" \
  poseidon demo --prepare-only --dir /work
train="$RUN_ID-train"
step compose-up 120 "${COMPOSE[@]}" -p "$train" up -d
step cluster-train 900 podman wait "$(container "$train" worker0)" "$(container "$train" worker1)"
step cluster-end 60 podman wait "$(container "$train" coordinator)" \
  "$(container "$train" server0)" "$(container "$train" server1)"
for service in "${SERVICES[@]}"; do
  id="$(container "$train" "$service")"
  [ "$(exit_code "$id")" = 0 ] \
    || { logs "$id" | tail -n 30 >&2; fail "cluster: $service exited $(exit_code "$id")"; }
done
accuracy="$(logs "$(container "$train" worker0)" \
  | grep -oE 'Test net output #[0-9]+: accuracy = [0-9.eE+-]+' | tail -n 1 | awk '{print $NF}')"
[ -n "$accuracy" ] || fail "cluster: worker 0 logged no test accuracy"
awk -v a="$accuracy" 'BEGIN { exit !(a >= 0.97) }' || fail "cluster: accuracy $accuracy < 0.97"
[ -f "$WORK/cluster/lenet_digits_iter_400.caffemodel" ] || fail "cluster: no final snapshot"
say "cluster: every container exited 0; worker 0's final test accuracy $accuracy; snapshot written"

# Again, and kill worker 1 mid-run; the health checks run first, while every node is up.
kill="$RUN_ID-kill"
step compose-up-again 120 "${COMPOSE[@]}" -p "$kill" up -d
worker0="$(container "$kill" worker0)"
wait_for_log "$worker0" 'Iteration 100[ ,]' 300 "worker 0"
for service in "${SERVICES[@]}"; do
  podman healthcheck run "$(container "$kill" "$service")" >/dev/null 2>&1 \
    || fail "health check of $service: $(podman healthcheck run "$(container "$kill" "$service")" 2>&1)"
done
say "health checks: all ${#SERVICES[@]} nodes healthy"
victim="$(container "$kill" worker1)"
podman kill "$victim" >/dev/null
killed_at=$SECONDS
for service in coordinator server0 server1 worker0; do
  id="$(container "$kill" "$service")"
  left=$((killed_at + 10 - SECONDS))
  if [ "$left" -le 0 ] || ! timeout "$left" podman wait "$id" >/dev/null; then
    fail "$service still running 10 s after worker 1 was killed"
  fi
  code="$(exit_code "$id")"
  [ "$code" != 0 ] || fail "$service exited 0 after worker 1 was killed"
  grep -q 'worker 1 (127\.0\.0\.1:' <<<"$(logs "$id")" \
    || { logs "$id" | tail -n 20 >&2; fail "$service does not name worker 1"; }
done
finished() { date -d "$(podman inspect --format '{{.State.FinishedAt}}' "$1" | sed 's/ [A-Z]*$//')" +%s.%N; }
last=0
for service in coordinator server0 server1 worker0; do
  at="$(finished "$(container "$kill" "$service")")"
  last="$(awk -v a="$at" -v b="$last" 'BEGIN { print (a > b) ? a : b }')"
done
say "kill test: every other container exited non-zero naming worker 1, the last" \
  "$(awk -v a="$last" -v b="$(finished "$victim")" 'BEGIN { printf "%.1f", a - b }') s after it died"
say "$(grep -m 1 'aborting the job' <<<"$(logs "$(container "$kill" coordinator)")")"

# ----- 5. the CUDA image (--cuda) -----------------------------------------------------------
if [ "$CUDA" = 1 ]; then
  cuda_image="localhost/$RUN_ID/poseidon:cuda"
  start=$SECONDS
  step build-cuda 3600 podman build "${CUDA_BUILD_FLAGS[@]}" --build-arg "BASE=$BASE" \
    -f "$REPO/docker/Dockerfile.cuda" -t "$cuda_image" "$REPO"
  say "image $cuda_image: $(size "$cuda_image"), built in $((SECONDS - start)) s"
  step cuda-torch 120 "${IN_IMAGE[@]}" "$cuda_image" python -c 'import torch
print("torch", torch.__version__, "for CUDA", torch.version.cuda)
assert torch.version.cuda, "a CPU build of torch"'
  say "$(tail -n 1 "$WORK/cuda-torch.log")"
  # No GPU here: device_query must say so and fail, not crash.
  status=0
  "${IN_IMAGE[@]}" "$cuda_image" caffe device_query --gpu all >"$WORK/device-query.log" 2>&1 || status=$?
  [ "$status" != 0 ] || fail "device_query succeeded without a GPU"
  ! grep -q Traceback "$WORK/device-query.log" || { cat "$WORK/device-query.log" >&2; fail "device_query crashed"; }
  grep -q "No CUDA device is available" "$WORK/device-query.log" \
    || { cat "$WORK/device-query.log" >&2; fail "device_query did not say there is no GPU"; }
  say "device_query without a GPU: $(grep -o 'No CUDA device.*' "$WORK/device-query.log")"
fi

say "passed in $SECONDS s"
