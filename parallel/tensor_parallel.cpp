#include "parallel/tensor_parallel.h"

#include "comms/functional.h"
#include "comms/vocab_parallel.h"
#include "src/autograd/checkpoint.h"
#include "src/autograd/function.h"
#include "src/autograd/grad_mode.h"
#include "src/ops/ops.h"

namespace titan::parallel {

namespace {
// colwise / rowwise: this rank's chunk of `sizes` along `dim`; summed: kept whole, the gradient summed over
// tp; kv_head: the one KV head (rows [h * D, (h + 1) * D) of dim 0) this rank's query heads use when
// n_kv_heads < tp, kept by the tp / n_kv ranks that share it, its gradient summed over them.
enum class Style { colwise, rowwise, summed, kv_head };

// One row of a block's plan: a parameter (undefined ones are skipped), its style, and for colwise /
// rowwise the dimension cut and the per-rank sizes along it.
struct Entry {
  Tensor* param;
  Style style;
  int64_t dim = 0;
  std::vector<int64_t> sizes = {};
};

std::vector<int64_t> even(int64_t n, int64_t tp, const char* what) {
  std::vector<int64_t> fits;  // the degrees that would divide it (the fix to suggest)
  for (int64_t d = 1; d <= std::min<int64_t>(n, 64); ++d)
    if (n % d == 0) fits.push_back(d);
  std::string list;
  for (int64_t d : fits) list += (list.empty() ? "" : ", ") + std::to_string(d);
  TITAN_CHECK(n % tp == 0, "config error: tensor parallel: ", what, " (", n,
              ") must be divisible by parallelism.tensor_parallel_degree (", tp, "); degrees that divide it: ", list,
              " (the other sizes and the world must divide too), or change the model");
  return std::vector<int64_t>(tp, n / tp);
}

std::vector<int64_t> times(std::vector<int64_t> v, int64_t f) {
  for (auto& x : v) x *= f;
  return v;
}

// The linear styles: W [out, in] colwise splits out (rows; the bias with them), rowwise splits in (columns;
// the bias, whole on every rank, added on tp rank 0 only and its gradient summed).
void linear(std::vector<Entry>& plan, nn::Linear* lin, Style style, const std::vector<int64_t>& sizes) {
  if (style == Style::colwise) {
    plan.push_back({&lin->weight, Style::colwise, 0, sizes});
    plan.push_back({&lin->bias, Style::colwise, 0, sizes});
  } else {
    plan.push_back({&lin->weight, Style::rowwise, 1, sizes});
    plan.push_back({&lin->bias, Style::summed});
  }
}

void mlp(std::vector<Entry>& plan, decoder::MLP* m, const std::vector<int64_t>& ffn) {
  linear(plan, m->gate_proj, Style::colwise, ffn);
  linear(plan, m->up_proj, Style::colwise, ffn);
  linear(plan, m->down_proj, Style::rowwise, ffn);
}

// The plan of one decoder block (the replicated KV heads, when n_kv_heads < tp, are cut apart: cut_kv).
std::vector<Entry> block_plan(decoder::DecoderLayer* layer, const decoder::Args& a, int64_t tp, bool kv_split,
                              bool sequence_parallel) {
  std::vector<Entry> plan;
  auto* at = layer->self_attn;
  const auto q_rows = times(even(a.n_heads, tp, "model.n_heads"), a.head_dim);
  const auto heads = even(a.n_heads, tp, "model.n_heads");
  linear(plan, at->q_proj, Style::colwise, q_rows);  // this rank's query heads
  for (nn::Linear* lin : {at->k_proj, at->v_proj})
    if (kv_split) linear(plan, lin, Style::colwise, times(even(a.n_kv_heads, tp, "model.n_kv_heads"), a.head_dim));
    else plan.insert(plan.end(), {{&lin->weight, Style::kv_head}, {&lin->bias, Style::kv_head}});
  linear(plan, at->o_proj, Style::rowwise, q_rows);
  plan.push_back({&at->sinks, Style::colwise, 0, heads});
  if (at->variant.bias == nn::ScoreBias::relative) plan.push_back({&at->bias, Style::colwise, 0, heads});
  if (at->q_norm)
    for (nn::Norm* n : {at->q_norm, at->k_norm}) {
      plan.push_back({&n->weight, Style::summed});
      plan.push_back({&n->bias, Style::summed});
    }
  if (layer->mlp) mlp(plan, layer->mlp, even(a.hidden_dim, tp, "model.hidden_dim"));
  if (auto* moe = layer->moe) {
    auto* ex = moe->experts;
    const auto ffn = even(a.moe_hidden_dim, tp, "model.moe_hidden_dim");
    // each expert's intermediate size split as a dense MLP's (gpt-oss's interleaved gate_up keeps its
    // (gate, up) column pairs together); the router replicated
    plan.push_back({&ex->gate_up_proj, Style::colwise, 2, times(ffn, 2)});
    plan.push_back({&ex->gate_up_proj_bias, Style::colwise, 1, times(ffn, 2)});
    for (Tensor* t : {&ex->gate_proj, &ex->up_proj}) plan.push_back({t, Style::colwise, 2, ffn});
    for (Tensor* t : {&ex->gate_proj_bias, &ex->up_proj_bias}) plan.push_back({t, Style::colwise, 1, ffn});
    plan.push_back({&ex->down_proj, Style::rowwise, 1, ffn});
    plan.push_back({&ex->down_proj_bias, Style::summed});
    plan.push_back({&moe->router->weight, Style::summed});
    plan.push_back({&moe->router->bias, Style::summed});
    if (moe->shared_expert) mlp(plan, moe->shared_expert, ffn);
  }
  if (sequence_parallel)  // the norms see this rank's part of the sequence
    for (nn::Norm* n : {layer->input_layernorm, layer->post_attention_layernorm}) {
      plan.push_back({&n->weight, Style::summed});
      plan.push_back({&n->bias, Style::summed});
    }
  return plan;
}

// summed: identity forward, the gradient summed over `g` (after FSDP's pre-hook bound the weight).
void sum_grads(Tensor& w, const comms::PG& g) {
  if (w.defined()) w = comms::copy_to(w, g);
}

// The collectives around an attention / MLP block. Inputs: replicated x -> copy_to (backward all-reduce);
// with sequence parallel the residual stream is split along the sequence and gathered here (backward
// reduce-scatter). Outputs: all-reduce, or reduce-scatter back to sequence shards. regather: the block's
// gathered input [B, S, H] (what its colwise projections keep for their weight gradients) is freed when
// its forward ends and gathered again from the rank's shard [B, S/tp, H] when its backward begins (not in
// a checkpoint's first run, which keeps nothing, nor in its recompute, whose backward follows at once).
void block_collectives(nn::Module& m, const comms::PG& pg, bool sequence_parallel, bool regather) {
  auto block_out = [pg, sequence_parallel](nn::Module&, const Tensor& y) {
    return sequence_parallel ? comms::reduce_scatter_op(y, 1, pg) : comms::reduce_from(y, pg);
  };
  if (!regather) {
    m.register_forward_pre_hook([pg, sequence_parallel](nn::Module&, const Tensor& x) {
      return sequence_parallel ? comms::all_gather_op(x, 1, pg) : comms::copy_to(x, pg);
    });
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
    g.full.release_storage();
    return autograd::custom_op(
        "SequenceParallelRegather", {out}, [](const std::vector<Tensor>& in) { return std::vector<Tensor>{in[0]}; },
        [pg, g](const std::vector<Tensor>& grad) {
          NoGradGuard ng;
          g.full.adopt_storage(pg->all_gather(g.local, 1));  // [B, S, H], bit-identical to the forward's
          return std::vector<Tensor>{grad[0]};
        })[0];
  });
}
}  // namespace

TensorParallel::TensorParallel(decoder::Decoder& model, comms::DeviceMesh& mesh, const TensorParallelOptions& opt,
                               const Ownership& own)
    : model_(model), mesh_(mesh), opt_(opt), own_(own) {}

void TensorParallel::cut(std::vector<ShardSpec>& specs) {
  const int64_t tp = mesh_.tp->size();
  const int r = mesh_.tp->rank();
  const auto& a = model_.args();
  // KV heads: split when there are at least tp of them; otherwise each rank keeps the one head its query
  // heads use (replicated over the tp / n_kv ranks that share it, whose gradients are summed over them)
  const bool kv_split = a.n_kv_heads >= tp;
  int64_t kv_head = 0;
  if (!kv_split) {
    TITAN_CHECK(tp % a.n_kv_heads == 0, "tensor parallel: tensor_parallel_degree (", tp,
                ") must be a multiple of n_kv_heads (", a.n_kv_heads, ") when it exceeds it");
    const int share = (int)(tp / a.n_kv_heads);  // tp ranks holding each KV head
    kv_head = r / share;
    kv_group_ = mesh_.tp->split([share](int t) { return t / share; }, [](int t) { return t; },
                                "tp_kv" + std::to_string(kv_head));
  }
  auto& layers = model_.model->layers->layers;
  for (size_t li = 0; li < layers.size(); ++li) {
    if (!own_.layer[li]) continue;  // another pipeline stage's
    decoder::DecoderLayer* layer = layers[li];
    for (const Entry& e : block_plan(layer, a, tp, kv_split, opt_.sequence_parallel)) {
      if (!e.param->defined()) continue;
      if (e.style == Style::colwise || e.style == Style::rowwise) shard_param(*e.param, e.dim, e.sizes, r, specs);
      if (e.style != Style::kv_head) continue;
      keep_block(*e.param, 0, kv_head * a.head_dim, a.head_dim, specs);  // the one KV head this rank's queries use
      ShardSpec& s = find_spec(specs, e.param);
      s.writer = s.writer && kv_group_->rank() == 0;
      s.grad_norm_weight = 1.0 / (double)kv_group_->size();  // each copy counted once in total
    }
    auto* at = layer->self_attn;
    at->o_proj->bias_scale = r == 0 ? 1.0 : 0.0;  // rowwise: the bias added once
    if (at->variant.bias == nn::ScoreBias::alibi) {  // ALiBi slopes: a constant, sliced to this rank's heads
      NoGradGuard ng;
      const int64_t h = a.n_heads / tp;
      at->bias = slice(at->bias, 0, r * h, (r + 1) * h).clone();
    }
    if (auto* moe = layer->moe) {
      moe->experts->down_bias_scale = r == 0 ? 1.0 : 0.0;
      moe->aux_loss_scale = r == 0 ? 1.0 : 0.0;  // every tp rank routes alike: count the auxiliary loss once
    }
  }
  // vocab: the embedding's rows and the head's (or the tied embedding as head) over the vocabulary
  const std::vector<int64_t> vocab = comms::chunk_sizes(a.vocab_size, tp);
  int64_t vocab_start = 0;
  for (int q = 0; q < r; ++q) vocab_start += vocab[q];
  comms::PG pg = mesh_.tp;
  if (own_.embed) {
    shard_param(model_.model->embed_tokens->weight, 0, vocab, r, specs);
    model_.model->embed_tokens->lookup = [pg, vocab_start](const Tensor& w, const Tensor& ids) {
      return comms::vocab_parallel_embedding(w, ids, vocab_start, pg);
    };
  }
  if (model_.lm_head && own_.head) shard_param(model_.lm_head->weight, 0, vocab, r, specs);
  if (opt_.loss_parallel)  // loss parallel: max and sum-exp all-reduced
    model_.sharded_loss = [pg, vocab_start](const Tensor& logits, const Tensor& targets) {
      return comms::vocab_parallel_cross_entropy(logits, targets, vocab_start, pg);
    };
  else  // logits gathered over the vocab: B*S*V*(tp-1)/tp floats received per rank, [B, S, V] on every rank
    model_.sharded_loss = [pg, vocab](const Tensor& logits, const Tensor& targets) {
      return cross_entropy(comms::gather_from(logits, -1, pg, vocab), targets);
    };
}

void TensorParallel::hooks() {
  comms::PG pg = mesh_.tp, kv_group = kv_group_;
  const auto& a = model_.args();
  const int64_t tp = pg->size();
  const bool sp = opt_.sequence_parallel, kv_split = !kv_group;
  auto& layers = model_.model->layers->layers;
  for (size_t i = 0; i < layers.size(); ++i) {
    if (!own_.layer[i]) continue;
    decoder::DecoderLayer* layer = layers[i];
    auto* at = layer->self_attn;
    // runs after FSDP's pre-hook of the layer has bound the weights
    layer->register_forward_pre_hook([=](nn::Module&, const Tensor& x) {
      for (const Entry& e : block_plan(layer, a, tp, kv_split, sp))
        if (e.style == Style::summed) sum_grads(*e.param, pg);
        else if (e.style == Style::kv_head) sum_grads(*e.param, kv_group);
      return x;
    });
    block_collectives(*at, pg, sp, opt_.regather);
    block_collectives(*layer->ffn(), pg, sp, opt_.regather);
  }
  decoder::Decoder& model = model_;
  // the residual stream leaves the embedding sequence-sharded, on whichever stage holds it (a pipeline's edge
  // stage may hold the embedding alone: what it sends is the shard)
  if (sp && own_.embed)
    model.model->embed_tokens->register_forward_post_hook(
        [pg](nn::Module&, const Tensor& y) { return comms::split_to(y, 1, pg); });
  if (sp && own_.head)
    model.register_forward_pre_hook([&model, pg](nn::Module&, const Tensor& ids) {
      sum_grads(model.model->norm->weight, pg);  // after FSDP's root pre-hook bound it
      sum_grads(model.model->norm->bias, pg);
      return ids;
    });
  // the head's input: the whole hidden state on every rank, each rank's (vocab shard's) gradient summed back
  auto head_in = [pg, sp](nn::Module&, const Tensor& x) {
    return sp ? comms::all_gather_op(x, 1, pg) : comms::copy_to(x, pg);
  };
  if (model.lm_head) model.lm_head->register_forward_pre_hook(head_in);
  else model.model->norm->register_forward_post_hook(head_in);
}

}  // namespace titan::parallel
