// Collectives against references computed locally, on any number of ranks
// (ctest runs this under mpirun with 2, 3 and 4 ranks), including uneven
// splits; the differentiable collectives pass an adjoint test:
//   sum_ranks <A(x), y> == sum_ranks <x, A^T(y)>   with A^T from backward().
#include <gtest/gtest.h>

#include <cstring>

#include <mpi.h>

#include <cmath>
#include <functional>
#include <limits>
#include <optional>
#include <set>

#include "comms/collective_matmul.h"
#include "comms/device_mesh.h"
#include "comms/hosts.h"
#include "comms/link_probe.h"
#include "comms/functional.h"
#include "comms/moe_dispatch.h"
#include "tests/gradcheck.h"
#include "src/ops/autocast.h"
#include "src/ops/float8.h"
#include "src/ops/ops.h"
#include "src/tensor/bfloat16.h"

using namespace titan;
using namespace titan::comms;

namespace {
PG world() {
  static PG pg = std::make_shared<ProcessGroup>(MPI_COMM_WORLD, "world");
  return pg;
}
// x_r[i] = 100 r + i : every rank can compute every other rank's tensor
Tensor of_rank(int r, const Shape& s, DType t = DType::F64) {
  Tensor x = empty(s, t);
  std::vector<double> v(x.numel());
  for (size_t i = 0; i < v.size(); ++i) v[i] = 100.0 * r + (double)i;
  copy_(x, from_vector<double>(v, s));
  return x;
}
// ||a - b|| / ||b||
double rel_err(const Tensor& a, const Tensor& b) {
  const auto u = a.to_vector<double>(), v = b.to_vector<double>();
  double num = 0, den = 0;
  for (size_t i = 0; i < u.size(); ++i) num += (u[i] - v[i]) * (u[i] - v[i]), den += v[i] * v[i];
  return std::sqrt(num / std::max(den, 1e-300));
}
// A float8 linear's tensor-parallel cut over pg (colwise: its output features; rowwise: its input features)
std::shared_ptr<Fp8TensorParallel> fp8_cut(const PG& pg, bool out) {
  auto t = std::make_shared<Fp8TensorParallel>();
  t->out_sharded = out;
  t->in_sharded = !out;
  t->reduce_max = [pg](std::vector<float>& a) {
    a = pg->all_reduce(from_vector<float>(a, {(int64_t)a.size()}), ReduceOp::Max).to_vector<float>();
  };
  return t;
}
}  // namespace

TEST(Comms, AllReduce) {
  PG pg = world();
  const int n = pg->size(), r = pg->rank();
  Tensor x = of_rank(r, {3, 2});
  auto s = pg->all_reduce(x, ReduceOp::Sum).to_vector<double>();
  auto a = pg->all_reduce(x, ReduceOp::Avg).to_vector<double>();
  auto m = pg->all_reduce(x, ReduceOp::Max).to_vector<double>();
  // async and blocking mean the same: the async mean is a mean, not a sum
  auto [aa, wa] = pg->all_reduce_async(x, ReduceOp::Avg);
  wa.wait();
  EXPECT_EQ(aa.to_vector<double>(), a);
  Tensor y = of_rank(r, {2 * n, 3});
  auto [rs, wr] = pg->reduce_scatter_async(y, 0, ReduceOp::Avg);
  wr.wait();
  EXPECT_EQ(rs.to_vector<double>(), pg->reduce_scatter(y, 0, ReduceOp::Avg).to_vector<double>());
  for (int i = 0; i < 6; ++i) {
    double sum = 0;
    for (int q = 0; q < n; ++q) sum += 100.0 * q + i;
    EXPECT_DOUBLE_EQ(s[i], sum);
    EXPECT_DOUBLE_EQ(a[i], sum / n);
    EXPECT_DOUBLE_EQ(m[i], 100.0 * (n - 1) + i);
  }
  auto f = pg->all_reduce(of_rank(r, {5}, DType::F32)).to_vector<float>();
  EXPECT_FLOAT_EQ(f[4], (float)(100.0 * n * (n - 1) / 2 + 4 * n));
}

TEST(Comms, AllGatherEvenAndUneven) {
  PG pg = world();
  const int n = pg->size(), r = pg->rank();
  // uneven along dim 0: rank q has q+1 rows
  std::vector<int64_t> sizes;
  for (int q = 0; q < n; ++q) sizes.push_back(q + 1);
  Tensor g = pg->all_gather(of_rank(r, {r + 1, 2}), 0, sizes);
  Tensor want = concat([&] {
    std::vector<Tensor> v;
    for (int q = 0; q < n; ++q) v.push_back(of_rank(q, {q + 1, 2}));
    return v;
  }(), 0);
  EXPECT_EQ(g.to_vector<double>(), want.to_vector<double>());
  // along dim 1
  Tensor g1 = pg->all_gather(of_rank(r, {2, 3}), 1);
  std::vector<Tensor> parts;
  for (int q = 0; q < n; ++q) parts.push_back(of_rank(q, {2, 3}));
  EXPECT_EQ(g1.to_vector<double>(), concat(parts, 1).to_vector<double>());
  // async: compute in between, then wait
  auto [ga, w] = pg->all_gather_async(of_rank(r, {4}), 0);
  Tensor busy = matmul(ones({64, 64}), ones({64, 64}));
  w.wait();
  std::vector<Tensor> p4;
  for (int q = 0; q < n; ++q) p4.push_back(of_rank(q, {4}));
  EXPECT_EQ(ga.to_vector<double>(), concat(p4, 0).to_vector<double>());
  EXPECT_FLOAT_EQ(busy.to_vector<float>()[0], 64.f);
}

TEST(Comms, ReduceScatterEvenUnevenAvg) {
  PG pg = world();
  const int n = pg->size(), r = pg->rank();
  auto sizes = chunk_sizes(7, n);  // e.g. 4 ranks: 2,2,2,1
  Tensor x = of_rank(r, {7, 2});
  auto out = pg->reduce_scatter(x, 0, ReduceOp::Sum, sizes).to_vector<double>();
  int64_t start = 0;
  for (int q = 0; q < r; ++q) start += sizes[q];
  ASSERT_EQ((int64_t)out.size(), sizes[r] * 2);
  for (int64_t i = 0; i < sizes[r] * 2; ++i) {
    double sum = 0;
    for (int q = 0; q < n; ++q) sum += 100.0 * q + (double)(start * 2 + i);
    EXPECT_DOUBLE_EQ(out[i], sum);
  }
  // along dim 1, averaged
  Tensor y = of_rank(r, {2, 2 * n});
  auto o1 = pg->reduce_scatter(y, 1, ReduceOp::Avg).to_vector<double>();
  for (int row = 0; row < 2; ++row)
    for (int c = 0; c < 2; ++c) {
      double sum = 0;
      for (int q = 0; q < n; ++q) sum += 100.0 * q + row * 2 * n + 2 * r + c;
      EXPECT_DOUBLE_EQ(o1[row * 2 + c], sum / n);
    }
  EXPECT_THROW(pg->reduce_scatter(of_rank(r, {n + 1}), 0), Error);  // uneven without sizes
}

// The ring collectives (comms/ring.h): a reduce-scatter's chunk q is the left fold of the ranks' chunks from
// rank q + 1 round the ring (float32 values that round differently in other orders: on 3 and more ranks the
// order is checked; one addition on 2 commutes); chunks may be empty; an all-reduce of 1 MiB or more (ring
// reduce-scatter + all-gather) folds each chunk in that order (float32, and bf16 bits on the bf16 wire, each hop
// rounded), is the same on every rank, and sums and takes maxima of float32, float64, int32 and int64 exactly.
TEST(Comms, RingCollectivesFoldRoundTheRing) {
  PG pg = world();
  const int n = pg->size(), r = pg->rank();
  auto value = [](int q, int64_t i) { return 1.0f + 0.1f * (float)q + 1e-3f * (float)(i % 97) + 1e-7f * (float)i; };
  auto input = [&](int q, int64_t len) {
    std::vector<float> v((size_t)len);
    for (int64_t i = 0; i < len; ++i) v[(size_t)i] = value(q, i) * (q % 2 ? -1.0f : 1.0f) * (i % 3 ? 1.0f : 3.3f);
    return v;
  };
  for (int64_t per : {int64_t(3000), int64_t(0), int64_t(1)}) {  // elements per rank's chunk (0: all empty)
    std::vector<int64_t> sizes(n, per);
    if (per == 1) sizes = chunk_sizes(2, n);  // 1, 1, 0, ...: some ranks' chunks empty
    int64_t total = 0, start = 0;
    for (int q = 0; q < n; ++q) total += sizes[q], start += q < r ? sizes[q] : 0;
    std::vector<std::vector<float>> in;
    for (int q = 0; q < n; ++q) in.push_back(input(q, total));
    Tensor x = from_vector<float>(in[r], {total});
    std::vector<float> got = pg->reduce_scatter(x, 0, ReduceOp::Sum, sizes).to_vector<float>();
    ASSERT_EQ((int64_t)got.size(), sizes[r]);
    int wrong = 0;
    for (int64_t i = start; i < start + sizes[r]; ++i) {
      float acc = in[(r + 1) % n][(size_t)i];  // rank r + 1, r + 2, ... round the ring
      for (int k = 2; k <= n; ++k) acc = acc + in[(r + k) % n][(size_t)i];
      wrong += got[(size_t)(i - start)] != acc;
    }
    EXPECT_EQ(wrong, 0) << "of " << sizes[r] << " elements, chunk of " << per;
  }
  // all-reduce above the ring's threshold (1 MiB): exact sums of integers in float32, float64 and int64
  const int64_t len = (1 << 18) + 3;  // 1 MiB and more in every dtype; uneven chunks
  for (DType t : {DType::F32, DType::F64, DType::I32, DType::I64}) {
    Tensor x = of_rank(r, {len}, t);
    std::vector<double> s = pg->all_reduce(x, ReduceOp::Sum).to(DType::F64).to_vector<double>();
    std::vector<double> m = pg->all_reduce(x, ReduceOp::Max).to(DType::F64).to_vector<double>();
    int wrong = 0;
    for (int64_t i = 0; i < len; i += 7) {
      double sum = 0;
      for (int q = 0; q < n; ++q) sum += 100.0 * q + (double)i;
      wrong += s[(size_t)i] != sum || m[(size_t)i] != 100.0 * (n - 1) + (double)i;
    }
    EXPECT_EQ(wrong, 0) << dtype_name(t);
  }
  // non-integer float32: each chunk q folded round the ring from rank q + 1 (the reduce-scatter's order), then
  // gathered: every rank holds the same bits
  const int64_t half = (1 << 19) + 5;  // the bf16 wire's 1 MiB of bits, below
  std::vector<std::vector<float>> in;
  for (int q = 0; q < n; ++q) in.push_back(input(q, half));
  auto ring_folds = [&](const std::vector<float>& got, const std::function<float(int, int64_t)>& value,
                        const std::function<float(float, float)>& add) {
    const std::vector<int64_t> chunks = chunk_sizes((int64_t)got.size(), n);  // the all-reduce's chunks
    int wrong = 0;
    for (int64_t q = 0, at = 0; q < n; at += chunks[q], ++q)
      for (int64_t i = at; i < at + chunks[q]; ++i) {
        float acc = value((int)(q + 1) % n, i);
        for (int k = 2; k <= n; ++k) acc = add(acc, value((int)(q + k) % n, i));
        wrong += got[(size_t)i] != acc;
      }
    return wrong;
  };
  Tensor y = from_vector<float>(std::vector<float>(in[r].begin(), in[r].begin() + len), {len});
  std::vector<float> sum = pg->all_reduce(y, ReduceOp::Sum).to_vector<float>();
  EXPECT_EQ(ring_folds(sum, [&](int q, int64_t i) { return in[q][(size_t)i]; }, std::plus<float>()), 0);
  Tensor avg = pg->all_reduce(y, ReduceOp::Avg);
  Tensor first = pg->all_gather(avg.reshape({1, len}), 0).slice(0, 0, 1).reshape({len});
  EXPECT_EQ(avg.to_vector<float>(), first.to_vector<float>());
  // the bf16 wire above the threshold (1 MiB of bits): every hop's sum rounded to bf16, in the ring's order
  std::vector<float> b =
      pg->all_reduce(from_vector<float>(in[r], {half}), ReduceOp::Sum, DType::BF16).to_vector<float>();
  EXPECT_EQ(ring_folds(b, [&](int q, int64_t i) { return round_to_bf16(in[q][(size_t)i]); },
                       [](float a, float c) { return round_to_bf16(a + c); }),
            0);
}

TEST(Comms, BroadcastAllToAllSendRecvBarrier) {
  PG pg = world();
  const int n = pg->size(), r = pg->rank();
  EXPECT_EQ(pg->broadcast(of_rank(r, {3}), n - 1).to_vector<double>(), of_rank(n - 1, {3}).to_vector<double>());
  // all_to_all: rank r sends row block d to rank d
  Tensor x = of_rank(r, {n, 2});
  auto a = pg->all_to_all(x).to_vector<double>();
  for (int q = 0; q < n; ++q)
    for (int c = 0; c < 2; ++c) EXPECT_DOUBLE_EQ(a[q * 2 + c], 100.0 * q + r * 2 + c);
  // all_to_all_v with skew: rank q sends (q + d) % 3 rows to rank d (zero rows happen)
  std::vector<int64_t> send;
  int64_t total = 0;
  for (int d = 0; d < n; ++d) {
    send.push_back((r + d) % 3);
    total += send.back();
  }
  Tensor xv = of_rank(r, {total, 2});
  std::vector<int64_t> recv;
  auto v = pg->all_to_all_v(xv, send, &recv).to_vector<double>();
  int64_t at = 0;
  for (int q = 0; q < n; ++q) {
    EXPECT_EQ(recv[q], (q + r) % 3);
    int64_t off = 0;  // where rank q's block for me starts in q's send buffer
    for (int d = 0; d < r; ++d) off += (q + d) % 3;
    for (int64_t i = 0; i < recv[q] * 2; ++i) EXPECT_DOUBLE_EQ(v[at + i], 100.0 * q + off * 2 + i);
    at += recv[q] * 2;
  }
  // ring send/recv
  if (n > 1) {
    if (r % 2 == 0) {
      pg->send(of_rank(r, {2}), (r + 1) % n, 7);
      Tensor got = pg->recv({2}, DType::F64, (r + n - 1) % n, 7);
      EXPECT_EQ(got.to_vector<double>(), of_rank((r + n - 1) % n, {2}).to_vector<double>());
    } else {
      Tensor got = pg->recv({2}, DType::F64, (r + n - 1) % n, 7);
      pg->send(of_rank(r, {2}), (r + 1) % n, 7);
      EXPECT_EQ(got.to_vector<double>(), of_rank((r + n - 1) % n, {2}).to_vector<double>());
    }
  }
  pg->barrier();
}

TEST(Comms, MetaAndFakeGroupsDoNotCommunicate) {
  PG fake = ProcessGroup::fake(1, {0, 1, 2, 3, 4, 5, 6, 7}, "fake");
  Tensor m = empty({4, 16}, DType::F32, Device::Meta);
  EXPECT_EQ(fake->all_gather(m, 0).shape(), (Shape{32, 16}));
  EXPECT_EQ(fake->reduce_scatter(empty({32, 16}, DType::F32, Device::Meta), 0).shape(), (Shape{4, 16}));
  EXPECT_TRUE(fake->all_reduce(m).is_meta());
  EXPECT_EQ(world()->all_gather(m, 1).shape(), (Shape{4, 16 * world()->size()}));
}

// A simulation plays a world with fake groups: they must know the same members
// (world ranks, in group order), rank and identity as the real groups.
TEST(Comms, FakeGroupsKnowTheirMembersAsRealOnesDo) {
  PG w = world();
  std::vector<int> all(w->size());
  for (int r = 0; r < w->size(); ++r) all[r] = r;
  PG fw = ProcessGroup::fake(w->rank(), all, "world");
  EXPECT_EQ(fw->world_ranks(), w->world_ranks());
  auto color = [](int r) { return r % 2; };
  auto key = [](int r) { return -r; };  // reversed order inside each color
  PG real = w->split(color, key, "sub"), fake = fw->split(color, key, "sub");
  EXPECT_EQ(real->world_ranks(), fake->world_ranks());
  EXPECT_EQ(real->rank(), fake->rank());
  EXPECT_EQ(real->ref().id, fake->ref().id);
  MeshDegrees d;
  d.tp = w->size() % 2 == 0 ? 2 : 1;
  DeviceMesh rm(d), fm(d, /*fake=*/true, w->rank(), w->size(), hosts().host_of);  // on the job's hosts
  for (auto [a, b] : {std::pair<PG, PG>{rm.world_pg, fm.world_pg}, {rm.tp, fm.tp}, {rm.dp_shard, fm.dp_shard},
                      {rm.dp_replicate, fm.dp_replicate}, {rm.dp, fm.dp}}) {
    EXPECT_EQ(a->world_ranks(), b->world_ranks()) << a->name();
    EXPECT_EQ(a->rank(), b->rank()) << a->name();
    EXPECT_EQ(a->ref().id, b->ref().id) << a->name();
  }
}

TEST(Comms, CollectivesAreRecorded) {
  PG pg = world();
  CommLog::get().clear();
  pg->all_reduce(of_rank(pg->rank(), {10}));
  auto recs = CommLog::get().take();
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_EQ(recs[0].kind, "all_reduce");
  EXPECT_EQ(recs[0].group, "world");
  EXPECT_EQ(recs[0].bytes, 80);
}

namespace {
// <a, b> over the logical tensors: a replicated tensor counts once, a
// distributed one sums its per-rank pieces.
double logical_dot(const Tensor& a, const Tensor& b, bool replicated) {
  double local = 0;
  auto x = a.to_vector<double>(), y = b.to_vector<double>();
  for (size_t i = 0; i < x.size(); ++i) local += x[i] * y[i];
  if (replicated) return local;
  return world()->all_reduce(from_vector<double>({local}, {1})).to_vector<double>()[0];
}
void adjoint_check(const std::function<Tensor(const Tensor&)>& A, const Shape& in_shape, bool in_replicated = false,
                   bool out_replicated = false) {
  const int r = world()->rank();
  Generator g(in_replicated ? 100 : 100 + r);
  Tensor x = randn(in_shape, g, DType::F64).requires_grad_(true);
  Tensor y_out = A(x);
  Generator gy(out_replicated ? 200 : 200 + r);
  Tensor y = randn(y_out.shape(), gy, DType::F64);
  sum(mul(y_out, y)).backward();  // x.grad = A^T y
  const double lhs = logical_dot(y_out.detach(), y, out_replicated);
  const double rhs = logical_dot(x.detach(), x.grad(), in_replicated);
  EXPECT_NEAR(lhs, rhs, 1e-10 * (1 + std::abs(lhs)));
}
}  // namespace

TEST(Comms, DifferentiableCollectivesAreAdjointPairs) {
  PG pg = world();
  const int n = pg->size();
  // copy_to: a replicated input feeding per-rank consumers; reduce_from: per-rank partials summed into a replicated output
  adjoint_check([&](const Tensor& x) { return copy_to(x, pg); }, {3, 2}, /*in_replicated=*/true, false);
  adjoint_check([&](const Tensor& x) { return reduce_from(x, pg); }, {3, 2}, false, /*out_replicated=*/true);
  adjoint_check([&](const Tensor& x) { return all_gather_op(x, 0, pg); }, {2, 3});
  adjoint_check([&](const Tensor& x) { return all_gather_op(x, 1, pg); }, {2, 3});
  adjoint_check([&](const Tensor& x) { return reduce_scatter_op(x, 0, pg); }, {2 * n, 3});
  adjoint_check([&](const Tensor& x) { return reduce_scatter_op(x, 0, pg, chunk_sizes(2 * n + 1, n)); }, {2 * n + 1, 3});
  adjoint_check([&](const Tensor& x) { return split_to(x, 1, pg); }, {2, 2 * n}, true, false);
  adjoint_check([&](const Tensor& x) { return gather_from(x, 1, pg); }, {2, 2}, false, true);
  // gather_from / split_to are adjoint when consumers are replicated: check the pair composes to identity
  Generator g(5);
  Tensor full = randn({2, 4 * n}, g, DType::F64);  // same on every rank
  Tensor part = split_to(full, 1, pg);
  EXPECT_EQ(gather_from(part, 1, pg).to_vector<double>(), full.to_vector<double>());
  Tensor xr = part.clone().detach().requires_grad_(true);
  sum(mul(gather_from(xr, 1, pg), full)).backward();  // replicated loss: grad = own slice of `full`
  EXPECT_EQ(xr.grad().to_vector<double>(), part.to_vector<double>());
}

// Async tensor parallel's fused ops (comms/collective_matmul.h) against the unfused pair they replace, forward and
// backward, in float64 on 2, 3 and 4 ranks: the gather + projections (two weights, one with a bias) and the
// projection + reduce-scatter, batch 1 (the shards' rows received in place) and 2 (strided over the batch). The
// values and gradients are equal to rounding (the ring's sums in their own order); the gathered input exactly.
TEST(CollectiveMatmul, FusedOpsEqualTheCollectiveThenTheGemm) {
  PG pg = world();
  static PG p2p = std::make_shared<ProcessGroup>(MPI_COMM_WORLD, "p2p");
  const int n = pg->size(), r = pg->rank();
  auto leaf = [](const Tensor& t) { return t.clone().detach().requires_grad_(true); };
  auto close = [](const Tensor& a, const Tensor& b, const char* what) {
    ASSERT_EQ(a.shape(), b.shape()) << what;
    const auto u = a.to_vector<double>(), v = b.to_vector<double>();
    double num = 0, den = 0;
    for (size_t i = 0; i < u.size(); ++i) {
      num += (u[i] - v[i]) * (u[i] - v[i]);
      den += v[i] * v[i];
    }
    EXPECT_LE(std::sqrt(num), 1e-12 * std::sqrt(den) + 1e-300) << what;
  };
  for (int64_t B : {1, 2}) {
    SCOPED_TRACE("batch " + std::to_string(B));
    const int64_t s = 3, H = 5, S = s * n;
    Generator g(100 + r);  // every rank its own shard, weights and output gradients
    const Tensor x0 = randn({B, s, H}, g, DType::F64), w0 = randn({4, H}, g, DType::F64),
                 w1 = randn({6, H}, g, DType::F64), b1 = randn({6}, g, DType::F64);
    const Tensor c0 = randn({B, S, 4}, g, DType::F64), c1 = randn({B, S, 6}, g, DType::F64);
    // gather + projections
    Tensor xa = leaf(x0), wa0 = leaf(w0), wa1 = leaf(w1), ba1 = leaf(b1);
    Tensor full = all_gather_op(xa, 1, pg);
    Tensor ya0 = linear(full, wa0), ya1 = linear(full, wa1, ba1);
    add(sum(mul(ya0, c0)), sum(mul(ya1, c1))).backward();
    Tensor xb = leaf(x0), wb0 = leaf(w0), wb1 = leaf(w1), bb1 = leaf(b1);
    std::vector<Tensor> f = all_gather_linear(xb, {wb0, wb1}, {Tensor(), bb1}, p2p);
    ASSERT_EQ(f.size(), 3u);
    EXPECT_EQ(f[0].to_vector<double>(), full.to_vector<double>());
    close(f[1], ya0, "y0");
    close(f[2], ya1, "y1");
    add(sum(mul(f[1], c0)), sum(mul(f[2], c1))).backward();
    close(xb.grad(), xa.grad(), "dx");
    close(wb0.grad(), wa0.grad(), "dw0");
    close(wb1.grad(), wa1.grad(), "dw1");
    close(bb1.grad(), ba1.grad(), "db1");
    // projection + reduce-scatter
    const Tensor z0 = randn({B, S, H}, g, DType::F64), v0 = randn({7, H}, g, DType::F64),
                 e0 = randn({B, s, 7}, g, DType::F64);
    Tensor za = leaf(z0), va = leaf(v0);
    Tensor ra = reduce_scatter_op(linear(za, va), 1, pg);
    sum(mul(ra, e0)).backward();
    Tensor zb = leaf(z0), vb = leaf(v0);
    Tensor rb = linear_reduce_scatter(zb, vb, p2p);
    close(rb, ra, "reduce-scattered y");
    sum(mul(rb, e0)).backward();
    close(zb.grad(), za.grad(), "dz");
    close(vb.grad(), va.grad(), "dv");
  }
  // shapes the ring cannot split are refused, naming the op
  std::string e;
  Generator g(7);
  try {
    linear_reduce_scatter(randn({1, 2 * n + 1, 5}, g, DType::F64), randn({3, 5}, g, DType::F64), p2p);
  } catch (const std::exception& ex) {
    e = ex.what();
  }
  EXPECT_NE(e.find("linear_reduce_scatter: the sequence"), std::string::npos) << e;
}

// FP8 projections fused with their collective: the same casts as the unfused op's on the gathered tensors (a
// tensorwise scale over rows that arrive a shard at a time is the whole tensor's), for each recipe; a high-precision
// projection beside FP8 ones stays high precision.
TEST(CollectiveMatmul, Float8FusedOpsEqualTheCollectiveThenTheFloat8Gemm) {
  PG pg = world();
  static PG p2p = std::make_shared<ProcessGroup>(MPI_COMM_WORLD, "p2p_f8");
  const int n = pg->size(), r = pg->rank();
  auto leaf = [](const Tensor& t) { return t.clone().detach().requires_grad_(true); };
  auto rel = rel_err;
  // the GEMMs over row blocks and the ring's order of sums (equal bits on 2-4 ranks here, bf16 too: a bf16
  // rounding moved, or a weight cast from float32 instead of bf16, is 1e-4 or more)
  auto close = [&](const Tensor& a, const Tensor& b, const char* what) {
    ASSERT_EQ(a.shape(), b.shape()) << what;
    EXPECT_LE(rel(a, b), 2e-6) << what;
  };
  auto cut = [pg](bool out) { return fp8_cut(pg, out); };
  for (int mode = 0; mode < 4; ++mode) {
    // the three recipes in float32, then tensorwise under bf16 autocast (weights cast from their bf16 values,
    // the ring's own shard through the bf16 wire, outputs rounded to bf16)
    const Float8Recipe recipe = mode == 1 ? Float8Recipe::rowwise : mode == 2 ? Float8Recipe::mxfp8 : Float8Recipe::tensorwise;
    const bool bf16 = mode == 3;
    std::optional<AutocastScope> autocast;
    if (bf16) autocast.emplace(DType::BF16);
    SCOPED_TRACE(std::string(enum_names(Float8Recipe{})[(size_t)recipe]) + (bf16 ? " under bf16 autocast" : ""));
    Float8Casts col = float8_casts(recipe), row = float8_casts(recipe);
    col.tp = cut(true);
    row.tp = cut(false);
    for (int64_t B : {1, 2}) {
      SCOPED_TRACE("batch " + std::to_string(B));
      const int64_t s = 32, H = 32, S = s * n;  // MX: every contraction a multiple of 32
      Generator g(300 + r);
      // each rank's shard differs in scale: a tensorwise scale taken from one shard alone would differ
      const Tensor x0 = mul(randn({B, s, H}, g, DType::F32), 1.0 + r), w0 = randn({32, H}, g, DType::F32),
                   w1 = randn({64, H}, g, DType::F32), b1 = randn({64}, g, DType::F32),
                   w2 = randn({32, H}, g, DType::F32);
      const Tensor c0 = randn({B, S, 32}, g, DType::F32), c1 = randn({B, S, 64}, g, DType::F32),
                   c2 = randn({B, S, 32}, g, DType::F32);
      Tensor xa = leaf(x0), wa0 = leaf(w0), wa1 = leaf(w1), ba1 = leaf(b1), wa2 = leaf(w2);
      Tensor full = all_gather_op(xa, 1, pg);
      Tensor ya0 = float8_linear(full, wa0, Tensor(), col), ya1 = float8_linear(full, wa1, ba1, col),
             ya2 = linear(full, wa2);
      add(add(sum(mul(ya0, c0)), sum(mul(ya1, c1))), sum(mul(ya2, c2))).backward();
      {  // the reference is FP8's: the test can tell a high-precision GEMM from it
        NoGradGuard ng;
        EXPECT_GT(rel(linear(full, w0), ya0), 1e-3);
      }
      Tensor xb = leaf(x0), wb0 = leaf(w0), wb1 = leaf(w1), bb1 = leaf(b1), wb2 = leaf(w2);
      std::vector<Tensor> f =
          all_gather_linear(xb, {wb0, wb1, wb2}, {Tensor(), bb1, Tensor()}, p2p, {&col, &col, nullptr});
      ASSERT_EQ(f.size(), 4u);
      close(f[1], ya0, "y0");
      close(f[2], ya1, "y1");
      close(f[3], ya2, "y2 (high precision)");
      add(add(sum(mul(f[1], c0)), sum(mul(f[2], c1))), sum(mul(f[3], c2))).backward();
      close(xb.grad(), xa.grad(), "dx");
      close(wb0.grad(), wa0.grad(), "dw0");
      close(wb1.grad(), wa1.grad(), "dw1");
      close(bb1.grad(), ba1.grad(), "db1");
      close(wb2.grad(), wa2.grad(), "dw2");
      // projection + reduce-scatter: K cut over the ranks
      const Tensor z0 = mul(randn({B, S, H}, g, DType::F32), 1.0 + r), v0 = randn({32, H}, g, DType::F32),
                   e0 = mul(randn({B, s, 32}, g, DType::F32), 1.0 + 2.0 * r);
      Tensor za = leaf(z0), va = leaf(v0);
      Tensor ra = reduce_scatter_op(float8_linear(za, va, Tensor(), row), 1, pg);
      sum(mul(ra, e0)).backward();
      Tensor zb = leaf(z0), vb = leaf(v0);
      Tensor rb = linear_reduce_scatter(zb, vb, p2p, &row);
      close(rb, ra, "reduce-scattered y");
      sum(mul(rb, e0)).backward();
      close(zb.grad(), za.grad(), "dz");
      close(vb.grad(), va.grad(), "dv");
    }
  }
  // casts without the plan's cut are refused, naming the op
  std::string e;
  Generator g(9);
  try {
    const Float8Casts whole = float8_casts(Float8Recipe::tensorwise);
    linear_reduce_scatter(randn({1, 2 * n, 32}, g, DType::F32), randn({32, 32}, g, DType::F32), p2p, &whole);
  } catch (const std::exception& ex) {
    e = ex.what();
  }
  EXPECT_NE(e.find("linear_reduce_scatter: the FP8 casts"), std::string::npos) << e;
}

// TorchTitan's float8 tensor parallel (tensorwise): sequence parallel's gathers on the FP8 wire — the block input
// before the column-parallel projections, the output gradient of the row-parallel one — deliver exactly the
// values the projections' own casts of the bf16-wire gather make (the projections then cast nothing), in half
// the bytes; the fused ring (async TP) on the FP8 wire agrees with them.
TEST(Float8Wire, GathersTheCastValuesInHalfTheBytes) {
  PG pg = world();
  static PG p2p = std::make_shared<ProcessGroup>(MPI_COMM_WORLD, "p2p_f8_wire");
  const int n = pg->size(), r = pg->rank();
  auto leaf = [](const Tensor& t) { return t.clone().detach().requires_grad_(true); };
  auto bits = [](const Tensor& a, const Tensor& b, const std::string& what) {
    ASSERT_EQ(a.shape(), b.shape()) << what;
    const auto u = a.contiguous().to_vector<float>(), v = b.contiguous().to_vector<float>();
    size_t differ = 0;
    for (size_t i = 0; i < u.size(); ++i) differ += std::memcmp(&u[i], &v[i], sizeof(float)) != 0;
    EXPECT_EQ(differ, 0u) << what << ": " << differ << " of " << u.size() << " values differ";
  };
  auto close = [](const Tensor& a, const Tensor& b, const std::string& what) { EXPECT_LE(rel_err(a, b), 2e-6) << what; };
  auto cut = [pg](bool out) { return fp8_cut(pg, out); };
  Float8Casts col = float8_casts(Float8Recipe::tensorwise), row = float8_casts(Float8Recipe::tensorwise);
  col.tp = cut(true);
  row.tp = cut(false);
  for (bool bf16 : {false, true}) {
    std::optional<AutocastScope> autocast;
    if (bf16) autocast.emplace(DType::BF16);
    SCOPED_TRACE(bf16 ? "under bf16 autocast" : "float32");
    const int64_t B = 2, s = 16, H = 32, S = s * n;
    Generator g(700 + r);
    // each rank's shard at its own scale: a scale from one shard alone would differ from the tensor's
    const Tensor x0 = mul(randn({B, s, H}, g, DType::F32), 1.0 + r), w0 = randn({32, H}, g, DType::F32),
                 w1 = randn({64, H}, g, DType::F32), c0 = randn({B, S, 32}, g, DType::F32),
                 c1 = randn({B, S, 64}, g, DType::F32);
    // reference: the gather on the activation wire, each projection casting the gathered input itself
    Tensor xa = leaf(x0), wa0 = leaf(w0), wa1 = leaf(w1);
    Tensor fa = all_gather_op(xa, 1, pg);
    Tensor ya0 = float8_linear(fa, wa0, Tensor(), col), ya1 = float8_linear(fa, wa1, Tensor(), col);
    add(sum(mul(ya0, c0)), sum(mul(ya1, c1))).backward();
    // the FP8 wire: one cast of the shard, codes gathered (one byte each), the projections read them as cast
    CommLog::get().clear();
    Tensor xb = leaf(x0), wb0 = leaf(w0), wb1 = leaf(w1);
    Tensor fb = all_gather_op(xb, 1, pg, {}, ReduceOp::Sum, col.input);
    std::vector<CommRecord> recs = CommLog::get().take();
    int64_t gathered = 0;
    for (const CommRecord& c : recs)
      if (c.kind == "all_gather") gathered += c.bytes;
    EXPECT_EQ(gathered, B * s * H) << "the FP8 wire moves one byte an element";
    EXPECT_TRUE(is_fp8_operand(fb, col.input));
    {
      NoGradGuard ng;
      bits(fb, fp8_round_trip(fa.detach().reshape({B * S, H}), col.input, 1).reshape({B, S, H}), "gathered values");
    }
    Tensor yb0 = float8_linear(fb, wb0, Tensor(), col), yb1 = float8_linear(fb, wb1, Tensor(), col);
    bits(yb0, ya0, "y0");
    bits(yb1, ya1, "y1");
    add(sum(mul(yb0, c0)), sum(mul(yb1, c1))).backward();
    bits(xb.grad(), xa.grad(), "dx");
    bits(wb0.grad(), wa0.grad(), "dw0");
    bits(wb1.grad(), wa1.grad(), "dw1");
    // the fused ring on the FP8 wire (every projection FP8, one tensorwise input cast)
    Tensor xc = leaf(x0), wc0 = leaf(w0), wc1 = leaf(w1);
    std::vector<Tensor> f = all_gather_linear(xc, {wc0, wc1}, {Tensor(), Tensor()}, p2p, {&col, &col});
    EXPECT_TRUE(is_fp8_operand(f[0], col.input));
    close(f[1], ya0, "fused y0");
    close(f[2], ya1, "fused y1");
    add(sum(mul(f[1], c0)), sum(mul(f[2], c1))).backward();
    close(xc.grad(), xa.grad(), "fused dx");
    close(wc0.grad(), wa0.grad(), "fused dw0");
    close(wc1.grad(), wa1.grad(), "fused dw1");
    // row-parallel: the output gradient gathered on the FP8 wire in the reduce-scatter's backward
    const Tensor z0 = mul(randn({B, S, H}, g, DType::F32), 1.0 + r), v0 = randn({32, H}, g, DType::F32),
                 e0 = mul(randn({B, s, 32}, g, DType::F32), 1.0 + 2.0 * r);
    Tensor za = leaf(z0), va = leaf(v0);
    sum(mul(reduce_scatter_op(float8_linear(za, va, Tensor(), row), 1, pg), e0)).backward();
    Tensor zb = leaf(z0), vb = leaf(v0);
    CommLog::get().clear();
    sum(mul(reduce_scatter_op(float8_linear(zb, vb, Tensor(), row), 1, pg, {}, row.grad_output), e0)).backward();
    recs = CommLog::get().take();
    gathered = 0;
    for (const CommRecord& c : recs)
      if (c.kind == "all_gather") gathered += c.bytes;
    EXPECT_EQ(gathered, B * s * 32) << "the gradient's FP8 wire moves one byte an element";
    bits(zb.grad(), za.grad(), "dz");
    bits(vb.grad(), va.grad(), "dv");
  }
  // a rank holding none of the rows (uneven shards) takes part with an amax of 0; the gathered values are still
  // the cast of the gathered tensor
  {
    Generator g(800 + r);
    const int64_t mine = r == n - 1 ? 0 : 3;
    std::vector<int64_t> sizes(n, 3);
    sizes[n - 1] = 0;
    const Tensor x = mul(randn({mine, 8}, g, DType::F32), 1.0 + r);
    const Tensor got = all_gather_fp8(x, 0, pg, sizes, col.input, DType::F32);
    const Tensor whole = pg->all_gather(x, 0, sizes);
    bits(got, fp8_round_trip(whole, col.input, 1), "uneven shards");
  }
  // amaxes reduce NaN-first, whatever the order: every rank gets NaN where any rank has one
  {
    std::vector<float> a = {r == 0 ? std::numeric_limits<float>::quiet_NaN() : 1.0f + r, 2.0f + r, 0.0f};
    all_reduce_amax(pg, a);
    EXPECT_TRUE(std::isnan(a[0]));
    EXPECT_EQ(a[1], 2.0f + (float)(n - 1));
    EXPECT_EQ(a[2], 0.0f);
  }
  // only a tensorwise cast spans a whole tensor: an axiswise one on the wire is refused, naming the op
  std::string e;
  Generator g(9);
  try {
    all_gather_fp8(randn({2, 4, 32}, g, DType::F32), 1, pg, {}, float8_casts(Float8Recipe::rowwise).input, DType::F32);
  } catch (const std::exception& ex) {
    e = ex.what();
  }
  EXPECT_NE(e.find("fp8_encode: an FP8 wire carries one tensorwise scale"), std::string::npos) << e;
}

TEST(Mesh, DegreesResolveOrFailClearly) {
  const int n = world()->size();
  MeshDegrees d = resolve_degrees({1, -1, 1}, n);
  EXPECT_EQ(d.dp_shard, n);
  try {
    resolve_degrees({1, 3, 2}, 4);
    FAIL();
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("tensor_parallel_degree 2"), std::string::npos) << m;
    EXPECT_NE(m.find("world size 4"), std::string::npos) << m;
  }
  EXPECT_THROW(resolve_degrees({1, -1, 3}, 4), Error);
  if (n == 4) {
    DeviceMesh mesh({1, 2, 2});
    EXPECT_EQ(mesh.tp->size(), 2);
    EXPECT_EQ(mesh.dp_shard->size(), 2);
    EXPECT_EQ(mesh.tp_rank, mesh.rank % 2);
    EXPECT_EQ(mesh.shard_rank, mesh.rank / 2);
    // tp groups hold consecutive ranks
    auto g = mesh.tp->all_gather(from_vector<double>({(double)mesh.rank}, {1})).to_vector<double>();
    EXPECT_EQ(g[0], (double)(mesh.rank / 2 * 2));
  }
  DeviceMesh fake({2, -1, 2}, true, 5, 8);
  EXPECT_EQ(fake.degrees.dp_shard, 2);
  EXPECT_EQ(fake.tp_rank, 1);
  EXPECT_EQ(fake.shard_rank, 0);
  EXPECT_EQ(fake.replicate_rank, 1);
}

// Ranks numbered round-robin over hosts (mpirun --map-by node) still get their inner dimensions within a host:
// the mesh's coordinates are host-major positions, not world ranks.
TEST(Mesh, InnerDimensionsStayWithinAHost) {
  EXPECT_EQ(host_major_order({0, 1, 0, 1}), (std::vector<int>{0, 2, 1, 3}));
  EXPECT_EQ(host_major_order({0, 0, 1, 1}), (std::vector<int>{0, 1, 2, 3}));  // host by host: the identity
  EXPECT_EQ(host_major_order({0, 1, 2, 0, 1, 2}), (std::vector<int>{0, 3, 1, 4, 2, 5}));
  const std::vector<int> by_node = {0, 1, 0, 1};  // world ranks 0, 2 on host 0; 1, 3 on host 1
  for (int r = 0; r < 4; ++r) {
    DeviceMesh hsdp({2, 2, 1}, true, r, 4, by_node);  // HSDP: shard within a host, replicate across
    EXPECT_EQ(hsdp.dp_shard->world_ranks(), r % 2 == 0 ? (std::vector<int>{0, 2}) : (std::vector<int>{1, 3})) << r;
    // one replica per host: shard 0 is world rank 0 (h0) and 1 (h1), shard 1 is world ranks 2 and 3
    EXPECT_EQ(hsdp.dp_replicate->world_ranks(), r < 2 ? (std::vector<int>{0, 1}) : (std::vector<int>{2, 3})) << r;
    EXPECT_EQ(hsdp.world_pg->world_ranks(), (std::vector<int>{0, 1, 2, 3}));  // world stays by world rank
    DeviceMesh tp({1, 2, 2}, true, r, 4, by_node);  // TP within a host, FSDP across
    EXPECT_EQ(tp.tp->world_ranks(), r % 2 == 0 ? (std::vector<int>{0, 2}) : (std::vector<int>{1, 3})) << r;
    EXPECT_EQ(tp.tp_rank, r / 2);
    DeviceMesh pp({1, 2, 1, 2}, true, r, 4, by_node);  // PP across hosts: a stage's ranks on one host
    EXPECT_EQ(pp.pp_rank, r % 2);
    EXPECT_EQ(pp.pp->world_ranks(), r / 2 == 0 ? (std::vector<int>{0, 1}) : (std::vector<int>{2, 3})) << r;
  }
  EXPECT_THROW(DeviceMesh({1, 2, 1}, true, 0, 2, {0}), Error);
}

// The link probe's verdict: a host whose links in and out are both slow is named; even links name nobody;
// with two hosts only an asymmetric pair of links can be told.
TEST(LinkProbe, NamesTheHostWhoseLinksAreSlow) {
  const std::vector<std::string> n4 = {"h1", "h2", "h3", "h4"};
  // in_s[i]: into host i from host i-1; h3 (index 2) slow both ways: into h3 (2) and into h4 (3)
  const std::string v = LinkProbe::slowest({0.003, 0.0032, 0.171, 0.170}, n4, 4 << 20);
  EXPECT_EQ(v, "h3's link: 4 MiB in 171 ms into h3, 170 ms out (the other links' median 3.0 ms)") << v;
  EXPECT_EQ(LinkProbe::slowest({0.003, 0.0032, 0.0041, 0.0035}, n4, 4 << 20), "");
  EXPECT_EQ(LinkProbe::slowest({0.003, 0.0032, 0.0081, 0.0035}, n4, 4 << 20), "");  // one slow link: no host
  EXPECT_EQ(LinkProbe::slowest({0.01, 0.011}, {"h1", "h2"}, 4 << 20), "");
  EXPECT_EQ(LinkProbe::slowest({0.01, 0.2}, {"h1", "h2"}, 4 << 20),
            "the link between h1 and h2: 4 MiB in 200 ms to h2, 10 ms back");
  const std::vector<std::string> n3 = {"a", "b", "c"};  // three hosts: one link does not touch the slow one
  EXPECT_EQ(LinkProbe::slowest({0.002, 0.3, 0.31}, n3, 1 << 20),
            "b's link: 1 MiB in 300 ms into b, 310 ms out (the other links' median 2.0 ms)");
}

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  comms::init(&argc, &argv);
  if (comms::world_rank() != 0) ::testing::GTEST_FLAG(print_time) = false;
  int rc = RUN_ALL_TESTS();
  // make every rank agree on the outcome
  int any = rc;
  {
    auto v = world()->all_reduce(from_vector<double>({(double)rc}, {1}), ReduceOp::Max).to_vector<double>();
    any = (int)v[0];
  }
  comms::finalize();
  return any;
}

// ---- MoE dispatch / combine -------------------------------------------------------
namespace {
void expect_near_vec_d(const std::vector<double>& a, const std::vector<double>& b, double tol) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], tol) << "at " << i;
}
}  // namespace

namespace {
struct MoeCase {
  int64_t T, k, E;
  bool all_to_expert0;
};
// y = combine(grouped_linear(dispatch(x)), weights), with global expert weights W [E, H, H]
std::pair<Tensor, Tensor> moe(const Tensor& x, const Tensor& idx, const Tensor& w, const Tensor& W, int64_t E,
                              const PG& group) {
  auto d = dispatch(x, idx, w, E, group);
  const int64_t P = group ? group->size() : 1, r = group ? group->rank() : 0, El = E / P;
  Tensor Wl = slice(W, 0, r * El, (r + 1) * El);
  Tensor y = grouped_linear(d.expert_input, Wl, Tensor(), d.tokens_per_local_expert);
  return {combine(y, *d.handle), from_vector<int64_t>(d.tokens_per_local_expert, {El})};
}
}  // namespace

TEST(MoeDispatch, ExpertParallelEqualsLocalWithSkewedRouting) {
  PG pg = world();
  const int P = pg->size(), r = pg->rank();
  const int64_t H = 3;
  for (MoeCase c : {MoeCase{5, 2, 2 * P, false}, MoeCase{4, 1, P, true}, MoeCase{6, 4, 4 * P, false},
                    MoeCase{3, 4, 4 * P, true}}) {
    SCOPED_TRACE(::testing::Message() << "T " << c.T << " k " << c.k << " E " << c.E << " skew " << c.all_to_expert0);
    const int64_t T = c.T + r;  // uneven token counts per rank
    Generator g(1000 + r), gw(7);
    Tensor x = randn({T, H}, g, DType::F64);
    Tensor W = randn({c.E, H, H}, gw, DType::F64);  // same on every rank
    std::vector<int64_t> ids;
    for (int64_t t = 0; t < T; ++t)
      for (int64_t j = 0; j < c.k; ++j) ids.push_back(c.all_to_expert0 ? 0 : (t * 7 + j * 3 + r) % c.E);
    if (!c.all_to_expert0)  // distinct experts per token, as top-k gives
      for (int64_t t = 0; t < T; ++t)
        for (int64_t j = 0; j < c.k; ++j) ids[t * c.k + j] = (t + r + j) % c.E;
    Tensor idx = from_vector<int64_t>(ids, {T, c.k});
    Tensor w = softmax(randn({T, c.k}, g, DType::F64));
    Tensor xr = x.clone().detach().requires_grad_(true), wr = w.clone().detach().requires_grad_(true);
    auto [y_ep, counts] = moe(xr, idx, wr, W, c.E, pg);
    Tensor xl = x.clone().detach().requires_grad_(true), wl = w.clone().detach().requires_grad_(true);
    auto [y_local, counts_local] = moe(xl, idx, wl, W, c.E, nullptr);
    expect_near_vec_d(y_ep.to_vector<double>(), y_local.to_vector<double>(), 1e-12);
    // every routed pair arrived somewhere: sum over ranks of received rows = sum of T*k
    double got = pg->all_reduce(from_vector<double>({(double)sum(counts.to(DType::F64)).item<double>()}, {1}))
                     .to_vector<double>()[0];
    double sent = pg->all_reduce(from_vector<double>({(double)(T * c.k)}, {1})).to_vector<double>()[0];
    EXPECT_EQ(got, sent);
    // gradients (into x and the router weights) equal the local computation's
    Generator gy(2000 + r);
    Tensor dy = randn(y_ep.shape(), gy, DType::F64);
    sum(mul(y_ep, dy)).backward();
    sum(mul(y_local, dy)).backward();
    expect_near_vec_d(xr.grad().to_vector<double>(), xl.grad().to_vector<double>(), 1e-12);
    expect_near_vec_d(wr.grad().to_vector<double>(), wl.grad().to_vector<double>(), 1e-12);
  }
}

// The hierarchical dispatch (DeepEP's two-level exchange) on the world split as H hosts of L ranks (every L
// dividing the world: one host, one rank per host, and between), with experts repeated on one host, spread
// over hosts, all on one expert, weights on the outputs or the inputs: outputs and the gradients into the
// tokens and the routing weights equal the local computation's; the rows it moves between "hosts" are the
// distinct (token, host) pairs, the rows each rank's experts see the (token, expert) pairs.
TEST(MoeDispatch, HierarchicalEqualsLocalOnEveryHostSplit) {
  PG pg = world();
  const int P = pg->size(), r = pg->rank();
  const int64_t H = 3;
  for (int L = 1; L <= P; ++L) {
    if (P % L) continue;
    ExpertComm ep{pg, pg->split([L](int g) { return g % L; }, [L](int g) { return g / L; }, "across"),
                  pg->split([L](int g) { return g / L; }, [L](int g) { return g % L; }, "within")};
    for (MoeCase c : {MoeCase{5, 2, 2 * P, false}, MoeCase{4, 1, P, true}, MoeCase{6, 4, 4 * P, false}}) {
      for (bool on_inputs : {false, true}) {
        SCOPED_TRACE(::testing::Message() << "L " << L << " T " << c.T << " k " << c.k << " E " << c.E << " skew "
                                          << c.all_to_expert0 << " on_inputs " << on_inputs);
        const int64_t T = c.T + r;
        Generator g(1000 + r), gw(7);
        Tensor x = randn({T, H}, g, DType::F64);
        Tensor W = randn({c.E, H, H}, gw, DType::F64);
        std::vector<int64_t> ids;
        for (int64_t t = 0; t < T; ++t)
          for (int64_t j = 0; j < c.k; ++j) ids.push_back(c.all_to_expert0 ? 0 : (t * 5 + j * (c.E / c.k + 1) + r) % c.E);
        Tensor idx = from_vector<int64_t>(ids, {T, c.k});
        Tensor w = softmax(randn({T, c.k}, g, DType::F64));
        auto run = [&](const Tensor& xi, const Tensor& wi, bool hier) {
          auto d = hier ? dispatch_by_host(xi, idx, wi, c.E, ep, on_inputs) : dispatch(xi, idx, wi, c.E, nullptr, on_inputs);
          const int64_t El = c.E / (hier ? P : 1), first = hier ? r * El : 0;
          Tensor y = tanh(grouped_linear(d.expert_input, slice(W, 0, first, first + El), Tensor(), d.tokens_per_local_expert));
          return std::make_pair(combine(y, *d.handle), d);
        };
        Tensor xh = x.clone().detach().requires_grad_(true), wh = w.clone().detach().requires_grad_(true);
        auto [y_h, dh] = run(xh, wh, true);
        Tensor xl = x.clone().detach().requires_grad_(true), wl = w.clone().detach().requires_grad_(true);
        auto [y_l, dl] = run(xl, wl, false);
        expect_near_vec_d(y_h.to_vector<double>(), y_l.to_vector<double>(), 1e-12);
        Generator gy(2000 + r);
        Tensor dy = randn(y_h.shape(), gy, DType::F64);
        sum(mul(y_h, dy)).backward();
        sum(mul(y_l, dy)).backward();
        expect_near_vec_d(xh.grad().to_vector<double>(), xl.grad().to_vector<double>(), 1e-12);
        expect_near_vec_d(wh.grad().to_vector<double>(), wl.grad().to_vector<double>(), 1e-12);
        // rows sent across hosts: one per (token, host of any of its experts)
        const int64_t El = c.E / P;
        int64_t want = 0;
        for (int64_t t = 0; t < T; ++t) {
          std::set<int64_t> hosts;
          for (int64_t j = 0; j < c.k; ++j) hosts.insert(ids[t * c.k + j] / El / L);
          want += (int64_t)hosts.size();
        }
        int64_t sent = 0;
        for (int64_t n : dh.handle->send1) sent += n;
        EXPECT_EQ(sent, want);
        // every (token, expert) pair became one expert row somewhere
        int64_t rows = 0;
        for (int64_t n : dh.tokens_per_local_expert) rows += n;
        const double got = pg->all_reduce(from_vector<double>({(double)rows}, {1})).to_vector<double>()[0];
        const double pairs = pg->all_reduce(from_vector<double>({(double)(T * c.k)}, {1})).to_vector<double>()[0];
        EXPECT_EQ(got, pairs);
      }
    }
  }
}

// Planned (meta, fake groups), 64 ranks as 8 hosts of 8, 256 experts, top-8: the expert rows are the standard
// dispatch's; between hosts a token moves once per host it reaches, at most 8 and, with its experts confined
// to 4 of 8 groups (one group a host), at most 4 — fewer rows than the standard dispatch's k per token.
TEST(MoeDispatch, PlannedHierarchicalMovesATokenOncePerHost) {
  if (world()->rank() != 0) return;
  const int P = 64, L = 8;
  std::vector<int> members(P);
  for (int i = 0; i < P; ++i) members[i] = i;
  PG g = ProcessGroup::fake(0, members, "ep");
  ExpertComm ep{g, g->split([](int x) { return x % L; }, [](int x) { return x / L; }, "across"),
                g->split([](int x) { return x / L; }, [](int x) { return x % L; }, "within")};
  const int64_t T = 4096, k = 8, E = 256, Hd = 16;
  Tensor x = empty({T, Hd}, DType::F32, Device::Meta), idx = empty({T, k}, DType::I64, Device::Meta);
  Tensor w = empty({T, k}, DType::F32, Device::Meta);
  auto flat = dispatch(x, idx, w, E, g);
  auto across = [](const Dispatched& d) {
    int64_t n = 0;
    for (size_t i = 1; i < d.handle->send1.size(); ++i) n += d.handle->send1[i];  // to the other hosts
    return n;
  };
  for (auto [groups, chosen] : {std::pair<int64_t, int64_t>{1, 1}, {8, 4}}) {
    SCOPED_TRACE(::testing::Message() << chosen << " of " << groups << " groups");
    auto h = dispatch_by_host(x, idx, w, E, ep, false, 0, groups, chosen);
    EXPECT_EQ(h.tokens_per_local_expert, flat.tokens_per_local_expert);
    EXPECT_EQ(h.expert_input.size(0), flat.expert_input.size(0));
    const int64_t moved = across(h);
    // every token reaches ~ 8 (1 - (7/8)^8 ...) hosts without groups, <= 4 with them; the standard dispatch
    // moves 7/8 of its T k rows to other hosts
    EXPECT_LT(moved, T * k * 7 / 8);
    if (chosen == 4) EXPECT_LE(moved, T * 4);
    else EXPECT_GT(moved, T * 4);
  }
}

TEST(MoeDispatch, LocalGradcheckThroughDispatchExpertsCombine) {
  if (world()->rank() != 0) return;
  Generator g(3);
  Tensor x = randn({4, 3}, g, DType::F64), W = randn({3, 3, 2}, g, DType::F64);
  Tensor idx = from_vector<int64_t>({0, 2, 2, 0, 0, 1, 2, 1}, {4, 2});
  Tensor w = softmax(randn({4, 2}, g, DType::F64));
  titan::testing::gradcheck(
      [&](const std::vector<Tensor>& t) {
        auto d = dispatch(t[0], idx, t[2], 3);
        return combine(grouped_linear(d.expert_input, t[1], Tensor(), d.tokens_per_local_expert), *d.handle);
      },
      {x, W, w});
}

// weights_on_inputs (Llama 4): each chosen expert sees its weight times the token, its output joins the token
// unweighted: against that sum computed by hand, and gradchecked through a nonlinear expert (where the two
// placements differ)
TEST(MoeDispatch, WeightsOnInputsScaleTheExpertsInputs) {
  if (world()->rank() != 0) return;
  Generator g(5);
  Tensor x = randn({4, 3}, g, DType::F64), W = randn({3, 3, 2}, g, DType::F64);
  Tensor idx = from_vector<int64_t>({0, 2, 2, 0, 0, 1, 2, 1}, {4, 2});
  Tensor w = sigmoid(randn({4, 2}, g, DType::F64));
  auto expert = [](const Tensor& rows, const Tensor& Wt, const std::vector<int64_t>& counts) {
    return tanh(grouped_linear(rows, Wt, Tensor(), counts));  // [R, 2]: nonlinear in its input
  };
  auto d = dispatch(x, idx, w, 3, nullptr, true);
  const std::vector<double> got = combine(expert(d.expert_input, W, d.tokens_per_local_expert), *d.handle).to_vector<double>();
  const auto xv = x.to_vector<double>(), Wv = W.to_vector<double>(), wv = w.to_vector<double>();
  const auto iv = idx.to_vector<int64_t>();
  for (int64_t t = 0; t < 4; ++t)
    for (int64_t o = 0; o < 2; ++o) {
      double want = 0;
      for (int64_t k = 0; k < 2; ++k) {
        const int64_t e = iv[t * 2 + k];
        double a = 0;
        for (int64_t i = 0; i < 3; ++i) a += wv[t * 2 + k] * xv[t * 3 + i] * Wv[(e * 3 + i) * 2 + o];
        want += std::tanh(a);
      }
      EXPECT_NEAR(got[t * 2 + o], want, 1e-12) << "token " << t << " out " << o;
    }
  titan::testing::gradcheck(
      [&](const std::vector<Tensor>& t) {
        auto dd = dispatch(t[0], idx, t[2], 3, nullptr, true);
        return combine(expert(dd.expert_input, t[1], dd.tokens_per_local_expert), *dd.handle);
      },
      {x, W, w});
}
