// parallel/tensor_parallel.h — tensor parallel (Megatron-LM, + sequence parallel) as a plan.
//
// Each block's parameters are given a style by a table (block_plan in tensor_parallel.cpp):
//   colwise    split along the output features (rows of W [out, in]; the bias with them): this rank's heads,
//              this rank's slice of the MLP / expert intermediate size;
//   rowwise    split along the input features (columns): its output is a partial sum, reduced by the block's
//              output collective; its bias is added on tp rank 0 only (and its gradient summed);
//   headwise   a per-head parameter ([n_heads, ...]: attention sinks, a relative-position bias table) split with
//              the query heads;
//   vocab      the embedding's and the head's rows over the vocabulary (each rank looks up the ids it owns,
//              the rows summed; the logits stay split into the loss, or are gathered): vocab_parallel();
//   summed     replicated, each rank's gradient a part of the whole (per-head q/k norms, the router, the
//              norms under sequence parallel): the gradient is summed over tp (identity forward);
//   kv_head    n_kv_heads < tp: the one KV head this rank's query heads use, kept by the tp / n_kv ranks that
//              share it, its gradient summed over them.
// Each of colwise, rowwise, headwise, summed and kv_head is one definition (a `Style`: what a rank keeps, what its gradient
// needs) and the block table (block_plan) names one per parameter; the vocabulary rows (embedding, head) and the
// loss are cut once per model (vocab_parallel), outside the per-block table. A new style is one Style plus its
// rows in block_plan.
// Applying it is two steps in one visible order (parallelize.cpp): cut() before FSDP shards what is left,
// hooks() after FSDP has registered its own (so these see the weights FSDP bound).
#pragma once
#include <functional>

#include "comms/device_mesh.h"
#include "models/decoder/model.h"
#include "parallel/shard_spec.h"

namespace titan::parallel {

struct TensorParallelOptions {
  bool sequence_parallel = true;  // norms and the residual stream sharded along the sequence
  bool loss_parallel = true;      // logits split over the vocabulary into the loss
  bool regather = false;          // sequence parallel: a block's gathered input freed after forward, gathered again
  // sequence parallel: each block's all-gather fused with its column-parallel projections and its reduce-scatter
  // with its row-parallel one, ring steps overlapping the GEMMs (comms/collective_matmul.h)
  bool async = false;
};

class TensorParallel {
 public:
  TensorParallel(decoder::Decoder& model, comms::DeviceMesh& mesh, const TensorParallelOptions& opt,
                 const Ownership& own);
  // Step 1 (before FSDP): each rank keeps what each parameter's style leaves it (colwise, rowwise, headwise and
  // kv_head cut; summed keeps all) and its slice of the vocabulary rows.
  void cut(std::vector<ShardSpec>& specs);
  // Step 2 (after FSDP's hooks): the blocks' input / output collectives and the summed gradients.
  void hooks();

 private:
  decoder::Decoder& model_;
  comms::DeviceMesh& mesh_;
  TensorParallelOptions opt_;
  Ownership own_;
  comms::PG kv_group_;  // replicated KV heads (n_kv_heads < tp): the tp ranks sharing one head
  comms::PG p2p_;       // async: the tp ranks on a communicator of their own, the rings' exchanges
  int64_t kv_head_ = 0;  // ... and which head this rank keeps
};

}  // namespace titan::parallel
