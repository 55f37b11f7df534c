#!/usr/bin/env bash
# The test command: sets up dependencies, builds (release) and installs, runs
# the whole ctest suite, then runs the unit tests and the mpirun tests under
# ASan+UBSan (those that run a line no other sanitized test runs: tests/sanitizer_selection.txt),
# the comms tests under ThreadSanitizer, and the fuzz harnesses (scripts/fuzz.sh).
#   ./scripts/test.sh            # everything (what .ci/run calls)
#   SKIP_SETUP=1 SKIP_ASAN=1 SKIP_FUZZ=1 ./scripts/test.sh   # quick local loop
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=${JOBS:-$(nproc)}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(nproc)}
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}

if [ -z "${SKIP_SETUP:-}" ]; then ./scripts/setup.sh; fi

echo "[test] $(date -u +%H:%M:%S) release build"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$JOBS"
./scripts/prepare_data.sh build  # the default corpus, installed beside the configs (titan-train from any folder)
# install the tools where mpirun finds them (default prefix /usr/local: titan-train on PATH)
SUDO=""; if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
$SUDO cmake --install build >/dev/null
# in parallel (tests with deadlines are RUN_SERIAL in CMakeLists.txt): 16-23 min on 2 cores (2026-12-07)
echo "[test] $(date -u +%H:%M:%S) release suite (ctest)"
(cd build && ctest --output-on-failure -j "$JOBS" --timeout 1200)

if [ -z "${SKIP_ASAN:-}" ]; then
  echo "[test] $(date -u +%H:%M:%S) ASan+UBSan build: the unit tests, then the mpirun tests (label mpi)"
  cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTITAN_SANITIZE=ON >/dev/null
  # what the unit tests and the mpirun tests run (the single-process suites stay in the release run above)
  cmake --build build-asan -j "$JOBS" --target titan_unit_tests titan-train titan-eval titan-tokenize \
    titan_comms_tests titan_checkpoint_mpi_tests titan_cp_tests titan_fsdp_tests
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ./build-asan/titan_unit_tests --gtest_brief=1
  echo "[test] $(date -u +%H:%M:%S) ASan+UBSan: the mpirun tests"
  # Open MPI's own allocations are not freed at exit: leak checking stays on for the unit tests above only.
  # The parity layouts and the references they compare with run 3 steps here (every code path of a step;
  # tests/parallel/parity.py; the resume cases' reference 10), 10 above;
  # Left out: release_only (the multihost tests: network namespaces) and sanitized_elsewhere, the tests whose every
  # line the others here run (gcov; tests/sanitizer_selection.txt, written by scripts/sanitizer_selection.py).
  (cd build-asan && ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 TITAN_PARITY_STEPS=3 \
     UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
     ctest --output-on-failure -j "$JOBS" -L mpi -LE 'release_only|sanitized_elsewhere' --timeout 1200)

  echo "[test] $(date -u +%H:%M:%S) ThreadSanitizer build: the comms tests (the main thread and the communication thread)"
  cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTITAN_TSAN=ON >/dev/null
  cmake --build build-tsan -j "$JOBS" --target titan_comms_tests
  for np in 2 3 4; do
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun --oversubscribe --bind-to none -np "$np" \
      -x OMP_NUM_THREADS=1 -x OMPI_MCA_mca_base_component_disable_dlclose=1 \
      -x TSAN_OPTIONS="halt_on_error=1 suppressions=$PWD/tests/sanitizers/tsan.supp" \
      ./build-tsan/titan_comms_tests --gtest_brief=1
  done
fi

if [ -z "${SKIP_FUZZ:-}" ]; then
  # every parser of outside data (tests/fuzz/targets.h) under libFuzzer + ASan + UBSan: the committed regression
  # inputs once, then ~20 s of fuzzing each; a finding fails the run (scripts/fuzz.sh says what to do with it)
  echo "[test] $(date -u +%H:%M:%S) fuzzing (clang, libFuzzer, ASan + UBSan)"
  ./scripts/fuzz.sh --seconds "${FUZZ_SECONDS:-20}"
fi
echo "[test] $(date -u +%H:%M:%S) all passed"
