#include "src/tensor/tensor.h"

#include <cmath>
#include <cstring>
#include <random>
#include <sstream>

#include "src/autograd/engine.h"
#include "src/tensor/iter.h"

namespace titan {

namespace {
thread_local Device t_default_device = Device::CPU;
}

Device default_device() { return t_default_device; }
DeviceScope::DeviceScope(Device d) : prev_(t_default_device) { t_default_device = d; }
DeviceScope::~DeviceScope() { t_default_device = prev_; }

int64_t Tensor::size(int64_t d) const { return shape()[wrap_dim(d, dim(), "Tensor::size")]; }

bool Tensor::is_contiguous() const {
  const auto& s = shape();
  const auto& st = strides();
  int64_t acc = 1;
  for (int64_t i = (int64_t)s.size() - 1; i >= 0; --i) {
    if (s[i] != 1 && st[i] != acc) return false;
    acc *= s[i];
  }
  return true;
}

void Tensor::check_data(DType want) const {
  check_impl();
  TITAN_CHECK(impl_->device == Device::CPU, "Tensor::data: tensor ", shape_str(impl_->shape),
              " is on the meta device and has no data (run the op on cpu tensors)");
  TITAN_CHECK(impl_->dtype == want, "Tensor::data: tensor is ", dtype_name(impl_->dtype), ", accessed as ",
              dtype_name(want));
}

void* Tensor::raw_data() const {
  check_impl();
  TITAN_CHECK(impl_->device == Device::CPU, "Tensor::raw_data: meta tensor has no data");
  return static_cast<char*>(impl_->storage->data()) + impl_->offset * (int64_t)dtype_size(impl_->dtype);
}

template <typename T>
T Tensor::item() const {
  TITAN_CHECK(numel() == 1, "Tensor::item: expected a one-element tensor, got shape ", shape_str(shape()));
  T out{};
  dispatch_all(dtype(), "Tensor::item", [&]<typename S>() { out = static_cast<T>(*data<S>()); });
  return out;
}
template float Tensor::item<float>() const;
template double Tensor::item<double>() const;
template int64_t Tensor::item<int64_t>() const;
template int32_t Tensor::item<int32_t>() const;
template bool Tensor::item<bool>() const;

template <typename T>
std::vector<T> Tensor::to_vector() const {
  Tensor c = contiguous();
  std::vector<T> v(numel());
  dispatch_all(dtype(), "Tensor::to_vector", [&]<typename S>() {
    const S* p = c.data<S>();
    for (int64_t i = 0; i < (int64_t)v.size(); ++i) v[i] = static_cast<T>(p[i]);
  });
  return v;
}
template std::vector<float> Tensor::to_vector<float>() const;
template std::vector<double> Tensor::to_vector<double>() const;
template std::vector<int64_t> Tensor::to_vector<int64_t>() const;
template std::vector<int32_t> Tensor::to_vector<int32_t>() const;

std::string Tensor::to_string(int max_elems) const {
  std::ostringstream os;
  os << "Tensor(" << shape_str(shape()) << ", " << dtype_name(dtype()) << ", " << device_name(device());
  if (!is_meta() && dtype() != DType::BF16) {
    auto v = to_vector<double>();
    os << ", [";
    for (int64_t i = 0; i < (int64_t)v.size() && i < max_elems; ++i) os << (i ? ", " : "") << v[i];
    if ((int64_t)v.size() > max_elems) os << ", ...";
    os << "]";
  }
  os << ")";
  return os.str();
}

Tensor& Tensor::requires_grad_(bool r) {
  check_impl();
  TITAN_CHECK(!r || is_floating(impl_->dtype), "requires_grad_: only floating tensors can require grad, got ",
              dtype_name(impl_->dtype));
  TITAN_CHECK(is_leaf(), "requires_grad_: can only be set on a leaf tensor (use detach() first)");
  impl_->requires_grad = r;
  return *this;
}

Tensor Tensor::detach() const {
  auto impl = std::make_shared<TensorImpl>();
  impl->shape = shape();
  impl->strides = strides();
  impl->offset = impl_->offset;
  impl->dtype = impl_->dtype;
  impl->device = impl_->device;
  impl->storage = impl_->storage;
  impl->name = impl_->name;
  return Tensor(impl);
}

void Tensor::backward(const Tensor& grad, bool retain_graph) const {
  autograd::backward({*this}, {grad}, retain_graph);
}

void Tensor::register_grad_ready_hook(GradHook h) const {
  TITAN_CHECK(is_leaf() && requires_grad(), "register_grad_ready_hook: tensor must be a leaf that requires grad");
  impl_->grad_ready_hooks.push_back(std::move(h));
}

// ---- factories -------------------------------------------------------------
Tensor empty(const Shape& s, DType t, Device d) {
  for (auto x : s) TITAN_CHECK(x >= 0, "empty: negative dimension in shape ", shape_str(s));
  auto impl = std::make_shared<TensorImpl>();
  impl->shape = s;
  impl->strides = contiguous_strides(s);
  impl->dtype = t;
  impl->device = d;
  impl->storage = std::make_shared<Storage>((size_t)numel(s) * dtype_size(t), d);
  return Tensor(impl);
}

void fill_(const Tensor& t, double v) {
  if (t.is_meta()) return;
  TITAN_CHECK(t.is_contiguous(), "fill_: expected a contiguous tensor");
  dispatch_all(t.dtype(), "fill_", [&]<typename T>() {
    T* p = t.data<T>();
    const T val = static_cast<T>(v);
    const int64_t n = t.numel();
#pragma omp parallel for schedule(static) if (n >= kParallelGrain)
    for (int64_t i = 0; i < n; ++i) p[i] = val;
  });
}

Tensor zeros(const Shape& s, DType t, Device d) {
  Tensor x = empty(s, t, d);
  if (d == Device::CPU) std::memset(x.raw_data(), 0, (size_t)x.nbytes());
  return x;
}
Tensor ones(const Shape& s, DType t, Device d) { return full(s, 1.0, t, d); }
Tensor full(const Shape& s, double value, DType t, Device d) {
  Tensor x = empty(s, t, d);
  fill_(x, value);
  return x;
}
Tensor arange(int64_t n, DType t, Device d) {
  Tensor x = empty({n}, t, d);
  if (d == Device::CPU)
    dispatch_all(t, "arange", [&]<typename T>() {
      T* p = x.data<T>();
      for (int64_t i = 0; i < n; ++i) p[i] = static_cast<T>(i);
    });
  return x;
}
template <typename T>
Tensor from_vector(const std::vector<T>& v, const Shape& s) {
  TITAN_CHECK((int64_t)v.size() == numel(s), "from_vector: ", v.size(), " values do not fill shape ", shape_str(s));
  Tensor x = empty(s, dtype_of<T>::value, Device::CPU);
  std::copy(v.begin(), v.end(), x.data<T>());
  return x;
}
template Tensor from_vector<float>(const std::vector<float>&, const Shape&);
template Tensor from_vector<double>(const std::vector<double>&, const Shape&);
template Tensor from_vector<int64_t>(const std::vector<int64_t>&, const Shape&);
template Tensor from_vector<int32_t>(const std::vector<int32_t>&, const Shape&);

Tensor empty_like(const Tensor& x) { return empty(x.shape(), x.dtype(), x.device()); }
Tensor zeros_like(const Tensor& x) { return zeros(x.shape(), x.dtype(), x.device()); }

void copy_(const Tensor& dst, const Tensor& src) {
  TITAN_CHECK(dst.shape() == src.shape(), "copy_: shape mismatch, dst ", shape_str(dst.shape()), " src ",
              shape_str(src.shape()));
  TITAN_CHECK(dst.device() == src.device(), "copy_: device mismatch, dst ", device_name(dst.device()), " src ",
              device_name(src.device()));
  if (dst.is_meta()) return;
  dispatch_all(dst.dtype(), "copy_", [&]<typename D>() {
    dispatch_all(src.dtype(), "copy_", [&]<typename S>() {
      D* d = static_cast<D*>(dst.raw_data());
      const S* s = static_cast<const S*>(src.raw_data());
      if (dst.is_contiguous() && src.is_contiguous()) {
        const int64_t n = dst.numel();
        if constexpr (std::is_same_v<D, S>) {
          std::memcpy(d, s, (size_t)n * sizeof(D));
        } else {
#pragma omp parallel for schedule(static) if (n >= kParallelGrain)
          for (int64_t i = 0; i < n; ++i) d[i] = static_cast<D>(s[i]);
        }
        return;
      }
      nd_rows<2>(dst.shape(), {dst.strides().data(), src.strides().data()},
                 [&](const std::array<int64_t, 2>& b, int64_t n, const std::array<int64_t, 2>& in) {
                   for (int64_t i = 0; i < n; ++i) d[b[0] + i * in[0]] = static_cast<D>(s[b[1] + i * in[1]]);
                 });
    });
  });
}

// ---- random ----------------------------------------------------------------
struct Generator::Impl {
  std::mt19937_64 eng;
  bool has_spare = false;
  double spare = 0;
};

Generator::Generator(uint64_t seed) : seed_(seed), impl_(std::make_shared<Impl>()) { impl_->eng.seed(seed); }
uint64_t Generator::next_u64() { return impl_->eng(); }
double Generator::uniform() { return (double)(impl_->eng() >> 11) * (1.0 / 9007199254740992.0); }
double Generator::normal() {
  if (impl_->has_spare) {
    impl_->has_spare = false;
    return impl_->spare;
  }
  double u1 = uniform(), u2 = uniform();
  if (u1 < 1e-300) u1 = 1e-300;
  double r = std::sqrt(-2.0 * std::log(u1)), th = 2.0 * M_PI * u2;
  impl_->spare = r * std::sin(th);
  impl_->has_spare = true;
  return r * std::cos(th);
}
std::string Generator::state() const {
  std::ostringstream os;
  os << impl_->eng << " " << impl_->has_spare << " ";
  os.precision(17);
  os << impl_->spare;
  return os.str();
}
void Generator::set_state(const std::string& s) {
  std::istringstream is(s);
  Impl next;  // read whole before anything changes: a malformed state leaves the generator as it was
  is >> next.eng >> next.has_spare >> next.spare;
  TITAN_CHECK(!is.fail(), "Generator::set_state: malformed RNG state string (", s.size(), " characters, starting '",
              s.substr(0, 40), "')");
  *impl_ = next;
}

Tensor randn(const Shape& s, Generator& g, DType t, double std, Device d) {
  Tensor x = empty(s, t, d);
  if (d == Device::Meta) return x;
  dispatch_float(t, "randn", [&]<typename T>() {
    T* p = x.data<T>();
    for (int64_t i = 0; i < x.numel(); ++i) p[i] = static_cast<T>(g.normal() * std);
  });
  return x;
}
Tensor rand_uniform(const Shape& s, Generator& g, double lo, double hi, DType t, Device d) {
  Tensor x = empty(s, t, d);
  if (d == Device::Meta) return x;
  dispatch_float(t, "rand_uniform", [&]<typename T>() {
    T* p = x.data<T>();
    for (int64_t i = 0; i < x.numel(); ++i) p[i] = static_cast<T>(lo + (hi - lo) * g.uniform());
  });
  return x;
}

bool Tensor::owns_whole_storage() const {
  return defined() && offset() == 0 && is_contiguous() && impl_->storage->nbytes() == (size_t)nbytes();
}

namespace {
void check_owner(const Tensor& t, const char* what) {
  TITAN_CHECK(t.owns_whole_storage(), "Tensor::", what, ": ", shape_str(t.shape()),
              " must own its whole buffer (offset 0, contiguous, no larger storage behind it); copy it first");
}
}  // namespace

void Tensor::release_storage() const {
  check_owner(*this, "release_storage");
  impl_->storage->release();
}

void Tensor::refill_storage() const { impl_->storage->materialize(); }

void Tensor::adopt_storage(const Tensor& from) const {
  check_owner(*this, "adopt_storage");
  check_owner(from, "adopt_storage (source)");
  impl_->storage->adopt(*from.impl_->storage);
}

void Tensor::set_storage_category(MemoryCategory c) const { check_impl()->storage->set_category(c); }

}  // namespace titan
