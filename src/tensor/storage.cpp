#include "src/tensor/storage.h"

#include "src/tensor/error.h"

namespace titan {

Storage::Storage(size_t nbytes, Device device)
    : nbytes_(nbytes), device_(device), category_(MemoryCategoryScope::current()),
      tracker_(&MemoryTracker::get(device)) {
  if (device_ == Device::CPU) data_ = pool_allocate(nbytes_);
  tracker_->add(category_, (int64_t)nbytes_);
}

Storage::~Storage() {
  if (data_) pool_free(data_, nbytes_);
  if (counted_) tracker_->sub(category_, (int64_t)nbytes_);
}

void Storage::release() {
  if (!counted_) return;
  if (data_) pool_free(data_, nbytes_);
  data_ = nullptr;
  tracker_->sub(category_, (int64_t)nbytes_);
  counted_ = false;
}

void Storage::materialize() {
  if (counted_) return;
  if (device_ == Device::CPU) data_ = pool_allocate(nbytes_);
  tracker_->add(category_, (int64_t)nbytes_);
  counted_ = true;
}

void Storage::adopt(Storage& from) {
  TITAN_CHECK(!counted_ && from.counted_ && from.nbytes_ == nbytes_ && from.device_ == device_,
              "Storage::adopt: a released storage takes a resident buffer of its size and device (", nbytes_,
              " bytes, released ", !counted_, ") from one of ", from.nbytes_, " bytes (resident ", from.counted_, ")");
  data_ = from.data_;
  from.data_ = nullptr;
  from.tracker_->sub(from.category_, (int64_t)nbytes_);
  from.counted_ = false;
  tracker_->add(category_, (int64_t)nbytes_);
  counted_ = true;
}

void Storage::set_category(MemoryCategory c) {
  if (c == category_) return;
  if (!counted_) {
    category_ = c;
    return;
  }
  tracker_->sub(category_, (int64_t)nbytes_);
  category_ = c;
  tracker_->add(category_, (int64_t)nbytes_);
}

}  // namespace titan
