// simulator/what_if.h — simulation.what_if: the planned step priced again with a change (a figure of the chip or
// system spec, or any config key: a parallel degree, the batch, the mode), beside the step as planned: the new
// step line, its critical path and what moved on it. Nothing runs again but the simulation (a planned step
// takes a second, not a cluster).
#pragma once
#include <string>
#include <vector>

#include "simulator/hardware.h"
#include "simulator/result.h"
#include "step/job_config.h"

namespace titan {

struct WhatIf {
  std::string as_written;
  std::vector<sim::SpecEdit> chip, system;  // spec figures (sim::SpecEdit)
  std::vector<std::string> overrides;       // config keys and values, in pairs
};

// "chip.<key>=<v>" or "chip.<key>*<f>" (a figure of the chip spec: chip.hbm_tbps*2), "system.<path>..." (the
// system spec: system.levels.*.bandwidth_gbps*2, system.scale_out.latency_us=4), or "<section>.<key>=<value>"
// (any config key: parallelism.tensor_parallel_degree=4); several joined by ';', applied together. Errors name
// simulation.what_if and the part as written.
WhatIf parse_what_if(const std::string& text);

// The step of `cfg` (simulation.world_size ranks, or the changed one) with `w` applied. Errors (a key or figure
// that does not exist, a layout the change makes impossible) name the change.
SimResult simulate_what_if(const JobConfig& cfg, const WhatIf& w);

// Before -> after: the step, throughput, MFU and memory; the new critical path; what moved on it (by what it is
// charged to, largest first); exposed communication, bubble and host-bound time.
std::vector<std::string> describe_what_if(const SimResult& before, const SimResult& after, const std::string& change);

}  // namespace titan
