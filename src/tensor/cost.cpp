#include "src/tensor/cost.h"

namespace titan {

namespace {
thread_local CostScope* t_scope = nullptr;
}

CostScope::CostScope() : parent_(t_scope) { t_scope = this; }
CostScope::~CostScope() { t_scope = parent_; }

void CostScope::reset() {
  total_ = {};
  by_op_.clear();
}

void record_cost(const char* op, double flops, double bytes) {
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
