// parallel/parallelize.h — the TorchTitan-style plan of titan's decoder
// family (every member: qwen3, qwen3_moe, gpt_oss, llama3, mixtral, olmo2, gemma3): tensor parallel
// (Megatron, + sequence parallel), context parallel, expert parallel on MoE layers, then
// FSDP/HSDP over the data-parallel (and context-parallel) ranks, applied to a built model from
// outside (the model only exposes hooks). What each block gets follows from
// what it holds (attention, dense MLP, MoE), not from the model's name.
#pragma once
#include <memory>
#include <vector>

#include "comms/device_mesh.h"
#include "models/decoder/model.h"
#include "parallel/context_parallel.h"
#include "parallel/shard_spec.h"

namespace titan::parallel {

class FSDP;

struct ParallelOptions {
  bool reshard_after_forward = true;
  bool sequence_parallel = true;  // with tp > 1: norms and residual stream sharded along the sequence
  int64_t expert_parallel = 1;    // MoE layers: experts over ep ranks borrowed from dp_shard
  bool loss_parallel = true;      // with tp > 1: logits stay split over the vocabulary into the loss
  // with sequence parallel (Megatron-LM's memory layout): each attention / MLP block's input, gathered over
  // the sequence for its column-parallel projections ([B, S, H] kept for their weight gradients), is freed
  // when the block's forward ends and gathered again from the rank's [B, S/tp, H] shard when its backward
  // begins: (tp-1)/tp of those activations saved, one more all-gather per block in the backward
  bool sequence_parallel_regather = false;
  // with sequence parallel: each block's gather / reduce-scatter fused with its projections (async tensor parallel,
  // parallel/tensor_parallel.h)
  bool async_tensor_parallel = false;
  // pipeline parallel: the model chunks (stages) this rank holds (empty: the whole model). The other
  // stages' parameters become empty blocks (ShardSpec::owned false) before anything else is cut.
  std::vector<ModelChunk> pipeline_chunks;
  // context parallel (mesh.cp > 1): how attention exchanges K/V over the cp group (parallel/context_parallel.h)
  RotateMethod context_parallel_rotate = RotateMethod::AllGather;
  // expert parallel: how a MoE layer's tokens reach the experts' ranks (comms/moe_dispatch.h)
  comms::ExpertCommBackend expert_comm = comms::ExpertCommBackend::Standard;
  // training.mixed_precision_param: BF16 (the step under bf16 autocast) all-gathers the parameters that are only
  // bf16 GEMM operands (ShardSpec::bf16_operand) in bf16, as FSDP2's param_dtype; the rest in float32
  DType param_dtype = DType::F32;
  // float8.enable_fsdp_float8_all_gather / precompute_float8_dynamic_scale_for_fsdp: FSDP gathers the FP8 linear
  // layers' weights as FP8 codes (parallel/fsdp.h)
  bool fsdp_float8_all_gather = false;
  bool fsdp_float8_precompute = false;
};

// The rules a layout must meet on a model that the mesh alone cannot check, written once: where the job's
// config is read (step/job_config's validate, naming its keys before anything is built) and again by
// parallelize for callers that come without a JobConfig. ep > 1 needs MoE layers whose experts it divides;
// pp > 1 cannot tie the embedding (first stage) to the head (last stage).
void check_layout(const decoder::Args& model, int64_t expert_parallel_degree, int64_t pipeline_parallel_degree);

struct ParallelModel {
  std::vector<ShardSpec> specs;  // one per parameter, in named_parameters() order
  std::shared_ptr<FSDP> fsdp;
  std::vector<std::pair<std::string, Tensor*>> named_params() const;
  std::vector<Tensor*> params() const;
  std::vector<Region> regions() const;
  // The model's buffers (decoder::Decoder::buffers: replicated, world rank 0 writes them), optional when loading.
  std::vector<Region> buffers;
  // What checkpoints, titan-layout exports and their loads carry: the parameters' blocks, then the buffers.
  std::vector<Region> state_regions() const;
  // The gradients' blocks (zeros for a parameter without one); `keep` owns them.
  std::vector<Region> grad_regions(std::vector<Tensor>& keep) const;
  // After a backward: FSDP's gradient reductions still in flight are waited for and land in .grad.
  void wait_gradients() const;
};

// The model must hold the full (single-rank) initialized weights on every
// rank; afterwards each rank keeps only its shards: tensor parallel, expert
// parallel, then FSDP (expert weights FSDP-sharded over dp_shard / ep, the
// rest over dp_shard).
ParallelModel parallelize(decoder::Decoder& model, comms::DeviceMesh& mesh, const ParallelOptions& opt);

// sqrt(sum of squares of every logical gradient element), across all ranks.
double global_grad_norm(const ParallelModel& pm, comms::DeviceMesh& mesh);

}  // namespace titan::parallel
