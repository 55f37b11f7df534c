#!/usr/bin/env bash
# Builds the default corpus: the King James Bible (public domain; Debian's
# bible-kjv / bible-kjv-text packages, installed by scripts/setup.sh), as
# plain English text (chapter headings kept, verse numbers dropped), then
# byte-level token files data/kjv_train.h5 and data/kjv_val.h5 (last 5%).
#   scripts/prepare_data.sh [build-dir]
# Safe to run concurrently (tests under ctest -j): one run builds under a lock, the others wait and find the
# files; every file appears complete (written under a temporary name, then renamed; kjv_train.h5 last).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
mkdir -p data
exec 9>data/.prepare.lock
flock 9
if [ ! -s data/kjv.txt ]; then
  command -v bible >/dev/null || { echo "bible (Debian package bible-kjv) not found: run scripts/setup.sh" >&2; exit 1; }
  bible -l100000 Gen1:1-Rev22:21 | sed -E 's/^ +[0-9]+ //' | sed -E '/^$/d' > data/kjv.txt.tmp
  mv data/kjv.txt.tmp data/kjv.txt
fi
if [ ! -s data/kjv_train.h5 ] || [ ! -s data/kjv_val.h5 ]; then
  "$BUILD/titan-tokenize" --input data/kjv.txt --output data/kjv_train.tmp.h5 \
    --val-output data/kjv_val.tmp.h5 --val-fraction 0.05
  mv data/kjv_val.tmp.h5 data/kjv_val.h5
  mv data/kjv_train.tmp.h5 data/kjv_train.h5
fi
