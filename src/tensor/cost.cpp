#include "src/tensor/cost.h"
#include "src/tensor/event_stream.h"

#include <algorithm>
#include <chrono>
#include <iterator>

#include "src/tensor/huge_pages.h"
#include "src/tensor/tensor.h"

namespace titan {

namespace {
thread_local CostScope* t_scope = nullptr;
thread_local CostTrace* t_trace = nullptr;
thread_local int64_t t_next_comm = 0;
thread_local int t_timed = 0;              // timed scopes alive on this thread
thread_local const char* t_last_op = nullptr;
thread_local double t_last_time = 0;
thread_local int t_paused = 0;             // CostRecordPause scopes alive on this thread
thread_local int64_t t_paused_comm_starts = 0;  // collectives traced (not charged to the scopes) under a pause
thread_local GemmPrecision t_precision = GemmPrecision::high;  // the innermost GemmPrecisionScope's
thread_local bool t_split_accumulation = false;                 // its split accumulation

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

CostScope::CostScope(bool timed) : parent_(t_scope), timed_(timed) {
  t_scope = this;
  if (timed_) {
    if (t_timed++ == 0) t_last_op = nullptr;
    t_last_time = now();
  }
}

CostScope::~CostScope() {
  if (timed_) {
    flush_time();
    --t_timed;
  }
  t_scope = parent_;
}

std::map<std::string, OpCost> CostScope::by_op() const {
  std::map<std::string, OpCost> out;
  for (const auto& [name, c] : by_op_) {
    OpCost& o = out[name];
    o.calls += c.calls;
    o.flops += c.flops;
    o.bytes += c.bytes;
    o.seconds += c.seconds;
  }
  return out;
}

void CostScope::reset() {
  total_ = {};
  by_op_.clear();
}

void CostScope::flush_time() {
  if (!t_timed) return;
  const double t = now();
  if (t_last_op)
    for (CostScope* s = t_scope; s; s = s->parent_)
      if (s->timed_) {
        s->total_.seconds += t - t_last_time;
        s->by_op_[t_last_op].seconds += t - t_last_time;
      }
  t_last_op = nullptr;
  t_last_time = t;
}

CostTrace::CostTrace(bool timed) : parent_(t_trace), timed_(timed), t0_(timed ? now() : 0) { t_trace = this; }
int64_t next_comm_id() { return t_next_comm++; }
int64_t next_comm_ids(int64_t n) {
  const int64_t first = t_next_comm;
  t_next_comm += n;
  return first;
}
int64_t comm_starts_traced_while_paused() { return t_paused_comm_starts; }
CostTrace* CostTrace::current() { return t_trace; }
double CostTrace::elapsed() const { return timed_ ? now() - t0_ : 0; }
CostTrace::~CostTrace() { t_trace = parent_; }
const std::vector<CostEvent>& CostTrace::events() const {
  TITAN_CHECK(runs_.empty(), "CostTrace::events: the trace holds ", runs_.size(), " repeated passes beside its ",
              events_.size(), " recorded events; take_stream() gives them all in order");
  return events_;
}
std::vector<CostEvent> CostTrace::take() {
  TITAN_CHECK(runs_.empty(), "CostTrace::take: the trace holds ", runs_.size(), " repeated passes; take_stream() "
              "gives them with the rest");
  return std::move(events_);
}
EventStream CostTrace::take_stream() { return EventStream(std::move(events_), std::move(runs_)); }

CostRecordPause::CostRecordPause() { ++t_paused; }
CostRecordPause::~CostRecordPause() { --t_paused; }

void record_cost(const char* op, double flops, double bytes, const GemmShape& gemm, KernelClass cls, EagerSplit eager) {
  if (t_paused) return;
  if (t_trace) {
    CostEvent e;
    e.op = op;
    e.flops = flops;
    e.bytes = bytes;
    e.gemm = gemm;
    if (gemm.batch > 0) {
      e.gemm.precision = t_precision;
      e.gemm.split_accumulation = t_split_accumulation && t_precision == GemmPrecision::fp8;
    }
    e.cls = cls;
    e.eager = eager;
    e.t = t_trace->elapsed();
    e.memory = MemoryTracker::get(default_device()).stats().current;
    t_trace->append(std::move(e));
  }
  charge_cost_scopes(op, flops, bytes);
}

void charge_cost_scopes(const char* op, double flops, double bytes) {
  if (!t_scope) return;
  if (t_timed) {
    t_scope->flush_time();
    t_last_op = op;
  }
  for (CostScope* s = t_scope; s; s = s->parent_) {
    s->total_.calls += 1;
    s->total_.flops += flops;
    s->total_.bytes += bytes;
    OpCost& c = s->by_op_[op];
    c.calls += 1;
    c.flops += flops;
    c.bytes += bytes;
  }
}

// Grows the event list four times at a time into a buffer advised to huge pages before anything touches it (a
// 16k-chip plan records ~10^6 events: with 4 KiB pages each page's first touch faulted). What a buffer holds is
// copied into the next one and its pages freed: growing by 4 touches 4/3 of the final size where doubling touched
// twice it (a capacity not reached is never touched, so costs nothing).
void CostTrace::grow() {
  if (events_.size() < events_.capacity()) return;
  std::vector<CostEvent> bigger;
  const size_t cap = std::max<size_t>(1024, 4 * events_.capacity());
  bigger.reserve(cap);
  advise_huge_pages(bigger.data(), cap * sizeof(CostEvent));
  bigger.insert(bigger.end(), std::make_move_iterator(events_.begin()), std::make_move_iterator(events_.end()));
  events_.swap(bigger);
}

void CostTrace::append(CostEvent&& e) {
  grow();
  events_.push_back(std::move(e));
}

void record_attention_cost(const char* op, double flops, double bytes, const AttentionShape& shape, EagerSplit eager) {
  const size_t before = t_trace ? t_trace->events_.size() : 0;
  record_cost(op, flops, bytes, GemmShape{}, KernelClass::Attention, eager);
  if (t_trace && t_trace->events_.size() == before + 1) t_trace->events_.back().attention = shape;
}

namespace {
thread_local bool t_gradients = false;
}
GemmPrecisionScope::GemmPrecisionScope(GemmPrecision p, bool split_accumulation)
    : prev_(t_precision), prev_split_(t_split_accumulation) {
  t_precision = p;
  t_split_accumulation = split_accumulation;
}
GemmPrecisionScope::~GemmPrecisionScope() {
  t_precision = prev_;
  t_split_accumulation = prev_split_;
}
GemmPrecision GemmPrecisionScope::current() { return t_precision; }

GradientReductionScope::GradientReductionScope() : prev_(t_gradients) { t_gradients = true; }
GradientReductionScope::~GradientReductionScope() { t_gradients = prev_; }
bool GradientReductionScope::active() { return t_gradients; }

int64_t record_comm_start(const char* kind, const CommGroupRef& group, double bytes, DType dtype) {
  if (!t_paused) charge_cost_scopes(kind, 0, bytes);  // collectives count their bytes (no FLOPs) in the scopes
  if (!t_trace) return -1;
  if (t_paused) ++t_paused_comm_starts;
  CostEvent e;
  e.kind = CostEvent::Kind::CommStart;
  e.op = kind;
  e.bytes = bytes;
  e.comm_id = next_comm_id();
  e.group = group;
  e.gradients = t_gradients;
  e.typed = dtype != DType::F32;
  e.t = t_trace->elapsed();
  const int64_t id = e.comm_id;
  t_trace->append(std::move(e));
  return id;
}

int64_t record_p2p_start(bool send, const CommGroupRef& group, double bytes, int peer, int64_t tag, DType dtype) {
  const int64_t id = record_comm_start(send ? "send" : "recv", group, bytes, dtype);
  if (id >= 0) {
    t_trace->events_.back().send = send;
    t_trace->events_.back().peer = peer;
    t_trace->events_.back().tag = tag;
  }
  return id;
}

void record_comm_wait(int64_t id) {
  if (!t_trace || id < 0) return;
  CostEvent e;
  e.kind = CostEvent::Kind::CommWait;
  e.comm_id = id;
  e.t = t_trace->elapsed();
  t_trace->append(std::move(e));
}

}  // namespace titan
