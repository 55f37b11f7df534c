// parallel/pipeline.h — pipeline parallelism over the mesh's pp dimension
// (outermost), as TorchTitan configures it: the blocks split into stages,
// stage s on pp rank s % pp (Interleaved1F1B: v = stages / pp virtual stages
// per rank, s, s + pp, ...), the first stage with the embedding and the last
// with the final norm, the head and the loss. The local batch is split into
// micro-batches run by a schedule:
//   GPipe            every forward, then every backward (one stage per rank);
//   1F1B             pp - 1 - rank warm-up forwards, then one forward / one
//                    backward, then the remaining backwards (one stage per rank);
//   Interleaved1F1B  Megatron's interleaved schedule over the virtual stages
//                    (micro-batches a multiple of pp).
// Activations go forward and their gradients back as nonblocking MPI
// point-to-point transfers on DeviceMesh::pp_p2p (posted when the action that
// needs them runs; sends waited for at the end of the schedule). Under FSDP a
// stage's gradients are added up unsharded over its micro-batches and reduced
// by its last backward, and its weights stay gathered until then (FSDP2's
// set_requires_gradient_sync and set_reshard_after_backward under PP).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "comms/device_mesh.h"
#include "models/decoder/model.h"
#include "parallel/parallelize.h"
#include "src/data/loader.h"

namespace titan::parallel {

enum class PipelineSchedule { GPipe, OneFOneB, Interleaved1F1B };
constexpr std::array<std::string_view, 3> enum_names(PipelineSchedule) { return {"GPipe", "1F1B", "Interleaved1F1B"}; }

// Which blocks each stage holds, in global stage order.
struct PipelineLayout {
  int64_t pp = 1;
  std::vector<ModelChunk> stages;
  int64_t stages_per_rank() const { return (int64_t)stages.size() / pp; }
  int64_t rank_of(int64_t stage) const { return stage % pp; }
  std::vector<int64_t> stages_of(int64_t pp_rank) const;  // ascending
  std::vector<ModelChunk> chunks_of(int64_t pp_rank) const;
  std::string describe() const;  // "stage 0: embedding + blocks 0-3 (rank 0), ..."
};

// n_layers blocks over the stages, as TorchTitan splits them: the embedding counts as first_less blocks and
// the head as last_less (pipeline_parallel_first_/last_stage_less_layers), the n_layers + first_less +
// last_less over ceil(that / layers_per_stage) stages (-1: pp stages, or 2 * pp for Interleaved1F1B) as evenly
// as possible, earlier stages taking the extra ones, the edge stages holding first_less / last_less fewer
// blocks (possibly none: the embedding or head alone). Errors name the keys.
PipelineLayout pipeline_layout(int64_t n_layers, int64_t pp, PipelineSchedule schedule, int64_t layers_per_stage,
                               int64_t first_less = 0, int64_t last_less = 0);

struct PipelineAction {
  enum Kind { Forward, Backward } kind;
  int64_t stage;       // global stage index
  int64_t microbatch;
};

// The actions pp rank `rank` runs, in order, for n_microbatches micro-batches over `stages` stages.
std::vector<PipelineAction> pipeline_actions(PipelineSchedule schedule, int64_t pp, int64_t stages,
                                             int64_t n_microbatches, int64_t rank);

// Runs the schedule of this rank on a built, parallelized model.
class Pipeline {
 public:
  // activation: the shape of the hidden state a micro-batch passes between stages ([mbs, S_local, dim];
  // S_local = S / tp under sequence parallel); seq_len: the full S.
  Pipeline(decoder::Decoder& model, ParallelModel& pm, comms::DeviceMesh& mesh, PipelineLayout layout,
           PipelineSchedule schedule, int64_t microbatch_size, Shape activation, int64_t seq_len);

  struct Result {
    double loss = 0;  // last stage: sum over micro-batches of their mean loss / n_microbatches; else 0
    std::vector<std::vector<int64_t>> routed;  // per MoE layer: tokens this rank's stages routed (others 0)
  };
  // One run of the schedule over a local batch: forward, loss (x loss_scale, plus the MoE auxiliary
  // loss x aux_scale) and backward of every micro-batch; loss_scale 0 leaves the loss out of Result::loss. reduce: the stages' last backwards reduce the gradients
  // (FSDP); otherwise they stay unsharded for a later run. Meta inputs plan it.
  // aux_scale: the MoE auxiliary loss's factor when it differs from the loss's (context parallel weights the
  // loss by the rank's share of the group's tokens, not the auxiliary loss); < 0: loss_scale.
  Result train(const Batch& b, double loss_scale, bool reduce, double aux_scale = -1);
  // Forward only (no graph): the mean loss over the batch, from the last stage to every stage's ranks.
  double eval(const Batch& b);

  const PipelineLayout& layout() const { return layout_; }
  int64_t microbatches(int64_t batch) const;

 private:
  Result run(const Batch& b, double loss_scale, bool reduce, bool backward, double aux_scale = -1);
  decoder::Decoder& model_;
  ParallelModel& pm_;
  comms::DeviceMesh& mesh_;
  PipelineLayout layout_;
  PipelineSchedule schedule_;
  int64_t mbs_;
  Shape activation_;
  int64_t seq_len_;
};

}  // namespace titan::parallel
