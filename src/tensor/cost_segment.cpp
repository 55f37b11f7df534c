#include "src/tensor/cost_segment.h"

#include <atomic>
#include <map>

#include "src/tensor/tensor.h"

namespace titan {

namespace {
std::atomic<bool> g_repeat{true};
std::atomic<int64_t> g_repeated{0};
std::atomic<int64_t> g_refused{0};
thread_local int t_repeats_off = 0;

bool same_event(const CostEvent& a, const CostEvent& b) {
  return a.kind == b.kind && a.op == b.op && a.flops == b.flops && a.bytes == b.bytes &&
         a.gemm.batch == b.gemm.batch && a.gemm.m == b.gemm.m && a.gemm.n == b.gemm.n && a.gemm.k == b.gemm.k &&
         a.gemm.precision == b.gemm.precision && a.gemm.split_accumulation == b.gemm.split_accumulation &&
         a.attention.pairs == b.attention.pairs && a.attention.d == b.attention.d && a.attention.dv == b.attention.dv &&
         a.attention.backward == b.attention.backward && a.attention.scores == b.attention.scores &&
         a.attention.sq == b.attention.sq && a.attention.skv == b.attention.skv && a.cls == b.cls &&
         a.eager.kernels == b.eager.kernels && a.eager.traffic == b.eager.traffic && a.group.id == b.group.id &&
         (a.group.world_ranks == b.group.world_ranks ||
          (a.group.world_ranks && b.group.world_ranks && *a.group.world_ranks == *b.group.world_ranks)) && a.gradients == b.gradients && a.typed == b.typed &&
         a.peer == b.peer && a.send == b.send && a.tag == b.tag && a.memory == b.memory;
}
}  // namespace

bool CostSegment::same_as(const CostSegment& o) const {
  if (events.size() != o.events.size() || net != o.net || peak != o.peak || total_peak != o.total_peak) return false;
  // collective ids pair a start with its wait: equal when they pair the same positions
  std::map<int64_t, int64_t> ids;
  for (size_t i = 0; i < events.size(); ++i) {
    const CostEvent &a = events[i], &b = o.events[i];
    if (!same_event(a, b)) return false;
    if (a.kind != CostEvent::Kind::Compute) {
      auto [it, fresh] = ids.emplace(a.comm_id, b.comm_id);
      if (it->second != b.comm_id) return false;
      (void)fresh;
    }
  }
  return true;
}

CostSegmentRecorder::CostSegmentRecorder()
    : trace_(CostTrace::current()), tracker_(MemoryTracker::get(default_device())) {
  if (trace_) first_ = trace_->events_.size(), first_run_ = trace_->runs_.size();
  paused_comms_ = comm_starts_traced_while_paused();
  before_ = tracker_.stats();
  tracker_.reset_peak();  // the stretch's own peak from here
}

CostSegmentRecorder::~CostSegmentRecorder() {
  if (!finished_) tracker_.raise_peak(before_.peak, before_.total_peak);
}

CostSegment CostSegmentRecorder::finish() {
  CostSegment seg;
  const MemoryStats after = tracker_.stats();
  tracker_.raise_peak(before_.peak, before_.total_peak);
  finished_ = true;
  for (int i = 0; i < kNumMemoryCategories; ++i) {
    seg.net[i] = after.current[i] - before_.current[i];
    seg.peak[i] = after.peak[i] - before_.current[i];
  }
  seg.total_peak = after.total_peak - before_.total_current;
  if (!trace_ || CostTrace::current() != trace_) return seg;
  seg.events.assign(trace_->events_.begin() + (std::ptrdiff_t)first_, trace_->events_.end());
  std::map<int64_t, int> open;  // started, not yet waited for
  std::map<int64_t, int32_t> order;  // id -> its place among the ids first used
  seg.repeatable = true;
  seg.id_ordinal.reserve(seg.events.size());
  for (CostEvent& e : seg.events) {
    seg.id_ordinal.push_back(e.kind == CostEvent::Kind::Compute
                                 ? -1
                                 : order.emplace(e.comm_id, (int32_t)order.size()).first->second);
    if (e.kind == CostEvent::Kind::Compute)  // (only kernels' records hold the bytes)
      for (int i = 0; i < kNumMemoryCategories; ++i) e.memory[i] -= before_.current[i];
    if (e.kind == CostEvent::Kind::CommStart) {
      open[e.comm_id] = 1;
    } else if (e.kind == CostEvent::Kind::CommWait) {
      if (!open.erase(e.comm_id)) seg.repeatable = false;  // waits for what started before
    }
  }
  if (!open.empty()) seg.repeatable = false;  // leaves a collective in flight
  if (comm_starts_traced_while_paused() != paused_comms_) seg.repeatable = false;
  if (trace_->runs_.size() != first_run_) seg.repeatable = false;  // a pass repeated inside: not all recorded
  seg.distinct_ids = (int64_t)order.size();
  repeatable_ = seg.repeatable;
  return seg;
}

void CostSegmentRecorder::refer_to(const std::shared_ptr<const CostSegment>& rec) {
  TITAN_CHECK(finished_ && repeatable_ && rec && rec->repeatable && trace_ && CostTrace::current() == trace_ &&
                  !trace_->timed() && trace_->runs_.size() == first_run_ &&
                  trace_->events_.size() - first_ == rec->events.size(),
              "CostSegmentRecorder::refer_to: only a finished, repeatable stretch of an untimed trace, recorded "
              "alike to a repeatable record (", trace_ ? trace_->events_.size() - first_ : 0, " events against ",
              rec ? rec->events.size() : 0, ")");
  trace_->events_.resize(first_);
  trace_->runs_.push_back({first_, rec, before_.current, {}, next_comm_ids(rec->distinct_ids)});
}

void replay_cost_segment(const std::shared_ptr<const CostSegment>& rec) {
  const CostSegment& seg = *rec;
  ++g_repeated;
  MemoryTracker& tracker = MemoryTracker::get(default_device());
  const MemoryStats now = tracker.stats();
  std::array<int64_t, kNumMemoryCategories> peak{};
  for (int i = 0; i < kNumMemoryCategories; ++i) peak[i] = now.current[i] + seg.peak[i];
  tracker.raise_peak(peak, now.total_current + seg.total_peak);
  for (const CostEvent& r : seg.events)
    if (r.kind != CostEvent::Kind::CommWait)  // as record_cost and record_comm_start charge them
      charge_cost_scopes(r.op, r.kind == CostEvent::Kind::Compute ? r.flops : 0, r.bytes);
  CostTrace* trace = CostTrace::current();
  if (!trace) return;
  // by reference (event_stream.h); a timed trace stamps each event when it ran, which a record cannot give
  TITAN_CHECK(!trace->timed(), "replay_cost_segment: a timed trace (a measured step) repeats no pass");
  trace->runs_.push_back({trace->events_.size(), rec, now.current, {}, next_comm_ids(seg.distinct_ids)});
}

bool repeated_cost_segments() { return g_repeat.load() && t_repeats_off == 0; }
CostSegmentRepeatsOff::CostSegmentRepeatsOff() { ++t_repeats_off; }
CostSegmentRepeatsOff::~CostSegmentRepeatsOff() { --t_repeats_off; }
void set_repeated_cost_segments(bool on) { g_repeat.store(on); }
int64_t repeated_cost_segment_count() { return g_repeated.load(); }
void refuse_repeated_pass(const std::string& why) {
  ++g_refused;
  throw CostSegmentRefused(why);
}
int64_t refused_repeated_passes() { return g_refused.load(); }

}  // namespace titan
