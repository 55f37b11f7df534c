// Flex attention: every variant against a dense naive reference (forward) and
// finite differences in double (q, k, v, sinks and captured tensors), over
// tile sizes that do and do not divide the sequence; block-mask
// classification against the predicate; determinism across thread counts;
// meta FLOPs over the visible tiles; errors.
#include <gtest/gtest.h>
#include <omp.h>

#include <array>
#include <cmath>
#include <functional>

#include "src/checkpoint/h5.h"
#include "src/nn/attention_variants.h"
#include "src/ops/flex_attention.h"
#include "src/tensor/cost.h"
#include "tests/gradcheck.h"

namespace titan {
namespace {
using testing::expect_near_vec;
using testing::gradcheck;
using testing::rand_t;

using RefScore = std::function<double(double s, int64_t b, int64_t h, int64_t q, int64_t kv)>;

// Dense attention in double with the score and mask as plain functions: [B, Sq, Hq, Dv] (v [B, Skv, Hkv, Dv]).
std::vector<double> naive(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& sinks, const RefScore& mod,
                          const MaskMod& mask) {
  const int64_t B = q.size(0), Sq = q.size(1), Hq = q.size(2), D = q.size(3), Skv = k.size(1), Hkv = k.size(2);
  const int64_t Dv = v.size(3);
  auto qv = q.to_vector<double>(), kv = k.to_vector<double>(), vv = v.to_vector<double>();
  auto sk = sinks.defined() ? sinks.to_vector<double>() : std::vector<double>();
  std::vector<double> out((size_t)(B * Sq * Hq * Dv), 0);
  const double scale = 1 / std::sqrt((double)D);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < Hq; ++h) {
      const int64_t g = h / (Hq / Hkv);
      for (int64_t i = 0; i < Sq; ++i) {
        std::vector<double> sc(Skv, -INFINITY);
        double m = sk.empty() ? -INFINITY : sk[h];
        for (int64_t j = 0; j < Skv; ++j) {
          if (mask.defined() && !mask(b, h, i, j)) continue;
          double d = 0;
          for (int64_t c = 0; c < D; ++c) d += qv[((b * Sq + i) * Hq + h) * D + c] * kv[((b * Skv + j) * Hkv + g) * D + c];
          sc[j] = mod ? mod(d * scale, b, h, i, j) : d * scale;
          m = std::max(m, sc[j]);
        }
        if (m == -INFINITY) continue;  // sees nothing: 0
        double z = sk.empty() ? 0 : std::exp(sk[h] - m);
        for (int64_t j = 0; j < Skv; ++j) z += std::exp(sc[j] - m);
        for (int64_t j = 0; j < Skv; ++j) {
          const double p = std::exp(sc[j] - m) / z;
          for (int64_t c = 0; c < Dv; ++c)
            out[((b * Sq + i) * Hq + h) * Dv + c] += p * vv[((b * Skv + j) * Hkv + g) * Dv + c];
        }
      }
    }
  return out;
}

// One variant: how to build the op's options from (possibly perturbed)
// captured tensors, and the reference's score function from their values.
struct Variant {
  std::string name;
  std::vector<Tensor> captures;  // float64, trained in the gradcheck
  bool sinks = false;
  std::function<MaskMod()> mask;
  std::function<ScoreMod(const std::vector<Tensor>&)> score;
  std::function<RefScore(const std::vector<Tensor>&)> ref;
};

constexpr int64_t B = 2, S = 13, Hq = 4, Hkv = 2, D = 3;

std::vector<int64_t> doc_ids_of(std::vector<int64_t> starts_row0, std::vector<int64_t> starts_row1) {
  std::vector<int64_t> ids(B * S, 0);
  for (int r = 0; r < 2; ++r) {
    auto& st = r == 0 ? starts_row0 : starts_row1;
    for (int64_t i = 0, d = 0; i < S; ++i) {
      if (std::find(st.begin(), st.end(), i) != st.end() && i > 0) ++d;
      ids[r * S + i] = d;
    }
  }
  return ids;
}

std::vector<Variant> variants() {
  std::vector<Variant> vs;
  auto none = [](const std::vector<Tensor>&) { return ScoreMod(); };
  auto ident = [](const std::vector<Tensor>&) { return RefScore(); };
  vs.push_back({"noop", {}, false, [] { return MaskMod(); }, none, ident});
  vs.push_back({"causal", {}, false, [] { return causal_mask(); }, none, ident});
  vs.push_back({"sliding_window", {}, false, [] { return sliding_window_mask(4); }, none, ident});
  vs.push_back({"prefix_lm", {}, false, [] { return prefix_lm_mask(5); }, none, ident});
  vs.push_back({"chunked", {}, false, [] { return chunked_causal_mask(5); }, none, ident});
  static const std::vector<int64_t> docs = doc_ids_of({0, 4, 9}, {0, 1, 7, 12});
  vs.push_back({"document", {}, false, [] { return document_causal_mask(from_vector<int64_t>(docs, {B, S})); }, none,
                ident});
  vs.push_back({"alibi", {rand_t({Hq}, 21, DType::F64, 0.1, 0.9)}, false, [] { return causal_mask(); },
                [](const std::vector<Tensor>& c) { return nn::alibi_mod(c[0]); },
                [](const std::vector<Tensor>& c) -> RefScore {
                  auto sl = c[0].to_vector<double>();
                  return [sl](double s, int64_t, int64_t h, int64_t q, int64_t kv) { return s + sl[h] * (kv - q); };
                }});
  const int64_t R = 4;  // distances clipped to [-3, 3]: the noop mask reaches both ends
  vs.push_back({"relative", {rand_t({Hq, 2 * R - 1}, 22)}, false, [] { return MaskMod(); },
                [R](const std::vector<Tensor>& c) { return nn::relative_bias_mod(c[0], R); },
                [R](const std::vector<Tensor>& c) -> RefScore {
                  auto t = c[0].to_vector<double>();
                  return [t, R](double s, int64_t, int64_t h, int64_t q, int64_t kv) {
                    return s + t[h * (2 * R - 1) + std::clamp<int64_t>(q - kv, -(R - 1), R - 1) + R - 1];
                  };
                }});
  vs.push_back({"softcap", {}, false, [] { return causal_mask(); },
                [](const std::vector<Tensor>&) { return nn::softcap_mod(0.7); },
                [](const std::vector<Tensor>&) -> RefScore {
                  return [](double s, int64_t, int64_t, int64_t, int64_t) { return 0.7 * std::tanh(s / 0.7); };
                }});
  vs.push_back({"head_bias", {rand_t({Hq}, 23)}, false, [] { return causal_mask(); },
                [](const std::vector<Tensor>& c) {
                  return ScoreMod("head_bias", {c[0]}, [](auto s, const auto& cap, ScoreIndex i) { return s + cap(0, i.h); });
                },
                [](const std::vector<Tensor>& c) -> RefScore {
                  auto hb = c[0].to_vector<double>();
                  return [hb](double s, int64_t, int64_t h, int64_t, int64_t) { return s + hb[h]; };
                }});
  vs.push_back({"sinks", {}, true, [] { return sliding_window_mask(3); }, none, ident});
  // written only here: a learned per-head gate on a distance decay, squashed,
  // with a per-batch-row temperature (two captures, products, division, exp)
  vs.push_back({"user_decay", {rand_t({Hq}, 24, DType::F64, 0.2, 1.0), rand_t({B}, 25, DType::F64, 0.5, 2.0)}, false,
                [] {
                  return MaskMod("odd_rows_see_even_keys",
                                 [](int64_t b, int64_t, int64_t q, int64_t kv) { return kv <= q && ((q + b) % 2 == 0 || kv % 2 == 0); },
                                 true, false);
                },
                [](const std::vector<Tensor>& c) {
                  return ScoreMod("user_decay", {c[0], c[1]}, [](auto s, const auto& cap, ScoreIndex i) {
                    auto gate = flex::sigmoid(cap(0, i.h) * 3.0);
                    return s / cap(1, i.b) - gate * flex::log(1.0 + double(i.q - i.kv));
                  });
                },
                [](const std::vector<Tensor>& c) -> RefScore {
                  auto g = c[0].to_vector<double>(), t = c[1].to_vector<double>();
                  return [g, t](double s, int64_t b, int64_t h, int64_t q, int64_t kv) {
                    return s / t[b] - 1 / (1 + std::exp(-3 * g[h])) * std::log(1.0 + double(q - kv));
                  };
                }});
  return vs;
}

Tensor run(const Variant& v, const std::vector<Tensor>& t, int64_t qb, int64_t kb) {
  FlexOptions o;
  o.mask_mod = v.mask();
  const size_t nc = v.captures.size();
  o.score_mod = v.score(std::vector<Tensor>(t.end() - nc, t.end()));
  if (v.sinks) o.sinks = t[3];
  o.block_mask = create_block_mask(o.mask_mod, t[0].size(0), t[0].size(2), t[0].size(1), t[1].size(1), qb, kb);
  return flex_attention(t[0], t[1], t[2], o);
}

// Every variant on q, k, v (v may be narrower or wider than q and k): the forward at each tiling against the
// naive reference, then gradchecks of the fused backward and, on one batch row (fewer than 4 (batch, KV head)
// tasks, without a score_mod), of the split one.
void check_variants(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& sinks,
                    std::initializer_list<std::pair<int64_t, int64_t>> tilings, const std::string& label) {
  for (const Variant& var : variants()) {
    std::vector<Tensor> in = {q, k, v};
    if (var.sinks) in.push_back(sinks);
    for (const Tensor& c : var.captures) in.push_back(c);
    const auto ref = naive(q, k, v, var.sinks ? sinks : Tensor(), var.ref(var.captures), var.mask());
    for (auto [qb, kb] : tilings) {
      SCOPED_TRACE(var.name + label + " tiles " + std::to_string(qb) + "x" + std::to_string(kb));
      Tensor y = run(var, in, qb, kb);
      EXPECT_EQ(y.shape(), (Shape{q.size(0), q.size(1), q.size(2), v.size(3)}));
      expect_near_vec(y.to_vector<double>(), ref, 1e-13);
    }
    SCOPED_TRACE(var.name + label + " gradcheck");
    gradcheck([&](const std::vector<Tensor>& t) { return run(var, t, 4, 3); }, in);
    std::vector<Tensor> row = in;
    for (int i = 0; i < 3; ++i) row[i] = in[i].slice(0, 0, 1).contiguous();
    gradcheck([&](const std::vector<Tensor>& t) { return run(var, t, 4, 3); }, row);
  }
}

TEST(FlexAttention, VariantsForwardAndGradcheck) {
  check_variants(rand_t({B, S, Hq, D}, 1), rand_t({B, S, Hkv, D}, 2), rand_t({B, S, Hkv, D}, 3), rand_t({Hq}, 4),
                 {{128, 128}, {4, 4}, {5, 3}, {1, 13}}, "");
}

// Multi-head latent attention's shape: v (and the output) narrower or wider than q and k. Every variant, every
// tiling, both backward schedules.
TEST(FlexAttention, ValueWidthDiffersFromQueryKeyWidth) {
  for (int64_t Dv : {5, 2})
    check_variants(rand_t({B, S, Hq, D}, 31), rand_t({B, S, Hkv, D}, 32), rand_t({B, S, Hkv, Dv}, 33), rand_t({Hq}, 34),
                   {{128, 128}, {5, 3}}, " Dv " + std::to_string(Dv));
  // the FLOPs: q.k over D, p.v over Dv (forward 2 D + 2 Dv per pair, backward 6 D + 4 Dv)
  Tensor mq = empty({1, 256, 2, 192}, DType::F32, Device::Meta), mk = empty({1, 256, 2, 192}, DType::F32, Device::Meta);
  Tensor mv = empty({1, 256, 2, 128}, DType::F32, Device::Meta);
  CostScope cs;
  Tensor y = flex_attention(mq, mk, mv, FlexOptions());
  EXPECT_EQ(y.shape(), (Shape{1, 256, 2, 128}));
  EXPECT_DOUBLE_EQ(cs.flops(), 256.0 * 256 * 2 * (2.0 * 192 + 2.0 * 128 + 5.0));
  // v must agree with k on everything but its width
  Tensor q = rand_t({B, S, Hq, D}, 31), k = rand_t({B, S, Hkv, D}, 32);
  EXPECT_THROW(flex_attention(q, k, rand_t({B, S, Hkv + 1, 5}, 35), FlexOptions()), Error);
  EXPECT_THROW(flex_attention(q, k, rand_t({B, S + 1, Hkv, 5}, 36), FlexOptions()), Error);
}

TEST(FlexAttention, GqaMqaAndCrossLengths) {
  // MQA (one KV head) and Sq != Skv (causal is top-left aligned, as PyTorch's)
  Tensor q = rand_t({1, 7, 4, 5}, 5), k = rand_t({1, 11, 1, 5}, 6), v = rand_t({1, 11, 1, 5}, 7);
  FlexOptions o;
  o.mask_mod = causal_mask();
  o.block_mask = create_block_mask(o.mask_mod, 1, 4, 7, 11, 3, 4);
  expect_near_vec(flex_attention(q, k, v, o).to_vector<double>(), naive(q, k, v, Tensor(), {}, o.mask_mod), 1e-13);
  gradcheck([&](const std::vector<Tensor>& t) { return flex_attention(t[0], t[1], t[2], o); }, {q, k, v});
}

TEST(FlexAttention, RowsThatSeeNothingGiveZero) {
  Tensor q = rand_t({1, 6, 2, 4}, 8), k = rand_t({1, 6, 2, 4}, 9), v = rand_t({1, 6, 2, 4}, 10);
  FlexOptions o;  // rows 0..2 see nothing
  o.mask_mod = MaskMod("late", [](int64_t, int64_t, int64_t q, int64_t kv) { return q >= 3 && kv <= q; }, false, false);
  o.block_mask = create_block_mask(o.mask_mod, 1, 2, 6, 6, 2, 2);
  auto y = flex_attention(q, k, v, o).to_vector<double>();
  expect_near_vec(y, naive(q, k, v, Tensor(), {}, o.mask_mod), 1e-13);
  for (int i = 0; i < 3 * 2 * 4; ++i) EXPECT_EQ(y[i], 0.0);
  gradcheck([&](const std::vector<Tensor>& t) { return flex_attention(t[0], t[1], t[2], o); }, {q, k, v});
}

TEST(FlexAttention, ScaledDotProductAttentionIsAClient) {
  // the model-facing op equals flex attention with the matching mask, bit for bit
  Tensor q = rand_t({2, 200, 4, 8}, 11, DType::F32), k = rand_t({2, 200, 2, 8}, 12, DType::F32);
  Tensor v = rand_t({2, 200, 2, 8}, 13, DType::F32), sinks = rand_t({4}, 14, DType::F32);
  AttentionOptions a;
  a.window = 37;
  FlexOptions f;
  f.mask_mod = sliding_window_mask(37);
  f.sinks = sinks;
  EXPECT_EQ(scaled_dot_product_attention(q, k, v, sinks, a).to_vector<float>(),
            flex_attention(q, k, v, f).to_vector<float>());
}

TEST(FlexAttention, BlockMaskClassifiersMatchThePredicate) {
  // the O(1)-per-tile classifiers of the built-in masks against the predicate on every element
  static const std::vector<int64_t> docs = doc_ids_of({0, 4, 9}, {0, 1, 7, 12});
  std::vector<MaskMod> masks = {causal_mask(), sliding_window_mask(1), sliding_window_mask(5), prefix_lm_mask(6),
                                chunked_causal_mask(1), chunked_causal_mask(3), chunked_causal_mask(4),
                                chunked_causal_mask(64), document_causal_mask(from_vector<int64_t>(docs, {B, S})),
                                and_masks(document_causal_mask(from_vector<int64_t>(docs, {B, S})), sliding_window_mask(3))};
  for (const MaskMod& m : masks)
    for (auto [qb, kb] : {std::pair<int64_t, int64_t>{1, 1}, {2, 3}, {4, 4}, {5, 2}, {13, 13}}) {
      BlockMask bm = create_block_mask(m, B, Hq, S, S, qb, kb);
      for (int64_t b = 0; b < B; ++b)
        for (int64_t qi = 0; qi < bm.nq(); ++qi)
          for (int64_t ki = 0; ki < bm.nkv(); ++ki) {
            int n = 0, tot = 0;
            for (int64_t i = qi * qb; i < std::min(S, (qi + 1) * qb); ++i)
              for (int64_t j = ki * kb; j < std::min(S, (ki + 1) * kb); ++j, ++tot) n += m(b, 0, i, j);
            const BlockKind want = n == 0 ? BlockKind::Empty : n == tot ? BlockKind::Full : BlockKind::Partial;
            EXPECT_EQ((int)bm.at(b, 0, qi, ki), (int)want) << m.name() << " tiles " << qb << "x" << kb << " b " << b
                                                           << " tile " << qi << "," << ki;
          }
    }
}

// FlexOptions::q_offset / kv_offset (context parallel's chunks): a block of queries and keys sees its masks
// and score_mods at global positions — block masks against the predicate there, the rows of a query block
// equal the whole attention's rows, and the block-level backward, given the whole attention's output and
// log-sum-exp, summed over key blocks equals the whole attention's gradients.
TEST(FlexAttention, OffsetsPlaceABlockAtItsGlobalPositions) {
  static const std::vector<int64_t> docs = doc_ids_of({0, 4, 9}, {0, 1, 7, 12});
  const Tensor doc_t = from_vector<int64_t>(docs, {B, S});
  std::vector<MaskMod> masks = {causal_mask(), sliding_window_mask(3), prefix_lm_mask(6), chunked_causal_mask(5),
                                document_causal_mask(doc_t),
                                and_masks(document_causal_mask(doc_t), sliding_window_mask(4))};
  for (const MaskMod& m : masks)
    for (auto [q0, k0, nq, nk] : {std::array<int64_t, 4>{0, 0, S, S}, {5, 0, 8, 5}, {7, 2, 4, 9}, {0, 9, 4, 4}, {9, 0, 4, 4}}) {
      BlockMask bm = create_block_mask(m, B, Hq, nq, nk, 2, 3, q0, k0);
      for (int64_t b = 0; b < B; ++b)
        for (int64_t qi = 0; qi < bm.nq(); ++qi)
          for (int64_t ki = 0; ki < bm.nkv(); ++ki) {
            int n = 0, tot = 0;
            for (int64_t i = qi * 2; i < std::min(nq, (qi + 1) * 2); ++i)
              for (int64_t j = ki * 3; j < std::min(nk, (ki + 1) * 3); ++j, ++tot) n += m(b, 0, q0 + i, k0 + j);
            const BlockKind want = n == 0 ? BlockKind::Empty : n == tot ? BlockKind::Full : BlockKind::Partial;
            EXPECT_EQ((int)bm.at(b, 0, qi, ki), (int)want) << m.name() << " block at (" << q0 << ", " << k0 << ")";
          }
    }
  Tensor q = rand_t({B, S, Hq, D}, 1), k = rand_t({B, S, Hkv, D}, 2), v = rand_t({B, S, Hkv, D}, 3);
  Tensor dout = rand_t({B, S, Hq, D}, 4), slopes = rand_t({Hq}, 5), sinks = rand_t({Hq}, 6);
  for (const MaskMod& m : masks) {
    SCOPED_TRACE(m.name());
    FlexOptions whole{.score_mod = nn::alibi_mod(slopes), .mask_mod = m, .sinks = sinks};
    const flex::BlockOut full = flex::attention_block_forward(q, k, v, whole, false);
    // rows [5, 13) as a query block at offset 5
    FlexOptions part = whole;
    part.q_offset = 5;
    Tensor rows = flex_attention(q.slice(1, 5, S), k, v, part);
    expect_near_vec(rows.contiguous().to_vector<double>(), full.out.slice(1, 5, S).contiguous().to_vector<double>(), 1e-12);
    // the gradients: key blocks [0, 6) and [6, 13), the sinks with the first
    Tensor dq, dsinks, unused;
    std::vector<Tensor> dcaps, none;
    std::vector<double> dk, dv;
    for (auto [k0, k1] : {std::pair<int64_t, int64_t>{0, 6}, {6, S}}) {
      FlexOptions blk = whole;
      blk.kv_offset = k0;
      if (k0 > 0) blk.sinks = Tensor();
      Tensor& ds = k0 == 0 ? dsinks : unused;
      flex::BlockGrads g = flex::attention_block_backward(dout, q, k.slice(1, k0, k1), v.slice(1, k0, k1), blk, full.out,
                                                          full.lse, dq, ds, dcaps, false);
      for (int64_t b = 0; b < B; ++b) {  // rows of batch b, in order
        auto kr = g.dk.slice(0, b, b + 1).contiguous().to_vector<double>();
        auto vr = g.dv.slice(0, b, b + 1).contiguous().to_vector<double>();
        dk.insert(dk.end(), kr.begin(), kr.end());
        dv.insert(dv.end(), vr.begin(), vr.end());
      }
    }
    Tensor qq = q.clone().requires_grad_(true), kk = k.clone().requires_grad_(true), vv = v.clone().requires_grad_(true);
    Tensor ss = sinks.clone().requires_grad_(true), sl = slopes.clone().requires_grad_(true);
    sum(mul(flex_attention(qq, kk, vv, {.score_mod = nn::alibi_mod(sl), .mask_mod = m, .sinks = ss}), dout)).backward();
    expect_near_vec(dq.to_vector<double>(), qq.grad().to_vector<double>(), 1e-11);
    expect_near_vec(dsinks.to_vector<double>(), ss.grad().to_vector<double>(), 1e-11);
    expect_near_vec(dcaps.at(0).to_vector<double>(), sl.grad().to_vector<double>(), 1e-11);
    // dk / dv: the blocks' rows per batch row, reassembled [B, S, Hkv, D]
    std::vector<double> dk_all, dv_all;
    const int64_t row = Hkv * D;
    for (int64_t b = 0; b < B; ++b)
      for (auto [k0, k1, at] : {std::array<int64_t, 3>{0, 6, 0}, {6, S, B * 6 * row}}) {
        const int64_t n = (k1 - k0) * row, from = at + b * n;
        dk_all.insert(dk_all.end(), dk.begin() + from, dk.begin() + from + n);
        dv_all.insert(dv_all.end(), dv.begin() + from, dv.begin() + from + n);
      }
    expect_near_vec(dk_all, kk.grad().to_vector<double>(), 1e-11);
    expect_near_vec(dv_all, vv.grad().to_vector<double>(), 1e-11);
  }
}

TEST(FlexAttention, DeterministicAcrossThreadCounts) {
  Tensor q = rand_t({2, 300, 4, 16}, 15, DType::F32), k = rand_t({2, 300, 2, 16}, 16, DType::F32);
  Tensor v = rand_t({2, 300, 2, 16}, 17, DType::F32), hb = rand_t({4}, 18, DType::F32);
  bool with_mod = true;
  auto once = [&](int threads) {
    const int prev = omp_get_max_threads();
    omp_set_num_threads(threads);
    Tensor qq = q.clone().requires_grad_(true), kk = k.clone().requires_grad_(true), vv = v.clone().requires_grad_(true);
    Tensor bb = hb.clone().requires_grad_(true);
    FlexOptions o;
    o.mask_mod = causal_mask();
    if (with_mod) o.score_mod = nn::alibi_mod(bb);
    Tensor y = flex_attention(qq, kk, vv, o);
    sum(mul(y, y)).backward();
    omp_set_num_threads(prev);
    std::vector<float> all = y.to_vector<float>();
    for (const Tensor* t : {&qq, &kk, &vv})
      for (float x : t->grad().to_vector<float>()) all.push_back(x);
    if (with_mod)
      for (float x : bb.grad().to_vector<float>()) all.push_back(x);
    return all;
  };
  EXPECT_EQ(once(1), once(2));
  EXPECT_EQ(once(2), once(3));
  // MQA at batch 1 (one (batch, KV head) task; the split schedule without the score_mod) is as deterministic
  with_mod = false;
  q = q.slice(0, 0, 1).contiguous();
  k = k.slice(0, 0, 1).slice(2, 0, 1).contiguous();
  v = v.slice(0, 0, 1).slice(2, 0, 1).contiguous();
  EXPECT_EQ(once(1), once(2));
  EXPECT_EQ(once(2), once(3));
}

TEST(FlexAttention, MetaFlopsCountVisibleTiles) {
  // S = 1024 in 128-tiles: causal computes 36 of 64 tiles; a window of 128 the diagonal and the one before it (15 + 8)
  const int64_t Sl = 1024, Dh = 64, H = 2;
  Tensor q = empty({1, Sl, H, Dh}, DType::F32, Device::Meta), k = empty({1, Sl, 1, Dh}, DType::F32, Device::Meta);
  auto flops = [&](MaskMod m) {
    CostScope cs;
    FlexOptions o;
    o.mask_mod = m;
    Tensor y = flex_attention(q, k, k, o);
    EXPECT_TRUE(y.is_meta());
    EXPECT_EQ(y.shape(), q.shape());
    return cs.flops();
  };
  const double tile = 128.0 * 128.0 * H * (4.0 * Dh + 5.0);
  EXPECT_DOUBLE_EQ(flops(MaskMod()), 64 * tile);
  EXPECT_DOUBLE_EQ(flops(causal_mask()), 36 * tile);
  EXPECT_DOUBLE_EQ(flops(sliding_window_mask(128)), 15 * tile);
  EXPECT_DOUBLE_EQ(flops(sliding_window_mask(129)), 15 * tile);  // one more key still in the tile before
  EXPECT_DOUBLE_EQ(flops(sliding_window_mask(130)), 21 * tile);
  // block_causal on meta document ids prices the causal upper bound
  EXPECT_DOUBLE_EQ(flops(document_causal_mask(empty({1, Sl}, DType::I64, Device::Meta))), 36 * tile);
}

TEST(FlexAttention, Errors) {
  Tensor q = rand_t({1, 4, 2, 3}, 1), k = rand_t({1, 4, 2, 3}, 2);
  FlexOptions o;
  o.block_mask = create_block_mask(causal_mask(), 1, 2, 5, 5);
  EXPECT_THROW(flex_attention(q, k, k, o), Error);  // block mask for other sizes
  FlexOptions f;
  f.score_mod = nn::alibi_mod(rand_t({2}, 3, DType::F32));
  EXPECT_THROW(flex_attention(q, k, k, f), Error);  // capture dtype
  FlexOptions r;
  r.score_mod = ScoreMod("oob", {rand_t({2}, 4)}, [](auto s, const auto& c, ScoreIndex i) { return s + c(0, i.q); });
  EXPECT_THROW(flex_attention(q, k, k, r), std::exception);  // captured index out of range
  FlexOptions th;  // an exception inside the parallel tiles reaches the caller
  th.mask_mod = MaskMod("throws", [](int64_t, int64_t, int64_t q, int64_t) -> bool {
    if (q == 3) throw std::runtime_error("boom");
    return true;
  });
  EXPECT_THROW(flex_attention(q, k, k, th), std::runtime_error);
  EXPECT_THROW(flex_attention(q, rand_t({1, 4, 3, 3}, 5), rand_t({1, 4, 3, 3}, 5), FlexOptions()), Error);
  Tensor docs = from_vector<int64_t>({0, 1, 0, 1}, {1, 4});
  EXPECT_THROW(document_causal_mask(docs), Error);  // decreasing document ids
}

// ---- against the dense float64 PyTorch reference (scripts/flex_attention_reference.py) ----
// The same variants written with titan's API; the reference writes its own.
FlexOptions golden_options(const std::string& name, const std::vector<Tensor>& caps, const Tensor& sinks,
                           const Tensor& docs) {
  FlexOptions o;
  o.sinks = sinks;
  const MaskMod causal = causal_mask();
  if (name == "noop") {
  } else if (name == "causal" || name == "alibi" || name == "softcap" || name == "head_bias" || name == "sinks") {
    o.mask_mod = causal;
  } else if (name == "sliding_window") {
    o.mask_mod = sliding_window_mask(8);
  } else if (name == "prefix_lm") {
    o.mask_mod = prefix_lm_mask(10);
  } else if (name == "document") {
    o.mask_mod = document_causal_mask(docs);
  } else if (name == "relative") {
    o.score_mod = nn::relative_bias_mod(caps[0], 8);
  } else if (name == "user_decay") {
    o.mask_mod = MaskMod("odd_rows_see_even_keys", [](int64_t b, int64_t, int64_t q, int64_t kv) {
      return kv <= q && ((q + b) % 2 == 0 || kv % 2 == 0);
    });
    o.score_mod = ScoreMod("user_decay", caps, [](auto s, const auto& cap, ScoreIndex i) {
      return s / cap(1, i.b) - flex::sigmoid(cap(0, i.h) * 3.0) * flex::log(1.0 + double(i.q - i.kv));
    });
  } else if (name == "model_combo") {
    nn::AttentionVariant v;
    v.mask = nn::MaskKind::block_causal;
    v.bias = nn::ScoreBias::alibi;
    v.softcap = 2.0;
    o.mask_mod = nn::layer_mask(v, 12, docs);
    o.score_mod = nn::layer_score_mod(v, caps[0]);
  } else {
    ADD_FAILURE() << "unknown golden variant " << name;
  }
  if (name == "alibi") o.score_mod = nn::alibi_mod(caps[0]);
  if (name == "softcap") o.score_mod = nn::softcap_mod(1.5);
  if (name == "head_bias")
    o.score_mod = ScoreMod("head_bias", caps, [](auto s, const auto& cap, ScoreIndex i) { return s + cap(0, i.h); });
  return o;
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  auto x = a.to_vector<double>(), y = b.to_vector<double>();
  EXPECT_EQ(x.size(), y.size());
  double m = 0;
  for (size_t i = 0; i < x.size() && i < y.size(); ++i) m = std::max(m, std::abs(x[i] - y[i]));
  return m;
}

TEST(FlexAttention, MatchesPyTorchFloat64Reference) {
  h5::File f(std::string(TITAN_SOURCE_DIR) + "/tests/golden/flex_attention.h5", h5::File::Read);
  auto read = [&](const std::string& n) {
    Tensor t = empty(f.shape(n), DType::F64);
    f.read_into(n, t);
    return t;
  };
  Tensor docs = empty(f.shape("doc_ids"), DType::I64);
  f.read_into("doc_ids", docs);
  int variants = 0;
  for (const char* name : {"noop", "causal", "sliding_window", "prefix_lm", "document", "alibi", "relative", "softcap",
                           "head_bias", "sinks", "user_decay", "model_combo"}) {
    const std::string g = std::string(name) + "/";
    ASSERT_TRUE(f.has(g + "out")) << "golden lacks " << name << ": regenerate with scripts/flex_attention_reference.py";
    ++variants;
    for (DType dt : {DType::F32, DType::F64}) {
      for (int64_t tile : {128, 16, 7}) {
        SCOPED_TRACE(std::string(name) + (dt == DType::F32 ? " float32" : " float64") + " tile " + std::to_string(tile));
        std::vector<Tensor> leaves = {read(g + "q").to(dt), read(g + "k").to(dt), read(g + "v").to(dt)};
        Tensor sinks = f.has(g + "sinks") ? read(g + "sinks").to(dt) : Tensor();
        std::vector<Tensor> caps;
        for (int i = 0; f.has(g + "cap" + std::to_string(i)); ++i) caps.push_back(read(g + "cap" + std::to_string(i)).to(dt));
        for (Tensor& t : leaves) t.requires_grad_(true);
        if (sinks.defined()) sinks.requires_grad_(true);
        for (Tensor& c : caps) c.requires_grad_(true);
        FlexOptions o = golden_options(name, caps, sinks, docs);
        o.block_mask = create_block_mask(o.mask_mod, leaves[0].size(0), leaves[0].size(2), leaves[0].size(1),
                                         leaves[1].size(1), tile, tile);
        Tensor out = flex_attention(leaves[0], leaves[1], leaves[2], o);
        sum(mul(out, read(g + "w").to(dt))).backward();
        // float32 against float64: the bars of the issue; float64 against float64: rounding only
        const double to = dt == DType::F32 ? 1e-5 : 1e-12, tg = dt == DType::F32 ? 1e-4 : 1e-11;
        EXPECT_LE(max_abs_diff(out, read(g + "out")), to);
        EXPECT_LE(max_abs_diff(leaves[0].grad(), read(g + "dq")), tg);
        EXPECT_LE(max_abs_diff(leaves[1].grad(), read(g + "dk")), tg);
        EXPECT_LE(max_abs_diff(leaves[2].grad(), read(g + "dv")), tg);
        if (sinks.defined()) {
          EXPECT_LE(max_abs_diff(sinks.grad(), read(g + "dsinks")), tg);
        }
        for (size_t i = 0; i < caps.size(); ++i)
          EXPECT_LE(max_abs_diff(caps[i].grad(), read(g + "dcap" + std::to_string(i))), tg) << "captured tensor " << i;
      }
    }
  }
  EXPECT_EQ(variants, 12);
}

}  // namespace
}  // namespace titan
