// src/tensor/tensor.h — the n-d tensor.
//
// Layout: shape, strides (in elements) and an offset into a shared Storage.
// reshape/view/transpose/permute/slice/unsqueeze return views sharing the
// storage whenever the layout allows (reshape copies only a non-viewable
// layout). Contiguity rule: kernels read contiguous inputs; an op that gets a
// non-contiguous view materializes it once at entry (`contiguous()` is free
// for a contiguous tensor). matmul/linear instead hand transposed views to
// BLAS as transpose flags, without a copy.
//
// Ops are functional (they return new tensors). The only in-place writes are
// explicit: optimizer updates and gradient accumulation, under no-grad.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "device/device.h"
#include "src/tensor/dtype.h"
#include "src/tensor/error.h"
#include "src/tensor/memory.h"
#include "src/tensor/shape.h"
#include "src/tensor/storage.h"

namespace titan {

namespace autograd {
struct Node;
}
class Tensor;
using GradHook = std::function<void(const Tensor& grad)>;

struct TensorImpl {
  Shape shape;
  Shape strides;
  int64_t offset = 0;
  DType dtype = DType::F32;
  Device device = Device::CPU;
  std::shared_ptr<Storage> storage;
  // autograd
  bool requires_grad = false;
  std::shared_ptr<TensorImpl> grad;        // leaves only
  std::shared_ptr<autograd::Node> grad_fn;  // non-leaves only
  int output_nr = 0;
  std::vector<GradHook> grad_ready_hooks;  // fired when a leaf's grad is complete for a backward
  std::string name;
};

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  bool defined() const { return impl_ != nullptr; }
  const std::shared_ptr<TensorImpl>& impl() const { return impl_; }

  // --- metadata
  const Shape& shape() const { return check_impl()->shape; }
  const Shape& strides() const { return check_impl()->strides; }
  int64_t offset() const { return impl_->offset; }
  int64_t dim() const { return (int64_t)shape().size(); }
  int64_t size(int64_t d) const;
  int64_t numel() const { return titan::numel(shape()); }
  int64_t nbytes() const { return numel() * (int64_t)dtype_size(dtype()); }
  DType dtype() const { return check_impl()->dtype; }
  Device device() const { return check_impl()->device; }
  bool is_meta() const { return device() == Device::Meta; }
  bool is_contiguous() const;
  const std::string& name() const { return impl_->name; }
  Tensor& set_name(std::string n) {
    impl_->name = std::move(n);
    return *this;
  }

  // --- data (cpu only; checks the dtype)
  template <typename T>
  T* data() const {
    check_data(dtype_of<T>::value);
    return static_cast<T*>(impl_->storage->data()) + impl_->offset;
  }
  void* raw_data() const;
  template <typename T>
  T item() const;
  template <typename T>
  std::vector<T> to_vector() const;  // contiguous copy of the elements
  std::string to_string(int max_elems = 16) const;

  // --- views and copies (differentiable; defined in src/ops/shape_ops.cpp)
  Tensor contiguous() const;
  Tensor reshape(const Shape& s) const;
  Tensor transpose(int64_t d0, int64_t d1) const;
  Tensor permute(const Shape& dims) const;
  Tensor slice(int64_t dim, int64_t start, int64_t end) const;
  Tensor unsqueeze(int64_t d) const;
  Tensor squeeze(int64_t d) const;
  Tensor clone() const;
  Tensor to(DType t) const;

  // --- storage surgery (FSDP's resharding, sequence parallel's re-gather): the buffer behind this tensor
  // and every view and saved alias of it, freed and refilled in place. The tensor must own its whole
  // buffer (offset 0, contiguous, as many bytes as it has): release / refill / adopt check it.
  bool owns_whole_storage() const;
  void release_storage() const;                   // frees the bytes; the views keep their (empty) storage
  void refill_storage() const;                    // allocates them again; values undefined until written
  void adopt_storage(const Tensor& from) const;   // a released buffer takes `from`'s bytes (same size)
  void set_storage_category(MemoryCategory c) const;  // charges the buffer to another memory category

  // --- autograd
  bool requires_grad() const { return impl_ && impl_->requires_grad; }
  Tensor& requires_grad_(bool r = true);
  bool is_leaf() const { return impl_->grad_fn == nullptr; }
  Tensor grad() const { return impl_->grad ? Tensor(impl_->grad) : Tensor(); }
  void set_grad(const Tensor& g) { impl_->grad = g.impl_; }
  void zero_grad() { impl_->grad.reset(); }
  const std::shared_ptr<autograd::Node>& grad_fn() const { return impl_->grad_fn; }
  // Shares storage, drops the graph.
  Tensor detach() const;
  // Runs reverse mode from this tensor (a scalar unless `grad` is given).
  void backward(const Tensor& grad = Tensor(), bool retain_graph = false) const;
  // Leaf only: called with the final gradient once every contribution of the
  // current backward pass has been accumulated (FSDP reduce-scatters here).
  void register_grad_ready_hook(GradHook h) const;

 private:
  const TensorImpl* check_impl() const {
    if (!impl_) fail("Tensor: use of an undefined tensor");
    return impl_.get();
  }
  void check_data(DType want) const;
  std::shared_ptr<TensorImpl> impl_;
};

// --- factories (device defaults to the DeviceScope's, normally cpu)
Device default_device();
class DeviceScope {  // RAII: factories inside create tensors on `d` (e.g. meta)
 public:
  explicit DeviceScope(Device d);
  ~DeviceScope();
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  Device prev_;
};

Tensor empty(const Shape& s, DType t = DType::F32, Device d = default_device());
Tensor zeros(const Shape& s, DType t = DType::F32, Device d = default_device());
Tensor ones(const Shape& s, DType t = DType::F32, Device d = default_device());
Tensor full(const Shape& s, double value, DType t = DType::F32, Device d = default_device());
Tensor arange(int64_t n, DType t = DType::I64, Device d = default_device());
template <typename T>
Tensor from_vector(const std::vector<T>& v, const Shape& s);
Tensor empty_like(const Tensor& x);
Tensor zeros_like(const Tensor& x);

// Deterministic random numbers (mt19937_64, own Box-Muller so every platform
// draws the same values from the same seed).
class Generator {
 public:
  explicit Generator(uint64_t seed = 0);
  double uniform();  // [0, 1)
  double normal();
  uint64_t next_u64();
  uint64_t seed() const { return seed_; }
  std::string state() const;           // serializable
  void set_state(const std::string& s);

 private:
  uint64_t seed_;
  struct Impl;
  std::shared_ptr<Impl> impl_;
};
Tensor randn(const Shape& s, Generator& g, DType t = DType::F32, double std = 1.0, Device d = default_device());
Tensor rand_uniform(const Shape& s, Generator& g, double lo, double hi, DType t = DType::F32,
                    Device d = default_device());

// In-place helpers (no autograd; for optimizers, grad accumulation, loaders)
void fill_(const Tensor& t, double v);
void copy_(const Tensor& dst, const Tensor& src);  // shapes must match; handles strides and dtype casts

}  // namespace titan
