#include "models/decoder/args.h"

#include <algorithm>
#include <cmath>

#include "src/tensor/error.h"

namespace titan::decoder {

using json = nlohmann::json;

namespace {
// The rules a knobs.def row may name: "" when the value passes, else what it must be.
template <class T>
std::string any(const T&) {
  return "";
}
template <class T>
std::string positive(const T& v) {
  return v > 0 && std::isfinite((double)v) ? "" : "must be > 0";
}
template <class T>
std::string non_negative(const T& v) {
  return v >= 0 && std::isfinite((double)v) ? "" : "must be >= 0 (0 = off)";
}
template <class T>
std::string even_positive(const T& v) {
  return v <= 0 ? "must be > 0" : v % 2 ? "must be even for RoPE (it rotates pairs of dims)" : "";
}

template <class T>
std::string nope_interval(const T& v) {
  return v < 0 ? "must be >= 0 (0 = off)"
         : v == 1 ? "must be 0 (off) or >= 2: 1 takes RoPE off every layer, leaving the rope_* keys inert (titan "
                    "builds no position-free model)"
                  : "";
}

// The most decoder blocks titan builds: far beyond any published model (hundreds), small enough that a per-layer
// table from an untrusted config.json is never a huge allocation.
constexpr int64_t kMaxLayers = 65536;
template <class T>
std::string layer_count(const T& v) {
  return v <= 0 ? "must be > 0" : v > kMaxLayers ? "must be at most " + std::to_string(kMaxLayers) : "";
}

// The parameter count in T: int64_t for num_params, double for validate's bound (no overflow either way).
template <class T>
T count_params(const Args& a) {
  const T dim = (T)a.dim, head_dim = (T)a.head_dim, n_heads = (T)a.n_heads, n_kv_heads = (T)a.n_kv_heads;
  const T hidden_dim = (T)a.hidden_dim, moe_hidden_dim = (T)a.moe_hidden_dim, experts = (T)a.moe_num_experts;
  const bool ln = a.norm_type == nn::NormKind::layernorm;
  const T norm = ln ? 2 * dim : dim;
  const T block_norms = a.norm_placement == NormPlacement::sandwich ? 4 : 2;
  const T qk_width = a.qk_norm_scope == QkNormScope::projection ? (n_heads + n_kv_heads) * head_dim : 2 * head_dim;
  const T qk = a.qk_norm ? (ln ? 2 : 1) * qk_width : 0;
  const T rel = a.attn_bias == nn::ScoreBias::relative ? n_heads * (2 * (T)a.attn_relative_max_distance - 1) : 0;
  T attn_p = dim * n_heads * head_dim * 2 + dim * n_kv_heads * head_dim * 2 +
             (a.attn_proj_bias ? n_heads * head_dim + 2 * n_kv_heads * head_dim + dim : 0);
  if (a.mla()) {  // q (through its latent), kv_a -> [latent, rope key], kv_b -> [nope key, value] per head, o
    const T qr = (T)a.q_lora_rank, kr = (T)a.kv_lora_rank, dn = (T)a.qk_nope_head_dim, dr = (T)a.qk_rope_head_dim;
    const T dv = (T)a.v_head_dim, b = a.attn_proj_bias ? 1 : 0;
    const T q = a.q_lora_rank > 0 ? dim * qr + b * qr + (ln ? 2 : 1) * qr + qr * n_heads * (dn + dr)
                                  : dim * n_heads * (dn + dr);
    attn_p = q + dim * (kr + dr) + b * (kr + dr) + (ln ? 2 : 1) * kr + kr * n_heads * (dn + dv) +
             n_heads * dv * dim + b * dim;
  }
  attn_p += (a.attn_sinks ? n_heads : 0) + qk + rel;
  const T expert = 3 * dim * moe_hidden_dim + (a.moe_expert_bias ? 2 * moe_hidden_dim + dim : 0);
  T total = 0;
  for (int64_t i = 0; i < a.n_layers; ++i) {
    T mlp = 3 * dim * hidden_dim;
    if (a.is_moe_layer(i))
      mlp = dim * experts + (a.moe_router_bias ? experts : 0) + experts * expert +
            3 * dim * (T)a.shared_expert_hidden();
    total += attn_p + block_norms * norm + mlp;
  }
  return total + norm + (T)a.vocab_size * dim * (a.enable_weight_tying ? 1 : 2);
}

// Where a knob acts (knobs.def's "acts when" column): "" when it acts on this configuration, else why not.
std::string always(const Args&) { return ""; }
std::string moe_layers(const Args& m) {
  return m.moe_enabled ? "" : "it configures MoE layers and this model has none (model.moe_enabled: false; "
                              "model.name qwen3_moe and gpt_oss have them)";
}
std::string dense_mlp(const Args& m) {
  return m.every_layer_moe() ? "every layer is MoE, so there is no dense MLP for it to size (the experts' size is "
                               "model.moe_hidden_dim)"
                             : "";
}
std::string rope_scaled(const Args& m) {
  return m.rope_scaling_type == RopeScalingType::none ? "model.rope_scaling_type is none (set yarn, llama3 or linear)" : "";
}
std::string yarn(const Args& m) {
  return m.rope_scaling_type == RopeScalingType::yarn
             ? ""
             : "model.rope_scaling_type is " + config::enum_name(m.rope_scaling_type) + ", not yarn";
}
std::string yarn_table_scale(const Args& m) {  // the RoPE tables' scale, which an L2 norm after RoPE cancels
  const std::string why = yarn(m);
  if (!why.empty()) return why;
  return m.qk_l2_norm && !m.mla() ? "model.qk_l2_norm normalizes q and k after RoPE, cancelling the tables' scale" : "";
}
std::string llama3_rope(const Args& m) {
  return m.rope_scaling_type == RopeScalingType::llama3
             ? ""
             : "model.rope_scaling_type is " + config::enum_name(m.rope_scaling_type) + ", not llama3";
}
std::string sliding_layers(const Args& m) {
  if (m.sliding_window == 0) return "model.sliding_window is 0 (no sliding layers)";
  if (m.attn_mask_type == nn::MaskKind::sliding_window) return "model.attn_mask_type sliding_window windows every layer";
  return "";
}
std::string first_dense(const Args& m) {
  if (!m.moe_enabled) return moe_layers(m);
  if (m.moe_first_dense > 0 && m.moe_first_dense < m.moe_every)
    return "the first " + std::to_string(m.moe_first_dense) + " layer(s) are dense already with model.moe_every " +
           std::to_string(m.moe_every);
  return "";
}
std::string prefix_lm(const Args& m) {
  return m.attn_mask_type == nn::MaskKind::prefix_lm ? "" : "model.attn_mask_type is not prefix_lm";
}
std::string relative_bias(const Args& m) {
  return m.attn_bias == nn::ScoreBias::relative ? "" : "model.attn_bias is not relative";
}
std::string periodic_layers(const Args& m) {
  const std::string why = sliding_layers(m);
  if (!why.empty()) return why;
  return m.sliding_window_layers == SlidingLayers::periodic
             ? ""
             : "model.sliding_window_layers is " + config::enum_name(m.sliding_window_layers) + ", not periodic";
}
std::string some_sliding(const Args& m) {
  return m.sliding_window > 0 ? "" : "model.sliding_window is 0 (no sliding layers)";
}
std::string rope_context(const Args& m) {
  return m.rope_scaling_type == RopeScalingType::yarn || m.rope_scaling_type == RopeScalingType::llama3
             ? ""
             : "model.rope_scaling_type is " + config::enum_name(m.rope_scaling_type) +
                   " (only yarn and llama3 scale from an original context)";
}
std::string qk_normed(const Args& m) { return m.qk_norm ? "" : "model.qk_norm is false (no QK-norm to span)"; }
std::string gqa(const Args& m) {
  return m.mla() ? "model.kv_lora_rank > 0: multi-head latent attention gives every head its own key and value, "
                   "sized by qk_nope_head_dim, qk_rope_head_dim and v_head_dim"
                 : "";
}
std::string mla(const Args& m) {
  return m.mla() ? "" : "model.kv_lora_rank is 0 (no multi-head latent attention; set it > 0 for DeepSeek's MLA)";
}
std::string shared_expert(const Args& m) {
  const std::string why = moe_layers(m);
  return !why.empty() ? why : m.moe_shared_expert ? "" : "model.moe_shared_expert is false (no shared expert to size)";
}
std::string grouped_routing(const Args& m) {
  const std::string why = moe_layers(m);
  return !why.empty() ? why : m.moe_n_group > 1 ? "" : "model.moe_n_group is 1 (one group: routing is not group-limited)";
}

std::string nope_fits(const Args& m) {
  return m.nope_layer_interval <= m.n_layers
             ? ""
             : "model.nope_layer_interval " + std::to_string(m.nope_layer_interval) + " is beyond the " +
                   std::to_string(m.n_layers) + " layers (model.n_layers): no layer goes without RoPE";
}
std::string nope_layers(const Args& m) {
  if (m.nope_layer_interval == 0) return "model.nope_layer_interval is 0 (every layer has RoPE; no NoPE layer to tune)";
  return nope_fits(m);
}
std::string temperature_tuned(const Args& m) {
  const std::string why = nope_layers(m);
  return !why.empty() ? why : m.nope_attn_scale > 0 ? "" : "model.nope_attn_scale is 0 (no temperature tuning)";
}

template <class T>
Knob make_knob(const char* key, T Args::*m, const char* hf, std::string (*rule)(const T&),
               std::string (*inapplicable)(const Args&), const char* help) {
  Knob k;
  k.key = key;
  k.hf = hf;
  k.help = help;
  k.inapplicable = inapplicable;
  k.bind = [key = std::string("model.") + key, m, help](Args& a) { return config::bind(key, &(a.*m), help); };
  k.copy = [m](const Args& from, Args& to) { to.*m = from.*m; };
  k.check = [m, rule](const Args& a) { return rule(a.*m); };
  k.to_json = [m, key](const Args& a, json& j) { j[key] = a.*m; };
  k.from_json = [m, rule](const json& j, Args& a, const std::string& field) {
    const json& v = j.at(field);
    if constexpr (std::is_same_v<T, int64_t>) {  // 4.5 or "4" is not silently 4; a whole float (4096.0) is 4096
      a.*m = json_int(v, field);
    } else {
      try {
        a.*m = v.get<T>();
      } catch (const Error& e) {
        fail("model config: ", field, ": ", e.what());
      } catch (const std::exception& e) {
        fail("model config: ", field, " = ", v.dump().substr(0, 80), " is not ", config::type_name<T>(), " (", e.what(),
             ")");
      }
    }
    // checked as read, with the value as written: before anything is sized by it
    const std::string why = rule(a.*m);
    TITAN_CHECK(why.empty(), "model config: ", field, " = ", v.dump().substr(0, 80), " ", why);
  };
  return k;
}
}  // namespace

const std::vector<Knob>& knobs() {
  static const std::vector<Knob> table = {
#define KNOB(T, name, dflt, hf, check, acts, help) make_knob<T>(#name, &Args::name, hf, &check<T>, &acts, help),
#include "models/decoder/knobs.def"
#undef KNOB
  };
  return table;
}

int64_t json_int(const json& v, const std::string& field) {
  const bool whole_float = v.is_number_float() && std::isfinite(v.get<double>()) &&
                           v.get<double>() == std::floor(v.get<double>()) && std::fabs(v.get<double>()) < 9.0e15;
  TITAN_CHECK((v.is_number_integer() && (!v.is_number_unsigned() || v.get<uint64_t>() <= (uint64_t)INT64_MAX)) ||
                  whole_float,
              "model config: ", field, " = ", v.dump().substr(0, 80), " is not an integer");
  return whole_float ? (int64_t)v.get<double>() : v.get<int64_t>();
}

const Knob* find_knob(const std::string& key) {
  for (const auto& k : knobs())
    if (k.key == key) return &k;
  return nullptr;
}

bool Args::any_dense_layer() const {
  for (int64_t i = 0; i < n_layers; ++i)
    if (!is_moe_layer(i)) return true;
  return false;
}

nn::AttentionVariant Args::attention() const {
  nn::AttentionVariant v;
  v.mask = attn_mask_type;
  v.prefix_len = attn_prefix_len;
  v.softcap = attn_logit_softcap;
  v.bias = attn_bias;
  v.relative_max_distance = attn_relative_max_distance;
  return v;
}

RopeScaling Args::rope_scaling() const {
  if (rope_scaling_type == RopeScalingType::none) return RopeScaling{};
  return RopeScaling{rope_scaling_type,  rope_scaling_factor,  rope_original_max_position_embeddings,
                     rope_yarn_beta_fast, rope_yarn_beta_slow, rope_yarn_truncate,
                     rope_yarn_mscale,    rope_yarn_mscale_all_dim, rope_low_freq_factor, rope_high_freq_factor};
}

double Args::attention_scale() const {
  double s = 1.0 / std::sqrt(query_pre_attn_scalar > 0 ? query_pre_attn_scalar : (double)qk_dim());
  if (rope_scaling_type == RopeScalingType::yarn && rope_yarn_mscale_all_dim > 0 && rope_scaling_factor > 1) {
    const double m = 0.1 * rope_yarn_mscale_all_dim * std::log(rope_scaling_factor) + 1.0;  // HF yarn_get_mscale
    s *= m * m;
  }
  return s;
}

namespace {
// A knob as the user wrote it: model.<key>, or the config.json field it was read from.
std::string written_key(const std::string& k, bool hf_import) {
  const Knob* kb = find_knob(k);
  return hf_import && kb && !kb->hf.empty() ? kb->hf : hf_import ? "titan_decoder." + k : "model." + k;
}
// Each knob's own rule (knobs.def), before anything is sized by the values.
void check_each_knob(const Args& a, bool hf_import) {
  for (const auto& k : knobs()) {
    const std::string why = k.check(a);
    if (!why.empty()) {
      Args copy = a;
      fail(hf_import ? "model config: " : "config error: ", written_key(k.key, hf_import), " ", why, ", got ",
           k.bind(copy).get());
    }
  }
}
}  // namespace

Args& Args::resolve() {
  check_each_knob(*this, from_config_json);  // n_layers sizes the table below
  if (!from_config_json) {
    // sliding layers: every layer, alternate ones (0, 2, ...) or all but every period-th; attn_mask_type
    // sliding_window: every layer
    layer_window.assign(std::max<int64_t>(n_layers, 0), 0);
    for (int64_t i = 0; i < n_layers; ++i) {
      const bool slides = sliding_window_layers == SlidingLayers::all ||
                          (sliding_window_layers == SlidingLayers::alternate && i % 2 == 0) ||
                          (sliding_window_layers == SlidingLayers::periodic && (i + 1) % sliding_window_period != 0);
      if (sliding_window > 0 && (slides || attn_mask_type == nn::MaskKind::sliding_window))
        layer_window[i] = sliding_window;
    }
    if (name == Family::gpt_oss) max_position_embeddings = 131072;
    if (name == Family::mixtral) max_position_embeddings = 32768;  // Mixtral-8x7B's
    if (name == Family::gemma3) max_position_embeddings = 131072;  // Gemma 3 4B - 27B's (1B's is 32768)
    if (name == Family::olmo2) max_position_embeddings = 4096;     // OLMo-2-1124's
    if (name == Family::llama4) max_position_embeddings = 131072;  // Llama4TextConfig's default
    // a context scaled from an original one (yarn, llama3) is factor x the original (HF's YaRN derives its factor
    // from this ratio in some versions: keep the two consistent)
    if (rope_scaling_type == RopeScalingType::yarn || rope_scaling_type == RopeScalingType::llama3)
      max_position_embeddings = std::llround(rope_scaling_factor * (double)rope_original_max_position_embeddings);
    // DeepSeek-V3's router always carries its selection biases (HF's e_score_correction_bias): model state
    moe_route_bias = moe_enabled && (moe_bias_update_rate > 0 || name == Family::deepseek_v3);
  }
  if (mla()) {  // what HF's DeepseekV3Config derives: a key and value per head, head_dim the RoPE part's
    n_kv_heads = n_heads;
    head_dim = qk_rope_head_dim;
  }
  if (moe_n_group == 1) moe_topk_group = 1;  // one group, kept (a topk_group given with it is refused as inert)
  validate();
  return *this;
}

void Args::validate(bool hf_import) const {
  const std::string head = hf_import ? "model config: " : "config error: ";
  auto key = [&](const std::string& k) { return written_key(k, hf_import); };
  check_each_knob(*this, hf_import);
  {  // the sizes together: a count int64 holds (and far beyond any machine: 10^15 parameters is 4 PB of fp32)
    const double params = count_params<double>(*this);
    TITAN_CHECK(params < 1e15, head, "the sizes give ", params, " parameters (", key("vocab_size"), " ", vocab_size,
                ", ", key("dim"), " ", dim, ", ", key("n_layers"), " ", n_layers, ", ", key("hidden_dim"), " ",
                hidden_dim, ", ", key("n_heads"), " ", n_heads, " x ", key("head_dim"), " ", head_dim,
                (moe_enabled ? ", " + key("moe_num_experts") + " " + std::to_string(moe_num_experts) : std::string()),
                "): more than 10^15, beyond what titan plans; a size is mistyped");
  }
  TITAN_CHECK(hidden_dim > 0 || !any_dense_layer(), head, key("hidden_dim"), " must be > 0, got ", hidden_dim,
              " (a layer has a dense MLP)");
  TITAN_CHECK(n_heads % n_kv_heads == 0, head, key("n_heads"), " (", n_heads, ") must be a multiple of ",
              key("n_kv_heads"), " (", n_kv_heads, ")");
  TITAN_CHECK(!moe_enabled || moe_top_k <= moe_num_experts, head, key("moe_top_k"), " = ", moe_top_k,
              " must be in [1, ", key("moe_num_experts"), " = ", moe_num_experts, "]");
  if (moe_enabled) {
    bool any_moe = false;
    for (int64_t i = moe_first_dense; i < n_layers; ++i) any_moe = any_moe || (i + 1) % moe_every == 0;
    TITAN_CHECK(any_moe, head, key("moe_every"), " ", moe_every, " and ", key("moe_first_dense"), " ",
                moe_first_dense, " leave none of the ", n_layers, " layers MoE");
  }
  if (mla()) {
    TITAN_CHECK(n_kv_heads == n_heads && head_dim == qk_rope_head_dim, head, "multi-head latent attention (",
                key("kv_lora_rank"), " ", kv_lora_rank, ") gives every head its own key: ", key("n_kv_heads"), " ",
                n_kv_heads, " must equal ", key("n_heads"), " ", n_heads, " and ", key("head_dim"), " ", head_dim,
                " the RoPE part's ", key("qk_rope_head_dim"), " ", qk_rope_head_dim);
    TITAN_CHECK(!qk_norm, head, key("qk_norm"), " with multi-head latent attention (", key("kv_lora_rank"), " ",
                kv_lora_rank, "): MLA normalizes its latents instead (q_a_layernorm, kv_a_layernorm); set qk_norm false");
  }
  TITAN_CHECK(attn_chunk_size == 0 || attn_mask_type != nn::MaskKind::prefix_lm, head, key("attn_chunk_size"),
              " with model.attn_mask_type prefix_lm is not supported (a chunk boundary would hide the prefix)");
  TITAN_CHECK(!moe_enabled || moe_topk_group <= moe_n_group, head, key("moe_topk_group"), " ", moe_topk_group,
              " must be <= ", key("moe_n_group"), " ", moe_n_group);
  if (moe_enabled && moe_n_group > 1) {
    TITAN_CHECK(moe_num_experts % moe_n_group == 0 && moe_num_experts / moe_n_group >= 2, head, key("moe_n_group"),
                " ", moe_n_group, " must divide ", key("moe_num_experts"), " ", moe_num_experts,
                " into groups of at least 2 experts (a group scores its 2 best)");
    TITAN_CHECK(moe_topk_group <= moe_n_group && moe_top_k <= moe_topk_group * (moe_num_experts / moe_n_group), head,
                key("moe_topk_group"), " ", moe_topk_group, " must be <= ", key("moe_n_group"), " ", moe_n_group,
                " and its groups must hold ", key("moe_top_k"), " ", moe_top_k, " experts");
  }
  TITAN_CHECK((rope_yarn_mscale > 0) == (rope_yarn_mscale_all_dim > 0) || rope_yarn_mscale == 0, head,
              key("rope_yarn_mscale"), " ", rope_yarn_mscale, " needs ", key("rope_yarn_mscale_all_dim"),
              " > 0 too (the attention factor is their ratio)");
  TITAN_CHECK(sliding_window_period >= 2 || !periodic_layers(*this).empty(), head, key("sliding_window_period"),
              " must be >= 2 (every period-th layer full, the rest sliding), got ", sliding_window_period);
  TITAN_CHECK(rope_scaling_type == RopeScalingType::none || rope_scaling_factor > 1.0, head,
              key("rope_scaling_type"), " ", config::enum_name(rope_scaling_type), " with ",
              key("rope_scaling_factor"), " ", rope_scaling_factor,
              " scales nothing: give a factor > 1 (the context extension, e.g. 8 for Llama-3.1, 32 for gpt-oss)");
  // equal factors: no smoothed band, every frequency scaled or kept (Llama 4 Scout's 1 and 1)
  TITAN_CHECK(rope_high_freq_factor >= rope_low_freq_factor, head, "RoPE scaling needs 0 < ",
              key("rope_low_freq_factor"), " <= ", key("rope_high_freq_factor"), ", got ", rope_low_freq_factor,
              " and ", rope_high_freq_factor);
  attention().validate();
  TITAN_CHECK((int64_t)layer_window.size() == n_layers, "decoder: layer_window has ", layer_window.size(),
              " entries for ", n_layers, " layers");
  for (size_t i = 0; i < layer_window.size(); ++i) {
    TITAN_CHECK(layer_window[i] >= 0, head, "layer ", i, " has a sliding window of ", layer_window[i],
                " tokens; a window is >= 0 (0: full attention)");
    TITAN_CHECK(attn_mask_type != nn::MaskKind::sliding_window || layer_window[i] > 0, head,
                "model.attn_mask_type sliding_window needs a window on every layer: set model.sliding_window > 0 (",
                config::enum_name(name), " layer ", i, " has none)");
    TITAN_CHECK(attn_mask_type != nn::MaskKind::prefix_lm || layer_window[i] == 0, head,
                "model.attn_mask_type prefix_lm with sliding layers is not supported (", config::enum_name(name),
                " layer ", i, " has window ", layer_window[i],
                "): a sliding layer would hide the prefix; use full layers (sliding_window: 0)");
  }
}

namespace {
int64_t expert_params(const Args& a) {
  return 3 * a.dim * a.moe_hidden_dim + (a.moe_expert_bias ? 2 * a.moe_hidden_dim + a.dim : 0);
}
}  // namespace

int64_t Args::num_params() const { return count_params<int64_t>(*this); }

int64_t Args::num_active_params() const {
  int64_t idle = 0;
  for (int64_t i = 0; i < n_layers; ++i)
    if (is_moe_layer(i)) idle += (moe_num_experts - moe_top_k) * expert_params(*this);
  return num_params() - idle - num_embedding_params();
}

int64_t Args::num_matmul_params() const {
  int64_t attn_mm = dim * n_heads * head_dim * 2 + dim * n_kv_heads * head_dim * 2;  // q, o, k, v
  if (mla()) {  // q (or its latent and expansion), kv_a, kv_b, o
    const int64_t dq = n_heads * qk_dim();
    attn_mm = (q_lora_rank > 0 ? dim * q_lora_rank + q_lora_rank * dq : dim * dq) +
              dim * (kv_lora_rank + qk_rope_head_dim) + kv_lora_rank * n_heads * (qk_nope_head_dim + v_head_dim) +
              n_heads * v_head_dim * dim;
  }
  int64_t total = 0;
  for (int64_t i = 0; i < n_layers; ++i)
    total += attn_mm + (is_moe_layer(i) ? dim * moe_num_experts + moe_top_k * 3 * dim * moe_hidden_dim +
                                              3 * dim * shared_expert_hidden()
                                        : 3 * dim * hidden_dim);
  return total + vocab_size * dim;  // + lm_head
}

double Args::flops_per_token(int64_t seq_len) const {
  double attn_f = 0;  // q.k over qk_dim and p.v over v_dim per visible pair, 3x for the backward
  for (int64_t i = 0; i < (int64_t)layer_window.size(); ++i) {
    int64_t keys = seq_len;  // TorchTitan's count: every key of the sequence (a window's or a chunk's at most)
    if (layer_window[i] > 0) keys = std::min(keys, layer_window[i]);
    if (layer_chunk(i) > 0) keys = std::min(keys, layer_chunk(i));
    attn_f += 6.0 * n_heads * (double)(qk_dim() + v_dim()) * (double)keys;
  }
  return 6.0 * (double)num_matmul_params() + attn_f;
}

std::string Args::describe() const {
  std::string ffn = "ffn " + std::to_string(hidden_dim);
  if (moe_enabled) {
    const int64_t n_moe = moe_layers_before(n_layers);
    ffn = std::to_string(moe_num_experts) + " experts (top-" + std::to_string(moe_top_k) + ", " +
          config::enum_name(moe_score_func) + (moe_n_group > 1 ? ", " + std::to_string(moe_topk_group) + " of " +
                                                                     std::to_string(moe_n_group) + " groups"
                                                               : std::string()) +
          (moe_shared_expert ? ", + shared" : "") + ") x ffn " +
          std::to_string(moe_hidden_dim) +
          (n_moe < n_layers ? " in " + std::to_string(n_moe) + " layers, dense ffn " + std::to_string(hidden_dim)
                            : "");
  }
  const std::string heads =
      mla() ? "MLA heads " + std::to_string(n_heads) + " x (" + std::to_string(qk_nope_head_dim) + " + " +
                  std::to_string(qk_rope_head_dim) + " rope, v " + std::to_string(v_head_dim) + "), kv latent " +
                  std::to_string(kv_lora_rank) + (q_lora_rank > 0 ? ", q latent " + std::to_string(q_lora_rank) : "")
            : "heads " + std::to_string(n_heads) + "/" + std::to_string(n_kv_heads) + " x " + std::to_string(head_dim);
  std::string s = config::enum_name(name) + ": " + std::to_string(n_layers) + " layers, dim " + std::to_string(dim) +
                  ", " + heads + ", " + ffn + ", vocab " + std::to_string(vocab_size);
  if (nope_layer_interval > 0 || attn_chunk_size > 0)
    s += (nope_layer_interval > 0 && nope_layer_interval <= n_layers ? ", NoPE every " + std::to_string(nope_layer_interval) + " layers" : std::string()) +
         (attn_chunk_size > 0 ? ", RoPE layers chunked by " + std::to_string(attn_chunk_size) : std::string());
  if (moe_enabled)
    s += "; " + std::to_string(num_params()) + " parameters, " + std::to_string(num_active_params()) + " active";
  return s;
}

}  // namespace titan::decoder
