// simulator/timeline.h — a rank's timeline: its slices (SimSpan) in the order the scheduler placed them.
//
// A long pipeline's stage runs most of its passes as copies of a few records (schedule.cpp: a pass placed
// whole). A Timeline holds such a copy by reference: the record's slices once (times from the pass's start,
// indices relative to it), and per copy only where it starts (time, slice index, event index) and what its
// first slices wait for before it. Reading a slice of a placed copy gives it as the event-by-event schedule would
// have appended it (start shifted, its dependency, flow and event indices made absolute), so a stage of 700k
// slices holds a few thousand records' worth of memory and placing a pass copies no slice. Slices are read by
// value (operator[], iteration); editing one (edit) first writes out the copy it is in (placed_copies.h).
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "simulator/placed_copies.h"

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

// A copy of a record's slices placed on a lane: its k-th slice is the record's, start shifted by t0, its coded
// dependency resolved (timeline.h's kDep* codes), flow and event indices made absolute.
struct PlacedSlices {
  std::shared_ptr<const std::vector<SimSpan>> record;  // start: offset; dep coded; flow_to, event: offsets
  double t0 = 0;
  int lane = 0;
  int64_t s0 = 0;  // the index of its first slice on the lane
  int64_t event0 = 0, before_compute = -1;
  std::vector<int64_t> before_stream;
  size_t n() const { return record->size(); }
  SimSpan item(size_t k) const;
};

class Timeline : public PlacedCopies<SimSpan, PlacedSlices> {
 public:
  // a placed copy's slice waits for: a slice of the copy (SpanRef::span: its offset in the record), the
  // compute stream's slice before the copy, or the slice before it of the copy's before_stream[span]
  static constexpr int kDepInPass = -2, kDepBeforeCompute = -3, kDepBeforeStream = -4;
  using Record = std::shared_ptr<const std::vector<SimSpan>>;

  // appends the record's slices as a copy starting at time t0 on lane `lane`, its first event `event0`; the
  // compute stream's slice before it (-1: none) and before_stream's slices resolve its coded dependencies
  void place(Record record, double t0, int lane, int64_t event0, int64_t before_compute,
             std::vector<int64_t> before_stream) {
    PlacedCopies::place(PlacedSlices{std::move(record), t0, lane, (int64_t)size(), event0, before_compute,
                                     std::move(before_stream)});
  }
};

}  // namespace titan
