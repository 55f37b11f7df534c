// models/attention_config.h — a decoder's attention variant: from the job
// config (model.attn_*), checked against its layer pattern, counted, and
// written to / read from config.json.
//
// HF's classes have no ALiBi, relative bias, softcap, document or prefix
// masks: a model using any of them is exported as titan's decoder
// (architectures ["TitanDecoderForCausalLM"], model_type "titan_decoder",
// the HF family it extends in "titan_base_model_type", the variant in
// "titan_attention"), never as a class HF would load and run wrongly.
// titan reads such a config back as the base family with the variant.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

#include <vector>

#include "src/config/job_config.h"
#include "src/nn/attention_variants.h"

namespace titan {

nn::AttentionVariant attention_variant_from_job(const JobConfig::Model& m);
// The variant against the per-layer windows (0: a full layer): sliding_window
// needs every layer windowed, prefix_lm no windowed layer. `model` names the family in errors.
void check_attention_layers(const nn::AttentionVariant& v, const std::vector<int64_t>& windows, const char* model);
// Parameters the variant adds per layer (the relative-bias table).
int64_t attention_bias_params(const nn::AttentionVariant& v, int64_t n_heads);

// Writes the variant (and the titan_decoder identity) into j when it is not the default.
void attention_to_hf(nlohmann::json& j, const nn::AttentionVariant& v);
// The variant of a config.json (the default when absent).
nn::AttentionVariant attention_from_hf(const nlohmann::json& j);
// The model family a config.json describes: model_type, or titan_base_model_type for titan_decoder.
std::string hf_model_family(const nlohmann::json& j, const std::string& default_type);

}  // namespace titan
