// src/tensor/cost_segment.h — a stretch of a cost trace, recorded once and repeated.
//
// A pipeline stage's micro-batches run the same forward and the same backward (same ops, shapes, collectives
// and memory moves) once the schedule is in its steady state. A meta plan of m micro-batches per schedule
// traced each of them: at PP 64 with 512 micro-batches that is 32,768 chunk passes per stage. The pipeline
// (parallel/pass_repeats.h) records a pass (CostSegmentRecorder), and once two consecutive passes of a stage
// recorded alike (same_as) it repeats the record for the next ones (replay_cost_segment) instead of tracing
// them: the trace receives the same events (memory at each one shifted to the tracker's bytes now, fresh
// collective ids), the CostScopes the same calls, FLOPs and bytes, the tracker the same peak above its bytes
// now; what the pass leaves held is the caller's to charge (MemoryCharge). Only passes whose collectives
// start and finish inside them are repeated. Tests hold a plan made so to
// the plan that traces every pass, event by event (Simulation.RepeatedMicroBatchesPlanAsTracedOnes).
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "src/tensor/cost.h"
#include "src/tensor/memory.h"

namespace titan {

struct CostSegment {
  std::vector<CostEvent> events;  // memory relative to the start; collective ids as recorded
  std::array<int64_t, kNumMemoryCategories> net{};   // the bytes held at the end less those at the start
  std::array<int64_t, kNumMemoryCategories> peak{};  // the most held above the start, per category
  int64_t total_peak = 0;                            //   and in all
  // every collective started inside finishes inside; none was traced inside a CostRecordPause (not charged to
  // the cost scopes: a repeat could not tell)
  bool repeatable = false;
  // per event: a collective's place in the order the record first used it (its id in a repeat: the repeat's
  // first id + this); -1 for a kernel. And how many distinct collectives that is.
  std::vector<int32_t> id_ordinal;
  int64_t distinct_ids = 0;
  // The same ops, shapes, collectives (groups, sizes, order) and memory moves as `o`.
  bool same_as(const CostSegment& o) const;
};

// RAII: records what the current thread's trace receives from construction to finish() (nothing when no
// trace is alive: finish() returns an empty, unrepeatable segment). The tracker's peak over the stretch is
// measured from the bytes at the start and restored to the run's after.
class CostSegmentRecorder {
 public:
  CostSegmentRecorder();
  ~CostSegmentRecorder();
  CostSegmentRecorder(const CostSegmentRecorder&) = delete;
  CostSegmentRecorder& operator=(const CostSegmentRecorder&) = delete;
  CostSegment finish();
  // After finish(), for a repeatable stretch recorded alike to the repeatable record `rec` (the caller checks
  // same_as; this checks the rest and the event count): the trace holds it as a reference to `rec`, as
  // replay_cost_segment appends one (fresh collective ids), instead of its own events, so what reads the trace
  // (the scheduler) meets one record for the passes that ran alike. The cost scopes and the tracker keep what
  // the traced ops gave them.
  void refer_to(const std::shared_ptr<const CostSegment>& rec);

 private:
  CostTrace* trace_;
  MemoryTracker& tracker_;
  size_t first_ = 0, first_run_ = 0;  // the trace's owned events and repeated passes at the start
  int64_t paused_comms_ = 0;  // comm_starts_traced_while_paused() at the start
  MemoryStats before_;
  bool finished_ = false;
  bool repeatable_ = false;  // finish()'s segment was
};

// Appends the segment's events to the current thread's trace as if its ops ran now (a reference to the record,
// its memory shifted to the bytes held now and its collectives given fresh ids: event_stream.h; an untimed trace
// only), charges the CostScopes, and raises the tracker's peak by the segment's above the
// bytes held now. Leaves the bytes held unchanged.
void replay_cost_segment(const std::shared_ptr<const CostSegment>& seg);

// Whether plans repeat steady passes (on by default, process-wide, unless a CostSegmentRepeatsOff is alive on
// this thread): off, every pass is traced, which is what the tests compare a plan made with repeats to.
bool repeated_cost_segments();
void set_repeated_cost_segments(bool on);
class CostSegmentRepeatsOff {  // RAII: this thread traces every pass
 public:
  CostSegmentRepeatsOff();
  ~CostSegmentRepeatsOff();
  CostSegmentRepeatsOff(const CostSegmentRepeatsOff&) = delete;
  CostSegmentRepeatsOff& operator=(const CostSegmentRepeatsOff&) = delete;
};
// Thrown where a plan finds it repeated a pass it should have traced (a state the record did not start from
// before the pass's backward): the planner makes that plan again tracing every pass (simulator/plan.cpp).
struct CostSegmentRefused : std::runtime_error {
  using std::runtime_error::runtime_error;
};
[[noreturn]] void refuse_repeated_pass(const std::string& why);  // counts and throws CostSegmentRefused
int64_t refused_repeated_passes();                             // so far, by this process
// Passes repeated so far by this process (all threads).
int64_t repeated_cost_segment_count();

}  // namespace titan
