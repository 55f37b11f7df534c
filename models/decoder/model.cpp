#include "models/decoder/model.h"

#include <cmath>

#include "comms/functional.h"
#include "comms/moe_dispatch.h"
#include "models/decoder/rope.h"
#include "models/hf_init.h"
#include "models/moe_balance.h"
#include "models/moe_routing.h"
#include "src/autograd/grad_mode.h"
#include "src/ops/autocast.h"
#include "src/ops/ops.h"

namespace titan::decoder {

namespace {
constexpr double kOaiAlpha = 1.702;  // gpt-oss's gate * sigmoid(1.702 gate)
}  // namespace

Tensor gated_activation(const Tensor& gate, const Tensor& up, Activation act, double limit) {
  if (act == Activation::oai_swiglu) {  // the fused op on the pairs interleaved: [.., I, 2] -> [.., 2I]
    Shape s = gate.shape();
    s.back() *= 2;
    return clamped_swiglu(concat({gate.unsqueeze(-1), up.unsqueeze(-1)}, -1).reshape(s), kOaiAlpha, limit);
  }
  Tensor g = gate, u = up;
  if (limit > 0) {
    g = clamp(g, -INFINITY, limit);
    u = clamp(u, -limit, limit);
  }
  // Under bf16 autocast the activation of a bf16 gate (a GEMM's output) is a bf16 tensor, as PyTorch's silu /
  // gelu return one (computed in float32, rounded; its gradient rounded too); the product is rounded where the down
  // projection reads it, as PyTorch's bf16 mul rounds it: autocast's numerics of this block, rounding for rounding.
  if (act == Activation::gelu_pytorch_tanh) {  // 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))), PyTorch's one op
    Tensor inner = mul(add(g, mul(mul(mul(g, g), g), 0.044715)), std::sqrt(2.0 / M_PI));
    return mul(autocast_operand(mul(mul(g, 0.5), add(tanh(inner), 1.0))), u);
  }
  return mul(act == Activation::gelu ? gelu(g, /*bf16_out=*/true) : silu(g, /*bf16_out=*/true), u);
}

// ---- attention ----

Attention::Attention(const Args& a, int64_t layer)
    : rope_interleave(a.rope_interleave),
      nope(a.nope_layer(layer)),
      chunk(a.layer_chunk(layer)),
      head_dim(a.qk_dim()),
      window(a.layer_window[layer]),
      variant(a.attention()) {
  local_rope = window > 0 && a.rope_local_theta > 0;
  if (a.qk_l2_norm && !nope) l2_norm_eps = a.norm_eps;
  tuned_temperature = nope && a.nope_attn_scale > 0;
  if (a.attention_scale() != 1.0 / std::sqrt((double)a.qk_dim())) score_scale = a.attention_scale();
  const bool b = a.attn_proj_bias;
  if (a.mla()) {  // HF's registration order (DeepseekV3Attention); attention_bias on q_a, kv_a and o only
    nope_dim = a.qk_nope_head_dim, rope_dim = a.qk_rope_head_dim, v_dim = a.v_head_dim, kv_rank = a.kv_lora_rank;
    const int64_t qk = a.n_heads * a.qk_dim();
    if (a.q_lora_rank > 0) {
      q_a_proj = &register_module("q_a_proj", std::make_unique<nn::Linear>(a.dim, a.q_lora_rank, b));
      q_a_norm = &register_module("q_a_layernorm", std::make_unique<nn::Norm>(a.q_lora_rank, a.norm_type, kLatentNormEps,
                                                                             a.norm_weight_offset()));
      q_b_proj = &register_module("q_b_proj", std::make_unique<nn::Linear>(a.q_lora_rank, qk, false));
    } else {
      q_proj = &register_module("q_proj", std::make_unique<nn::Linear>(a.dim, qk, false));
    }
    kv_a_proj = &register_module("kv_a_proj_with_mqa", std::make_unique<nn::Linear>(a.dim, kv_rank + rope_dim, b));
    kv_a_norm = &register_module("kv_a_layernorm", std::make_unique<nn::Norm>(kv_rank, a.norm_type, kLatentNormEps,
                                                                             a.norm_weight_offset()));
    kv_b_proj = &register_module("kv_b_proj", std::make_unique<nn::Linear>(kv_rank, a.n_heads * (nope_dim + v_dim), false));
    o_proj = &register_module("o_proj", std::make_unique<nn::Linear>(a.n_heads * v_dim, a.dim, b));
  } else {
    q_proj = &register_module("q_proj", std::make_unique<nn::Linear>(a.dim, a.n_heads * a.head_dim, b));
    k_proj = &register_module("k_proj", std::make_unique<nn::Linear>(a.dim, a.n_kv_heads * a.head_dim, b));
    v_proj = &register_module("v_proj", std::make_unique<nn::Linear>(a.dim, a.n_kv_heads * a.head_dim, b));
    o_proj = &register_module("o_proj", std::make_unique<nn::Linear>(a.n_heads * a.head_dim, a.dim, b));
  }
  if (a.qk_norm) {
    qk_norm_projection = a.qk_norm_scope == QkNormScope::projection;
    const int64_t qw = qk_norm_projection ? a.n_heads * a.head_dim : a.head_dim;
    const int64_t kw = qk_norm_projection ? a.n_kv_heads * a.head_dim : a.head_dim;
    const double off = a.norm_weight_offset();
    q_norm = &register_module("q_norm", std::make_unique<nn::Norm>(qw, a.norm_type, a.norm_eps, off));
    k_norm = &register_module("k_norm", std::make_unique<nn::Norm>(kw, a.norm_type, a.norm_eps, off));
  }
  if (a.attn_sinks) register_parameter("sinks", sinks, nn::new_parameter({a.n_heads}));
  bias = nn::attention_bias_tensor(variant, a.n_heads);
  if (variant.bias == nn::ScoreBias::relative) register_parameter("relative_bias", bias, bias, nn::ParamInit::zeros);
}

namespace {
// A norm over the last dim of x [..., W_local] whose full width is split over `group` (a tensor-parallel rank's
// heads): the statistics are sums over the group, each an all-reduce whose backward is an all-reduce too
// (reduce_from(copy_to(.)): every rank's normalized shard depends on every rank's part). [..., 1] statistics
// only: no rank gathers the projection. Null group: the norm's own op.
Tensor split_width_norm(const nn::Norm& n, const Tensor& x, const comms::PG& group) {
  if (!group || group->size() == 1) return n.forward(x);
  const int64_t d = x.dim() - 1;
  const double width = (double)x.size(d) * group->size();
  auto group_sum = [&](const Tensor& t) {  // statistics: float32 on the wire in any precision
    return comms::reduce_from(comms::copy_to(sum(t, {d}, true), group, comms::Wire::float32), group,
                              comms::Wire::float32);
  };
  Tensor c = x;
  if (n.layernorm) c = sub(x, mul(group_sum(x), 1.0 / width));  // centred on the full width's mean
  Tensor y = mul(c, rsqrt(add(mul(group_sum(mul(c, c)), 1.0 / width), n.eps)));  // [..., W_local]
  y = mul(y, n.scale());
  return n.layernorm ? add(y, n.bias) : y;
}
}  // namespace

namespace {
// x [..., D] with its dims in adjacent pairs (0, 1), (2, 3), ... -> [evens | odds], so RoPE's halves rotate the
// pairs (HF's apply_rotary_pos_emb_interleave: DeepSeek's weights)
Tensor deinterleave(const Tensor& x) {  // [B, S, H, D] -> [B, S, H, D/2, 2] -> [B, S, H, 2, D/2] -> [B, S, H, D]
  const Shape s = x.shape();
  const int64_t D = s[3];
  return transpose(x.reshape({s[0], s[1], s[2], D / 2, 2}), 3, 4).contiguous().reshape(s);
}
}  // namespace

Tensor Attention::rotary(const Tensor& x, const nn::AttentionInputs& in) const {
  if (nope) return x;  // iRoPE's global layers: no position in q or k
  const Tensor& cos = local_rope ? in.cos_local : in.cos;
  const Tensor& sin = local_rope ? in.sin_local : in.sin;
  return rope(rope_interleave ? deinterleave(x) : x, cos, sin);
}

Tensor Attention::forward_mla(const Tensor& x, const nn::AttentionInputs& in) const {
  const int64_t B = x.size(0), S = x.size(1);
  // heads from the projection width, so a tensor-parallel shard runs unchanged
  const int64_t h = kv_b_proj->weight.size(0) / (nope_dim + v_dim);
  Tensor q = q_proj ? q_proj->forward(x) : q_b_proj->forward(q_a_norm->forward(q_a_proj->forward(x)));
  q = q.reshape({B, S, h, nope_dim + rope_dim});                          // [B, S, H, Dn + Dr]
  Tensor ckv = kv_a_proj->forward(x);                                     // [B, S, R + Dr]
  Tensor kv = kv_b_proj->forward(kv_a_norm->forward(ckv.slice(2, 0, kv_rank)))
                  .reshape({B, S, h, nope_dim + v_dim});                  // [B, S, H, Dn + Dv]
  Tensor q_rot = rotary(q.slice(3, nope_dim, nope_dim + rope_dim), in);  // [B, S, H, Dr]
  Tensor k_rot = rotary(ckv.slice(2, kv_rank, kv_rank + rope_dim).reshape({B, S, 1, rope_dim}), in);  // [B, S, 1, Dr]
  k_rot = broadcast_to(k_rot, {B, S, h, rope_dim});                       // one rotated key part for every head
  q = concat({q.slice(3, 0, nope_dim), q_rot}, 3);                       // [B, S, H, Dn + Dr]
  if (tuned_temperature) q = mul(q, in.nope_q_scale);                     // [S, 1, 1] broadcast
  Tensor k = concat({kv.slice(3, 0, nope_dim), k_rot}, 3);               // [B, S, H, Dn + Dr]
  Tensor v = kv.slice(3, nope_dim, nope_dim + v_dim);                    // [B, S, H, Dv]
  Tensor o = nn::variant_attention(q, k, v, sinks, variant, window, in.doc_ids, bias, in.attend, score_scale, chunk,
                                       in.masks);
  return o_proj->forward(o.reshape({B, S, h * v_dim}));                  // [B, S, H, Dv] -> [B, S, dim]
}

Tensor Attention::forward(const Tensor& x, const nn::AttentionInputs& in) const {
  if (kv_a_proj) return forward_mla(x, in);
  const int64_t B = x.size(0), S = x.size(1);
  // heads from the projection width, so a tensor-parallel shard runs unchanged
  const int64_t hq = q_proj->weight.size(0) / head_dim, hkv = k_proj->weight.size(0) / head_dim;
  Tensor q = q_proj->forward(x);  // [B, S, Hq * D]
  Tensor k = k_proj->forward(x);  // [B, S, Hkv * D]
  if (q_norm && qk_norm_projection) {  // OLMo 2: over the whole projections
    q = split_width_norm(*q_norm, q, heads_group);
    k = split_width_norm(*k_norm, k, heads_group);
  }
  q = q.reshape({B, S, hq, head_dim});                            // [B, S, Hq, D]
  k = k.reshape({B, S, hkv, head_dim});                           // [B, S, Hkv, D]
  Tensor v = v_proj->forward(x).reshape({B, S, hkv, head_dim});  // [B, S, Hkv, D]
  if (q_norm && !qk_norm_projection) {  // each head's
    q = q_norm->forward(q);
    k = k_norm->forward(k);
  }
  q = rotary(q, in);
  k = rotary(k, in);
  if (l2_norm_eps > 0) {  // Llama 4's RoPE layers: each head's q and k over their root mean square, no weight
    auto l2 = [&](const Tensor& t) { return mul(t, rsqrt(add(mean(mul(t, t), {3}, true), l2_norm_eps))); };
    q = l2(q);
    k = l2(k);
  }
  if (tuned_temperature) q = mul(q, in.nope_q_scale);  // [B, S, Hq, D] x [S, 1, 1]
  // [B, S, Hq, D]; context parallel: S is this rank's chunks, in.attend the attention over the whole sequence
  Tensor o = nn::variant_attention(q, k, v, sinks, variant, window, in.doc_ids, bias, in.attend, score_scale, chunk,
                                       in.masks);
  return o_proj->forward(o.reshape({B, S, hq * head_dim}));
}

// ---- dense MLP ----

MLP::MLP(const Args& a, int64_t hidden) : activation(a.activation), limit(a.swiglu_limit) {
  gate_proj = &register_module("gate_proj", std::make_unique<nn::Linear>(a.dim, hidden, false));
  up_proj = &register_module("up_proj", std::make_unique<nn::Linear>(a.dim, hidden, false));
  down_proj = &register_module("down_proj", std::make_unique<nn::Linear>(hidden, a.dim, false));
}

Tensor MLP::forward(const Tensor& x) const {
  return down_proj->forward(gated_activation(gate_proj->forward(x), up_proj->forward(x), activation, limit));
}

// ---- experts ----

Experts::Experts(const Args& a) : fused(a.fused_experts()), activation(a.activation), limit(a.swiglu_limit) {
  const int64_t E = a.moe_num_experts, I = a.moe_hidden_dim, H = a.dim;
  const bool b = a.moe_expert_bias;
  if (fused) {
    register_parameter("gate_up_proj", gate_up_proj, nn::new_parameter({E, H, 2 * I}));
    if (b) register_parameter("gate_up_proj_bias", gate_up_proj_bias, nn::new_parameter({E, 2 * I}), nn::ParamInit::zeros);
  } else {
    register_parameter("gate_proj", gate_proj, nn::new_parameter({E, H, I}));
    if (b) register_parameter("gate_proj_bias", gate_proj_bias, nn::new_parameter({E, I}), nn::ParamInit::zeros);
    register_parameter("up_proj", up_proj, nn::new_parameter({E, H, I}));
    if (b) register_parameter("up_proj_bias", up_proj_bias, nn::new_parameter({E, I}), nn::ParamInit::zeros);
  }
  register_parameter("down_proj", down_proj, nn::new_parameter({E, I, H}));
  if (b) register_parameter("down_proj_bias", down_proj_bias, nn::new_parameter({E, H}), nn::ParamInit::zeros);
}

Tensor Experts::forward(const Tensor& x, const std::vector<int64_t>& counts) const {
  const int64_t R = x.size(0), I = down_proj.size(1);
  auto grouped_linear = [&](const Tensor& in, const Tensor& w, const Tensor& b, const std::vector<int64_t>& c) {
    return float8 ? float8_grouped_linear(in, w, b, c, *float8) : titan::grouped_linear(in, w, b, c);
  };
  Tensor h;  // [R, I]
  if (fused && activation == Activation::oai_swiglu) {  // gpt-oss: one pass on the interleaved projection
    h = clamped_swiglu(grouped_linear(x, gate_up_proj, gate_up_proj_bias, counts), kOaiAlpha, limit);
  } else if (fused) {
    Tensor gu = grouped_linear(x, gate_up_proj, gate_up_proj_bias, counts).reshape({R, I, 2});  // interleaved
    h = gated_activation(gu.slice(2, 0, 1).reshape({R, I}), gu.slice(2, 1, 2).reshape({R, I}), activation, limit);
  } else {
    h = gated_activation(grouped_linear(x, gate_proj, gate_proj_bias, counts),
                         grouped_linear(x, up_proj, up_proj_bias, counts), activation, limit);
  }
  if (!down_proj_bias.defined() || down_bias_scale == 1.0) return grouped_linear(h, down_proj, down_proj_bias, counts);
  return grouped_linear(h, down_proj, mul(down_proj_bias, down_bias_scale), counts);
}

std::vector<const Tensor*> Experts::bf16_operands() const {  // FP8 experts too: their casts read bf16 values
  std::vector<const Tensor*> w;
  for (const Tensor* t : {&gate_up_proj, &gate_proj, &up_proj, &down_proj})
    if (t->defined()) w.push_back(t);
  return w;
}

// ---- MoE ----

MoE::MoE(const Args& a, int64_t moe_layer_)
    : moe_layer(moe_layer_),
      num_experts(a.moe_num_experts),
      top_k(a.moe_top_k),
      sigmoid_scores(a.moe_score_func == RouterScore::sigmoid),
      renormalize(a.moe_renormalize),
      aux_loss_coeff(a.moe_aux_loss_coeff) {
  n_group = a.moe_n_group, topk_group = a.moe_topk_group, routed_scale = a.moe_routed_scale;
  score_before_experts = a.moe_score_before_experts;
  route_bias_state = a.moe_route_bias;
  router = &register_module(a.fused_experts() ? "router" : "gate",
                            std::make_unique<nn::Linear>(a.dim, a.moe_num_experts, a.moe_router_bias));
  router->float32 = true;  // the router in float32 under bf16 autocast, as TorchTitan's MoE
  experts = &register_module("experts", std::make_unique<Experts>(a));
  if (a.moe_shared_expert)
    shared_expert = &register_module(a.name == Family::deepseek_v3 ? "shared_experts" : "shared_expert",
                                     std::make_unique<MLP>(a, a.shared_expert_hidden()));
  expert_bias = zeros({a.moe_num_experts});
}

Tensor MoE::forward(const Tensor& x) const {
  const int64_t B = x.size(0), S = x.size(1), H = x.size(2);
  Tensor h = x.reshape({B * S, H});
  Tensor logits = router->forward(h);  // [T, E] (float32: Linear::float32)
  const bool biased = !expert_bias.is_meta() && std::any_of(expert_bias.data<float>(),
                                                              expert_bias.data<float>() + num_experts,
                                                              [](float b) { return b != 0.0f; });
  Tensor scores;  // [T, E]
  // the scores (a group ranks by its best scores, not logits)
  if (sigmoid_scores || !renormalize || biased || n_group > 1) scores = sigmoid_scores ? sigmoid(logits) : softmax(logits, -1);
  Tensor idx;     // [T, k]
  {
    NoGradGuard ng;  // the choice (biased when balancing) carries no gradient
    // sigmoid scores without selection biases or groups rank as their logits do: chosen on the logits, as HF's
    // Llama 4 (a float32 sigmoid saturates at 1 above ~17, where the scores would tie); a router that carries
    // selection biases (DeepSeek-V3's, zero or not) chooses on the scores, as HF's
    const bool by_logits = !scores.defined() || (sigmoid_scores && !route_bias_state && n_group == 1);
    Tensor choose = by_logits ? logits.detach() : scores.detach();
    if (biased) choose = add(choose, expert_bias);
    if (n_group > 1) choose = moe::limit_to_groups(choose, n_group, topk_group);
    idx = topk(choose, top_k).second;
  }
  Tensor w;  // [T, k]
  if (!sigmoid_scores && renormalize) w = softmax(gather(logits, 1, idx), -1);  // = softmax, top-k, renormalized
  else {
    w = gather(scores, 1, idx);
    if (renormalize) w = div(w, sum(w, {1}, true));
  }
  if (routed_scale != 1.0) w = mul(w, routed_scale);
  auto d = ep.hierarchical() ? comms::dispatch_by_host(h, idx, w, num_experts, ep, score_before_experts, moe_layer,
                                                       n_group, topk_group)
                             : comms::dispatch(h, idx, w, num_experts, ep.group, score_before_experts, moe_layer);
  last_routed = moe::count_routed(idx, num_experts);
  last_aux_loss = aux_loss_coeff > 0 ? moe::switch_aux_loss(softmax(logits, -1), last_routed, aux_loss_coeff * aux_loss_scale) : Tensor();
  Tensor y = comms::combine(experts->forward(d.expert_input, d.tokens_per_local_expert), *d.handle);  // [T, H]
  if (shared_expert) y = add(y, shared_expert->forward(h));
  return y.reshape({B, S, H});
}

// ---- blocks ----

DecoderLayer::DecoderLayer(const Args& a, int64_t layer) {
  self_attn = &register_module("self_attn", std::make_unique<Attention>(a, layer));
  if (a.is_moe_layer(layer)) moe = &register_module("mlp", std::make_unique<MoE>(a, a.moe_layers_before(layer)));
  else mlp = &register_module("mlp", std::make_unique<MLP>(a, a.hidden_dim));
  auto norm = [&](const char* hf_name) {
    return &register_module(hf_name, std::make_unique<nn::Norm>(a.dim, a.norm_type, a.norm_eps, a.norm_weight_offset()));
  };
  // registered in HF's order (the parameters' order: init, checkpoints)
  const bool before = a.norm_placement != NormPlacement::post, after = a.norm_placement != NormPlacement::pre;
  if (before) attn_in = norm("input_layernorm");
  if (!after) ffn_in = norm("post_attention_layernorm");  // pre: Llama's name for the MLP's input norm
  if (after) attn_out = norm("post_attention_layernorm");
  if (before && after) ffn_in = norm("pre_feedforward_layernorm");
  if (after) ffn_out = norm("post_feedforward_layernorm");
}

std::vector<nn::Norm*> DecoderLayer::norms() const {
  std::vector<nn::Norm*> out;
  for (nn::Norm* n : {attn_in, attn_out, ffn_in, ffn_out})
    if (n) out.push_back(n);
  return out;
}

Tensor DecoderLayer::forward(const Tensor& x, const nn::AttentionInputs& in) const {
  auto maybe = [](const nn::Norm* n, const Tensor& t) { return n ? n->forward(t) : t; };
  // [B, S, dim] (sequence parallel: this rank's S / tp; the sublayers' hooks gather and scatter it)
  Tensor a = self_attn->call(maybe(attn_in, x), [&](const Tensor& t) { return self_attn->forward(t, in); });
  Tensor h = add(x, maybe(attn_out, a));
  nn::Module* f = ffn();
  Tensor m = f->call(maybe(ffn_in, h), [&](const Tensor& t) { return moe ? moe->forward(t) : mlp->forward(t); });
  return add(h, maybe(ffn_out, m));
}

Backbone::Backbone(const Args& a) {
  embed_tokens = &register_module("embed_tokens", std::make_unique<nn::Embedding>(a.vocab_size, a.dim));
  layers = &register_module("layers", std::make_unique<LayerList>());
  for (int64_t i = 0; i < a.n_layers; ++i) layers->add(std::make_unique<DecoderLayer>(a, i));
  norm = &register_module("norm", std::make_unique<nn::Norm>(a.dim, a.norm_type, a.norm_eps, a.norm_weight_offset()));
}

Decoder::Decoder(const Args& a) : args_(Args(a).resolve()) {
  model = &register_module("model", std::make_unique<Backbone>(args_));
  if (!args_.enable_weight_tying)
    lm_head = &register_module("lm_head", std::make_unique<nn::Linear>(args_.dim, args_.vocab_size, false));
}

Tensor Decoder::loss(const Tensor& logits, const Tensor& targets) const {
  TITAN_CHECK(logits.dim() == 3 && targets.dim() == 2 && logits.size(0) == targets.size(0) &&
                  logits.size(1) == targets.size(1),
              "Decoder::loss: logits must be [B, S, vocab] and targets [B, S], got ", shape_str(logits.shape()),
              " and ", shape_str(targets.shape()));
  Tensor l2 = logits.reshape({-1, logits.size(2)}), t1 = loss_targets(targets).reshape({-1});
  return sharded_loss ? sharded_loss(l2, t1) : cross_entropy(l2, t1);
}

Tensor ignore_prefix_targets(const Tensor& targets, int64_t prefix, const std::vector<int64_t>& positions) {
  if (prefix <= 1 || targets.is_meta()) return targets;
  NoGradGuard ng;
  Tensor t = targets.contiguous().clone();
  const int64_t B = t.size(0), S = t.size(1);
  TITAN_CHECK(positions.empty() || (int64_t)positions.size() == S, "ignore_prefix_targets: ", positions.size(),
              " positions for targets ", shape_str(t.shape()));
  int64_t* p = t.data<int64_t>();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < S; ++i)
      if ((positions.empty() ? i : positions[(size_t)i]) < prefix - 1) p[b * S + i] = -100;
  return t;
}

std::vector<nn::Module*> Decoder::blocks() {
  return std::vector<nn::Module*>(model->layers->layers.begin(), model->layers->layers.end());
}

Tensor Decoder::loss_targets(const Tensor& targets) const {
  const int64_t prefix = args_.attn_mask_type == nn::MaskKind::prefix_lm ? args_.attn_prefix_len : 0;
  if (!sequence_shard.sharded() || targets.dim() != 2) return ignore_prefix_targets(targets, prefix);
  return ignore_prefix_targets(targets, prefix, sequence_shard.positions(targets.size(1)));
}

Tensor Decoder::forward_chunk(const Tensor& x, const Tensor& doc_ids, const ModelChunk& c) {
  const int64_t L = (int64_t)model->layers->layers.size();
  const int64_t end = c.end < 0 ? L : c.end;
  TITAN_CHECK(0 <= c.begin && c.begin <= end && end <= L, "Decoder::forward_chunk: blocks [", c.begin, ", ", end,
              ") outside the model's ", L);
  TITAN_CHECK(c.first ? x.dim() == 2 : x.dim() == 3, "Decoder::forward_chunk: ",
              c.first ? "tokens must be [B, S]" : "the hidden state must be [B, S, dim]", ", got ",
              shape_str(x.shape()));
  // hooks: this module's around the whole forward (the root unit), each
  // layer's pre-hook inside its (checkpointed) block so a recompute re-runs it
  return call(x, [&](const Tensor& in_x) {
    const int64_t S = c.seq_len > 0 ? c.seq_len : in_x.size(1);  // a sequence shard's blocks gather S back
    const Device dev = in_x.device();
    const nn::SequenceShard& cp = sequence_shard;  // context parallel: S of the sequence's positions
    if (!cos_.defined() || cos_.size(0) != S || cos_.device() != dev || rope_shard_ != std::make_pair(cp.parts, cp.index)) {
      auto tables = [&](double theta, const RopeScaling& r) {  // at this rank's positions
        return cp.sharded() ? rope_tables(cp.positions(S), args_.head_dim, theta, r, dev)
                            : rope_tables(S, args_.head_dim, theta, r, dev);
      };
      std::tie(cos_, sin_) = tables(args_.rope_theta, args_.rope_scaling());
      if (args_.rope_local_theta > 0)  // the sliding layers': their own base, unscaled (Gemma 3)
        std::tie(cos_local_, sin_local_) = tables(args_.rope_local_theta, RopeScaling{});
      if (args_.nope_layer_interval > 0 && args_.nope_attn_scale > 0) {  // Llama 4's temperature, per position
        std::vector<int64_t> pos = cp.sharded() ? cp.positions(S) : std::vector<int64_t>();
        if (!cp.sharded())
          for (int64_t i = 0; i < S; ++i) pos.push_back(i);
        nope_q_scale_ = empty({S, 1, 1}, DType::F32, dev);
        if (dev != Device::Meta)
          for (int64_t i = 0; i < S; ++i) nope_q_scale_.data<float>()[i] = (float)args_.nope_query_scale(pos[(size_t)i]);
      }
      rope_shard_ = {cp.parts, cp.index};
    }
    TITAN_CHECK(!cp.sharded() || !doc_ids.defined() || doc_ids.size(1) == cp.global_len(S), "Decoder::forward_chunk: "
                "context parallel: doc_ids ", shape_str(doc_ids.shape()), " must cover the whole sequence (", cp.global_len(S),
                " tokens), this rank holds ", S);
    const nn::AttentionInputs in{cos_, sin_, cos_local_, sin_local_, nope_q_scale_, doc_ids, cp.attend, &masks_};
    // [B, S, dim] (a plan's hooks may shard it: sequence parallel hands the blocks [B, S/tp, dim])
    Tensor h = c.first ? model->embed_tokens->call(in_x, [&](const Tensor& t) { return model->embed_tokens->forward(t); })
                       : in_x;
    if (c.first && args_.embed_multiplier() != 1.0) h = mul(h, args_.embed_multiplier());  // Gemma: sqrt(dim)
    h = model->layers->run(h, in, activation_checkpoint,
                           checkpoint_save_ops ? autograd::SavePolicy::TorchTitanOps : autograd::SavePolicy::None,
                           c.begin, end);
    if (!c.last) return h;
    h = model->norm->call(h, [&](const Tensor& t) { return model->norm->forward(t); });
    // [B, S, vocab] (a vocab shard's under tensor parallel: the cap is elementwise)
    Tensor logits = lm_head ? lm_head->call(h, [&](const Tensor& t) { return lm_head->forward(t); })
                            : linear(h, model->embed_tokens->weight);
    const double cap = args_.final_logit_softcap;
    return cap > 0 ? mul(tanh(mul(logits, 1.0 / cap)), cap) : logits;
  });
}

namespace {
bool in_chunk(int64_t layer, const ModelChunk& c) { return layer >= c.begin && (c.end < 0 || layer < c.end); }
}  // namespace

Tensor Decoder::aux_loss(const ModelChunk& c) const {
  Tensor total;
  const auto& layers = model->layers->layers;
  for (size_t i = 0; i < layers.size(); ++i) {
    auto* l = layers[i];
    if (in_chunk((int64_t)i, c) && l->moe && l->moe->last_aux_loss.defined())
      total = total.defined() ? add(total, l->moe->last_aux_loss) : l->moe->last_aux_loss;
  }
  return total;
}

std::vector<std::vector<int64_t>> Decoder::routed_counts(const ModelChunk& c) const {
  std::vector<std::vector<int64_t>> out;
  const auto& layers = model->layers->layers;
  for (size_t i = 0; i < layers.size(); ++i) {
    auto* l = layers[i];
    if (!l->moe) continue;
    if (in_chunk((int64_t)i, c) && !l->moe->last_routed.empty()) out.push_back(l->moe->last_routed);
    else out.push_back(std::vector<int64_t>((size_t)l->moe->num_experts, 0));
  }
  return out;
}

void Decoder::update_router_bias(const std::vector<std::vector<double>>& counts) {
  size_t i = 0;
  for (auto* l : model->layers->layers)
    if (l->moe && i < counts.size()) moe::update_bias(l->moe->expert_bias, counts[i++], args_.moe_bias_update_rate);
}

std::vector<std::pair<std::string, Tensor*>> Decoder::buffers() {
  std::vector<std::pair<std::string, Tensor*>> out;
  if (!args_.moe_route_bias) return out;  // the biases stay zero: nothing to keep
  const auto& layers = model->layers->layers;
  for (size_t i = 0; i < layers.size(); ++i)
    if (layers[i]->moe) out.emplace_back("model.layers." + std::to_string(i) + ".mlp.expert_bias", &layers[i]->moe->expert_bias);
  return out;
}

HfLayout Decoder::hf_layout(const std::vector<Region>& params) const {
  // Qwen3-MoE and Mixtral keep one nn.Linear per expert (Mixtral's under block_sparse_moe: w1 gate, w3 up, w2 down);
  // titan's decoder exported as itself keeps them stacked
  switch (args_.hf_class()) {
    case HfClass::qwen3_moe: return per_expert_layout(params);
    case HfClass::mixtral: return per_expert_layout(params, {"block_sparse_moe", "w1", "w3", "w2"});
    case HfClass::deepseek_v3:
      return per_expert_layout(params, {"mlp", "gate_proj", "up_proj", "down_proj", "gate.e_score_correction_bias"});
    case HfClass::llama4: return fused_halves_layout(params);
    default: return same_layout(params);
  }
}

void Decoder::init_weights(uint64_t seed) { hf_init_weights(named_parameters(), parameter_inits(), seed); }

}  // namespace titan::decoder
