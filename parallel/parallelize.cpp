#include "parallel/parallelize.h"

#include <cmath>

#include "comms/functional.h"
#include "models/gpt_oss/model.h"
#include "models/qwen3/model.h"
#include "parallel/fsdp.h"
#include "src/autograd/grad_mode.h"
#include "src/ops/ops.h"

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
ShardSpec* find_spec(std::vector<ShardSpec>& specs, const Tensor* slot) {
  for (auto& s : specs)
    if (s.slot == slot) return &s;
  fail("parallelize: parameter not found");
}

// Keeps this tp rank's chunk of the parameter in `slot` along `dim` (chunk sizes given).
void shard_param(Tensor& slot, int64_t dim, const std::vector<int64_t>& sizes, int r, std::vector<ShardSpec>& specs) {
  ShardSpec* s = find_spec(specs, &slot);
  int64_t start = 0;
  for (int q = 0; q < r; ++q) start += sizes[q];
  Tensor local;
  {
    MemoryCategoryScope cat(MemoryCategory::Parameters);
    NoGradGuard ng;
    local = slice(slot, dim, start, start + sizes[r]).clone();  // own storage: the full weight is freed
  }
  const std::string name = slot.name();
  slot = local.detach();
  slot.requires_grad_(true);
  slot.set_name(name);
  s->offset[dim] += start;
  s->tp_replicated = false;
}

void shard_linear(nn::Linear* lin, int64_t dim, const std::vector<int64_t>& sizes, int r,
                  std::vector<ShardSpec>& specs) {
  shard_param(lin->weight, dim, sizes, r, specs);
}

std::vector<int64_t> by_heads(int64_t heads, int64_t head_dim, int64_t tp, const char* what) {
  TITAN_CHECK(heads % tp == 0, "tensor parallel: ", what, " (", heads, ") must be divisible by tensor_parallel_degree (",
              tp, ")");
  return std::vector<int64_t>(tp, heads / tp * head_dim);
}

// Tensor parallel, part 1 (before FSDP): cut each rank's slices of the weights.
// Part 2 (after FSDP, so these hooks run after FSDP has bound the weights)
// registers the collectives. Returns the part-2 registration.
std::function<void()> apply_tp(qwen3::Qwen3& model, comms::DeviceMesh& mesh, std::vector<ShardSpec>& specs,
                               bool sequence_parallel) {
  const int64_t tp = mesh.tp->size();
  const int r = mesh.tp->rank();
  const auto& a = model.args();
  auto q_rows = by_heads(a.n_heads, a.head_dim, tp, "n_heads");
  // KV heads: split when there are at least tp of them; otherwise each rank
  // keeps the one head its query heads use (replicated over the tp/n_kv ranks
  // that share it, whose gradient contributions are summed over that group)
  const bool kv_replicated = a.n_kv_heads < tp;
  std::vector<int64_t> kv_rows;
  comms::PG kv_group;
  int64_t kv_head = 0;
  if (kv_replicated) {
    TITAN_CHECK(tp % a.n_kv_heads == 0, "tensor parallel: tensor_parallel_degree (", tp,
                ") must be a multiple of n_kv_heads (", a.n_kv_heads, ") when it exceeds it");
    kv_head = r / (tp / a.n_kv_heads);
    const int share = (int)(tp / a.n_kv_heads);  // tp ranks holding each KV head
    kv_group = mesh.tp->split([share](int t) { return t / share; }, [](int t) { return t; },
                              "tp_kv" + std::to_string(kv_head));
  } else {
    kv_rows = by_heads(a.n_kv_heads, a.head_dim, tp, "n_kv_heads");
  }
  TITAN_CHECK(a.hidden_dim % tp == 0, "tensor parallel: hidden_dim (", a.hidden_dim,
              ") must be divisible by tensor_parallel_degree (", tp, ")");
  std::vector<int64_t> ffn(tp, a.hidden_dim / tp);
  comms::PG pg = mesh.tp;
  for (qwen3::DecoderLayer* layer : model.model->layers->layers) {
    TITAN_CHECK(layer->mlp, "parallelism: tensor parallel with the qwen3 MoE ablation is not supported (set "
                            "tensor_parallel_degree: 1)");
    auto* at = layer->self_attn;
    shard_linear(at->q_proj, 0, q_rows, r, specs);  // column parallel: this rank's heads
    const std::vector<int64_t> heads(tp, a.n_heads / tp);
    if (at->variant.bias == "relative") {
      shard_param(at->bias, 0, heads, r, specs);  // the table rows of this rank's heads
    } else if (at->bias.defined()) {              // ALiBi slopes: a constant, sliced
      NoGradGuard ng;
      at->bias = slice(at->bias, 0, r * heads[0], (r + 1) * heads[0]).clone();
    }
    if (kv_replicated) {
      for (nn::Linear* lin : {at->k_proj, at->v_proj}) {
        ShardSpec* s = find_spec(specs, &lin->weight);
        Tensor local;
        {
          MemoryCategoryScope cat(MemoryCategory::Parameters);
          NoGradGuard ng;
          local = slice(lin->weight, 0, kv_head * a.head_dim, (kv_head + 1) * a.head_dim).clone();
        }
        const std::string name = lin->weight.name();
        lin->weight = local.detach();
        lin->weight.requires_grad_(true);
        lin->weight.set_name(name);
        s->offset[0] += kv_head * a.head_dim;
        s->tp_replicated = false;
        s->writer = s->writer && kv_group->rank() == 0;
        s->grad_norm_weight = 1.0 / (double)kv_group->size();  // each copy counted once in total
      }
    } else {
      shard_linear(at->k_proj, 0, kv_rows, r, specs);
      shard_linear(at->v_proj, 0, kv_rows, r, specs);
    }
    shard_linear(at->o_proj, 1, q_rows, r, specs);  // row parallel
    auto* mlp = layer->mlp;
    shard_linear(mlp->gate_proj, 0, ffn, r, specs);
    shard_linear(mlp->up_proj, 0, ffn, r, specs);
    shard_linear(mlp->down_proj, 1, ffn, r, specs);
  }
  std::vector<int64_t> vocab;
  if (model.lm_head) {  // vocab-parallel head
    vocab = comms::chunk_sizes(a.vocab_size, tp);
    shard_linear(model.lm_head, 0, vocab, r, specs);
  }

  return [&model, pg, kv_group, kv_replicated, vocab, sequence_parallel]() {
    // Block inputs: replicated x -> copy_to (bwd all-reduce); with sequence
    // parallel the residual stream is split along the sequence and gathered
    // here (bwd reduce-scatter). Block outputs: all-reduce, or reduce-scatter
    // back to sequence shards.
    auto block_in = [pg, sequence_parallel](nn::Module&, const Tensor& x) {
      return sequence_parallel ? comms::all_gather_op(x, 1, pg) : comms::copy_to(x, pg);
    };
    auto block_out = [pg, sequence_parallel](nn::Module&, const Tensor& y) {
      return sequence_parallel ? comms::reduce_scatter_op(y, 1, pg) : comms::reduce_from(y, pg);
    };
    // Replicated weights that see only part of the work on each rank get their
    // gradients summed over tp (identity forward): the per-head q/k norms
    // always, the block norms under sequence parallel.
    auto sum_grads = [](Tensor& w, const comms::PG& g) {
      if (w.defined()) w = comms::copy_to(w, g);
    };
    auto& layers = model.model->layers->layers;
    for (size_t i = 0; i < layers.size(); ++i) {
      qwen3::DecoderLayer* layer = layers[i];
      auto* at = layer->self_attn;
      // runs after FSDP's pre-hook of the layer has bound the weights
      layer->register_forward_pre_hook([=](nn::Module&, const Tensor& x) {
        if (at->q_norm)
          for (nn::Norm* n : {at->q_norm, at->k_norm}) {
            sum_grads(n->weight, pg);
            sum_grads(n->bias, pg);
          }
        if (kv_replicated) {
          sum_grads(at->k_proj->weight, kv_group);
          sum_grads(at->v_proj->weight, kv_group);
        }
        if (!sequence_parallel) return x;
        for (nn::Norm* n : {layer->input_layernorm, layer->post_attention_layernorm}) {
          sum_grads(n->weight, pg);
          sum_grads(n->bias, pg);
        }
        return i == 0 ? comms::split_to(x, 1, pg) : x;  // the residual stream enters sequence-sharded
      });
      at->register_forward_pre_hook(block_in);
      at->register_forward_post_hook(block_out);
      layer->mlp->register_forward_pre_hook(block_in);
      layer->mlp->register_forward_post_hook(block_out);
    }
    if (sequence_parallel)
      model.register_forward_pre_hook([&model, pg, sum_grads](nn::Module&, const Tensor& ids) {
        sum_grads(model.model->norm->weight, pg);  // after FSDP's root pre-hook bound it
        sum_grads(model.model->norm->bias, pg);
        return ids;
      });
    if (model.lm_head) {  // logits gathered over the vocab (cost: B*S*V*(tp-1)/tp floats received per rank)
      model.lm_head->register_forward_pre_hook(block_in);
      model.lm_head->register_forward_post_hook(
          [pg, vocab](nn::Module&, const Tensor& y) { return comms::gather_from(y, -1, pg, vocab); });
    } else if (sequence_parallel) {  // tied head runs replicated: gather the final hidden states' sequence
      model.model->norm->register_forward_post_hook(
          [pg](nn::Module&, const Tensor& y) { return comms::gather_from(y, 1, pg); });
    }
  };
}
// Expert parallel (gpt_oss): rank keeps experts [e*El, (e+1)*El) of every
// layer, e = its index in the ep group (consecutive dp_shard ranks); the MoE
// blocks dispatch over that group.
void apply_ep(gpt_oss::GptOss& model, comms::PG ep_group, std::vector<ShardSpec>& specs) {
  const int64_t ep = ep_group->size(), e = ep_group->rank();
  for (auto* layer : model.model->layers->layers) {
    auto* ex = layer->mlp->experts;
    const int64_t E = ex->gate_up_proj.size(0);
    TITAN_CHECK(E % ep == 0, "expert parallel: ", E, " experts are not divisible by expert_parallel_degree ", ep);
    const int64_t El = E / ep;
    for (Tensor* t : {&ex->gate_up_proj, &ex->gate_up_proj_bias, &ex->down_proj, &ex->down_proj_bias}) {
      ShardSpec* s = find_spec(specs, t);
      Tensor local;
      {
        MemoryCategoryScope cat(MemoryCategory::Parameters);
        NoGradGuard ng;
        local = slice(*t, 0, e * El, (e + 1) * El).clone();
      }
      const std::string name = t->name();
      *t = local.detach();
      t->requires_grad_(true);
      t->set_name(name);
      s->offset[0] += e * El;
    }
    layer->mlp->ep_group = ep_group;
  }
}

bool is_expert_param(const std::string& name) { return name.find(".mlp.experts.") != std::string::npos; }
}  // namespace

ParallelModel parallelize(CausalLM& model, comms::DeviceMesh& mesh, const ParallelOptions& opt) {
  ParallelModel pm;
  for (auto& [n, p] : model.named_parameters()) {
    ShardSpec s;
    s.name = n;
    s.slot = p;
    s.full_shape = p->shape();
    s.offset = Shape(p->dim(), 0);
    pm.specs.push_back(s);
  }
  std::function<void()> tp_hooks;
  auto* qwen = dynamic_cast<qwen3::Qwen3*>(&model);
  auto* oss = dynamic_cast<gpt_oss::GptOss*>(&model);
  if (mesh.tp->size() > 1) {
    TITAN_CHECK(qwen, "parallelism: tensor parallel is implemented for qwen3 (for gpt_oss use expert_parallel_degree)");
    tp_hooks = apply_tp(*qwen, mesh, pm.specs, opt.sequence_parallel);
  }
  FSDP::PlacementFn placement;
  if (opt.expert_parallel > 1) {
    TITAN_CHECK(oss, "parallelism: expert_parallel_degree applies to MoE models (model.name: gpt_oss)");
    const int64_t ep = opt.expert_parallel, S = mesh.dp_shard->size();
    TITAN_CHECK(S % ep == 0, "parallelism: expert_parallel_degree ", ep,
                " must divide the data-parallel shard degree ", S, " (ep borrows its ranks from dp_shard)");
    const int e = (int)ep;
    comms::PG ep_group = mesh.dp_shard->split([e](int s) { return s / e; }, [e](int s) { return s % e; }, "ep");
    comms::PG expert_dp =
        mesh.dp_shard->split([e](int s) { return s % e; }, [e](int s) { return s / e; }, "dp_shard_mod_ep");
    apply_ep(*oss, ep_group, pm.specs);
    // expert weights: sharded over the ranks holding the same experts; their gradient gathered
    // every ep rank's tokens already, so the dp average is 1/ep of the group average
    placement = [&mesh, expert_dp, ep](const ShardSpec& s) {
      if (is_expert_param(s.name)) return FSDP::Placement{expert_dp, 1.0 / (double)ep};
      return FSDP::Placement{mesh.dp_shard, 1.0};
    };
  }
  // tp-replicated parameters: only tp rank 0 writes them
  for (auto& s : pm.specs)
    if (s.tp_replicated && mesh.tp_rank != 0) s.writer = false;
  std::vector<nn::Module*> units = {&model};
  for (auto* l : model.blocks()) units.push_back(l);
  pm.fsdp = std::make_shared<FSDP>(units, mesh, opt.reshard_after_forward, pm.specs, placement);
  if (tp_hooks) tp_hooks();
  return pm;
}

double global_grad_norm(const ParallelModel& pm, comms::DeviceMesh& mesh) {
  double local = 0;
  for (auto& s : pm.specs) {
    if (s.tp_replicated && mesh.tp_rank != 0) continue;  // counted on tp rank 0
    Tensor g = s.slot->grad();
    if (!g.defined()) continue;
    auto v = g.contiguous();
    const float* x = v.data<float>();
    double acc = 0;
    for (int64_t i = 0; i < v.numel(); ++i) acc += (double)x[i] * x[i];
    local += acc * s.grad_norm_weight;
  }
  Tensor t = from_vector<double>({local}, {1});
  double total = mesh.world_pg->all_reduce(t).to_vector<double>()[0] / (double)mesh.degrees.dp_replicate;
  return std::sqrt(total);
}

}  // namespace titan::parallel
