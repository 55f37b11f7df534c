#!/usr/bin/env bash
# The test command: sets up dependencies, builds (release), runs the whole
# ctest suite, then builds the unit tests with ASan+UBSan and runs them.
#   ./scripts/test.sh            # everything (what .ci/run calls)
#   SKIP_SETUP=1 SKIP_ASAN=1 ./scripts/test.sh   # quick local loop
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=${JOBS:-$(nproc)}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(nproc)}
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}

if [ -z "${SKIP_SETUP:-}" ]; then ./scripts/setup.sh; fi

echo "[test] release build"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$JOBS"
# install the tools where mpirun finds them (default prefix /usr/local: titan-train on PATH)
SUDO=""; if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
$SUDO cmake --install build >/dev/null
(cd build && ctest --output-on-failure -j 1 --timeout 1200)

if [ -z "${SKIP_ASAN:-}" ]; then
  echo "[test] ASan+UBSan build of the unit tests"
  cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTITAN_SANITIZE=ON >/dev/null
  cmake --build build-asan -j "$JOBS" --target titan_unit_tests
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ./build-asan/titan_unit_tests --gtest_brief=1
fi
echo "[test] all passed"
