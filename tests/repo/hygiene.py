#!/usr/bin/env python3
"""Repository hygiene: generated files never enter git.

Fails when a tracked file lies under a run-output, data or build folder, or
when a tracked file is larger than 2 MB and not on the allow-list (committed
goldens and documentation figures). Exit 77 (ctest SKIP) outside a git
checkout, e.g. in a source tarball.
"""
import fnmatch
import os
import subprocess
import sys

GENERATED = ("outputs/", "data/", "build/", "build-", "out/")
MAX_BYTES = 2 * 1024 * 1024
ALLOW_LARGE = ("tests/golden/*", "docs/*.png")


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..")
    try:
        out = subprocess.run(["git", "-C", root, "ls-files", "-z"], check=True, capture_output=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        print(f"hygiene: not a git checkout ({e}); skipped")
        return 77
    files = [f for f in out.decode().split("\0") if f]
    bad = []
    for f in files:
        if f.startswith(GENERATED):
            bad.append(f"{f}: generated file tracked (run outputs, data and build folders stay out of git)")
            continue
        path = os.path.join(root, f)
        if os.path.isfile(path) and os.path.getsize(path) > MAX_BYTES and \
                not any(fnmatch.fnmatch(f, p) for p in ALLOW_LARGE):
            bad.append(f"{f}: {os.path.getsize(path) / 2**20:.1f} MB tracked (limit 2 MB outside {', '.join(ALLOW_LARGE)})")
    for b in bad:
        print("hygiene: " + b)
    print(f"hygiene: {len(files)} tracked files, {len(bad)} problems")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
