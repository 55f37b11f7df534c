// Context-parallel attention under mpirun (2 and 4 ranks): every rank holds its two chunks of each sequence
// (head-tail balance); the attention over the whole sequence, and the gradients w.r.t. q, k, v, the sinks and
// a score_mod's captured tensor, equal one rank's flex attention over the whole sequence (float64, every
// variant: causal, sliding window, documents crossing chunk edges, prefix LM, ALiBi, relative bias +
// softcap, sinks, GQA and MQA), for both K/V exchanges; the two exchanges' forwards agree bit for bit, and
// a rerun gives the same bits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>

#include "comms/device_mesh.h"
#include "tests/mpi_main.h"
#include "parallel/context_parallel.h"
#include "src/nn/attention_variants.h"
#include "src/ops/ops.h"

using namespace titan;

namespace {
int world() { return comms::world_size(); }

// every rank of the world in one cp group
comms::DeviceMesh cp_mesh() {
  comms::MeshDegrees d;
  d.dp_shard = 1;
  d.cp = world();
  return comms::DeviceMesh(d);
}

struct Case {
  std::string name;
  int64_t hkv = 2;
  bool sinks = false;
  // the options over the whole sequence; `cap` is the captured tensor when the variant has one
  std::function<FlexOptions(const Tensor& doc_ids, const Tensor& cap)> options;
  std::function<Tensor()> capture;  // undefined: none
  int64_t dv = 0;                    // v's head width (0: q's and k's; MLA's differs)
};

// [B, S] documents whose boundaries fall inside chunks and on their edges
Tensor document_ids(int64_t B, int64_t S) {
  std::vector<int64_t> d((size_t)(B * S));
  for (int64_t b = 0; b < B; ++b) {
    int64_t doc = 0;
    for (int64_t i = 0; i < S; ++i) {
      if (i > 0 && (i % (11 + 6 * b) == 0 || i == S / 2)) ++doc;
      d[(size_t)(b * S + i)] = doc;
    }
  }
  return from_vector<int64_t>(d, {B, S});
}

// this rank's columns (dim 1) of a global tensor, as the batch sharding takes them
Tensor my_columns(const Tensor& x, const nn::SequenceShard& sh) {
  const int64_t c = x.size(1) / (2 * sh.parts);
  return concat({x.slice(1, sh.chunk(0) * c, (sh.chunk(0) + 1) * c), x.slice(1, sh.chunk(1) * c, (sh.chunk(1) + 1) * c)},
                1)
      .contiguous();
}

double rel(const Tensor& a, const Tensor& b) {
  auto x = a.contiguous().to_vector<double>(), y = b.contiguous().to_vector<double>();
  EXPECT_EQ(x.size(), y.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    num += (x[i] - y[i]) * (x[i] - y[i]);
    den += y[i] * y[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

Tensor all_sum(const comms::PG& g, const Tensor& t) { return g->all_reduce(t.contiguous()); }

struct Grads {
  Tensor out, dq, dk, dv, dsinks, dcap;
};

// One attention with gradients of sum(out * w); `cp` null: one rank over the whole sequence.
Grads attend(const Case& cs, const Tensor& q0, const Tensor& k0, const Tensor& v0, const Tensor& w, const Tensor& sinks0,
           const Tensor& cap0, const Tensor& doc_ids, comms::DeviceMesh* mesh, parallel::RotateMethod method) {
  Tensor q = q0.clone().requires_grad_(true), k = k0.clone().requires_grad_(true), v = v0.clone().requires_grad_(true);
  Tensor sinks = sinks0.defined() ? sinks0.clone().requires_grad_(true) : Tensor();
  Tensor cap = cap0.defined() ? cap0.clone().requires_grad_(true) : Tensor();
  FlexOptions opt = cs.options(doc_ids, cap);
  opt.sinks = sinks;
  Tensor out;
  if (!mesh) {
    out = flex_attention(q, k, v, opt);
  } else {
    const nn::SequenceShard sh{mesh->cp->size(), mesh->cp->rank(), nullptr};
    out = parallel::context_parallel_attention(q, k, v, opt, sh, mesh->cp, mesh->cp_p2p, method);
  }
  sum(mul(out, w)).backward();
  return {out.detach(), q.grad(), k.grad(), v.grad(), sinks.defined() ? sinks.grad() : Tensor(),
          cap.defined() ? cap.grad() : Tensor()};
}

std::vector<Case> cases() {
  std::vector<Case> v;
  v.push_back({"causal", 2, false, [](const Tensor&, const Tensor&) { return FlexOptions{.mask_mod = causal_mask()}; }});
  v.push_back({"sliding_window_mqa", 1, false,
               [](const Tensor&, const Tensor&) { return FlexOptions{.mask_mod = sliding_window_mask(13)}; }});
  v.push_back({"documents", 2, false, [](const Tensor& d, const Tensor&) {
                 return FlexOptions{.mask_mod = document_causal_mask(d)};
               }});
  v.push_back({"documents_sliding", 2, false, [](const Tensor& d, const Tensor&) {
                 return FlexOptions{.mask_mod = and_masks(document_causal_mask(d), sliding_window_mask(9))};
               }});
  v.push_back({"prefix_lm", 2, false, [](const Tensor&, const Tensor&) { return FlexOptions{.mask_mod = prefix_lm_mask(21)}; }});
  v.push_back({"documents_chunked", 2, false, [](const Tensor& d, const Tensor&) {
                 return FlexOptions{.mask_mod = and_masks(document_causal_mask(d), chunked_causal_mask(11))};
               }});
  v.push_back({"alibi", 2, false,
               [](const Tensor&, const Tensor& slopes) {
                 return FlexOptions{.score_mod = nn::alibi_mod(slopes), .mask_mod = causal_mask()};
               },
               [] { return nn::alibi_slopes(4).to(DType::F64); }});
  v.push_back({"relative_softcap", 2, false,
               [](const Tensor&, const Tensor& table) {
                 return FlexOptions{.score_mod = ScoreMod("relative+softcap", {table}, [](auto s, const auto& c, ScoreIndex i) {
                                      const int64_t R = 8;
                                      return 5.0 * flex::tanh((s + c(0, i.h, std::clamp<int64_t>(i.q - i.kv, -(R - 1), R - 1) + R - 1)) / 5.0);
                                    }),
                                    .mask_mod = causal_mask()};
               },
               [] {
                 Generator g(7);
                 return randn({4, 15}, g, DType::F64, 0.5);
               }});
  v.push_back({"sinks_sliding", 2, true,
               [](const Tensor&, const Tensor&) { return FlexOptions{.mask_mod = sliding_window_mask(17)}; }});
  v.push_back({"sinks_causal_mqa", 1, true, [](const Tensor&, const Tensor&) { return FlexOptions{.mask_mod = causal_mask()}; }});
  v.push_back({"mla_widths_documents", 4, false,
               [](const Tensor& d, const Tensor&) { return FlexOptions{.mask_mod = document_causal_mask(d)}; }, {}, 5});
  return v;
}

TEST(ContextParallelAttention, EveryVariantEqualsOneRankForBothExchanges) {
  const int n = world();
  comms::DeviceMesh mesh = cp_mesh();
  const nn::SequenceShard sh{n, mesh.cp->rank(), nullptr};
  // chunks of 24: tiles, documents and windows cross their edges; two batch rows, 4 query heads
  const int64_t B = 2, S = 2 * n * 24, Hq = 4, D = 8;
  const Tensor docs = document_ids(B, S);
  for (const Case& cs : cases()) {
    Generator g(11);  // the same data on every rank
    Tensor q = randn({B, S, Hq, D}, g, DType::F64), k = randn({B, S, cs.hkv, D}, g, DType::F64);
    const int64_t Dv = cs.dv > 0 ? cs.dv : D;
    Tensor v = randn({B, S, cs.hkv, Dv}, g, DType::F64), w = randn({B, S, Hq, Dv}, g, DType::F64);
    Tensor sinks = cs.sinks ? randn({Hq}, g, DType::F64) : Tensor();
    Tensor cap = cs.capture ? cs.capture() : Tensor();
    const Grads ref = attend(cs, q, k, v, w, sinks, cap, docs, nullptr, parallel::RotateMethod::AllGather);
    Tensor first_out;
    for (auto method : {parallel::RotateMethod::AllGather, parallel::RotateMethod::AllToAll}) {
      const char* mname = method == parallel::RotateMethod::AllGather ? "allgather" : "alltoall";
      SCOPED_TRACE(cs.name + " / " + mname + " / cp " + std::to_string(n));
      const Grads got = attend(cs, my_columns(q, sh), my_columns(k, sh), my_columns(v, sh), my_columns(w, sh), sinks, cap,
                             docs, &mesh, method);
      EXPECT_LT(rel(got.out, my_columns(ref.out, sh)), 1e-12);
      EXPECT_LT(rel(got.dq, my_columns(ref.dq, sh)), 1e-11);
      EXPECT_LT(rel(got.dk, my_columns(ref.dk, sh)), 1e-11);
      EXPECT_LT(rel(got.dv, my_columns(ref.dv, sh)), 1e-11);
      if (cs.sinks) EXPECT_LT(rel(all_sum(mesh.cp, got.dsinks), ref.dsinks), 1e-11);  // each rank its rows' share
      if (cs.capture) EXPECT_LT(rel(all_sum(mesh.cp, got.dcap), ref.dcap), 1e-11);
      // the exchanges merge the same blocks in the same order: the same forward bits
      if (!first_out.defined()) first_out = got.out;
      else EXPECT_EQ(first_out.to_vector<double>(), got.out.to_vector<double>());
      // deterministic: a rerun gives the same bits, gradients included
      const Grads again = attend(cs, my_columns(q, sh), my_columns(k, sh), my_columns(v, sh), my_columns(w, sh), sinks,
                               cap, docs, &mesh, method);
      EXPECT_EQ(again.dq.to_vector<double>(), got.dq.to_vector<double>());
      EXPECT_EQ(again.dk.to_vector<double>(), got.dk.to_vector<double>());
      EXPECT_EQ(again.dv.to_vector<double>(), got.dv.to_vector<double>());
    }
  }
}

// A causal rank skips the blocks its mask leaves empty, and the balance gives every rank the same work: the
// attention FLOPs recorded on each rank are equal, and about half of the full S x S (plus the diagonal).
TEST(ContextParallelAttention, HeadTailBalanceGivesEveryRankTheSameCausalWork) {
  const int n = world();
  comms::DeviceMesh mesh = cp_mesh();
  const nn::SequenceShard sh{n, mesh.cp->rank(), nullptr};
  const int64_t B = 1, S = 2 * n * 256, H = 2, D = 16;
  Generator g(3);
  Tensor q = randn({B, S / n, H, D}, g), k = randn({B, S / n, H, D}, g), v = randn({B, S / n, H, D}, g);
  CostScope cs;
  parallel::context_parallel_attention(q, k, v, FlexOptions{.mask_mod = causal_mask()}, sh, mesh.cp, mesh.cp_p2p,
                                       parallel::RotateMethod::AllGather);
  double flops = 0;
  for (const auto& [name, c] : cs.by_op())
    if (name == "flex_attention") flops += c.flops;
  std::vector<double> all = mesh.cp->all_gather(from_vector<double>({flops}, {1})).to_vector<double>();
  for (double f : all) EXPECT_DOUBLE_EQ(f, all[0]);
  // one rank's share of the causal pairs (tiles of 128 on chunks of 256: the diagonal tiles are whole)
  const double pairs = flops / (4.0 * D + 5.0) / H;
  const double causal_tiles = (S / 128.0) * (S / 128.0 + 1) / 2 * 128.0 * 128.0;
  EXPECT_NEAR(pairs * n, causal_tiles, 1e-6 * causal_tiles);
}

TEST(ContextParallelAttention, RefusesABlockMaskAndAnOddChunk) {
  const int n = world();
  comms::DeviceMesh mesh = cp_mesh();
  const nn::SequenceShard sh{n, mesh.cp->rank(), nullptr};
  Generator g(3);
  Tensor q = randn({1, 8, 2, 4}, g);
  FlexOptions opt{.mask_mod = causal_mask()};
  opt.block_mask = create_block_mask(opt.mask_mod, 1, 2, 8, 8);
  try {
    parallel::context_parallel_attention(q, q, q, opt, sh, mesh.cp, mesh.cp_p2p, parallel::RotateMethod::AllGather);
    ADD_FAILURE() << "a block mask was accepted";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("builds the block masks of its chunks"), std::string::npos) << e.what();
  }
  Tensor odd = randn({1, 7, 2, 4}, g);
  try {
    parallel::context_parallel_attention(odd, odd, odd, FlexOptions{.mask_mod = causal_mask()}, sh, mesh.cp,
                                         mesh.cp_p2p, parallel::RotateMethod::AllGather);
    ADD_FAILURE() << "7 tokens were accepted";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("two equal chunks"), std::string::npos) << e.what();
  }
}
}  // namespace

int main(int argc, char** argv) { return titan::testing::run_mpi_tests(argc, argv); }
