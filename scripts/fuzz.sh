#!/usr/bin/env bash
# Fuzzes titan's parsers of outside data (tests/fuzz/targets.cpp) with libFuzzer under ASan + UBSan.
#   ./scripts/fuzz.sh                      # every target, 20 s each, as many at once as cores (scripts/test.sh)
#   ./scripts/fuzz.sh --seconds 3600 tokenizer hf_config   # a campaign: an hour each on two targets
#   ./scripts/fuzz.sh --jobs 2 --seconds 600               # two workers per target
# Builds build-fuzz (clang) when needed. Each target starts from its seeds (tests/fuzz/corpus/<target>) and its
# regression inputs (tests/fuzz/regressions/<target>); what it learns is kept in outputs/fuzz/<target>/corpus
# (not in git). A finding (crash, leak, undefined behaviour, an error that is not titan's, a hang over 10 s, an
# allocation over 2 GB) stops the run with its input in outputs/fuzz/<target>/: fix it, then commit the input
# to tests/fuzz/regressions/<target>/ with a .expect file holding the error text it must now give.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
SECONDS_EACH=20
JOBS=1
BUILD=build-fuzz
TARGETS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) SECONDS_EACH=$2; shift 2 ;;
    --jobs) JOBS=$2; shift 2 ;;
    --build) BUILD=$2; shift 2 ;;
    -h|--help) sed -n 2,11p "$0"; exit 0 ;;
    *) TARGETS+=("$1"); shift ;;
  esac
done
[[ "$JOBS" =~ ^[1-9][0-9]*$ ]] || { echo "fuzz: --jobs wants a positive count of workers, got '$JOBS'" >&2; exit 2; }
BUILD=$(realpath -m "$BUILD")
ALL=$(sed -n 's/^ *foreach(target \(.*\))$/\1/p' CMakeLists.txt)
if [ ${#TARGETS[@]} -eq 0 ]; then read -r -a TARGETS <<< "$ALL"; fi
for t in "${TARGETS[@]}"; do
  [[ " $ALL " == *" $t "* ]] || { echo "fuzz: no target '$t' (targets: $ALL)" >&2; exit 2; }
done
read -r -a TARGETS <<< "$(printf '%s\n' "${TARGETS[@]}" | awk '!seen[$0]++' | tr '\n' ' ')"  # each once (own folder)

if [ ! -f "$BUILD/build.ninja" ]; then
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang \
    -DCMAKE_CXX_COMPILER=clang++ -DTITAN_FUZZ=ON -DTITAN_BUILD_TESTS=OFF >/dev/null
fi
cmake --build "$BUILD" -j "$(nproc)" --target $(printf 'fuzz_%s ' "${TARGETS[@]}")

export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
# one target: its regression inputs once, then the campaign (the caller sends what it says to $out/report.txt)
fuzz_target() {
  local t=$1 out=outputs/fuzz/$1 regressions runs
  local parallel=()
  echo "[fuzz] $t: ${SECONDS_EACH} s x $JOBS worker(s)"
  # regression inputs first (each once), then the campaign; .expect files are text, not inputs
  regressions=$(find tests/fuzz/regressions/"$t" -type f ! -name '*.expect' | sort)
  if [ -n "$regressions" ] && ! "$BUILD/fuzz_$t" $regressions > "$out/regressions.log" 2>&1; then
    echo "[fuzz] $t: a regression input fails again:"; tail -40 "$out/regressions.log"; return 1
  fi
  if [ "$JOBS" -gt 1 ]; then parallel=(-jobs="$JOBS" -workers="$JOBS"); fi  # workers log to fuzz-<n>.log in $out
  rm -f "$out"/fuzz*.log
  if ! (cd "$out" && "$BUILD/fuzz_$t" -max_total_time="$SECONDS_EACH" -timeout=10 -rss_limit_mb=2048 \
       -max_len=8192 "${parallel[@]}" -print_final_stats=1 -artifact_prefix="$ROOT/$out/" \
       corpus "$ROOT/tests/fuzz/corpus/$t" "$ROOT/tests/fuzz/regressions/$t" > fuzz.log 2>&1); then
    echo "[fuzz] $t: FINDING (log $out/fuzz.log, input below):"
    grep -E "ERROR|SUMMARY|not titan's|Test unit written" "$out/fuzz.log" | head -10
    return 1
  fi
  # with -jobs, each worker logs to fuzz-<n>.log
  runs=$(cat "$out"/fuzz*.log 2>/dev/null | awk '/^stat::number_of_executed_units:/ {n += $2} END {print n}')
  echo "[fuzz] $t: no finding in ${runs:-?} inputs"
}

# as many targets at once as the cores hold workers (each its own process and folder); reports in target order
AT_ONCE=$(( $(nproc) / JOBS )); [ "$AT_ONCE" -ge 1 ] || AT_ONCE=1
status=0
for ((i = 0; i < ${#TARGETS[@]}; i += AT_ONCE)); do
  pids=()
  for t in "${TARGETS[@]:i:AT_ONCE}"; do
    mkdir -p "outputs/fuzz/$t/corpus" tests/fuzz/regressions/"$t"
    fuzz_target "$t" > "outputs/fuzz/$t/report.txt" 2>&1 &
    pids+=($!)
  done
  for j in "${!pids[@]}"; do
    wait "${pids[j]}" || status=1
    cat "outputs/fuzz/${TARGETS[i + j]}/report.txt" || true
  done
done
exit $status
