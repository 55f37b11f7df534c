#include "models/decoder/presets.h"

#include "src/tensor/error.h"

namespace titan::decoder {

namespace {
// Designated initializers in knobs.def's order; what a member does not name is the knob's default.
const Args kQwen3{.name = Family::qwen3};
const Args kQwen3Moe{.name = Family::qwen3_moe, .moe_enabled = true};
const Args kGptOss{.name = Family::gpt_oss,
                   .qk_norm = false,
                   .norm_eps = 1e-5,
                   .activation = Activation::oai_swiglu,
                   .swiglu_limit = 7.0,
                   .rope_theta = 150000.0,
                   .sliding_window = 128,
                   .sliding_window_layers = SlidingLayers::alternate,
                   .attn_proj_bias = true,
                   .attn_sinks = true,
                   .moe_enabled = true,
                   .moe_router_bias = true,
                   .moe_expert_bias = true,
                   .rope_scaling_type = RopeScalingType::yarn,
                   .rope_scaling_factor = 32.0,
                   .rope_yarn_truncate = false};  // gpt-oss's config: truncate false
const Args kLlama3{.name = Family::llama3,
                   .qk_norm = false,
                   .norm_eps = 1e-5,
                   .rope_theta = 500000.0,
                   .rope_original_max_position_embeddings = 8192};
}  // namespace

const Args& preset(Family f) {
  switch (f) {
    case Family::qwen3_moe: return kQwen3Moe;
    case Family::gpt_oss: return kGptOss;
    case Family::llama3: return kLlama3;
    default: return kQwen3;
  }
}

Args hf_defaults(Family f) {
  Args a;  // Qwen3Config, Qwen3MoeConfig, GptOssConfig, LlamaConfig defaults
  a.name = f;
  a.rope_theta = 10000.0;
  a.norm_eps = 1e-6;
  a.qk_norm = f == Family::qwen3 || f == Family::qwen3_moe;
  switch (f) {
    case Family::qwen3:
      a.vocab_size = 151936, a.dim = 4096, a.hidden_dim = 22016, a.n_layers = 32, a.n_heads = 32;
      break;
    case Family::qwen3_moe:
      a.vocab_size = 151936, a.dim = 2048, a.hidden_dim = 6144, a.n_layers = 48, a.n_heads = 32;
      a.moe_enabled = true, a.moe_num_experts = 128, a.moe_top_k = 8, a.moe_hidden_dim = 768;
      a.moe_renormalize = false;
      break;
    case Family::gpt_oss:
      a.vocab_size = 201088, a.dim = 2880, a.hidden_dim = 2880, a.n_layers = 36, a.n_heads = 64, a.n_kv_heads = 8;
      a.head_dim = 64, a.moe_num_experts = 128, a.moe_top_k = 4, a.swiglu_limit = 7.0, a.rope_theta = 150000.0;
      a.norm_eps = 1e-5;
      a.rope_scaling_type = RopeScalingType::yarn, a.rope_scaling_factor = 32.0;
      a.rope_original_max_position_embeddings = 4096, a.rope_yarn_truncate = false;
      break;
    case Family::llama3:
      a.vocab_size = 32000, a.dim = 4096, a.hidden_dim = 11008, a.n_layers = 32, a.n_heads = 32;
      break;
  }
  a.activation = Activation::silu;
  a.enable_weight_tying = false;
  a.attn_proj_bias = false;
  return a;
}

void apply_preset(Args& a, const std::set<std::string>& given) {
  const Args& p = preset(a.name);
  for (const auto& k : knobs())
    if (k.key != "name" && !given.count(k.key)) k.copy(p, a);
  // every layer MoE: hidden_dim has no dense MLP to size and names the experts' size (gpt-oss's intermediate_size)
  if (a.every_layer_moe() && !given.count("moe_hidden_dim")) a.moe_hidden_dim = a.hidden_dim;
}

std::string knob_inapplicable(const Args& m, const std::string& key) {
  const Knob* k = find_knob(key);
  return k ? k->inapplicable(m) : "";
}

void refuse_inapplicable(const Args& m, const std::set<std::string>& given) {
  for (const auto& key : given) {
    if (key == "hidden_dim" && m.every_layer_moe() && !given.count("moe_hidden_dim")) continue;  // the experts' size
    const std::string why = knob_inapplicable(m, key);
    TITAN_CHECK(why.empty(), "config error: model.", key, " does nothing for this model (model.name ",
                config::enum_name(m.name), "): ", why, "; remove it or change the model");
  }
}

}  // namespace titan::decoder
