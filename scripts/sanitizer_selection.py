#!/usr/bin/env python3
"""Which mpirun tests the sanitizer run needs: gcov line coverage per test, then the cheapest set that runs
every line the whole set runs.

scripts/test.sh runs every mpirun test in the release suite (the numeric contracts: each layout's losses,
gradients and exports equal one rank) and runs them again under ASan + UBSan, where what is looked for is a bad
read, write or undefined operation on a line that runs. A layout whose every line another sanitized test already
runs adds time, not a line, to that second run. This script measures which those are:

  scripts/sanitizer_selection.py                 # configure + build build-cov (gcov), run each candidate (label
                                                 # mpi, not release_only) alone with its own gcov output (~40 min
                                                 # on 2 cores), print the selection
  scripts/sanitizer_selection.py --tests A B     # measure only tests A and B (new tests; when sources change,
                                                 # measure all: stored line numbers go stale)
  scripts/sanitizer_selection.py --report-only   # the selection again from the stored per-test coverage
  ... --write                                    # and write it to tests/sanitizer_selection.txt

Per test, the lines of titan's own sources (src, models, parallel, comms, step, job, simulator, device, programs)
with a nonzero count are kept in build-cov/coverage/<test>.json with the test's wall time. The selection is greedy set
cover weighted by time: until the union of every candidate's lines is reached, the test with the most lines not
yet run per second, a test's price including the fixtures it needs (a layout's parity reference) not yet chosen.
tests/sanitizer_selection.txt lists the candidates left out (CMakeLists.txt labels them sanitized_elsewhere;
scripts/test.sh's sanitizer run skips that label). What is measured is lines, not values: a layout that runs the
same lines at other shapes (TP 4 for TP 2) is left out; the release suite still holds its numbers. A process
writes its counts when it exits, or (this build defines TITAN_COVERAGE) in titan's abort_job before MPI_Abort; a
rank killed by a signal writes none, so a test with no line measured is always kept. A test that is new, or not in
the list, is sanitized.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOURCES = ("src/", "models/", "parallel/", "comms/", "step/", "job/", "simulator/", "device/", "programs/")
TARGETS = ["titan-train", "titan-eval", "titan-tokenize", "titan_comms_tests", "titan_checkpoint_mpi_tests",
           "titan_cp_tests", "titan_fsdp_tests"]


def ctest_names(build, *filters):
    out = subprocess.run(["ctest", "-N", *filters], cwd=build, capture_output=True, text=True, check=True).stdout
    return re.findall(r"Test +#\d+: (\S+)", out)


def run_one(build, name, env):
    """One test alone (its fixtures not re-run), its gcov files under coverage/raw/<name>."""
    prefix = os.path.join(build, "coverage", "raw", name)
    shutil.rmtree(prefix, ignore_errors=True)
    os.makedirs(prefix)
    e = dict(env, GCOV_PREFIX=prefix, GCOV_PREFIX_STRIP="0")
    t = time.time()
    p = subprocess.run(["ctest", "-R", f"^{re.escape(name)}$", "-FA", ".*", "--timeout", "1200"], cwd=build, env=e,
                       capture_output=True, text=True)
    secs = time.time() - t
    if p.returncode != 0:
        sys.exit(f"sanitizer_selection: {name} failed under the coverage build:\n{p.stdout[-3000:]}")
    return secs


def gcov_lines(build, name):
    """(source, line) with a nonzero count in the test's gcda files, titan's own sources only."""
    prefix = os.path.join(build, "coverage", "raw", name)
    lines = set()
    gcdas = []
    for d, _, files in os.walk(prefix):
        gcdas += [os.path.join(d, f) for f in files if f.endswith(".gcda")]
    for gcda in gcdas:
        # the notes file (.gcno) beside the test's counts: gcov wants both in one folder
        real = gcda[len(prefix):]
        gcno = real[:-5] + ".gcno"
        if not os.path.exists(gcno):
            sys.exit(f"sanitizer_selection: {name}: {gcda} has no notes file {gcno} (a stale build-cov? rebuild it)")
        shutil.copyfile(gcno, gcda[:-5] + ".gcno")
    for i in range(0, len(gcdas), 64):
        chunk = gcdas[i:i + 64]
        p = subprocess.run(["gcov", "--json-format", "--stdout", *chunk], cwd=prefix, capture_output=True, text=True)
        if p.returncode != 0:
            sys.exit(f"sanitizer_selection: {name}: gcov failed ({p.returncode}):\n{p.stderr[-2000:]}")
        for doc in p.stdout.splitlines():
            doc = doc.strip()
            if not doc.startswith("{"):
                continue
            doc = json.loads(doc)
            for f in doc.get("files", []):  # CMake compiles by absolute path; a relative one is gcov's cwd's
                path = os.path.relpath(os.path.join(doc.get("current_working_directory", prefix), f["file"]), ROOT)
                if not path.startswith(SOURCES):
                    continue
                for ln in f["lines"]:
                    if ln["count"] > 0:
                        lines.add(f"{path}:{ln['line_number']}")
    return lines


def ctest_properties(build):
    out = subprocess.run(["ctest", "--show-only=json-v1"], cwd=build, capture_output=True, text=True, check=True)
    return {t["name"]: {p["name"]: p["value"] for p in t.get("properties", [])} for t in json.loads(out.stdout)["tests"]}


def fixtures(props):
    """test -> the tests that set up the fixtures it requires (ctest's own account)."""
    setup = {}
    for name, p in props.items():
        for fx in p.get("FIXTURES_SETUP", []):
            setup[fx] = name
    return {name: sorted({setup[fx] for fx in p.get("FIXTURES_REQUIRED", []) if fx in setup})
            for name, p in props.items()}


def select(cov, needs):
    """Greedy weighted set cover; a test brings the fixtures it needs (their lines and their time)."""
    universe = set().union(*(v["lines"] for v in cov.values()))
    chosen, covered = [n for n in cov if not cov[n]["lines"]], set()  # nothing measured: nothing to judge by

    def bundle(n):  # n and what it needs that is not chosen yet
        return [n] + [f for f in needs.get(n, []) if f in cov and f not in chosen and f != n]

    while covered != universe:
        rest = [n for n in cov if n not in chosen]

        def score(n):
            b = bundle(n)
            new = len(set().union(*(cov[m]["lines"] for m in b)) - covered)
            return (new / max(sum(cov[m]["secs"] for m in b), 1.0), -sum(cov[m]["secs"] for m in b))

        best = max(rest, key=score)
        for m in bundle(best):
            chosen.append(m)
            covered |= cov[m]["lines"]
    return chosen, [n for n in cov if n not in chosen], universe


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build-cov"))
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--report-only", action="store_true", help="select from the stored per-test coverage")
    ap.add_argument("--tests", nargs="+", help="measure only these tests (the others' stored coverage is kept)")
    ap.add_argument("--write", action="store_true", help="write the tests left out to tests/sanitizer_selection.txt")
    a = ap.parse_args()
    build = os.path.abspath(a.build)
    store = os.path.join(build, "coverage")
    if not a.report_only:
        subprocess.run(["cmake", "-S", ROOT, "-B", build, "-G", "Ninja", "-DCMAKE_BUILD_TYPE=RelWithDebInfo",
                        "-DTITAN_COVERAGE=ON"], check=True, stdout=subprocess.DEVNULL)
        subprocess.run(["cmake", "--build", build, "-j", str(a.jobs), "--target", *TARGETS], check=True)
        env = dict(os.environ, TITAN_PARITY_STEPS="3", OMP_WAIT_POLICY="PASSIVE", OMPI_ALLOW_RUN_AS_ROOT="1",
                   OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
        names = ctest_names(build, "-L", "mpi", "-LE", "release_only")
        if a.tests:
            unknown = sorted(set(a.tests) - set(names))
            if unknown:
                sys.exit(f"sanitizer_selection: --tests {' '.join(unknown)}: not a candidate (label mpi, not "
                         f"release_only) in {build}")
            names = [n for n in names if n in a.tests]
        props = ctest_properties(build)
        refs = [n for n in names if props[n].get("FIXTURES_SETUP")]  # what other tests compare with
        others = [n for n in names if n not in refs]
        serial = {n for n in others if props[n].get("RUN_SERIAL")}
        os.makedirs(store, exist_ok=True)
        done = [0]

        def measure(n):
            secs = run_one(build, n, env)
            lines = gcov_lines(build, n)
            with open(os.path.join(store, n + ".json"), "w") as f:
                json.dump({"secs": secs, "lines": sorted(lines)}, f)
            shutil.rmtree(os.path.join(store, "raw", n), ignore_errors=True)
            done[0] += 1
            print(f"[coverage] {done[0]}/{len(names)} {n}: {len(lines)} lines, {secs:.1f} s", flush=True)

        with ThreadPoolExecutor(a.jobs) as pool:  # the references first: the layouts compare with their output
            list(pool.map(measure, refs))
            list(pool.map(measure, [n for n in others if n not in serial]))
        for n in others:  # tests with deadlines (RUN_SERIAL): alone, as ctest runs them
            if n in serial:
                measure(n)
    cov = {}
    for f in sorted(os.listdir(store)):
        if f.endswith(".json"):
            d = json.load(open(os.path.join(store, f)))
            cov[f[:-5]] = {"secs": d["secs"], "lines": set(d["lines"])}
    if not cov:
        sys.exit(f"sanitizer_selection: no per-test coverage in {store}: run without --report-only first")
    candidates = set(ctest_names(build, "-L", "mpi", "-LE", "release_only"))
    stale = sorted(set(cov) - candidates)
    missing = sorted(candidates - set(cov))
    for n in stale:
        del cov[n]
    if missing:
        sys.exit(f"sanitizer_selection: no coverage stored for {' '.join(missing)}: run with --tests {' '.join(missing)}")
    chosen, left, universe = select(cov, fixtures(ctest_properties(build)))
    total = sum(v["secs"] for v in cov.values())
    kept = sum(cov[n]["secs"] for n in chosen)
    print(f"\n{len(cov)} tests run {len(universe)} lines of titan's sources in {total:.0f} s (coverage build, "
          f"one at a time); {len(chosen)} of them run every one of those lines in {kept:.0f} s:")
    for n in chosen:
        print(f"  keep  {n:48s} {cov[n]['secs']:6.1f} s {len(cov[n]['lines']):6d} lines")
    for n in sorted(left):
        print(f"  leave {n:48s} {cov[n]['secs']:6.1f} s {len(cov[n]['lines']):6d} lines")
    if a.write:
        path = os.path.join(ROOT, "tests", "sanitizer_selection.txt")
        with open(path, "w") as f:
            f.write("# mpirun tests the ASan + UBSan run leaves out (label sanitized_elsewhere, CMakeLists.txt): every line\n"
                    "# each runs is run by the sanitized tests. Written by scripts/sanitizer_selection.py --write\n"
                    f"# ({time.strftime('%Y-%m-%d')}: {len(cov)} candidates, {len(universe)} lines; the {len(chosen)} "
                    f"kept took {kept:.0f} s of {total:.0f} s in the coverage build). A measured decision, committed: CI does\n"
                    "# not measure it again (about 40 min on 2 cores). Run the script again when tests or sources change.\n")
            f.writelines(n + "\n" for n in sorted(left))
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
