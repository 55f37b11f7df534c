// models/decoder/args.h — the architecture of titan's one decoder family.
//
// Qwen3, Qwen3-MoE, gpt-oss, Llama-3, Mixtral, OLMo 2, Gemma 3, DeepSeek-V3 and Llama 4 are configurations of this one block
// (models/decoder/presets.h holds their presets); every knob applies to every
// member or is refused (presets.h). The knobs are declared once, in
// models/decoder/knobs.def: member, YAML key, default, HF field, check and
// meaning in one row. The mapping to Hugging Face's config.json is honest: a
// configuration one of HF's classes represents exactly is written as that
// class (Qwen3ForCausalLM, Qwen3MoeForCausalLM, GptOssForCausalLM,
// LlamaForCausalLM, MixtralForCausalLM, Olmo2ForCausalLM, Gemma3ForCausalLM); anything else as titan's decoder (model_type
// "titan_decoder", every knob under "titan_decoder"), never as a class HF
// would load and run differently.
#pragma once
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "src/config/enum_names.h"
#include "src/config/field.h"
#include "src/nn/attention_variants.h"
#include "src/nn/layers.h"

namespace titan::decoder {

enum class Family { qwen3, qwen3_moe, gpt_oss, llama3, mixtral, olmo2, gemma3, deepseek_v3, llama4 };
constexpr std::array<std::string_view, 9> enum_names(Family) {
  return {"qwen3", "qwen3_moe", "gpt_oss", "llama3", "mixtral", "olmo2", "gemma3", "deepseek_v3", "llama4"};
}
// gelu: erf's; gelu_pytorch_tanh: the tanh approximation (HF's name for it; Gemma)
enum class Activation { silu, gelu, oai_swiglu, gelu_pytorch_tanh };
constexpr std::array<std::string_view, 4> enum_names(Activation) {
  return {"silu", "gelu", "oai_swiglu", "gelu_pytorch_tanh"};
}
enum class RouterScore { softmax, sigmoid };
constexpr std::array<std::string_view, 2> enum_names(RouterScore) { return {"softmax", "sigmoid"}; }
enum class RopeScalingType { none, yarn, llama3, linear };
constexpr std::array<std::string_view, 4> enum_names(RopeScalingType) { return {"none", "yarn", "llama3", "linear"}; }
// Which layers slide: every one, alternate ones (0, 2, ...: gpt-oss), or all but every period-th (Gemma 3: 5 sliding,
// then 1 full)
enum class SlidingLayers { all, alternate, periodic };
// Where a block's norms sit around its attention and MLP f: pre x + f(norm(x)) (Llama, Qwen3), post
// x + norm(f(x)) (OLMo 2: after the sublayer, inside the residual), sandwich x + norm(f(norm(x))) (Gemma 2 / 3).
enum class NormPlacement { pre, post, sandwich };
constexpr std::array<std::string_view, 3> enum_names(NormPlacement) { return {"pre", "post", "sandwich"}; }
// What the QK-norm normalizes over: each head's head_dim (Qwen3), or the whole q and k projections, all heads at
// once (OLMo 2: weights [n_heads * head_dim] and [n_kv_heads * head_dim]).
enum class QkNormScope { head, projection };
constexpr std::array<std::string_view, 2> enum_names(QkNormScope) { return {"head", "projection"}; }
// The Hugging Face class a configuration is exactly (none: titan's own decoder, TitanDecoderForCausalLM).
enum class HfClass { none, qwen3, qwen3_moe, gpt_oss, llama, mixtral, olmo2, gemma3, deepseek_v3, llama4 };
constexpr std::array<std::string_view, 10> enum_names(HfClass) {
  return {"TitanDecoderForCausalLM", "Qwen3ForCausalLM", "Qwen3MoeForCausalLM", "GptOssForCausalLM", "LlamaForCausalLM",
          "MixtralForCausalLM", "Olmo2ForCausalLM", "Gemma3ForCausalLM", "DeepseekV3ForCausalLM", "Llama4ForCausalLM"};
}
constexpr std::array<std::string_view, 3> enum_names(SlidingLayers) { return {"all", "alternate", "periodic"}; }

// RoPE frequency scaling (HF's rope_scaling): the rope_* knobs as rope.cpp reads them.
struct RopeScaling {
  RopeScalingType type = RopeScalingType::none;
  double factor = 1.0;
  int64_t original_max_position_embeddings = 4096;
  double beta_fast = 32.0, beta_slow = 1.0;  // yarn
  bool truncate = true;                      // yarn: HF's default; gpt-oss sets false
  double mscale = 0, mscale_all_dim = 0;     // yarn: DeepSeek's attention factor m(mscale) / m(mscale_all_dim)
  double low_freq_factor = 1.0, high_freq_factor = 4.0;  // llama3
  bool operator==(const RopeScaling&) const = default;
};

struct Args {
#define KNOB(T, name, dflt, hf, check, acts, help) T name = dflt;
#include "models/decoder/knobs.def"
#undef KNOB

  // Resolved from the knobs (resolve()), or read from config.json (from_config_json):
  std::vector<int64_t> layer_window;  // per layer: 0 = full attention (attn_mask_type), > 0 = sliding window
  int64_t max_position_embeddings = 40960;
  bool moe_route_bias = false;  // the router's choice adds per-expert biases (auxiliary-loss-free balancing):
                                // model state, saved in checkpoints and titan-layout exports
  // read from a titan_decoder config.json (or titan 0.8's titan_moe): the file
  // holds titan's own tensor layout, and an export keeps it (not an HF class)
  bool titan_layout = false;
  bool from_config_json = false;  // layer_window, max_position_embeddings and moe_route_bias are the file's

  // The per-layer windows, the context and the route-bias state from the knobs (unless they are a
  // config.json's), then validate(). The decoder resolves the Args it is built from.
  Args& resolve();
  // Every rule on the knobs, once: each knob's own check, then the rules across knobs. Errors name the YAML
  // key (model.<name>), or the config.json field when `hf_import` (the file's values were read, not typed).
  void validate(bool hf_import = false) const;

  double embed_multiplier() const { return embed_scale > 0 ? embed_scale : std::sqrt((double)dim); }
  // Multi-head latent attention (kv_lora_rank > 0): q.k over qk_nope_head_dim + qk_rope_head_dim dims, values of
  // v_head_dim; resolve() sets n_kv_heads to n_heads and head_dim to the RoPE part's width (as HF's config).
  bool mla() const { return kv_lora_rank > 0; }
  int64_t qk_dim() const { return mla() ? qk_nope_head_dim + qk_rope_head_dim : head_dim; }  // q.k's width
  int64_t v_dim() const { return mla() ? v_head_dim : head_dim; }                            // a value's
  // What multiplies q.k: query_pre_attn_scalar^-1/2 or qk_dim^-1/2, times m(rope_yarn_mscale_all_dim)^2 under
  // YaRN (DeepSeek-V3).
  double attention_scale() const;
  double norm_weight_offset() const { return norm_unit_offset ? 1.0 : 0.0; }  // nn::Norm's
  // iRoPE (Llama 4): layer i takes no RoPE (and attends globally) when nope_layer_interval divides i + 1; the
  // other layers attend within chunks of attn_chunk_size tokens (0: globally)
  bool nope_layer(int64_t i) const { return nope_layer_interval > 0 && (i + 1) % nope_layer_interval == 0; }
  int64_t layer_chunk(int64_t i) const { return nope_layer(i) ? 0 : attn_chunk_size; }
  // what the NoPE layers' queries are multiplied by at `position` (attention temperature tuning; 1 when off)
  double nope_query_scale(int64_t position) const {
    return 1.0 + nope_attn_scale * std::log1p(std::floor((double)(position + 1) / (double)nope_floor_scale));
  }
  bool is_moe_layer(int64_t i) const { return moe_enabled && i >= moe_first_dense && (i + 1) % moe_every == 0; }
  int64_t moe_layers_before(int64_t i) const {  // MoE layers among blocks [0, i) (n_layers: all of them)
    int64_t n = 0;
    for (int64_t j = 0; j < i; ++j) n += is_moe_layer(j);
    return n;
  }
  bool any_dense_layer() const;
  bool every_layer_moe() const { return moe_enabled && moe_every == 1 && moe_first_dense == 0; }
  int64_t shared_expert_hidden() const { return moe_shared_expert ? moe_shared_expert_width * moe_hidden_dim : 0; }
  // gpt-oss's storage: experts' gate and up interleaved in one [E, dim, 2I] tensor, router "router"
  bool fused_experts() const { return name == Family::gpt_oss; }
  nn::AttentionVariant attention() const;  // the attn_* knobs
  RopeScaling rope_scaling() const;        // the rope_* knobs

  // HF config.json content: qwen3, qwen3_moe, gpt_oss, llama or titan_decoder (HF's defaults for absent keys)
  static Args from_hf_json(const std::string& json);
  std::string to_hf_json() const;
  // The HF class that represents this configuration exactly, or none with *why no class does.
  HfClass hf_class(std::string* why = nullptr) const;
  // Its name ("" for none).
  std::string hf_architecture(std::string* why = nullptr) const {
    const HfClass c = hf_class(why);
    return c == HfClass::none ? "" : config::enum_name(c);
  }

  // Counts (TorchTitan conventions; see flops_per_token).
  int64_t num_params() const;
  int64_t num_embedding_params() const { return vocab_size * dim; }
  int64_t num_active_params() const;  // MoE: top_k experts counted, the embedding lookup not (OpenAI's card)
  int64_t num_matmul_params() const;  // projections (MoE: the active experts) + router + lm_head
  // 6 * matmul params (lm_head included) + 6 * sum over layers of
  // heads * (qk_dim + v_dim) * min(window, seq) (12 heads head_dim ... without MLA): fwd + bwd FLOPs per token.
  double flops_per_token(int64_t seq_len) const;
  std::string describe() const;
};

// One row of knobs.def, typed through the member it names.
struct Knob {
  std::string key;   // model.<key>
  std::string hf;    // config.json field ("" when none)
  std::string help;
  std::function<config::Field(Args&)> bind;       // the key bound to one Args (YAML, CLI)
  std::function<void(const Args& from, Args& to)> copy;
  std::function<std::string(const Args&)> check;  // "" when the value passes the row's check, else why not
  std::string (*inapplicable)(const Args&);        // "" when the knob acts on this configuration, else why not
  std::function<void(const Args&, nlohmann::json&)> to_json;          // j[key] = value
  std::function<void(const nlohmann::json&, Args&, const std::string& field)> from_json;  // value = j[field]
};
const std::vector<Knob>& knobs();
const Knob* find_knob(const std::string& key);
// An integer field of a config.json as written: a JSON integer, or a float holding a whole number (some exporters
// write 4096.0); anything else (4.5, 1e30, "4096", 2^64 - 1) is refused naming the field, never truncated.
int64_t json_int(const nlohmann::json& v, const std::string& field);

}  // namespace titan::decoder
