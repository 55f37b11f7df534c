#include "parallel/parallelize.h"

#include <cmath>

#include "comms/functional.h"
#include "comms/vocab_parallel.h"
#include "models/decoder/model.h"
#include "parallel/fsdp.h"
#include "src/autograd/checkpoint.h"
#include "src/autograd/function.h"
#include "src/autograd/grad_mode.h"
#include "src/ops/ops.h"
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
ShardSpec* find_spec(std::vector<ShardSpec>& specs, const Tensor* slot) {
  for (auto& s : specs)
    if (s.slot == slot) return &s;
  fail("parallelize: parameter not found");
}

// The one weight surgery of every plan: keeps rows [start, start + size) of
// the parameter in `slot` along `dim` (own storage: the full weight is freed)
// and moves its spec's offset. `tp`: a tensor-parallel cut (the block is no
// longer the same on every tp rank), else an expert-parallel one.
void keep_block(Tensor& slot, int64_t dim, int64_t start, int64_t size, std::vector<ShardSpec>& specs, bool tp = true) {
  ShardSpec* s = find_spec(specs, &slot);
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
  s->offset[dim] += start;
  if (tp) s->tp_replicated = false;
}

// Rank r's chunk of `sizes` along `dim`.
void shard_param(Tensor& slot, int64_t dim, const std::vector<int64_t>& sizes, int r, std::vector<ShardSpec>& specs,
                 bool tp = true) {
  int64_t start = 0;
  for (int q = 0; q < r; ++q) start += sizes[q];
  keep_block(slot, dim, start, sizes[r], specs, tp);
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

// What this rank holds of the model under pipeline parallel (everything without it).
struct Ownership {
  std::vector<bool> layer;
  bool embed = true, head = true;  // head: the final norm and lm_head
};

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
      ShardSpec* s = find_spec(specs, slot);
      Shape empty_block = slot->shape();
      empty_block[0] = 0;
      const std::string name = slot->name();
      *slot = zeros(empty_block, slot->dtype());
      slot->requires_grad_(true);  // a trainable name (AdamW keeps its empty moments: checkpoints list them all)
      slot->set_name(name);
      s->owned = false;
      s->writer = false;
    }
}

// Tensor parallel, part 1 (before FSDP): cut each rank's slices of the weights.
// Part 2 (after FSDP, so these hooks run after FSDP has bound the weights)
// registers the collectives. Returns the part-2 registration.
//   attention: q, k, v column-parallel by heads (biases and sinks with them),
//     o row-parallel (its bias added on tp rank 0 only);
//   dense MLP and shared expert: gate, up column-parallel, down row-parallel;
//   experts: each expert's intermediate size split the same way (gpt-oss's
//     interleaved gate_up keeps its (gate, up) column pairs together), the
//     router replicated (its gradient summed over tp);
//   embedding and lm_head (or the tied embedding as head): split over the
//     vocabulary (Megatron's vocab-parallel embedding: each rank looks up the
//     ids it owns, the rows summed over tp); the logits stay split into the
//     loss (loss parallel: max and sum-exp all-reduced), or are gathered
//     into a plain cross-entropy when loss_parallel is off.
//   regather (with sequence parallel): a block's gathered input is freed after
//     its forward and gathered again when its backward begins (Megatron-LM).
std::function<void()> apply_tp(decoder::Decoder& model, comms::DeviceMesh& mesh, std::vector<ShardSpec>& specs,
                               bool sequence_parallel, bool loss_parallel, bool regather, const Ownership& own) {
  const int64_t tp = mesh.tp->size();
  const int r = mesh.tp->rank();
  const auto& a = model.args();
  auto q_rows = by_heads(a.n_heads, a.head_dim, tp, "n_heads");
  const std::vector<int64_t> heads(tp, a.n_heads / tp);
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
  auto split = [tp](int64_t n, const char* what) {
    TITAN_CHECK(n % tp == 0, "tensor parallel: ", what, " (", n, ") must be divisible by tensor_parallel_degree (", tp,
                ")");
    return std::vector<int64_t>(tp, n / tp);
  };
  auto times = [](std::vector<int64_t> v, int64_t f) {
    for (auto& x : v) x *= f;
    return v;
  };
  auto shard_mlp = [&](decoder::MLP* mlp, const std::vector<int64_t>& ffn) {
    shard_linear(mlp->gate_proj, 0, ffn, r, specs);
    shard_linear(mlp->up_proj, 0, ffn, r, specs);
    shard_linear(mlp->down_proj, 1, ffn, r, specs);
  };
  comms::PG pg = mesh.tp;
  for (size_t li = 0; li < model.model->layers->layers.size(); ++li) {
    if (!own.layer[li]) continue;  // another pipeline stage's
    decoder::DecoderLayer* layer = model.model->layers->layers[li];
    auto* at = layer->self_attn;
    for (nn::Linear* lin : {at->q_proj}) {  // column parallel: this rank's heads
      shard_linear(lin, 0, q_rows, r, specs);
      if (lin->bias.defined()) shard_param(lin->bias, 0, q_rows, r, specs);
    }
    if (at->sinks.defined()) shard_param(at->sinks, 0, heads, r, specs);
    if (at->variant.bias == "relative") {
      shard_param(at->bias, 0, heads, r, specs);  // the table rows of this rank's heads
    } else if (at->bias.defined()) {              // ALiBi slopes: a constant, sliced
      NoGradGuard ng;
      at->bias = slice(at->bias, 0, r * heads[0], (r + 1) * heads[0]).clone();
    }
    for (nn::Linear* lin : {at->k_proj, at->v_proj}) {
      if (!kv_replicated) {
        shard_linear(lin, 0, kv_rows, r, specs);
        if (lin->bias.defined()) shard_param(lin->bias, 0, kv_rows, r, specs);
        continue;
      }
      for (Tensor* t : {&lin->weight, &lin->bias}) {
        if (!t->defined()) continue;
        keep_block(*t, 0, kv_head * a.head_dim, a.head_dim, specs);  // the one KV head this rank's queries use
        ShardSpec* s = find_spec(specs, t);
        s->writer = s->writer && kv_group->rank() == 0;
        s->grad_norm_weight = 1.0 / (double)kv_group->size();  // each copy counted once in total
      }
    }
    shard_linear(at->o_proj, 1, q_rows, r, specs);  // row parallel
    at->o_proj->bias_scale = r == 0 ? 1.0 : 0.0;
    if (layer->mlp) shard_mlp(layer->mlp, split(a.hidden_dim, "hidden_dim"));
    if (auto* moe = layer->moe) {
      auto* ex = moe->experts;
      const auto ffn = split(a.moe_hidden_dim, "moe_hidden_dim");
      if (ex->fused) {
        shard_param(ex->gate_up_proj, 2, times(ffn, 2), r, specs);
        if (ex->gate_up_proj_bias.defined()) shard_param(ex->gate_up_proj_bias, 1, times(ffn, 2), r, specs);
      } else {
        for (Tensor* t : {&ex->gate_proj, &ex->up_proj}) shard_param(*t, 2, ffn, r, specs);
        for (Tensor* t : {&ex->gate_proj_bias, &ex->up_proj_bias})
          if (t->defined()) shard_param(*t, 1, ffn, r, specs);
      }
      shard_param(ex->down_proj, 1, ffn, r, specs);
      ex->down_bias_scale = r == 0 ? 1.0 : 0.0;
      moe->aux_loss_scale = r == 0 ? 1.0 : 0.0;  // every tp rank routes alike: count the auxiliary loss once
      if (moe->shared_expert) shard_mlp(moe->shared_expert, ffn);
    }
  }
  const std::vector<int64_t> vocab = comms::chunk_sizes(a.vocab_size, tp);
  int64_t vocab_start = 0;
  for (int q = 0; q < r; ++q) vocab_start += vocab[q];
  if (own.embed) {
    shard_param(model.model->embed_tokens->weight, 0, vocab, r, specs);
    model.model->embed_tokens->lookup = [pg = mesh.tp, vocab_start](const Tensor& w, const Tensor& ids) {
      return comms::vocab_parallel_embedding(w, ids, vocab_start, pg);
    };
  }
  if (model.lm_head && own.head) shard_linear(model.lm_head, 0, vocab, r, specs);
  if (loss_parallel)
    model.sharded_loss = [pg = mesh.tp, vocab_start](const Tensor& logits, const Tensor& targets) {
      return comms::vocab_parallel_cross_entropy(logits, targets, vocab_start, pg);
    };
  else  // logits gathered over the vocab: B*S*V*(tp-1)/tp floats received per rank, [B, S, V] on every rank
    model.sharded_loss = [pg = mesh.tp, vocab](const Tensor& logits, const Tensor& targets) {
      return cross_entropy(comms::gather_from(logits, -1, pg, vocab), targets);
    };

  return [&model, pg, kv_group, kv_replicated, sequence_parallel, regather, own]() {
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
    // regather: the block's gathered input full [B, S, H] (what its column-parallel projections keep for
    // their weight gradients) is freed when its forward ends, and gathered again from the rank's shard
    // local [B, S/tp, H] when its backward begins (before any of its ops' backward reads it). Not in a
    // checkpoint's first run (no grad: nothing kept) nor in its recompute (its backward follows at once).
    auto block_hooks = [pg, regather, block_in, block_out](nn::Module& m) {
      if (!regather) {
        m.register_forward_pre_hook(block_in);
        m.register_forward_post_hook(block_out);
        return;
      }
      struct Gathered {
        Tensor local, full;
      };
      auto open = std::make_shared<std::vector<Gathered>>();  // this module's forward in progress
      m.register_forward_pre_hook([pg, open](nn::Module&, const Tensor& x) {
        Tensor full = comms::all_gather_op(x, 1, pg);  // [B, S, H]
        if (autograd::grad_enabled() && !autograd::recomputing()) open->push_back({x.detach(), full});
        return full;
      });
      m.register_forward_post_hook([pg, open, block_out](nn::Module& mod, const Tensor& y) {
        Tensor out = block_out(mod, y);
        if (open->empty()) return out;
        Gathered g = open->back();
        open->pop_back();
        TITAN_CHECK(g.full.offset() == 0 && g.full.is_contiguous() &&
                        g.full.impl()->storage->nbytes() == (size_t)g.full.nbytes(),
                    "sequence_parallel_regather: the gathered block input ", shape_str(g.full.shape()),
                    " must own its whole buffer to be freed and refilled");
        g.full.impl()->storage->release();
        return autograd::custom_op(
            "SequenceParallelRegather", {out}, [](const std::vector<Tensor>& in) { return std::vector<Tensor>{in[0]}; },
            [pg, g](const std::vector<Tensor>& grad) {
              NoGradGuard ng;
              Tensor again = pg->all_gather(g.local, 1);  // [B, S, H], bit-identical to the forward's
              TITAN_CHECK(again.offset() == 0 && again.is_contiguous(), "sequence_parallel_regather: the re-gathered ",
                          shape_str(again.shape()), " must own its whole buffer");
              g.full.impl()->storage->adopt(*again.impl()->storage);
              return std::vector<Tensor>{grad[0]};
            })[0];
      });
    };
    // Replicated weights that see only part of the work on each rank get their
    // gradients summed over tp (identity forward): the per-head q/k norms, the
    // router (each rank's experts' share of the routing weights' gradient), the
    // biases added on rank 0 only, and the block norms under sequence parallel.
    auto sum_grads = [](Tensor& w, const comms::PG& g) {
      if (w.defined()) w = comms::copy_to(w, g);
    };
    auto& layers = model.model->layers->layers;
    for (size_t i = 0; i < layers.size(); ++i) {
      if (!own.layer[i]) continue;
      decoder::DecoderLayer* layer = layers[i];
      auto* at = layer->self_attn;
      // runs after FSDP's pre-hook of the layer has bound the weights
      layer->register_forward_pre_hook([=](nn::Module&, const Tensor& x) {
        if (at->q_norm)
          for (nn::Norm* n : {at->q_norm, at->k_norm}) {
            sum_grads(n->weight, pg);
            sum_grads(n->bias, pg);
          }
        if (kv_replicated)
          for (nn::Linear* lin : {at->k_proj, at->v_proj}) {
            sum_grads(lin->weight, kv_group);
            sum_grads(lin->bias, kv_group);
          }
        sum_grads(at->o_proj->bias, pg);
        if (layer->moe) {
          sum_grads(layer->moe->router->weight, pg);
          sum_grads(layer->moe->router->bias, pg);
          sum_grads(layer->moe->experts->down_proj_bias, pg);
        }
        if (!sequence_parallel) return x;
        for (nn::Norm* n : {layer->input_layernorm, layer->post_attention_layernorm}) {
          sum_grads(n->weight, pg);
          sum_grads(n->bias, pg);
        }
        return i == 0 ? comms::split_to(x, 1, pg) : x;  // the residual stream enters sequence-sharded
      });
      block_hooks(*at);
      block_hooks(*layer->ffn());
    }
    if (sequence_parallel && own.head)
      model.register_forward_pre_hook([&model, pg, sum_grads](nn::Module&, const Tensor& ids) {
        sum_grads(model.model->norm->weight, pg);  // after FSDP's root pre-hook bound it
        sum_grads(model.model->norm->bias, pg);
        return ids;
      });
    // the head's input: the whole hidden state on every rank, each rank's
    // (vocab shard's) gradient summed back
    if (model.lm_head) model.lm_head->register_forward_pre_hook(block_in);
    else model.model->norm->register_forward_post_hook(block_in);
  };
}
// Expert parallel (every model with MoE layers): rank keeps experts
// [e*El, (e+1)*El) of every MoE layer, e = its index in the ep group
// (consecutive dp_shard ranks); the MoE blocks dispatch over that group.
void apply_ep(decoder::Decoder& model, comms::PG ep_group, std::vector<ShardSpec>& specs, const Ownership& own) {
  const int64_t ep = ep_group->size(), e = ep_group->rank();
  for (size_t li = 0; li < model.model->layers->layers.size(); ++li) {
    auto* layer = model.model->layers->layers[li];
    if (!layer->moe || !own.layer[li]) continue;
    auto* ex = layer->moe->experts;
    const int64_t E = ex->down_proj.size(0);
    TITAN_CHECK(E % ep == 0, "expert parallel: ", E, " experts are not divisible by expert_parallel_degree ", ep);
    const int64_t El = E / ep;
    for (Tensor* t : {&ex->gate_up_proj, &ex->gate_up_proj_bias, &ex->gate_proj, &ex->gate_proj_bias, &ex->up_proj,
                      &ex->up_proj_bias, &ex->down_proj, &ex->down_proj_bias})
      if (t->defined()) shard_param(*t, 0, std::vector<int64_t>(ep, El), (int)e, specs, /*tp=*/false);
    layer->moe->ep_group = ep_group;
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
  auto* dec = dynamic_cast<decoder::Decoder*>(&model);
  TITAN_CHECK(dec, "parallelize: the plans are written for titan's decoder (models/decoder)");
  const Ownership own = ownership(*dec, opt.pipeline_chunks);
  if (!opt.pipeline_chunks.empty()) {
    TITAN_CHECK(mesh.degrees.pp > 1, "parallelize: pipeline chunks given on a mesh without pp");
    TITAN_CHECK(!dec->args().tie_embeddings, "parallelism: pipeline parallel with tied embeddings "
                "(model.enable_weight_tying / tie_word_embeddings): the first and last stages would share one "
                "weight; untie them or use pipeline_parallel_degree 1");
    drop_unowned(*dec, own, pm.specs);
  }
  if (mesh.tp->size() > 1)
    tp_hooks = apply_tp(*dec, mesh, pm.specs, opt.sequence_parallel, opt.loss_parallel,
                        opt.sequence_parallel && opt.sequence_parallel_regather, own);
  if (mesh.cp->size() > 1) apply_context_parallel(model, mesh, opt.context_parallel_rotate);
  FSDP::PlacementFn placement;
  if (opt.expert_parallel > 1) {
    TITAN_CHECK(dec->args().moe, "parallelism: expert_parallel_degree ", opt.expert_parallel,
                " needs MoE layers, and this model has none (model.moe_enabled: false)");
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
    apply_ep(*dec, ep_group, pm.specs, own);
    // expert weights: sharded over the ranks holding the same experts; their gradient gathered
    // every ep rank's tokens already, so the dp average is 1/ep of the group average
    placement = [&mesh, expert_dp, ep](const ShardSpec& s) {
      if (is_expert_param(s.name)) return FSDP::Placement{expert_dp, 1.0 / (double)ep};
      return FSDP::Placement{mesh.dp_shard_cp, 1.0};
    };
  }
  // tp-replicated parameters: only tp rank 0 writes them
  for (auto& s : pm.specs)
    if (s.tp_replicated && mesh.tp_rank != 0) s.writer = false;
  std::vector<nn::Module*> units = {&model};
  const auto blocks = model.blocks();
  for (size_t i = 0; i < blocks.size(); ++i)
    if (own.layer[i]) units.push_back(blocks[i]);
  pm.fsdp = std::make_shared<FSDP>(units, mesh, opt.reshard_after_forward, pm.specs, placement);
  if (tp_hooks) tp_hooks();
  for (auto& [n, t] : model.buffers()) {  // every rank holds and updates them alike: one copy is written
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
  double local = 0, flops = 0, bytes = 0;
  for (auto& s : pm.specs) {
    if (s.tp_replicated && mesh.tp_rank != 0) continue;  // counted on tp rank 0
    Tensor g = s.slot->grad();
    if (!g.defined()) continue;
    flops += 2.0 * (double)g.numel();
    bytes += (double)g.nbytes();
    if (g.is_meta()) continue;  // planning: the value is data
    auto v = g.contiguous();
    const float* x = v.data<float>();
    double acc = 0;
    for (int64_t i = 0; i < v.numel(); ++i) acc += (double)x[i] * x[i];
    local += acc * s.grad_norm_weight;
  }
  record_cost("grad_norm", flops, bytes);  // one kernel over every gradient (torch's foreach norm), real and planned
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
