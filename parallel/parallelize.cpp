#include "parallel/parallelize.h"

#include <cmath>
#include <set>

#include "models/decoder/model.h"
#include "parallel/fsdp.h"
#include "parallel/tensor_parallel.h"
#include "src/autograd/grad_mode.h"
#include "src/ops/ops.h"
#include "src/optim/adamw.h"
#include "src/tensor/cost.h"

namespace titan::parallel {

std::vector<std::pair<std::string, Tensor*>> ParallelModel::named_params() const {
  std::vector<std::pair<std::string, Tensor*>> out;
  for (auto& s : specs) out.emplace_back(s.name, s.slot);
  return out;
}

std::vector<Tensor*> ParallelModel::params() const {
  std::vector<Tensor*> out;
  for (auto& s : specs) out.push_back(s.slot);
  return out;
}

std::vector<Region> ParallelModel::regions() const {
  std::vector<Region> out;
  for (auto& s : specs) out.push_back(s.region());
  return out;
}

std::vector<Region> ParallelModel::state_regions() const {
  std::vector<Region> out = regions();
  out.insert(out.end(), buffers.begin(), buffers.end());
  return out;
}

std::vector<Region> ParallelModel::grad_regions(std::vector<Tensor>& keep) const {
  keep.clear();
  keep.reserve(specs.size());
  std::vector<Region> out;
  for (auto& s : specs) {
    keep.push_back(s.slot->grad().defined() ? s.slot->grad() : zeros_like(*s.slot));
    Region r = s.region();
    r.local = &keep.back();
    out.push_back(r);
  }
  return out;
}

namespace {
Ownership ownership(decoder::Decoder& model, const std::vector<ModelChunk>& chunks) {
  const int64_t L = (int64_t)model.model->layers->layers.size();
  Ownership o;
  o.layer.assign((size_t)L, chunks.empty());
  if (chunks.empty()) return o;
  o.embed = o.head = false;
  for (const ModelChunk& c : chunks) {
    for (int64_t i = c.begin; i < (c.end < 0 ? L : c.end); ++i) o.layer[(size_t)i] = true;
    o.embed = o.embed || c.first;
    o.head = o.head || c.last;
  }
  return o;
}

// Pipeline parallel: the parameters of the other stages' blocks (and the embedding / head when another
// stage holds them) become empty blocks [0, ...]: freed, not sharded, not trained, written by nobody.
void drop_unowned(decoder::Decoder& model, const Ownership& o, std::vector<ShardSpec>& specs) {
  std::vector<nn::Module*> gone;
  auto& layers = model.model->layers->layers;
  for (size_t i = 0; i < layers.size(); ++i)
    if (!o.layer[i]) gone.push_back(layers[i]);
  if (!o.embed) gone.push_back(model.model->embed_tokens);
  if (!o.head) {
    gone.push_back(model.model->norm);
    if (model.lm_head) gone.push_back(model.lm_head);
  }
  for (nn::Module* m : gone)
    for (auto& [n, slot] : m->named_parameters()) {
      ShardSpec& s = find_spec(specs, slot);
      Shape empty_block = slot->shape();
      empty_block[0] = 0;
      const std::string name = slot->name();
      *slot = zeros(empty_block, slot->dtype());
      slot->requires_grad_(true);  // a trainable name (AdamW keeps its empty moments: checkpoints list them all)
      slot->set_name(name);
      s.owned = false;
      s.writer = false;
    }
}

// Expert parallel (every model with MoE layers): rank keeps experts
// [e*El, (e+1)*El) of every MoE layer, e = its index in the ep group
// (consecutive dp_shard ranks); the MoE blocks dispatch over that group.
void apply_ep(decoder::Decoder& model, const comms::ExpertComm& comm, std::vector<ShardSpec>& specs,
              const Ownership& own) {
  const int64_t ep = comm.group->size(), e = comm.group->rank();
  for (size_t li = 0; li < model.model->layers->layers.size(); ++li) {
    auto* layer = model.model->layers->layers[li];
    if (!layer->moe || !own.layer[li]) continue;
    auto* ex = layer->moe->experts;
    const int64_t El = ex->down_proj.size(0) / ep;  // check_layout: ep divides the experts
    for (Tensor* t : {&ex->gate_up_proj, &ex->gate_up_proj_bias, &ex->gate_proj, &ex->gate_proj_bias, &ex->up_proj,
                      &ex->up_proj_bias, &ex->down_proj, &ex->down_proj_bias})
      if (t->defined()) {
        shard_param(*t, 0, std::vector<int64_t>(ep, El), (int)e, specs, /*tp=*/false);
        find_spec(specs, t).expert = true;  // FSDP places it over the ranks holding the same experts
      }
    layer->moe->ep = comm;
  }
}

// The dispatch's groups: the ep group alone (standard), or with its ranks' hosts (hierarchical): each host must
// hold the same number L of the group's ranks, consecutive in the group (the mesh puts a host's ranks side by
// side); across_hosts: the ranks of one local index, within_host: one host's.
comms::ExpertComm expert_comm(const comms::DeviceMesh& mesh, const comms::PG& group, comms::ExpertCommBackend backend) {
  comms::ExpertComm c{group, nullptr, nullptr};
  if (backend != comms::ExpertCommBackend::Hierarchical) return c;
  const std::vector<int>& members = group->world_ranks();
  const int P = group->size();
  std::vector<int> host(P);
  std::string hosts_as_listed;
  for (int g = 0; g < P; ++g) {
    host[g] = mesh.host_of[members[g]];
    hosts_as_listed += (g ? "," : "") + std::to_string(host[g]);
  }
  int L = 1;
  while (L < P && host[L] == host[0]) ++L;
  bool even = P % L == 0;  // blocks of L ranks, one host each, no host twice
  std::set<int> seen;
  for (int g = 0; even && g < P; ++g) even = host[g] == host[g / L * L] && (g % L != 0 || seen.insert(host[g]).second);
  TITAN_CHECK(even, "config error: parallelism.expert_parallel_comm_backend hierarchical needs every host to hold "
              "the same number of each expert-parallel group's ranks, consecutive in the group; group '",
              group->name(), "' (world ranks of group ranks 0..", P - 1, ") sits on hosts [", hosts_as_listed,
              "]; launch the same number of ranks on every host, or use parallelism.expert_parallel_comm_backend: standard");
  c.across_hosts = group->split([L](int g) { return g % L; }, [L](int g) { return g / L; }, "ep_across_hosts");
  c.within_host = group->split([L](int g) { return g / L; }, [L](int g) { return g % L; }, "ep_within_host");
  return c;
}

}  // namespace

void check_layout(const decoder::Args& m, int64_t ep, int64_t pp) {
  TITAN_CHECK(ep >= 1, "config error: parallelism.expert_parallel_degree must be >= 1, got ", ep);
  TITAN_CHECK(ep == 1 || m.moe_enabled, "config error: parallelism.expert_parallel_degree ", ep,
              " needs MoE layers, and this model has none (model.moe_enabled: false)");
  TITAN_CHECK(m.moe_num_experts % ep == 0, "config error: model.moe_num_experts = ", m.moe_num_experts,
              " is not divisible by parallelism.expert_parallel_degree = ", ep, "; pick a degree that divides ",
              m.moe_num_experts);
  TITAN_CHECK(pp == 1 || !m.enable_weight_tying, "config error: parallelism.pipeline_parallel_degree ", pp,
              " with model.enable_weight_tying: true — the first stage (embedding) and the last (head) would share "
              "one weight across ranks, which titan's pipeline does not implement; untie the embeddings or use pp 1");
}

// The plans in the one order they compose: (1) pipeline parallel drops the other stages' parameters,
// (2) tensor parallel cuts its slices, (3) context parallel replaces the attention, (4) expert parallel keeps
// this rank's experts, (5) FSDP shards what is left and registers its hooks, (6) tensor parallel registers
// its collectives after FSDP's (they see the weights FSDP bound), (7) the buffers every rank holds alike.
ParallelModel parallelize(decoder::Decoder& model, comms::DeviceMesh& mesh, const ParallelOptions& opt) {
  ParallelModel pm;
  std::set<const Tensor*> bf16_operands;  // what each module reads only as a bf16 GEMM operand
  for (auto& [n, m] : model.named_modules())
    for (const Tensor* t : m->bf16_operands()) bf16_operands.insert(t);
  for (auto& [n, p] : model.named_parameters()) {
    ShardSpec s;
    s.name = n;
    s.slot = p;
    s.full_shape = p->shape();
    s.offset = Shape(p->dim(), 0);
    s.bf16_operand = bf16_operands.count(p) > 0;
    pm.specs.push_back(s);
  }
  check_layout(model.args(), opt.expert_parallel, mesh.degrees.pp);
  const Ownership own = ownership(model, opt.pipeline_chunks);
  if (!opt.pipeline_chunks.empty()) {  // (1)
    TITAN_CHECK(mesh.degrees.pp > 1, "parallelize: pipeline chunks given on a mesh without pp");
    drop_unowned(model, own, pm.specs);
  }
  std::unique_ptr<TensorParallel> tp;
  if (mesh.tp->size() > 1) {  // (2)
    tp = std::make_unique<TensorParallel>(
        model, mesh,
        TensorParallelOptions{opt.sequence_parallel, opt.loss_parallel,
                              opt.sequence_parallel && opt.sequence_parallel_regather, opt.async_tensor_parallel},
        own);
    tp->cut(pm.specs);
  }
  if (mesh.cp->size() > 1) apply_context_parallel(model, mesh, opt.context_parallel_rotate);  // (3)
  FSDP::PlacementFn placement;
  if (opt.expert_parallel > 1) {  // (4)
    const int64_t ep = opt.expert_parallel, S = mesh.dp_shard_cp->size();
    TITAN_CHECK(S % ep == 0, "parallelism: expert_parallel_degree ", ep,
                mesh.degrees.cp > 1
                    ? " must divide data_parallel_shard_degree x context_parallel_degree = " + std::to_string(S) +
                          " (ep borrows its ranks from dp_shard x cp)"
                    : " must divide the data-parallel shard degree " + std::to_string(S) +
                          " (ep borrows its ranks from dp_shard)");
    const int e = (int)ep;
    comms::PG ep_group = mesh.dp_shard_cp->split([e](int s) { return s / e; }, [e](int s) { return s % e; }, "ep");
    comms::PG expert_dp =
        mesh.dp_shard_cp->split([e](int s) { return s % e; }, [e](int s) { return s / e; }, "dp_shard_mod_ep");
    apply_ep(model, expert_comm(mesh, ep_group, opt.expert_comm), pm.specs, own);
    // expert weights: sharded over the ranks holding the same experts; their gradient gathered
    // every ep rank's tokens already, so the dp average is 1/ep of the group average
    placement = [&mesh, expert_dp, ep](const ShardSpec& s) {
      if (s.expert) return FSDP::Placement{expert_dp, 1.0 / (double)ep};
      return FSDP::Placement{mesh.dp_shard_cp, 1.0};
    };
  }
  // tp-replicated parameters: only tp rank 0 writes them
  for (auto& s : pm.specs)
    if (s.tp_replicated && mesh.tp_rank != 0) s.writer = false;
  TITAN_CHECK(!opt.fsdp_float8_all_gather || mesh.dp_shard_cp->size() > 1,
              "config error: float8.enable_fsdp_float8_all_gather: this layout shards nothing over FSDP (dp_shard x cp "
              "= 1), so it gathers nothing; drop the key or shard");
  if (opt.fsdp_float8_all_gather) {  // the FP8 linear layers' weights travel as FP8 (their casts now carry the cut)
    int64_t fp8_weights = 0;
    for (auto& [n, m] : model.named_modules())
      if (auto* lin = dynamic_cast<nn::Linear*>(m); lin && lin->float8 && lin->weight.defined()) {
        ShardSpec& s = find_spec(pm.specs, &lin->weight);
        s.fp8_gather = &*lin->float8;
        fp8_weights += s.owned;
      }
    // (every stage holds FP8 layers unless float8.filter_fqns leaves none; a stage of none gathers nothing so,
    // as every other stage's own weights: each rank asks of its own)
    TITAN_CHECK(fp8_weights > 0, "config error: float8.enable_fsdp_float8_all_gather: this rank holds no FP8 linear "
                "weight to gather (float8.filter_fqns, or the layers' features, left none in FP8); drop the key");
  }
  std::vector<nn::Module*> units = {&model};  // (5)
  const auto blocks = model.blocks();
  for (size_t i = 0; i < blocks.size(); ++i)
    if (own.layer[i]) units.push_back(blocks[i]);
  pm.fsdp = std::make_shared<FSDP>(units, mesh, opt.reshard_after_forward, pm.specs, placement, opt.param_dtype,
                                   opt.fsdp_float8_precompute);
  if (tp) tp->hooks();  // (6)
  for (auto& [n, t] : model.buffers()) {  // (7) every rank holds and updates them alike: one copy is written
    Region r{n, t, t->shape(), Shape(t->dim(), 0), mesh.rank == 0};
    r.optional = true;
    pm.buffers.push_back(r);
  }
  return pm;
}

void ParallelModel::wait_gradients() const {
  if (fsdp) fsdp->wait_gradients();
}

double global_grad_norm(const ParallelModel& pm, comms::DeviceMesh& mesh) {
  std::vector<std::pair<Tensor, double>> grads;  // this rank's counted gradients and their weights
  double flops = 0, bytes = 0;
  for (auto& s : pm.specs) {
    if (s.tp_replicated && mesh.tp_rank != 0) continue;  // counted on tp rank 0
    Tensor g = s.slot->grad();
    if (!g.defined()) continue;
    flops += 2.0 * (double)g.numel();
    bytes += (double)g.nbytes();
    grads.emplace_back(g, s.grad_norm_weight);
  }
  // one kernel over every gradient (torch's foreach norm), real and planned; recorded before it runs (a timed
  // profile charges the time after a record to it)
  record_cost("grad_norm", flops, bytes);
  double local = 0;
  for (auto& [g, w] : grads) local += squared_norm(g) * w;  // planning: 0 (the value is data)
  if (mesh.world_pg->size() == 1) return std::sqrt(local);
  if (default_device() == Device::Meta) {  // planning: the all-reduce is priced
    mesh.world_pg->all_reduce(empty({1}, DType::F64));
    return 0.0;
  }
  Tensor t = from_vector<double>({local}, {1});
  double total = mesh.world_pg->all_reduce(t).to_vector<double>()[0] / (double)mesh.degrees.dp_replicate;
  return std::sqrt(total);
}

}  // namespace titan::parallel
