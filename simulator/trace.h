// simulator/trace.h — a step's timeline as a Chrome trace (Perfetto), simulated
// or measured on this CPU (the same format, so the two open side by side).
#pragma once
#include <string>
#include <vector>

#include "simulator/result.h"

namespace titan {

// Chrome-trace JSON (Perfetto): a process per chip (the first n_chips), a
// thread per stream (compute per rank on the chip, each collective group),
// flow arrows from a collective to the stall it ends, idle slices for stalls.
// Chips are numbered (pid, rank names) from `first_chip`: a measured trace of
// rank R passes R, so the per-rank files of one job merge without collisions.
void write_chrome_trace(const SimResult& r, const std::string& path, int n_chips, int first_chip = 0);

// The same timeline from a timed CostTrace of a real step on this CPU: each
// op lasts until the next record, a stall until the op after the wait, a
// collective from its start to the end of the wait for it. `end`: the trace's
// elapsed time at the step's end.
SimResult measured_timeline(const std::vector<CostEvent>& events, double end, const std::string& label);

}  // namespace titan
