#include "src/config/model_families.h"

#include "src/tensor/error.h"

namespace titan {

namespace {
template <typename T, typename V>
void preset(JobConfig::Model& m, const char* key, T& slot, V value) {
  if (!m.given.count(key)) slot = (T)value;
}
bool every_layer_moe(const JobConfig::Model& m) {
  return m.moe_enabled && m.moe_every == 1 && m.moe_first_dense == 0;
}
}  // namespace

void apply_model_family(JobConfig::Model& m) {
  const std::string& f = m.name;
  const bool oss = f == "gpt_oss", llama = f == "llama3";
  const bool moe = f == "qwen3_moe" || oss;
  preset(m, "qk_norm", m.qk_norm, !oss && !llama);
  preset(m, "norm_type", m.norm_type, std::string("rmsnorm"));
  preset(m, "norm_eps", m.norm_eps, oss || llama ? 1e-5 : 1e-6);
  preset(m, "activation", m.activation, std::string(oss ? "oai_swiglu" : "silu"));
  preset(m, "swiglu_limit", m.swiglu_limit, oss ? 7.0 : 0.0);
  preset(m, "rope_theta", m.rope_theta, oss ? 150000.0 : llama ? 500000.0 : 1000000.0);
  preset(m, "rope_scaling_type", m.rope_scaling_type, std::string(oss ? "yarn" : "none"));
  if (m.rope_scaling_type != "none") preset(m, "rope_scaling_factor", m.rope_scaling_factor, oss ? 32.0 : 1.0);
  preset(m, "rope_original_max_position_embeddings", m.rope_original_max_position_embeddings, llama ? 8192 : 4096);
  preset(m, "rope_yarn_truncate", m.rope_yarn_truncate, !oss);  // gpt-oss's config: truncate false
  preset(m, "attn_proj_bias", m.attn_proj_bias, oss);
  preset(m, "attn_sinks", m.attn_sinks, oss);
  preset(m, "sliding_window", m.sliding_window, oss ? 128 : 0);
  preset(m, "sliding_window_layers", m.sliding_window_layers, std::string(oss ? "alternate" : "all"));
  preset(m, "moe_enabled", m.moe_enabled, moe);
  preset(m, "moe_router_bias", m.moe_router_bias, oss);
  preset(m, "moe_expert_bias", m.moe_expert_bias, oss);
  // every layer MoE: hidden_dim has no dense MLP to size and names the experts' size (gpt-oss's intermediate_size)
  if (every_layer_moe(m) && !m.given.count("moe_hidden_dim")) m.moe_hidden_dim = m.hidden_dim;
}

std::string model_key_inapplicable(const JobConfig::Model& m, const std::string& key) {
  auto starts = [&](const char* p) { return key.rfind(p, 0) == 0; };
  if (starts("moe_") && key != "moe_enabled" && !m.moe_enabled)
    return "it configures MoE layers and this model has none (model.moe_enabled: false; model.name qwen3_moe and "
           "gpt_oss have them)";
  if (key == "hidden_dim" && every_layer_moe(m))
    return "every layer is MoE, so there is no dense MLP for it to size (the experts' size is model.moe_hidden_dim)";
  if ((key == "rope_scaling_factor" || key == "rope_original_max_position_embeddings") && m.rope_scaling_type == "none")
    return "model.rope_scaling_type is none (set yarn or llama3)";
  if (starts("rope_yarn_") && m.rope_scaling_type != "yarn")
    return "model.rope_scaling_type is " + m.rope_scaling_type + ", not yarn";
  if ((key == "rope_low_freq_factor" || key == "rope_high_freq_factor") && m.rope_scaling_type != "llama3")
    return "model.rope_scaling_type is " + m.rope_scaling_type + ", not llama3";
  if (key == "sliding_window_layers" && m.sliding_window == 0) return "model.sliding_window is 0 (no sliding layers)";
  if (key == "sliding_window_layers" && m.attn_mask_type == "sliding_window")
    return "model.attn_mask_type sliding_window windows every layer";
  if (key == "moe_first_dense" && m.moe_enabled && m.moe_first_dense > 0 && m.moe_first_dense < m.moe_every)
    return "the first " + std::to_string(m.moe_first_dense) + " layer(s) are dense already with model.moe_every " +
           std::to_string(m.moe_every);
  if (key == "attn_prefix_len" && m.attn_mask_type != "prefix_lm") return "model.attn_mask_type is not prefix_lm";
  if (key == "attn_relative_max_distance" && m.attn_bias != "relative") return "model.attn_bias is not relative";
  return "";
}

void check_model_keys(const JobConfig::Model& m) {
  for (const auto& key : m.given) {
    if (key == "hidden_dim" && every_layer_moe(m) && !m.given.count("moe_hidden_dim")) continue;  // the experts' size
    const std::string why = model_key_inapplicable(m, key);
    TITAN_CHECK(why.empty(), "config error: model.", key, " does nothing for this model (model.name ", m.name, "): ",
                why, "; remove it or change the model");
  }
  TITAN_CHECK(m.swiglu_limit >= 0, "config error: model.swiglu_limit must be >= 0 (0 = no clamp), got ", m.swiglu_limit);
  TITAN_CHECK(m.moe_every >= 1 && m.moe_first_dense >= 0, "config error: model.moe_every must be >= 1 and "
              "model.moe_first_dense >= 0, got ", m.moe_every, " and ", m.moe_first_dense);
  if (m.moe_enabled) {
    bool any = false;
    for (int64_t i = m.moe_first_dense; i < m.n_layers; ++i) any = any || (i + 1) % m.moe_every == 0;
    TITAN_CHECK(any, "config error: model.moe_every ", m.moe_every, " and model.moe_first_dense ", m.moe_first_dense,
                " leave none of the ", m.n_layers, " layers MoE");
  }
  TITAN_CHECK(m.rope_scaling_type == "none" || m.rope_scaling_factor > 1.0, "config error: model.rope_scaling_type ",
              m.rope_scaling_type, " with model.rope_scaling_factor ", m.rope_scaling_factor,
              " scales nothing: give a factor > 1 (the context extension, e.g. 8 for Llama-3.1, 32 for gpt-oss)");
  TITAN_CHECK(m.rope_original_max_position_embeddings > 0 && m.rope_yarn_beta_fast > 0 && m.rope_yarn_beta_slow > 0 &&
                  m.rope_low_freq_factor > 0 && m.rope_high_freq_factor > m.rope_low_freq_factor,
              "config error: RoPE scaling needs rope_original_max_position_embeddings > 0, yarn betas > 0 and "
              "0 < rope_low_freq_factor < rope_high_freq_factor");
}

}  // namespace titan
