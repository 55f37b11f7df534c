// The job loop: LR schedules, loss falls and reruns are bit-identical, resume equals the uninterrupted run
// bit for bit (expert biases included), non-finite steps, refused layouts, a 32B plan on meta tensors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "job/trainer.h"
#include "simulator/plan.h"
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

// ---- schedules -------------------------------------------------------------------
TEST(Optim, LRSchedules) {
  LRSchedule s{LRShape::wsd, DecayShape::linear, 4, 100, 0.2, 0.0};
  EXPECT_DOUBLE_EQ(s.factor(1), 0.2);  // t / (warmup + 1)
  EXPECT_DOUBLE_EQ(s.factor(4), 0.8);
  EXPECT_DOUBLE_EQ(s.factor(50), 1.0);
  EXPECT_DOUBLE_EQ(s.factor(80), 1.0);
  EXPECT_DOUBLE_EQ(s.factor(90), 0.5);
  EXPECT_DOUBLE_EQ(s.factor(100), 0.0);
  LRSchedule c{LRShape::cosine, DecayShape::linear, 0, 10, 0.0, 0.1};
  EXPECT_NEAR(c.factor(5), 0.1 + 0.9 * 0.5, 1e-12);
  EXPECT_NEAR(c.factor(10), 0.1, 1e-12);
  LRSchedule l{LRShape::linear, DecayShape::linear, 0, 10, 0.0, 0.0};
  EXPECT_NEAR(l.factor(3), 0.7, 1e-12);
  LRSchedule k{LRShape::constant, DecayShape::linear, 2, 10, 0.0, 0.0};
  EXPECT_DOUBLE_EQ(k.factor(9), 1.0);
}

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

TEST(Train, ResumeReproducesTheUninterruptedRun) {
  std::string d = tmpdir("resume");
  JobConfig c = tiny_job(d);
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

// Auxiliary-loss-free balancing steers routing with per-expert biases that training updates: they are state
// a resumed run needs. Checkpoints (and titan-layout exports) carry them; resuming reproduces the uninterrupted
// run bit for bit, which it would not with the biases back at zero.
TEST(Train, ResumeKeepsTheExpertBiasesOfLossFreeBalancing) {
  std::string d = tmpdir("resume_bias");
  JobConfig c = tiny_job(d);
  c.model.name = decoder::Family::qwen3_moe;
  decoder::apply_preset(c.model, {});
  c.model.moe_num_experts = 4;
  c.model.moe_top_k = 2;
  c.model.moe_hidden_dim = 16;
  c.model.moe_first_dense = 0;
  c.model.hidden_dim = 0;
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

TEST(Plan, Qwen3_32BOn64RanksRunsOnMetaTensors) {
  JobConfig c = load_job_config_file(std::string(TITAN_SOURCE_DIR) + "/configs/qwen3_32b.yaml",
                                     {"parallelism.tensor_parallel_degree", "1", "parallelism.data_parallel_shard_degree",
                                      "-1"});
  c.job.print_args = false;
  StepPlan p = plan_step(c, 64);  // FSDP over 64 fake ranks, seq 4096, activation checkpointing
  const double params = 32762123264.0;
  auto gib = [](int64_t b) { return (double)b; };
  EXPECT_NEAR(gib(p.memory.current[(int)MemoryCategory::Parameters]), params * 4 / 64, params * 4 / 64 * 0.01);
  EXPECT_NEAR(gib(p.memory.current[(int)MemoryCategory::OptimizerState]), params * 8 / 64, params * 8 / 64 * 0.01);
  const double ratio = p.flops / (p.model_flops_per_token * (double)p.tokens_per_rank);
  EXPECT_GT(ratio, 1.25);  // full activation checkpointing recomputes the forward: ~8/6
  EXPECT_LT(ratio, 1.45);
  EXPECT_GT(p.memory.peak[(int)MemoryCategory::Activations], 0);
  c.activation_checkpoint.mode = JobConfig::ACMode::none;
  StepPlan q = plan_step(c, 64);
  const double r2 = q.flops / (q.model_flops_per_token * (double)q.tokens_per_rank);
  EXPECT_GT(r2, 0.95);
  EXPECT_LT(r2, 1.15);
  EXPECT_GT(q.memory.peak[(int)MemoryCategory::Activations], 2 * p.memory.peak[(int)MemoryCategory::Activations]);
  // gradient accumulation is in the planned step: k micro-batches (k x the work and tokens), one optimizer
  // step, the same peak; a global batch the trainer would refuse is refused here too
  c.training.global_batch_size = 3 * c.training.local_batch_size * q.dp_degree;
  StepPlan a = plan_step(c, 64);
  EXPECT_EQ(a.accumulation, 3);
  EXPECT_EQ(a.tokens_per_rank, 3 * q.tokens_per_rank);
  EXPECT_NEAR(a.flops / q.flops, 3.0, 0.05);
  EXPECT_NEAR((double)a.memory.peak[(int)MemoryCategory::Activations],
              (double)q.memory.peak[(int)MemoryCategory::Activations], 1024.0);  // a scalar loss or two
  c.training.global_batch_size += 1;
  try {
    plan_step(c, 64);
    ADD_FAILURE() << "an invalid global batch was planned";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("training.global_batch_size"), std::string::npos) << e.what();
  }
}
