#include "models/qwen3/args.h"

#include <nlohmann/json.hpp>

#include "models/attention_config.h"
#include "src/tensor/error.h"

namespace titan::qwen3 {

using json = nlohmann::json;

Args Args::from_job(const JobConfig::Model& m) {
  Args a;
  a.dim = m.dim;
  a.n_layers = m.n_layers;
  a.n_heads = m.n_heads;
  a.n_kv_heads = m.n_kv_heads;
  a.head_dim = m.head_dim;
  a.hidden_dim = m.hidden_dim;
  a.vocab_size = m.vocab_size;
  a.qk_norm = m.qk_norm;
  a.norm_type = m.norm_type;
  a.norm_eps = m.norm_eps;
  a.activation = m.activation;
  a.rope_theta = m.rope_theta;
  a.tie_embeddings = m.enable_weight_tying;
  a.attn = attention_variant_from_job(m);
  // sliding_window > 0 makes every qwen3 layer a sliding layer (attn_mask_type sliding_window needs it)
  a.layer_window.assign(m.n_layers, m.sliding_window);
  a.moe = m.moe_enabled;
  a.moe_experts = m.moe_num_experts;
  a.moe_top_k = m.moe_top_k;
  a.moe_hidden_dim = m.moe_hidden_dim;
  a.moe_score = m.moe_score_func;
  a.moe_renormalize = m.moe_renormalize;
  a.moe_shared_expert = m.moe_shared_expert;
  a.moe_aux_loss_coeff = m.moe_aux_loss_coeff;
  a.moe_bias_update_rate = m.moe_bias_update_rate;
  a.validate();
  return a;
}

Args Args::from_hf_json(const std::string& text) {
  json j;
  try {
    j = json::parse(text);
  } catch (const std::exception& e) {
    fail("qwen3 config: the HF config.json content is not valid JSON: ", e.what());
  }
  std::string mt = hf_model_family(j, "qwen3");
  TITAN_CHECK(mt == "qwen3", "qwen3 config: model_type is '", mt, "', expected 'qwen3'");
  Args a;  // Qwen3Config defaults
  a.vocab_size = j.value("vocab_size", 151936);
  a.dim = j.value("hidden_size", 4096);
  a.hidden_dim = j.value("intermediate_size", 22016);
  a.n_layers = j.value("num_hidden_layers", 32);
  a.n_heads = j.value("num_attention_heads", 32);
  a.n_kv_heads = j.contains("num_key_value_heads") && !j["num_key_value_heads"].is_null()
                     ? j["num_key_value_heads"].get<int64_t>()
                     : a.n_heads;
  a.head_dim = j.contains("head_dim") && !j["head_dim"].is_null() ? j["head_dim"].get<int64_t>() : 128;
  a.activation = j.value("hidden_act", std::string("silu"));
  a.max_position_embeddings = j.value("max_position_embeddings", 32768);
  a.norm_eps = j.value("rms_norm_eps", 1e-6);
  a.tie_embeddings = j.value("tie_word_embeddings", false);
  a.rope_theta = j.value("rope_theta", 10000.0);
  const bool use_sw = j.value("use_sliding_window", false);
  const int64_t sw = j.contains("sliding_window") && !j["sliding_window"].is_null() ? j["sliding_window"].get<int64_t>()
                                                                                     : 4096;
  const int64_t mwl = j.value("max_window_layers", 28);
  a.layer_window.assign(a.n_layers, 0);
  if (j.contains("layer_types")) {
    auto lt = j["layer_types"];
    TITAN_CHECK(lt.is_array() && (int64_t)lt.size() == a.n_layers, "qwen3 config: layer_types must list ",
                a.n_layers, " entries");
    for (int64_t i = 0; i < a.n_layers; ++i) a.layer_window[i] = lt[i] == "sliding_attention" ? sw : 0;
  } else if (use_sw) {
    for (int64_t i = mwl; i < a.n_layers; ++i) a.layer_window[i] = sw;
  }
  // titan's ablation knobs (absent from HF: HF Qwen3 always has them on / RMSNorm)
  a.qk_norm = j.value("titan_qk_norm", true);
  a.norm_type = j.value("titan_norm_type", std::string("rmsnorm"));
  a.attn = attention_from_hf(j);
  if (j.contains("titan_moe")) {
    auto m = j["titan_moe"];
    a.moe = true;
    a.moe_experts = m.value("num_experts", a.moe_experts);
    a.moe_top_k = m.value("top_k", a.moe_top_k);
    a.moe_hidden_dim = m.value("hidden_dim", a.moe_hidden_dim);
    a.moe_score = m.value("score_func", a.moe_score);
    a.moe_renormalize = m.value("renormalize", a.moe_renormalize);
    a.moe_shared_expert = m.value("shared_expert", a.moe_shared_expert);
  }
  a.validate();
  return a;
}

std::string Args::to_hf_json() const {
  json j;
  j["architectures"] = {"Qwen3ForCausalLM"};
  j["model_type"] = "qwen3";
  j["vocab_size"] = vocab_size;
  j["hidden_size"] = dim;
  j["intermediate_size"] = hidden_dim;
  j["num_hidden_layers"] = n_layers;
  j["num_attention_heads"] = n_heads;
  j["num_key_value_heads"] = n_kv_heads;
  j["head_dim"] = head_dim;
  j["hidden_act"] = activation;
  j["max_position_embeddings"] = max_position_embeddings;
  j["rms_norm_eps"] = norm_eps;
  j["rope_theta"] = rope_theta;
  j["tie_word_embeddings"] = tie_embeddings;
  j["attention_bias"] = false;
  j["attention_dropout"] = 0.0;
  j["initializer_range"] = 0.02;
  bool any_sw = false;
  int64_t sw = 0;
  json lt = json::array();
  for (auto w : layer_window) {
    lt.push_back(w > 0 ? "sliding_attention" : "full_attention");
    if (w > 0) {
      any_sw = true;
      sw = w;
    }
  }
  j["use_sliding_window"] = any_sw;
  j["sliding_window"] = any_sw ? json(sw) : json(nullptr);
  j["max_window_layers"] = n_layers;
  j["layer_types"] = lt;
  j["torch_dtype"] = "float32";
  if (!qk_norm) j["titan_qk_norm"] = false;
  if (norm_type != "rmsnorm") j["titan_norm_type"] = norm_type;
  if (moe)
    j["titan_moe"] = {{"num_experts", moe_experts}, {"top_k", moe_top_k}, {"hidden_dim", moe_hidden_dim},
                      {"score_func", moe_score}, {"renormalize", moe_renormalize}, {"shared_expert", moe_shared_expert}};
  attention_to_hf(j, attn);
  return j.dump(2);
}

void Args::validate() const {
  TITAN_CHECK(dim > 0 && n_layers > 0 && n_heads > 0 && n_kv_heads > 0 && head_dim > 0 && hidden_dim > 0 &&
                  vocab_size > 0,
              "qwen3: every size must be > 0 (dim ", dim, ", n_layers ", n_layers, ", n_heads ", n_heads,
              ", n_kv_heads ", n_kv_heads, ", head_dim ", head_dim, ", hidden_dim ", hidden_dim, ", vocab_size ",
              vocab_size, ")");
  TITAN_CHECK(n_heads % n_kv_heads == 0, "qwen3: n_heads ", n_heads, " must be a multiple of n_kv_heads ",
              n_kv_heads);
  TITAN_CHECK(head_dim % 2 == 0, "qwen3: head_dim must be even (RoPE), got ", head_dim);
  TITAN_CHECK(activation == "silu" || activation == "gelu", "qwen3: activation '", activation,
              "' not supported (silu, gelu)");
  TITAN_CHECK(norm_type == "rmsnorm" || norm_type == "layernorm", "qwen3: norm_type '", norm_type,
              "' not supported (rmsnorm, layernorm)");
  TITAN_CHECK(!moe || (moe_top_k >= 1 && moe_top_k <= moe_experts), "qwen3: moe_top_k = ", moe_top_k,
              " must be in [1, moe_num_experts = ", moe_experts, "]");
  TITAN_CHECK(!moe || moe_score == "softmax" || moe_score == "sigmoid", "qwen3: moe_score_func '", moe_score,
              "' not supported (softmax, sigmoid)");
  TITAN_CHECK((int64_t)layer_window.size() == n_layers, "qwen3: layer_window has ", layer_window.size(),
              " entries for ", n_layers, " layers");
  check_attention_layers(attn, layer_window, "qwen3");
}

int64_t Args::mlp_params(bool active) const {
  if (!moe) return 3 * dim * hidden_dim;
  const int64_t per_expert = 3 * dim * moe_hidden_dim;
  return (active ? moe_top_k : moe_experts) * per_expert + (moe_shared_expert ? per_expert : 0) + dim * moe_experts;
}

int64_t Args::num_matmul_params() const {
  const int64_t attn = dim * n_heads * head_dim * 2 + dim * n_kv_heads * head_dim * 2;  // q, o, k, v
  return n_layers * (attn + mlp_params(/*active=*/true)) + vocab_size * dim;  // + lm_head; MoE: active experts
}

int64_t Args::num_params() const {
  const int64_t norm = norm_type == "layernorm" ? 2 * dim : dim;
  const int64_t qk = qk_norm ? (norm_type == "layernorm" ? 4 : 2) * head_dim : 0;
  const int64_t per_layer = dim * n_heads * head_dim * 2 + dim * n_kv_heads * head_dim * 2 + mlp_params(false) +
                            2 * norm + qk;
  return n_layers * (per_layer + attention_bias_params(attn, n_heads)) + norm +
         vocab_size * dim * (tie_embeddings ? 1 : 2);
}

double Args::flops_per_token(int64_t seq_len) const {
  double attn = 0;
  for (auto w : layer_window) attn += 12.0 * n_heads * head_dim * (double)(w > 0 ? std::min(w, seq_len) : seq_len);
  return 6.0 * (double)num_matmul_params() + attn;
}

}  // namespace titan::qwen3
