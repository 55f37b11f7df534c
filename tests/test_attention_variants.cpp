// Attention variants in the models (model.attn_*): every variant on every
// model of the family moves the loss or is refused with the key named;
// block_causal equals running each document alone; prefix_lm sees its
// prefix both ways and drops the prefix's own targets; the loader's
// document ids; exports say titan_decoder and read back.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "models/decoder/model.h"
#include "models/decoder/model.h"
#include "src/autograd/grad_mode.h"
#include "models/decoder/presets.h"
#include "src/data/loader.h"
#include "src/ops/ops.h"

namespace titan {
namespace {

decoder::Args tiny(const std::string& family) {
  decoder::Args m;
  m.name = config::parse_enum<decoder::Family>(family).value();  // qwen3 | qwen3_moe | gpt_oss, with the family's preset values
  decoder::apply_preset(m, {});
  m.dim = 32;
  m.n_layers = 2;
  m.n_heads = 4;
  m.n_kv_heads = 2;
  m.head_dim = 8;
  m.hidden_dim = 32;
  m.vocab_size = 50;
  m.moe_num_experts = 4;
  m.moe_top_k = 2;
  m.moe_hidden_dim = 16;
  if (family == "gpt_oss") m.sliding_window = 4;  // the sliding layers' window (layers 0, 2, ...)
  return m;
}

constexpr int64_t B = 2, S = 16;
Tensor tokens() {
  std::vector<int64_t> t(B * S);
  for (int64_t i = 0; i < B * S; ++i) t[i] = (i * 7 + 3) % 50;
  return from_vector<int64_t>(t, {B, S});
}
Tensor targets() {
  std::vector<int64_t> t(B * S);
  for (int64_t i = 0; i < B * S; ++i) t[i] = (i * 11 + 5) % 50;
  return from_vector<int64_t>(t, {B, S});
}
Tensor doc_ids() {  // row 0: documents [0, 6), [6, 16); row 1: [0, 3), [3, 11), [11, 16)
  std::vector<int64_t> d(B * S);
  for (int64_t i = 0; i < S; ++i) {
    d[i] = i >= 6;
    d[S + i] = (i >= 3) + (i >= 11);
  }
  return from_vector<int64_t>(d, {B, S});
}

double loss_of(const decoder::Args& m, bool randomize_relative = false) {
  auto model = std::make_unique<decoder::Decoder>(m);
  model->init_weights(7);
  if (randomize_relative) {  // the relative table starts at zero (no effect at init): give it values
    NoGradGuard ng;
    Generator g(3);
    for (auto& [n, p] : model->named_parameters())
      if (n.find("relative_bias") != std::string::npos) copy_(*p, randn(p->shape(), g, p->dtype(), 0.5));
  }
  return model->loss(model->forward(tokens(), doc_ids()), targets()).item<float>();
}

TEST(AttentionVariants, EveryVariantMovesTheLossOnEveryModelOrIsRefused) {
  struct Knob {
    std::string name;
    std::function<void(decoder::Args&)> set;
    bool randomize = false;
  };
  const std::vector<Knob> knobs = {
      {"block_causal", [](auto& m) { m.attn_mask_type = nn::MaskKind::block_causal; }},
      {"sliding_window", [](auto& m) {
         m.attn_mask_type = nn::MaskKind::sliding_window;
         m.sliding_window = 4;
       }},
      {"prefix_lm", [](auto& m) {
         m.attn_mask_type = nn::MaskKind::prefix_lm;
         m.attn_prefix_len = 6;
       }},
      {"softcap", [](auto& m) { m.attn_logit_softcap = 0.05; }},
      {"alibi", [](auto& m) { m.attn_bias = nn::ScoreBias::alibi; }},
      {"relative", [](auto& m) {
         m.attn_bias = nn::ScoreBias::relative;
         m.attn_relative_max_distance = 8;
       }, true},
  };
  int applied = 0, refused = 0;
  for (const std::string family : {"qwen3", "qwen3_moe", "gpt_oss"}) {
    const double base = loss_of(tiny(family));
    for (const Knob& k : knobs) {
      SCOPED_TRACE(family + " + " + k.name);
      decoder::Args m = tiny(family);
      k.set(m);
      if (family == "gpt_oss" && k.name == "prefix_lm") {  // sliding layers would hide the prefix
        try {
          std::make_unique<decoder::Decoder>(m);
          ADD_FAILURE() << "prefix_lm with sliding layers was accepted";
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("model.attn_mask_type prefix_lm"), std::string::npos) << e.what();
          ++refused;
        }
        continue;
      }
      const double l = loss_of(m, k.randomize);
      EXPECT_GT(std::abs(l - base), 1e-5) << "loss " << l << " equals the baseline " << base;
      ++applied;
    }
  }
  EXPECT_EQ(applied, 17);
  EXPECT_EQ(refused, 1);
}

TEST(AttentionVariants, RelativeTableTrains) {
  decoder::Args m = tiny("qwen3");
  m.attn_bias = nn::ScoreBias::relative;
  m.attn_relative_max_distance = 8;
  auto model = std::make_unique<decoder::Decoder>(m);
  model->init_weights(7);
  EXPECT_EQ(model->num_parameters(), model->expected_num_params());
  model->loss(model->forward(tokens(), doc_ids()), targets()).backward();
  int tables = 0;
  for (auto& [n, p] : model->named_parameters())
    if (n.find("relative_bias") != std::string::npos) {
      ++tables;
      EXPECT_EQ(p->shape(), (Shape{4, 15}));
      double g = 0;
      for (double x : p->grad().to_vector<double>()) g += std::abs(x);
      EXPECT_GT(g, 0) << n << " gets no gradient";
    }
  EXPECT_EQ(tables, 2);
}

TEST(AttentionVariants, Refusals) {
  auto refused = [](std::function<void(decoder::Args&)> set, const std::string& key) {
    decoder::Args m = tiny("qwen3");
    set(m);
    try {
      std::make_unique<decoder::Decoder>(m);
      ADD_FAILURE() << key << " accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(key), std::string::npos) << e.what();
    }
  };
  refused([](auto& m) { m.attn_mask_type = nn::MaskKind::sliding_window; }, "model.sliding_window");  // no window
  refused([](auto& m) { m.attn_mask_type = nn::MaskKind::prefix_lm; }, "model.attn_prefix_len");     // no prefix
  refused([](auto& m) { m.attn_prefix_len = 4; }, "model.attn_prefix_len");               // not prefix_lm
  refused([](auto& m) { m.attn_relative_max_distance = 4; }, "model.attn_relative_max_distance");  // not relative
  refused([](auto& m) { m.attn_logit_softcap = -1; }, "model.attn_logit_softcap");
  try {  // an unknown bias is refused where it is read
    decoder::Args m = tiny("qwen3");
    decoder::find_knob("attn_bias")->bind(m).set("rotary", "--model.attn_bias");
    ADD_FAILURE() << "model.attn_bias rotary accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("model.attn_bias"), std::string::npos) << e.what();
  }
  refused([](auto& m) {
    m.attn_mask_type = nn::MaskKind::prefix_lm;
    m.attn_prefix_len = 4;
    m.sliding_window = 8;
  }, "model.attn_mask_type prefix_lm");
}

// RoPE scores depend on relative positions only, so a document inside a packed
// row under block_causal gives the logits of that document run alone.
TEST(AttentionVariants, BlockCausalEqualsEachDocumentAlone) {
  for (const std::string family : {"qwen3", "gpt_oss"}) {
    SCOPED_TRACE(family);
    decoder::Args m = tiny(family);
    m.attn_mask_type = nn::MaskKind::block_causal;
    auto model = std::make_unique<decoder::Decoder>(m);
    model->init_weights(11);
    NoGradGuard ng;
    Tensor packed = model->forward(tokens(), doc_ids());  // [B, S, V]
    struct Doc { int64_t row, begin, end; };
    for (Doc d : {Doc{0, 0, 6}, Doc{0, 6, 16}, Doc{1, 3, 11}, Doc{1, 11, 16}}) {
      Tensor alone_tokens = tokens().slice(0, d.row, d.row + 1).slice(1, d.begin, d.end).contiguous();
      Tensor alone = model->forward(alone_tokens, zeros({1, d.end - d.begin}, DType::I64));
      auto a = alone.to_vector<float>();
      auto p = packed.slice(0, d.row, d.row + 1).slice(1, d.begin, d.end).contiguous().to_vector<float>();
      double worst = 0;
      for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, (double)std::abs(a[i] - p[i]));
      EXPECT_LT(worst, 2e-5) << "document [" << d.begin << ", " << d.end << ") of row " << d.row;
    }
    // and the documents do see less than causal attention would show them
    decoder::Args c = tiny(family);
    auto causal = std::make_unique<decoder::Decoder>(c);
    causal->init_weights(11);
    auto x = causal->forward(tokens(), doc_ids()).slice(1, 6, 16).contiguous().to_vector<float>();
    auto y = packed.slice(1, 6, 16).contiguous().to_vector<float>();
    double diff = 0;
    for (size_t i = 0; i < x.size(); ++i) diff = std::max(diff, (double)std::abs(x[i] - y[i]));
    EXPECT_GT(diff, 1e-3);
  }
}

TEST(AttentionVariants, PrefixLmSeesItsPrefixAndDropsItsTargets) {
  decoder::Args m = tiny("qwen3");
  m.attn_mask_type = nn::MaskKind::prefix_lm;
  m.attn_prefix_len = 6;
  auto model = std::make_unique<decoder::Decoder>(m);
  model->init_weights(5);
  NoGradGuard ng;
  Tensor t0 = tokens();
  auto logits_at = [&](const Tensor& t, int64_t pos) {
    return model->forward(t, Tensor()).slice(1, pos, pos + 1).contiguous().to_vector<float>();
  };
  Tensor t1 = t0.clone();
  t1.data<int64_t>()[4] = 42;  // inside the prefix, after position 1
  EXPECT_NE(logits_at(t0, 1), logits_at(t1, 1));  // position 1 sees position 4
  Tensor t2 = t0.clone();
  t2.data<int64_t>()[10] = 42;  // after the prefix
  EXPECT_EQ(logits_at(t0, 8), logits_at(t2, 8));  // causal there
  auto tg = model->loss_targets(targets()).to_vector<int64_t>();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < S; ++i) EXPECT_EQ(tg[b * S + i] == -100, i < 5) << "row " << b << " position " << i;
}

TEST(AttentionVariants, ExportSaysTitanDecoderAndReadsBack) {
  for (const std::string family : {"qwen3", "gpt_oss"}) {
    SCOPED_TRACE(family);
    decoder::Args m = tiny(family);
    m.attn_mask_type = nn::MaskKind::block_causal;
    m.attn_bias = nn::ScoreBias::alibi;
    m.attn_logit_softcap = 20;
    auto model = std::make_unique<decoder::Decoder>(m);
    model->init_weights(3);
    auto j = nlohmann::json::parse(model->hf_config_json());
    EXPECT_EQ(j["model_type"], "titan_decoder");  // HF's classes cannot run it: never claim one of them
    EXPECT_EQ(j["architectures"][0], "TitanDecoderForCausalLM");
    EXPECT_EQ(j["titan_decoder"]["family"], family);
    EXPECT_EQ(j["titan_decoder"]["attn"]["bias"], "alibi");
    auto back = std::make_unique<decoder::Decoder>(decoder::Args::from_hf_json(model->hf_config_json()));
    EXPECT_EQ(back->hf_config_json(), model->hf_config_json());
    auto src = model->named_parameters();
    auto dst = back->named_parameters();
    ASSERT_EQ(src.size(), dst.size());
    for (size_t i = 0; i < src.size(); ++i) copy_(*dst[i].second, *src[i].second);
    NoGradGuard ng;
    EXPECT_EQ(model->forward(tokens(), doc_ids()).to_vector<float>(), back->forward(tokens(), doc_ids()).to_vector<float>());
    // the default variant keeps HF's identity
    auto plain = nlohmann::json::parse(std::make_unique<decoder::Decoder>(tiny(family))->hf_config_json());
    EXPECT_EQ(plain["model_type"], family);
    EXPECT_FALSE(plain.contains("titan_decoder"));
  }
}

TEST(AttentionVariants, LoaderHandsOutDocumentIds) {
  const std::string path = (std::filesystem::temp_directory_path() / "titan_doc_ids.h5").string();
  std::vector<uint32_t> toks(40);
  for (uint32_t i = 0; i < 40; ++i) toks[i] = i % 7;
  write_token_file(path, toks, "test", 7, {0, 3, 10, 11, 25});
  DataLoader dl(path, 2, 8);  // rows [0, 8) and [8, 16), then [16, 24), [24, 32)
  Batch b = dl.next();
  EXPECT_EQ(b.doc_ids.to_vector<int64_t>(),
            (std::vector<int64_t>{0, 0, 0, 1, 1, 1, 1, 1, /**/ 0, 0, 1, 2, 2, 2, 2, 2}));
  b = dl.next();
  EXPECT_EQ(b.doc_ids.to_vector<int64_t>(),
            (std::vector<int64_t>{0, 0, 0, 0, 0, 0, 0, 0, /**/ 0, 1, 1, 1, 1, 1, 1, 1}));
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace titan
