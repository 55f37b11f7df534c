#include "models/qwen3/model.h"

#include <cmath>

#include "models/moe_balance.h"
#include "models/qwen3/moe.h"
#include "models/hf_init.h"
#include "src/autograd/grad_mode.h"

namespace titan::qwen3 {

Attention::Attention(const Args& a, int64_t w)
    : n_heads(a.n_heads), n_kv_heads(a.n_kv_heads), head_dim(a.head_dim), window(w), variant(a.attn) {
  q_proj = &register_module("q_proj", std::make_unique<nn::Linear>(a.dim, a.n_heads * a.head_dim, false));
  k_proj = &register_module("k_proj", std::make_unique<nn::Linear>(a.dim, a.n_kv_heads * a.head_dim, false));
  v_proj = &register_module("v_proj", std::make_unique<nn::Linear>(a.dim, a.n_kv_heads * a.head_dim, false));
  o_proj = &register_module("o_proj", std::make_unique<nn::Linear>(a.n_heads * a.head_dim, a.dim, false));
  if (a.qk_norm) {
    q_norm = &register_module("q_norm", std::make_unique<nn::Norm>(a.head_dim, a.norm_type, a.norm_eps));
    k_norm = &register_module("k_norm", std::make_unique<nn::Norm>(a.head_dim, a.norm_type, a.norm_eps));
  }
  bias = nn::attention_bias_tensor(a.attn, a.n_heads);
  if (a.attn.bias == "relative") register_parameter("relative_bias", bias, bias);
}

Tensor Attention::forward(const Tensor& x, const nn::AttentionInputs& in) const {
  const int64_t B = x.size(0), S = x.size(1);
  // heads from the projection width, so a tensor-parallel shard runs unchanged
  const int64_t hq = q_proj->weight.size(0) / head_dim, hkv = k_proj->weight.size(0) / head_dim;
  Tensor q = q_proj->forward(x).reshape({B, S, hq, head_dim});   // [B, S, Hq, D]
  Tensor k = k_proj->forward(x).reshape({B, S, hkv, head_dim});  // [B, S, Hkv, D]
  Tensor v = v_proj->forward(x).reshape({B, S, hkv, head_dim});  // [B, S, Hkv, D]
  if (q_norm) {
    q = q_norm->forward(q);
    k = k_norm->forward(k);
  }
  q = rope(q, in.cos, in.sin);
  k = rope(k, in.cos, in.sin);
  Tensor o = nn::variant_attention(q, k, v, Tensor(), variant, window, in.doc_ids, bias);  // [B, S, Hq, D]
  return o_proj->forward(o.reshape({B, S, hq * head_dim}));
}

MLP::MLP(const Args& a) : gelu(a.activation == "gelu") {
  gate_proj = &register_module("gate_proj", std::make_unique<nn::Linear>(a.dim, a.hidden_dim, false));
  up_proj = &register_module("up_proj", std::make_unique<nn::Linear>(a.dim, a.hidden_dim, false));
  down_proj = &register_module("down_proj", std::make_unique<nn::Linear>(a.hidden_dim, a.dim, false));
}

Tensor MLP::forward(const Tensor& x) const {
  Tensor g = gate_proj->forward(x);
  g = gelu ? titan::gelu(g) : silu(g);
  return down_proj->forward(mul(g, up_proj->forward(x)));
}

DecoderLayer::DecoderLayer(const Args& a, int64_t layer) {
  self_attn = &register_module("self_attn", std::make_unique<Attention>(a, a.layer_window[layer]));
  if (a.moe) moe = &register_module("mlp", std::make_unique<MoEMLP>(a));
  else mlp = &register_module("mlp", std::make_unique<MLP>(a));
  input_layernorm = &register_module("input_layernorm", std::make_unique<nn::Norm>(a.dim, a.norm_type, a.norm_eps));
  post_attention_layernorm =
      &register_module("post_attention_layernorm", std::make_unique<nn::Norm>(a.dim, a.norm_type, a.norm_eps));
}

Tensor DecoderLayer::forward(const Tensor& x, const nn::AttentionInputs& in) const {
  Tensor a = self_attn->pre(input_layernorm->forward(x));
  Tensor h = add(x, self_attn->post(self_attn->forward(a, in)));
  nn::Module* block = moe ? (nn::Module*)moe : (nn::Module*)mlp;
  Tensor m = block->pre(post_attention_layernorm->forward(h));
  return add(h, block->post(moe ? moe->forward(m) : mlp->forward(m)));
}

Backbone::Backbone(const Args& a) {
  embed_tokens = &register_module("embed_tokens", std::make_unique<nn::Embedding>(a.vocab_size, a.dim));
  layers = &register_module("layers", std::make_unique<LayerList>());
  for (int64_t i = 0; i < a.n_layers; ++i) layers->add(std::make_unique<DecoderLayer>(a, i));
  norm = &register_module("norm", std::make_unique<nn::Norm>(a.dim, a.norm_type, a.norm_eps));
}

Qwen3::Qwen3(const Args& a) : DecoderLM(a) {
  a.validate();
  model = &register_module("model", std::make_unique<Backbone>(a));
  if (!a.tie_embeddings) lm_head = &register_module("lm_head", std::make_unique<nn::Linear>(a.dim, a.vocab_size, false));
}

std::pair<Tensor, Tensor> rope_tables(int64_t S, int64_t D, double theta, Device d) {
  const int64_t h = D / 2;
  Tensor c = empty({S, h}, DType::F32, d), s = empty({S, h}, DType::F32, d);
  if (d == Device::Meta) return {c, s};
  float* pc = c.data<float>();
  float* ps = s.data<float>();
  for (int64_t i = 0; i < h; ++i) {
    // as HF: inv_freq computed in float32 from an int64 arange
    const float inv = 1.0f / std::pow((float)theta, (float)(2 * i) / (float)D);
    for (int64_t p = 0; p < S; ++p) {
      const float ang = (float)p * inv;
      pc[p * h + i] = std::cos(ang);
      ps[p * h + i] = std::sin(ang);
    }
  }
  return {c, s};
}

Tensor Qwen3::forward(const Tensor& tokens, const Tensor& doc_ids) {
  TITAN_CHECK(tokens.dim() == 2, "Qwen3::forward: tokens must be [B, S], got ", shape_str(tokens.shape()));
  const int64_t S = tokens.size(1);
  // hooks: this module's around the whole forward (root unit), each layer's
  // pre-hook inside its (checkpointed) block so a recompute re-runs it
  Tensor ids = pre(tokens);
  const Device dev = model->embed_tokens->weight.device();
  if (!cos_.defined() || cos_.size(0) != S || cos_.device() != dev)
    std::tie(cos_, sin_) = rope_tables(S, args_.head_dim, args_.rope_theta, dev);
  const nn::AttentionInputs in{cos_, sin_, doc_ids};
  Tensor h = model->layers->run(model->embed_tokens->forward(ids), in, activation_checkpoint);  // [B, S, dim]
  h = model->norm->post(model->norm->forward(h));
  Tensor logits = lm_head ? lm_head->post(lm_head->forward(lm_head->pre(h))) : linear(h, model->embed_tokens->weight);
  return post(logits);  // [B, S, vocab] (or a vocab shard's logits gathered by a post-hook)
}

std::string Qwen3::describe() const {
  const Args& a = args_;
  std::string ffn = a.moe ? std::to_string(a.moe_experts) + " experts (top-" + std::to_string(a.moe_top_k) + ", " +
                                a.moe_score + (a.moe_shared_expert ? ", + shared" : "") + ") x ffn " +
                                std::to_string(a.moe_hidden_dim)
                          : "ffn " + std::to_string(a.hidden_dim);
  return "qwen3: " + std::to_string(a.n_layers) + " layers, dim " + std::to_string(a.dim) + ", heads " +
         std::to_string(a.n_heads) + "/" + std::to_string(a.n_kv_heads) + " x " + std::to_string(a.head_dim) +
         ", " + ffn + ", vocab " + std::to_string(a.vocab_size);
}

Tensor Qwen3::aux_loss() const {
  Tensor total;
  for (auto* l : model->layers->layers)
    if (l->moe && l->moe->last_aux_loss.defined())
      total = total.defined() ? add(total, l->moe->last_aux_loss) : l->moe->last_aux_loss;
  return total;
}

std::vector<std::vector<int64_t>> Qwen3::routed_counts() const {
  std::vector<std::vector<int64_t>> out;
  for (auto* l : model->layers->layers)
    if (l->moe) out.push_back(l->moe->last_routed);
  return out;
}

void Qwen3::update_router_bias(const std::vector<std::vector<double>>& counts) {
  size_t i = 0;
  for (auto* l : model->layers->layers)
    if (l->moe && i < counts.size()) moe::update_bias(l->moe->expert_bias, counts[i++], args_.moe_bias_update_rate);
}

void Qwen3::init_weights(uint64_t seed) { hf_init_weights(named_parameters(), seed); }

}  // namespace titan::qwen3
