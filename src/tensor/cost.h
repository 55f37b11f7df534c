// src/tensor/cost.h — what each op would cost: FLOPs and bytes moved.
//
// Every op records (name, flops, bytes) when it runs, on cpu or meta. A
// CostScope (RAII) collects the totals and a per-op breakdown of everything
// recorded while it is alive on this thread; scopes nest. The simulator prices
// these records on a target chip; tests check FLOP counts on meta inputs.
//
// Conventions: a matmul of [M,K]x[K,N] is 2*M*N*K FLOPs; elementwise and
// normalization ops count the arithmetic per element given at each op;
// bytes = bytes read + bytes written by the kernel.
//
// A timed scope also attributes wall time: each op is charged the time from
// its record to the next op's record (or to the scope's end), i.e. its
// kernel plus its share of the framework overhead. No op needs a timer.
#pragma once
#include <cstdint>
#include <map>
#include <string>

namespace titan {

struct OpCost {
  int64_t calls = 0;
  double flops = 0;
  double bytes = 0;
  double seconds = 0;  // timed scopes only
};

class CostScope {
 public:
  explicit CostScope(bool timed = false);
  ~CostScope();
  CostScope(const CostScope&) = delete;
  CostScope& operator=(const CostScope&) = delete;
  double flops() const { return total_.flops; }
  double bytes() const { return total_.bytes; }
  int64_t calls() const { return total_.calls; }
  const std::map<std::string, OpCost>& by_op() const { return by_op_; }
  void reset();
  // Charges the time since the last op's record to that op (call before reading by_op()).
  void flush_time();

 private:
  friend void record_cost(const char*, double, double);
  CostScope* parent_;
  bool timed_;
  OpCost total_;
  std::map<std::string, OpCost> by_op_;
};

// Called by every op kernel (cheap when no scope is active).
void record_cost(const char* op, double flops, double bytes);

}  // namespace titan
