// parallel/shard_spec.h — where a rank's local parameter sits in the logical
// (single-rank) tensor. The optimizer updates `slot`; checkpoints write and
// read the region; the global gradient norm counts each element once.
#pragma once
#include <string>
#include <vector>

#include "src/checkpoint/checkpoint.h"
#include "src/ops/float8.h"
#include "src/tensor/tensor.h"

namespace titan::parallel {

struct ShardSpec {
  std::string name;       // HF name
  Tensor* slot = nullptr;  // the local leaf (what the optimizer updates)
  Shape full_shape;       // logical shape
  Shape offset;           // where the local block starts in the logical tensor
  bool writer = true;     // this rank writes the block (one replica of each element does)
  bool tp_replicated = true;  // identical on every tp rank (norms, embedding)
  double grad_norm_weight = 1.0;  // < 1 for blocks held by several tp ranks (replicated KV heads)
  // false: another pipeline stage holds it; here an empty block ([0, ...]) that keeps the
  // checkpoint's collective dataset order and the optimizer's names, and writes nothing
  bool owned = true;
  // sharded by expert parallel (its experts dimension cut over the ep group): FSDP shards it over the ranks
  // holding the same experts
  bool expert = false;
  // read only as a bf16 GEMM operand under bf16 autocast (nn::Module::bf16_operands): FSDP all-gathers it in
  // bf16 when the step computes in bf16 (the GEMM would round it to the same bits)
  bool bf16_operand = false;
  // an FP8 linear layer's weight that FSDP all-gathers as FP8 codes (float8.enable_fsdp_float8_all_gather): the
  // layer's casts (its weight cast, its tensor-parallel cut); null: gathered as float32 / bf16
  const Float8Casts* fp8_gather = nullptr;
  Region region() const { return {name, slot, full_shape, offset, writer}; }
};

// The spec of the parameter in `slot` (an error when it has none).
ShardSpec& find_spec(std::vector<ShardSpec>& specs, const Tensor* slot);

// The one weight surgery of every plan: keeps rows [start, start + size) of the parameter in `slot` along
// `dim` (own storage: the full weight is freed) and moves its spec's offset. `tp`: a tensor-parallel cut
// (the block is no longer the same on every tp rank), else an expert-parallel one.
void keep_block(Tensor& slot, int64_t dim, int64_t start, int64_t size, std::vector<ShardSpec>& specs, bool tp = true);
// Rank r's chunk of `sizes` along `dim`.
void shard_param(Tensor& slot, int64_t dim, const std::vector<int64_t>& sizes, int r, std::vector<ShardSpec>& specs,
                 bool tp = true);

// What this rank holds of the model under pipeline parallel (everything without it).
struct Ownership {
  std::vector<bool> layer;
  bool embed = true, head = true;  // head: the final norm and lm_head
};

}  // namespace titan::parallel
