// src/tensor/memory.h — allocation with accounting by category.
//
// Every Storage (cpu or meta) registers its bytes with the MemoryTracker under
// the category current at creation (MemoryCategoryScope, RAII). Meta storage
// holds no data but counts the same bytes, so a meta run reports the memory a
// real run would need: parameters, gradients, optimizer state, activations,
// communication buffers, current and peak.
//
// CPU data comes from a caching pool of size classes (64 B steps to 4 KiB, 4 KiB
// steps to 256 KiB, then at most 1/8 above the request): a training step
// allocates about the same sizes every step, so after
// the first steps no buffer hits malloc/mmap (and the kernel's page zeroing)
// again; a block of 256 KiB or more may take a free block up to twice its size
// (sizes that follow an MoE routing move from step to step). `empty_cache()`
// hands the pool back.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>

#include "device/device.h"

namespace titan {

enum class MemoryCategory { Parameters = 0, Gradients, OptimizerState, Activations, Communication, Other };
constexpr int kNumMemoryCategories = 6;
const char* memory_category_name(MemoryCategory c);

struct MemoryStats {
  std::array<int64_t, kNumMemoryCategories> current{};
  std::array<int64_t, kNumMemoryCategories> peak{};
  int64_t total_current = 0;
  int64_t total_peak = 0;
};

class MemoryTracker {
 public:
  // The tracker storages of device d created on this thread charge: one per device kind, real (cpu) bytes and
  // planned (meta) bytes; a MetaTrackerScope alive on this thread gives meta storages its own.
  static MemoryTracker& get(Device d);
  void add(MemoryCategory c, int64_t bytes);
  void sub(MemoryCategory c, int64_t bytes);
  MemoryStats stats() const;
  void reset_peak();
  // Raises the peaks to at least these (a replayed stretch of a plan: cost_segment.h).
  void raise_peak(const std::array<int64_t, kNumMemoryCategories>& peak, int64_t total_peak);
  std::string summary() const;  // "params 1.2GiB, grads ..., peak ..."

 private:
  mutable std::mutex mu_;
  MemoryStats s_;
};

// RAII: meta storages created on this thread while alive are charged to `t` (a storage charges the tracker it
// was created under until it dies, wherever it is freed): plans of several pipeline stages made side by side
// on threads each count their own step. `t` must outlive every storage created in the scope.
class MetaTrackerScope {
 public:
  explicit MetaTrackerScope(MemoryTracker& t);
  ~MetaTrackerScope();
  MetaTrackerScope(const MetaTrackerScope&) = delete;
  MetaTrackerScope& operator=(const MetaTrackerScope&) = delete;

 private:
  MemoryTracker* prev_;
};

// RAII: bytes charged to a tracker with no buffer behind them, per category (negative: released), until it
// dies: what a replayed stretch of a meta plan holds (cost_segment.h). adjust() changes the charge.
class MemoryCharge {
 public:
  explicit MemoryCharge(MemoryTracker& t) : t_(&t) {}
  ~MemoryCharge() { adjust_by(negated()); }
  MemoryCharge(const MemoryCharge&) = delete;
  MemoryCharge& operator=(const MemoryCharge&) = delete;
  void adjust_by(const std::array<int64_t, kNumMemoryCategories>& bytes);
  const std::array<int64_t, kNumMemoryCategories>& bytes() const { return bytes_; }

 private:
  std::array<int64_t, kNumMemoryCategories> negated() const;
  MemoryTracker* t_;
  std::array<int64_t, kNumMemoryCategories> bytes_{};
};

// RAII: storages created inside are charged to `c`.
class MemoryCategoryScope {
 public:
  explicit MemoryCategoryScope(MemoryCategory c);
  ~MemoryCategoryScope();
  MemoryCategoryScope(const MemoryCategoryScope&) = delete;
  MemoryCategoryScope& operator=(const MemoryCategoryScope&) = delete;
  static MemoryCategory current();

 private:
  MemoryCategory prev_;
};

// This machine's memory (bytes).
int64_t physical_memory_bytes();
// The most one allocation may take: this machine's memory unless set lower (the fuzz harnesses set libFuzzer's
// limit). A size read from outside (a header, a shape, a count) is checked against it before anything is
// allocated, and every CPU tensor allocation is too: a file or config asking for more is refused, naming it.
int64_t memory_budget_bytes();
void set_memory_budget_bytes(int64_t bytes);  // <= 0: back to this machine's memory
// Throws titan::Error naming `what` and the size when `bytes` exceed the budget (or are not a finite size).
void check_memory_budget(double bytes, const std::string& what);

// The CPU caching pool (64-byte aligned buffers).
void* pool_allocate(size_t nbytes);
void pool_free(void* p, size_t nbytes);
void empty_cache();
int64_t pool_reserved_bytes();

}  // namespace titan
