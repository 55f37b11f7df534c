// parallel/pass_repeats.h — which passes of a pipeline schedule a meta plan repeats from their record.
//
// A stage's micro-batches run the same forward and the same backward once its schedule is steady; a meta plan
// of m micro-batches per schedule traced each (GPT 1008B at PP 64: 65,536 chunk passes). On meta tensors under a
// cost trace, the pipeline (pipeline.cpp) records every pass it traces here, and once a stage's last two passes
// of a kind recorded alike (CostSegment::same_as), started from the same FSDP state and left it as they found
// it (FSDP::pass_state), and finished every collective they started, its next ones are repeated from the record
// (replay_cost_segment, src/tensor/cost_segment.h) instead of being traced:
//  - a backward is repeated when its forward was (no graph was built) or when its record is steady; the stage's
//    last backward (FSDP's reduction) and so its forward are always traced;
//  - a forward is repeated only where its backward can be too: every pass the rank runs between the two (its
//    backward included) is of a stage and kind already steady (a stage's first passes may change the state) and
//    none is a stage's last backward (FSDP's reduction changes it; a last forward is traced but leaves it as any
//    other); where the state still moved before such a backward, the plan is refused (CostSegmentRefused) and
//    made again tracing every pass (plan_step);
//  - a stage whose model keeps its last forward's MoE auxiliary loss (whose graph holds that forward's
//    activations until a later forward replaces it) repeats nothing.
// Simulation.RepeatedMicroBatchesPlanAsTracedOnes holds plans made so to the fully traced ones, event by event.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "parallel/fsdp.h"
#include "parallel/pipeline.h"
#include "src/tensor/cost_segment.h"
#include "src/tensor/tensor.h"

namespace titan::parallel {

// The rule a plan repeats passes by (a pipeline's here, gradient accumulation's micro-batches in train_step.cpp):
// a traced pass (`seg`, finished by its recorder `rec`; begun in the FSDP state `start`, the state now `now`) that
// recorded alike to the last record (`last`, begun in `last_state`) and `also` holds is held as a reference to that
// record, and is steady — its successors may be repeated — where both began in the state it left; otherwise it
// becomes the last record. Either way `last_state` becomes `start`. Returns whether it is steady.
bool record_pass(CostSegmentRecorder& rec, CostSegment seg, std::vector<int64_t> start, const std::vector<int64_t>& now,
                 std::shared_ptr<const CostSegment>& last, std::vector<int64_t>& last_state, bool also = true);

class PassRepeats {
 public:
  using Routed = std::vector<std::vector<int64_t>>;  // per MoE layer: tokens per expert
  // `actions`: the rank's schedule (kept by reference: it must outlive this); `training`: with backward passes;
  // `fsdp`: may be null. Active only on meta tensors (`meta`, and the default device)
  // under an untimed cost trace with repeats allowed (repeated_cost_segments()); else nothing is repeated or recorded.
  PassRepeats(const std::vector<PipelineAction>& actions, bool training, const FSDP* fsdp, bool meta);

  // Whether the forward of action `ai` is repeated. Whether its backward is (`forward_repeated`: its forward
  // was): where it must be and cannot, throws CostSegmentRefused.
  bool forward(size_t ai);
  bool backward(size_t ai, bool forward_repeated);

  // A repeated pass: appends its record and returns a fresh buffer for its output (undefined where `shape` is
  // empty: the last stage's forward, the first stage's backward), holding in `charge` (made when null) the rest
  // of what the record leaves held.
  Tensor repeat_forward(int64_t stage, const Shape& shape, std::shared_ptr<MemoryCharge>& charge);
  Tensor repeat_backward(int64_t stage, const Shape& shape, std::shared_ptr<MemoryCharge>& charge);
  const Routed& routed(int64_t stage) { return passes_[stage].routed; }  // the repeated forward's

  // A traced pass: begin() before it, end_*() after it with what it produced (`output` / `input_grad`:
  // undefined where it sends none; `keeps_graph`: the model kept its auxiliary loss).
  void begin();
  void end_forward(int64_t stage, const Tensor& output, Routed routed, bool keeps_graph);
  void end_backward(int64_t stage, const Tensor& input_grad);

 private:
  struct Passes {
    std::shared_ptr<const CostSegment> forward, backward;  // the last recorded (repeats share them)
    std::vector<int64_t> forward_state, backward_state;  // the FSDP state each started in
    bool forward_steady = false, backward_steady = false;  // the last two recorded alike, from one state, left so
    MemoryCategory output_category = MemoryCategory::Activations, grad_category = MemoryCategory::Activations;
    Routed routed;  // the last recorded forward's
    bool keeps_graph = false;
  };
  std::vector<int64_t> state() const { return fsdp_ ? fsdp_->pass_state() : std::vector<int64_t>{}; }
  bool last_pass(size_t ai) const;  // the action is of its stage's last micro-batch (always traced)
  // every pass from after action `ai` through action `bi` is of a stage and kind recorded steady (left the state
  // as it found it)
  bool steady_through(size_t ai, size_t bi) const;
  void record(std::shared_ptr<const CostSegment>& last, std::vector<int64_t>& last_state, bool& steady,
              CostSegment seg);
  Tensor settle(std::shared_ptr<MemoryCharge>& charge, const MemoryStats& start, const CostSegment& seg,
                const Shape& shape, MemoryCategory c);

  const std::vector<PipelineAction>& actions_;
  bool training_;
  const FSDP* fsdp_;
  bool on_;
  std::map<int64_t, Passes> passes_;  // by stage
  std::map<int64_t, size_t> last_backward_;                     // stage -> its last backward's action
  std::map<std::pair<int64_t, int64_t>, size_t> backward_at_;  // (stage, micro-batch) -> its backward's action
  std::vector<size_t> last_backwards_;                          // the stages' last backwards (they reduce), in order
  std::optional<CostSegmentRecorder> recording_;               // the traced pass's
  std::vector<int64_t> recording_state_;                       //   and the state it began in
};

}  // namespace titan::parallel
