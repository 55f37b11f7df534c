// src/tensor/storage.h — a refcounted buffer shared by a tensor and its views.
// Meta storage has data() == nullptr but still registers its bytes with the
// MemoryTracker, so planning runs see real memory figures.
#pragma once
#include <cstddef>
#include <cstdint>

#include "device/device.h"
#include "src/tensor/memory.h"

namespace titan {

class Storage {
 public:
  Storage(size_t nbytes, Device device);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }
  MemoryCategory category() const { return category_; }
  // Moves this buffer's bytes to another category (e.g. a leaf's grad buffer
  // is charged to Gradients whatever scope created it).
  void set_category(MemoryCategory c);
  // FSDP resharding: free the data (views and saved aliases keep the Storage
  // object) and later allocate it again before it is read.
  void release();
  void materialize();
  // Released storage takes `from`'s buffer (same size and device) instead of allocating and copying: a
  // freed activation refilled by a collective's fresh result (sequence-parallel re-gather). `from` is left
  // released; the bytes are charged to this storage's category.
  void adopt(Storage& from);
  bool resident() const { return device_ == Device::Meta || data_ != nullptr; }

 private:
  void* data_ = nullptr;
  size_t nbytes_;
  Device device_;
  MemoryCategory category_;
  MemoryTracker* tracker_;  // the tracker its bytes are charged to (the one current at its creation)
  bool counted_ = true;
};

}  // namespace titan
