// Tensor basics: views share storage, contiguity, meta tensors and memory
// accounting, RNG determinism, error messages.
#include <gtest/gtest.h>

#include "src/ops/ops.h"
#include "tests/gradcheck.h"

using namespace titan;

TEST(Tensor, ViewsShareStorage) {
  Tensor x = from_vector<float>({0, 1, 2, 3, 4, 5}, {2, 3});
  Tensor t = x.transpose(0, 1);
  EXPECT_EQ(t.shape(), (Shape{3, 2}));
  EXPECT_EQ(t.strides(), (Shape{1, 3}));
  EXPECT_FALSE(t.is_contiguous());
  EXPECT_EQ(t.impl()->storage, x.impl()->storage);
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{0, 3, 1, 4, 2, 5}));
  Tensor r = x.reshape({3, 2});
  EXPECT_EQ(r.impl()->storage, x.impl()->storage);  // contiguous reshape is a view
  Tensor s = x.slice(1, 1, 3);
  EXPECT_EQ(s.impl()->storage, x.impl()->storage);
  EXPECT_EQ(s.to_vector<float>(), (std::vector<float>{1, 2, 4, 5}));
  Tensor tc = t.contiguous();
  EXPECT_TRUE(tc.is_contiguous());
  EXPECT_NE(tc.impl()->storage, x.impl()->storage);
  // reshape of a non-contiguous view copies
  Tensor tr = t.reshape({6});
  EXPECT_EQ(tr.to_vector<float>(), (std::vector<float>{0, 3, 1, 4, 2, 5}));
}

TEST(Tensor, FactoriesAndItem) {
  EXPECT_EQ(zeros({2, 2}).to_vector<float>(), std::vector<float>(4, 0.f));
  EXPECT_EQ(full({3}, 2.5).to_vector<float>(), std::vector<float>(3, 2.5f));
  EXPECT_EQ(arange(4).to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_FLOAT_EQ(full({1}, 7.0).item<float>(), 7.0f);
  EXPECT_THROW(zeros({2}).item<float>(), Error);
}

TEST(Tensor, GeneratorIsDeterministicAndSerializable) {
  Generator a(42), b(42);
  Tensor x = randn({100}, a), y = randn({100}, b);
  EXPECT_EQ(x.to_vector<float>(), y.to_vector<float>());
  std::string st = a.state();
  double n1 = a.normal();
  Generator c(0);
  c.set_state(st);
  EXPECT_EQ(c.normal(), n1);
  // statistics of N(0, 1)
  Generator g(7);
  Tensor z = randn({20000}, g, DType::F64);
  auto v = z.to_vector<double>();
  double m = 0, s2 = 0;
  for (double e : v) m += e;
  m /= v.size();
  for (double e : v) s2 += (e - m) * (e - m);
  EXPECT_NEAR(m, 0.0, 0.03);
  EXPECT_NEAR(std::sqrt(s2 / v.size()), 1.0, 0.03);
}

TEST(Tensor, MetaHasNoDataButCountsBytes) {
  auto& tr = MemoryTracker::get(Device::Meta);
  int64_t before = tr.stats().current[(int)MemoryCategory::Parameters];
  {
    MemoryCategoryScope cat(MemoryCategory::Parameters);
    DeviceScope meta(Device::Meta);
    Tensor w = empty({5120, 25600});  // a Qwen3-32B MLP matrix: 500 MiB, no allocation
    EXPECT_TRUE(w.is_meta());
    EXPECT_EQ(tr.stats().current[(int)MemoryCategory::Parameters] - before, 5120LL * 25600 * 4);
    EXPECT_THROW(w.data<float>(), Error);
    Tensor x = empty({2, 4096, 5120});
    Tensor y = linear(x, w.transpose(0, 1).contiguous());
    EXPECT_EQ(y.shape(), (Shape{2, 4096, 25600}));
  }
  EXPECT_EQ(tr.stats().current[(int)MemoryCategory::Parameters], before);
  EXPECT_GE(tr.stats().peak[(int)MemoryCategory::Parameters] - before, 5120LL * 25600 * 4);
}

// A MetaTrackerScope charges the meta storages created under it to its own tracker, until they die wherever
// that is (the process's meta tracker sees none of it); cpu storages keep the process's tracker.
TEST(Tensor, MetaTrackerScopeCountsItsOwnStorages) {
  auto& global = MemoryTracker::get(Device::Meta);
  const int64_t before = global.stats().total_current;
  MemoryTracker own;
  Tensor outlives;
  {
    MetaTrackerScope scope(own);
    EXPECT_EQ(&MemoryTracker::get(Device::Meta), &own);
    EXPECT_EQ(&MemoryTracker::get(Device::CPU), &MemoryTracker::get(Device::CPU));
    Tensor a = empty({256}, DType::F32, Device::Meta);
    outlives = empty({1024}, DType::F32, Device::Meta);
    EXPECT_EQ(own.stats().total_current, 4 * (256 + 1024));
    EXPECT_EQ(global.stats().total_current, before);
  }
  EXPECT_EQ(&MemoryTracker::get(Device::Meta), &global);
  EXPECT_EQ(own.stats().total_current, 4 * 1024);
  outlives.impl()->storage->set_category(MemoryCategory::Gradients);  // moves within its own tracker
  EXPECT_EQ(own.stats().current[(int)MemoryCategory::Gradients], 4 * 1024);
  outlives = Tensor();
  EXPECT_EQ(own.stats().total_current, 0);
  EXPECT_EQ(own.stats().total_peak, 4 * (256 + 1024));
  EXPECT_EQ(global.stats().total_current, before);
}

TEST(Tensor, StorageCategoryCanMove) {
  auto& tr = MemoryTracker::get(Device::Meta);
  Tensor t = empty({1024}, DType::F32, Device::Meta);
  int64_t g0 = tr.stats().current[(int)MemoryCategory::Gradients];
  t.impl()->storage->set_category(MemoryCategory::Gradients);
  EXPECT_EQ(tr.stats().current[(int)MemoryCategory::Gradients] - g0, 4096);
}

TEST(Tensor, PoolReusesBuffers) {
  empty_cache();
  { Tensor a = empty({1 << 20}); }
  int64_t r1 = pool_reserved_bytes();
  { Tensor b = empty({1 << 20}); }
  EXPECT_EQ(pool_reserved_bytes(), r1);  // served from the cache
  empty_cache();
  EXPECT_EQ(pool_reserved_bytes(), 0);
}

// Sizes that move from step to step (an MoE layer's rows) reuse the pool: a large request takes the smallest free
// block up to twice its size, which goes back to its own class; a request under half a block's size does not.
TEST(Tensor, PoolServesAMovingSizeFromALargerFreeBlock) {
  empty_cache();
  const int64_t mib = (1 << 20) / 4;  // floats
  { Tensor a = empty({3 * mib}); }
  const int64_t r1 = pool_reserved_bytes();
  EXPECT_GE(r1, 3 << 20);
  EXPECT_LE(r1, (3 << 20) + (3 << 20) / 8);  // its class: at most 1/8 above
  { Tensor b = empty({2 * mib}); }
  EXPECT_EQ(pool_reserved_bytes(), r1);  // the 3 MiB block served it
  { Tensor c = empty({3 * mib - 1000}); }
  EXPECT_EQ(pool_reserved_bytes(), r1);  // and went back to its own class
  { Tensor e = empty({mib}); }  // under half of the free 3 MiB block: a block of its own
  EXPECT_EQ(pool_reserved_bytes(), r1 + (1 << 20));
  empty_cache();
  EXPECT_EQ(pool_reserved_bytes(), 0);
}

TEST(Tensor, ErrorsNameOpAndShapes) {
  Tensor a = zeros({2, 3}), b = zeros({4, 5});
  try {
    add(a, b);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("add"), std::string::npos) << m;
    EXPECT_NE(m.find("[2, 3]"), std::string::npos) << m;
    EXPECT_NE(m.find("[4, 5]"), std::string::npos) << m;
  }
  Tensor d = zeros({2, 3}, DType::F64);
  EXPECT_THROW(add(a, d), Error);
  Tensor m = empty({2, 3}, DType::F32, Device::Meta);
  try {
    mul(a, m);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("device mismatch"), std::string::npos) << e.what();
  }
  EXPECT_THROW(a.reshape({4}), Error);
  EXPECT_THROW(a.transpose(0, 2), Error);
  EXPECT_THROW(zeros({2}, DType::I64).requires_grad_(true), Error);
  EXPECT_THROW(zeros({2}, DType::BF16).to_vector<float>(), Error);
}
