// src/tensor/huge_pages.h — asks the kernel to back a large, not yet touched buffer with transparent huge pages.
//
// The planner fills buffers of hundreds of MiB (a 16k-chip plan's timeline slices and cost events) once, front
// to back; with 4 KiB pages every page's first touch is a page fault, which under a paravirtualized kernel was a
// fifth of a PP 64 plan's time. madvise(MADV_HUGEPAGE) on the buffer's 2 MiB-aligned interior lets one fault map
// 2 MiB where the system allows it (transparent_hugepage "madvise" or "always"); elsewhere, and on other
// systems, it does nothing. Only a hint: contents and sizes are unchanged.
#pragma once
#include <cstddef>
#include <cstdint>
#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace titan {

inline void advise_huge_pages(const void* p, size_t bytes) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  constexpr uintptr_t kHuge = uintptr_t(2) << 20;
  if (bytes < 2 * kHuge || p == nullptr) return;
  const uintptr_t a = (reinterpret_cast<uintptr_t>(p) + kHuge - 1) & ~(kHuge - 1);
  const uintptr_t b = (reinterpret_cast<uintptr_t>(p) + bytes) & ~(kHuge - 1);
  if (b > a) madvise(reinterpret_cast<void*>(a), b - a, MADV_HUGEPAGE);  // a hint: its failure changes nothing
#else
  (void)p;
  (void)bytes;
#endif
}

}  // namespace titan
