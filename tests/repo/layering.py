#!/usr/bin/env python3
"""The floors of titan, enforced: every #include "..." in a source file points to its own floor or one below.

device <- engine (src/) <- comms <- models <- parallel <- step <- simulator <- job <- programs
(tests/ and benchmarks/ may include anything). CMake builds one library per floor on the same order, and
each floor's library is linked alone against the floors below it (the floor_check_* targets), so the linker
refuses a call upward too. Prints every violation with file:line; exit 1 when there is one.
"""
import pathlib
import re
import sys

FLOORS = ["device", "src", "comms", "models", "parallel", "step", "simulator", "job", "programs"]


def floor_of(path):
    top = path.split("/", 1)[0]
    return FLOORS.index(top) if top in FLOORS else None


def main():
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve()
    bad = []
    checked = 0
    for f in sorted(root.rglob("*")):
        if f.suffix not in (".h", ".cpp", ".def") or not f.is_file():
            continue
        rel = f.relative_to(root).as_posix()
        if rel.startswith("build") or "/build" in rel:
            continue
        mine = floor_of(rel)
        if mine is None:
            continue
        checked += 1
        for n, line in enumerate(f.read_text(errors="replace").splitlines(), 1):
            m = re.match(r'\s*#\s*include\s+"([^"]+)"', line)
            if not m:
                continue
            theirs = floor_of(m.group(1))
            if theirs is not None and theirs > mine:
                bad.append(f"{rel}:{n}: {FLOORS[mine]}/ includes {m.group(1)} ({FLOORS[theirs]}/ is a floor above)")
    for b in bad:
        print(b)
    print(f"layering: {checked} files, {len(bad)} includes upward")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
