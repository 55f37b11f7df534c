// models/decoder/hf_config.cpp — Args to and from Hugging Face's config.json (the classes' own fields, HF's
// defaults for absent ones), and titan_decoder's block for configurations no HF class represents.
#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <nlohmann/json.hpp>

#include "models/decoder/args.h"
#include "models/decoder/presets.h"
#include "src/config/untrusted_json.h"
#include "src/tensor/error.h"

namespace titan::decoder {

using json = nlohmann::json;

namespace {
bool has(const json& j, const char* k) { return j.contains(k) && !j[k].is_null(); }

int64_t int_value(const json& j, const char* key, int64_t dflt) { return has(j, key) ? json_int(j[key], key) : dflt; }

// Every number of the file within what titan reads: a float beyond 2^63 would be undefined behaviour wherever a
// field is read as an integer (nlohmann casts); refused up front, naming where it is.
void check_numbers(const json& v, const std::string& at) {
  if (v.is_number_float())
    TITAN_CHECK(std::fabs(v.get<double>()) < 9.2e18, "model config: ", at.empty() ? "a value" : at, " = ", v.dump(),
                " is beyond what titan reads (|x| < 9.2e18)");
  if (v.is_object())
    for (auto it = v.begin(); it != v.end(); ++it) check_numbers(it.value(), at.empty() ? it.key() : at + "." + it.key());
  if (v.is_array())
    for (size_t i = 0; i < v.size(); ++i) check_numbers(v[i], at + "[" + std::to_string(i) + "]");
}

// The knobs an HF class stores as config.json fields: knob, field (its knobs.def HF field unless the class names
// it otherwise) and whether import reads it (false: the class fixes the value, which export still writes). One
// table for both directions: import reads these rows, export writes them; what is not a plain knob (RoPE
// scaling, layer types, max_position_embeddings, the class's fixed extras) is written by hand below.
struct HfField {
  const char* knob;
  const char* field = "";  // "": the knob's knobs.def HF field
  bool read = true;
};
std::vector<HfField> class_fields(HfClass c) {
  const bool oss = c == HfClass::gpt_oss, mixtral = c == HfClass::mixtral, gemma3 = c == HfClass::gemma3;
  if (c == HfClass::deepseek_v3)  // DeepseekV3Config: head_dim is derived (qk_rope_head_dim), q_lora_rank by hand
    return {{"vocab_size"},        {"dim"},
            {"n_layers"},          {"n_heads"},
            {"n_kv_heads"},        {"norm_eps"},
            {"enable_weight_tying"}, {"rope_theta"},
            {"hidden_dim"},        {"activation"},
            {"attn_proj_bias"},    {"kv_lora_rank"},
            {"qk_nope_head_dim"},  {"qk_rope_head_dim"},
            {"v_head_dim"},        {"rope_interleave"},
            {"moe_num_experts", "n_routed_experts"}, {"moe_top_k"},
            {"moe_hidden_dim"},    {"moe_renormalize"},
            {"moe_first_dense", "first_k_dense_replace"}, {"moe_shared_expert_width"},
            {"moe_n_group"},       {"moe_topk_group"},
            {"moe_routed_scale"}};
  if (c == HfClass::llama4)  // Llama4TextConfig: the dense layers' size is intermediate_size_mlp, the experts'
                             // intermediate_size; the NoPE layers, the temperature switch and the MoE layers by hand
    return {{"vocab_size"},   {"dim"},      {"n_layers"},            {"n_heads"},   {"n_kv_heads"},
            {"head_dim"},     {"norm_eps"}, {"enable_weight_tying"}, {"rope_theta"},
            {"hidden_dim", "intermediate_size_mlp"}, {"moe_hidden_dim", "intermediate_size"},
            {"activation"},   {"attn_proj_bias"}, {"moe_num_experts", "num_local_experts"}, {"moe_top_k"},
            {"moe_every", "interleave_moe_layer_step"}, {"qk_l2_norm"}, {"nope_floor_scale"}};
  std::vector<HfField> f = {{"vocab_size"}, {"dim"},      {"n_layers"},            {"n_heads"},   {"n_kv_heads"},
                            {"head_dim"},   {"norm_eps"}, {"enable_weight_tying"}, {"rope_theta"}};
  // GptOssConfig's and MixtralConfig's intermediate_size is the experts' size (no layer is dense); gpt-oss fixes
  // the activation, both the projections' biases
  f.push_back(oss || mixtral ? HfField{"moe_hidden_dim", "intermediate_size"} : HfField{"hidden_dim"});
  f.push_back({"activation", gemma3 ? "hidden_activation" : "", !oss});
  f.push_back({"attn_proj_bias", "", !oss && !mixtral});
  if (c == HfClass::qwen3_moe)
    f.insert(f.end(), {{"moe_num_experts"}, {"moe_top_k"}, {"moe_hidden_dim"}, {"moe_renormalize"}, {"moe_every"}});
  if (mixtral) f.insert(f.end(), {{"moe_num_experts", "num_local_experts"}, {"moe_top_k"}});
  if (gemma3) f.insert(f.end(), {{"query_pre_attn_scalar"}, {"rope_local_theta"}});
  if (oss)
    f.insert(f.end(), {{"moe_num_experts", "num_local_experts"}, {"moe_top_k"},
                       {"moe_top_k", "experts_per_token", false}, {"swiglu_limit"}});
  return f;
}
std::string field_of(const HfField& f) { return *f.field ? f.field : find_knob(f.knob)->hf; }

// Every knob of the class whose field the file gives (null: HF's "unset", the default stays).
void read_hf_fields(const json& j, HfClass c, Args& a) {
  for (const HfField& f : class_fields(c))
    if (f.read && has(j, field_of(f).c_str())) find_knob(f.knob)->from_json(j, a, field_of(f));
}

// mscale: DeepSeek's YaRN keys (its attention scales the scores by them too), read only for deepseek_v3
RopeScaling rope_from_hf(const json& j, int64_t default_original, bool mscale = false) {
  RopeScaling r;
  r.original_max_position_embeddings = default_original;
  if (!has(j, "rope_scaling")) return r;
  const json& rs = j["rope_scaling"];
  TITAN_CHECK(rs.is_object(), "model config: rope_scaling must be an object or null, got ", rs.dump());
  const std::string type = rs.value("rope_type", rs.value("type", std::string("default")));
  if (type == "default") return RopeScaling{};
  TITAN_CHECK(type == "yarn" || type == "llama3" || type == "linear", "model config: rope_scaling type '", type,
              "' is not supported (yarn, llama3, linear)");
  r.type = type == "yarn" ? RopeScalingType::yarn : type == "llama3" ? RopeScalingType::llama3 : RopeScalingType::linear;
  // keys titan would otherwise drop (attention_factor, mscale, ...) are refused, not ignored
  for (auto it = rs.begin(); it != rs.end(); ++it) {
    static const std::vector<std::string> common{"rope_type", "type", "factor", "original_max_position_embeddings"};
    static const std::vector<std::string> yarn{"beta_fast", "beta_slow", "truncate"};
    if (mscale && r.type == RopeScalingType::yarn && (it.key() == "mscale" || it.key() == "mscale_all_dim")) continue;
    static const std::vector<std::string> llama{"low_freq_factor", "high_freq_factor"};
    static const std::vector<std::string> linear{};
    const auto& own = r.type == RopeScalingType::yarn ? yarn : r.type == RopeScalingType::llama3 ? llama : linear;
    TITAN_CHECK(std::find(common.begin(), common.end(), it.key()) != common.end() ||
                    std::find(own.begin(), own.end(), it.key()) != own.end(),
                "model config: rope_scaling key '", it.key(), "' (", type, ") is not supported by titan");
  }
  r.factor = rs.value("factor", 1.0);
  r.original_max_position_embeddings = int_value(rs, "original_max_position_embeddings", default_original);
  r.beta_fast = rs.value("beta_fast", r.beta_fast);
  r.beta_slow = rs.value("beta_slow", r.beta_slow);
  r.truncate = rs.value("truncate", true);
  r.mscale = rs.value("mscale", 0.0);
  r.mscale_all_dim = rs.value("mscale_all_dim", 0.0);
  TITAN_CHECK(r.mscale >= 0 && r.mscale_all_dim >= 0, "model config: rope_scaling mscale ", r.mscale,
              " and mscale_all_dim ", r.mscale_all_dim, " must be >= 0");
  r.low_freq_factor = rs.value("low_freq_factor", r.low_freq_factor);
  r.high_freq_factor = rs.value("high_freq_factor", r.high_freq_factor);
  return r;
}

void set_rope(Args& a, const RopeScaling& r) {
  a.rope_scaling_type = r.type;
  a.rope_scaling_factor = r.factor;
  a.rope_original_max_position_embeddings = r.original_max_position_embeddings;
  a.rope_yarn_beta_fast = r.beta_fast;
  a.rope_yarn_beta_slow = r.beta_slow;
  a.rope_yarn_truncate = r.truncate;
  a.rope_yarn_mscale = r.mscale;
  a.rope_yarn_mscale_all_dim = r.mscale_all_dim;
  a.rope_low_freq_factor = r.low_freq_factor;
  a.rope_high_freq_factor = r.high_freq_factor;
}

json rope_to_hf(const RopeScaling& r) {
  if (r.type == RopeScalingType::none) return json(nullptr);
  json j = {{"rope_type", r.type}, {"factor", r.factor}};
  if (r.type == RopeScalingType::linear) return j;
  j["original_max_position_embeddings"] = r.original_max_position_embeddings;
  if (r.type == RopeScalingType::yarn) {
    j["beta_fast"] = r.beta_fast;
    j["beta_slow"] = r.beta_slow;
    j["truncate"] = r.truncate;
    if (r.mscale > 0) j["mscale"] = r.mscale;
    if (r.mscale_all_dim > 0) j["mscale_all_dim"] = r.mscale_all_dim;
  } else {
    j["low_freq_factor"] = r.low_freq_factor;
    j["high_freq_factor"] = r.high_freq_factor;
  }
  return j;
}

// HF layer_types (full_attention / sliding_attention) -> per-layer windows
void windows_from_hf(const json& j, Args& a, int64_t window, const char* mt) {
  a.layer_window.assign(a.n_layers, 0);
  if (!has(j, "layer_types")) return;
  const json& lt = j["layer_types"];
  TITAN_CHECK(lt.is_array() && (int64_t)lt.size() == a.n_layers, mt, " config: layer_types must list ", a.n_layers,
              " entries");
  for (int64_t i = 0; i < a.n_layers; ++i) {
    TITAN_CHECK(lt[i] == "sliding_attention" || lt[i] == "full_attention", mt, " config: layer_types[", i, "] is ",
                lt[i].dump(), " (full_attention, sliding_attention)");
    a.layer_window[i] = lt[i] == "sliding_attention" ? window : 0;
  }
}

// titan 0.8's titan_attention block (an attention variant on an HF family)
void attention_from_hf(const json& j, Args& a) {
  if (!j.contains("titan_attention")) return;
  const auto& v = j["titan_attention"];
  TITAN_CHECK(v.is_object(), "model config: titan_attention must be an object, got ", v.dump());
  a.attn_mask_type = v.value("mask", a.attn_mask_type);
  a.attn_prefix_len = int_value(v, "prefix_len", a.attn_prefix_len);
  a.attn_logit_softcap = v.value("logit_softcap", a.attn_logit_softcap);
  a.attn_bias = v.value("bias", a.attn_bias);
  a.attn_relative_max_distance = int_value(v, "relative_max_distance", a.attn_relative_max_distance);
}

Args qwen3_from_hf(const json& j, bool moe) {
  const char* mt = moe ? "qwen3_moe" : "qwen3";
  Args a = hf_defaults(moe ? Family::qwen3_moe : Family::qwen3);
  read_hf_fields(j, moe ? HfClass::qwen3_moe : HfClass::qwen3, a);
  if (!has(j, "num_key_value_heads")) a.n_kv_heads = moe ? 4 : a.n_heads;
  if (!has(j, "head_dim")) a.head_dim = moe ? a.dim / a.n_heads : 128;
  set_rope(a, rope_from_hf(j, a.max_position_embeddings = int_value(j, "max_position_embeddings", 32768)));
  const int64_t sw = int_value(j, "sliding_window", 4096);
  if (j.contains("layer_types")) {
    windows_from_hf(j, a, sw, mt);
  } else {
    a.layer_window.assign(a.n_layers, 0);
    if (j.value("use_sliding_window", false))
      for (int64_t i = std::max<int64_t>(int_value(j, "max_window_layers", 28), 0); i < a.n_layers; ++i) a.layer_window[i] = sw;
  }
  if (moe) {
    for (auto w : a.layer_window)
      TITAN_CHECK(w == 0, "qwen3_moe config: sliding-window layers (use_sliding_window / layer_types) are not "
                  "supported in a Qwen3-MoE checkpoint");
    const json mlp_only = j.value("mlp_only_layers", json::array());
    for (size_t i = 0; i < mlp_only.size(); ++i)
      TITAN_CHECK(json_int(mlp_only[i], "mlp_only_layers[" + std::to_string(i) + "]") == (int64_t)i, "qwen3_moe config: mlp_only_layers ", mlp_only.dump(),
                  " is supported as the first k layers [0, ..., k-1] only");
    a.moe_first_dense = (int64_t)mlp_only.size();
  }
  // titan 0.8's ablation keys (exports before the titan_decoder block)
  a.qk_norm = j.value("titan_qk_norm", true);
  a.norm_type = j.value("titan_norm_type", nn::NormKind::rmsnorm);
  if (j.contains("titan_moe")) {  // its experts were written stacked: titan's layout
    const json& m = j["titan_moe"];
    a.moe_enabled = true;
    a.titan_layout = true;
    a.moe_num_experts = int_value(m, "num_experts", a.moe_num_experts);
    a.moe_top_k = int_value(m, "top_k", a.moe_top_k);
    a.moe_hidden_dim = int_value(m, "hidden_dim", a.moe_hidden_dim);
    a.moe_score_func = m.value("score_func", a.moe_score_func);
    a.moe_renormalize = m.value("renormalize", a.moe_renormalize);
    a.moe_shared_expert = m.value("shared_expert", a.moe_shared_expert);
  }
  return a;
}

Args gpt_oss_from_hf(const json& j) {
  Args a = hf_defaults(Family::gpt_oss);
  read_hf_fields(j, HfClass::gpt_oss, a);
  // what GptOssForCausalLM fixes, whatever the file says
  a.hidden_dim = a.moe_hidden_dim;  // no dense layer: hidden_dim names the experts' size (as a gpt_oss YAML's)
  a.moe_enabled = a.moe_router_bias = a.moe_expert_bias = a.attn_proj_bias = a.attn_sinks = true;
  a.qk_norm = false;
  a.activation = Activation::oai_swiglu;
  a.max_position_embeddings = int_value(j, "max_position_embeddings", 131072);
  if (j.contains("rope_scaling") && j["rope_scaling"].is_object()) set_rope(a, rope_from_hf(j, 4096));
  const int64_t sw = int_value(j, "sliding_window", 128);
  if (has(j, "layer_types")) {
    windows_from_hf(j, a, sw, "gpt_oss");
  } else {  // HF's default: layer 0 sliding, alternating
    a.layer_window.assign(a.n_layers, 0);
    for (int64_t i = 0; i < a.n_layers; i += 2) a.layer_window[i] = sw;
  }
  return a;
}

Args llama_from_hf(const json& j) {
  Args a = hf_defaults(Family::llama3);
  read_hf_fields(j, HfClass::llama, a);
  if (!has(j, "num_key_value_heads")) a.n_kv_heads = a.n_heads;
  if (!has(j, "head_dim")) a.head_dim = a.dim / a.n_heads;
  TITAN_CHECK(!j.value("mlp_bias", false), "llama config: mlp_bias true is not supported");
  a.qk_norm = false;
  set_rope(a, rope_from_hf(j, a.max_position_embeddings = int_value(j, "max_position_embeddings", 2048)));
  a.layer_window.assign(a.n_layers, 0);
  return a;
}

Args olmo2_from_hf(const json& j) {
  Args a = hf_defaults(Family::olmo2);
  read_hf_fields(j, HfClass::olmo2, a);
  // what Olmo2ForCausalLM fixes: QK-norm over the whole projections, norms after the sublayers, no sliding
  a.qk_norm = true;
  a.qk_norm_scope = QkNormScope::projection;
  a.norm_placement = NormPlacement::post;
  if (!has(j, "num_key_value_heads")) a.n_kv_heads = a.n_heads;  // Olmo2Config: None -> the heads
  if (!has(j, "head_dim")) a.head_dim = a.dim / a.n_heads;
  set_rope(a, rope_from_hf(j, a.max_position_embeddings = int_value(j, "max_position_embeddings", 2048)));
  a.layer_window.assign(a.n_layers, 0);
  return a;
}

// A softcap field: null (HF's "none") or a positive number.
double softcap_from_hf(const json& j, const char* field) {
  if (!has(j, field)) return 0.0;
  TITAN_CHECK(j[field].is_number() && j[field].get<double>() > 0, "gemma3 config: ", field, " = ", j[field].dump(),
              " must be a positive number or null");
  return j[field].get<double>();
}

Args gemma3_from_hf(const json& j) {
  Args a = hf_defaults(Family::gemma3);
  read_hf_fields(j, HfClass::gemma3, a);
  // what Gemma3ForCausalLM fixes: sandwich norms of 1 + weight, per-head QK-norm, embeddings times sqrt(dim)
  a.qk_norm = a.norm_unit_offset = true;
  a.qk_norm_scope = QkNormScope::head;
  a.norm_placement = NormPlacement::sandwich;
  a.embed_scale = 0.0;
  if (!has(j, "num_key_value_heads")) a.n_kv_heads = 4;
  TITAN_CHECK(!j.value("use_bidirectional_attention", false),
              "gemma3 config: use_bidirectional_attention true (an encoder's mask) is not supported");
  a.final_logit_softcap = softcap_from_hf(j, "final_logit_softcapping");
  a.attn_logit_softcap = softcap_from_hf(j, "attn_logit_softcapping");
  set_rope(a, rope_from_hf(j, a.max_position_embeddings = int_value(j, "max_position_embeddings", 131072)));
  const int64_t sw = int_value(j, "sliding_window", 4096);
  TITAN_CHECK(sw > 0, "gemma3 config: sliding_window ", sw, " must be > 0");
  if (has(j, "layer_types")) {
    windows_from_hf(j, a, sw, "gemma3");
  } else {  // Gemma3TextConfig: sliding_window_pattern (6): every 6th layer full
    const int64_t every = int_value(j, "sliding_window_pattern", 6);
    TITAN_CHECK(every > 0, "gemma3 config: sliding_window_pattern ", every, " must be > 0");
    a.layer_window.assign(a.n_layers, 0);
    for (int64_t i = 0; i < a.n_layers; ++i) a.layer_window[i] = (i + 1) % every ? sw : 0;
  }
  return a;
}

Args mixtral_from_hf(const json& j) {
  Args a = hf_defaults(Family::mixtral);
  read_hf_fields(j, HfClass::mixtral, a);
  // what MixtralForCausalLM fixes, whatever the file says: every layer MoE, softmax top-k renormalized, no biases
  a.hidden_dim = a.moe_hidden_dim;
  a.moe_enabled = a.moe_renormalize = true;
  a.qk_norm = a.attn_proj_bias = false;
  if (!has(j, "num_key_value_heads")) a.n_kv_heads = 8;  // MixtralConfig's default (null: the heads)
  if (j.contains("num_key_value_heads") && j["num_key_value_heads"].is_null()) a.n_kv_heads = a.n_heads;
  if (!has(j, "head_dim")) a.head_dim = a.dim / a.n_heads;
  a.max_position_embeddings = int_value(j, "max_position_embeddings", 4096 * 32);
  // what titan's MixtralForCausalLM export could not write back (it would load as titan_decoder with stacked
  // experts, and the file's per-expert tensors would not load): refused, not dropped
  TITAN_CHECK(a.activation == Activation::silu, "mixtral config: hidden_act '", config::enum_name(a.activation),
              "' is not supported for MixtralForCausalLM (silu)");
  TITAN_CHECK(!has(j, "rope_scaling") || rope_from_hf(j, 0).type == RopeScalingType::none,
              "mixtral config: rope_scaling is not supported for MixtralForCausalLM; drop it or use a titan_decoder config");
  TITAN_CHECK(!has(j, "router_jitter_noise") || j["router_jitter_noise"] == 0,
              "mixtral config: router_jitter_noise ", j.value("router_jitter_noise", json()).dump(),
              " (training noise on the router) is not implemented by titan; set it to 0");
  const int64_t sw = int_value(j, "sliding_window", 0);  // null: every layer full
  TITAN_CHECK(!has(j, "sliding_window") || sw > 0, "mixtral config: sliding_window ", sw,
              " must be > 0 or null (HF masks every key with a window of ", sw, ")");
  a.layer_window.assign(a.n_layers, sw);
  return a;
}

Args deepseek_v3_from_hf(const json& j) {
  Args a = hf_defaults(Family::deepseek_v3);
  read_hf_fields(j, HfClass::deepseek_v3, a);
  // what DeepseekV3ForCausalLM fixes: MLA without QK-norm, sigmoid routing with selection biases, a shared MLP of
  // n_shared_experts experts, pre-norms, no sliding layers
  a.qk_norm = false;
  a.moe_enabled = a.moe_shared_expert = true;
  a.moe_score_func = RouterScore::sigmoid;
  a.moe_every = 1;
  a.moe_route_bias = true;  // e_score_correction_bias
  if (j.contains("q_lora_rank")) a.q_lora_rank = j["q_lora_rank"].is_null() ? 0 : json_int(j["q_lora_rank"], "q_lora_rank");
  TITAN_CHECK(!j.contains("q_lora_rank") || j["q_lora_rank"].is_null() || a.q_lora_rank > 0,
              "deepseek_v3 config: q_lora_rank ", a.q_lora_rank, " must be > 0, or null for one q_proj (HF builds a "
              "rank-0 query latent from 0)");
  TITAN_CHECK(a.kv_lora_rank > 0, "deepseek_v3 config: kv_lora_rank ", a.kv_lora_rank, " must be > 0");
  TITAN_CHECK(!has(j, "head_dim") || json_int(j["head_dim"], "head_dim") == a.qk_rope_head_dim,
              "deepseek_v3 config: head_dim ", j.value("head_dim", json()).dump(), " must equal qk_rope_head_dim ",
              a.qk_rope_head_dim, " (HF's DeepseekV3 rotates head_dim dims of the RoPE part)");
  TITAN_CHECK(a.n_kv_heads == a.n_heads, "deepseek_v3 config: num_key_value_heads ", a.n_kv_heads,
              " must equal num_attention_heads ", a.n_heads, " (MLA expands a key and value for every head)");
  a.head_dim = a.qk_rope_head_dim;
  const std::string scoring = j.value("scoring_func", std::string("sigmoid")), method = j.value("topk_method", std::string("noaux_tc"));
  TITAN_CHECK(scoring == "sigmoid" && method == "noaux_tc", "deepseek_v3 config: scoring_func '", scoring,
              "' / topk_method '", method, "': DeepseekV3ForCausalLM routes by sigmoid with noaux_tc (group-limited, "
              "biased choice); others are DeepSeek-V2's");
  TITAN_CHECK(int_value(j, "moe_layer_freq", 1) == 1, "deepseek_v3 config: moe_layer_freq ",
              j.value("moe_layer_freq", json()).dump(), " is not supported (every layer after the dense ones is MoE)");
  set_rope(a, rope_from_hf(j, a.max_position_embeddings = int_value(j, "max_position_embeddings", 4096), true));
  a.layer_window.assign(a.n_layers, 0);
  // num_nextn_predict_layers (multi-token prediction): titan builds no such layer (nor does HF's class, which
  // ignores model.layers.<n_layers>.* on load); a checkpoint that stores them is refused by the loader, naming the
  // tensor
  return a;
}

// A per-layer 0 / 1 list of a Llama 4 config.json (no_rope_layers), checked as written.
std::vector<int64_t> int_list(const json& j, const char* field, int64_t n) {
  const json& v = j[field];
  TITAN_CHECK(v.is_array() && (int64_t)v.size() == n, "llama4 config: ", field, " must list ", n, " layers, got ",
              v.dump().substr(0, 120));
  std::vector<int64_t> out;
  for (size_t i = 0; i < v.size(); ++i) out.push_back(json_int(v[i], std::string(field) + "[" + std::to_string(i) + "]"));
  return out;
}

Args llama4_from_hf(const json& j) {
  Args a = hf_defaults(Family::llama4);
  read_hf_fields(j, HfClass::llama4, a);
  // what Llama4ForCausalLM fixes: pre-norms without QK-norm weights, RoPE on interleaved pairs, every MoE layer
  // with one shared expert of the experts' size, sigmoid top-k unnormalized scaling the experts' inputs
  a.qk_norm = false;
  a.rope_interleave = a.moe_enabled = a.moe_shared_expert = a.moe_score_before_experts = true;
  a.moe_score_func = RouterScore::sigmoid;
  a.moe_renormalize = false;
  if (!has(j, "num_key_value_heads") && j.contains("num_key_value_heads")) a.n_kv_heads = a.n_heads;  // null
  if (!has(j, "head_dim") && j.contains("head_dim")) a.head_dim = a.dim / a.n_heads;
  // the NoPE layers: no_rope_layers (1: RoPE) when given and non-empty, else every no_rope_layer_interval-th;
  // titan's knob is an interval: a list of another pattern is refused, not approximated
  const int64_t interval = int_value(j, "no_rope_layer_interval", 4);
  TITAN_CHECK(interval > 0, "llama4 config: no_rope_layer_interval ", interval, " must be > 0");
  std::vector<int64_t> rope(a.n_layers);
  for (int64_t i = 0; i < a.n_layers; ++i) rope[i] = (i + 1) % interval != 0;
  if (has(j, "no_rope_layers") && !j["no_rope_layers"].empty()) rope = int_list(j, "no_rope_layers", a.n_layers);
  int64_t first_nope = 0;
  while (first_nope < a.n_layers && rope[first_nope] == 1) ++first_nope;
  a.nope_layer_interval = first_nope < a.n_layers ? first_nope + 1 : 0;
  for (int64_t i = 0; i < a.n_layers; ++i)
    TITAN_CHECK(rope[i] == (a.nope_layer(i) ? 0 : 1), "llama4 config: no_rope_layers ", j.value("no_rope_layers", json()).dump().substr(0, 120),
                " is not every n-th layer without RoPE (layer ", i, "); titan's model.nope_layer_interval takes that pattern only");
  TITAN_CHECK(!j.contains("attention_chunk_size") || has(j, "attention_chunk_size"),
              "llama4 config: attention_chunk_size null (HF's chunked layers need a size)");
  a.attn_chunk_size = int_value(j, "attention_chunk_size", 8192);
  TITAN_CHECK(a.attn_chunk_size > 0, "llama4 config: attention_chunk_size ", a.attn_chunk_size, " must be > 0");
  // attn_temperature_tuning: a bool (HF's type) or a number whose truth HF takes (Llama-4-Scout's config: 4)
  const json tt = j.value("attn_temperature_tuning", json(true));
  TITAN_CHECK(tt.is_boolean() || tt.is_number(), "llama4 config: attn_temperature_tuning = ", tt.dump(), " is not a bool");
  const bool tuned = tt.is_boolean() ? tt.get<bool>() : tt.get<double>() != 0;
  a.nope_attn_scale = tuned && a.nope_layer_interval > 0 ? j.value("attn_scale", 0.1) : 0.0;
  TITAN_CHECK(a.nope_attn_scale >= 0 && std::isfinite(a.nope_attn_scale), "llama4 config: attn_scale ",
              a.nope_attn_scale, " must be >= 0");
  if (a.nope_attn_scale == 0 || a.nope_layer_interval == 0) a.nope_floor_scale = preset(Family::llama4).nope_floor_scale;
  // which layers are MoE: moe_layers when given, else every interleave_moe_layer_step-th; titan's is moe_every
  a.moe_first_dense = 0;
  if (has(j, "moe_layers")) {
    const json& ml = j["moe_layers"];
    TITAN_CHECK(ml.is_array(), "llama4 config: moe_layers must be a list, got ", ml.dump().substr(0, 120));
    std::vector<int64_t> want;
    for (int64_t i = 0; i < a.n_layers; ++i)
      if (a.is_moe_layer(i)) want.push_back(i);
    std::vector<int64_t> got;
    for (size_t i = 0; i < ml.size(); ++i) got.push_back(json_int(ml[i], "moe_layers[" + std::to_string(i) + "]"));
    TITAN_CHECK(got == want, "llama4 config: moe_layers ", ml.dump().substr(0, 120), " is not every ", a.moe_every,
                "-th layer (interleave_moe_layer_step); titan's model.moe_every takes that pattern only");
  }
  if (has(j, "layer_types")) {
    const json& lt = j["layer_types"];
    TITAN_CHECK(lt.is_array() && (int64_t)lt.size() == a.n_layers, "llama4 config: layer_types must list ", a.n_layers,
                " entries");
    for (int64_t i = 0; i < a.n_layers; ++i)
      TITAN_CHECK(lt[i] == (a.nope_layer(i) ? "full_attention" : "chunked_attention"), "llama4 config: layer_types[",
                  i, "] is ", lt[i].dump(), "; Llama 4 chunks its RoPE layers and attends globally on the others (",
                  a.nope_layer(i) ? "full_attention" : "chunked_attention", ")");
  }
  TITAN_CHECK(!has(j, "router_jitter_noise") || j["router_jitter_noise"] == 0, "llama4 config: router_jitter_noise ",
              j.value("router_jitter_noise", json()).dump(), " (training noise on the router) is not implemented by "
              "titan; set it to 0");
  set_rope(a, rope_from_hf(j, a.max_position_embeddings = int_value(j, "max_position_embeddings", 131072)));
  // HF's Llama 4 RoPE is llama3's whenever rope_scaling is given (older versions: whatever its type says)
  TITAN_CHECK(a.rope_scaling_type == RopeScalingType::none || a.rope_scaling_type == RopeScalingType::llama3,
              "llama4 config: rope_scaling type '", config::enum_name(a.rope_scaling_type),
              "' is not supported for Llama4ForCausalLM (llama3 or none)");
  a.layer_window.assign(a.n_layers, 0);
  return a;
}

// titan_decoder's block: every knob, plus what was resolved from them. Its field names are the decoder's
// (titan 0.9's format, which older titans read): the knobs by name, but for five renamed ones and the RoPE
// scaling / attention variant knobs grouped under "rope" / "attn".
std::vector<std::string> block_path(const std::string& key) {
  static const std::map<std::string, std::vector<std::string>> paths = {
      {"name", {"family"}},
      {"moe_enabled", {"moe"}},
      {"moe_num_experts", {"moe_experts"}},
      {"moe_score_func", {"moe_score"}},
      {"enable_weight_tying", {"tie_embeddings"}},
      {"rope_scaling_type", {"rope", "type"}},
      {"rope_scaling_factor", {"rope", "factor"}},
      {"rope_original_max_position_embeddings", {"rope", "original_max_position_embeddings"}},
      {"rope_yarn_beta_fast", {"rope", "beta_fast"}},
      {"rope_yarn_beta_slow", {"rope", "beta_slow"}},
      {"rope_yarn_truncate", {"rope", "truncate"}},
      {"rope_low_freq_factor", {"rope", "low_freq_factor"}},
      {"rope_high_freq_factor", {"rope", "high_freq_factor"}},
      {"attn_mask_type", {"attn", "mask"}},
      {"attn_prefix_len", {"attn", "prefix_len"}},
      {"attn_logit_softcap", {"attn", "softcap"}},
      {"attn_bias", {"attn", "bias"}},
      {"attn_relative_max_distance", {"attn", "relative_max_distance"}}};
  auto it = paths.find(key);
  return it == paths.end() ? std::vector<std::string>{key} : it->second;
}

// What the block leaves out: a label, the knobs resolved into layer_window, and training-only knobs (a loaded
// model is not trained with the exporter's balancing: 0.9's block had none of them).
bool in_block(const std::string& key) {
  static const std::set<std::string> out = {"flavor", "sliding_window", "sliding_window_layers", "sliding_window_period",
                                            "moe_aux_loss_coeff", "moe_bias_update_rate"};
  return !out.count(key);
}

json titan_block(const Args& a) {
  json b;
  for (const auto& k : knobs()) {
    if (!in_block(k.key)) continue;
    json one;
    k.to_json(a, one);
    const auto path = block_path(k.key);
    (path.size() == 1 ? b[path[0]] : b[path[0]][path[1]]) = one[k.key];
  }
  b["layer_window"] = a.layer_window;
  b["max_position_embeddings"] = a.max_position_embeddings;
  b["moe_route_bias"] = a.moe_route_bias;
  return b;
}

Args from_titan_block(const json& b) {
  Args a;
  a.hidden_dim = 0;  // absent: no dense MLP (a block of a model whose every layer is MoE may leave it out)
  static const std::set<std::string> required = {"vocab_size", "dim", "n_layers", "n_heads", "n_kv_heads", "head_dim"};
  for (const auto& k : knobs()) {
    if (!in_block(k.key)) continue;
    const auto path = block_path(k.key);
    const json* v = &b;
    for (const auto& p : path) v = v && v->is_object() && v->contains(p) ? &v->at(p) : nullptr;
    TITAN_CHECK(!(v && v->is_null()), "model config: the titan_decoder block is malformed: ", k.key, " is null");
    TITAN_CHECK(v || !required.count(k.key), "model config: the titan_decoder block has no ", k.key);
    if (!v) continue;  // absent: the default (a block written before the knob existed)
    k.from_json(json{{k.key, *v}}, a, k.key);
  }
  TITAN_CHECK(has(b, "layer_window"), "model config: the titan_decoder block has no layer_window");
  TITAN_CHECK(b["layer_window"].is_array(), "model config: the titan_decoder block's layer_window is not a list");
  a.layer_window.clear();
  for (const auto& w : b["layer_window"]) a.layer_window.push_back(json_int(w, "titan_decoder.layer_window[]"));
  a.max_position_embeddings = int_value(b, "max_position_embeddings", a.max_position_embeddings);
  a.moe_route_bias = b.value("moe_route_bias", false);
  a.titan_layout = true;
  return a;
}

// The model family a config.json describes: model_type, or titan_base_model_type for titan 0.8's titan_decoder.
std::string hf_model_family(const json& j) {
  std::string mt = j.value("model_type", std::string("qwen3"));
  if (mt != "titan_decoder") return mt;
  TITAN_CHECK(j.contains("titan_base_model_type") && j["titan_base_model_type"].is_string(),
              "model config: model_type titan_decoder without titan_base_model_type (qwen3 | gpt_oss)");
  return j["titan_base_model_type"].get<std::string>();
}
}  // namespace

namespace {
Args from_hf_object(const json& j);
}

Args Args::from_hf_json(const std::string& text) {
  const json j = config::parse_untrusted_json(text, "model config: the HF config.json content");
  TITAN_CHECK(j.is_object(), "model config: the HF config.json content is not a JSON object");
  check_numbers(j, "");
  TITAN_CHECK(!j.contains("model_type") || j["model_type"].is_string(), "model config: model_type = ",
              j.value("model_type", json()).dump().substr(0, 80), " is not a string");
  try {
    return from_hf_object(j);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {  // a field of the wrong JSON type that no check above names
    fail("model config: the HF config.json has a field of the wrong type: ", e.what());
  }
}

namespace {
// transformers 5 writes RoPE as rope_parameters ({rope_type, rope_theta, factor, ...}; Gemma 3: one such object per
// layer type) where 4.x wrote rope_theta and rope_scaling (and Gemma 3's rope_local_base_freq): read into the 4.x
// fields, which the readers below know. A value the two forms both give must agree; any other shape is refused.
json with_legacy_rope(const json& in) {
  if (!in.contains("rope_parameters") || in["rope_parameters"].is_null()) return in;
  json j = in;
  const json& rp = in["rope_parameters"];
  TITAN_CHECK(rp.is_object(), "model config: rope_parameters must be an object, got ", rp.dump().substr(0, 80));
  auto put = [&](const char* field, const json& v) {
    TITAN_CHECK(!has(in, field) || in[field] == v, "model config: rope_parameters gives ", field, " = ",
                v.dump().substr(0, 80), " but the file's ", field, " is ", in[field].dump().substr(0, 80));
    j[field] = v;
  };
  auto one = [&](const json& p, const char* theta_field, bool scaling, const std::string& where) {
    TITAN_CHECK(p.is_object() && p.contains("rope_theta") && p["rope_theta"].is_number(), "model config: ", where,
                " must be an object with a numeric rope_theta, got ", p.dump().substr(0, 120));
    put(theta_field, p["rope_theta"]);
    json rs = p;
    rs.erase("rope_theta");
    const std::string type = rs.value("rope_type", rs.value("type", std::string("default")));
    if (type == "default")  // what a default RoPE would drop (partial_rotary_factor, a factor, ...) is refused
      for (auto it = rs.begin(); it != rs.end(); ++it)
        TITAN_CHECK(it.key() == "rope_type" || it.key() == "type", "model config: ", where, ".", it.key(),
                    " is not supported by titan with rope_type default");
    if (scaling) {  // default too: a family whose class defaults to a scaling (gpt-oss's YaRN) takes none
      put("rope_scaling", type == "default" ? json{{"rope_type", "default"}} : rs);
    } else {
      TITAN_CHECK(type == "default", "model config: ", where, " has rope_type '", type,
                  "'; titan's sliding layers take RoPE unscaled (default)");
    }
  };
  if (rp.contains("full_attention") || rp.contains("sliding_attention")) {  // per layer type (Gemma 3)
    TITAN_CHECK(in.value("model_type", std::string()) == "gemma3_text", "model config: rope_parameters per layer "
                "type (full_attention / sliding_attention) is Gemma 3's; model_type ",
                in.value("model_type", json("(none)")).dump(), " has one RoPE");
    for (auto it = rp.begin(); it != rp.end(); ++it)
      TITAN_CHECK(it.key() == "full_attention" || it.key() == "sliding_attention", "model config: rope_parameters."
                  , it.key(), " is not a layer type titan knows (full_attention, sliding_attention)");
    if (rp.contains("full_attention")) one(rp["full_attention"], "rope_theta", true, "rope_parameters.full_attention");
    if (rp.contains("sliding_attention"))
      one(rp["sliding_attention"], "rope_local_base_freq", false, "rope_parameters.sliding_attention");
  } else {
    one(rp, "rope_theta", true, "rope_parameters");
  }
  j.erase("rope_parameters");
  return j;
}

Args from_hf_object(const json& file) {
  const json j = with_legacy_rope(file);
  const std::string mt = j.value("model_type", std::string("qwen3"));
  Args a;
  if (mt == "titan_decoder" && j.contains("titan_decoder")) {
    TITAN_CHECK(j["titan_decoder"].is_object(), "model config: the titan_decoder block must be an object");
    a = from_titan_block(j["titan_decoder"]);
  } else {
    const std::string fam = hf_model_family(j);  // titan 0.8's titan_decoder names its base family
    if (fam == "qwen3" || fam == "qwen3_moe") a = qwen3_from_hf(j, fam == "qwen3_moe");
    else if (fam == "gpt_oss") a = gpt_oss_from_hf(j);
    else if (fam == "llama") a = llama_from_hf(j);
    else if (fam == "mixtral") a = mixtral_from_hf(j);
    else if (fam == "olmo2") a = olmo2_from_hf(j);
    else if (fam == "gemma3_text") a = gemma3_from_hf(j);
    else if (fam == "deepseek_v3" || fam == "kimi_k2") a = deepseek_v3_from_hf(j);
    else if (fam == "llama4_text") a = llama4_from_hf(j);
    else if (fam == "llama4")
      fail("model config: model_type llama4 is Llama4ForConditionalGeneration (text and vision); titan trains the "
           "text model: give its text_config as a config of model_type llama4_text");
    else if (fam == "gemma3")
      fail("model config: model_type gemma3 is Gemma3ForConditionalGeneration (text and vision); titan trains the "
           "text model: give its text_config as a config of model_type gemma3_text");
    else fail("model config: model_type '", fam,
              "' is not supported (qwen3, qwen3_moe, gpt_oss, llama, mixtral, olmo2, gemma3_text, deepseek_v3, llama4_text, "
              "kimi_k2, titan_decoder)");
    attention_from_hf(j, a);
    if (mt == "titan_decoder") a.titan_layout = true;  // titan 0.8's titan_decoder (titan_attention)
  }
  a.from_config_json = true;
  a.validate(/*hf_import=*/true);
  return a;
}
}  // namespace

HfClass Args::hf_class(std::string* why) const {
  auto no = [&](const std::string& w) {
    if (why) *why = w;
    return HfClass::none;
  };
  if (titan_layout) {  // the first reason that made it titan's, else the file's own layout
    Args plain = *this;
    plain.titan_layout = false;
    std::string w;
    return no(plain.hf_class(&w) == HfClass::none ? w : "read from a titan_decoder config: its tensors are in titan's layout");
  }
  const bool llama4_knobs = qk_l2_norm || nope_layer_interval > 0 || attn_chunk_size > 0 ||
                           (moe_enabled && moe_score_before_experts);
  if (name == Family::llama4) {
    bool sliding = false;
    for (auto w : layer_window) sliding = sliding || w > 0;
    if (!(!mla() && !qk_norm && norm_placement == NormPlacement::pre && norm_type == nn::NormKind::rmsnorm &&
          !norm_unit_offset && embed_scale == 1.0 && query_pre_attn_scalar == 0 && final_logit_softcap == 0 &&
          attention().is_default() && !sliding && !attn_sinks && activation != Activation::oai_swiglu &&
          swiglu_limit == 0 && rope_interleave && attn_chunk_size > 0 && moe_enabled && moe_first_dense == 0 &&
          moe_score_func == RouterScore::sigmoid && !moe_renormalize && moe_shared_expert &&
          moe_shared_expert_width == 1 && moe_score_before_experts && moe_n_group == 1 && moe_routed_scale == 1.0 &&
          !moe_router_bias && !moe_expert_bias && !moe_route_bias && nope_layer_interval == 4 &&
          (rope_scaling_type == RopeScalingType::none || rope_scaling_type == RopeScalingType::llama3)))
      return no("a llama4 ablation (Llama4ForCausalLM fixes: grouped-query attention without QK-norm weights, RoPE on "
                "interleaved pairs, every 4th layer without RoPE (earlier transformers releases, vLLM and others "
                "hard-code it, whatever no_rope_layers says) and the others chunked, pre-norms, causal attention without sinks "
                "or windows, MoE layers every moe_every-th with one shared expert of the experts' size, sigmoid "
                "routing unnormalized and unscaled scaling the experts' inputs, no router or expert biases, RoPE "
                "scaling llama3 or none)");
    return HfClass::llama4;
  }
  if (llama4_knobs) return no("Llama 4's attention (qk_l2_norm, nope_layer_interval, attn_chunk_size) or its experts' "
                              "input scaling (moe_score_before_experts) outside llama4");
  if (name == Family::deepseek_v3) {
    const nn::AttentionVariant v = attention();
    bool sliding = false;
    for (auto w : layer_window) sliding = sliding || w > 0;
    if (!(mla() && !qk_norm && norm_placement == NormPlacement::pre && norm_type == nn::NormKind::rmsnorm &&
          !norm_unit_offset && embed_scale == 1.0 && query_pre_attn_scalar == 0 && final_logit_softcap == 0 &&
          v.is_default() && !sliding && !attn_sinks && activation == Activation::silu && swiglu_limit == 0 &&
          moe_enabled && moe_every == 1 && moe_score_func == RouterScore::sigmoid && moe_shared_expert &&
          !moe_router_bias && !moe_expert_bias))
      return no("a deepseek_v3 ablation (DeepseekV3ForCausalLM fixes: multi-head latent attention without QK-norm, "
                "pre-norms, causal full attention, silu, every layer after the dense ones MoE with sigmoid routing, "
                "a shared expert, no router or expert biases)");
    return HfClass::deepseek_v3;
  }
  if (mla()) return no("multi-head latent attention outside deepseek_v3");
  if (rope_interleave) return no("rope_interleave outside deepseek_v3");
  if (moe_enabled && (moe_n_group > 1 || moe_routed_scale != 1.0 || moe_shared_expert_width != 1))
    return no("group-limited routing, a routed scale or a wider shared expert outside deepseek_v3");
  if (rope_yarn_mscale_all_dim > 0) return no("YaRN's mscale_all_dim outside deepseek_v3");
  if (moe_enabled && moe_route_bias)
    return no("auxiliary-loss-free balancing: the expert biases that steer its routing have no place in the HF "
              "class (titan's layout keeps them)");
  bool sliding = false, uniform = true;
  for (auto w : layer_window) {
    sliding = sliding || w > 0;
    uniform = uniform && (w == 0 || w == *std::max_element(layer_window.begin(), layer_window.end()));
  }
  if (name == Family::gemma3) {
    const nn::AttentionVariant v = attention();
    if (!(qk_norm && qk_norm_scope == QkNormScope::head && norm_unit_offset &&
          norm_placement == NormPlacement::sandwich && norm_type == nn::NormKind::rmsnorm &&
          embed_multiplier() == std::sqrt((double)dim) && !moe_enabled && !attn_sinks && swiglu_limit == 0 &&
          activation != Activation::oai_swiglu && v.mask == nn::MaskKind::causal && v.bias == nn::ScoreBias::none &&
          uniform && (!sliding || rope_local_theta > 0) && rope_scaling_type != RopeScalingType::yarn &&
          rope_scaling_type != RopeScalingType::llama3))
      return no("a gemma3 ablation (Gemma3ForCausalLM fixes: sandwich RMSNorms of 1 + weight, per-head QK-norm, "
                "embeddings times sqrt(dim), dense MLPs, a causal mask with one window and their own RoPE base on "
                "the sliding layers, linear RoPE scaling or none, no sinks or clamped activation)");
    return HfClass::gemma3;
  }
  if (!attention().is_default()) return no("attention variant " + attention().describe() + " (no HF class has it)");
  if (norm_type != nn::NormKind::rmsnorm) return no("norm_type " + config::enum_name(norm_type));
  if (embed_scale != 1.0) return no("embed_scale outside gemma3");
  if (norm_unit_offset) return no("norm_unit_offset outside gemma3");
  if (query_pre_attn_scalar > 0) return no("query_pre_attn_scalar outside gemma3");
  if (rope_local_theta > 0 && sliding) return no("rope_local_theta outside gemma3");
  if (final_logit_softcap > 0) return no("final_logit_softcap outside gemma3");
  if (!uniform) return no("sliding layers with different windows");
  const bool olmo2_blocks = qk_norm && qk_norm_scope == QkNormScope::projection && norm_placement == NormPlacement::post;
  if (name == Family::olmo2) {
    if (!(olmo2_blocks && !moe_enabled && !sliding && !attn_sinks && activation != Activation::oai_swiglu &&
          swiglu_limit == 0))
      return no("an olmo2 ablation (Olmo2ForCausalLM fixes: QK-norm over the projections, norms after the "
                "attention and MLP, dense MLPs, no sliding layers, sinks or clamped activation)");
    return HfClass::olmo2;
  }
  if (norm_placement != NormPlacement::pre)
    return no("norm_placement " + config::enum_name(norm_placement) + " outside olmo2");
  if (qk_norm && qk_norm_scope != QkNormScope::head) return no("qk_norm_scope projection outside olmo2");
  if (name == Family::gpt_oss) {
    if (!(moe_enabled && !any_dense_layer() && !qk_norm && attn_proj_bias && attn_sinks &&
          activation == Activation::oai_swiglu && swiglu_limit > 0 && moe_router_bias && moe_expert_bias &&
          moe_score_func == RouterScore::softmax && moe_renormalize && !moe_shared_expert &&
          rope_scaling_type == RopeScalingType::yarn))
      return no("a gpt_oss ablation (GptOssForCausalLM fixes: MoE every layer, no qk_norm, projection biases, sinks, "
                "oai_swiglu with a limit, router and expert biases, softmax top-k renormalized, YaRN)");
    return HfClass::gpt_oss;
  }
  if (name == Family::mixtral) {
    if (!(moe_enabled && !any_dense_layer() && !qk_norm && !attn_proj_bias && !attn_sinks &&
          activation == Activation::silu && swiglu_limit == 0 && moe_score_func == RouterScore::softmax &&
          moe_renormalize && !moe_shared_expert && !moe_router_bias && !moe_expert_bias &&
          rope_scaling_type == RopeScalingType::none && (!sliding || std::count(layer_window.begin(), layer_window.end(), 0) == 0)))
      return no("a mixtral ablation (MixtralForCausalLM fixes: MoE every layer, no qk_norm, no biases or sinks, silu, "
                "softmax top-k renormalized, no RoPE scaling, one window on every layer or none)");
    return HfClass::mixtral;
  }
  if (attn_sinks) return no("attention sinks outside gpt_oss");
  if (activation == Activation::oai_swiglu || swiglu_limit > 0) return no("gpt-oss's clamped activation outside gpt_oss");
  if (moe_enabled) {
    if (!qk_norm) return no("MoE without qk_norm");
    if (moe_score_func != RouterScore::softmax || moe_shared_expert || moe_router_bias || moe_expert_bias)
      return no("a router or experts Qwen3-MoE does not have (sigmoid scores, shared expert or biases)");
    if (sliding) return no("sliding layers in a MoE model");
    return HfClass::qwen3_moe;
  }
  if (qk_norm) return HfClass::qwen3;
  if (sliding) return no("sliding layers without qk_norm");
  return HfClass::llama;
}

std::string Args::to_hf_json() const {
  std::string why;
  const HfClass arch = hf_class(&why);
  const RopeScaling rope = rope_scaling();
  static constexpr std::array<const char*, 10> model_type = {"titan_decoder", "qwen3",   "qwen3_moe",   "gpt_oss",
                                                             "llama",         "mixtral", "olmo2",       "gemma3_text",
                                                             "deepseek_v3",   "llama4_text"};
  json j;
  j["architectures"] = {arch};
  j["model_type"] = model_type[(size_t)arch];
  for (const HfField& f : class_fields(arch)) {  // the knobs the class stores as fields, as import reads them
    json one;
    find_knob(f.knob)->to_json(*this, one);
    j[field_of(f)] = one[f.knob];
  }
  if (activation == Activation::oai_swiglu) j["hidden_act"] = Activation::silu;  // the class's clamp is swiglu_limit
  if (arch == HfClass::none && (name == Family::gpt_oss || name == Family::mixtral))
    j["intermediate_size"] = moe_hidden_dim;  // the experts' size, as GptOssConfig and MixtralConfig name it
  // scaled RoPE: factor x original, so every HF version derives the same YaRN factor
  const bool from_original = rope.type == RopeScalingType::yarn || rope.type == RopeScalingType::llama3;
  j["max_position_embeddings"] = from_original ? std::llround(rope.factor * rope.original_max_position_embeddings)
                                               : max_position_embeddings;
  j["rope_scaling"] = rope_to_hf(rope);
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
  if (arch == HfClass::qwen3) {
    j["use_sliding_window"] = sw > 0;
    j["sliding_window"] = sw > 0 ? json(sw) : json(nullptr);
    j["max_window_layers"] = n_layers;
  } else if (arch == HfClass::qwen3_moe) {
    json mlp_only = json::array();
    for (int64_t i = 0; i < moe_first_dense; ++i) mlp_only.push_back(i);
    j["mlp_only_layers"] = mlp_only;
    j["use_sliding_window"] = false;
    j["sliding_window"] = nullptr;
    j["router_aux_loss_coef"] = moe_aux_loss_coeff;
    j["output_router_logits"] = false;
  } else if (arch == HfClass::gpt_oss) {
    j["sliding_window"] = sw > 0 ? sw : 128;
  } else if (arch == HfClass::llama) {
    j["mlp_bias"] = false;
    j.erase("layer_types");
  } else if (arch == HfClass::olmo2) {
    j.erase("layer_types");
  } else if (arch == HfClass::gemma3) {
    j["sliding_window"] = sw > 0 ? sw : 4096;
    // transformers 4.50 - 4.52 read the pattern, not layer_types: written when the layers follow one
    for (int64_t p = 1; p <= n_layers + 1; ++p) {  // every layer full: 1; every layer sliding: n_layers + 1
      bool fits = true;
      for (int64_t i = 0; i < n_layers; ++i) fits = fits && (layer_window[i] == 0) == ((i + 1) % p == 0);
      if (fits) {
        j["sliding_window_pattern"] = p;
        break;
      }
    }
    j["final_logit_softcapping"] = final_logit_softcap > 0 ? json(final_logit_softcap) : json(nullptr);
    j["attn_logit_softcapping"] = attn_logit_softcap > 0 ? json(attn_logit_softcap) : json(nullptr);
    j["use_bidirectional_attention"] = false;
    // HF always builds both RoPE tables and scales by this scalar: titan's 0s (unused local base, sqrt(head_dim)) as values
    if (rope_local_theta == 0) j["rope_local_base_freq"] = rope_theta;  // no sliding layer uses it (hf_class)
    if (query_pre_attn_scalar == 0) j["query_pre_attn_scalar"] = head_dim;
  } else if (arch == HfClass::deepseek_v3) {
    j["q_lora_rank"] = q_lora_rank > 0 ? json(q_lora_rank) : json(nullptr);
    j["head_dim"] = qk_rope_head_dim;
    j["scoring_func"] = "sigmoid";
    j["topk_method"] = "noaux_tc";
    j["moe_layer_freq"] = 1;
    j["num_nextn_predict_layers"] = 0;
    j.erase("layer_types");
  } else if (arch == HfClass::llama4) {
    json rope_layers = json::array(), moe_layers = json::array(), types = json::array();
    for (int64_t i = 0; i < n_layers; ++i) {
      rope_layers.push_back(nope_layer(i) ? 0 : 1);
      types.push_back(nope_layer(i) ? "full_attention" : "chunked_attention");
      if (is_moe_layer(i)) moe_layers.push_back(i);
    }
    j["no_rope_layers"] = rope_layers;
    // HF derives a default list from the interval first (i + 1) % interval: never 0
    j["no_rope_layer_interval"] = nope_layer_interval > 0 ? nope_layer_interval : n_layers + 1;
    j["layer_types"] = types;
    j["moe_layers"] = moe_layers;
    j["attention_chunk_size"] = attn_chunk_size;
    j["attn_temperature_tuning"] = nope_attn_scale > 0;
    j["attn_scale"] = nope_attn_scale > 0 ? nope_attn_scale : 0.1;
    j["router_aux_loss_coef"] = moe_aux_loss_coeff;
    j["router_jitter_noise"] = 0.0;
    j["output_router_logits"] = false;
  } else if (arch == HfClass::mixtral) {
    j["sliding_window"] = sw > 0 ? json(sw) : json(nullptr);
    j["router_aux_loss_coef"] = moe_aux_loss_coeff;
    j["output_router_logits"] = false;
    j.erase("layer_types");
  } else {
    j["titan_decoder"] = titan_block(*this);
    j["titan_not_hf_because"] = why;
  }
  return j.dump(2);
}

}  // namespace titan::decoder
