#include <nlohmann/json.hpp>

#include "models/attention_config.h"
#include "models/causal_lm.h"
#include "models/gpt_oss/model.h"
#include "models/qwen3/model.h"

namespace titan {

std::unique_ptr<CausalLM> build_model(const JobConfig::Model& m) {
  if (m.name == "qwen3") return std::make_unique<qwen3::Qwen3>(qwen3::Args::from_job(m));
  TITAN_CHECK(m.name == "gpt_oss", "config error: model.name '", m.name, "' is not known (qwen3, gpt_oss)");
  gpt_oss::Args a;
  a.vocab_size = m.vocab_size;
  a.dim = m.dim;
  a.n_layers = m.n_layers;
  a.n_heads = m.n_heads;
  a.n_kv_heads = m.n_kv_heads;
  a.head_dim = m.head_dim;
  a.intermediate = m.hidden_dim;
  a.num_experts = m.moe_num_experts;
  a.top_k = m.moe_top_k;
  a.sliding_window = m.sliding_window > 0 ? m.sliding_window : 128;
  a.rope_theta = m.rope_theta;
  a.norm_eps = m.norm_eps;
  a.yarn_factor = m.rope_scaling_factor;
  a.tie_embeddings = m.enable_weight_tying;
  a.aux_loss_coeff = m.moe_aux_loss_coeff;
  a.bias_update_rate = m.moe_bias_update_rate;
  a.sliding.assign(a.n_layers, false);
  a.attn = attention_variant_from_job(m);
  // gpt-oss: layer 0 sliding, alternating; attn_mask_type sliding_window makes every layer sliding
  for (int64_t i = 0; i < a.n_layers; ++i) a.sliding[i] = i % 2 == 0 || a.attn.mask == "sliding_window";
  a.validate();
  return std::make_unique<gpt_oss::GptOss>(a);
}

std::unique_ptr<CausalLM> build_model_from_hf(const std::string& text) {
  std::string mt = "qwen3";
  try {
    mt = hf_model_family(nlohmann::json::parse(text), "qwen3");
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    fail("model config: the HF config.json content is not valid JSON: ", e.what());
  }
  if (mt == "qwen3") return std::make_unique<qwen3::Qwen3>(qwen3::Args::from_hf_json(text));
  if (mt == "gpt_oss") return std::make_unique<gpt_oss::GptOss>(gpt_oss::Args::from_hf_json(text));
  fail("model config: model_type '", mt, "' is not supported (qwen3, gpt_oss)");
}

}  // namespace titan
