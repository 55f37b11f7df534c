// parallel/context_parallel.h — context parallel: each sequence spread over the cp ranks of a mesh.
//
// The sequence of S tokens is cut into 2 x cp chunks of c = S / (2 cp); rank i of the cp group holds chunks
// i and 2cp-1-i (nn::SequenceShard: the head-tail balance, so every rank gets the same share of a causal
// mask's work). Tokens, targets, RoPE positions and the loss targets follow the chunks; document ids stay the
// whole sequence's (masks read global positions). Attention is the one op that needs the other ranks' tokens:
//
//   allgather (Llama 3's method)  K/V all-gathered over the group (asynchronously: the local block's
//                                 attention runs meanwhile); backward gathers them again and reduce-scatters
//                                 dK/dV back to their owners.
//   alltoall  (ring attention)    K/V passed around the ring, each block's attention overlapping the
//                                 transfer of the next; backward passes K/V around again with their dK/dV
//                                 accumulators, which arrive home after cp steps.
//
// A rank's queries against one key chunk form a flex-attention block at the chunks' global offsets
// (flex::attention_block_forward / _backward): every mask and score_mod that reads positions (causal,
// sliding windows, documents, prefix LM, ALiBi, relative bias, softcap) applies unchanged, tiles a mask
// leaves empty are skipped (a block with none visible is not computed), the learned sinks join one block
// per query row, and the blocks are merged by their log-sum-exp. Deterministic: blocks and accumulations
// in a fixed order.
//
// Parameters and gradients: CP is folded into the FSDP group (DeviceMesh::dp_shard_cp), as TorchTitan; the
// step normalizes the loss over the group's valid tokens (train_step).
#pragma once
#include <string>

#include "comms/device_mesh.h"
#include "models/decoder/model.h"
#include "src/data/loader.h"

namespace titan::parallel {

enum class RotateMethod { AllGather, AllToAll };
constexpr std::array<std::string_view, 2> enum_names(RotateMethod) { return {"allgather", "alltoall"}; }  // TorchTitan's

// The attention of this rank's queries over the whole sequence (q [B, 2c, Hq, D], k/v [B, 2c, Hkv, D] hold
// this rank's two chunks), differentiable w.r.t. q, k, v, sinks and the score_mod's captured tensors.
Tensor context_parallel_attention(const Tensor& q, const Tensor& k, const Tensor& v, const FlexOptions& opt,
                                  const nn::SequenceShard& shard, const comms::PG& cp, const comms::PG& cp_p2p,
                                  RotateMethod method);

// Sets model.sequence_shard for this rank of mesh.cp (its chunks and the attention over the group).
void apply_context_parallel(decoder::Decoder& model, comms::DeviceMesh& mesh, RotateMethod method);

// This rank's columns of a batch (inputs and targets [B, S] -> [B, S / cp]); doc_ids stay [B, S].
Batch shard_batch(const Batch& b, const nn::SequenceShard& shard);

}  // namespace titan::parallel
