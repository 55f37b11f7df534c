// parallel/fsdp.h — ZeRO-3 over the dp_shard group (HSDP: plus all-reduce
// over dp_replicate). Each parameter is sharded along dim 0 in torch.chunk
// sizes; its shard is the leaf the optimizer updates.
//
// Per unit (each decoder layer; the root = embedding, final norm, lm_head):
//  - forward pre-hook: wait for the prefetched all-gather (or gather now),
//    bind each module parameter to an FSDPAllGather op of its shard, and
//    prefetch the next unit's all-gather (non-blocking: it overlaps this
//    unit's compute);
//  - forward post-hook (reshard_after_forward): free the gathered storage
//    and wrap the output in an identity op whose backward re-gathers it (and
//    prefetches the previous unit) before the unit's backward runs;
//  - FSDPAllGather backward: reduce-scatter (average) the full gradient into
//    the shard's gradient, all-reduce it over replicas, free the storage.
#pragma once
#include <memory>
#include <vector>

#include "comms/device_mesh.h"
#include "src/nn/module.h"
#include "parallel/shard_spec.h"

namespace titan::parallel {

class FSDP {
 public:
  // units[0] is the root; its pre-hook must be the first to run in forward.
  FSDP(std::vector<nn::Module*> units, comms::DeviceMesh& mesh, bool reshard_after_forward,
       std::vector<ShardSpec>& specs);
  ~FSDP();

  struct Param {
    std::string name;
    Tensor* slot;   // the module's member, rebound to the gathered tensor each forward
    Tensor shard;   // local rows: the optimizer's leaf
    Tensor full;    // gathered buffer (storage freed when resharded)
    std::vector<int64_t> rows;
  };
  struct Unit;

 private:
  void unshard(Unit& u);
  void prefetch(Unit& u);
  void bind(Unit& u);
  void release(Unit& u);
  std::vector<std::unique_ptr<Unit>> units_;
  comms::DeviceMesh& mesh_;
  bool reshard_;
  bool forward_done_ = false;
};

}  // namespace titan::parallel
