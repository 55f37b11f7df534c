// src/train/simulate.h — the simulated UltraServer: one training step of a
// job, run on meta tensors as `world` ranks in one process (plan.h), priced
// on a chip and system (device/cost_model.h) and scheduled on streams:
//
//   compute stream   every kernel in program order (eager: one per op;
//                    compiled: runs of elementwise ops fused into one kernel)
//   comm:<group>     one stream per process group; a collective starts when
//                    the program issues it and its group's stream is free;
//                    collectives of different groups in flight at once share
//                    the links of the network levels they both use: a level's
//                    bytes move only while its links are not carrying another
//                    transfer (never more than the level's bandwidth in use)
//   waits            the compute stream stalls until the collective it waits
//                    for has finished: exposed communication
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
#include <map>
#include <string>
#include <vector>

#include "device/cost_model.h"
#include "src/config/job_config.h"
#include "src/train/plan.h"

namespace titan {

struct SimSpan {  // one slice of the timeline (seconds from the step's start)
  std::string stream, name, category;  // category: compute | comm | idle
  double start = 0, dur = 0;
  double flops = 0, bytes = 0;
  int64_t flow_to = -1;  // comm -> index of the idle span that waited for it
  int stage = 0;         // pipeline stage (0 without pp)
};

struct SimMemory {  // bytes per chip
  double params = 0, grads = 0, optimizer = 0, activations = 0, communication = 0, other = 0;
  double total() const { return params + grads + optimizer + activations + communication + other; }
};

struct SimStage {  // pipeline parallel: the planned rank of one stage
  int rank = 0;
  double compute_s = 0, exposed_comm_s = 0;
  double bubble_s = 0;  // idle in the schedules' windows (waiting on a neighbour, or done before the others)
  double end_s = 0;     // when its step ends (its last kernel or transfer)
  SimMemory memory;     // per chip
  std::vector<SimSpan> spans;
};

struct SimResult {
  std::string chip, system, mode, layout, algorithms;
  int world = 1, ranks_per_chip = 1, chips = 1, systems = 1;
  double step_s = 0;               // simulated step time
  double compute_s = 0;            // busy time of the compute stream
  double exposed_comm_s = 0;       // compute stream waiting for collectives
  std::map<std::string, double> exposed_by_kind, comm_busy_by_group;
  // time the collectives took beyond their own price because transfers of other groups used the same
  // network level's links at the same time (the level's bandwidth is shared, never exceeded)
  double link_contention_s = 0;
  std::map<std::string, double> compute_by_class;  // gemm / attention / elementwise / optimizer / launch overhead
  int64_t kernels = 0;
  double tokens_per_step = 0, tokens_per_s = 0, tokens_per_s_per_chip = 0;
  double tokens_per_s_per_rank = 0;  // TorchTitan's logged tps: total / world (tp ranks share their tokens)
  double model_flops_per_token = 0, tflops_per_chip = 0, mfu = 0, hfu = 0;
  double hardware_flops_per_rank = 0;
  SimMemory memory;  // per chip
  double hbm_bytes = 0;
  bool oom = false;
  std::string oom_advice;
  std::vector<SimSpan> spans;  // rank 0's timeline
  // pipeline parallel: each stage's rank, scheduled side by side (the step ends with the last). The
  // schedules' windows (pipeline_s: from the first stage's start to the last stage's end, summed over the
  // accumulation steps) hold the bubble: bubble_s is the largest stage's time in them not computing
  // (waiting on a neighbour's activations or gradients, or done early); bubble_fraction = bubble_s / pipeline_s
  std::vector<SimStage> stages;
  double pipeline_s = 0, bubble_s = 0, bubble_fraction = 0;
  std::vector<CostEvent> collectives;  // rank 0's collective starts of the planned step, in issue order
};

// Runs the meta step of `cfg` as `world` ranks and simulates it on
// cfg.simulation's system. Errors (unknown chip/system, a world the system
// cannot hold, ranks_per_chip that do not divide the world) name the numbers.
SimResult simulate_step(const JobConfig& cfg, int world);

// The scheduler alone: one rank's events (kernels, collectives and their waits, in program order) on
// `chip` in `sys`, at their own byte counts (no dtype scaling). The timeline, sums and step time.
SimResult schedule_events(const std::vector<CostEvent>& events, const device::ChipSpec& chip,
                          const device::SystemSpec& sys, int ranks_per_chip, const std::string& mode);

// The report lines (TorchTitan-style) of a simulated step.
std::vector<std::string> describe_simulation(const SimResult& r);
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
