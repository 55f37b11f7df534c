// simulator/compare.h — a measured step beside the same step simulated: the timed events a real step recorded
// (its ops and collectives, in the order they ran) priced and scheduled on a spec of the machine that ran them,
// op by op, so the two timelines share one axis and each op carries both times and the simulation's error.
//
// The simulated side is the step that ran (lesson 4): the same events, priced as titan's CPU engine runs them,
// each op one kernel (no eager decomposition, no fusion: EagerSplit and eager-only traffic are PyTorch's, not
// titan's), collectives on the system's links.
#pragma once
#include <string>
#include <vector>

#include "simulator/hardware.h"
#include "simulator/result.h"

namespace titan {

// One op kind and shape of the step: its calls' summed measured and simulated time.
struct OpComparison {
  std::string op, shape;  // shape: a GEMM's [batch x] M x N x K, else the bytes it moves (collectives: and group)
  int64_t calls = 0;
  double measured_s = 0, simulated_s = 0;
  double error() const { return measured_s > 0 ? (simulated_s - measured_s) / measured_s : 0.0; }
};

struct StepComparison {
  SimResult measured, simulated;  // the two timelines; every op's slice carries the other's time (other_s)
  std::vector<OpComparison> rows;  // every op and collective of the step, largest |simulated - measured| first
};

// `events`: a timed CostTrace of one real step (end: its elapsed time at the step's end); `world`: the job's
// ranks; `ranks_per_chip`: the ranks sharing this rank's chip (on a CPU: the ranks on its host). Fails (naming
// it) when the events are not timed, or when a collective spans more chips than `sys` joins.
// `rank`: the world rank that ran them. A pipeline (or context-parallel) receive from another rank arrives in
// the simulation when it arrived in the measured step (the sender is not simulated).
StepComparison compare_step(const std::vector<CostEvent>& events, double end, const sim::ChipSpec& chip,
                            const sim::SystemSpec& sys, int world, int ranks_per_chip = 1, int rank = 0);

// The step line pair and the `top` rows with the largest absolute error, one line each.
std::vector<std::string> describe_comparison(const StepComparison& c, size_t top);

// Every row as TSV (op, shape, calls, measured_ms, simulated_ms, error_pct).
void write_comparison(const StepComparison& c, const std::string& path);

}  // namespace titan
