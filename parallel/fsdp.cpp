#include "parallel/fsdp.h"

#include "src/autograd/function.h"
#include "src/log/log.h"
#include "src/ops/ops.h"
#include "src/tensor/cost.h"

namespace titan::parallel {

using comms::ReduceOp;
using V = std::vector<Tensor>;

struct FSDP::Unit {
  std::string name;
  bool root = false;
  std::vector<Param> params;
  bool gathered = false;
  int released = 0;
  bool prefetched = false;
};

FSDP::FSDP(std::vector<nn::Module*> modules, comms::DeviceMesh& mesh, bool reshard_after_forward,
           std::vector<ShardSpec>& specs, PlacementFn placement)
    : mesh_(mesh), reshard_(reshard_after_forward) {
  if (!placement) placement = [&mesh](const ShardSpec&) { return Placement{mesh.dp_shard, 1.0}; };
  for (size_t ui = 0; ui < modules.size(); ++ui) {
    auto unit = std::make_unique<Unit>();
    unit->root = ui == 0;
    unit->name = ui == 0 ? "root" : "layer " + std::to_string(ui - 1);
    units_.push_back(std::move(unit));
  }
  // assign every parameter to the innermost unit that owns it (a layer before the root)
  int64_t total = 0;
  for (const ShardSpec& s : specs) total += s.slot->numel();
  Progress progress("sharding parameters (FSDP)", std::max<int64_t>(total, 1), "parameters");
  for (ShardSpec& s : specs) {
    progress.add(s.slot->numel());
    size_t owner = 0;
    for (size_t ui = 1; ui < modules.size(); ++ui)
      for (auto& [nm, p] : modules[ui]->named_parameters())
        if (p == s.slot) owner = ui;
    Unit& u = *units_[owner];
    Param p;
    p.name = s.name;
    p.slot = s.slot;
    Placement pl = placement(s);
    p.group = pl.group;
    p.grad_scale = pl.grad_scale;
    const int64_t n = p.group->size(), r = p.group->rank();
    const Tensor& local = *s.slot;  // after tensor / expert parallel: this rank's block
    p.rows = comms::chunk_sizes(local.size(0), n);
    int64_t start = 0;
    for (int64_t q = 0; q < r; ++q) start += p.rows[q];
    {
      MemoryCategoryScope cat(MemoryCategory::Parameters);
      p.shard = slice(local, 0, start, start + p.rows[r]).clone().detach();  // own storage: the full tensor is freed
    }
    p.shard.requires_grad_(true);
    p.shard.set_name(s.name);
    s.offset[0] += start;
    s.writer = s.writer && mesh.replicate_rank == 0;
    u.params.push_back(std::move(p));
  }
  progress.finish();
  // free the full tensors: modules point at nothing until a forward binds them
  for (auto& u : units_)
    for (auto& p : u->params) *p.slot = Tensor();
  // specs now point at the shards (stable: units are heap objects)
  for (auto& u : units_)
    for (auto& p : u->params)
      for (ShardSpec& s : specs)
        if (s.name == p.name) s.slot = &p.shard;

  // hooks
  Unit* root = units_[0].get();
  modules[0]->register_forward_pre_hook([this, root](nn::Module&, const Tensor& x) {
    forward_done_ = false;
    unshard(*root);
    bind(*root);
    if (units_.size() > 1) prefetch(*units_[1]);
    return x;
  });
  modules[0]->register_forward_post_hook([this](nn::Module&, const Tensor& y) {
    forward_done_ = true;
    return y;
  });
  for (size_t ui = 1; ui < units_.size(); ++ui) {
    Unit* u = units_[ui].get();
    Unit* next = ui + 1 < units_.size() ? units_[ui + 1].get() : nullptr;
    Unit* prev = ui > 1 ? units_[ui - 1].get() : nullptr;
    modules[ui]->register_forward_pre_hook([this, u, next](nn::Module&, const Tensor& x) {
      unshard(*u);
      bind(*u);
      if (next && !forward_done_) prefetch(*next);
      return x;
    });
    modules[ui]->register_forward_post_hook([this, u, prev](nn::Module&, const Tensor& y) {
      if (!reshard_) return y;
      release(*u);
      if (!autograd::grad_enabled()) return y;  // evaluation: nothing to re-gather
      return autograd::custom_op(
          "FSDPPreBackward", {y}, [](const V& in) { return V{in[0]}; },
          [this, u, prev](const V& g) {
            unshard(*u);
            if (prev) prefetch(*prev);
            return V{g[0]};
          })[0];
    });
  }
}

FSDP::~FSDP() {
  for (auto& u : units_)
    for (auto& p : u->params) p.work.wait();
}

void FSDP::prefetch(Unit& u) {
  if (u.gathered || u.prefetched) return;
  MemoryCategoryScope cat(MemoryCategory::Communication);
  for (auto& p : u.params)
    if (!p.trivial()) std::tie(p.pending, p.work) = p.group->all_gather_async(p.shard.detach(), 0, p.rows);
  u.prefetched = true;
}

void FSDP::unshard(Unit& u) {
  if (u.gathered) return;
  prefetch(u);  // no-op when already issued
  for (auto& p : u.params) {
    if (p.trivial()) {  // nothing to gather: the shard is the whole tensor (no copy, never freed)
      p.full = p.shard.detach();
      continue;
    }
    p.work.wait();
    if (p.full.defined() && !p.full.impl()->storage->resident()) {
      // saved activations alias the old buffer: refill it in place
      p.full.impl()->storage->materialize();
      copy_(p.full, p.pending);
    } else {
      p.full = p.pending;
    }
    p.pending = Tensor();
  }
  u.prefetched = false;
  u.gathered = true;
  u.released = 0;
}

void FSDP::bind(Unit& u) {
  for (auto& p : u.params) {
    Param* pp = &p;
    Unit* up = &u;
    *p.slot = autograd::custom_op(
        "FSDPAllGather", {p.shard}, [pp](const V&) { return V{pp->full.detach()}; },
        [this, pp, up](const V& g) {
          GradientReductionScope grads;  // these collectives carry gradients (reduce_dtype in simulation)
          Tensor gs;
          if (!pp->trivial()) gs = pp->group->reduce_scatter(g[0], 0, ReduceOp::Avg, pp->rows);
          else gs = g[0];
          if (mesh_.dp_replicate->size() > 1) gs = mesh_.dp_replicate->all_reduce(gs, ReduceOp::Avg);
          if (pp->grad_scale != 1.0) gs = mul(gs, pp->grad_scale);
          // reshard after backward: this parameter's gathered copy is no longer needed
          if (!pp->trivial()) pp->full.impl()->storage->release();
          if (++up->released == (int)up->params.size()) up->gathered = false;
          return V{gs};
        })[0];
    p.slot->set_name(p.name);
  }
}

void FSDP::release(Unit& u) {
  for (auto& p : u.params)
    if (!p.trivial()) p.full.impl()->storage->release();  // a trivial "gathered" tensor is the shard itself
  u.gathered = false;
}

}  // namespace titan::parallel
