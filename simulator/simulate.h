// simulator/simulate.h — the simulated UltraServer: one training step of a
// job, run on meta tensors as `world` ranks in one process (plan.h), priced
// on a chip and system (hardware.h, cost_model.h) and scheduled on streams
// (schedule.h);
// the streams and how collectives, links and pipeline transfers share time
// are described there.
//
// The dependencies are the real program's: FSDP prefetches (all-gather
// issued a block ahead), reduce-scatters left in flight during backward, TP
// and MoE dispatch/combine waited on at once. SPMD within a pipeline stage:
// its ranks run the same timeline (MoE routing: the busiest rank's), so one
// rank per stage is planned; under pipeline parallel the stages' ranks run
// side by side, a receive waiting for the matching send (p2p on the
// topology) and a collective spanning stages starting when all have issued
// it, so the bubbles come out of the schedule.
#pragma once
#include "simulator/cost_model.h"
#include "simulator/plan.h"
#include "simulator/report.h"
#include "simulator/result.h"
#include "simulator/trace.h"
#include "step/job_config.h"

namespace titan {

// Runs the meta step of `cfg` as `world` ranks and simulates it on
// cfg.simulation's system. Errors (unknown chip/system, a world the system
// cannot hold, ranks_per_chip that do not divide the world) name the numbers.
// `chip_edits` / `system_edits`: changes to the specs' figures (what-if, what_if.h), applied as they load.
SimResult simulate_step(const JobConfig& cfg, int world, const std::vector<sim::SpecEdit>& chip_edits = {},
                        const std::vector<sim::SpecEdit>& system_edits = {});

}  // namespace titan
