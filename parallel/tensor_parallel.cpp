#include "parallel/tensor_parallel.h"

#include "comms/collective_matmul.h"
#include "comms/functional.h"
#include "comms/vocab_parallel.h"
#include "src/autograd/checkpoint.h"
#include "src/autograd/function.h"
#include "src/autograd/grad_mode.h"
#include "src/ops/autocast.h"
#include "src/ops/ops.h"

namespace titan::parallel {

namespace {
// What a rank needs to apply a style: its tp rank, the tp group, and for replicated KV heads the group of
// ranks sharing this rank's head and where the head sits.
struct Ctx {
  int rank;
  comms::PG tp, kv;
  int64_t kv_start = 0, kv_size = 0;  // rows of the KV projections this rank keeps (kv_head)
};
struct Entry;

// A style is one definition: what a rank keeps of the parameter (cut: before FSDP shards what is left) and
// what its gradient needs (grad: after FSDP's pre-hook has bound the weight; none for the split styles, whose
// gradient is this rank's slice). A new style is one more of these plus its rows in block_plan.
struct Style {
  const char* name;
  void (*cut)(const Entry&, const Ctx&, std::vector<ShardSpec>&);
  void (*grad)(Tensor&, const Ctx&);
};

// One row of a block's plan: a parameter (undefined ones are skipped), its style, and for colwise /
// rowwise the dimension cut and the per-rank sizes along it.
struct Entry {
  Tensor* param;
  const Style* style;
  int64_t dim = 0;
  std::vector<int64_t> sizes = {};
  nn::Linear* lin = nullptr;  // a colwise / rowwise linear's weight: the layer (its float8 casts learn the cut)
};

// A float8 linear cut over the group: its scales spanning the cut dim take the group's amax (float8.h).
void float8_shard(nn::Linear* lin, bool out_cut, const comms::PG& pg) {
  if (!lin || !lin->float8) return;
  auto tp = std::make_shared<Fp8TensorParallel>();
  tp->out_sharded = out_cut;
  tp->in_sharded = !out_cut;
  tp->reduce_max = [pg](std::vector<float>& amax) { comms::all_reduce_amax(pg, amax); };
  lin->float8->tp = std::move(tp);
}

// identity forward, the gradient summed over `g` in float32 (after FSDP's pre-hook bound the weight)
void sum_grads(Tensor& w, const comms::PG& g) {
  if (w.defined()) w = comms::copy_to(w, g, comms::Wire::float32);
}

void keep_chunk(const Entry& e, const Ctx& c, std::vector<ShardSpec>& specs) {
  shard_param(*e.param, e.dim, e.sizes, c.rank, specs);
}

// colwise: split along the output features (W [out, in]'s rows; the bias with them); its output is this
// rank's heads / intermediate slice.
const Style colwise{"colwise", keep_chunk, nullptr};
// rowwise: split along the input features (columns); its output a partial sum the block's output
// collective reduces.
const Style rowwise{"rowwise", keep_chunk, nullptr};
// headwise: a per-head parameter ([n_heads, ...]: attention sinks, a relative-position bias table) split with
// the query heads.
const Style headwise{"headwise", keep_chunk, nullptr};
// summed: replicated, each rank's gradient a part of the whole (q/k norms, the router, a rowwise bias, the
// norms under sequence parallel): identity forward, the gradient summed over tp.
const Style summed{"summed", nullptr, [](Tensor& w, const Ctx& c) { sum_grads(w, c.tp); }};
// kv_head (n_kv_heads < tp): the one KV head this rank's query heads use, kept by the tp / n_kv ranks that
// share it (one of them writes it; each copy counted once in the gradient norm), its gradient summed over them.
const Style kv_head{
    "kv_head",
    [](const Entry& e, const Ctx& c, std::vector<ShardSpec>& specs) {
      keep_block(*e.param, 0, c.kv_start, c.kv_size, specs);
      ShardSpec& s = find_spec(specs, e.param);
      s.writer = s.writer && c.kv->rank() == 0;
      s.grad_norm_weight = 1.0 / (double)c.kv->size();
    },
    [](Tensor& w, const Ctx& c) { sum_grads(w, c.kv); }};

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
void linear(std::vector<Entry>& plan, nn::Linear* lin, const Style& style, const std::vector<int64_t>& sizes) {
  TITAN_CHECK(&style == &colwise || &style == &rowwise, "tensor parallel: linear() takes colwise or rowwise, not ",
              style.name, "; give the weight and bias their own rows in block_plan");
  if (&style == &colwise) {
    plan.push_back({&lin->weight, &colwise, 0, sizes, lin});
    plan.push_back({&lin->bias, &colwise, 0, sizes});
  } else {
    plan.push_back({&lin->weight, &rowwise, 1, sizes, lin});
    plan.push_back({&lin->bias, &summed});
  }
}

void mlp(std::vector<Entry>& plan, decoder::MLP* m, const std::vector<int64_t>& ffn) {
  linear(plan, m->gate_proj, colwise, ffn);
  linear(plan, m->up_proj, colwise, ffn);
  linear(plan, m->down_proj, rowwise, ffn);
}

// The plan of one decoder block: every parameter's style (the KV projections kv_head when n_kv_heads < tp).
std::vector<Entry> block_plan(decoder::DecoderLayer* layer, const decoder::Args& a, int64_t tp, bool kv_split,
                              bool sequence_parallel) {
  std::vector<Entry> plan;
  auto* at = layer->self_attn;
  const auto heads = even(a.n_heads, tp, "model.n_heads");
  const auto q_rows = times(heads, a.qk_dim());
  if (at->kv_a_proj) {
    // MLA: the latents' projections and norms replicated (each rank's heads add to their gradients), the
    // expansions split by heads, o rowwise by the heads' values
    for (nn::Linear* lin : {at->q_a_proj, at->kv_a_proj})
      if (lin) plan.insert(plan.end(), {{&lin->weight, &summed, 0, {}, lin}, {&lin->bias, &summed}});
    for (nn::Norm* n : {at->q_a_norm, at->kv_a_norm})
      if (n) plan.insert(plan.end(), {{&n->weight, &summed}, {&n->bias, &summed}});
    linear(plan, at->q_proj ? at->q_proj : at->q_b_proj, colwise, q_rows);
    linear(plan, at->kv_b_proj, colwise, times(heads, a.qk_nope_head_dim + a.v_head_dim));
    linear(plan, at->o_proj, rowwise, times(heads, a.v_head_dim));
  } else {
    linear(plan, at->q_proj, colwise, q_rows);  // this rank's query heads
    for (nn::Linear* lin : {at->k_proj, at->v_proj})
      if (kv_split) linear(plan, lin, colwise, times(even(a.n_kv_heads, tp, "model.n_kv_heads"), a.head_dim));
      else plan.insert(plan.end(), {{&lin->weight, &kv_head, 0, {}, lin}, {&lin->bias, &kv_head}});
    linear(plan, at->o_proj, rowwise, q_rows);
  }
  plan.push_back({&at->sinks, &headwise, 0, heads});
  if (at->variant.bias == nn::ScoreBias::relative) plan.push_back({&at->bias, &headwise, 0, heads});
  if (at->q_norm && at->qk_norm_projection) {  // OLMo 2: the norms span the projections, split with their heads
    TITAN_CHECK(kv_split, "config error: tensor parallel: model.qk_norm_scope projection normalizes k over all ",
                a.n_kv_heads, " KV heads, which parallelism.tensor_parallel_degree ", tp,
                " > model.n_kv_heads replicates rather than splits; use a degree that divides model.n_kv_heads (",
                a.n_kv_heads, ") or qk_norm_scope head");
    const auto kv_rows = times(even(a.n_kv_heads, tp, "model.n_kv_heads"), a.head_dim);
    for (auto [n, rows] : {std::pair{at->q_norm, q_rows}, std::pair{at->k_norm, kv_rows}}) {
      plan.push_back({&n->weight, &colwise, 0, rows});
      plan.push_back({&n->bias, &colwise, 0, rows});
    }
  } else if (at->q_norm) {  // each head's: replicated, every rank's heads add to the gradient
    for (nn::Norm* n : {at->q_norm, at->k_norm}) {
      plan.push_back({&n->weight, &summed});
      plan.push_back({&n->bias, &summed});
    }
  }
  if (layer->mlp) mlp(plan, layer->mlp, even(a.hidden_dim, tp, "model.hidden_dim"));
  if (auto* moe = layer->moe) {
    auto* ex = moe->experts;
    const auto ffn = even(a.moe_hidden_dim, tp, "model.moe_hidden_dim");
    // each expert's intermediate size split as a dense MLP's (gpt-oss's interleaved gate_up keeps its
    // (gate, up) column pairs together); the router replicated
    plan.push_back({&ex->gate_up_proj, &colwise, 2, times(ffn, 2)});
    plan.push_back({&ex->gate_up_proj_bias, &colwise, 1, times(ffn, 2)});
    for (Tensor* t : {&ex->gate_proj, &ex->up_proj}) plan.push_back({t, &colwise, 2, ffn});
    for (Tensor* t : {&ex->gate_proj_bias, &ex->up_proj_bias}) plan.push_back({t, &colwise, 1, ffn});
    plan.push_back({&ex->down_proj, &rowwise, 1, ffn});
    plan.push_back({&ex->down_proj_bias, &summed});
    plan.push_back({&moe->router->weight, &summed, 0, {}, moe->router});
    plan.push_back({&moe->router->bias, &summed});
    if (moe->shared_expert)  // moe_shared_expert_width experts wide
      mlp(plan, moe->shared_expert, even(a.shared_expert_hidden(), tp, "model.moe_shared_expert_width x model.moe_hidden_dim"));
  }
  if (sequence_parallel)  // the norms see this rank's part of the sequence
    for (nn::Norm* n : layer->norms()) {
      plan.push_back({&n->weight, &summed});
      plan.push_back({&n->bias, &summed});
    }
  return plan;
}

// TorchTitan's float8 tensor parallel (the tensorwise recipe: Float8ColwiseParallel, Float8RowwiseParallel,
// PrepareFloat8ModuleInput), under sequence parallel: a block's input travels on the FP8 wire (comms/functional.h)
// when every projection reading it is an FP8 column-parallel one casting its input tensorwise alike (q, k, v; gate,
// up: one cast of the rank's shard for all of them, half the bf16 bytes gathered), and its output gradient when its
// row-parallel projection casts that gradient tensorwise for both its GEMMs and has no bias (a bias gradient sums
// the gradient's own values, not its cast). Each GEMM then reads the values its own cast would have made.
struct Fp8Wires {
  std::optional<Fp8Cast> input, grad_output;
};
Fp8Wires fp8_wires(const std::vector<nn::Linear*>& readers, const nn::Linear* out) {
  std::vector<std::pair<const Fp8Cast*, const Fp8Cast*>> in;
  for (const nn::Linear* l : readers)
    in.push_back(l->float8 ? std::pair{&l->float8->input, &l->float8->input_for_grad_weight} : std::pair{nullptr, nullptr});
  Fp8Wires w{one_tensorwise(in), std::nullopt};
  if (out->float8 && !out->bias.defined())
    w.grad_output = one_tensorwise({{&out->float8->grad_output, &out->float8->grad_output_for_grad_weight}});
  return w;
}

// The collectives around an attention / MLP block. Inputs: replicated x -> copy_to (backward all-reduce);
// with sequence parallel the residual stream is split along the sequence and gathered here (backward
// reduce-scatter). Outputs: all-reduce, or reduce-scatter back to sequence shards. regather: the block's
// gathered input [B, S, H] (what its colwise projections keep for their weight gradients) is freed when
// its forward ends and gathered again from the rank's shard [B, S/tp, H] when its backward begins (not in
// a checkpoint's first run, which keeps nothing, nor in its recompute, whose backward follows at once).
// fp8: the FP8 wires of sequence parallel's gathers (not with regather, whose gathers stay bf16).
void block_collectives(nn::Module& m, const comms::PG& pg, bool sequence_parallel, bool regather,
                       const Fp8Wires& fp8 = {}) {
  auto block_out = [pg, sequence_parallel, g = fp8.grad_output](nn::Module&, const Tensor& y) {
    return sequence_parallel ? comms::reduce_scatter_op(y, 1, pg, {}, g) : comms::reduce_from(y, pg);
  };
  if (!regather) {
    m.register_forward_pre_hook([pg, sequence_parallel, f = fp8.input](nn::Module&, const Tensor& x) {
      return sequence_parallel ? comms::all_gather_op(x, 1, pg, {}, comms::ReduceOp::Sum, f) : comms::copy_to(x, pg);
    });
    m.register_forward_post_hook(block_out);
    return;
  }
  struct Gathered {
    Tensor local, full;
    DType wire;  // the forward's gather's (bf16 rounds: the re-gather moves the same bits)
  };
  auto open = std::make_shared<std::vector<Gathered>>();  // this module's forward in progress
  m.register_forward_pre_hook([pg, open](nn::Module&, const Tensor& x) {
    Tensor full = comms::all_gather_op(x, 1, pg);  // [B, S, H]
    if (autograd::grad_enabled() && !autograd::recomputing())
      open->push_back({x.detach(), full, comms::wire_dtype(x.dtype())});
    return full;
  });
  m.register_forward_post_hook([pg, open, block_out](nn::Module& mod, const Tensor& y) {
    Tensor out = block_out(mod, y);
    if (open->empty()) return out;
    Gathered g = open->back();
    open->pop_back();
    // under bf16 autocast the projections kept the gathered input's bf16 pack, not the input: nothing to free
    // and gather again (it is freed when the forward lets it go; autocast keeps its cast as PyTorch's does)
    if (has_bf16_pack(g.full)) return out;
    g.full.release_storage();
    return autograd::custom_op(
        "SequenceParallelRegather", {out}, [](const std::vector<Tensor>& in) { return std::vector<Tensor>{in[0]}; },
        [pg, g](const std::vector<Tensor>& grad) {
          NoGradGuard ng;
          g.full.adopt_storage(pg->all_gather(g.local, 1, {}, g.wire));  // [B, S, H], bit-identical to the forward's
          return std::vector<Tensor>{grad[0]};
        })[0];
  });
}

// Async tensor parallel (sequence parallel): the block's input shard [B, S/tp, H] is gathered round the ring while its
// column-parallel projections `col` multiply each shard as it arrives (comms::all_gather_linear: their outputs made
// in the block's pre-hook, taken by the projections when the block's forward calls them), and its row-parallel
// projection's partial products are reduce-scattered round the ring as they are made (linear_reduce_scatter): the
// block's output is its sequence shard, no collective after it. Its bias (whole on every rank) is added to the
// shard: once per position, as the unfused row-parallel layer adds it once to the sum.
void fused_block_collectives(nn::Module& m, const std::vector<nn::Linear*>& col, nn::Linear* row, const comms::PG& p2p,
                             const char* block) {
  struct Made {  // the projections' outputs of the block's forward in progress
    const TensorImpl* input = nullptr;
    std::vector<Tensor> ys;
  };
  auto made = std::make_shared<Made>();
  m.register_forward_pre_hook([col, made, p2p](nn::Module&, const Tensor& x) {
    std::vector<Tensor> ws, bs;
    std::vector<const Float8Casts*> f8;
    for (nn::Linear* l : col) {
      ws.push_back(l->weight);  // as FSDP's pre-hook bound them
      bs.push_back(l->bias);
      f8.push_back(l->float8 ? &*l->float8 : nullptr);  // FP8 (its cut set by float8_shard)
    }
    std::vector<Tensor> out = comms::all_gather_linear(x, ws, bs, p2p, f8);  // {x [B, S, H], y_i [B, S, N_i]}
    made->input = out[0].impl().get();
    made->ys.assign(out.begin() + 1, out.end());
    return out[0];
  });
  for (size_t i = 0; i < col.size(); ++i)
    col[i]->compute = [made, i, block](const nn::Linear&, const Tensor& x) {
      TITAN_CHECK(made->input == x.impl().get() && i < made->ys.size() && made->ys[i].defined(),
                  "async tensor parallel: a column-parallel projection of the ", block, " ran on an input other than "
                  "the block's gathered one, or twice; its output is made with the gather (parallel/tensor_parallel.cpp)");
      Tensor y = made->ys[i];
      made->ys[i] = Tensor();
      return y;
    };
  row->compute = [p2p](const nn::Linear& l, const Tensor& x) {
    Tensor y = comms::linear_reduce_scatter(x, l.weight, p2p, l.float8 ? &*l.float8 : nullptr);  // [B, S/tp, H]
    return l.bias.defined() ? add(y, l.bias) : y;
  };
  m.register_forward_post_hook([made](nn::Module&, const Tensor& y) {
    made->input = nullptr;
    made->ys.clear();
    return y;
  });
}
}  // namespace

TensorParallel::TensorParallel(decoder::Decoder& model, comms::DeviceMesh& mesh, const TensorParallelOptions& opt,
                               const Ownership& own)
    : model_(model), mesh_(mesh), opt_(opt), own_(own) {}

namespace {
// vocab: the embedding's rows and the head's (or the tied embedding as head) over the vocabulary; each rank
// looks up the ids it owns (the rows summed over tp); the logits stay split into the loss (loss parallel:
// max and sum-exp all-reduced), or are gathered.
void vocab_parallel(decoder::Decoder& model, const Ownership& own, bool loss_parallel, const comms::PG& pg,
                    std::vector<ShardSpec>& specs) {
  const int r = pg->rank();
  const std::vector<int64_t> vocab = comms::chunk_sizes(model.args().vocab_size, pg->size());
  int64_t vocab_start = 0;
  for (int q = 0; q < r; ++q) vocab_start += vocab[q];
  if (own.embed) {
    shard_param(model.model->embed_tokens->weight, 0, vocab, r, specs);
    model.model->embed_tokens->lookup = [pg, vocab_start](const Tensor& w, const Tensor& ids) {
      return comms::vocab_parallel_embedding(w, ids, vocab_start, pg);
    };
  }
  if (model.lm_head && own.head) {
    shard_param(model.lm_head->weight, 0, vocab, r, specs);
    float8_shard(model.lm_head, /*out_cut=*/true, pg);  // the vocabulary: the head's output features
  }
  if (loss_parallel)
    model.sharded_loss = [pg, vocab_start](const Tensor& logits, const Tensor& targets) {
      return comms::vocab_parallel_cross_entropy(logits, targets, vocab_start, pg);
    };
  else  // logits gathered over the vocab: B*S*V*(tp-1)/tp floats received per rank, [B, S, V] on every rank
    model.sharded_loss = [pg, vocab](const Tensor& logits, const Tensor& targets) {
      return cross_entropy(comms::gather_from(logits, -1, pg, vocab), targets);
    };
}
}  // namespace

void TensorParallel::cut(std::vector<ShardSpec>& specs) {
  const int64_t tp = mesh_.tp->size();
  const int r = mesh_.tp->rank();
  const auto& a = model_.args();
  // KV heads: split when there are at least tp of them; otherwise each rank keeps the one head its query
  // heads use (replicated over the tp / n_kv ranks that share it, whose gradients are summed over them)
  if (a.n_kv_heads < tp) {
    TITAN_CHECK(tp % a.n_kv_heads == 0, "tensor parallel: tensor_parallel_degree (", tp,
                ") must be a multiple of n_kv_heads (", a.n_kv_heads, ") when it exceeds it");
    const int share = (int)(tp / a.n_kv_heads);  // tp ranks holding each KV head
    kv_head_ = r / share;
    kv_group_ = mesh_.tp->split([share](int t) { return t / share; }, [](int t) { return t; },
                                "tp_kv" + std::to_string(kv_head_));
  }
  const Ctx ctx{r, mesh_.tp, kv_group_, kv_head_ * a.head_dim, a.head_dim};
  auto& layers = model_.model->layers->layers;
  if (opt_.async) {  // every layer, owned or not: every stage refuses alike
    TITAN_CHECK(opt_.sequence_parallel && !opt_.regather, "config error: parallelism.enable_async_tensor_parallel "
                "fuses sequence parallel's collectives; it needs parallelism.enable_sequence_parallel: true without "
                "parallelism.sequence_parallel_regather");
    for (size_t li = 0; li < layers.size(); ++li)
      TITAN_CHECK(!layers[li]->moe && !layers[li]->self_attn->kv_a_proj, "config error: "
                  "parallelism.enable_async_tensor_parallel fuses a block's gather with the projections that read its "
                  "input; layer ", li, " has ", layers[li]->moe
                  ? "a mixture of experts (its router and experts read the gathered input)"
                  : "multi-head latent attention (its latent projections read the gathered input)",
                  ", which it does not fuse; set parallelism.enable_async_tensor_parallel: false");
    p2p_ = mesh_.tp->split([](int) { return 0; }, [](int t) { return t; }, "tp_p2p");  // collective over tp
  }
  for (size_t li = 0; li < layers.size(); ++li) {
    if (!own_.layer[li]) continue;  // another pipeline stage's
    decoder::DecoderLayer* layer = layers[li];
    for (const Entry& e : block_plan(layer, a, tp, !kv_group_, opt_.sequence_parallel)) {
      // a replicated linear whose gradient is summed over ranks (each rank's dy a part of the whole) cannot cast
      // its dy as one rank does: FP8 of a sum is not the sum of FP8s
      TITAN_CHECK(!e.lin || !e.lin->float8 || e.style == &colwise || e.style == &rowwise,
                  "config error: model.converters float8 with parallelism.tensor_parallel_degree ", tp, ": layer ",
                  li, "'s ", e.lin == layer->self_attn->k_proj ? "k_proj" : e.lin == layer->self_attn->v_proj ? "v_proj"
                  : layer->moe && e.lin == layer->moe->router ? "router" : "latent projection",
                  " is replicated over the tensor-parallel ranks with its gradient summed over them (",
                  e.style->name, "), which FP8 casts cannot split; add it to float8.filter_fqns (e.g. k_proj, v_proj, "
                  "gate, router, q_a_proj, kv_a_proj_with_mqa)", e.style == &kv_head ? " or use a tensor_parallel_degree "
                  "that divides model.n_kv_heads" : "");
      if (e.param->defined() && e.style->cut) {
        e.style->cut(e, ctx, specs);
        if (e.lin && (e.style == &colwise || e.style == &rowwise)) float8_shard(e.lin, e.style == &colwise, mesh_.tp);
      }
    }
    // what the plan's rows imply for the block's forward
    auto* at = layer->self_attn;
    at->o_proj->bias_scale = r == 0 ? 1.0 : 0.0;  // rowwise: the bias added once
    if (at->qk_norm_projection) at->heads_group = mesh_.tp;  // the QK-norm's statistics over all heads
    if (at->variant.bias == nn::ScoreBias::alibi) {  // ALiBi slopes: a constant, sliced to this rank's heads
      NoGradGuard ng;
      const int64_t h = a.n_heads / tp;
      at->bias = slice(at->bias, 0, r * h, (r + 1) * h).clone();
    }
    if (auto* moe = layer->moe) {
      moe->experts->down_bias_scale = r == 0 ? 1.0 : 0.0;  // rowwise: the bias added once
      moe->aux_loss_scale = r == 0 ? 1.0 : 0.0;  // every tp rank routes alike: count the auxiliary loss once
    }
  }
  vocab_parallel(model_, own_, opt_.loss_parallel, mesh_.tp, specs);
}

void TensorParallel::hooks() {
  comms::PG pg = mesh_.tp;
  const auto& a = model_.args();
  const int64_t tp = pg->size();
  const bool sp = opt_.sequence_parallel, kv_split = !kv_group_;
  const Ctx ctx{pg->rank(), pg, kv_group_, kv_head_ * a.head_dim, a.head_dim};
  auto& layers = model_.model->layers->layers;
  for (size_t i = 0; i < layers.size(); ++i) {
    if (!own_.layer[i]) continue;
    decoder::DecoderLayer* layer = layers[i];
    auto* at = layer->self_attn;
    // runs after FSDP's pre-hook of the layer has bound the weights
    layer->register_forward_pre_hook([=](nn::Module&, const Tensor& x) {
      for (const Entry& e : block_plan(layer, a, tp, kv_split, sp))
        if (e.style->grad) e.style->grad(*e.param, ctx);
      return x;
    });
    if (opt_.async) {
      fused_block_collectives(*at, {at->q_proj, at->k_proj, at->v_proj}, at->o_proj, p2p_, "attention");
      fused_block_collectives(*layer->mlp, {layer->mlp->gate_proj, layer->mlp->up_proj}, layer->mlp->down_proj,
                              p2p_, "MLP");
    } else if (sp && !opt_.regather) {
      const Fp8Wires none;
      block_collectives(*at, pg, sp, false,
                        at->kv_a_proj ? none : fp8_wires({at->q_proj, at->k_proj, at->v_proj}, at->o_proj));
      std::vector<nn::Linear*> mlp_in;  // a dense MLP's input projections (an MoE's router and experts read it too)
      if (auto* mlp = layer->mlp)
        for (nn::Linear* l : {mlp->gate_proj, mlp->up_proj})
          if (l) mlp_in.push_back(l);
      block_collectives(*layer->ffn(), pg, sp, false, layer->mlp ? fp8_wires(mlp_in, layer->mlp->down_proj) : none);
    } else {
      block_collectives(*at, pg, sp, opt_.regather);
      block_collectives(*layer->ffn(), pg, sp, opt_.regather);
    }
  }
  decoder::Decoder& model = model_;
  // the residual stream leaves the embedding sequence-sharded, on whichever stage holds it (a pipeline's edge
  // stage may hold the embedding alone: what it sends is the shard)
  if (sp && own_.embed)
    model.model->embed_tokens->register_forward_post_hook(
        [pg](nn::Module&, const Tensor& y) { return comms::split_to(y, 1, pg); });
  if (sp && own_.head)  // the final norm sees this rank's part of the sequence: summed
    model.register_forward_pre_hook([&model, ctx](nn::Module&, const Tensor& ids) {
      summed.grad(model.model->norm->weight, ctx);  // after FSDP's root pre-hook bound it
      summed.grad(model.model->norm->bias, ctx);
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
