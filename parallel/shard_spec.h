// parallel/shard_spec.h — where a rank's local parameter sits in the logical
// (single-rank) tensor. The optimizer updates `slot`; checkpoints write and
// read the region; the global gradient norm counts each element once.
#pragma once
#include <string>
#include <vector>

#include "src/checkpoint/checkpoint.h"
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
  Region region() const { return {name, slot, full_shape, offset, writer}; }
};

}  // namespace titan::parallel
