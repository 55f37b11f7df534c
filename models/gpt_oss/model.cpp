#include "models/gpt_oss/model.h"

#include <algorithm>
#include <cmath>

#include "comms/moe_dispatch.h"
#include "models/moe_balance.h"
#include "models/hf_init.h"
#include "src/autograd/grad_mode.h"

namespace titan::gpt_oss {

Attention::Attention(const Args& a, bool sliding)
    : head_dim(a.head_dim), window(sliding ? a.sliding_window : 0), variant(a.attn) {
  q_proj = &register_module("q_proj", std::make_unique<nn::Linear>(a.dim, a.n_heads * a.head_dim, true));
  k_proj = &register_module("k_proj", std::make_unique<nn::Linear>(a.dim, a.n_kv_heads * a.head_dim, true));
  v_proj = &register_module("v_proj", std::make_unique<nn::Linear>(a.dim, a.n_kv_heads * a.head_dim, true));
  o_proj = &register_module("o_proj", std::make_unique<nn::Linear>(a.n_heads * a.head_dim, a.dim, true));
  register_parameter("sinks", sinks, nn::new_parameter({a.n_heads}));
  bias = nn::attention_bias_tensor(a.attn, a.n_heads);
  if (a.attn.bias == "relative") register_parameter("relative_bias", bias, bias);
}

Tensor Attention::forward(const Tensor& x, const nn::AttentionInputs& in) const {
  const int64_t B = x.size(0), S = x.size(1);
  const int64_t hq = q_proj->weight.size(0) / head_dim, hkv = k_proj->weight.size(0) / head_dim;
  Tensor q = rope(q_proj->forward(x).reshape({B, S, hq, head_dim}), in.cos, in.sin);  // [B, S, Hq, D]
  Tensor k = rope(k_proj->forward(x).reshape({B, S, hkv, head_dim}), in.cos, in.sin);
  Tensor v = v_proj->forward(x).reshape({B, S, hkv, head_dim});
  // sinks join each softmax denominator
  Tensor o = nn::variant_attention(q, k, v, sinks, variant, window, in.doc_ids, bias);
  return o_proj->forward(o.reshape({B, S, hq * head_dim}));
}

Experts::Experts(const Args& a) : limit(a.swiglu_limit) {
  register_parameter("gate_up_proj", gate_up_proj, nn::new_parameter({a.num_experts, a.dim, 2 * a.intermediate}));
  register_parameter("gate_up_proj_bias", gate_up_proj_bias, nn::new_parameter({a.num_experts, 2 * a.intermediate}));
  register_parameter("down_proj", down_proj, nn::new_parameter({a.num_experts, a.intermediate, a.dim}));
  register_parameter("down_proj_bias", down_proj_bias, nn::new_parameter({a.num_experts, a.dim}));
}

Tensor Experts::forward(const Tensor& x, const std::vector<int64_t>& counts) const {
  const int64_t R = x.size(0), I = down_proj.size(1);
  Tensor gu = grouped_linear(x, gate_up_proj, gate_up_proj_bias, counts).reshape({R, I, 2});  // interleaved
  Tensor gate = clamp(gu.slice(2, 0, 1).reshape({R, I}), -INFINITY, limit);
  Tensor up = clamp(gu.slice(2, 1, 2).reshape({R, I}), -limit, limit);
  Tensor glu = mul(gate, sigmoid(mul(gate, 1.702)));
  return grouped_linear(mul(add(up, 1.0), glu), down_proj, down_proj_bias, counts);
}

MoE::MoE(const Args& a) : num_experts(a.num_experts), top_k(a.top_k), aux_loss_coeff(a.aux_loss_coeff) {
  router = &register_module("router", std::make_unique<nn::Linear>(a.dim, a.num_experts, true));
  experts = &register_module("experts", std::make_unique<Experts>(a));
  expert_bias = zeros({a.num_experts});
}

Tensor MoE::forward(const Tensor& x) const {
  const int64_t B = x.size(0), S = x.size(1), H = x.size(2);
  Tensor h = x.reshape({B * S, H});
  Tensor logits = router->forward(h);                   // [T, E]
  Tensor idx, vals;
  if (expert_bias.is_meta() || !std::any_of(expert_bias.data<float>(), expert_bias.data<float>() + num_experts,
                                            [](float b) { return b != 0.0f; })) {
    std::tie(vals, idx) = topk(logits, top_k);          // [T, k]: HF's path
  } else {
    NoGradGuard ng;
    idx = topk(add(logits.detach(), expert_bias), top_k).second;  // biased choice
  }
  if (!vals.defined()) vals = gather(logits, 1, idx);   // unbiased logits of the chosen experts
  Tensor w = softmax(vals, -1);                         // over the k selected
  auto d = comms::dispatch(h, idx, w, num_experts, ep_group);
  last_routed = moe::count_routed(idx, num_experts);
  last_aux_loss = aux_loss_coeff > 0 ? moe::switch_aux_loss(softmax(logits, -1), last_routed, aux_loss_coeff) : Tensor();
  Tensor y = experts->forward(d.expert_input, d.tokens_per_local_expert);
  return comms::combine(y, *d.handle).reshape({B, S, H});
}

DecoderLayer::DecoderLayer(const Args& a, int64_t layer) {
  input_layernorm = &register_module("input_layernorm", std::make_unique<nn::Norm>(a.dim, "rmsnorm", a.norm_eps));
  self_attn = &register_module("self_attn", std::make_unique<Attention>(a, a.sliding[layer]));
  post_attention_layernorm =
      &register_module("post_attention_layernorm", std::make_unique<nn::Norm>(a.dim, "rmsnorm", a.norm_eps));
  mlp = &register_module("mlp", std::make_unique<MoE>(a));
}

Tensor DecoderLayer::forward(const Tensor& x, const nn::AttentionInputs& in) const {
  Tensor h = add(x, self_attn->post(self_attn->forward(self_attn->pre(input_layernorm->forward(x)), in)));
  return add(h, mlp->post(mlp->forward(mlp->pre(post_attention_layernorm->forward(h)))));
}

Backbone::Backbone(const Args& a) {
  embed_tokens = &register_module("embed_tokens", std::make_unique<nn::Embedding>(a.vocab_size, a.dim));
  layers = &register_module("layers", std::make_unique<LayerList>());
  for (int64_t i = 0; i < a.n_layers; ++i) layers->add(std::make_unique<DecoderLayer>(a, i));
  norm = &register_module("norm", std::make_unique<nn::Norm>(a.dim, "rmsnorm", a.norm_eps));
}

GptOss::GptOss(const Args& a) : DecoderLM(a) {
  a.validate();
  model = &register_module("model", std::make_unique<Backbone>(a));
  if (!a.tie_embeddings) lm_head = &register_module("lm_head", std::make_unique<nn::Linear>(a.dim, a.vocab_size, false));
}

std::pair<Tensor, Tensor> yarn_rope_tables(const Args& a, int64_t S, Device dev) {
  const int64_t D = a.head_dim, h = D / 2;
  Tensor c = empty({S, h}, DType::F32, dev), s = empty({S, h}, DType::F32, dev);
  if (dev == Device::Meta) return {c, s};
  // HF _compute_yarn_parameters (float32 tensors, python-float corrections)
  const double base = a.rope_theta, factor = a.yarn_factor;
  auto correction_dim = [&](double rotations) {
    return (double)D * std::log((double)a.original_max_position_embeddings / (rotations * 2 * M_PI)) /
           (2 * std::log(base));
  };
  double low = correction_dim(a.beta_fast), high = correction_dim(a.beta_slow);
  if (a.yarn_truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, (double)(D - 1));
  if (low == high) high += 0.001;
  const float attention_factor = (float)(0.1 * std::log(factor) + 1.0);
  std::vector<float> inv(h);
  for (int64_t i = 0; i < h; ++i) {
    const float pos_freq = std::pow((float)base, (float)(2 * i) / (float)D);
    const float extrap = 1.0f / pos_freq, interp = 1.0f / ((float)factor * pos_freq);
    float ramp = ((float)i - (float)low) / (float)(high - low);
    ramp = std::min(1.0f, std::max(0.0f, ramp));
    const float extrap_factor = 1.0f - ramp;
    inv[i] = interp * (1.0f - extrap_factor) + extrap * extrap_factor;
  }
  float* pc = c.data<float>();
  float* ps = s.data<float>();
  for (int64_t p = 0; p < S; ++p)
    for (int64_t i = 0; i < h; ++i) {
      const float ang = (float)p * inv[i];
      pc[p * h + i] = std::cos(ang) * attention_factor;
      ps[p * h + i] = std::sin(ang) * attention_factor;
    }
  return {c, s};
}

Tensor GptOss::forward(const Tensor& tokens, const Tensor& doc_ids) {
  TITAN_CHECK(tokens.dim() == 2, "GptOss::forward: tokens must be [B, S], got ", shape_str(tokens.shape()));
  const int64_t S = tokens.size(1);
  Tensor ids = pre(tokens);
  const Device dev = model->embed_tokens->weight.device();
  if (!cos_.defined() || cos_.size(0) != S || cos_.device() != dev) std::tie(cos_, sin_) = yarn_rope_tables(args_, S, dev);
  const nn::AttentionInputs in{cos_, sin_, doc_ids};
  Tensor h = model->layers->run(model->embed_tokens->forward(ids), in, activation_checkpoint);
  h = model->norm->post(model->norm->forward(h));
  Tensor logits = lm_head ? lm_head->post(lm_head->forward(lm_head->pre(h))) : linear(h, model->embed_tokens->weight);
  return post(logits);
}

std::string GptOss::describe() const {
  const Args& a = args_;
  return "gpt_oss: " + std::to_string(a.n_layers) + " layers, dim " + std::to_string(a.dim) + ", heads " +
         std::to_string(a.n_heads) + "/" + std::to_string(a.n_kv_heads) + " x " + std::to_string(a.head_dim) +
         ", " + std::to_string(a.num_experts) + " experts (top-" + std::to_string(a.top_k) + ") x ffn " +
         std::to_string(a.intermediate) + ", vocab " + std::to_string(a.vocab_size) + "; " +
         std::to_string(a.num_params()) + " parameters, " + std::to_string(a.num_active_params()) + " active";
}

Tensor GptOss::aux_loss() const {
  Tensor total;
  for (auto* l : model->layers->layers)
    if (l->mlp->last_aux_loss.defined()) total = total.defined() ? add(total, l->mlp->last_aux_loss) : l->mlp->last_aux_loss;
  return total;
}

std::vector<std::vector<int64_t>> GptOss::routed_counts() const {
  std::vector<std::vector<int64_t>> out;
  for (auto* l : model->layers->layers) out.push_back(l->mlp->last_routed);
  return out;
}

void GptOss::update_router_bias(const std::vector<std::vector<double>>& counts) {
  for (size_t i = 0; i < counts.size(); ++i)
    moe::update_bias(model->layers->layers[i]->mlp->expert_bias, counts[i], args_.bias_update_rate);
}

void GptOss::init_weights(uint64_t seed) { hf_init_weights(named_parameters(), seed); }

}  // namespace titan::gpt_oss
