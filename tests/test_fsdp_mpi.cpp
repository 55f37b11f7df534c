// FSDP under mpirun (2 and 3 ranks, uneven rows on 3): mixed precision's bf16 all-gather
// (training.mixed_precision_param bfloat16, FSDP2's param_dtype) moves the parameters that are only bf16 GEMM
// operands as bf16 and the rest (embedding, norms, the router, biases) as float32 in one all-gather per unit.
// The GEMMs round their weights to bf16 anyway, so the bf16 step's losses, gradient norms and updated
// shards equal, bit for bit, the same step with every parameter gathered in float32 — while a norm weight,
// the embedding or the router rounded on the wire would change them (they are set off bf16's grid here); and
// each unit's all-gather moves exactly its bf16 operands' padded rows at 2 bytes and the rest at 4, recorded as
// typed bytes for the simulator.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <string>

#include "comms/device_mesh.h"
#include "step/train_step.h"
#include "src/tensor/cost.h"
#include "tests/mpi_main.h"

using namespace titan;

namespace {
int world() { return comms::world_size(); }

JobConfig job_config(const std::string& precision) {
  JobConfig c = load_job_config_file(std::string(TITAN_SOURCE_DIR) + "/configs/qwen3_moe_debug.yaml",
                                     {"training.mixed_precision_param", precision, "training.seq_len", "32",
                                      "training.local_batch_size", "2", "parallelism.data_parallel_shard_degree",
                                      std::to_string(world())});
  c.job.print_args = false;
  return c;
}

// Every parameter moved off bf16's grid (norm weights start at 1, biases at 0: bf16 values), identically on
// every rank, before the plan shards them.
void off_the_bf16_grid(decoder::Decoder& m) {
  int64_t k = 0;
  for (auto& [n, p] : m.named_parameters()) {
    float* v = p->data<float>();
    for (int64_t i = 0; i < p->numel(); ++i, ++k) v[i] += 1e-3f * (float)((k * 7919) % 97 - 48) / 48.0f + 1e-6f;
  }
}

// The same batches on both jobs, different ones on each rank.
std::function<Batch()> batches() {
  auto step = std::make_shared<int64_t>(0);
  return [step] {
    const int64_t B = 2, S = 32, r = comms::world_rank();
    std::vector<int64_t> in((size_t)(B * S)), tg((size_t)(B * S)), doc((size_t)(B * S), 0);
    for (int64_t i = 0; i < B * S; ++i) {
      in[(size_t)i] = (i * 31 + r * 17 + *step * 101) % 256;
      tg[(size_t)i] = (i * 13 + r * 5 + *step * 7 + 1) % 256;
    }
    ++*step;
    return Batch{from_vector<int64_t>(in, {B, S}), from_vector<int64_t>(tg, {B, S}), from_vector<int64_t>(doc, {B, S})};
  };
}

struct Steps {
  std::vector<StepResult> steps;
  std::vector<std::vector<float>> shards;  // every parameter's shard after the steps
  std::vector<CostEvent> gathers;          // the first step's all-gathers, in order
};

Steps run(TrainJob& job) {
  Steps r;
  auto next = batches();
  for (int s = 0; s < 2; ++s) {
    CostTrace trace;
    r.steps.push_back(train_step(job, next, 1e-3));
    if (s == 0)
      for (const CostEvent& e : trace.events())
        if (e.kind == CostEvent::Kind::CommStart && std::string(e.op) == "all_gather") r.gathers.push_back(e);
  }
  for (auto& s : job.pm.specs) r.shards.push_back(s.slot->to_vector<float>());
  return r;
}

uint64_t bits(double x) {
  uint64_t u;
  std::memcpy(&u, &x, 8);
  return u;
}
}  // namespace

TEST(FsdpMixedPrecision, Bf16AllGatherMovesBf16OperandsAsBf16AndChangesNoBit) {
  const int n = world();
  comms::DeviceMesh mesh(mesh_degrees(job_config("bfloat16")));
  TrainJob bf16 = build_job(job_config("bfloat16"), mesh, off_the_bf16_grid);
  TrainJob f32 = build_job(job_config("float32"), mesh, off_the_bf16_grid);
  f32.compute = DType::BF16;  // the same bf16 step, every parameter gathered in float32
  ASSERT_EQ(bf16.compute, DType::BF16);

  // which parameters are bf16 operands: the GEMMs' weights, not the embedding, norms or the router
  std::map<std::string, bool> operand;
  for (auto& s : bf16.pm.specs) operand[s.name] = s.bf16_operand;
  EXPECT_TRUE(operand.at("model.layers.0.self_attn.q_proj.weight"));
  EXPECT_TRUE(operand.at("model.layers.0.mlp.down_proj.weight"));
  EXPECT_TRUE(operand.at("lm_head.weight"));
  EXPECT_FALSE(operand.at("model.embed_tokens.weight"));
  EXPECT_FALSE(operand.at("model.norm.weight"));
  EXPECT_FALSE(operand.at("model.layers.0.input_layernorm.weight"));
  EXPECT_FALSE(operand.at("model.layers.1.mlp.gate.weight"));  // the router computes in float32
  int experts = 0;
  for (auto& [name, is] : operand)
    if (name.find("experts") != std::string::npos && name.find("bias") == std::string::npos) {
      EXPECT_TRUE(is) << name;
      ++experts;
    }
  EXPECT_GT(experts, 0);

  const Steps a = run(bf16), b = run(f32);
  for (size_t s = 0; s < a.steps.size(); ++s) {
    EXPECT_EQ(bits(a.steps[s].loss), bits(b.steps[s].loss)) << "step " << s << ": " << a.steps[s].loss << " vs "
                                                            << b.steps[s].loss;
    EXPECT_EQ(bits(a.steps[s].grad_norm), bits(b.steps[s].grad_norm)) << "step " << s;
  }
  ASSERT_EQ(a.shards.size(), b.shards.size());
  for (size_t i = 0; i < a.shards.size(); ++i)
    EXPECT_EQ(0, std::memcmp(a.shards[i].data(), b.shards[i].data(), a.shards[i].size() * 4))
        << bf16.pm.specs[i].name << " differs after two steps";

  // the forward's all-gathers: root, then layers 0, 1, ... (one bucket each); each moves its unit's padded rows,
  // bf16 operands at 2 bytes and the rest at 4 (typed), against 4 for all (the float32 stand-in) without
  std::map<int, std::pair<double, double>> unit;  // unit (-1: root) -> (bf16 wire bytes, float32 bytes)
  for (auto& s : bf16.pm.specs) {
    int u = -1;
    if (s.name.rfind("model.layers.", 0) == 0) u = std::stoi(s.name.substr(13));
    const int64_t rows = s.full_shape[0], padded = (rows + n - 1) / n;
    const double elems = (double)(n * padded) * (double)(numel(s.full_shape) / rows);
    unit[u].first += elems * (s.bf16_operand ? 2.0 : 4.0);
    unit[u].second += elems * 4.0;
  }
  ASSERT_GE(a.gathers.size(), unit.size());
  ASSERT_EQ(a.gathers.size(), b.gathers.size());
  int i = 0;
  for (auto& [u, expect] : unit) {
    EXPECT_EQ(a.gathers[i].bytes, expect.first) << "unit " << u;
    EXPECT_TRUE(a.gathers[i].typed) << "unit " << u;
    EXPECT_EQ(b.gathers[i].bytes, expect.second) << "unit " << u;
    EXPECT_FALSE(b.gathers[i].typed) << "unit " << u;
    if (u >= 0) EXPECT_LT(expect.first, 0.6 * expect.second) << "unit " << u;  // a block: mostly GEMM weights
    ++i;
  }
}

// A bf16 buffer moves as bits: gathered exactly, and refused by the reductions (naming the group).
TEST(FsdpMixedPrecision, Bf16BuffersAreGatheredAsBitsAndNeverReduced) {
  comms::DeviceMesh mesh(comms::MeshDegrees{});
  comms::ProcessGroup& g = *mesh.world_pg;
  const int r = g.rank();
  Tensor x = empty({3}, DType::BF16);
  uint16_t* p = static_cast<uint16_t*>(x.raw_data());
  for (int i = 0; i < 3; ++i) p[i] = (uint16_t)(0x3f80 + 256 * r + i);  // 1.0 + ..., distinct per rank
  Tensor all = g.all_gather(x, 0);
  ASSERT_EQ(all.dtype(), DType::BF16);
  const uint16_t* q = static_cast<const uint16_t*>(all.raw_data());
  for (int s = 0; s < g.size(); ++s)
    for (int i = 0; i < 3; ++i) EXPECT_EQ(q[s * 3 + i], (uint16_t)(0x3f80 + 256 * s + i));
  std::string e;
  try {
    g.all_reduce(x);
  } catch (const std::exception& ex) {
    e = ex.what();
  }
  EXPECT_NE(e.find("bfloat16"), std::string::npos) << e;
}

int main(int argc, char** argv) { return titan::testing::run_mpi_tests(argc, argv); }
