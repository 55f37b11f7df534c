// The job config: YAML and CLI overrides, errors that name the key, file, line and allowed values, strict
// duplicates and typos, the changes a resume compares.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <tuple>

#include "job/trainer.h"
#include "models/decoder/model.h"
#include "models/decoder/presets.h"
#include "src/autograd/grad_mode.h"
#include "src/checkpoint/checkpoint.h"
#include "src/checkpoint/h5.h"
#include "src/data/loader.h"
#include "src/data/tokenizer.h"
#include "src/log/log.h"
#include "step/train_step.h"
#include "tests/job_fixtures.h"

using namespace titan;
using namespace titan::testing;
namespace fs = std::filesystem;

// ---- config -------------------------------------------------------------------
TEST(Config, LoadsYamlAndCliOverrides) {
  std::string d = tmpdir("cfg");
  write_file(d + "/a.yaml", "training:\n  steps: 7\n  seq_len: 32\nmodel:\n  activation: gelu\n  qk_norm: false\n");
  JobConfig c = load_job_config_file(d + "/a.yaml", {"training.steps", "20", "optimizer.lr", "1e-3"});
  EXPECT_EQ(c.training.steps, 20);
  EXPECT_EQ(c.training.seq_len, 32);
  EXPECT_EQ(c.model.activation, decoder::Activation::gelu);
  EXPECT_FALSE(c.model.qk_norm);
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 1e-3);
  const char* argv[] = {"titan-train", "--config", nullptr, "--training.local_batch_size", "3"};
  std::string p = d + "/a.yaml";
  argv[2] = p.c_str();
  JobConfig c2 = load_job_config(5, argv);
  EXPECT_EQ(c2.training.local_batch_size, 3);
  EXPECT_EQ(c2.training.steps, 7);
  // the dump reloads to the same config
  write_file(d + "/dump.yaml", dump_job_config(c));
  JobConfig c3 = load_job_config_file(d + "/dump.yaml");
  EXPECT_EQ(dump_job_config(c3), dump_job_config(c));
}

TEST(Config, ErrorsNameKeyFileLineAndAllowedValues) {
  std::string d = tmpdir("cfgerr");
  std::string e = error_of([&] { load_job_config_file(write_file(d + "/b.yaml", "training:\n  stepz: 3\n")); });
  EXPECT_NE(e.find("b.yaml:2"), std::string::npos) << e;
  EXPECT_NE(e.find("training.stepz"), std::string::npos) << e;
  EXPECT_NE(e.find("did you mean 'steps'"), std::string::npos) << e;
  e = error_of([&] { load_job_config_file(write_file(d + "/c.yaml", "model:\n  n_layers: four\n")); });
  EXPECT_NE(e.find("c.yaml:2"), std::string::npos) << e;
  EXPECT_NE(e.find("not an integer"), std::string::npos) << e;
  e = error_of([&] { load_job_config_file(write_file(d + "/d.yaml", "model:\n  norm_type: batchnorm\n")); });
  EXPECT_NE(e.find("rmsnorm, layernorm"), std::string::npos) << e;
  e = error_of([&] { load_job_config_file(write_file(d + "/e.yaml", "trainning:\n  steps: 1\n")); });
  EXPECT_NE(e.find("unknown section 'trainning'"), std::string::npos) << e;
  e = error_of([&] { load_job_config_file("", {"model.n_heads", "6", "model.n_kv_heads", "4"}); });
  EXPECT_NE(e.find("multiple of model.n_kv_heads"), std::string::npos) << e;
  e = error_of([&] { load_job_config_file("", {"training.nope", "1"}); });
  EXPECT_NE(e.find("unknown flag --training.nope"), std::string::npos) << e;
  e = error_of([&] { load_job_config_file(write_file(d + "/f.yaml", "model: [1, 2\n")); });
  EXPECT_NE(e.find("malformed YAML"), std::string::npos) << e;
  // MoE: top-k larger than the experts, experts not divisible by the ep degree
  e = error_of([&] { load_job_config_file("", {"model.name", "gpt_oss", "model.moe_num_experts", "4", "model.moe_top_k", "5"}); });
  EXPECT_NE(e.find("model.moe_top_k = 5 must be in [1, model.moe_num_experts = 4]"), std::string::npos) << e;
  e = error_of([&] {
    load_job_config_file("", {"model.name", "gpt_oss", "model.moe_num_experts", "6", "parallelism.expert_parallel_degree", "4"});
  });
  EXPECT_NE(e.find("model.moe_num_experts = 6 is not divisible by parallelism.expert_parallel_degree = 4"),
            std::string::npos) << e;
  // the layout rules parallelize also holds (parallel::check_layout), named before anything is built
  e = error_of([&] { load_job_config_file("", {"parallelism.expert_parallel_degree", "2"}); });
  EXPECT_NE(e.find("parallelism.expert_parallel_degree 2 needs MoE layers"), std::string::npos) << e;
  e = error_of([&] {
    load_job_config_file("", {"model.enable_weight_tying", "true", "parallelism.pipeline_parallel_degree", "2"});
  });
  EXPECT_NE(e.find("untie the embeddings or use pp 1"), std::string::npos) << e;
  // selective_ac_option: parsed once where it is read (N >= 1 or op), and refused where the mode ignores it
  e = error_of([&] { load_job_config_file(write_file(d + "/g.yaml", "activation_checkpoint:\n  mode: selective\n  selective_ac_option: \"0\"\n")); });
  EXPECT_NE(e.find("g.yaml:3"), std::string::npos) << e;
  EXPECT_NE(e.find("'0' is not a positive integer N (checkpoint every Nth block) or 'op'"), std::string::npos) << e;
  e = error_of([&] { load_job_config_file("", {"activation_checkpoint.selective_ac_option", "ops"}); });
  EXPECT_NE(e.find("--activation_checkpoint.selective_ac_option"), std::string::npos) << e;
  EXPECT_NE(e.find("'ops' is not a positive integer N"), std::string::npos) << e;
  e = error_of([&] { load_job_config_file("", {"activation_checkpoint.mode", "full", "activation_checkpoint.selective_ac_option", "op"}); });
  EXPECT_NE(e.find("selective_ac_option ('op') applies only with activation_checkpoint.mode selective (it is full)"),
            std::string::npos) << e;
  // the global batch: a count of sequences or -1, and no more micro-batches a step than any run accumulates
  for (const char* v : {"-16", "0"}) {
    e = error_of([&] { load_job_config_file("", {"training.global_batch_size", v}); });
    EXPECT_NE(e.find(std::string("training.global_batch_size must be > 0 (sequences per step, all ranks together) or "
                                 "-1 (local_batch_size x the data-parallel ranks), got ") + v),
              std::string::npos) << e;
  }
  e = error_of([&] { load_job_config_file("", {"training.global_batch_size", "4611686018427387904"}); });
  EXPECT_NE(e.find("training.global_batch_size (4611686018427387904) is more than 2^31 sequences a step"),
            std::string::npos) << e;
  {
    const JobConfig c = load_job_config_file("", {"training.local_batch_size", "2", "training.global_batch_size", "1048576"});
    EXPECT_EQ(gradient_accumulation_steps(c, 8), 65536);  // the most
    e = error_of([&] { gradient_accumulation_steps(c, 4); });
    EXPECT_NE(e.find("is 131072 micro-batches a step; more than 65,536 is a mistyped value"), std::string::npos) << e;
  }
  {
    JobConfig c = load_job_config_file("", {"activation_checkpoint.mode", "selective", "activation_checkpoint.selective_ac_option", "3"});
    EXPECT_EQ(c.activation_checkpoint.every(), 3);
    EXPECT_FALSE(c.activation_checkpoint.op_level());
    c = load_job_config_file("", {"activation_checkpoint.mode", "selective", "activation_checkpoint.selective_ac_option", "op"});
    EXPECT_EQ(c.activation_checkpoint.every(), 1);
    EXPECT_TRUE(c.activation_checkpoint.op_level());
    EXPECT_NE(dump_job_config(c).find("selective_ac_option: \"op\""), std::string::npos) << dump_job_config(c);
  }
}

TEST(Config, StrictDuplicatesCliTyposValuesAndWarnings) {
  std::string d = tmpdir("cfgstrict");
  // a duplicate key (YAML would silently keep one) and a duplicate section
  std::string e = error_of([&] { load_job_config_file(write_file(d + "/dup.yaml", "model:\n  dim: 64\n  dim: 128\n")); });
  EXPECT_NE(e.find("dup.yaml:3: duplicate key 'model.dim' (first at line 2)"), std::string::npos) << e;
  e = error_of([&] {
    load_job_config_file(write_file(d + "/dups.yaml", "model:\n  dim: 64\ntraining:\n  steps: 2\nmodel:\n  dim: 32\n"));
  });
  EXPECT_NE(e.find("dups.yaml:6: duplicate key 'model.dim' (first at line 2)"), std::string::npos) << e;
  // a section written twice with different keys merges (titan 0.7 dumped `checkpoint` in two blocks)
  JobConfig m = load_job_config_file(write_file(d + "/merge.yaml", "model:\n  dim: 64\ntraining:\n  steps: 2\nmodel:\n  n_layers: 3\n"));
  EXPECT_EQ(m.model.dim, 64);
  EXPECT_EQ(m.model.n_layers, 3);
  // command-line typos get YAML's "did you mean" and key list, not CLI11's "arguments were not expected"
  const char* argv[] = {"titan-train", "--model.dimm", "64"};
  e = error_of([&] { load_job_config(3, argv); });
  EXPECT_NE(e.find("unknown flag --model.dimm (did you mean 'dim'?); keys in [model]:"), std::string::npos) << e;
  const char* argv2[] = {"titan-train", "--trainig.steps=3"};
  e = error_of([&] { load_job_config(2, argv2); });
  EXPECT_NE(e.find("unknown flag --trainig.steps (did you mean 'training.steps'?)"), std::string::npos) << e;
  // physically meaningless values
  e = error_of([&] { load_job_config_file("", {"model.rope_theta", "0"}); });
  EXPECT_NE(e.find("model.rope_theta must be > 0"), std::string::npos) << e;
  e = error_of([&] { load_job_config_file("", {"model.norm_eps", "-1e-6"}); });
  EXPECT_NE(e.find("model.norm_eps must be > 0"), std::string::npos) << e;
  e = error_of([&] { load_job_config_file("", {"training.max_norm", "-1"}); });
  EXPECT_NE(e.find("training.max_norm must be >= 0"), std::string::npos) << e;
  // legal but surely a mistake: warned
  JobConfig c = load_job_config_file("", {"training.steps", "5", "lr_scheduler.warmup_steps", "10", "model.sliding_window",
                                          "512", "training.seq_len", "256"});
  auto w = config_warnings(c);
  ASSERT_EQ(w.size(), 2u);
  EXPECT_NE(w[0].find("warmup_steps (10) exceeds training.steps (5)"), std::string::npos) << w[0];
  EXPECT_NE(w[1].find("model.sliding_window (512) is not shorter than training.seq_len (256)"), std::string::npos) << w[1];
  EXPECT_TRUE(config_warnings(JobConfig()).empty());
}

// parallelism.fsdp_reshard_after_forward is TorchTitan's policy: default reshards without pipeline parallel and
// keeps a stage's gathered weights to the backward with it; always / never as written; a boolean is refused,
// naming the values.
TEST(Config, FsdpReshardPolicyIsTorchTitans) {
  using R = JobConfig::Parallelism::Reshard;
  JobConfig c = load_job_config_file("", {});
  EXPECT_EQ(c.parallelism.fsdp_reshard_after_forward, R::by_default);
  EXPECT_TRUE(c.parallelism.reshard_after_forward());
  c = load_job_config_file("", {"parallelism.pipeline_parallel_degree", "2"});
  EXPECT_FALSE(c.parallelism.reshard_after_forward());
  c = load_job_config_file("", {"parallelism.pipeline_parallel_degree", "2", "parallelism.fsdp_reshard_after_forward",
                                "always"});
  EXPECT_TRUE(c.parallelism.reshard_after_forward());
  c = load_job_config_file("", {"parallelism.fsdp_reshard_after_forward", "never"});
  EXPECT_FALSE(c.parallelism.reshard_after_forward());
  EXPECT_EQ(parallel_options(c).reshard_after_forward, false);
  const std::string e =
      error_of([&] { load_job_config_file("", {"parallelism.fsdp_reshard_after_forward", "false"}); });
  EXPECT_NE(e.find("fsdp_reshard_after_forward"), std::string::npos) << e;
  EXPECT_NE(e.find("default"), std::string::npos) << e;
  EXPECT_NE(e.find("never"), std::string::npos) << e;
}

TEST(Config, Float8KeysApplyOrAreRefused) {
  std::string d = tmpdir("cfgfp8");
  JobConfig c = load_job_config_file(write_file(d + "/f.yaml",
                                                "model:\n  converters: [float8]\nfloat8:\n  recipe: tensorwise\n"
                                                "  filter_fqns:\n    - lm_head\n    - gate\n"));
  EXPECT_EQ(c.converters.items, (std::vector<std::string>{"float8"}));
  EXPECT_EQ(c.float8.recipe, Float8Recipe::tensorwise);
  EXPECT_EQ(c.float8.filter_fqns.items, (std::vector<std::string>{"lm_head", "gate"}));
  EXPECT_FALSE(c.model_given.count("converters"));  // not an architecture knob
  write_file(d + "/dump.yaml", dump_job_config(c));  // the lists read back as written
  EXPECT_EQ(dump_job_config(load_job_config_file(d + "/dump.yaml")), dump_job_config(c));
  // the command line: a,b or [a, b]
  JobConfig k = load_job_config_file("", {"model.converters", "float8", "float8.filter_fqns", "[lm_head, router]"});
  EXPECT_TRUE(k.converters.contains("float8"));
  EXPECT_EQ(k.float8.filter_fqns.items, (std::vector<std::string>{"lm_head", "router"}));
  EXPECT_EQ(k.float8.recipe, Float8Recipe::rowwise);  // TorchTitan's default recipe
  // config_changes compares lists item by item (the checkpointer compares model.* and optimizer.*: a changed
  // model.converters is a change; float8.* is not compared, no state depends on it)
  JobConfig k2 = load_job_config_file("", {"model.converters", "float8", "float8.filter_fqns", "lm_head"});
  const auto ch = config_changes(dump_job_config(k), dump_job_config(k2), {"model", "float8"});
  ASSERT_EQ(ch.size(), 1u);
  EXPECT_NE(ch[0].find("float8.filter_fqns"), std::string::npos) << ch[0];
  // refused, naming the key and the value as written
  std::string e = error_of([&] { load_job_config_file("", {"model.converters", "[mx]"}); });
  EXPECT_NE(e.find("unknown converter 'mx'"), std::string::npos) << e;
  EXPECT_NE(e.find("mxfp8"), std::string::npos) << e;
  e = error_of([&] { load_job_config_file("", {"float8.recipe", "tensorwise"}); });
  EXPECT_NE(e.find("float8.recipe is given but model.converters ([]) has no float8"), std::string::npos) << e;
  e = error_of([&] { load_job_config_file(write_file(d + "/g.yaml", "float8:\n  filter_fqns: [lm_head]\n")); });
  EXPECT_NE(e.find("float8.filter_fqns is given"), std::string::npos) << e;
  e = error_of([&] {
    load_job_config_file("", {"model.converters", "float8", "float8.recipe", "mxfp8", "training.seq_len", "20",
                              "training.local_batch_size", "1"});
  });
  EXPECT_NE(e.find("20 tokens"), std::string::npos) << e;
  // FSDP's float8 all-gather: the tensorwise recipe on sharded weights; its precomputed scales with it only
  JobConfig ag = load_job_config_file("", {"model.converters", "float8", "float8.recipe", "tensorwise",
                                           "float8.enable_fsdp_float8_all_gather", "true",
                                           "float8.precompute_float8_dynamic_scale_for_fsdp", "true",
                                           "parallelism.data_parallel_shard_degree", "2"});
  EXPECT_TRUE(ag.float8.enable_fsdp_float8_all_gather);
  EXPECT_TRUE(ag.float8.precompute_float8_dynamic_scale_for_fsdp);
  e = error_of([&] { load_job_config_file("", {"float8.enable_fsdp_float8_all_gather", "true"}); });
  EXPECT_NE(e.find("float8.enable_fsdp_float8_all_gather is given but model.converters"), std::string::npos) << e;
  e = error_of([&] {
    load_job_config_file("", {"model.converters", "float8", "float8.enable_fsdp_float8_all_gather", "true",
                              "parallelism.data_parallel_shard_degree", "2"});
  });
  EXPECT_NE(e.find("needs float8.recipe tensorwise"), std::string::npos) << e;
  EXPECT_NE(e.find("got rowwise"), std::string::npos) << e;
  e = error_of([&] {
    load_job_config_file("", {"model.converters", "float8", "float8.recipe", "tensorwise",
                              "float8.enable_fsdp_float8_all_gather", "true", "parallelism.data_parallel_shard_degree", "1"});
  });
  EXPECT_NE(e.find("FSDP shards nothing"), std::string::npos) << e;
  e = error_of([&] {
    load_job_config_file("", {"model.converters", "float8", "float8.recipe", "tensorwise",
                              "float8.precompute_float8_dynamic_scale_for_fsdp", "true"});
  });
  EXPECT_NE(e.find("set float8.enable_fsdp_float8_all_gather: true"), std::string::npos) << e;
  // float8.moe_fqns_prototype: without the converter, and with tensor parallel (the experts' hidden size cut)
  e = error_of([&] { load_job_config_file("", {"float8.moe_fqns_prototype", "experts"}); });
  EXPECT_NE(e.find("float8.moe_fqns_prototype is given but model.converters ([]) has no float8"), std::string::npos) << e;
  e = error_of([&] {
    load_job_config_file("", {"model.converters", "float8", "float8.moe_fqns_prototype", "experts",
                              "parallelism.tensor_parallel_degree", "2"});
  });
  EXPECT_NE(e.find("float8.moe_fqns_prototype [experts] with parallelism.tensor_parallel_degree 2"), std::string::npos) << e;
  EXPECT_EQ(load_job_config_file("", {"model.converters", "float8", "float8.moe_fqns_prototype", "experts"})
                .float8.moe_fqns_prototype.items,
            (std::vector<std::string>{"experts"}));
  e = error_of([&] { load_job_config_file("", {"float8.recipe", "fp4"}); });
  EXPECT_NE(e.find("tensorwise, rowwise, rowwise_with_gw_hp, mxfp8, mxfp8_rceil"), std::string::npos) << e;
  e = error_of([&] { load_job_config_file(write_file(d + "/h.yaml", "model:\n  dim: [1, 2]\n")); });
  EXPECT_NE(e.find("h.yaml:2"), std::string::npos) << e;
  EXPECT_NE(e.find("model.dim"), std::string::npos) << e;
  e = error_of([&] { load_job_config_file(write_file(d + "/i.yaml", "job:\n  dump_folder: [out]\n")); });
  EXPECT_NE(e.find("job.dump_folder must be a string"), std::string::npos) << e;  // only list keys take a list
  e = error_of([&] { load_job_config_file("", {"float8.filter_fqns", "[a, , b]"}); });
  EXPECT_NE(e.find("a list of names"), std::string::npos) << e;
}

TEST(Config, ChangesBetweenConfigsForResume) {
  JobConfig a, b;
  b.optimizer.lr = 1e-3;
  b.training.steps = 999;  // not a model/optimizer key: resuming for longer is fine
  const std::string ta = dump_job_config(a), tb = dump_job_config(b);
  auto ch = config_changes(ta, tb, {"model", "optimizer"});
  ASSERT_EQ(ch.size(), 1u);
  EXPECT_NE(ch[0].find("optimizer.lr: "), std::string::npos) << ch[0];
  EXPECT_TRUE(config_changes(ta, ta, {"model", "optimizer"}).empty());
  // a config written before a key existed ran with its default: no change unless the new value differs
  std::string old = ta;
  const size_t at = old.find("  qk_norm:");
  ASSERT_NE(at, std::string::npos);
  old.erase(at, old.find('\n', at) - at + 1);
  EXPECT_TRUE(config_changes(old, ta, {"model"}).empty());
  JobConfig c;
  c.model.qk_norm = !a.model.qk_norm;
  // ... and a knob that stops acting with it (qk_norm_scope without a QK-norm) is left out of the new config
  const auto ch2 = config_changes(old, dump_job_config(c), {"model"});
  ASSERT_EQ(ch2.size(), 2u);
  EXPECT_EQ(ch2[0], "model.qk_norm_scope: head -> (absent)");
  EXPECT_EQ(ch2[1], "model.qk_norm: true -> false");
}

// model.flavor selects a member's size: it sets its keys, a later key overrides it (and the model says
// custom), a key in the same place that disagrees is refused, and an unknown flavor lists the known ones.
TEST(Config, FlavorSelectsTheSizeOrIsRefused) {
  const std::string d = tmpdir("flavor");
  const std::string f32 = write_file(d + "/q32.yaml", "model:\n  name: qwen3\n  flavor: 32b\n  dim: 5120\n  n_layers: 64\n");
  // --model.flavor under the YAML's shape: the flavor (given later) wins
  JobConfig c = load_job_config_file(f32, {"model.flavor", "0.6b"});
  EXPECT_EQ(c.model.dim, 1024);
  EXPECT_EQ(c.model.n_layers, 28);
  EXPECT_EQ(c.model.hidden_dim, 3072);
  EXPECT_EQ(c.model.vocab_size, 151936);
  EXPECT_TRUE(c.model.enable_weight_tying);
  EXPECT_EQ(c.model.flavor, "0.6b");
  EXPECT_TRUE(c.notes.empty());
  // a flavor alone fills the keys not given (the 32b's head count, hidden size...)
  c = load_job_config_file(write_file(d + "/only.yaml", "model:\n  name: qwen3\n  flavor: 32b\n"));
  EXPECT_EQ(c.model.n_heads, 64);
  EXPECT_EQ(c.model.hidden_dim, 25600);
  EXPECT_EQ(c.model.num_params(), load_job_config_file(f32).model.num_params());
  // a key given after the flavor overrides it: the model is custom, and a note says so
  c = load_job_config_file(f32, {"model.n_layers", "4"});
  EXPECT_EQ(c.model.n_layers, 4);
  EXPECT_EQ(c.model.dim, 5120);
  EXPECT_EQ(c.model.flavor, "custom");
  ASSERT_EQ(c.notes.size(), 1u);
  EXPECT_NE(c.notes[0].find("model.n_layers 4 (the flavor's: 64)"), std::string::npos) << c.notes[0];
  // the saved config of that job loads back as the same model
  const JobConfig back = load_job_config_file(write_file(d + "/dump.yaml", dump_job_config(c)));
  EXPECT_EQ(back.model.n_layers, 4);
  EXPECT_EQ(back.model.num_params(), c.model.num_params());
  // one place giving a flavor and a shape that disagrees: refused, naming both places
  std::string e = error_of([&] {
    load_job_config_file(write_file(d + "/bad.yaml", "model:\n  name: qwen3\n  flavor: 0.6b\n  dim: 5120\n"));
  });
  EXPECT_NE(e.find("model.flavor 0.6b (" + d + "/bad.yaml:3) has model.dim = 1024, but " + d + "/bad.yaml:4 gives 5120"),
            std::string::npos) << e;
  e = error_of([&] { load_job_config_file(f32, {"model.flavor", "0.6b", "model.dim", "5120"}); });
  EXPECT_NE(e.find("but --model.dim gives 5120"), std::string::npos) << e;
  e = error_of([&] { load_job_config_file(f32, {"model.flavor", "0.5b"}); });
  EXPECT_NE(e.find("'0.5b' is not a flavor of model.name qwen3 (did you mean '0.6b'?)"), std::string::npos) << e;
  EXPECT_NE(e.find("0.6b, 1.7b, 4b, 8b, 14b, 32b"), std::string::npos) << e;
  // a flavor selected on another flavor's config is that flavor's config: no key of the first one stays behind
  auto model_of = [](const JobConfig& j) {
    const std::string t = dump_job_config(j);
    const size_t a = t.find("model:\n");
    return t.substr(a, t.find("\noptimizer:") - a);
  };
  const std::string cfgs = std::string(TITAN_SOURCE_DIR) + "/configs/";
  for (const auto& [from, to, flavor] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {"gpt_oss_debug", "gpt_oss_20b", "20b"}, {"gpt_oss_120b", "gpt_oss_debug", "debug"},
           {"qwen3_0.6b", "qwen3_debug", "debug"}, {"qwen3_32b", "qwen3_0.6b", "0.6b"}, {"qwen3_debug", "qwen3_14b", "14b"}})
    EXPECT_EQ(model_of(load_job_config_file(cfgs + from + ".yaml", {"model.flavor", flavor})),
              model_of(load_job_config_file(cfgs + to + ".yaml")))
        << from << " --model.flavor " << flavor << " is not " << to;
  // the building line's ablation list leaves a flavor's own values out (0.6b's tying, llama debug's RoPE scaling)
  EXPECT_EQ(decoder::knobs_beyond_preset(load_job_config_file(cfgs + "qwen3_0.6b.yaml").model), "");
  EXPECT_EQ(decoder::knobs_beyond_preset(load_job_config_file(cfgs + "llama3_debug.yaml").model), "");
  EXPECT_EQ(decoder::knobs_beyond_preset(load_job_config_file(cfgs + "qwen3_debug.yaml", {"model.qk_norm", "false"}).model),
            "qk_norm false");
  // every shipped config's flavor is one of its member's, and agrees with the keys the file gives
  for (const auto& it : fs::recursive_directory_iterator(std::string(TITAN_SOURCE_DIR) + "/configs")) {
    if (it.path().extension() != ".yaml") continue;
    const JobConfig s = load_job_config_file(it.path().string());
    EXPECT_TRUE(s.notes.empty()) << it.path();
    EXPECT_NE(s.model.flavor, "custom") << it.path() << ": a shipped config names its flavor";
  }
}
