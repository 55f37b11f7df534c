// The job loop: loss falls and reruns are bit-identical, resume equals the uninterrupted run
// bit for bit (expert biases included), non-finite steps, refused layouts.
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

// ---- training, determinism, checkpoints --------------------------------------------
TEST(Train, LossFallsAndSameSeedIsBitIdentical) {
  std::string d = tmpdir("det");
  JobConfig c = tiny_job(d);
  c.training.steps = 30;
  c.validation.freq = 30;
  TrainResult a = train(c);
  fs::remove_all(c.job.dump_folder);
  TrainResult b = train(c);
  ASSERT_EQ(a.losses.size(), 30u);
  EXPECT_EQ(a.losses, b.losses);  // bit for bit
  EXPECT_LT(a.losses.back(), a.losses.front() - 1.0) << a.losses.front() << " -> " << a.losses.back();
  ASSERT_EQ(a.val_losses.size(), 1u);
  EXPECT_TRUE(fs::exists(c.job.dump_folder + "/metrics.jsonl"));
  EXPECT_TRUE(fs::exists(c.job.dump_folder + "/config.yaml"));
}

// float8 training follows the float32 run closely without being it; MX refuses a layer its blocks do not fit.
TEST(Train, Float8FollowsFloat32AndRefusesWhatMxCannotBlock) {
  std::string d = tmpdir("fp8");
  JobConfig c = tiny_job(d);
  c.training.steps = 30;
  c.validation.enabled = false;
  const TrainResult f32 = train(c);
  for (Float8Recipe r : {Float8Recipe::tensorwise, Float8Recipe::rowwise}) {
    JobConfig k = c;
    k.converters.items = {"float8"};
    k.float8.recipe = r;
    fs::remove_all(k.job.dump_folder);
    const TrainResult f8 = train(k);
    ASSERT_EQ(f8.losses.size(), f32.losses.size());
    double worst = 0;
    for (size_t i = 0; i < f8.losses.size(); ++i)
      worst = std::max(worst, std::fabs(f8.losses[i] - f32.losses[i]) / f32.losses[i]);
    // FP8's rounding moves every step after the first GEMM, by a few percent at most on this model
    EXPECT_GT(worst, 1e-5) << config::enum_name(r) << ": the converter changed nothing";
    EXPECT_LT(worst, 0.03) << config::enum_name(r);
    EXPECT_LT(f8.losses.back(), f8.losses.front() - 1.0) << config::enum_name(r);
  }
  // MX: the tiny model's k / v projections have 16 outputs (2 heads x 8), not whole 32-blocks
  JobConfig m = c;
  m.converters.items = {"float8"};
  m.float8.recipe = Float8Recipe::mxfp8;
  fs::remove_all(m.job.dump_folder);
  const std::string e = error_of([&] { train(m); });
  EXPECT_NE(e.find("k_proj has weight [16, 32]"), std::string::npos) << e;
  EXPECT_NE(e.find("float8.filter_fqns"), std::string::npos) << e;
  m.float8.filter_fqns.items = {"k_proj", "v_proj"};
  m.training.steps = 4;
  fs::remove_all(m.job.dump_folder);
  EXPECT_EQ(train(m).losses.size(), 4u);
}

// training.mixed_precision_param bfloat16: the step runs under bf16 autocast (the loss moves off float32's by
// bf16's rounding, not more); the simulator's old precision keys point to the new ones
TEST(Train, Bf16MixedPrecisionFollowsFloat32) {
  std::string d = tmpdir("bf16");
  JobConfig c = tiny_job(d);
  c.training.steps = 30;
  c.validation.enabled = false;
  const TrainResult f32 = train(c);
  JobConfig b = c;
  b.training.mixed_precision_param = JobConfig::Training::Precision::bfloat16;
  fs::remove_all(b.job.dump_folder);
  const TrainResult bf = train(b);
  ASSERT_EQ(bf.losses.size(), f32.losses.size());
  double worst = 0;
  for (size_t i = 0; i < bf.losses.size(); ++i)
    worst = std::max(worst, std::fabs(bf.losses[i] - f32.losses[i]) / f32.losses[i]);
  EXPECT_GT(worst, 1e-5) << "bfloat16 changed nothing";
  EXPECT_LT(worst, 1e-2);
  EXPECT_LT(bf.losses.back(), bf.losses.front() - 1.0);
  for (const char* key : {"simulation.param_dtype", "simulation.reduce_dtype"}) {
    const std::string e = error_of([&] {
      load_job_config_file(std::string(TITAN_SOURCE_DIR) + "/configs/qwen3_debug.yaml", {key, "bfloat16"});
    });
    EXPECT_NE(e.find(std::string("training.mixed_precision_") + (key[11] == 'p' ? "param" : "reduce")),
              std::string::npos) << e;
  }
}

// In float32 and under bf16 mixed precision (fp32 master weights and AdamW state in the checkpoint, the
// autocast step resumed as it ran): bit for bit.
TEST(Train, ResumeReproducesTheUninterruptedRun) {
  for (const auto precision : {JobConfig::Training::Precision::float32, JobConfig::Training::Precision::bfloat16}) {
    const bool bf16 = precision == JobConfig::Training::Precision::bfloat16;
    SCOPED_TRACE(bf16 ? "bfloat16" : "float32");
    std::string d = tmpdir(bf16 ? "resume_bf16" : "resume");
    JobConfig c = tiny_job(d);
    c.training.mixed_precision_param = precision;
    c.training.steps = 8;
    c.training.global_batch_size = 4;  // 2 micro-batches: accumulation is resumed too
    c.checkpoint.enable = true;
    c.checkpoint.interval = 3;
    c.checkpoint.keep_latest_k = 2;
    train(c);
    auto cks = list_checkpoints(c.job.dump_folder + "/checkpoint");
    ASSERT_EQ(cks.size(), 2u);  // steps 6 and 8 kept
    EXPECT_EQ(cks[0].first, 6);
    // interrupted: run to step 3, then resume to 8. A constant schedule after
    // warmup keeps the learning rate independent of training.steps.
    c.lr_scheduler.schedule = LRShape::constant;
    JobConfig first = c;
    first.training.steps = 3;
    fs::remove_all(c.job.dump_folder);
    TrainResult ref = train(c);
    fs::remove_all(c.job.dump_folder);
    train(first);
    TrainResult rest = train(c);
    EXPECT_EQ(rest.first_step, 4);
    ASSERT_EQ(rest.losses.size(), 5u);
    for (size_t i = 0; i < rest.losses.size(); ++i) EXPECT_EQ(rest.losses[i], ref.losses[i + 3]) << "step " << i + 4;
  }
}

// An MoE run ends with its routing, summed over the MoE layers and per layer, as simulation.moe_routing_histogram
// takes it back: one list per MoE layer, each layer's counts adding up to the (token, k) pairs it routed.
namespace {
// tiny_job as a Qwen3-MoE: 4 experts, top 2, expert width 16; the first `first_dense` blocks dense (width
// `hidden`)
JobConfig tiny_moe_job(const std::string& d, int64_t first_dense, int64_t hidden) {
  JobConfig c = tiny_job(d);
  c.model.name = decoder::Family::qwen3_moe;
  decoder::apply_preset(c.model, {});
  c.model.moe_num_experts = 4;
  c.model.moe_top_k = 2;
  c.model.moe_hidden_dim = 16;
  c.model.moe_first_dense = first_dense;
  c.model.hidden_dim = hidden;
  return c;
}
}  // namespace

TEST(Train, MoERunPrintsItsRoutingPerLayerForTheSimulator) {
  std::string d = tmpdir("routing_lines");
  JobConfig c = tiny_moe_job(d, 1, 16);  // layer 0 dense: the lists are the MoE layers'
  c.model.n_layers = 3;
  c.training.steps = 2;
  c.validation.enabled = false;
  ::testing::internal::CaptureStdout();
  train(c);
  const std::string out = ::testing::internal::GetCapturedStdout();
  auto value = [&](const std::string& head) {
    const size_t at = out.find(head);
    if (at == std::string::npos) return std::string();
    const size_t colon = out.find("): ", at), end = out.find('\n', colon);
    return out.substr(colon + 3, end - colon - 3);
  };
  const std::string all = value("expert load (routed tokens"), per = value("expert load per MoE layer (");
  ASSERT_FALSE(all.empty()) << out;
  ASSERT_FALSE(per.empty()) << out;
  const auto layers = parse_routing_histogram(per);
  const auto summed = parse_routing_histogram(all);
  const int64_t moe_layers = c.model.moe_layers_before(c.model.n_layers);
  ASSERT_GE(moe_layers, 1);
  ASSERT_EQ((int64_t)layers.size(), moe_layers) << per;
  ASSERT_EQ(summed.size(), 1u);
  const double pairs = (double)c.training.steps * c.training.local_batch_size * c.training.seq_len * c.model.moe_top_k;
  for (size_t e = 0; e < 4; ++e) {
    double s = 0;
    for (const auto& l : layers) s += l[e];
    EXPECT_EQ(s, summed[0][e]) << "expert " << e;
  }
  for (const auto& l : layers) {
    ASSERT_EQ(l.size(), 4u);
    EXPECT_EQ(l[0] + l[1] + l[2] + l[3], pairs);
  }
  // metrics.jsonl: each line's own routing (the steps since the line before), layer by layer, for planning that
  // step; the lines add up to the run's
  std::ifstream jf(c.job.dump_folder + "/metrics.jsonl");
  std::vector<std::vector<double>> lines_sum(layers.size(), std::vector<double>(4, 0.0));
  int rows = 0;
  for (std::string row; std::getline(jf, row);) {
    const auto j = nlohmann::json::parse(row);
    if (!j.contains("tps")) continue;
    ASSERT_TRUE(j.contains("expert_load")) << row;
    const auto step_layers = parse_routing_histogram(j["expert_load"].get<std::string>());
    ASSERT_EQ(step_layers.size(), layers.size()) << row;
    for (size_t l = 0; l < layers.size(); ++l)
      for (size_t e = 0; e < 4; ++e) lines_sum[l][e] += step_layers[l][e];
    ++rows;
  }
  EXPECT_EQ(rows, 2) << "a line per step (log_freq " << c.metrics.log_freq << ": the first and the last step)";
  EXPECT_EQ(lines_sum, layers);
}

// Auxiliary-loss-free balancing steers routing with per-expert biases that training updates: they are state
// a resumed run needs. Checkpoints (and titan-layout exports) carry them; resuming reproduces the uninterrupted
// run bit for bit, which it would not with the biases back at zero.
TEST(Train, ResumeKeepsTheExpertBiasesOfLossFreeBalancing) {
  std::string d = tmpdir("resume_bias");
  JobConfig c = tiny_moe_job(d, 0, 0);
  c.model.moe_bias_update_rate = 0.05;
  c.training.steps = 6;
  c.lr_scheduler.schedule = LRShape::constant;
  c.validation.enabled = false;
  c.checkpoint.enable = true;
  c.checkpoint.interval = 3;
  c.checkpoint.export_at_end = true;
  c.checkpoint.export_format = ExportFormat::hdf5;
  TrainResult ref = train(c);
  {
    auto cks = list_checkpoints(c.job.dump_folder + "/checkpoint");
    ASSERT_FALSE(cks.empty());
    h5::File f(cks.front().second, h5::File::Read);
    ASSERT_TRUE(f.has("model/model.layers.0.mlp.expert_bias"));
    Tensor b = zeros({4});
    f.read_into("model/model.layers.0.mlp.expert_bias", b);
    bool moved = false;
    for (int i = 0; i < 4; ++i) moved = moved || b.data<float>()[i] != 0.0f;
    EXPECT_TRUE(moved) << "the biases of step 3 should have moved off zero";
  }
  EXPECT_TRUE(h5::File(c.job.dump_folder + "/export/model.h5", h5::File::Read).has("model.layers.1.mlp.expert_bias"));
  JobConfig first = c;
  first.training.steps = 3;
  first.checkpoint.export_at_end = false;
  fs::remove_all(c.job.dump_folder);
  train(first);
  TrainResult rest = train(c);
  ASSERT_EQ(rest.losses.size(), 3u);
  for (size_t i = 0; i < rest.losses.size(); ++i) EXPECT_EQ(rest.losses[i], ref.losses[i + 3]) << "step " << i + 4;
}

TEST(Train, NonFiniteLossAbortsOrSkips) {
  std::string d = tmpdir("nan");
  JobConfig c = tiny_job(d);
  c.optimizer.lr = 1e30;
  c.training.max_norm = 0;
  c.lr_scheduler.warmup_steps = 0;
  c.validation.enabled = false;
  std::string e = error_of([&] { train(c); });
  EXPECT_NE(e.find("non-finite"), std::string::npos) << e;
  c.training.on_nonfinite = JobConfig::Training::OnNonFinite::skip;
  fs::remove_all(c.job.dump_folder);
  EXPECT_NO_THROW(train(c));
}

TEST(Train, BadLayoutAndVocabAreRefused) {
  std::string d = tmpdir("bad");
  JobConfig c = tiny_job(d);
  c.parallelism.tensor_parallel_degree = 2;
  EXPECT_NE(error_of([&] { train(c); }).find("tensor_parallel_degree 2, world size 1"), std::string::npos);
  c = tiny_job(d);
  c.model.name = decoder::Family::gpt_oss;
  decoder::apply_preset(c.model, {});
  c.parallelism.expert_parallel_degree = 2;  // one rank: dp_shard 1 cannot lend 2 ranks to ep
  std::string ep_err = error_of([&] { train(c); });
  EXPECT_NE(ep_err.find("expert_parallel_degree 2 must divide the data-parallel shard degree 1"), std::string::npos)
      << ep_err;
  c = tiny_job(d);
  c.model.vocab_size = 32;  // the token file was written for a vocabulary of 64
  std::string e = error_of([&] { train(c); });
  EXPECT_NE(e.find("model.vocab_size = 32 is smaller than the vocabulary of"), std::string::npos) << e;
}
