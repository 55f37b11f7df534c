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

#include "src/tensor/cost.h"

namespace titan {

// What a slice waited for: the slice whose end let it start (a stall: whose end ended it), and why. The
// scheduler records the binding one, so following them back from the step's last slice is the critical path
// (critical_path.h); the trace draws each kind as its own flow category.
enum class DepKind : uint8_t {
  none,        // the step's first slice on its track
  stream,      // the previous slice of its stream (kernels in order; a collective queued behind another)
  data,        // a collective after the kernel that issued it; a stall on a collective waited for at once
  prefetch,    // a stall on a collective issued ahead of its consumer (FSDP's prefetched all-gather, a
               // reduction left in flight) that still had not finished
  collective,  // a collective (or the stall before it) waiting for the last of its ranks to issue it
  pipeline,    // a pipeline receive waiting for its send
  host,        // the device waiting for the host to issue the next kernel (host-bound)
};
constexpr std::array<std::string_view, 7> enum_names(DepKind) {
  return {"none", "stream", "data", "prefetch", "collective", "pipeline", "host"};
}
inline std::string dep_name(DepKind k) { return std::string(enum_names(k)[(size_t)k]); }

struct SpanRef {  // a slice of a scheduled rank: its lane (pipeline stage) and its index in that lane's spans
  int lane = -1;
  int64_t span = -1;
  bool valid() const { return lane >= 0 && span >= 0; }
};

// The process's one copy of a slice's label (a stream, an op or chain name, a group's members): slices hold a
// view of it, so a timeline of millions of slices copies and frees no strings (the labels are few).
std::string_view span_label(std::string_view s);

struct SimSpan {  // one slice of the timeline (seconds from the step's start)
  // stream and name: span_label's views (or string literals)
  std::string_view stream, name;
  // compute | comm | idle (waiting for a collective) | bubble | host (waiting for the host to issue the next
  // kernel): a string literal
  std::string_view category;
  double start = 0, dur = 0;
  double flops = 0, bytes = 0;
  int64_t flow_to = -1;  // comm -> index of the idle span that waited for it
  int stage = 0;         // pipeline stage (0 without pp)
  int64_t event = -1;    // the CostEvent (its index in the rank's events) this slice runs; -1: none (a wait, a
                         // fused chain of several)
  double other_s = -1;   // side by side (compare.h): the same op's time in the other timeline (-1: not compared)
  std::string_view kernel_class;  // compute: gemm | attention | elementwise | optimizer (simulated kernels; a literal)
  float launch_s = 0;        // of its time, the launch overhead (simulated kernels)
  int launches = 1;          // simulated kernels: the launches it stands for (an eager op's aten kernels back to
                             // back, one slice; a launch that waits for the host starts a slice of its own)
  // a measured collective: its members (world ranks, "0,1,2"; span_label's view) and its number among this rank's
  // collectives over them: the same collective on every member has the same pair (merged traces link them, trace.h)
  std::string_view group_ranks;
  int64_t group_seq = -1;
  std::array<float, 5> engine_busy{};  // priced by engines: seconds per core each engine is busy in it
                                       // (Tensor, Vector, Scalar, GpSimd, DMA; simulator/engines.h)
  DepKind dep_kind = DepKind::none;
  SpanRef dep;               // what it waited for (simulated timelines)
};

// The memory a rank holds over the step, by category (bytes per chip, MemoryCategory's order), from when a
// kernel starts.
struct MemorySample {
  double t = 0;
  std::array<double, kNumMemoryCategories> bytes{};
};
// Appends the memory held at `t` where it changed (a sample at the same time is replaced: the later holds).
inline void add_memory_sample(std::vector<MemorySample>& samples, double t,
                              const std::array<int64_t, kNumMemoryCategories>& bytes) {
  if (!samples.empty() && std::equal(bytes.begin(), bytes.end(), samples.back().bytes.begin())) return;
  MemorySample m{t, {}};
  std::copy(bytes.begin(), bytes.end(), m.bytes.begin());
  if (!samples.empty() && samples.back().t == t) samples.back() = m;
  else samples.push_back(m);
}
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
  std::vector<SimSpan> spans;
  std::vector<MemorySample> memory_samples;
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
  std::vector<SimSpan> spans;  // rank 0's timeline
  std::vector<MemorySample> memory_samples;  // rank 0's memory over the step (per chip)
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
