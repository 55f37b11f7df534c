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
  // How a parameter is sharded: the group its dim 0 is split over and a
  // factor on its averaged gradient (expert parameters: their own data-parallel
  // group, 1/ep). Default: mesh.dp_shard, 1.
  struct Placement {
    comms::PG group;
    double grad_scale = 1.0;
  };
  using PlacementFn = std::function<Placement(const ShardSpec&)>;
  // units[0] is the root; its pre-hook must be the first to run in forward.
  FSDP(std::vector<nn::Module*> units, comms::DeviceMesh& mesh, bool reshard_after_forward,
       std::vector<ShardSpec>& specs, PlacementFn placement = nullptr);
  ~FSDP();

  struct Param {
    std::string name;
    Tensor* slot;   // the module's member, rebound to the gathered tensor each forward
    Tensor shard;   // local rows: the optimizer's leaf
    Tensor full;    // gathered buffer (storage freed when resharded)
    std::vector<int64_t> rows;
    comms::PG group;
    double grad_scale = 1.0;
    Tensor pending;  // prefetched all-gather result
    comms::Work work;
    bool trivial() const { return group->size() == 1; }
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
