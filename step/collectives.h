// step/collectives.h — the collectives of one traced step (a timed trace
// of a real step, or the planned step of a simulation), as people read them:
// a per-step count by kind and group, and a file with one line per collective
// in issue order (what tests hold a planned step to a real one with).
#pragma once
#include <string>
#include <vector>

#include "src/tensor/cost.h"

namespace titan {

// "collectives per step (rank R): all_gather x3 on dp_shard [0 1] 1.23 MB, ..." lines, by kind then group.
// `dtypes` says what the bytes are (e.g. "float32, as sent"; a simulated step's: the dtypes it priced).
std::vector<std::string> describe_collectives(const std::vector<CostEvent>& events, int rank, const std::string& dtypes);

// One tab-separated line per collective start: kind, group label, member world ranks (comma-separated),
// bytes, 1 if it carries gradients.
void write_collectives(const std::vector<CostEvent>& events, const std::string& path);

}  // namespace titan
