#include "src/tensor/memory.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <sstream>
#include <unordered_map>
#include <vector>

#include "src/tensor/error.h"

namespace titan {

const char* memory_category_name(MemoryCategory c) {
  static const char* names[] = {"parameters", "gradients", "optimizer_state", "activations", "communication", "other"};
  return names[static_cast<int>(c)];
}

namespace {
thread_local MemoryTracker* t_meta_tracker = nullptr;  // the innermost MetaTrackerScope's
thread_local MemoryCategory t_category = MemoryCategory::Activations;

std::string gib(int64_t b) {
  std::ostringstream os;
  os.precision(3);
  os << std::fixed << (double)b / (1024.0 * 1024.0 * 1024.0) << "GiB";
  return os.str();
}
}  // namespace

MemoryTracker& MemoryTracker::get(Device d) {
  static MemoryTracker cpu, meta;
  if (d == Device::CPU) return cpu;
  return t_meta_tracker ? *t_meta_tracker : meta;
}

MetaTrackerScope::MetaTrackerScope(MemoryTracker& t) : prev_(t_meta_tracker) { t_meta_tracker = &t; }
MetaTrackerScope::~MetaTrackerScope() { t_meta_tracker = prev_; }

void MemoryTracker::add(MemoryCategory c, int64_t bytes) {
  std::lock_guard<std::mutex> lk(mu_);
  int i = static_cast<int>(c);
  s_.current[i] += bytes;
  if (s_.current[i] > s_.peak[i]) s_.peak[i] = s_.current[i];
  s_.total_current += bytes;
  if (s_.total_current > s_.total_peak) s_.total_peak = s_.total_current;
}

void MemoryTracker::sub(MemoryCategory c, int64_t bytes) {
  std::lock_guard<std::mutex> lk(mu_);
  s_.current[static_cast<int>(c)] -= bytes;
  s_.total_current -= bytes;
}

MemoryStats MemoryTracker::stats() const {
  std::lock_guard<std::mutex> lk(mu_);
  return s_;
}

void MemoryTracker::reset_peak() {
  std::lock_guard<std::mutex> lk(mu_);
  s_.peak = s_.current;
  s_.total_peak = s_.total_current;
}

void MemoryTracker::raise_peak(const std::array<int64_t, kNumMemoryCategories>& peak, int64_t total_peak) {
  std::lock_guard<std::mutex> lk(mu_);
  for (int i = 0; i < kNumMemoryCategories; ++i) s_.peak[i] = std::max(s_.peak[i], peak[i]);
  s_.total_peak = std::max(s_.total_peak, total_peak);
}

void MemoryCharge::adjust_by(const std::array<int64_t, kNumMemoryCategories>& bytes) {
  for (int i = 0; i < kNumMemoryCategories; ++i) {  // releases first: a shift between categories raises no peak
    if (bytes[i] < 0) t_->sub(static_cast<MemoryCategory>(i), -bytes[i]);
  }
  for (int i = 0; i < kNumMemoryCategories; ++i) {
    if (bytes[i] > 0) t_->add(static_cast<MemoryCategory>(i), bytes[i]);
    bytes_[i] += bytes[i];
  }
}

std::array<int64_t, kNumMemoryCategories> MemoryCharge::negated() const {
  std::array<int64_t, kNumMemoryCategories> n{};
  for (int i = 0; i < kNumMemoryCategories; ++i) n[i] = -bytes_[i];
  return n;
}

std::string MemoryTracker::summary() const {
  MemoryStats s = stats();
  std::ostringstream os;
  for (int i = 0; i < kNumMemoryCategories; ++i)
    os << memory_category_name(static_cast<MemoryCategory>(i)) << " " << gib(s.current[i]) << " (peak "
       << gib(s.peak[i]) << "), ";
  os << "total " << gib(s.total_current) << " (peak " << gib(s.total_peak) << ")";
  return os.str();
}

MemoryCategoryScope::MemoryCategoryScope(MemoryCategory c) : prev_(t_category) { t_category = c; }
MemoryCategoryScope::~MemoryCategoryScope() { t_category = prev_; }
MemoryCategory MemoryCategoryScope::current() { return t_category; }

// ---- caching pool ----------------------------------------------------------
namespace {
struct Pool {
  std::mutex mu;
  std::map<size_t, std::vector<void*>> free_lists;  // size class -> free blocks of it
  std::unordered_map<void*, size_t> lent;           // a block handed out larger than its request's class
  int64_t reserved = 0;
};
Pool& pool() {
  static Pool* p = new Pool();  // leaked on purpose: outlives static tensors
  return *p;
}
// Size classes: 64 B steps up to 4 KiB, 4 KiB steps up to 256 KiB, then eight classes per power of two (a
// buffer at most 1/8 larger than asked).
size_t bucket(size_t n) {
  if (n <= 4096) return (n + 63) & ~size_t(63);
  if (n <= (256u << 10)) return (n + 4095) & ~size_t(4095);
  const int top = 63 - __builtin_clzll((unsigned long long)(n - 1));  // 2^top < n <= 2^(top + 1)
  const size_t step = size_t(1) << (top - 3);                          // (2^top, 2^(top+1)] in 8 steps
  return (n + step - 1) & ~(step - 1);
}
}  // namespace

int64_t physical_memory_bytes() {
  int64_t bytes = (int64_t)sysconf(_SC_PHYS_PAGES) * (int64_t)sysconf(_SC_PAGESIZE);
  // a container's limit where one is set (cgroup v2, then v1): the memory this process may actually use
  for (const char* limit : {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}) {
    if (FILE* f = std::fopen(limit, "r")) {
      long long v = 0;
      if (std::fscanf(f, "%lld", &v) == 1 && v > 0 && v < bytes) bytes = v;  // "max" reads as no number
      std::fclose(f);
    }
  }
  return bytes;
}

namespace {
std::atomic<int64_t> g_budget{0};
}
int64_t memory_budget_bytes() {
  static const int64_t machine = physical_memory_bytes();
  const int64_t b = g_budget.load();
  return b > 0 ? b : machine;
}
void set_memory_budget_bytes(int64_t bytes) { g_budget.store(bytes); }

void check_memory_budget(double bytes, const std::string& what) {
  const double budget = (double)memory_budget_bytes();
  if (bytes >= 0 && bytes <= budget) return;
  auto gib = [](double b) {
    char s[64];
    std::snprintf(s, sizeof s, "%.3g GiB", b / (1024.0 * 1024.0 * 1024.0));
    return std::string(s);
  };
  char n[64];
  std::snprintf(n, sizeof n, "%.0f", bytes);
  fail(what, ": needs ", n, " bytes (", gib(bytes), "), more than ",
       budget == (double)physical_memory_bytes() ? "this machine's memory (" : "the memory budget (", gib(budget),
       "); refused before allocating: the size is damaged or mistyped, or this job needs a bigger machine");
}

// A step whose sizes move from step to step (an MoE layer's rows follow its routing) would miss an exact-size
// pool every step and fault in fresh pages, which the kernel zeroes (the EP 2 closed-loop layout: ~4k page faults
// a step and rank, a 7.6 MB gather 16 ms on a 2-core VM). So a block of 256 KiB or more is served from the
// smallest free block of its class up to twice its size (best fit; the block keeps its class, `lent`).
void* pool_allocate(size_t nbytes) {
  size_t b = bucket(nbytes == 0 ? 1 : nbytes);
  Pool& p = pool();
  {
    std::lock_guard<std::mutex> lk(p.mu);
    const size_t most = b >= (256u << 10) ? 2 * b : b;
    for (auto it = p.free_lists.lower_bound(b); it != p.free_lists.end() && it->first <= most; ++it) {
      if (it->second.empty()) continue;
      void* ptr = it->second.back();
      it->second.pop_back();
      if (it->first != b) p.lent[ptr] = it->first;
      return ptr;
    }
  }
  check_memory_budget((double)nbytes, "allocate: a tensor");  // a size the pool already holds passed it before
  void* ptr = std::aligned_alloc(64, b);
  if (!ptr) {
    empty_cache();
    ptr = std::aligned_alloc(64, b);
  }
  TITAN_CHECK(ptr != nullptr, "allocate: out of host memory allocating ", nbytes, " bytes (pool reserved ",
              pool_reserved_bytes(), " bytes)");
  std::lock_guard<std::mutex> lk(p.mu);
  p.reserved += (int64_t)b;
  return ptr;
}

void pool_free(void* ptr, size_t nbytes) {
  if (!ptr) return;
  Pool& p = pool();
  std::lock_guard<std::mutex> lk(p.mu);
  size_t b = bucket(nbytes == 0 ? 1 : nbytes);
  if (!p.lent.empty()) {
    auto it = p.lent.find(ptr);
    if (it != p.lent.end()) b = it->second, p.lent.erase(it);
  }
  p.free_lists[b].push_back(ptr);
}

void empty_cache() {
  Pool& p = pool();
  std::lock_guard<std::mutex> lk(p.mu);
  for (auto& [b, list] : p.free_lists) {
    for (void* ptr : list) std::free(ptr);
    p.reserved -= (int64_t)b * (int64_t)list.size();
    list.clear();
  }
}

int64_t pool_reserved_bytes() {
  Pool& p = pool();
  std::lock_guard<std::mutex> lk(p.mu);
  return p.reserved;
}

}  // namespace titan
