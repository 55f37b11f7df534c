// The knob matrix (issue 12): every architecture key of the model section on
// every member of the decoder family (qwen3, qwen3_moe, gpt_oss, llama3, mixtral, olmo2, gemma3, deepseek_v3,
// llama4),
// loaded exactly as a user's YAML/command line is (family presets, then the
// refusal of keys that cannot act). Each cell either moves the loss away from
// the same model without the key, or is refused with an error naming the key.
// The table is printed; a silent knob fails the test.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <nlohmann/json.hpp>

#include "models/decoder/model.h"
#include "models/decoder/args.h"
#include "step/job_config.h"
#include "src/autograd/grad_mode.h"
#include "src/checkpoint/checkpoint.h"
#include "src/ops/ops.h"

namespace titan {
namespace {

using Overrides = std::vector<std::string>;

Overrides tiny(const std::string& family) {
  // deepseek_v3: MLA's sizes instead of the KV heads' and head_dim, 8 experts in 2 groups of which 1 is kept, every
  // layer MoE (as the other MoE members' tiny models)
  if (family == "deepseek_v3")
    return {"model.name", family, "model.dim", "32", "model.n_layers", "2", "model.n_heads", "4", "model.vocab_size",
            "50", "training.seq_len", "16", "model.kv_lora_rank", "8", "model.q_lora_rank", "8",
            "model.qk_nope_head_dim", "4", "model.qk_rope_head_dim", "4", "model.v_head_dim", "6",
            "model.moe_num_experts", "8", "model.moe_hidden_dim", "12", "model.moe_n_group", "2", "model.moe_topk_group",
            "1", "model.moe_first_dense", "0"};
  // llama4: 4 layers (its preset's NoPE interval 4 has a NoPE layer), RoPE layers chunked by 8 and the NoPE layer's
  // temperature stepping every 2 positions, so that both act within the 16 tokens; top-2 (the matrix's top_k 1 moves it)
  if (family == "llama4")
    return {"model.name", family, "model.dim", "32", "model.n_layers", "4", "model.n_heads", "4", "model.n_kv_heads",
            "2", "model.head_dim", "8", "model.vocab_size", "50", "training.seq_len", "16", "model.attn_chunk_size", "8",
            "model.nope_floor_scale", "2", "model.moe_top_k", "2"};
  // gemma3: 6 layers, so that its preset's period (5 sliding, 1 full) has a full layer for the global RoPE keys
  return {"model.name", family, "model.dim", "32", "model.n_layers", family == "gemma3" ? "6" : "2", "model.n_heads",
          "4", "model.n_kv_heads", "2", "model.head_dim", "8", "model.vocab_size", "50", "training.seq_len", "16"};
}

constexpr int64_t B = 2, S = 16;

// Loss (+ the MoE auxiliary loss) of a forward after one router-bias update
// from that forward's own routing, so rate knobs act too. Weights are drawn
// larger than HF's init (std 0.3; norms 1 +- 0.1; biases and sinks too, which
// HF starts at 0) so that every knob's effect is well above float32 rounding.
double loss_of(const JobConfig& c) {
  auto model = std::make_unique<decoder::Decoder>(c.model);
  model->init_weights(7);
  {
    NoGradGuard ng;
    Generator g(5);
    for (auto& [n, p] : model->named_parameters())
      if (n.find("norm.") != std::string::npos && n.ends_with(".weight"))
        copy_(*p, add(randn(p->shape(), g, p->dtype(), 0.1), 1.0));
      else
        copy_(*p, randn(p->shape(), g, p->dtype(), 0.3));
  }
  std::vector<int64_t> t(B * S), y(B * S);
  for (int64_t i = 0; i < B * S; ++i) {
    t[i] = (i * 7 + 3) % 50;
    y[i] = (i * 11 + 5) % 50;
  }
  const Tensor tok = from_vector<int64_t>(t, {B, S}), tgt = from_vector<int64_t>(y, {B, S});
  model->forward(tok);
  std::vector<std::vector<double>> counts;
  for (auto& layer : model->routed_counts()) counts.emplace_back(layer.begin(), layer.end());
  model->update_router_bias(counts);
  Tensor loss = model->loss(model->forward(tok), tgt);
  Tensor aux = model->aux_loss();
  return (aux.defined() ? add(loss, aux) : loss).item<float>();
}

struct Knob {
  std::string key;   // model.<key>: the knob under test
  Overrides set;     // the knob's own value(s)
  Overrides needs;   // what it needs to act on, in both runs (e.g. YaRN for a YaRN key)
};

// Knobs an export does not carry by design: the member's name (an HF class names its own family), a label,
// the sliding keys (resolved into the per-layer windows, compared as such) and training-only knobs (a loaded
// model is not trained with the exporter's balancing).
const std::set<std::string> kTransient = {"name", "flavor", "sliding_window", "sliding_window_layers", "sliding_window_period",
                                          "moe_aux_loss_coeff", "moe_bias_update_rate"};

TEST(ModelKnobs, EveryKnobMovesTheLossOnEveryModelOrIsRefused) {
  const std::vector<Knob> knobs = {
      {"qk_norm", {"model.qk_norm", "flip"}, {}},
      {"qk_norm_scope", {"model.qk_norm_scope", "other"}, {"model.qk_norm", "true"}},
      {"norm_type", {"model.norm_type", "layernorm"}, {}},
      {"norm_placement", {"model.norm_placement", "other"}, {}},
      {"norm_unit_offset", {"model.norm_unit_offset", "flip"}, {}},
      {"query_pre_attn_scalar", {"model.query_pre_attn_scalar", "2.0"}, {}},
      {"sliding_window_period", {"model.sliding_window_period", "2"},
       {"model.sliding_window", "3", "model.sliding_window_layers", "periodic"}},
      {"rope_local_theta", {"model.rope_local_theta", "50.0"}, {"model.sliding_window", "3"}},
      {"norm_eps", {"model.norm_eps", "0.3"}, {}},
      {"kv_lora_rank", {"model.kv_lora_rank", "6"}, {}},
      {"q_lora_rank", {"model.q_lora_rank", "4"}, {}},
      {"qk_nope_head_dim", {"model.qk_nope_head_dim", "2"}, {}},
      {"qk_rope_head_dim", {"model.qk_rope_head_dim", "2"}, {}},
      {"v_head_dim", {"model.v_head_dim", "3"}, {}},
      {"rope_interleave", {"model.rope_interleave", "flip"}, {}},
      {"qk_l2_norm", {"model.qk_l2_norm", "flip"}, {}},
      {"nope_layer_interval", {"model.nope_layer_interval", "2"}, {}},
      {"attn_chunk_size", {"model.attn_chunk_size", "3"}, {}},
      {"nope_attn_scale", {"model.nope_attn_scale", "0.5", "model.nope_floor_scale", "2"},
       {"model.nope_layer_interval", "2"}},
      {"nope_floor_scale", {"model.nope_floor_scale", "3"}, {"model.nope_layer_interval", "2", "model.nope_attn_scale", "0.5"}},
      {"moe_score_before_experts", {"model.moe_score_before_experts", "flip"}, {}},
      {"activation", {"model.activation", "gelu"}, {}},
      {"swiglu_limit", {"model.swiglu_limit", "0.05"}, {}},
      {"attn_proj_bias", {"model.attn_proj_bias", "flip"}, {}},
      {"attn_sinks", {"model.attn_sinks", "flip"}, {}},
      {"sliding_window", {"model.sliding_window", "3"}, {}},
      {"sliding_window_layers", {"model.sliding_window_layers", "other"}, {"model.sliding_window", "3"}},
      {"rope_theta", {"model.rope_theta", "100.0"}, {}},
      {"rope_scaling_type", {"model.rope_scaling_type", "llama3", "model.rope_scaling_factor", "8.0",
                             "model.rope_original_max_position_embeddings", "16"}, {}},
      {"rope_scaling_factor", {"model.rope_scaling_factor", "2.0"},
       {"model.rope_scaling_type", "yarn", "model.rope_scaling_factor", "4.0"}},
      {"rope_original_max_position_embeddings", {"model.rope_original_max_position_embeddings", "8"},
       {"model.rope_scaling_type", "llama3", "model.rope_scaling_factor", "8.0"}},
      {"rope_yarn_beta_fast", {"model.rope_yarn_beta_fast", "1.5"}, {"model.rope_scaling_type", "yarn", "model.rope_scaling_factor", "4.0"}},
      {"rope_yarn_beta_slow", {"model.rope_yarn_beta_slow", "0.01"}, {"model.rope_scaling_type", "yarn", "model.rope_scaling_factor", "4.0"}},
      {"rope_yarn_truncate", {"model.rope_yarn_truncate", "flip"}, {"model.rope_scaling_type", "yarn", "model.rope_scaling_factor", "4.0"}},
      {"rope_yarn_mscale", {"model.rope_yarn_mscale", "0.5"},
       {"model.rope_scaling_type", "yarn", "model.rope_scaling_factor", "4.0", "model.rope_yarn_mscale_all_dim", "0.5"}},
      {"rope_yarn_mscale_all_dim", {"model.rope_yarn_mscale_all_dim", "0.5"},
       {"model.rope_scaling_type", "yarn", "model.rope_scaling_factor", "4.0"}},
      {"rope_low_freq_factor", {"model.rope_low_freq_factor", "2.0"},
       {"model.rope_scaling_type", "llama3", "model.rope_scaling_factor", "8.0",
        "model.rope_original_max_position_embeddings", "16"}},
      {"rope_high_freq_factor", {"model.rope_high_freq_factor", "8.0"},
       {"model.rope_scaling_type", "llama3", "model.rope_scaling_factor", "8.0",
        "model.rope_original_max_position_embeddings", "16"}},
      {"enable_weight_tying", {"model.enable_weight_tying", "flip"}, {}},
      {"hidden_dim", {"model.hidden_dim", "24"}, {}},
      {"moe_enabled", {"model.moe_enabled", "flip"}, {}},
      {"moe_num_experts", {"model.moe_num_experts", "3"}, {}},
      {"moe_top_k", {"model.moe_top_k", "1"}, {}},
      {"moe_hidden_dim", {"model.moe_hidden_dim", "8"}, {}},
      {"moe_score_func", {"model.moe_score_func", "other"}, {}},
      {"moe_renormalize", {"model.moe_renormalize", "flip"}, {}},
      {"moe_shared_expert", {"model.moe_shared_expert", "flip"}, {}},
      {"moe_shared_expert_width", {"model.moe_shared_expert_width", "2"}, {"model.moe_shared_expert", "true"}},
      {"moe_n_group", {"model.moe_n_group", "4"}, {}},
      {"moe_topk_group", {"model.moe_topk_group", "2"}, {"model.moe_n_group", "4"}},
      {"moe_routed_scale", {"model.moe_routed_scale", "2.0"}, {}},
      {"moe_router_bias", {"model.moe_router_bias", "flip"}, {}},
      {"moe_expert_bias", {"model.moe_expert_bias", "flip"}, {}},
      {"moe_every", {"model.moe_every", "2"}, {}},
      {"moe_first_dense", {"model.moe_first_dense", "1"}, {}},
      {"moe_aux_loss_coeff", {"model.moe_aux_loss_coeff", "0.5"}, {}},
      {"moe_bias_update_rate", {"model.moe_bias_update_rate", "5.0"}, {}},
      {"embed_scale", {"model.embed_scale", "2.0"}, {}},
      {"final_logit_softcap", {"model.final_logit_softcap", "1.5"}, {}},
  };
  {  // every knob of models/decoder/knobs.def is in this matrix, or tested where named below: a new knob
     // cannot skip the check that it acts
    const std::set<std::string> elsewhere = {
        "name", "flavor",  // the member (FamilyPresetsAndRefusals), a label
        "dim", "n_layers", "n_heads", "n_kv_heads", "head_dim", "vocab_size",  // sizes (every test's model)
        "attn_mask_type", "attn_prefix_len", "attn_logit_softcap", "attn_bias",
        "attn_relative_max_distance"};  // test_attention_variants.cpp's matrix
    for (const auto& k : decoder::knobs()) {
      bool here = elsewhere.count(k.key) > 0;
      for (const Knob& m : knobs) here = here || m.key == k.key;
      EXPECT_TRUE(here) << "model." << k.key << " (models/decoder/knobs.def) is in no knob matrix: add it above";
    }
  }
  const std::vector<std::string> families = {"qwen3", "qwen3_moe", "gpt_oss", "llama3", "mixtral",
                                             "olmo2", "gemma3", "deepseek_v3", "llama4"};
  std::map<std::string, std::map<std::string, std::string>> table;
  int applied = 0, refused = 0;
  for (const auto& fam : families) {
    for (const Knob& k : knobs) {
      SCOPED_TRACE(fam + " + model." + k.key);
      Overrides base = tiny(fam);
      base.insert(base.end(), k.needs.begin(), k.needs.end());
      JobConfig cb;
      try {
        cb = load_job_config_file("", base);
      } catch (const Error& e) {  // the precondition itself is refused for this family
        table[k.key][fam] = "-";
        continue;
      }
      Overrides with = base;
      Overrides v = k.set;
      // "flip" / "other": the opposite of what this family's preset gives
      if (v[1] == "flip") {
        const std::string key = v[0].substr(6);
        const bool now = key == "qk_norm" ? cb.model.qk_norm : key == "attn_proj_bias" ? cb.model.attn_proj_bias
                         : key == "attn_sinks" ? cb.model.attn_sinks : key == "rope_yarn_truncate" ? cb.model.rope_yarn_truncate
                         : key == "moe_enabled" ? cb.model.moe_enabled : key == "moe_renormalize" ? cb.model.moe_renormalize
                         : key == "moe_router_bias" ? cb.model.moe_router_bias
                         : key == "norm_unit_offset" ? cb.model.norm_unit_offset
                         : key == "rope_interleave" ? cb.model.rope_interleave
                         : key == "qk_l2_norm" ? cb.model.qk_l2_norm
                         : key == "moe_score_before_experts" ? cb.model.moe_score_before_experts
                         : key == "moe_shared_expert" ? cb.model.moe_shared_expert
                         : key == "enable_weight_tying" ? cb.model.enable_weight_tying : cb.model.moe_expert_bias;
        v[1] = now ? "false" : "true";
      } else if (v[1] == "other" && k.key == "norm_placement") {
        v[1] = cb.model.norm_placement == decoder::NormPlacement::sandwich ? "post" : "sandwich";
      } else if (v[1] == "other" && k.key == "moe_score_func") {
        v[1] = cb.model.moe_score_func == decoder::RouterScore::sigmoid ? "softmax" : "sigmoid";
      } else if (v[1] == "other" && k.key == "qk_norm_scope") {
        v[1] = cb.model.qk_norm_scope == decoder::QkNormScope::head ? "projection" : "head";
      } else if (v[1] == "other") {
        v[1] = cb.model.sliding_window_layers == decoder::SlidingLayers::alternate ? "all" : "alternate";
      }
      with.insert(with.end(), v.begin(), v.end());
      JobConfig cw;
      try {
        cw = load_job_config_file("", with);
        (void)std::make_unique<decoder::Decoder>(cw.model);
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("model." + k.key), std::string::npos) << e.what();
        table[k.key][fam] = "refused";
        ++refused;
        continue;
      }
      const double l0 = loss_of(cb), l1 = loss_of(cw);
      EXPECT_GT(std::abs(l1 - l0) / l0, 2e-6) << "model." << k.key << " = " << v[1] << " did nothing: loss " << l1
                                               << " equals " << l0;
      // ... and the export carries it: config.json read back gives the same architecture, knob by knob (an HF
      // class claimed for a configuration it cannot hold would drop the knob here)
      const std::string exported = std::make_unique<decoder::Decoder>(cw.model)->hf_config_json();
      const decoder::Args back = decoder::Args::from_hf_json(exported);
      for (const auto& kk : decoder::knobs()) {
        if (kTransient.count(kk.key) || !kk.inapplicable(cw.model).empty()) continue;  // what acts here
        nlohmann::json want, got;
        kk.to_json(cw.model, want);
        kk.to_json(back, got);
        EXPECT_EQ(got, want) << "model." << k.key << " = " << v[1] << ": exported as "
                             << nlohmann::json::parse(exported)["model_type"] << ", model." << kk.key
                             << " read back differs";
      }
      EXPECT_EQ(back.layer_window, cw.model.layer_window) << "model." << k.key << ": sliding layers read back differ";
      table[k.key][fam] = "applied";
      ++applied;
    }
  }
  std::printf("%-40s", "knob");
  for (auto& f : families) std::printf("%-11s", f.c_str());
  std::printf("\n");
  for (const Knob& k : knobs) {
    std::printf("model.%-34s", k.key.c_str());
    for (auto& f : families) std::printf("%-11s", table[k.key][f].c_str());
    std::printf("\n");
  }
  std::printf("%d applied, %d refused\n", applied, refused);
  // 59 knobs x 9 models = 531: 9 cells whose precondition is refused (-: a shared expert or groups on a dense
  // model, QK-norm on MLA), 108 refused (the 16 MoE keys on 4 dense models, MLA's 5 sizes on the 8 members with KV
  // heads, YaRN's table scale under Llama 4's L2 norm, ...)
  EXPECT_EQ(applied, 414);
  EXPECT_EQ(refused, 108);
}

// The presets of the members, and refusals naming the key.
TEST(ModelKnobs, FamilyPresetsAndRefusals) {
  JobConfig oss = load_job_config_file("", tiny("gpt_oss"));
  EXPECT_TRUE(oss.model.attn_sinks && oss.model.attn_proj_bias && oss.model.moe_enabled && !oss.model.qk_norm);
  EXPECT_EQ(oss.model.activation, decoder::Activation::oai_swiglu);
  EXPECT_EQ(oss.model.rope_scaling_type, decoder::RopeScalingType::yarn);
  EXPECT_EQ(oss.model.rope_scaling_factor, 32.0);
  JobConfig llama = load_job_config_file("", tiny("llama3"));
  EXPECT_FALSE(llama.model.qk_norm || llama.model.moe_enabled || llama.model.attn_sinks);
  EXPECT_EQ(llama.model.rope_theta, 500000.0);
  // a key the family's preset would set stays as given
  JobConfig q = load_job_config_file("", [] {
    Overrides o = tiny("gpt_oss");
    o.insert(o.end(), {"model.qk_norm", "true"});
    return o;
  }());
  EXPECT_TRUE(q.model.qk_norm);
  auto err = [](Overrides o) {
    try {
      load_job_config_file("", o);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  Overrides o = tiny("qwen3");
  o.insert(o.end(), {"model.rope_scaling_factor", "8"});  // issue 12: this changed nothing on Qwen3
  EXPECT_NE(err(o).find("model.rope_scaling_factor does nothing for this model (model.name qwen3): "
                        "model.rope_scaling_type is none"), std::string::npos) << err(o);
  o = tiny("llama3");
  o.insert(o.end(), {"model.moe_top_k", "1"});
  EXPECT_NE(err(o).find("model.moe_top_k does nothing"), std::string::npos) << err(o);
  o = tiny("qwen3_moe");
  o.insert(o.end(), {"model.moe_every", "4"});
  EXPECT_NE(err(o).find("leave none of the 2 layers MoE"), std::string::npos) << err(o);
  // the members; a config.json names its member; others are refused by name, with the members listed
  EXPECT_EQ(config::enum_choices<decoder::Family>(),
            (std::vector<std::string>{"qwen3", "qwen3_moe", "gpt_oss", "llama3", "mixtral", "olmo2", "gemma3",
                                      "deepseek_v3", "llama4"}));
  JobConfig gemma3 = load_job_config_file("", tiny("gemma3"));
  EXPECT_TRUE(gemma3.model.norm_unit_offset && gemma3.model.norm_placement == decoder::NormPlacement::sandwich &&
              gemma3.model.enable_weight_tying && gemma3.model.embed_multiplier() == std::sqrt(32.0));
  EXPECT_EQ(load_job_config_file("", {"model.name", "gemma3", "model.n_layers", "7"}).model.layer_window,
            (std::vector<int64_t>{1024, 1024, 1024, 1024, 1024, 0, 1024}));  // the preset's period 6: layer 5 full
  o = tiny("gemma3");  // linear scaling has no original context to scale from
  o.insert(o.end(), {"model.rope_scaling_type", "linear", "model.rope_scaling_factor", "8",
                     "model.rope_original_max_position_embeddings", "64"});
  EXPECT_NE(err(o).find("model.rope_original_max_position_embeddings does nothing for this model (model.name gemma3): "
                        "model.rope_scaling_type is linear"), std::string::npos) << err(o);
  JobConfig olmo2 = load_job_config_file("", tiny("olmo2"));
  EXPECT_TRUE(olmo2.model.qk_norm && olmo2.model.qk_norm_scope == decoder::QkNormScope::projection &&
              olmo2.model.norm_placement == decoder::NormPlacement::post && !olmo2.model.moe_enabled);
  EXPECT_EQ(olmo2.model.rope_theta, 500000.0);
  o = tiny("llama3");
  o.insert(o.end(), {"model.qk_norm_scope", "projection"});  // llama3 has no QK-norm for it to span
  EXPECT_NE(err(o).find("model.qk_norm_scope does nothing for this model (model.name llama3): model.qk_norm is false"),
            std::string::npos) << err(o);
  JobConfig mixtral = load_job_config_file("", tiny("mixtral"));
  EXPECT_TRUE(mixtral.model.moe_enabled && mixtral.model.moe_renormalize && !mixtral.model.qk_norm &&
              !mixtral.model.any_dense_layer() && !mixtral.model.attn_proj_bias);
  EXPECT_EQ(mixtral.model.moe_top_k, 2);
  EXPECT_EQ(mixtral.model.rope_theta, 1e6);
  EXPECT_EQ(decoder::Args::from_hf_json(std::make_unique<decoder::Decoder>(oss.model)->hf_config_json()).name,
            decoder::Family::gpt_oss);
  EXPECT_NE(err({"model.name", "mistral"}).find("model.name = 'mistral' is not allowed; allowed values: qwen3, "
                                                "qwen3_moe, gpt_oss, llama3, mixtral, olmo2, gemma3, deepseek_v3, llama4"),
            std::string::npos)
      << err({"model.name", "mistral"});
  // llama4: iRoPE (layer 3 of 4 NoPE and global, the others chunked), L2 QK-norm, the experts' inputs scaled
  JobConfig l4 = load_job_config_file("", tiny("llama4"));
  EXPECT_TRUE(l4.model.qk_l2_norm && !l4.model.qk_norm && l4.model.rope_interleave && l4.model.moe_score_before_experts &&
              l4.model.moe_shared_expert && !l4.model.moe_renormalize);
  EXPECT_EQ(l4.model.moe_score_func, decoder::RouterScore::sigmoid);
  EXPECT_EQ((std::vector<int64_t>{l4.model.layer_chunk(0), l4.model.layer_chunk(2), l4.model.layer_chunk(3)}),
            (std::vector<int64_t>{8, 8, 0}));
  EXPECT_TRUE(l4.model.nope_layer(3) && !l4.model.nope_layer(2));
  EXPECT_DOUBLE_EQ(l4.model.nope_query_scale(0), 1.0);  // floor((0 + 1) / 2) = 0
  EXPECT_DOUBLE_EQ(l4.model.nope_query_scale(5), 1.0 + 0.1 * std::log1p(3.0));
  o = tiny("llama4");
  o.insert(o.end(), {"model.nope_layer_interval", "8"});
  EXPECT_NE(err(o).find("model.nope_layer_interval 8 is beyond the 4 layers (model.n_layers)"), std::string::npos)
      << err(o);
  o = tiny("llama4");
  o.insert(o.end(), {"model.nope_layer_interval", "1"});  // every layer NoPE: every RoPE key inert
  EXPECT_NE(err(o).find("model.nope_layer_interval must be 0 (off) or >= 2: 1 takes RoPE off every layer"),
            std::string::npos) << err(o);
  // an interval other than 4 is not Llama4ForCausalLM (older transformers and vLLM hard-code every 4th layer)
  o = tiny("llama4");
  o.insert(o.end(), {"model.nope_layer_interval", "2"});
  {
    const JobConfig c2 = load_job_config_file("", o);
    std::string why;
    EXPECT_EQ(c2.model.hf_class(&why), decoder::HfClass::none);
    EXPECT_NE(why.find("every 4th layer without RoPE"), std::string::npos) << why;
  }
  // the saved config leaves out what did not act, and reads back to the same config
  JobConfig cq = load_job_config_file("", tiny("qwen3"));
  const std::string dumped = dump_job_config(cq);
  EXPECT_EQ(dumped.find("moe_top_k"), std::string::npos);
  EXPECT_EQ(dumped.find("rope_scaling_factor"), std::string::npos);
  EXPECT_EQ(dump_job_config(load_job_config_file("", tiny("gpt_oss"))).find("\n  hidden_dim:"), std::string::npos);
}

// What an export must not claim, and what an import must not drop.
TEST(ModelKnobs, ExportsClaimOnlyWhatHfRuns) {
  auto cfg_of = [](Overrides extra, const std::string& fam) {
    Overrides o = tiny(fam);
    o.insert(o.end(), extra.begin(), extra.end());
    return nlohmann::json::parse(std::make_unique<decoder::Decoder>(load_job_config_file("", o).model)->hf_config_json());
  };
  // YaRN: max_position_embeddings = factor x original, so HF versions that derive the factor from it agree
  auto y = cfg_of({"model.rope_scaling_type", "yarn", "model.rope_scaling_factor", "4.0"}, "qwen3");
  EXPECT_EQ(y["architectures"][0], "Qwen3ForCausalLM");
  EXPECT_EQ(y["max_position_embeddings"], 4 * 4096);
  EXPECT_EQ(y["rope_scaling"]["factor"], 4.0);
  // routing steered by balancing biases that the export does not carry: not an HF class
  auto b = cfg_of({"model.moe_bias_update_rate", "0.01"}, "qwen3_moe");
  EXPECT_EQ(b["model_type"], "titan_decoder");
  EXPECT_NE(b["titan_not_hf_because"].get<std::string>().find("expert biases"), std::string::npos);
  // rope_scaling keys titan would drop are refused
  EXPECT_THROW(decoder::Args::from_hf_json(R"({"model_type": "llama", "num_hidden_layers": 2,
      "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "attention_factor": 0.5}})"), Error);
  // a Qwen3-MoE checkpoint with sliding layers is refused up front (not a missing-tensor error later)
  EXPECT_THROW(decoder::Args::from_hf_json(R"({"model_type": "qwen3_moe", "num_hidden_layers": 2,
      "use_sliding_window": true, "max_window_layers": 0})"), Error);
  // titan 0.8's MoE ablation export (stacked experts): read back in titan's layout, re-exported as titan's
  decoder::Args legacy = decoder::Args::from_hf_json(R"({"model_type": "qwen3", "num_hidden_layers": 2,
      "hidden_size": 32, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8, "vocab_size": 50,
      "titan_moe": {"num_experts": 4, "top_k": 2, "hidden_dim": 16}})");
  EXPECT_TRUE(legacy.titan_layout);
  EXPECT_EQ(nlohmann::json::parse(legacy.to_hf_json())["model_type"], "titan_decoder");
  // keys that could not act in combination are refused
  auto refused = [](Overrides extra, const std::string& fam, const std::string& key) {
    Overrides o = tiny(fam);
    o.insert(o.end(), extra.begin(), extra.end());
    try {
      load_job_config_file("", o);
    } catch (const Error& e) {
      return std::string(e.what()).find("model." + key + " does nothing") != std::string::npos;
    }
    return false;
  };
  EXPECT_TRUE(refused({"model.attn_mask_type", "sliding_window", "model.sliding_window", "4",
                       "model.sliding_window_layers", "alternate"}, "qwen3", "sliding_window_layers"));
  EXPECT_TRUE(refused({"model.moe_every", "2", "model.moe_first_dense", "1"}, "qwen3_moe", "moe_first_dense"));
}

// Export -> import per architecture: the HF class that represents the
// configuration exactly (or titan's decoder for an ablation), its tensor
// names (Qwen3-MoE: one linear per expert), torch_dtype as written, and the
// imported model computing the same logits.
TEST(ModelKnobs, ExportImportRoundTripPerArchitecture) {
  struct Case {
    std::string family;
    Overrides extra;
    std::string arch, model_type, tensor;  // a tensor name the HF class uses
  };
  const std::vector<Case> cases = {
      {"qwen3", {}, "Qwen3ForCausalLM", "qwen3", "model.layers.0.self_attn.q_norm.weight"},
      {"qwen3_moe", {"model.moe_first_dense", "1"}, "Qwen3MoeForCausalLM", "qwen3_moe",
       "model.layers.1.mlp.experts.3.down_proj.weight"},
      {"gpt_oss", {}, "GptOssForCausalLM", "gpt_oss", "model.layers.0.mlp.experts.gate_up_proj"},
      {"llama3", {"model.rope_scaling_type", "llama3", "model.rope_scaling_factor", "8.0"}, "LlamaForCausalLM", "llama",
       "model.layers.0.mlp.gate_proj.weight"},
      {"mixtral", {}, "MixtralForCausalLM", "mixtral", "model.layers.1.block_sparse_moe.experts.3.w2.weight"},
      {"mixtral", {"model.sliding_window", "3"}, "MixtralForCausalLM", "mixtral", "model.layers.0.block_sparse_moe.gate.weight"},
      {"mixtral", {"model.qk_norm", "true"}, "TitanDecoderForCausalLM", "titan_decoder", "model.layers.0.mlp.experts.gate_proj"},
      {"olmo2", {}, "Olmo2ForCausalLM", "olmo2", "model.layers.0.post_feedforward_layernorm.weight"},
      {"olmo2", {"model.qk_norm_scope", "head"}, "TitanDecoderForCausalLM", "titan_decoder",
       "model.layers.1.post_attention_layernorm.weight"},
      {"qwen3", {"model.norm_placement", "sandwich"}, "TitanDecoderForCausalLM", "titan_decoder",
       "model.layers.1.pre_feedforward_layernorm.weight"},
      {"gemma3", {}, "Gemma3ForCausalLM", "gemma3_text", "model.layers.1.pre_feedforward_layernorm.weight"},
      {"llama3", {"model.rope_scaling_type", "linear", "model.rope_scaling_factor", "4"}, "LlamaForCausalLM", "llama",
       "model.layers.0.input_layernorm.weight"},
      {"gemma3", {"model.rope_scaling_type", "linear", "model.rope_scaling_factor", "8",
                  "model.final_logit_softcap", "30"}, "Gemma3ForCausalLM", "gemma3_text", "model.layers.5.self_attn.q_norm.weight"},
      {"gemma3", {"model.norm_unit_offset", "false"}, "TitanDecoderForCausalLM", "titan_decoder", "model.norm.weight"},
      {"qwen3", {"model.query_pre_attn_scalar", "4", "model.activation", "gelu_pytorch_tanh"}, "TitanDecoderForCausalLM",
       "titan_decoder", "model.norm.weight"},
      // ablations HF would load silently wrong as its own class: titan's decoder
      {"gpt_oss", {"model.qk_norm", "true"}, "TitanDecoderForCausalLM", "titan_decoder", "model.layers.0.self_attn.q_norm.weight"},
      {"qwen3", {"model.norm_type", "layernorm"}, "TitanDecoderForCausalLM", "titan_decoder", "model.norm.bias"},
      {"qwen3_moe", {"model.moe_shared_expert", "true"}, "TitanDecoderForCausalLM", "titan_decoder",
       "model.layers.0.mlp.shared_expert.up_proj.weight"},
      // DeepSeek-V3: MLA, per-expert tensors, the selection biases (set off zero below) as the class's buffer
      {"deepseek_v3", {}, "DeepseekV3ForCausalLM", "deepseek_v3", "model.layers.1.mlp.gate.e_score_correction_bias"},
      {"deepseek_v3", {"model.q_lora_rank", "0", "model.attn_proj_bias", "true"}, "DeepseekV3ForCausalLM",
       "deepseek_v3", "model.layers.0.self_attn.kv_a_proj_with_mqa.bias"},
      {"deepseek_v3", {"model.moe_score_func", "softmax"}, "TitanDecoderForCausalLM", "titan_decoder",
       "model.layers.0.mlp.shared_experts.down_proj.weight"},
      {"qwen3", {"model.rope_interleave", "true"}, "TitanDecoderForCausalLM", "titan_decoder", "model.norm.weight"},
      // Llama 4: iRoPE, dense and MoE layers interleaved, the experts' gate and up as the halves of gate_up_proj
      {"llama4", {"model.moe_every", "2"}, "Llama4ForCausalLM", "llama4_text",
       "model.layers.1.feed_forward.experts.gate_up_proj"},
      {"llama4", {"model.qk_l2_norm", "false", "model.rope_scaling_type", "none"}, "Llama4ForCausalLM", "llama4_text",
       "model.layers.0.feed_forward.shared_expert.gate_proj.weight"},
      {"llama4", {"model.moe_score_before_experts", "false"}, "TitanDecoderForCausalLM", "titan_decoder",
       "model.layers.0.mlp.experts.gate_proj"},
      {"qwen3", {"model.attn_chunk_size", "4"}, "TitanDecoderForCausalLM", "titan_decoder", "model.norm.weight"},
      // routing steered by the biases of auxiliary-loss-free balancing: titan's layout carries them
      {"qwen3_moe", {"model.moe_bias_update_rate", "0.5"}, "TitanDecoderForCausalLM", "titan_decoder",
       "model.layers.0.mlp.expert_bias"},
  };
  // parameters, then the model's buffers (decoder::Decoder::buffers), as the trainer's checkpoints and exports hold them
  auto state = [](decoder::Decoder& m) {
    std::vector<Region> r = whole(m.named_parameters());
    for (Region b : whole(m.buffers())) {
      b.optional = true;  // as ParallelModel::state_regions marks them
      r.push_back(b);
    }
    return r;
  };
  namespace fs = std::filesystem;
  int k = 0;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.family + " -> " + c.arch);
    Overrides o = tiny(c.family);
    o.insert(o.end(), c.extra.begin(), c.extra.end());
    JobConfig cfg = load_job_config_file("", o);
    auto model = std::make_unique<decoder::Decoder>(cfg.model);
    model->init_weights(11);
    if (!model->buffers().empty()) {  // biases off zero, so the routing they steer differs from the unbiased one
      std::vector<std::vector<double>> counts;
      for (auto& [n, b] : model->buffers()) {
        std::vector<double> c((size_t)b->numel());
        for (size_t e = 0; e < c.size(); ++e) c[e] = (double)((e * 7) % 5) * 10;  // uneven load
        counts.push_back(c);
      }
      model->update_router_bias(counts);
    }
    for (const ExportDType export_dtype : {ExportDType::float32, ExportDType::bfloat16}) {
      const std::string dtype = config::enum_name(export_dtype);
      const std::string dir = (fs::temp_directory_path() / ("titan_rt_" + std::to_string(k++))).string();
      fs::remove_all(dir);
      ExportOptions eo;
      eo.dtype = export_dtype;
      export_hf_folder(dir, model->hf_layout(state(*model)).regions, model->hf_config_json(), eo);
      const std::string text = read_hf_config(dir);
      auto j = nlohmann::json::parse(text);
      EXPECT_EQ(j["architectures"][0], c.arch);
      EXPECT_EQ(j["model_type"], c.model_type);
      EXPECT_EQ(j["torch_dtype"], dtype);
      std::ifstream idx(dir + "/model.safetensors");
      std::string header((std::istreambuf_iterator<char>(idx)), std::istreambuf_iterator<char>());
      EXPECT_NE(header.find("\"" + c.tensor + "\""), std::string::npos) << c.tensor << " not in the export";
      auto back = std::make_unique<decoder::Decoder>(decoder::Args::from_hf_json(text));
      EXPECT_EQ(back->hf_config_json(), model->hf_config_json());
      const HfLayout l = back->hf_layout(state(*back));
      load_hf(dir, l.regions);
      l.after_load();
      NoGradGuard ng;
      Tensor tok = from_vector<int64_t>({1, 5, 7, 2, 9, 3, 4, 8}, {2, 4});
      auto a = model->forward(tok).to_vector<float>(), b = back->forward(tok).to_vector<float>();
      if (dtype == "float32") {
        EXPECT_EQ(a, b);
      } else {
        double worst = 0;
        for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, (double)std::abs(a[i] - b[i]));
        EXPECT_LT(worst, 0.05);  // bf16 weights
      }
      fs::remove_all(dir);
    }
  }
}

}  // namespace
}  // namespace titan

namespace titan {
namespace {
// titan_decoder's block carries the architecture as titan 0.9 wrote it: no training-only knob (a model loaded
// from it is not trained with the exporter's balancing), and a block without its sizes is refused.
TEST(ModelKnobs, TitanDecoderBlockCarriesTheArchitectureOnly) {
  Overrides o = tiny("qwen3_moe");
  o.insert(o.end(), {"model.moe_shared_expert", "true", "model.moe_aux_loss_coeff", "0.01"});
  const JobConfig c = load_job_config_file("", o);
  auto j = nlohmann::json::parse(std::make_unique<decoder::Decoder>(c.model)->hf_config_json());
  ASSERT_TRUE(j.contains("titan_decoder"));
  EXPECT_FALSE(j["titan_decoder"].contains("moe_aux_loss_coeff"));
  EXPECT_TRUE(j["titan_decoder"]["moe_shared_expert"].get<bool>());
  EXPECT_EQ(decoder::Args::from_hf_json(j.dump()).moe_aux_loss_coeff, 0.0);
  j["titan_decoder"].erase("dim");
  std::string e;
  try {
    decoder::Args::from_hf_json(j.dump());
  } catch (const Error& err) {
    e = err.what();
  }
  EXPECT_NE(e.find("the titan_decoder block has no dim"), std::string::npos) << e;
}
}  // namespace
}  // namespace titan
