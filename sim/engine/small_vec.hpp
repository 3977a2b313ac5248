#pragma once
// A vector of trivially copyable values that keeps its first N in place and only allocates past
// them. A plan item's allocations, frees and finished gradients, and a tape op's inputs, outputs
// and saved tensors, are a handful each, and a Llama-3-70B tape and its backward pass are
// thousands of them: as std::vectors they were most of the planner's time and a third of the
// tape's (an allocation and a free per list).
#include <algorithm>
#include <cstddef>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <span>
#include <type_traits>

namespace scaleout {

template <class T, std::size_t N>
class SmallVec {
  static_assert(std::is_trivially_copyable_v<T> && N > 0);

 public:
  SmallVec() = default;
  SmallVec(std::initializer_list<T> values) { append(values.begin(), values.end()); }
  SmallVec(const SmallVec& o) { append(o.begin(), o.end()); }
  SmallVec(SmallVec&& o) noexcept { take(o); }
  SmallVec& operator=(const SmallVec& o) {
    if (this != &o) {
      size_ = 0;
      append(o.begin(), o.end());
    }
    return *this;
  }
  SmallVec& operator=(SmallVec&& o) noexcept {
    if (this != &o) {
      heap_.reset();
      cap_ = N;
      take(o);
    }
    return *this;
  }

  T* data() { return heap_ ? heap_.get() : local_; }
  const T* data() const { return heap_ ? heap_.get() : local_; }
  std::size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  T* begin() { return data(); }
  T* end() { return data() + size_; }
  const T* begin() const { return data(); }
  const T* end() const { return data() + size_; }
  T& operator[](std::size_t i) { return data()[i]; }
  const T& operator[](std::size_t i) const { return data()[i]; }
  T& back() { return data()[size_ - 1]; }
  operator std::span<const T>() const { return {data(), size_}; }

  void clear() { size_ = 0; }
  void assign(std::initializer_list<T> values) {
    size_ = 0;
    append(values.begin(), values.end());
  }
  void push_back(const T& v) {
    if (size_ == cap_) grow(size_ + 1);
    data()[size_++] = v;
  }
  void append(const T* first, const T* last) {
    const auto n = static_cast<std::size_t>(last - first);
    if (size_ + n > cap_) grow(size_ + n);
    if (n > 0) std::memcpy(static_cast<void*>(data() + size_), first, n * sizeof(T));
    size_ += n;
  }
  friend bool operator==(const SmallVec& a, const SmallVec& b) {
    return a.size_ == b.size_ && std::equal(a.begin(), a.end(), b.begin());
  }

 private:
  void grow(std::size_t need) {
    const std::size_t cap = std::max(need, 2 * cap_);
    std::unique_ptr<T[]> h(new T[cap]);
    if (size_ > 0) std::memcpy(static_cast<void*>(h.get()), data(), size_ * sizeof(T));
    heap_ = std::move(h);
    cap_ = cap;
  }
  void take(SmallVec& o) {
    size_ = o.size_;
    if (o.heap_) {
      heap_ = std::move(o.heap_);
      cap_ = o.cap_;
    } else if (size_ > 0) {
      std::memcpy(static_cast<void*>(local_), o.local_, size_ * sizeof(T));
    }
    o.size_ = 0;
    o.cap_ = N;
  }

  std::unique_ptr<T[]> heap_;
  std::size_t size_ = 0, cap_ = N;
  T local_[N];
};

}  // namespace scaleout
