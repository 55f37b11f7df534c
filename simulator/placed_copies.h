// simulator/placed_copies.h — a sequence whose repeated runs are copies of a record held by reference.
//
// A rank's timeline slices (timeline.h) and memory samples (memory_track.h) are mostly copies of a few passes'
// records (the scheduler places a repeated pass whole). PlacedCopies<T, Copy> holds the items made one by one in
// a vector and, between them, placed copies: a Copy (the record and where this copy of it runs) with the index
// of its first item and the owned items before it. Items are read by value in order: an owned one as it is, a
// copy's as Copy::item(k) makes its k-th. Copy: `size_t n() const` (its items, > 0), `T item(size_t k) const`.
#pragma once
#include <algorithm>
#include <cstddef>
#include <iterator>
#include <utility>
#include <vector>

namespace titan {

template <class T, class Copy>
class PlacedCopies {
 public:
  size_t size() const { return own_.size() + placed_items_; }
  bool empty() const { return size() == 0; }
  T operator[](size_t i) const {
    const size_t c = copy_at(i);
    return c < placed_.size() ? placed_[c].copy.item(i - placed_[c].at) : own_[owned_index(i)];
  }
  size_t placed_copies() const { return placed_.size(); }

  void push_back(T x) { own_.push_back(std::move(x)); }
  void place(Copy c) {  // appends a copy's items (none: nothing)
    const size_t n = c.n();
    if (n == 0) return;
    placed_.push_back({std::move(c), size(), own_.size()});
    placed_items_ += n;
  }
  // item i, to change: a placed copy holding it is written out first (its items owned from then on)
  T& edit(size_t i) {
    const size_t c = copy_at(i);
    if (c < placed_.size()) write_out(c);
    return own_[owned_index(i)];
  }
  // every item owned (no placed copy left), to change them in place
  std::vector<T>& flat() {
    if (placed_.empty()) return own_;
    std::vector<T> all;
    all.reserve(size());
    for (auto it = begin(); it != end(); ++it) all.push_back(*it);
    own_ = std::move(all);
    placed_.clear();
    placed_items_ = 0;
    return own_;
  }

  class const_iterator {  // yields items by value, in order
   public:
    using iterator_category = std::input_iterator_tag;
    using value_type = T;
    using difference_type = std::ptrdiff_t;
    using reference = T;  // by value
    using pointer = void;
    T operator*() const {
      if (in_copy()) return s_->placed_[copy_].copy.item(i_ - s_->placed_[copy_].at);
      return s_->own_[own_];
    }
    const_iterator& operator++() {
      if (in_copy()) {
        if (++i_ == s_->placed_[copy_].at + s_->placed_[copy_].copy.n()) ++copy_;
      } else {
        ++i_;
        ++own_;
      }
      return *this;
    }
    bool operator==(const const_iterator& o) const { return i_ == o.i_; }
    bool operator!=(const const_iterator& o) const { return i_ != o.i_; }

   private:
    friend class PlacedCopies;
    bool in_copy() const { return copy_ < s_->placed_.size() && i_ >= s_->placed_[copy_].at; }
    const PlacedCopies* s_ = nullptr;
    size_t i_ = 0, copy_ = 0, own_ = 0;  // item index; the next (or current) placed copy; the next owned item
  };
  const_iterator begin() const {
    const_iterator it;
    it.s_ = this;
    return it;
  }
  const_iterator end() const {
    const_iterator it;
    it.s_ = this;
    it.i_ = size();
    return it;
  }

 protected:
  struct Placed {
    Copy copy;
    size_t at = 0;            // the index of its first item
    size_t owned_before = 0;  // owned items before it
  };
  std::vector<T> own_;          // the owned items in order
  std::vector<Placed> placed_;  // the placed copies in order

 private:
  // the last copy starting at or before i (placed_.begin() - 1 as placed_.end(): none)
  typename std::vector<Placed>::const_iterator last_copy_from(size_t i) const {
    auto it = std::upper_bound(placed_.begin(), placed_.end(), i, [](size_t v, const Placed& p) { return v < p.at; });
    return it == placed_.begin() ? placed_.end() : std::prev(it);
  }
  size_t copy_at(size_t i) const {  // the placed copy holding item i, or placed_.size() (an owned item)
    auto it = last_copy_from(i);
    return it != placed_.end() && i < it->at + it->copy.n() ? (size_t)(it - placed_.begin()) : placed_.size();
  }
  size_t owned_index(size_t i) const {  // item i's place among the owned (no copy holds it): i less the copies' before
    auto it = last_copy_from(i);
    return it == placed_.end() ? i : i - (it->at - it->owned_before + it->copy.n());
  }
  void write_out(size_t c) {
    const Placed& p = placed_[c];
    const size_t n = p.copy.n();
    std::vector<T> items;
    items.reserve(n);
    for (size_t k = 0; k < n; ++k) items.push_back(p.copy.item(k));
    own_.insert(own_.begin() + (std::ptrdiff_t)p.owned_before, items.begin(), items.end());
    placed_items_ -= n;
    for (size_t d = c + 1; d < placed_.size(); ++d) placed_[d].owned_before += n;
    placed_.erase(placed_.begin() + (std::ptrdiff_t)c);
  }
  size_t placed_items_ = 0;
};

}  // namespace titan
