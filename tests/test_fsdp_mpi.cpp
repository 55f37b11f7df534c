// FSDP under mpirun (2 and 3 ranks, uneven rows on 3): mixed precision's bf16 all-gather
// (training.mixed_precision_param bfloat16, FSDP2's param_dtype) moves the parameters that are only bf16 GEMM
// operands as bf16 and the rest (embedding, norms, the router, biases) as float32 in one all-gather per unit.
// The GEMMs round their weights to bf16 anyway, so the bf16 step's losses, gradient norms and updated
// shards equal, bit for bit, the same step with every parameter gathered in float32 — while a norm weight,
// the embedding or the router rounded on the wire would change them (they are set off bf16's grid here); and
// each unit's all-gather moves exactly its bf16 operands' padded rows at 2 bytes and the rest at 4, recorded as
// typed bytes for the simulator.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "comms/device_mesh.h"
#include "step/train_step.h"
#include "src/tensor/bfloat16.h"
#include "src/tensor/cost.h"
#include "tests/mpi_main.h"

using namespace titan;

namespace {
int world() { return comms::world_size(); }

JobConfig job_config(const std::string& precision, std::vector<std::string> more = {}) {
  std::vector<std::string> o = {"training.mixed_precision_param", precision, "training.seq_len", "32",
                                "training.local_batch_size", "2", "parallelism.data_parallel_shard_degree",
                                std::to_string(world())};
  o.insert(o.end(), more.begin(), more.end());
  JobConfig c = load_job_config_file(std::string(TITAN_SOURCE_DIR) + "/configs/qwen3_moe_debug.yaml", o);
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

// Each FSDP unit's all-gather (unit -1: the root; n ranks, each parameter's rows padded to ceil(rows / n)): its
// bytes at `bytes_of` an element, and at 4 (float32)
std::map<int, std::pair<double, double>> gathered_bytes(const std::vector<parallel::ShardSpec>& specs, int n,
                                                        const std::function<int(const parallel::ShardSpec&)>& bytes_of) {
  std::map<int, std::pair<double, double>> unit;
  for (auto& s : specs) {
    int u = -1;
    if (s.name.rfind("model.layers.", 0) == 0) u = std::stoi(s.name.substr(13));
    const int64_t rows = s.full_shape[0], padded = (rows + n - 1) / n;
    const double elems = (double)(n * padded) * (double)(numel(s.full_shape) / rows);
    unit[u].first += elems * bytes_of(s);
    unit[u].second += elems * 4.0;
  }
  return unit;
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
  const auto unit = gathered_bytes(bf16.pm.specs, n, [](const parallel::ShardSpec& s) { return s.bf16_operand ? 2 : 4; });
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

// FP8 linear layers under bf16 mixed precision read their weight's bf16 values (torchao under FSDP2's bf16
// param_dtype; float8_weight), so FSDP gathers those weights as bf16 too: the same bits as gathering them in
// float32, half the bytes.
TEST(FsdpMixedPrecision, Float8WeightsTravelAsBf16AndChangeNoBit) {
  const std::vector<std::string> f8 = {"model.converters", "float8", "float8.recipe", "tensorwise"};
  comms::DeviceMesh mesh(mesh_degrees(job_config("bfloat16", f8)));
  TrainJob bf16 = build_job(job_config("bfloat16", f8), mesh, off_the_bf16_grid);
  TrainJob f32 = build_job(job_config("float32", f8), mesh, off_the_bf16_grid);
  f32.compute = DType::BF16;  // the same bf16 step, every parameter gathered in float32
  std::map<std::string, bool> operand;
  for (auto& s : bf16.pm.specs) operand[s.name] = s.bf16_operand;
  EXPECT_TRUE(operand.at("model.layers.0.self_attn.q_proj.weight"));  // an FP8 layer's weight
  const Steps a = run(bf16), b = run(f32);
  for (size_t s = 0; s < a.steps.size(); ++s) {
    EXPECT_EQ(bits(a.steps[s].loss), bits(b.steps[s].loss)) << "step " << s << ": " << a.steps[s].loss << " vs "
                                                            << b.steps[s].loss;
    EXPECT_EQ(bits(a.steps[s].grad_norm), bits(b.steps[s].grad_norm)) << "step " << s;
  }
  double wire = 0, whole = 0;
  for (size_t i = 0; i < a.gathers.size(); ++i) wire += a.gathers[i].bytes, whole += b.gathers[i].bytes;
  EXPECT_LT(wire, 0.6 * whole);
}

// float8.enable_fsdp_float8_all_gather (torchao's FSDP float8 all-gather, tensorwise): each rank casts its float32
// shard of an FP8 layer's weight with the whole weight's scale and the all-gather moves the codes, one byte an
// element; in a float32 step that is the cast of the gathered float32 weight, so the steps are the same to the bit
// (with the scales precomputed once a step too), and every block's gather moves fewer bytes, typed.
TEST(FsdpFloat8AllGather, MovesCodesAndChangesNoBitOfAFloat32Step) {
  const int n = world();
  const std::vector<std::string> f8 = {"model.converters", "float8", "float8.recipe", "tensorwise"};
  auto with = [&](std::vector<std::string> more) {
    std::vector<std::string> o = f8;
    o.insert(o.end(), more.begin(), more.end());
    return job_config("float32", o);
  };
  comms::DeviceMesh mesh(mesh_degrees(with({})));
  TrainJob plain = build_job(with({}), mesh, off_the_bf16_grid);
  TrainJob codes = build_job(with({"float8.enable_fsdp_float8_all_gather", "true"}), mesh, off_the_bf16_grid);
  TrainJob pre = build_job(with({"float8.enable_fsdp_float8_all_gather", "true",
                                 "float8.precompute_float8_dynamic_scale_for_fsdp", "true"}), mesh, off_the_bf16_grid);
  std::map<std::string, bool> fp8;
  for (auto& s : codes.pm.specs) fp8[s.name] = s.fp8_gather != nullptr;
  EXPECT_TRUE(fp8.at("model.layers.0.self_attn.q_proj.weight"));
  EXPECT_TRUE(fp8.at("lm_head.weight"));
  EXPECT_FALSE(fp8.at("model.embed_tokens.weight"));
  EXPECT_FALSE(fp8.at("model.layers.0.input_layernorm.weight"));
  const Steps a = run(plain), b = run(codes), c = run(pre);
  for (size_t s = 0; s < a.steps.size(); ++s)
    for (const Steps* o : {&b, &c}) {
      EXPECT_EQ(bits(a.steps[s].loss), bits(o->steps[s].loss)) << "step " << s;
      EXPECT_EQ(bits(a.steps[s].grad_norm), bits(o->steps[s].grad_norm)) << "step " << s;
    }
  for (size_t i = 0; i < a.shards.size(); ++i) {
    EXPECT_EQ(0, std::memcmp(a.shards[i].data(), b.shards[i].data(), a.shards[i].size() * 4)) << plain.pm.specs[i].name;
    EXPECT_EQ(0, std::memcmp(a.shards[i].data(), c.shards[i].data(), a.shards[i].size() * 4)) << plain.pm.specs[i].name;
  }
  // the forward's gathers: an FP8 weight's padded rows at 1 byte, the rest at 4, as bytes (typed)
  const auto unit = gathered_bytes(codes.pm.specs, n, [](const parallel::ShardSpec& s) { return s.fp8_gather ? 1 : 4; });
  ASSERT_GE(b.gathers.size(), unit.size());
  int i = 0;
  for (auto& [u, expect] : unit) {
    EXPECT_EQ(b.gathers[i].bytes, expect.first) << "unit " << u;
    EXPECT_TRUE(b.gathers[i].typed) << "unit " << u;
    EXPECT_EQ(a.gathers[i].bytes, expect.second) << "unit " << u;
    ++i;
  }
}

// The bf16 wire (ProcessGroup's wire = bfloat16): reductions sum as NCCL sums bf16 — every addition in float32,
// rounded to bf16, hop by hop in the library's order — so on 2 and 3 ranks (where every association is a left
// fold of some order; ctest runs these) each result is one of the folds of the ranks' rounded inputs (one
// candidate on 2 ranks); the average pre-multiplies each rounded input by bf16(1 / ranks), rounded, as NCCL's
// ncclAvg; gathers move bf16 values exactly; bits travel at 2 bytes, recorded typed; max and averaged bits are
// refused.
namespace {
float rb(float f) { return round_to_bf16(f); }
float input(int r, int64_t i) { return 1.0f + 0.37f * (float)r + 3e-3f * (float)i + 7.1e-4f * (float)(r * i % 5); }
// every order's per-hop sum of the ranks' rounded inputs for element i (scale != 1: each input times bf16(scale))
std::vector<float> per_hop_sums(int n, int64_t i, double scale = 1.0) {
  std::vector<int> order(n);
  for (int r = 0; r < n; ++r) order[r] = r;
  const float s = rb((float)scale);
  auto in = [&](int r) { return scale == 1.0 ? rb(input(r, i)) : rb(rb(input(r, i)) * s); };
  std::vector<float> out;
  do {
    float acc = in(order[0]);
    for (int k = 1; k < n; ++k) acc = rb(acc + in(order[k]));
    out.push_back(acc);
  } while (std::next_permutation(order.begin(), order.end()));
  return out;
}
bool one_of(float v, const std::vector<float>& c) { return std::find(c.begin(), c.end(), v) != c.end(); }
std::string what_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST(Bf16Wire, ReductionsSumAsNcclSumsBf16AndGathersMoveBits) {
  comms::DeviceMesh mesh(comms::MeshDegrees{});
  comms::ProcessGroup& g = *mesh.world_pg;
  const int n = g.size(), r = g.rank();
  const int64_t rows = 3, cols = 2 * n + 1;  // an uneven split of the columns
  std::vector<float> v((size_t)(rows * cols));
  for (int64_t i = 0; i < rows * cols; ++i) v[(size_t)i] = input(r, i);
  Tensor x = from_vector<float>(v, {rows, cols});
  std::vector<int64_t> sizes = comms::chunk_sizes(cols, n);

  CostTrace trace;
  Tensor sum = g.all_reduce(x, comms::ReduceOp::Sum, DType::BF16);
  Tensor avg = g.all_reduce(x, comms::ReduceOp::Avg, DType::BF16);
  Tensor mine = g.reduce_scatter(x, 1, comms::ReduceOp::Avg, sizes, DType::BF16);  // [rows, sizes[r]]
  Tensor gathered = g.all_gather(mine, 1, sizes, DType::BF16);                     // bf16 values: exact
  ASSERT_EQ(sum.dtype(), DType::F32);
  ASSERT_EQ(mine.shape(), (Shape{rows, sizes[(size_t)r]}));
  int64_t at = 0;
  for (int q = 0; q < r; ++q) at += sizes[(size_t)q];
  ASSERT_LE(n, 3) << "the candidates below are left folds: 2 or 3 ranks";
  int single_rounding_differs = 0;  // elements where one rounding of the float32 sum is none of the per-hop sums
  for (int64_t i = 0; i < rows * cols; ++i) {
    const std::vector<float> c = per_hop_sums(n, i), ca = per_hop_sums(n, i, 1.0 / n);
    EXPECT_TRUE(one_of(sum.data<float>()[i], c)) << "element " << i << ": " << sum.data<float>()[i];
    EXPECT_TRUE(one_of(avg.data<float>()[i], ca)) << "element " << i << ": " << avg.data<float>()[i];
    const int64_t row = i / cols, col = i % cols;
    if (col >= at && col < at + sizes[(size_t)r])
      EXPECT_TRUE(one_of(mine.data<float>()[row * sizes[(size_t)r] + col - at], ca)) << "element " << i;
    float f32 = 0;
    for (int q = 0; q < n; ++q) f32 += rb(input(q, i));
    single_rounding_differs += !one_of(rb(f32), c);
  }
  if (n == 2) EXPECT_EQ(single_rounding_differs, 0);  // one addition: one rounding either way
  // the gather returns every rank's reduce-scatter result in place: its own as it is, the others' each one of
  // their element's candidates
  for (int64_t row = 0; row < rows; ++row)
    for (int64_t col = 0; col < cols; ++col) {
      const float got = gathered.data<float>()[row * cols + col];
      if (col >= at && col < at + sizes[(size_t)r])
        EXPECT_EQ(got, mine.data<float>()[row * sizes[(size_t)r] + col - at]);
      else
        EXPECT_TRUE(one_of(got, per_hop_sums(n, row * cols + col, 1.0 / n))) << "row " << row << " col " << col;
    }

  // 2 bytes an element, typed (the simulator prices them as they are)
  std::vector<std::pair<std::string, double>> want = {{"all_reduce", 2.0 * rows * cols},
                                                      {"all_reduce", 2.0 * rows * cols},
                                                      {"reduce_scatter", 2.0 * rows * cols},
                                                      {"all_gather", 2.0 * rows * cols}};
  size_t k = 0;
  for (const CostEvent& e : trace.events())
    if (e.kind == CostEvent::Kind::CommStart) {
      ASSERT_LT(k, want.size());
      EXPECT_EQ(std::string(e.op), want[k].first);
      EXPECT_EQ(e.bytes, want[k].second) << e.op;
      EXPECT_TRUE(e.typed) << e.op;
      ++k;
    }
  EXPECT_EQ(k, want.size());

  // bits reduce as bits (sum only); max on the wire and averaged bits are refused, naming the collective
  Tensor bits = empty({1}, DType::BF16);
  *static_cast<uint16_t*>(bits.raw_data()) = float_to_bf16_bits(rb(input(r, 0)));
  Tensor bsum = g.all_reduce(bits);
  ASSERT_EQ(bsum.dtype(), DType::BF16);
  EXPECT_TRUE(one_of(bf16_bits_to_float(*static_cast<const uint16_t*>(bsum.raw_data())), per_hop_sums(n, 0)));
  const std::string e1 = what_of([&] { g.all_reduce(x, comms::ReduceOp::Max, DType::BF16); });
  EXPECT_NE(e1.find("all_reduce: max on a bf16 wire"), std::string::npos) << e1;
  const std::string e2 = what_of([&] { g.all_reduce(bits, comms::ReduceOp::Avg); });
  EXPECT_NE(e2.find("all_reduce: avg of bf16 bits"), std::string::npos) << e2;
}

// Point-to-point (a pipeline's hidden states, context parallel's ring) and all-to-all (the expert dispatch) on the
// bf16 wire: the values arrive rounded to bf16, at 2 bytes an element, typed.
TEST(Bf16Wire, PointToPointAndAllToAllMoveRoundedValues) {
  comms::DeviceMesh mesh(comms::MeshDegrees{});
  comms::ProcessGroup& g = *mesh.world_pg;
  const int n = g.size(), r = g.rank();
  const int64_t cols = 5;
  std::vector<float> v((size_t)(n * cols));
  for (int64_t i = 0; i < n * cols; ++i) v[(size_t)i] = input(r, i);
  Tensor x = from_vector<float>(v, {n, cols});  // row q goes to rank q
  CostTrace trace;
  std::vector<int64_t> got;
  Tensor rows = g.all_to_all_v(x, std::vector<int64_t>(n, 1), &got, {}, DType::BF16);  // row q from rank q
  ASSERT_EQ(rows.dtype(), DType::F32);
  ASSERT_EQ(rows.shape(), (Shape{n, cols}));
  for (int q = 0; q < n; ++q)
    for (int64_t j = 0; j < cols; ++j)
      EXPECT_EQ(rows.data<float>()[q * cols + j], rb(input(q, r * cols + j))) << "from rank " << q;
  // a ring: each rank sends its row to the next and receives the previous rank's
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  comms::Work s = g.isend(slice(x, 0, 0, 1), next, 7, DType::BF16);
  auto [in, w] = g.irecv({1, cols}, DType::F32, prev, 7, DType::BF16);
  w.wait();
  s.wait();
  ASSERT_EQ(in.dtype(), DType::F32);
  for (int64_t j = 0; j < cols; ++j) EXPECT_EQ(in.data<float>()[j], rb(input(prev, j)));
  int rows_moved = 0;
  for (const CostEvent& e : trace.events())
    if (e.kind == CostEvent::Kind::CommStart && std::string(e.op) == "all_to_all" && e.bytes > 8.0 * n) {
      EXPECT_TRUE(e.typed);
      EXPECT_EQ(e.bytes, 2.0 * n * cols);
      ++rows_moved;
    }
  EXPECT_EQ(rows_moved, 1);
  const std::string e = what_of([&] { g.irecv({1}, DType::I64, prev, 8, DType::BF16); });
  EXPECT_NE(e.find("irecv: a int64 tensor on a bfloat16 wire"), std::string::npos) << e;
}

// training.mixed_precision_reduce bfloat16: FSDP's reduce-scatters move each gradient at 2 bytes (typed), half the
// float32 reduction's bytes (the parity row bf16_reduce_fsdp2 holds the values: bf16, near one rank's).
TEST(FsdpMixedPrecision, Bf16ReductionMovesHalfTheBytes) {
  comms::DeviceMesh mesh(mesh_degrees(job_config("bfloat16")));
  std::vector<double> bytes[2];
  for (int bf16 = 0; bf16 < 2; ++bf16) {
    JobConfig c = job_config("bfloat16");
    if (bf16) c.training.mixed_precision_reduce = JobConfig::Training::Precision::bfloat16;
    TrainJob job = build_job(c, mesh);
    auto next = batches();
    CostTrace trace;
    train_step(job, next, 1e-3);
    for (const CostEvent& e : trace.events())
      if (e.kind == CostEvent::Kind::CommStart && std::string(e.op) == "reduce_scatter") {
        bytes[bf16].push_back(e.bytes);
        EXPECT_EQ(e.typed, bf16 == 1) << "reduce-scatter " << bytes[bf16].size();
      }
  }
  ASSERT_EQ(bytes[0].size(), bytes[1].size());
  ASSERT_GT(bytes[0].size(), 0u);
  for (size_t i = 0; i < bytes[0].size(); ++i) EXPECT_EQ(bytes[1][i] * 2, bytes[0][i]) << "reduce-scatter " << i;
}

int main(int argc, char** argv) { return titan::testing::run_mpi_tests(argc, argv); }
