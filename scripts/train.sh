#!/usr/bin/env bash
# The default training job: sets up, builds, prepares the corpus, trains the
# debug Qwen3. Extra arguments go to titan-train (e.g. --training.steps 50).
#   ./scripts/train.sh [--config configs/qwen3_debug.yaml] [--section.key value ...]
set -euo pipefail
cd "$(dirname "$0")/.."
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(nproc)}
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
if [ -z "${SKIP_SETUP:-}" ]; then ./scripts/setup.sh; fi
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$(nproc)" --target titan-train titan-tokenize titan-eval titan-calibrate titan-bench titan-bench-linear \
  titan-bench-attention  # every installed program (cmake --install below)
./scripts/prepare_data.sh build  # the default corpus (data/kjv_{train,val}.h5), installed with the tools
# install the tools where mpirun finds them (default prefix /usr/local: titan-train on PATH)
SUDO=""; if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
$SUDO cmake --install build >/dev/null
args=("$@")
if [[ " ${args[*]-} " != *" --config "* ]]; then args=(--config configs/qwen3_debug.yaml "${args[@]}"); fi
exec ./build/titan-train "${args[@]}"
