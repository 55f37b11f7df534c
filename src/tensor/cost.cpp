#include "src/tensor/cost.h"

#include <chrono>

namespace titan {

namespace {
thread_local CostScope* t_scope = nullptr;
thread_local int t_timed = 0;              // timed scopes alive on this thread
thread_local const char* t_last_op = nullptr;
thread_local double t_last_time = 0;

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

void record_cost(const char* op, double flops, double bytes) {
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

}  // namespace titan
