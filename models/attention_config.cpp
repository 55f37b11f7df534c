#include "models/attention_config.h"

#include "src/tensor/error.h"

namespace titan {

nn::AttentionVariant attention_variant_from_job(const JobConfig::Model& m) {
  nn::AttentionVariant v;
  v.mask = m.attn_mask_type;
  v.prefix_len = m.attn_prefix_len;
  v.softcap = m.attn_logit_softcap;
  v.bias = m.attn_bias;
  v.relative_max_distance = m.attn_relative_max_distance;
  v.validate();
  return v;
}

void check_attention_layers(const nn::AttentionVariant& v, const std::vector<int64_t>& windows, const char* model) {
  v.validate();
  for (size_t i = 0; i < windows.size(); ++i) {
    TITAN_CHECK(v.mask != "sliding_window" || windows[i] > 0, "config error: model.attn_mask_type sliding_window needs "
                "a window on every layer: set model.sliding_window > 0 (", model, " layer ", i, " has none)");
    TITAN_CHECK(v.mask != "prefix_lm" || windows[i] == 0, "config error: model.attn_mask_type prefix_lm with sliding "
                "layers is not supported (", model, " layer ", i, " has window ", windows[i],
                "): a sliding layer would hide the prefix; use full layers (sliding_window: 0)");
  }
}

int64_t attention_bias_params(const nn::AttentionVariant& v, int64_t n_heads) {
  return v.bias == "relative" ? n_heads * (2 * v.relative_max_distance - 1) : 0;
}

void attention_to_hf(nlohmann::json& j, const nn::AttentionVariant& v) {
  if (v.is_default()) return;
  j["titan_base_model_type"] = j["model_type"];
  j["architectures"] = {"TitanDecoderForCausalLM"};
  j["model_type"] = "titan_decoder";
  j["titan_attention"] = {{"mask", v.mask},
                          {"prefix_len", v.prefix_len},
                          {"logit_softcap", v.softcap},
                          {"bias", v.bias},
                          {"relative_max_distance", v.relative_max_distance}};
}

nn::AttentionVariant attention_from_hf(const nlohmann::json& j) {
  nn::AttentionVariant v;
  if (!j.contains("titan_attention")) return v;
  const auto& a = j["titan_attention"];
  TITAN_CHECK(a.is_object(), "model config: titan_attention must be an object, got ", a.dump());
  v.mask = a.value("mask", v.mask);
  v.prefix_len = a.value("prefix_len", v.prefix_len);
  v.softcap = a.value("logit_softcap", v.softcap);
  v.bias = a.value("bias", v.bias);
  v.relative_max_distance = a.value("relative_max_distance", v.relative_max_distance);
  v.validate();
  return v;
}

std::string hf_model_family(const nlohmann::json& j, const std::string& default_type) {
  std::string mt = j.value("model_type", default_type);
  if (mt != "titan_decoder") return mt;
  TITAN_CHECK(j.contains("titan_base_model_type") && j["titan_base_model_type"].is_string(),
              "model config: model_type titan_decoder without titan_base_model_type (qwen3 | gpt_oss)");
  return j["titan_base_model_type"].get<std::string>();
}

}  // namespace titan
