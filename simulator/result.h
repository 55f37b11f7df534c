// simulator/result.h — what a simulated (or measured) step is: its timeline
// (spans on streams), per-stage figures under pipeline parallel, the time and
// memory sums, throughput and MFU. Filled by the scheduler (schedule.h) and
// simulate_step (simulate.h); read by the report (report.h) and the Chrome
// trace (trace.h).
#pragma once
#include <algorithm>
#include <array>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "simulator/memory_track.h"
#include "simulator/timeline.h"
#include "src/tensor/cost.h"

namespace titan {

// When a network level's links carry this rank's transfers (merged intervals, seconds).
using LinkBusy = std::map<std::string, std::vector<std::pair<double, double>>>;

// The step's critical path across ranks and streams: the chain of slices, each waiting for the one before,
// from the step's start to its end (critical_path.h). Segments in time order; a stall on the path is replaced
// by what it waited for, a gap the host held is its own segment.
struct PathSegment {
  SpanRef span;
  double start = 0, dur = 0;
  std::string what;  // its attribution: "gemm", "attention", ..., "communication dp_shard", "pipeline pp", "host"
};
struct CriticalPath {
  std::vector<PathSegment> segments;
  double length = 0;                     // sum of the segments: the step's end
  std::map<std::string, double> by_what;  // seconds on the path per attribution
  std::map<int, double> by_lane;          // seconds on the path per lane (pipeline stage)
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
  Timeline spans;
  MemoryTrack memory_samples;
  LinkBusy link_busy;
};

struct SimResult {
  std::string chip, system, mode, layout, algorithms;
  double start_unix_s = 0;  // measured: the step's start on the system clock (merged ranks share one axis)
  int world = 1, ranks_per_chip = 1, chips = 1, systems = 1;
  double step_s = 0;               // simulated step time
  // the step's split (pipeline parallel: the busiest stage's, busiest_stage below)
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
  Timeline spans;  // rank 0's timeline
  MemoryTrack memory_samples;  // rank 0's memory over the step (per chip)
  LinkBusy link_busy;                        // rank 0's links busy over the step, per network level
  // pipeline parallel: each stage's rank, scheduled side by side (the step ends with the last). The
  // schedules' windows (pipeline_s: from the first stage's start to the last stage's end, summed over the
  // accumulation steps) hold the bubble: bubble_s is the busiest stage's time in them neither computing nor
  // waiting for its own collectives (waiting on a neighbour's activations or gradients, or done early);
  // bubble_fraction = bubble_s / pipeline_s. The busiest stage (most compute + exposed communication +
  // host-bound time; 0 without pp) also gives the step's split above (compute_s ... kernels, comm_busy_by_group,
  // link_contention_s; the timeline, links, memory samples and collectives stay rank 0's); a stage with less work
  // idles longer by its imbalance: most_idle_s, the longest idle of any stage (most_idle_stage)
  std::vector<SimStage> stages;
  double pipeline_s = 0, bubble_s = 0, bubble_fraction = 0;
  int busiest_stage = 0, most_idle_stage = 0;
  double most_idle_s = 0;
  // rank 0's collective starts of the planned step, in issue order; bytes as priced (gradients in
  // training.mixed_precision_reduce, the rest in training.mixed_precision_param: the meta run itself is float32)
  std::vector<CostEvent> collectives;
  CriticalPath critical;  // across every scheduled lane (stage); empty for measured timelines
};

}  // namespace titan
