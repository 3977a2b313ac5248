#pragma once
// A growing array kept in chunks of 64 KiB, for the step graph's per-task arrays (task info,
// dependency and memory-change lists, launchers, barrier pools; the executor's tasks and edges,
// the hottest lookups, stay vectors). A std::vector reserved for an estimate of the tasks (the
// estimate counts every kernel; runs of kernels leave a tenth of them as tasks) keeps each array
// apart from the others by its unused room, and with transparent huge pages every array's last
// touched 2 MiB page is zeroed whole: on a 64-GPU step, 31 MB of arrays touched 35 huge pages
// (70 MB), and zeroing fresh pages is most of a far step's time on a VM. Chunks come from the
// heap one after another as any array needs one, so they fill the pages they touch, and nothing
// is reserved, moved or copied as an array grows. Indexing costs one more load (the chunk table,
// small enough to stay cached).
#include <cstddef>
#include <new>
#include <type_traits>
#include <utility>
#include <vector>

namespace scaleout {

template <class T>
class ChunkedVector {
  static constexpr std::size_t shift_for() {
    std::size_t b = 0;
    while ((std::size_t(2) << b) * sizeof(T) <= kChunkBytes) ++b;
    return b;
  }

 public:
  static constexpr std::size_t kChunkBytes = std::size_t(1) << 16;  // below malloc's mmap threshold
  static constexpr std::size_t kShift = shift_for();
  static constexpr std::size_t kPerChunk = std::size_t(1) << kShift;
  static constexpr std::size_t kMask = kPerChunk - 1;
  // Chunks start on a cache line: a 64-byte element never straddles two.
  static constexpr std::align_val_t kAlign{64};
  static_assert(alignof(T) <= 64, "ChunkedVector: over-aligned element");

  ChunkedVector() = default;
  ChunkedVector(const ChunkedVector&) = delete;
  ChunkedVector& operator=(const ChunkedVector&) = delete;
  ChunkedVector(ChunkedVector&& o) noexcept
      : chunks_(std::move(o.chunks_)),
        size_(std::exchange(o.size_, 0)),
        end_(std::exchange(o.end_, nullptr)),
        chunk_end_(std::exchange(o.chunk_end_, nullptr)) {
    o.chunks_.clear();
  }
  ChunkedVector& operator=(ChunkedVector&& o) noexcept {
    if (this != &o) {
      clear();
      chunks_ = std::move(o.chunks_);
      o.chunks_.clear();
      size_ = std::exchange(o.size_, 0);
      end_ = std::exchange(o.end_, nullptr);
      chunk_end_ = std::exchange(o.chunk_end_, nullptr);
    }
    return *this;
  }
  ~ChunkedVector() { clear(); }

  std::size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  T& operator[](std::size_t i) { return chunks_[i >> kShift][i & kMask]; }
  const T& operator[](std::size_t i) const { return chunks_[i >> kShift][i & kMask]; }
  T& back() { return end_[-1]; }
  const T& back() const { return end_[-1]; }

  template <class... A>
  T& emplace_back(A&&... a) {
    if (end_ == chunk_end_) {
      // (A chunk is taken when its first element comes: end_ - 1 is always the last element.)
      end_ = static_cast<T*>(::operator new(kPerChunk * sizeof(T), kAlign));
      chunks_.push_back(end_);
      chunk_end_ = end_ + kPerChunk;
    }
    T* p = ::new (static_cast<void*>(end_)) T(std::forward<A>(a)...);
    ++end_;
    ++size_;
    return *p;
  }
  void push_back(const T& v) { emplace_back(v); }
  void push_back(T&& v) { emplace_back(std::move(v)); }
  // Grows to n elements, copies of v (never shrinks).
  void grow_to(std::size_t n, const T& v) {
    while (size_ < n) emplace_back(v);
  }
  // Room in the chunk table (the chunks themselves come as they are needed).
  void reserve(std::size_t n) { chunks_.reserve((n + kMask) >> kShift); }
  // Destroys the elements and gives every chunk back.
  void clear() {
    if constexpr (!std::is_trivially_destructible_v<T>)
      for (std::size_t i = 0; i < size_; ++i) (*this)[i].~T();
    for (T* c : chunks_) ::operator delete(c, kAlign);
    chunks_.clear();
    size_ = 0;
    end_ = chunk_end_ = nullptr;
  }

 private:
  std::vector<T*> chunks_;
  std::size_t size_ = 0;
  T* end_ = nullptr;        // past the last element, in the last chunk
  T* chunk_end_ = nullptr;  // the last chunk's end
};

}  // namespace scaleout
