#include "parallel/pass_repeats.h"

#include <algorithm>
#include <string>

#include "src/tensor/cost.h"
#include "src/tensor/memory.h"

namespace titan::parallel {

PassRepeats::PassRepeats(const std::vector<PipelineAction>& actions, bool training, const FSDP* fsdp, bool meta)
    : actions_(actions),
      training_(training),
      fsdp_(fsdp),
      on_(meta && default_device() == Device::Meta && CostTrace::current() != nullptr &&
          !CostTrace::current()->timed() && repeated_cost_segments()) {
  if (!on_) return;
  for (size_t k = 0; k < actions_.size(); ++k)
    if (actions_[k].kind == PipelineAction::Backward) {
      backward_at_[{actions_[k].stage, actions_[k].microbatch}] = k;
      last_backward_[actions_[k].stage] = k;
    }
  for (size_t k = 0; k < actions_.size(); ++k)
    if (last_pass(k) && actions_[k].kind == PipelineAction::Backward) last_backwards_.push_back(k);
}

bool PassRepeats::last_pass(size_t ai) const {
  auto it = last_backward_.find(actions_[ai].stage);
  return training_ && it != last_backward_.end() && actions_[it->second].microbatch == actions_[ai].microbatch;
}

bool PassRepeats::steady_through(size_t ai, size_t bi) const {
  for (size_t k = bi; k > ai; --k) {  // from the backward down: a pass not yet steady is likelier late
    auto it = passes_.find(actions_[k].stage);
    if (it == passes_.end()) return false;
    const Passes& ps = it->second;
    if (actions_[k].kind == PipelineAction::Forward ? !ps.forward_steady : !(ps.backward && ps.backward_steady))
      return false;
  }
  return true;
}

bool PassRepeats::forward(size_t ai) {
  if (!on_) return false;
  const PipelineAction& a = actions_[ai];
  const Passes& ps = passes_[a.stage];
  if (!ps.forward_steady || last_pass(ai) || state() != ps.forward_state) return false;
  if (!training_) return true;
  const size_t bi = backward_at_.at({a.stage, a.microbatch});
  auto it = std::upper_bound(last_backwards_.begin(), last_backwards_.end(), ai);
  return !(it != last_backwards_.end() && *it < bi) && steady_through(ai, bi);
}

bool PassRepeats::backward(size_t ai, bool forward_repeated) {
  if (!on_) return false;
  const PipelineAction& a = actions_[ai];
  const Passes& ps = passes_[a.stage];
  const bool steady = ps.backward && ps.backward_steady && !ps.keeps_graph && state() == ps.backward_state;
  if (forward_repeated && !steady)
    refuse_repeated_pass("pipeline: stage " + std::to_string(a.stage) + " micro-batch " +
                         std::to_string(a.microbatch) + "'s forward was repeated, its backward cannot be");
  return forward_repeated || (steady && !last_pass(ai));
}

// What a repeated pass leaves held: the record's end. A fresh buffer for its output (`shape` in category `c`) and
// the rest as a charge, settled first (its releases before its additions), so no moment holds more than that.
Tensor PassRepeats::settle(std::shared_ptr<MemoryCharge>& charge, const MemoryStats& start, const CostSegment& seg,
                           const Shape& shape, MemoryCategory c) {
  MemoryTracker& tracker = MemoryTracker::get(Device::Meta);
  if (!charge) charge = std::make_shared<MemoryCharge>(tracker);
  const MemoryStats now = tracker.stats();
  std::array<int64_t, kNumMemoryCategories> d{};
  for (int k = 0; k < kNumMemoryCategories; ++k) d[k] = start.current[k] + seg.net[k] - now.current[k];
  if (!shape.empty()) d[(int)c] -= numel(shape) * (int64_t)dtype_size(DType::F32);
  charge->adjust_by(d);
  if (shape.empty()) return Tensor();
  MemoryCategoryScope scope(c);
  return empty(shape, DType::F32, Device::Meta);
}

Tensor PassRepeats::repeat_forward(int64_t stage, const Shape& shape, std::shared_ptr<MemoryCharge>& charge) {
  const Passes& ps = passes_[stage];
  const MemoryStats start = MemoryTracker::get(Device::Meta).stats();
  replay_cost_segment(ps.forward);
  return settle(charge, start, *ps.forward, shape, ps.output_category);
}

Tensor PassRepeats::repeat_backward(int64_t stage, const Shape& shape, std::shared_ptr<MemoryCharge>& charge) {
  const Passes& ps = passes_[stage];
  const MemoryStats start = MemoryTracker::get(Device::Meta).stats();
  replay_cost_segment(ps.backward);
  return settle(charge, start, *ps.backward, shape, ps.grad_category);
}

void PassRepeats::begin() {
  if (!on_) return;
  recording_state_ = state();
  recording_.emplace();
}

bool record_pass(CostSegmentRecorder& rec, CostSegment seg, std::vector<int64_t> start, const std::vector<int64_t>& now,
                 std::shared_ptr<const CostSegment>& last, std::vector<int64_t>& last_state, bool also) {
  const bool alike = also && seg.repeatable && last && last->repeatable && seg.same_as(*last);
  const bool steady = alike && start == now && start == last_state;
  if (alike)
    rec.refer_to(last);  // the trace holds this pass as the record it repeats
  else
    last = std::make_shared<const CostSegment>(std::move(seg));
  last_state = std::move(start);
  return steady;
}

void PassRepeats::record(std::shared_ptr<const CostSegment>& last, std::vector<int64_t>& last_state, bool& steady,
                         CostSegment seg) {
  steady = record_pass(*recording_, std::move(seg), std::move(recording_state_), state(), last, last_state);
  recording_.reset();
}

void PassRepeats::end_forward(int64_t stage, const Tensor& output, Routed routed, bool keeps_graph) {
  if (!recording_) return;
  CostSegment seg = recording_->finish();
  Passes& ps = passes_[stage];
  if (output.defined()) ps.output_category = output.impl()->storage->category();
  ps.keeps_graph = ps.keeps_graph || keeps_graph;
  record(ps.forward, ps.forward_state, ps.forward_steady, std::move(seg));
  ps.forward_steady = ps.forward_steady && !ps.keeps_graph && routed == ps.routed;
  ps.routed = std::move(routed);
}

void PassRepeats::end_backward(int64_t stage, const Tensor& input_grad) {
  if (!recording_) return;
  CostSegment seg = recording_->finish();
  Passes& ps = passes_[stage];
  if (input_grad.defined()) ps.grad_category = input_grad.impl()->storage->category();
  record(ps.backward, ps.backward_state, ps.backward_steady, std::move(seg));
}

}  // namespace titan::parallel
