// Checkpoints and exports: optional state, HF-named files that load and evaluate, clear errors for
// mismatched or truncated files.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "job/trainer.h"
#include "models/decoder/model.h"
#include "models/decoder/presets.h"
#include "src/autograd/grad_mode.h"
#include "src/checkpoint/checkpoint.h"
#include "src/checkpoint/h5.h"
#include "src/data/loader.h"
#include "src/data/tokenizer.h"
#include "src/log/log.h"
#include "tests/job_fixtures.h"

using namespace titan;
using namespace titan::testing;
namespace fs = std::filesystem;

// State added to checkpoints later (Region::optional) loads from a file written without it: the tensor keeps
// its value and the rest loads; a required tensor missing is still an error naming it.
TEST(Checkpoint, OptionalStateMissingFromAnOlderFileKeepsItsValue) {
  const std::string d = tmpdir("optional_state");
  fs::create_directories(d);
  Tensor w = full({3}, 2.0f);
  const std::string path = d + "/step-1.h5";
  save_checkpoint(path, whole({{"w", &w}}), nullptr, TrainState{1, 0, 0, "", ""});
  Tensor w2 = zeros({3}), bias2 = full({4}, 0.25f);
  std::vector<Region> regions = whole({{"w", &w2}, {"model.layers.0.mlp.expert_bias", &bias2}});
  regions[1].optional = true;
  EXPECT_NO_THROW(load_checkpoint(path, regions, nullptr));
  EXPECT_EQ(w2.data<float>()[2], 2.0f);
  EXPECT_EQ(bias2.data<float>()[0], 0.25f);  // kept
  regions[1].optional = false;
  EXPECT_NE(error_of([&] { load_checkpoint(path, regions, nullptr); }).find("expert_bias"), std::string::npos);
}

// ---- export / import / titan-eval ----------------------------------------------------------
TEST(Export, HfNamedFileLoadsAndEvaluates) {
  std::string d = tmpdir("export");
  JobConfig c = tiny_job(d);
  c.training.steps = 4;
  c.validation.enabled = false;
  c.checkpoint.export_at_end = true;
  c.checkpoint.export_format = ExportFormat::both;
  train(c);
  const std::string w = c.job.dump_folder + "/export/model.h5";
  h5::File f(w, h5::File::Read);
  EXPECT_TRUE(f.has("model.layers.0.self_attn.q_proj.weight"));
  EXPECT_EQ(f.shape("model.layers.1.mlp.down_proj.weight"), (Shape{32, 64}));
  EXPECT_TRUE(f.has("lm_head.weight"));
  EXPECT_NE(f.attr_string("config").find("\"model_type\": \"qwen3\""), std::string::npos);
  // checkpoint.initial_load_path starts from these weights: the first loss is the trained model's, not a fresh init's
  {
    JobConfig fresh = c, tuned = c;
    fresh.training.steps = tuned.training.steps = 1;
    fresh.checkpoint.export_at_end = tuned.checkpoint.export_at_end = false;
    fresh.job.dump_folder = d + "/fresh";
    tuned.job.dump_folder = d + "/tuned";
    tuned.checkpoint.initial_load_path = w;
    const double l_fresh = train(fresh).losses[0], l_tuned = train(tuned).losses[0];
    EXPECT_LT(l_tuned, l_fresh - 0.05) << "fresh " << l_fresh << " tuned " << l_tuned;
  }
  // titan-eval prints the loss computed here
  decoder::Decoder m(decoder::Args::from_hf_json(f.attr_string("config")));
  load_hf(w, whole(m.named_parameters()));
  DataLoader dl(d + "/val.h5", 2, 16);
  const int64_t steps = dl.steps_left();
  double total = 0;
  {
    NoGradGuard ng;
    for (int64_t i = 0; i < steps; ++i) {
      Batch b = dl.next();
      total += cross_entropy(m.forward(b.inputs).reshape({-1, 64}), b.targets.reshape({-1})).item<float>();
    }
  }
  const std::string cmd = std::string(TITAN_BINARY_DIR) + "/titan-eval --checkpoint " + w + " --tokens " + d +
                          "/val.h5 --seq-len 16 --batch-size 2 --json --dump-grads " + d + "/grads.h5 > " + d +
                          "/eval.json";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  std::ifstream in(d + "/eval.json");
  std::string out((std::istreambuf_iterator<char>(in)), {});
  const double loss = std::stod(out.substr(out.find(':') + 1));
  EXPECT_NEAR(loss, total / steps, 1e-6);
  h5::File g(d + "/grads.h5", h5::File::Read);
  EXPECT_EQ(g.datasets(), f.datasets());
  // bf16 export reads back within bf16 precision
  auto params = m.named_parameters();
  export_hf(d + "/bf16.h5", whole(params), m.args().to_hf_json(), DType::BF16);
  Tensor back = h5::File(d + "/bf16.h5", h5::File::Read).read_f32("model.norm.weight");
  auto a = back.to_vector<float>(), b = m.model->norm->weight.to_vector<float>();
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], std::abs(b[i]) * 4e-3);
}

TEST(Export, MismatchedOrTruncatedFilesAreClearErrors) {
  std::string d = tmpdir("badload");
  JobConfig c = tiny_job(d);
  decoder::Decoder m(decoder::Args(c.model).resolve());
  m.init_weights(1);
  auto params = m.named_parameters();
  export_hf(d + "/w.h5", whole(params), m.args().to_hf_json());
  JobConfig c2 = c;
  c2.model.hidden_dim = 96;
  decoder::Decoder m2(decoder::Args(c2.model).resolve());
  std::string e = error_of([&] { load_hf(d + "/w.h5", whole(m2.named_parameters())); });
  EXPECT_NE(e.find("model.layers.0.mlp.gate_proj.weight"), std::string::npos) << e;
  EXPECT_NE(e.find("[64, 32]"), std::string::npos) << e;
  JobConfig c3 = c;
  c3.model.enable_weight_tying = true;
  decoder::Decoder m3(decoder::Args(c3.model).resolve());
  e = error_of([&] { load_hf(d + "/w.h5", whole(m3.named_parameters())); });
  EXPECT_NE(e.find("lm_head.weight"), std::string::npos) << e;
  // truncate the file
  fs::resize_file(d + "/w.h5", fs::file_size(d + "/w.h5") / 2);
  e = error_of([&] { load_hf(d + "/w.h5", whole(m.named_parameters())); });
  EXPECT_FALSE(e.empty());
  EXPECT_NE(e.find("w.h5"), std::string::npos) << e;
}

// ---- planning on meta tensors -----------------------------------------------------------
#include "simulator/plan.h"
