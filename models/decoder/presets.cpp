#include "models/decoder/presets.h"

#include "src/config/field.h"
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
// Mixtral (mistralai/Mixtral-8x7B-v0.1's config): every layer MoE, softmax top-2 renormalized, no QK-norm
const Args kMixtral{.name = Family::mixtral,
                    .qk_norm = false,
                    .norm_eps = 1e-5,
                    .rope_theta = 1000000.0,
                    .moe_enabled = true,
                    .moe_top_k = 2};
// OLMo 2 (allenai/OLMo-2-1124-7B's config): norms after the attention and MLP outputs, QK-norm over the whole
// projections, no biases, RoPE base 500000
const Args kOlmo2{.name = Family::olmo2,
                  .qk_norm_scope = QkNormScope::projection,
                  .norm_placement = NormPlacement::post,
                  .rope_theta = 500000.0};
// Gemma 3 text (google/gemma-3-4b-pt's text config): sandwich norms scaling by 1 + weight, per-head QK-norm, GELU's
// tanh form, tied embeddings times sqrt(dim), scores over sqrt(256), 5 sliding layers (RoPE base 10000) to 1 full
// (1e6); the sizes' windows and RoPE scaling are the flavors'
const Args kGemma3{.name = Family::gemma3,
                   .norm_unit_offset = true,
                   .norm_placement = NormPlacement::sandwich,
                   .activation = Activation::gelu_pytorch_tanh,
                   .enable_weight_tying = true,
                   .sliding_window = 1024,
                   .sliding_window_layers = SlidingLayers::periodic,
                   .rope_local_theta = 10000.0,
                   .query_pre_attn_scalar = 256.0,
                   .embed_scale = 0.0};
// DeepSeek-V3 (deepseek-ai/DeepSeek-V3's config): multi-head latent attention with the query latent, RoPE on 64
// interleaved dims per head, YaRN with DeepSeek's mscale; sigmoid routing with selection biases, 8 of 256 experts
// from 4 of 8 groups, renormalized and scaled by 2.5, one shared expert, the first 3 layers dense. Multi-token
// prediction (num_nextn_predict_layers) is not built: HF's DeepseekV3ForCausalLM drops those layers too.
const Args kDeepseekV3{.name = Family::deepseek_v3,
                       .kv_lora_rank = 512,
                       .q_lora_rank = 1536,
                       .qk_nope_head_dim = 128,
                       .qk_rope_head_dim = 64,
                       .v_head_dim = 128,
                       .qk_norm = false,
                       .rope_theta = 10000.0,
                       .rope_interleave = true,
                       .moe_enabled = true,
                       .moe_score_func = RouterScore::sigmoid,
                       .moe_shared_expert = true,
                       .moe_n_group = 8,
                       .moe_topk_group = 4,
                       .moe_routed_scale = 2.5,
                       .moe_first_dense = 3,
                       .rope_scaling_type = RopeScalingType::yarn,
                       .rope_scaling_factor = 40.0,
                       .rope_yarn_mscale = 1.0,
                       .rope_yarn_mscale_all_dim = 1.0};
// Llama 4 (meta-llama/Llama-4-Scout-17B-16E's text config): iRoPE (every 4th layer without RoPE, attending
// globally with its queries' temperature tuned; the others chunked by 8192, RoPE on interleaved pairs, their q and k
// L2-normed after it), Llama-3 RoPE scaling; MoE with a shared expert, sigmoid top-1 routing whose weight scales
// the expert's input. Maverick (flavor maverick) alternates dense and MoE layers and drops the L2 norm.
const Args kLlama4{.name = Family::llama4,
                   .qk_norm = false,
                   .qk_l2_norm = true,
                   .norm_eps = 1e-5,
                   .rope_theta = 500000.0,
                   .rope_interleave = true,
                   .nope_layer_interval = 4,
                   .attn_chunk_size = 8192,
                   .nope_attn_scale = 0.1,
                   .moe_enabled = true,
                   .moe_top_k = 1,
                   .moe_score_func = RouterScore::sigmoid,
                   .moe_renormalize = false,
                   .moe_shared_expert = true,
                   .moe_score_before_experts = true,
                   .rope_scaling_type = RopeScalingType::llama3,
                   .rope_scaling_factor = 16.0,
                   .rope_original_max_position_embeddings = 8192,
                   .rope_low_freq_factor = 1.0,
                   .rope_high_freq_factor = 1.0};
const Args kLlama3{.name = Family::llama3,
                   .qk_norm = false,
                   .norm_eps = 1e-5,
                   .rope_theta = 500000.0,
                   .rope_original_max_position_embeddings = 8192};

// model.flavor: each member's named sizes, the knobs each sets (values as YAML writes them). The published
// configs: Qwen/Qwen3-*, Qwen/Qwen3-30B-A3B, openai/gpt-oss-*, meta-llama/Llama-2-*, Meta-Llama-3(.1)-*,
// mistralai/Mixtral-8x7B-v0.1 and -8x22B-v0.1, allenai/OLMo-2-0425-1B, -1124-7B, -1124-13B and -0325-32B,
// google/gemma-3-{1b,4b,12b,27b}-pt (text); Megatron-LM's GPT 1.7B (a validation row's model, as a llama3);
// "debug" / "bench": titan's small models (configs/*_debug.yaml, configs/qwen3_bench.yaml).
struct Flavor {
  Family family;
  std::string name;
  std::vector<std::pair<std::string, std::string>> knobs;
};
using KV = std::vector<std::pair<std::string, std::string>>;
KV dense(const char* dim, const char* layers, const char* heads, const char* kv, const char* head_dim,
         const char* hidden, const char* vocab) {
  return {{"dim", dim},   {"n_layers", layers}, {"n_heads", heads}, {"n_kv_heads", kv},
          {"head_dim", head_dim}, {"hidden_dim", hidden}, {"vocab_size", vocab}};
}
// Every layer MoE (gpt-oss): the intermediate size is the experts' (model.moe_hidden_dim); there is no dense MLP.
KV all_moe(const char* dim, const char* layers, const char* heads, const char* kv, const char* head_dim,
           const char* expert_hidden, const char* vocab) {
  KV a = dense(dim, layers, heads, kv, head_dim, expert_hidden, vocab);
  for (auto& [k, v] : a)
    if (k == "hidden_dim") k = "moe_hidden_dim";
  return a;
}
KV with(KV a, const KV& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}
const std::vector<Flavor>& flavor_table() {
  static const std::vector<Flavor> t = {
      {Family::qwen3, "debug", dense("256", "4", "4", "2", "64", "768", "256")},
      {Family::qwen3, "bench", dense("512", "8", "8", "4", "64", "1536", "256")},
      {Family::qwen3, "0.6b", with(dense("1024", "28", "16", "8", "128", "3072", "151936"), {{"enable_weight_tying", "true"}})},
      {Family::qwen3, "1.7b", with(dense("2048", "28", "16", "8", "128", "6144", "151936"), {{"enable_weight_tying", "true"}})},
      {Family::qwen3, "4b", with(dense("2560", "36", "32", "8", "128", "9728", "151936"), {{"enable_weight_tying", "true"}})},
      {Family::qwen3, "8b", with(dense("4096", "36", "32", "8", "128", "12288", "151936"), {{"enable_weight_tying", "false"}})},
      {Family::qwen3, "14b", with(dense("5120", "40", "40", "8", "128", "17408", "151936"), {{"enable_weight_tying", "false"}})},
      {Family::qwen3, "32b", with(dense("5120", "64", "64", "8", "128", "25600", "151936"), {{"enable_weight_tying", "false"}})},
      {Family::qwen3_moe, "debug",
       with(dense("128", "4", "4", "2", "32", "256", "256"),
            {{"moe_num_experts", "8"}, {"moe_top_k", "2"}, {"moe_hidden_dim", "128"}, {"moe_first_dense", "1"}})},
      {Family::qwen3_moe, "30b-a3b",
       {{"dim", "2048"}, {"n_layers", "48"}, {"n_heads", "32"}, {"n_kv_heads", "4"}, {"head_dim", "128"},
        {"vocab_size", "151936"}, {"moe_num_experts", "128"}, {"moe_top_k", "8"}, {"moe_hidden_dim", "768"},
        {"moe_first_dense", "0"}}},
      {Family::gpt_oss, "debug",
       with(all_moe("128", "4", "4", "2", "32", "128", "256"), {{"moe_num_experts", "8"}, {"moe_top_k", "2"}, {"sliding_window", "64"}})},
      {Family::gpt_oss, "20b",
       with(all_moe("2880", "24", "64", "8", "64", "2880", "201088"), {{"moe_num_experts", "32"}, {"moe_top_k", "4"}})},
      {Family::gpt_oss, "120b",
       with(all_moe("2880", "36", "64", "8", "64", "2880", "201088"), {{"moe_num_experts", "128"}, {"moe_top_k", "4"}})},
      {Family::llama3, "debug",
       with(dense("256", "4", "4", "2", "64", "768", "256"),
            {{"rope_scaling_type", "llama3"}, {"rope_scaling_factor", "8"}, {"rope_original_max_position_embeddings", "64"}})},
      {Family::mixtral, "debug",
       with(all_moe("128", "4", "4", "2", "32", "128", "256"), {{"moe_num_experts", "8"}, {"moe_top_k", "2"}})},
      {Family::mixtral, "8x7b",
       with(all_moe("4096", "32", "32", "8", "128", "14336", "32000"), {{"moe_num_experts", "8"}, {"moe_top_k", "2"}})},
      {Family::mixtral, "8x22b",
       with(all_moe("6144", "56", "48", "8", "128", "16384", "32768"), {{"moe_num_experts", "8"}, {"moe_top_k", "2"}})},
      {Family::olmo2, "debug", dense("256", "4", "4", "2", "64", "768", "256")},
      {Family::olmo2, "1b", dense("2048", "16", "16", "16", "128", "8192", "100352")},
      {Family::olmo2, "7b", dense("4096", "32", "32", "32", "128", "11008", "100352")},
      {Family::olmo2, "13b", dense("5120", "40", "40", "40", "128", "13824", "100352")},
      {Family::olmo2, "32b", dense("5120", "64", "40", "8", "128", "27648", "100352")},
      {Family::gemma3, "debug", with(dense("256", "6", "4", "2", "64", "768", "256"),
                                     {{"sliding_window", "64"}, {"query_pre_attn_scalar", "48"},
                                      {"rope_scaling_type", "linear"}, {"rope_scaling_factor", "8"}})},
      {Family::gemma3, "1b", with(dense("1152", "26", "4", "1", "256", "6912", "262144"), {{"sliding_window", "512"}})},
      {Family::gemma3, "4b", with(dense("2560", "34", "8", "4", "256", "10240", "262208"),
                                  {{"rope_scaling_type", "linear"}, {"rope_scaling_factor", "8"}})},
      {Family::gemma3, "12b", with(dense("3840", "48", "16", "8", "256", "15360", "262208"),
                                   {{"rope_scaling_type", "linear"}, {"rope_scaling_factor", "8"}})},
      {Family::gemma3, "27b", with(dense("5376", "62", "32", "16", "128", "21504", "262208"),
                                   {{"rope_scaling_type", "linear"}, {"rope_scaling_factor", "8"},
                                    {"query_pre_attn_scalar", "168"}})},
      // DeepSeek-V3 and Kimi K2 (moonshotai/Kimi-K2-Base: DeepseekV3ForCausalLM, 384 experts in one group, 64
      // heads, one dense layer); debug: titan's small MLA + grouped-routing model
      {Family::deepseek_v3, "debug",
       {{"dim", "128"}, {"n_layers", "4"}, {"n_heads", "4"}, {"vocab_size", "256"}, {"hidden_dim", "256"},
        {"kv_lora_rank", "32"}, {"q_lora_rank", "48"}, {"qk_nope_head_dim", "24"}, {"qk_rope_head_dim", "16"},
        {"v_head_dim", "20"}, {"moe_num_experts", "8"}, {"moe_top_k", "2"}, {"moe_hidden_dim", "64"},
        {"moe_n_group", "4"}, {"moe_topk_group", "2"}, {"moe_first_dense", "1"}, {"rope_scaling_factor", "4"},
        {"rope_original_max_position_embeddings", "64"}}},
      {Family::deepseek_v3, "671b",
       {{"dim", "7168"}, {"n_layers", "61"}, {"n_heads", "128"}, {"vocab_size", "129280"}, {"hidden_dim", "18432"},
        {"moe_num_experts", "256"}, {"moe_top_k", "8"}, {"moe_hidden_dim", "2048"}}},
      {Family::deepseek_v3, "kimi-k2",
       {{"dim", "7168"}, {"n_layers", "61"}, {"n_heads", "64"}, {"vocab_size", "163840"}, {"hidden_dim", "18432"},
        {"moe_num_experts", "384"}, {"moe_top_k", "8"}, {"moe_hidden_dim", "2048"}, {"moe_n_group", "1"},
        {"moe_routed_scale", "2.827"}, {"moe_first_dense", "1"}, {"rope_theta", "50000"},
        {"rope_scaling_factor", "32"}, {"rope_yarn_beta_fast", "1"}}},
      // Llama 4 (meta-llama/Llama-4-Scout-17B-16E and -Maverick-17B-128E, text); debug: titan's small iRoPE MoE
      {Family::llama4, "debug",
       {{"dim", "128"}, {"n_layers", "4"}, {"n_heads", "4"}, {"n_kv_heads", "2"}, {"head_dim", "32"},
        {"vocab_size", "256"}, {"hidden_dim", "256"}, {"moe_num_experts", "8"}, {"moe_top_k", "1"},
        {"moe_hidden_dim", "128"}, {"moe_every", "2"}, {"attn_chunk_size", "32"}, {"nope_floor_scale", "16"},
        {"rope_original_max_position_embeddings", "32"}}},
      {Family::llama4, "scout",
       {{"dim", "5120"}, {"n_layers", "48"}, {"n_heads", "40"}, {"n_kv_heads", "8"}, {"head_dim", "128"},
        {"vocab_size", "202048"}, {"hidden_dim", "16384"}, {"moe_num_experts", "16"}, {"moe_hidden_dim", "8192"}}},
      {Family::llama4, "maverick",
       {{"dim", "5120"}, {"n_layers", "48"}, {"n_heads", "40"}, {"n_kv_heads", "8"}, {"head_dim", "128"},
        {"vocab_size", "202048"}, {"hidden_dim", "16384"}, {"moe_num_experts", "128"}, {"moe_hidden_dim", "8192"},
        {"moe_every", "2"}, {"qk_l2_norm", "false"}, {"rope_scaling_type", "none"}}},
      {Family::llama3, "llama2-7b", with(dense("4096", "32", "32", "32", "128", "11008", "32000"), {{"rope_theta", "10000"}})},
      {Family::llama3, "llama2-13b", with(dense("5120", "40", "40", "40", "128", "13824", "32000"), {{"rope_theta", "10000"}})},
      {Family::llama3, "llama3-8b", dense("4096", "32", "32", "8", "128", "14336", "128256")},
      {Family::llama3, "llama3-70b", dense("8192", "80", "64", "8", "128", "28672", "128256")},
      {Family::llama3, "llama3.1-8b", dense("4096", "32", "32", "8", "128", "14336", "128256")},
      {Family::llama3, "llama3.1-70b", dense("8192", "80", "64", "8", "128", "28672", "128256")},
      {Family::llama3, "llama3.1-405b", dense("16384", "126", "128", "8", "128", "53248", "128256")},
      // Megatron-LM's GPT 1.7B (SC21 Table 1: 24 layers, hidden 2304, 24 heads, vocab 51,200) in the llama3
      // member's form: SwiGLU of GPT's MLP FLOPs (8h/3 = 6144), RoPE (configs/validation/megatron_gpt_a100.yaml)
      {Family::llama3, "megatron-gpt-1.7b",
       with(dense("2304", "24", "24", "24", "96", "6144", "51200"), {{"rope_theta", "10000"}})},
  };
  return t;
}
}  // namespace

std::vector<std::string> flavors(Family f) {
  std::vector<std::string> out;
  for (const auto& fl : flavor_table())
    if (fl.family == f) out.push_back(fl.name);
  return out;
}

namespace {
// A knob's value as YAML writes it, without the quotes around strings and enums (as typed).
std::string as_typed(const Knob& k, const Args& a) {
  Args copy = a;  // a Field binds a mutable slot
  std::string v = k.bind(copy).get();
  return v.size() >= 2 && v.front() == '"' ? v.substr(1, v.size() - 2) : v;
}

// The flavor `name` of family f, or null.
const Flavor* find_flavor(Family f, const std::string& name) {
  for (const auto& fl : flavor_table())
    if (fl.family == f && fl.name == name) return &fl;
  return nullptr;
}

// What a flavor sets: its own values, and for every key another flavor of the member sets, the member's preset
// value (so `--model.flavor 20b` on the debug config does not keep the debug flavor's sliding window). The
// third field: the flavor's own value (false: the preset's, which leaves the key to apply_preset).
struct FlavorKnob {
  std::string key, text;
  bool own;
};
std::vector<FlavorKnob> flavor_knobs(const Flavor& fl) {
  std::vector<FlavorKnob> out;
  for (const auto& [key, text] : fl.knobs) out.push_back({key, text, true});
  Args p = preset(fl.family);
  for (const auto& other : flavor_table()) {
    if (other.family != fl.family) continue;
    for (const auto& [key, text] : other.knobs) {
      bool have = false;
      for (const auto& kv : out) have = have || kv.key == key;
      if (have) continue;
      const Knob* k = find_knob(key);
      TITAN_CHECK(k, "internal: flavor ", other.name, " names an unknown knob ", key);
      out.push_back({key, as_typed(*k, p), false});
    }
  }
  return out;
}
}  // namespace

std::string apply_flavor(Args& a, const std::map<std::string, std::string>& where, std::set<std::string>& given) {
  if (a.flavor == "custom") return "";
  const Flavor* fl = find_flavor(a.name, a.flavor);
  const auto known = flavors(a.name);
  TITAN_CHECK(fl, "config error: model.flavor '", a.flavor, "' is not a flavor of model.name ", config::enum_name(a.name),
              config::suggestion(a.flavor, known), "; its flavors: ", config::join(known),
              ", or custom (the size as the dim / n_layers / ... keys give it)");
  auto at = [&](const std::string& k) {
    auto it = where.find(k);
    return it == where.end() ? std::string() : it->second;
  };
  auto from_cli = [](const std::string& w) { return w.rfind("--", 0) == 0; };
  auto file_of = [](const std::string& w) { return w.substr(0, w.rfind(':')); };
  const std::string fw = at("flavor");
  std::vector<std::string> overridden;
  for (const auto& [key, text, own] : flavor_knobs(*fl)) {
    const Knob* k = find_knob(key);
    TITAN_CHECK(k, "internal: flavor ", fl->name, " names an unknown knob ", key);
    Args want = a;
    k->bind(want).set(text, "model.flavor " + fl->name);
    const std::string have_text = k->bind(a).get(), want_text = k->bind(want).get();
    const std::string kw = at(key);
    if (kw.empty() || have_text == want_text || (from_cli(fw) && !from_cli(kw))) {  // the flavor sets it
      k->copy(want, a);
      if (own) given.insert(key);
      else if (have_text != want_text) given.erase(key);  // replaced by the member's preset value, as if not given
      continue;
    }
    const bool same_place = from_cli(kw) == from_cli(fw) && (from_cli(kw) || file_of(kw) == file_of(fw));
    TITAN_CHECK(!same_place, "config error: model.flavor ", fl->name, " (", fw, ") has model.", key, " = ", want_text,
                ", but ", kw, " gives ", have_text, "; drop one of the two, or set model.flavor: custom");
    overridden.push_back(key + " " + have_text + " (the flavor's: " + want_text + ")");
  }
  if (overridden.empty()) return "";
  const std::string was = a.flavor;
  a.flavor = "custom";
  return "model.flavor " + was + " with model." + config::join(overridden, ", model.") +
         " given after it: the model is custom (config.yaml says so)";
}

const Args& preset(Family f) {
  switch (f) {
    case Family::qwen3_moe: return kQwen3Moe;
    case Family::gpt_oss: return kGptOss;
    case Family::llama3: return kLlama3;
    case Family::mixtral: return kMixtral;
    case Family::olmo2: return kOlmo2;
    case Family::gemma3: return kGemma3;
    case Family::deepseek_v3: return kDeepseekV3;
    case Family::llama4: return kLlama4;
    default: return kQwen3;
  }
}

Args hf_defaults(Family f) {
  Args a;  // Qwen3Config, Qwen3MoeConfig, GptOssConfig, LlamaConfig, MixtralConfig, Olmo2Config, Gemma3TextConfig defaults
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
      a.vocab_size = 201088, a.dim = 2880, a.hidden_dim = a.moe_hidden_dim = 2880, a.n_layers = 36, a.n_heads = 64, a.n_kv_heads = 8;
      a.head_dim = 64, a.moe_num_experts = 128, a.moe_top_k = 4, a.swiglu_limit = 7.0, a.rope_theta = 150000.0;
      a.norm_eps = 1e-5;
      a.rope_scaling_type = RopeScalingType::yarn, a.rope_scaling_factor = 32.0;
      a.rope_original_max_position_embeddings = 4096, a.rope_yarn_truncate = false;
      break;
    case Family::llama3:
      a.vocab_size = 32000, a.dim = 4096, a.hidden_dim = 11008, a.n_layers = 32, a.n_heads = 32;
      break;
    case Family::mixtral:  // MixtralConfig: Mixtral-8x7B
      a.vocab_size = 32000, a.dim = 4096, a.hidden_dim = a.moe_hidden_dim = 14336, a.n_layers = 32, a.n_heads = 32;
      a.n_kv_heads = 8, a.moe_enabled = true, a.moe_num_experts = 8, a.moe_top_k = 2, a.rope_theta = 1e6;
      a.norm_eps = 1e-5;
      break;
    case Family::olmo2:  // Olmo2Config: OLMo-1's 7B sizes; QK-norm over the projections, norms after
      a.vocab_size = 50304, a.dim = 4096, a.hidden_dim = 11008, a.n_layers = 32, a.n_heads = 32;
      a.norm_eps = 1e-5, a.qk_norm = true, a.qk_norm_scope = QkNormScope::projection;
      a.norm_placement = NormPlacement::post;
      break;
    case Family::gemma3:  // Gemma3TextConfig: gemma-3 "2b"-like sizes; what Gemma3ForCausalLM fixes
      a.vocab_size = 262208, a.dim = 2304, a.hidden_dim = 9216, a.n_layers = 26, a.n_heads = 8, a.n_kv_heads = 4;
      a.head_dim = 256, a.rope_theta = 1e6, a.qk_norm = true, a.norm_unit_offset = true;
      a.norm_placement = NormPlacement::sandwich, a.query_pre_attn_scalar = 256, a.rope_local_theta = 10000;
      a.embed_scale = 0.0, a.max_position_embeddings = 131072;
      break;
    case Family::deepseek_v3:  // DeepseekV3Config: DeepSeek-V3's sizes; YaRN only when the file scales RoPE
      a = preset(Family::deepseek_v3);
      a.vocab_size = 129280, a.dim = 7168, a.hidden_dim = 18432, a.moe_hidden_dim = 2048, a.n_layers = 61;
      a.n_heads = a.n_kv_heads = 128, a.moe_num_experts = 256, a.moe_top_k = 8, a.rope_theta = 10000;
      a.rope_scaling_type = RopeScalingType::none, a.rope_scaling_factor = 1.0;
      a.rope_yarn_mscale = a.rope_yarn_mscale_all_dim = 0;
      a.max_position_embeddings = 4096;
      break;
    case Family::llama4:  // Llama4TextConfig: Llama 4 Scout's sizes, no RoPE scaling unless the file gives one
      a = preset(Family::llama4);
      a.vocab_size = 202048, a.dim = 5120, a.hidden_dim = 16384, a.moe_hidden_dim = 8192, a.n_layers = 48;
      a.n_heads = 40, a.n_kv_heads = 8, a.head_dim = 128, a.moe_num_experts = 16, a.moe_top_k = 1;
      a.rope_theta = 500000.0, a.norm_eps = 1e-5;
      a.rope_scaling_type = RopeScalingType::none, a.rope_scaling_factor = 1.0;
      a.max_position_embeddings = 131072;
      break;
  }
  a.activation = f == Family::gemma3 ? Activation::gelu_pytorch_tanh : Activation::silu;
  a.enable_weight_tying = f == Family::gemma3;
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

std::string knobs_beyond_preset(const Args& a) {
  static const std::set<std::string> size = {"name", "flavor", "dim", "n_layers", "n_heads", "n_kv_heads",
                                             "head_dim", "hidden_dim", "vocab_size", "moe_num_experts",
                                             "moe_top_k", "moe_hidden_dim", "moe_score_func"};
  Args p = preset(a.name);  // and the flavor's values: a flavor's own size is no ablation
  if (const Flavor* fl = find_flavor(a.name, a.flavor))
    for (const auto& [key, text, own] : flavor_knobs(*fl)) find_knob(key)->bind(p).set(text, "model.flavor " + fl->name);
  std::string out;
  for (const auto& k : knobs()) {
    if (size.count(k.key) || !k.inapplicable(a).empty()) continue;
    const std::string v = as_typed(k, a);
    if (v == as_typed(k, p)) continue;
    out += (out.empty() ? "" : ", ") + k.key + " " + v;
  }
  return out;
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
