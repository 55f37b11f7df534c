#include "models/decoder/args.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "models/attention_config.h"
#include "src/tensor/error.h"

namespace titan::nn {
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(AttentionVariant, mask, prefix_len, softcap, bias,
                                                relative_max_distance)
}
namespace titan::decoder {
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(RopeScaling, type, factor, original_max_position_embeddings, beta_fast,
                                                beta_slow, truncate, low_freq_factor, high_freq_factor)
// titan_decoder's config.json block: every field
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(Args, family, vocab_size, dim, n_layers, n_heads, n_kv_heads, head_dim,
                                                hidden_dim, norm_type, norm_eps, qk_norm, attn_proj_bias, attn_sinks,
                                                layer_window, attn, rope_theta, rope, max_position_embeddings,
                                                activation, swiglu_limit, moe, moe_experts, moe_top_k, moe_hidden_dim,
                                                moe_score, moe_renormalize, moe_shared_expert, moe_router_bias,
                                                moe_expert_bias, moe_every, moe_first_dense, tie_embeddings,
                                                moe_route_bias)

using json = nlohmann::json;

bool Args::any_dense_layer() const {
  for (int64_t i = 0; i < n_layers; ++i)
    if (!is_moe_layer(i)) return true;
  return false;
}

Args Args::from_job(const JobConfig::Model& m) {
  Args a;
  a.family = m.name;
  a.vocab_size = m.vocab_size;
  a.dim = m.dim;
  a.n_layers = m.n_layers;
  a.n_heads = m.n_heads;
  a.n_kv_heads = m.n_kv_heads;
  a.head_dim = m.head_dim;
  a.hidden_dim = m.hidden_dim;
  a.norm_type = m.norm_type;
  a.norm_eps = m.norm_eps;
  a.qk_norm = m.qk_norm;
  a.attn_proj_bias = m.attn_proj_bias;
  a.attn_sinks = m.attn_sinks;
  a.attn = attention_variant_from_job(m);
  // sliding layers: every layer, or alternate ones (0, 2, ...); attn_mask_type sliding_window: every layer
  a.layer_window.assign(m.n_layers, 0);
  for (int64_t i = 0; i < m.n_layers; ++i)
    if (m.sliding_window > 0 && (m.sliding_window_layers == "all" || i % 2 == 0 || a.attn.mask == "sliding_window"))
      a.layer_window[i] = m.sliding_window;
  a.rope_theta = m.rope_theta;
  a.rope.type = m.rope_scaling_type;
  if (a.rope.type != "none") {
    a.rope.factor = m.rope_scaling_factor;
    a.rope.original_max_position_embeddings = m.rope_original_max_position_embeddings;
    a.rope.beta_fast = m.rope_yarn_beta_fast;
    a.rope.beta_slow = m.rope_yarn_beta_slow;
    a.rope.truncate = m.rope_yarn_truncate;
    a.rope.low_freq_factor = m.rope_low_freq_factor;
    a.rope.high_freq_factor = m.rope_high_freq_factor;
  }
  if (m.name == "gpt_oss") a.max_position_embeddings = 131072;
  // a scaled context is factor x the original one (HF's YaRN derives its factor from this ratio in some versions:
  // keep the two consistent)
  if (a.rope.type != "none")
    a.max_position_embeddings = std::llround(a.rope.factor * (double)a.rope.original_max_position_embeddings);
  a.activation = m.activation;
  a.swiglu_limit = m.swiglu_limit;
  a.moe = m.moe_enabled;
  a.moe_experts = m.moe_num_experts;
  a.moe_top_k = m.moe_top_k;
  a.moe_hidden_dim = m.moe_hidden_dim;
  a.moe_score = m.moe_score_func;
  a.moe_renormalize = m.moe_renormalize;
  a.moe_shared_expert = m.moe_shared_expert;
  a.moe_router_bias = m.moe_router_bias;
  a.moe_expert_bias = m.moe_expert_bias;
  a.moe_every = m.moe_every;
  a.moe_first_dense = m.moe_first_dense;
  a.moe_aux_loss_coeff = m.moe_aux_loss_coeff;
  a.moe_bias_update_rate = m.moe_bias_update_rate;
  a.moe_route_bias = a.moe && m.moe_bias_update_rate > 0;
  a.tie_embeddings = m.enable_weight_tying;
  a.validate();
  return a;
}

namespace {
int64_t get_or(const json& j, const char* k, int64_t d) {
  return j.contains(k) && !j[k].is_null() ? j[k].get<int64_t>() : d;
}

RopeScaling rope_from_hf(const json& j, int64_t default_original) {
  RopeScaling r;
  r.original_max_position_embeddings = default_original;
  if (!j.contains("rope_scaling") || j["rope_scaling"].is_null()) return r;
  const json& rs = j["rope_scaling"];
  TITAN_CHECK(rs.is_object(), "model config: rope_scaling must be an object or null, got ", rs.dump());
  r.type = rs.value("rope_type", rs.value("type", std::string("default")));
  if (r.type == "default") return RopeScaling{};
  TITAN_CHECK(r.type == "yarn" || r.type == "llama3", "model config: rope_scaling type '", r.type,
              "' is not supported (yarn, llama3)");
  // keys titan would otherwise drop (attention_factor, mscale, ...) are refused, not ignored
  for (auto it = rs.begin(); it != rs.end(); ++it) {
    static const std::vector<std::string> common{"rope_type", "type", "factor", "original_max_position_embeddings"};
    static const std::vector<std::string> yarn{"beta_fast", "beta_slow", "truncate"};
    static const std::vector<std::string> llama{"low_freq_factor", "high_freq_factor"};
    const auto& own = r.type == "yarn" ? yarn : llama;
    TITAN_CHECK(std::find(common.begin(), common.end(), it.key()) != common.end() ||
                    std::find(own.begin(), own.end(), it.key()) != own.end(),
                "model config: rope_scaling key '", it.key(), "' (", r.type, ") is not supported by titan");
  }
  r.factor = rs.value("factor", 1.0);
  r.original_max_position_embeddings = rs.value("original_max_position_embeddings", default_original);
  r.beta_fast = rs.value("beta_fast", r.beta_fast);
  r.beta_slow = rs.value("beta_slow", r.beta_slow);
  r.truncate = rs.value("truncate", true);
  r.low_freq_factor = rs.value("low_freq_factor", r.low_freq_factor);
  r.high_freq_factor = rs.value("high_freq_factor", r.high_freq_factor);
  return r;
}

json rope_to_hf(const RopeScaling& r) {
  if (r.type == "none") return json(nullptr);
  json j = {{"rope_type", r.type}, {"factor", r.factor},
            {"original_max_position_embeddings", r.original_max_position_embeddings}};
  if (r.type == "yarn") {
    j["beta_fast"] = r.beta_fast;
    j["beta_slow"] = r.beta_slow;
    j["truncate"] = r.truncate;
  } else {
    j["low_freq_factor"] = r.low_freq_factor;
    j["high_freq_factor"] = r.high_freq_factor;
  }
  return j;
}

// HF layer_types (full_attention / sliding_attention) -> per-layer windows
void windows_from_hf(const json& j, Args& a, int64_t window, const char* mt) {
  a.layer_window.assign(a.n_layers, 0);
  if (!j.contains("layer_types") || j["layer_types"].is_null()) return;
  const json& lt = j["layer_types"];
  TITAN_CHECK(lt.is_array() && (int64_t)lt.size() == a.n_layers, mt, " config: layer_types must list ", a.n_layers,
              " entries");
  for (int64_t i = 0; i < a.n_layers; ++i) {
    TITAN_CHECK(lt[i] == "sliding_attention" || lt[i] == "full_attention", mt, " config: layer_types[", i, "] is ",
                lt[i].dump(), " (full_attention, sliding_attention)");
    a.layer_window[i] = lt[i] == "sliding_attention" ? window : 0;
  }
}

Args qwen3_from_hf(const json& j, bool moe) {
  const char* mt = moe ? "qwen3_moe" : "qwen3";
  Args a;  // Qwen3Config / Qwen3MoeConfig defaults
  a.family = mt;
  a.vocab_size = j.value("vocab_size", 151936);
  a.dim = j.value("hidden_size", moe ? 2048 : 4096);
  a.hidden_dim = j.value("intermediate_size", moe ? 6144 : 22016);
  a.n_layers = j.value("num_hidden_layers", moe ? 48 : 32);
  a.n_heads = j.value("num_attention_heads", 32);
  a.n_kv_heads = get_or(j, "num_key_value_heads", moe ? 4 : a.n_heads);
  a.head_dim = get_or(j, "head_dim", moe ? a.dim / a.n_heads : 128);
  a.activation = j.value("hidden_act", std::string("silu"));
  a.max_position_embeddings = j.value("max_position_embeddings", 32768);
  a.norm_eps = j.value("rms_norm_eps", 1e-6);
  a.tie_embeddings = j.value("tie_word_embeddings", false);
  a.rope_theta = j.value("rope_theta", 10000.0);
  a.attn_proj_bias = j.value("attention_bias", false);
  a.rope = rope_from_hf(j, a.max_position_embeddings);
  const int64_t sw = get_or(j, "sliding_window", 4096);
  if (j.contains("layer_types")) {
    windows_from_hf(j, a, sw, mt);
  } else {
    a.layer_window.assign(a.n_layers, 0);
    if (j.value("use_sliding_window", false))
      for (int64_t i = j.value("max_window_layers", 28); i < a.n_layers; ++i) a.layer_window[i] = sw;
  }
  if (moe) {
    for (auto w : a.layer_window)
      TITAN_CHECK(w == 0, "qwen3_moe config: sliding-window layers (use_sliding_window / layer_types) are not "
                  "supported in a Qwen3-MoE checkpoint");
    a.moe = true;
    a.moe_experts = j.value("num_experts", 128);
    a.moe_top_k = j.value("num_experts_per_tok", 8);
    a.moe_hidden_dim = j.value("moe_intermediate_size", 768);
    a.moe_renormalize = j.value("norm_topk_prob", false);
    a.moe_every = j.value("decoder_sparse_step", 1);
    const json mlp_only = j.value("mlp_only_layers", json::array());
    for (size_t i = 0; i < mlp_only.size(); ++i)
      TITAN_CHECK(mlp_only[i].get<int64_t>() == (int64_t)i, "qwen3_moe config: mlp_only_layers ", mlp_only.dump(),
                  " is supported as the first k layers [0, ..., k-1] only");
    a.moe_first_dense = (int64_t)mlp_only.size();
  }
  // titan 0.8's ablation keys (exports before the titan_decoder block)
  a.qk_norm = j.value("titan_qk_norm", true);
  a.norm_type = j.value("titan_norm_type", std::string("rmsnorm"));
  if (j.contains("titan_moe")) {  // its experts were written stacked: titan's layout
    const json& m = j["titan_moe"];
    a.moe = true;
    a.titan_layout = true;
    a.moe_experts = m.value("num_experts", a.moe_experts);
    a.moe_top_k = m.value("top_k", a.moe_top_k);
    a.moe_hidden_dim = m.value("hidden_dim", a.moe_hidden_dim);
    a.moe_score = m.value("score_func", a.moe_score);
    a.moe_renormalize = m.value("renormalize", a.moe_renormalize);
    a.moe_shared_expert = m.value("shared_expert", a.moe_shared_expert);
  }
  return a;
}

Args gpt_oss_from_hf(const json& j) {
  Args a;  // GptOssConfig defaults
  a.family = "gpt_oss";
  a.vocab_size = j.value("vocab_size", 201088);
  a.dim = j.value("hidden_size", 2880);
  a.n_layers = j.value("num_hidden_layers", 36);
  a.n_heads = j.value("num_attention_heads", 64);
  a.n_kv_heads = j.value("num_key_value_heads", 8);
  a.head_dim = get_or(j, "head_dim", 64);
  a.moe = true;
  a.moe_hidden_dim = a.hidden_dim = j.value("intermediate_size", 2880);
  a.moe_experts = j.value("num_local_experts", 128);
  a.moe_top_k = j.value("num_experts_per_tok", 4);
  a.moe_router_bias = a.moe_expert_bias = a.attn_proj_bias = a.attn_sinks = true;
  a.qk_norm = false;
  a.activation = "oai_swiglu";
  a.swiglu_limit = j.value("swiglu_limit", 7.0);
  a.rope_theta = j.value("rope_theta", 150000.0);
  a.norm_eps = j.value("rms_norm_eps", 1e-5);
  a.max_position_embeddings = j.value("max_position_embeddings", 131072);
  a.tie_embeddings = j.value("tie_word_embeddings", false);
  a.rope = RopeScaling{"yarn", 32.0, 4096, 32.0, 1.0, false};
  if (j.contains("rope_scaling") && j["rope_scaling"].is_object()) a.rope = rope_from_hf(j, 4096);
  const int64_t sw = j.value("sliding_window", 128);
  if (j.contains("layer_types") && !j["layer_types"].is_null()) {
    windows_from_hf(j, a, sw, "gpt_oss");
  } else {  // HF's default: layer 0 sliding, alternating
    a.layer_window.assign(a.n_layers, 0);
    for (int64_t i = 0; i < a.n_layers; i += 2) a.layer_window[i] = sw;
  }
  return a;
}

Args llama_from_hf(const json& j) {
  Args a;  // LlamaConfig defaults
  a.family = "llama3";
  a.vocab_size = j.value("vocab_size", 32000);
  a.dim = j.value("hidden_size", 4096);
  a.hidden_dim = j.value("intermediate_size", 11008);
  a.n_layers = j.value("num_hidden_layers", 32);
  a.n_heads = j.value("num_attention_heads", 32);
  a.n_kv_heads = get_or(j, "num_key_value_heads", a.n_heads);
  a.head_dim = get_or(j, "head_dim", a.dim / a.n_heads);
  a.activation = j.value("hidden_act", std::string("silu"));
  a.max_position_embeddings = j.value("max_position_embeddings", 2048);
  a.norm_eps = j.value("rms_norm_eps", 1e-6);
  a.tie_embeddings = j.value("tie_word_embeddings", false);
  a.rope_theta = j.value("rope_theta", 10000.0);
  a.attn_proj_bias = j.value("attention_bias", false);
  TITAN_CHECK(!j.value("mlp_bias", false), "llama config: mlp_bias true is not supported");
  a.qk_norm = false;
  a.rope = rope_from_hf(j, a.max_position_embeddings);
  a.layer_window.assign(a.n_layers, 0);
  return a;
}
}  // namespace

Args Args::from_hf_json(const std::string& text) {
  json j;
  try {
    j = json::parse(text);
  } catch (const std::exception& e) {
    fail("model config: the HF config.json content is not valid JSON: ", e.what());
  }
  const std::string mt = j.value("model_type", std::string("qwen3"));
  Args a;
  if (mt == "titan_decoder" && j.contains("titan_decoder")) {
    try {
      a = j["titan_decoder"].get<Args>();
      a.titan_layout = true;
    } catch (const std::exception& e) {
      fail("model config: the titan_decoder block is malformed: ", e.what());
    }
  } else {
    const std::string fam = hf_model_family(j, "qwen3");  // titan 0.8's titan_decoder names its base family
    if (fam == "qwen3" || fam == "qwen3_moe") a = qwen3_from_hf(j, fam == "qwen3_moe");
    else if (fam == "gpt_oss") a = gpt_oss_from_hf(j);
    else if (fam == "llama") a = llama_from_hf(j);
    else fail("model config: model_type '", fam, "' is not supported (qwen3, qwen3_moe, gpt_oss, llama, titan_decoder)");
    a.attn = attention_from_hf(j);
    if (mt == "titan_decoder") a.titan_layout = true;  // titan 0.8's titan_decoder (titan_attention)
  }
  a.validate();
  return a;
}

std::string Args::hf_architecture(std::string* why) const {
  auto no = [&](const std::string& w) {
    if (why) *why = w;
    return std::string();
  };
  if (titan_layout) {  // the first reason that made it titan's, else the file's own layout
    Args plain = *this;
    plain.titan_layout = false;
    std::string w;
    return no(plain.hf_architecture(&w).empty() ? w : "read from a titan_decoder config: its tensors are in titan's layout");
  }
  if (moe && moe_route_bias)
    return no("auxiliary-loss-free balancing: the expert biases that steer its routing have no place in the HF "
              "class (titan's layout keeps them)");
  if (!attn.is_default()) return no("attention variant " + attn.describe() + " (no HF class has it)");
  if (norm_type != "rmsnorm") return no("norm_type " + norm_type);
  bool sliding = false, uniform = true;
  for (auto w : layer_window) {
    sliding = sliding || w > 0;
    uniform = uniform && (w == 0 || w == *std::max_element(layer_window.begin(), layer_window.end()));
  }
  if (!uniform) return no("sliding layers with different windows");
  if (family == "gpt_oss") {
    if (!(moe && !any_dense_layer() && !qk_norm && attn_proj_bias && attn_sinks && activation == "oai_swiglu" &&
          swiglu_limit > 0 && moe_router_bias && moe_expert_bias && moe_score == "softmax" && moe_renormalize &&
          !moe_shared_expert && rope.type == "yarn"))
      return no("a gpt_oss ablation (GptOssForCausalLM fixes: MoE every layer, no qk_norm, projection biases, sinks, "
                "oai_swiglu with a limit, router and expert biases, softmax top-k renormalized, YaRN)");
    return "GptOssForCausalLM";
  }
  if (attn_sinks) return no("attention sinks outside gpt_oss");
  if (activation == "oai_swiglu" || swiglu_limit > 0) return no("gpt-oss's clamped activation outside gpt_oss");
  if (moe) {
    if (!qk_norm) return no("MoE without qk_norm");
    if (moe_score != "softmax" || moe_shared_expert || moe_router_bias || moe_expert_bias)
      return no("a router or experts Qwen3-MoE does not have (sigmoid scores, shared expert or biases)");
    if (sliding) return no("sliding layers in a MoE model");
    return "Qwen3MoeForCausalLM";
  }
  if (qk_norm) return "Qwen3ForCausalLM";
  if (sliding) return no("sliding layers without qk_norm");
  return "LlamaForCausalLM";
}

std::string Args::to_hf_json() const {
  std::string why;
  const std::string arch = hf_architecture(&why);
  json j;
  j["architectures"] = {arch.empty() ? "TitanDecoderForCausalLM" : arch};
  j["model_type"] = arch == "Qwen3ForCausalLM"      ? "qwen3"
                    : arch == "Qwen3MoeForCausalLM" ? "qwen3_moe"
                    : arch == "GptOssForCausalLM"   ? "gpt_oss"
                    : arch == "LlamaForCausalLM"    ? "llama"
                                                    : "titan_decoder";
  j["vocab_size"] = vocab_size;
  j["hidden_size"] = dim;
  j["intermediate_size"] = family == "gpt_oss" ? moe_hidden_dim : hidden_dim;
  j["num_hidden_layers"] = n_layers;
  j["num_attention_heads"] = n_heads;
  j["num_key_value_heads"] = n_kv_heads;
  j["head_dim"] = head_dim;
  j["hidden_act"] = activation == "oai_swiglu" ? "silu" : activation;
  // scaled RoPE: factor x original, so every HF version derives the same YaRN factor
  j["max_position_embeddings"] = rope.type == "none" ? max_position_embeddings
                                                     : std::llround(rope.factor * rope.original_max_position_embeddings);
  j["rms_norm_eps"] = norm_eps;
  j["rope_theta"] = rope_theta;
  j["rope_scaling"] = rope_to_hf(rope);
  j["tie_word_embeddings"] = tie_embeddings;
  j["attention_bias"] = attn_proj_bias;
  j["attention_dropout"] = 0.0;
  j["initializer_range"] = 0.02;
  int64_t sw = 0;
  json lt = json::array();
  for (auto w : layer_window) {
    lt.push_back(w > 0 ? "sliding_attention" : "full_attention");
    sw = std::max(sw, w);
  }
  j["layer_types"] = lt;
  j["torch_dtype"] = "float32";  // export_hf_folder writes what it stored
  if (arch == "Qwen3ForCausalLM") {
    j["use_sliding_window"] = sw > 0;
    j["sliding_window"] = sw > 0 ? json(sw) : json(nullptr);
    j["max_window_layers"] = n_layers;
  } else if (arch == "Qwen3MoeForCausalLM") {
    j["num_experts"] = moe_experts;
    j["num_experts_per_tok"] = moe_top_k;
    j["moe_intermediate_size"] = moe_hidden_dim;
    j["norm_topk_prob"] = moe_renormalize;
    j["decoder_sparse_step"] = moe_every;
    json mlp_only = json::array();
    for (int64_t i = 0; i < moe_first_dense; ++i) mlp_only.push_back(i);
    j["mlp_only_layers"] = mlp_only;
    j["use_sliding_window"] = false;
    j["sliding_window"] = nullptr;
    j["router_aux_loss_coef"] = moe_aux_loss_coeff;
    j["output_router_logits"] = false;
  } else if (arch == "GptOssForCausalLM") {
    j["num_local_experts"] = moe_experts;
    j["num_experts_per_tok"] = moe_top_k;
    j["experts_per_token"] = moe_top_k;
    j["sliding_window"] = sw > 0 ? sw : 128;
    j["swiglu_limit"] = swiglu_limit;
  } else if (arch == "LlamaForCausalLM") {
    j["mlp_bias"] = false;
    j.erase("layer_types");
  } else {
    j["titan_decoder"] = *this;
    j["titan_not_hf_because"] = why;
  }
  return j.dump(2);
}

void Args::validate() const {
  TITAN_CHECK(family == "qwen3" || family == "qwen3_moe" || family == "gpt_oss" || family == "llama3",
              "decoder: family '", family, "' is not one of qwen3, qwen3_moe, gpt_oss, llama3");
  TITAN_CHECK(dim > 0 && n_layers > 0 && n_heads > 0 && n_kv_heads > 0 && head_dim > 0 && vocab_size > 0 &&
                  (hidden_dim > 0 || !any_dense_layer()) && (!moe || (moe_hidden_dim > 0 && moe_experts > 0)),
              "decoder: every size must be > 0 (dim ", dim, ", n_layers ", n_layers, ", n_heads ", n_heads,
              ", n_kv_heads ", n_kv_heads, ", head_dim ", head_dim, ", hidden_dim ", hidden_dim, ", vocab_size ",
              vocab_size, ", moe_hidden_dim ", moe_hidden_dim, ", experts ", moe_experts, ")");
  TITAN_CHECK(n_heads % n_kv_heads == 0, "decoder: n_heads ", n_heads, " must be a multiple of n_kv_heads ", n_kv_heads);
  TITAN_CHECK(head_dim % 2 == 0, "decoder: head_dim must be even (RoPE), got ", head_dim);
  TITAN_CHECK(activation == "silu" || activation == "gelu" || activation == "oai_swiglu", "decoder: activation '",
              activation, "' not supported (silu, gelu, oai_swiglu)");
  TITAN_CHECK(swiglu_limit >= 0, "decoder: swiglu_limit must be >= 0, got ", swiglu_limit);
  TITAN_CHECK(norm_type == "rmsnorm" || norm_type == "layernorm", "decoder: norm_type '", norm_type,
              "' not supported (rmsnorm, layernorm)");
  TITAN_CHECK(norm_eps > 0 && rope_theta > 0, "decoder: norm_eps and rope_theta must be > 0");
  TITAN_CHECK(rope.type == "none" || rope.type == "yarn" || rope.type == "llama3", "decoder: rope scaling '", rope.type,
              "' not supported (none, yarn, llama3)");
  TITAN_CHECK(!moe || (moe_top_k >= 1 && moe_top_k <= moe_experts), "decoder: moe_top_k = ", moe_top_k,
              " must be in [1, moe_num_experts = ", moe_experts, "]");
  TITAN_CHECK(!moe || moe_score == "softmax" || moe_score == "sigmoid", "decoder: moe_score_func '", moe_score,
              "' not supported (softmax, sigmoid)");
  TITAN_CHECK(moe_every >= 1 && moe_first_dense >= 0, "decoder: moe_every >= 1 and moe_first_dense >= 0 needed");
  TITAN_CHECK((int64_t)layer_window.size() == n_layers, "decoder: layer_window has ", layer_window.size(),
              " entries for ", n_layers, " layers");
  check_attention_layers(attn, layer_window, family.c_str());
}

namespace {
int64_t expert_params(const Args& a) {
  return 3 * a.dim * a.moe_hidden_dim + (a.moe_expert_bias ? 2 * a.moe_hidden_dim + a.dim : 0);
}
}  // namespace

int64_t Args::num_params() const {
  const int64_t norm = norm_type == "layernorm" ? 2 * dim : dim;
  const int64_t qk = qk_norm ? (norm_type == "layernorm" ? 4 : 2) * head_dim : 0;
  const int64_t attn_p = dim * n_heads * head_dim * 2 + dim * n_kv_heads * head_dim * 2 +
                         (attn_proj_bias ? n_heads * head_dim + 2 * n_kv_heads * head_dim + dim : 0) +
                         (attn_sinks ? n_heads : 0) + qk + attention_bias_params(attn, n_heads);
  int64_t total = 0;
  for (int64_t i = 0; i < n_layers; ++i) {
    int64_t mlp = 3 * dim * hidden_dim;
    if (is_moe_layer(i))
      mlp = dim * moe_experts + (moe_router_bias ? moe_experts : 0) + moe_experts * expert_params(*this) +
            (moe_shared_expert ? 3 * dim * moe_hidden_dim : 0);
    total += attn_p + 2 * norm + mlp;
  }
  return total + norm + vocab_size * dim * (tie_embeddings ? 1 : 2);
}

int64_t Args::num_active_params() const {
  int64_t idle = 0;
  for (int64_t i = 0; i < n_layers; ++i)
    if (is_moe_layer(i)) idle += (moe_experts - moe_top_k) * expert_params(*this);
  return num_params() - idle - num_embedding_params();
}

int64_t Args::num_matmul_params() const {
  const int64_t attn_mm = dim * n_heads * head_dim * 2 + dim * n_kv_heads * head_dim * 2;  // q, o, k, v
  int64_t total = 0;
  for (int64_t i = 0; i < n_layers; ++i)
    total += attn_mm + (is_moe_layer(i) ? dim * moe_experts + (moe_top_k + (moe_shared_expert ? 1 : 0)) * 3 * dim *
                                                                    moe_hidden_dim
                                        : 3 * dim * hidden_dim);
  return total + vocab_size * dim;  // + lm_head
}

double Args::flops_per_token(int64_t seq_len) const {
  double attn_f = 0;
  for (auto w : layer_window)
    attn_f += 12.0 * n_heads * head_dim * (double)(w > 0 ? std::min(w, seq_len) : seq_len);
  return 6.0 * (double)num_matmul_params() + attn_f;
}

std::string Args::describe() const {
  std::string ffn = "ffn " + std::to_string(hidden_dim);
  if (moe) {
    int64_t n_moe = 0;
    for (int64_t i = 0; i < n_layers; ++i) n_moe += is_moe_layer(i);
    ffn = std::to_string(moe_experts) + " experts (top-" + std::to_string(moe_top_k) + ", " + moe_score +
          (moe_shared_expert ? ", + shared" : "") + ") x ffn " + std::to_string(moe_hidden_dim) +
          (n_moe < n_layers ? " in " + std::to_string(n_moe) + " layers, dense ffn " + std::to_string(hidden_dim)
                            : "");
  }
  std::string s = family + ": " + std::to_string(n_layers) + " layers, dim " + std::to_string(dim) + ", heads " +
                  std::to_string(n_heads) + "/" + std::to_string(n_kv_heads) + " x " + std::to_string(head_dim) +
                  ", " + ffn + ", vocab " + std::to_string(vocab_size);
  if (moe) s += "; " + std::to_string(num_params()) + " parameters, " + std::to_string(num_active_params()) + " active";
  return s;
}

}  // namespace titan::decoder
