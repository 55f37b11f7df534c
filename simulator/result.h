// simulator/result.h — what a simulated (or measured) step is: its timeline
// (spans on streams), per-stage figures under pipeline parallel, the time and
// memory sums, throughput and MFU. Filled by the scheduler (schedule.h) and
// simulate_step (simulate.h); read by the report (report.h) and the Chrome
// trace (trace.h).
#pragma once
#include <map>
#include <string>
#include <vector>

#include "src/tensor/cost.h"

namespace titan {

struct SimSpan {  // one slice of the timeline (seconds from the step's start)
  std::string stream, name, category;  // category: compute | comm | idle (waiting for a collective) | bubble
                                       // | host (waiting for the host to issue the next kernel)
  double start = 0, dur = 0;
  double flops = 0, bytes = 0;
  int64_t flow_to = -1;  // comm -> index of the idle span that waited for it
  int stage = 0;         // pipeline stage (0 without pp)
  int64_t event = -1;    // the CostEvent (its index in the rank's events) this slice runs; -1: none (a wait, a
                         // fused chain of several)
  double other_s = -1;   // side by side (compare.h): the same op's time in the other timeline (-1: not compared)
};

struct SimMemory {  // bytes per chip
  double params = 0, grads = 0, optimizer = 0, activations = 0, communication = 0, other = 0;
  double total() const { return params + grads + optimizer + activations + communication + other; }
};

struct SimStage {  // pipeline parallel: the planned rank of one stage
  int rank = 0;
  double compute_s = 0, exposed_comm_s = 0, host_wait_s = 0;
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
  double host_wait_s = 0;          // compute stream idle until the host issued its next kernel (host-bound)
  std::map<std::string, double> exposed_by_kind, comm_busy_by_group;
  // time the collectives took beyond their own price because transfers of other groups used the same
  // network level's links at the same time (the level's bandwidth is shared, never exceeded)
  double link_contention_s = 0;
  std::map<std::string, double> compute_by_class;  // gemm / attention / elementwise / optimizer / launch overhead
  int64_t kernels = 0;
  double tokens_per_step = 0, tokens_per_s = 0, tokens_per_s_per_chip = 0;
  double tokens_per_s_per_rank = 0;  // TorchTitan's logged tps: total / world (tp ranks share their tokens)
  double model_flops_per_token = 0, tflops_per_chip = 0, mfu = 0, hfu = 0;
  double mfu_peak_tflops = 0;  // MFU's denominator per chip: the chip's in the fastest precision the GEMMs use
  std::string mfu_precision;   // empty (the activation dtype's peak), FP8 or MXFP8
  double hardware_flops_per_rank = 0;
  SimMemory memory;  // per chip
  double hbm_bytes = 0;
  bool oom = false;
  std::string oom_advice;
  std::vector<SimSpan> spans;  // rank 0's timeline
  // pipeline parallel: each stage's rank, scheduled side by side (the step ends with the last). The
  // schedules' windows (pipeline_s: from the first stage's start to the last stage's end, summed over the
  // accumulation steps) hold the bubble: bubble_s is the largest stage's time in them neither computing nor
  // waiting for its own collectives
  // (waiting on a neighbour's activations or gradients, or done early); bubble_fraction = bubble_s / pipeline_s
  std::vector<SimStage> stages;
  double pipeline_s = 0, bubble_s = 0, bubble_fraction = 0;
  // rank 0's collective starts of the planned step, in issue order; bytes as priced (gradients in
  // training.mixed_precision_reduce, the rest in training.mixed_precision_param: the meta run itself is float32)
  std::vector<CostEvent> collectives;
};

}  // namespace titan
