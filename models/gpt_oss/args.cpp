#include "models/gpt_oss/args.h"

#include <nlohmann/json.hpp>

#include "models/attention_config.h"
#include "src/tensor/error.h"

namespace titan::gpt_oss {

using json = nlohmann::json;

Args Args::from_hf_json(const std::string& text) {
  json j;
  try {
    j = json::parse(text);
  } catch (const std::exception& e) {
    fail("gpt_oss config: not valid JSON: ", e.what());
  }
  std::string mt = hf_model_family(j, "gpt_oss");
  TITAN_CHECK(mt == "gpt_oss", "gpt_oss config: model_type is '", mt, "', expected 'gpt_oss'");
  Args a;  // GptOssConfig defaults
  a.vocab_size = j.value("vocab_size", a.vocab_size);
  a.dim = j.value("hidden_size", a.dim);
  a.intermediate = j.value("intermediate_size", a.intermediate);
  a.n_layers = j.value("num_hidden_layers", a.n_layers);
  a.n_heads = j.value("num_attention_heads", a.n_heads);
  a.n_kv_heads = j.value("num_key_value_heads", a.n_kv_heads);
  a.head_dim = j.contains("head_dim") && !j["head_dim"].is_null() ? j["head_dim"].get<int64_t>() : a.head_dim;
  a.num_experts = j.value("num_local_experts", a.num_experts);
  a.top_k = j.value("num_experts_per_tok", a.top_k);
  a.sliding_window = j.value("sliding_window", a.sliding_window);
  a.rope_theta = j.value("rope_theta", a.rope_theta);
  a.norm_eps = j.value("rms_norm_eps", a.norm_eps);
  a.swiglu_limit = j.value("swiglu_limit", a.swiglu_limit);
  a.max_position_embeddings = j.value("max_position_embeddings", a.max_position_embeddings);
  a.tie_embeddings = j.value("tie_word_embeddings", false);
  if (j.contains("rope_scaling") && j["rope_scaling"].is_object()) {
    auto rs = j["rope_scaling"];
    std::string type = rs.value("rope_type", rs.value("type", std::string("yarn")));
    TITAN_CHECK(type == "yarn", "gpt_oss config: rope_scaling type '", type, "' not supported (yarn)");
    a.yarn_factor = rs.value("factor", a.yarn_factor);
    a.beta_fast = rs.value("beta_fast", a.beta_fast);
    a.beta_slow = rs.value("beta_slow", a.beta_slow);
    a.yarn_truncate = rs.value("truncate", true);
    a.original_max_position_embeddings = rs.value("original_max_position_embeddings", a.original_max_position_embeddings);
  }
  a.sliding.assign(a.n_layers, false);
  if (j.contains("layer_types") && !j["layer_types"].is_null()) {
    auto lt = j["layer_types"];
    TITAN_CHECK((int64_t)lt.size() == a.n_layers, "gpt_oss config: layer_types has ", lt.size(), " entries for ",
                a.n_layers, " layers");
    for (int64_t i = 0; i < a.n_layers; ++i) a.sliding[i] = lt[i] == "sliding_attention";
  } else {
    for (int64_t i = 0; i < a.n_layers; ++i) a.sliding[i] = (i + 1) % 2 != 0;  // HF default: layer 0 sliding
  }
  a.attn = attention_from_hf(j);
  a.validate();
  return a;
}

std::string Args::to_hf_json() const {
  json j;
  j["architectures"] = {"GptOssForCausalLM"};
  j["model_type"] = "gpt_oss";
  j["vocab_size"] = vocab_size;
  j["hidden_size"] = dim;
  j["intermediate_size"] = intermediate;
  j["num_hidden_layers"] = n_layers;
  j["num_attention_heads"] = n_heads;
  j["num_key_value_heads"] = n_kv_heads;
  j["head_dim"] = head_dim;
  j["num_local_experts"] = num_experts;
  j["num_experts_per_tok"] = top_k;
  j["experts_per_token"] = top_k;
  j["sliding_window"] = sliding_window;
  j["rope_theta"] = rope_theta;
  j["rms_norm_eps"] = norm_eps;
  j["swiglu_limit"] = swiglu_limit;
  j["max_position_embeddings"] = max_position_embeddings;
  j["tie_word_embeddings"] = tie_embeddings;
  j["attention_bias"] = true;
  j["hidden_act"] = "silu";
  j["rope_scaling"] = {{"rope_type", "yarn"},
                       {"factor", yarn_factor},
                       {"beta_fast", beta_fast},
                       {"beta_slow", beta_slow},
                       {"truncate", yarn_truncate},
                       {"original_max_position_embeddings", original_max_position_embeddings}};
  json lt = json::array();
  for (bool s : sliding) lt.push_back(s ? "sliding_attention" : "full_attention");
  j["layer_types"] = lt;
  j["torch_dtype"] = "float32";
  attention_to_hf(j, attn);
  return j.dump(2);
}

std::vector<int64_t> Args::layer_windows() const {
  std::vector<int64_t> w;
  for (bool s : sliding) w.push_back(s ? sliding_window : 0);
  return w;
}

void Args::validate() const {
  check_attention_layers(attn, layer_windows(), "gpt_oss");
  TITAN_CHECK(dim > 0 && n_layers > 0 && n_heads > 0 && n_kv_heads > 0 && head_dim > 0 && intermediate > 0 &&
                  vocab_size > 0 && num_experts > 0,
              "gpt_oss: every size must be > 0");
  TITAN_CHECK(n_heads % n_kv_heads == 0, "gpt_oss: n_heads ", n_heads, " must be a multiple of n_kv_heads ",
              n_kv_heads);
  TITAN_CHECK(top_k >= 1 && top_k <= num_experts, "gpt_oss: experts per token (top_k = ", top_k,
              ") must be in [1, num_local_experts = ", num_experts, "]");
  TITAN_CHECK(head_dim % 2 == 0, "gpt_oss: head_dim must be even, got ", head_dim);
  TITAN_CHECK((int64_t)sliding.size() == n_layers, "gpt_oss: layer types for ", sliding.size(), " of ", n_layers,
              " layers");
}

int64_t Args::num_expert_params_per_layer() const {
  return num_experts * (dim * 2 * intermediate + 2 * intermediate + intermediate * dim + dim);
}

int64_t Args::num_params() const {
  const int64_t attn = dim * n_heads * head_dim + n_heads * head_dim + 2 * (dim * n_kv_heads * head_dim + n_kv_heads * head_dim) +
                       n_heads * head_dim * dim + dim + n_heads +  // q, k, v, o (+ biases), sinks
                       attention_bias_params(this->attn, n_heads);
  const int64_t router = dim * num_experts + num_experts;
  const int64_t per_layer = attn + router + num_expert_params_per_layer() + 2 * dim;
  return n_layers * per_layer + dim + vocab_size * dim * (tie_embeddings ? 1 : 2);
}

int64_t Args::num_active_params() const {
  // as OpenAI's model card: the embedding lookup is not counted, the unembedding is
  return num_params() - n_layers * (num_expert_params_per_layer() / num_experts) * (num_experts - top_k) -
         num_embedding_params();
}

double Args::flops_per_token(int64_t seq) const {
  const double attn_mm = (double)dim * n_heads * head_dim * 2 + (double)dim * n_kv_heads * head_dim * 2;
  const double experts = (double)top_k * (dim * 2.0 * intermediate + intermediate * (double)dim);
  const double router = (double)dim * num_experts;
  double f = 6.0 * (n_layers * (attn_mm + experts + router) + (double)vocab_size * dim);
  for (bool s : sliding) f += 12.0 * n_heads * head_dim * (double)(s ? std::min(sliding_window, seq) : seq);
  return f;
}

}  // namespace titan::gpt_oss
