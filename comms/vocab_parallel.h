// comms/vocab_parallel.h — the vocabulary split over a tensor-parallel group
// (Megatron): each rank holds vocabulary rows [start, start + V_local).
//
//   vocab_parallel_embedding(weight [V_local, H], ids [...])  -> [..., H], summed over the group
//       (a rank looks up the ids it owns, zeros elsewhere; reduce_from: fwd all-reduce, bwd identity)
//   vocab_parallel_cross_entropy(logits [N, V_local], targets [N]) -> mean loss, the same on every rank
//       (max and sum-exp all-reduced, the target logit from its owner; [N, V] never exists on one rank;
//       one fused op keeping only the shard and two floats per row; backward local:
//       d logits = (softmax(shard) - onehot(shard)) * valid / n_valid)
// Both are compositions of differentiable ops and collectives, so their
// gradients are derived: d logits = softmax(shard) - onehot(shard), / valid.
#pragma once
#include "comms/process_group.h"

namespace titan::comms {

Tensor vocab_parallel_embedding(const Tensor& weight, const Tensor& ids, int64_t vocab_start, const PG& pg);
// targets equal to ignore_index count in neither the sum nor the mean (cross_entropy's convention)
Tensor vocab_parallel_cross_entropy(const Tensor& logits, const Tensor& targets, int64_t vocab_start, const PG& pg,
                                    int64_t ignore_index = -100);

}  // namespace titan::comms
