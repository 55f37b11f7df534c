// src/tensor/huge_pages.h — asks the kernel to back a large, not yet touched buffer with transparent huge pages.
//
// The planner fills buffers of hundreds of MiB (a 16k-chip plan's timeline slices and cost events) once, front
// to back; with 4 KiB pages every page's first touch is a page fault, which under a paravirtualized kernel was a
// fifth of a PP 64 plan's time. madvise(MADV_HUGEPAGE) on the buffer's 2 MiB-aligned interior lets one fault map
// 2 MiB where the system allows it (transparent_hugepage "madvise" or "always"); elsewhere, and on other
// systems, it does nothing. Only a hint: contents and sizes are unchanged.
// Where the kernel may compact memory synchronously to find a huge page for an advised region (transparent_hugepage
// defrag "always", "madvise" or "defer+madvise"), the hint is not given: on such a machine (2026-12-06, defrag
// "madvise") it made the GPT 1008B plan (PP 64, 512 micro-batches) take 6.3-7.3 s against 4.4-4.7 s without it,
// the system time 4.1-5.8 s against 2.7 s (three runs each; why the faults cost more there was not established).
#pragma once
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <string>
#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace titan {

// Whether an advised region's fault may wait for the kernel to compact memory (read once).
inline bool huge_page_faults_compact() {
  static const bool compact = [] {
    std::ifstream f("/sys/kernel/mm/transparent_hugepage/defrag");
    std::string s;
    std::getline(f, s);
    return s.find("[always]") != std::string::npos || s.find("[madvise]") != std::string::npos ||
           s.find("[defer+madvise]") != std::string::npos;
  }();
  return compact;
}

inline void advise_huge_pages(const void* p, size_t bytes) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  constexpr uintptr_t kHuge = uintptr_t(2) << 20;
  if (bytes < 2 * kHuge || p == nullptr || huge_page_faults_compact()) return;
  const uintptr_t a = (reinterpret_cast<uintptr_t>(p) + kHuge - 1) & ~(kHuge - 1);
  const uintptr_t b = (reinterpret_cast<uintptr_t>(p) + bytes) & ~(kHuge - 1);
  if (b > a) madvise(reinterpret_cast<void*>(a), b - a, MADV_HUGEPAGE);  // a hint: its failure changes nothing
#else
  (void)p;
  (void)bytes;
#endif
}

}  // namespace titan
