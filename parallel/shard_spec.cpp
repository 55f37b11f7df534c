#include "parallel/shard_spec.h"

#include "src/autograd/grad_mode.h"
#include "src/ops/ops.h"

namespace titan::parallel {

ShardSpec& find_spec(std::vector<ShardSpec>& specs, const Tensor* slot) {
  for (auto& s : specs)
    if (s.slot == slot) return s;
  fail("parallelize: parameter not found");
}

void keep_block(Tensor& slot, int64_t dim, int64_t start, int64_t size, std::vector<ShardSpec>& specs, bool tp) {
  ShardSpec& s = find_spec(specs, &slot);
  Tensor local;
  {
    MemoryCategoryScope cat(MemoryCategory::Parameters);
    NoGradGuard ng;
    local = slice(slot, dim, start, start + size).clone();
  }
  const std::string name = slot.name();
  slot = local.detach();
  slot.requires_grad_(true);
  slot.set_name(name);
  s.offset[dim] += start;
  if (tp) s.tp_replicated = false;
}

void shard_param(Tensor& slot, int64_t dim, const std::vector<int64_t>& sizes, int r, std::vector<ShardSpec>& specs,
                 bool tp) {
  int64_t start = 0;
  for (int q = 0; q < r; ++q) start += sizes[q];
  keep_block(slot, dim, start, sizes[r], specs, tp);
}

}  // namespace titan::parallel
