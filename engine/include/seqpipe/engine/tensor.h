#pragma once
// Dense, row-major tensors: a shape (rank <= 4), an element type and a device.
//   Tensor      owns its storage (Tensor::empty, from the device's allocator) or keeps memory
//               owned elsewhere alive (Tensor::wrap: a memory-mapped checkpoint). Copies share
//               the storage, as with a shared_ptr.
//   TensorView  a window on memory owned elsewhere: what the ops take. Copying one touches no
//               reference count and no heap, so hot paths build views per step for free.
// Activations, norms and the KV cache are fp32; linear weights may be bf16 or int8 (the model's
// compute type, see compute_type.h).
#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "seqpipe/engine/device.h"

namespace seqpipe::engine {

// kF16: a GPU's fp16 linear weights; kI32: token ids (ops::embedding).
enum class DataType { kF32, kBF16, kF16, kI8, kI32 };

constexpr size_t element_size(DataType t) {
  return t == DataType::kF32 || t == DataType::kI32 ? 4 : t == DataType::kI8 ? 1 : 2;
}
std::string_view data_type_name(DataType t);

inline constexpr int kMaxTensorRank = 4;
using Shape = std::array<int64_t, kMaxTensorRank>;

class TensorView {
 public:
  TensorView() = default;
  // EngineError for a rank above kMaxTensorRank.
  TensorView(void* data, const std::vector<int64_t>& shape, DataType dtype, Device device);
  // The same without a heap allocation (a decoder step makes views of its ids).
  TensorView(void* data, std::initializer_list<int64_t> shape, DataType dtype, Device device);

  // fp32 elements (the ops check types once, where they dispatch).
  float* data() const { return static_cast<float*>(data_); }
  float* row(int64_t i) const { return data() + i * row_size(); }
  // Any type: the elements as T (uint16_t for bf16, int8_t for i8).
  template <typename T>
  T* data_as() const {
    return static_cast<T*>(data_);
  }
  DataType dtype() const { return dtype_; }
  Device device() const { return device_; }
  int rank() const { return rank_; }
  int64_t dim(int i) const { return shape_[static_cast<size_t>(i < 0 ? rank_ + i : i)]; }
  std::vector<int64_t> shape() const { return {shape_.begin(), shape_.begin() + rank_}; }
  int64_t numel() const;
  int64_t row_size() const { return rank_ == 0 ? 1 : numel() / shape_[0]; }
  int64_t bytes() const {
    return defined() ? numel() * static_cast<int64_t>(element_size(dtype_)) : 0;
  }
  bool defined() const { return data_ != nullptr; }
  bool same_shape(const TensorView& other) const;
  // Rows [begin, begin + count) of the first dimension (EngineError outside it).
  TensorView rows(int64_t begin, int64_t count) const;

 private:
  friend class Tensor;
  TensorView(void* data, const int64_t* dims, size_t rank, DataType dtype, Device device);

  void* data_ = nullptr;
  Shape shape_{};
  int rank_ = 0;
  DataType dtype_ = DataType::kF32;
  Device device_ = Device::kCpu;
};

// One copy of a batch (ops::copy_all): dst <- src, the same dtype and element count.
struct TensorCopy {
  TensorView dst, src;
};

class Tensor {
 public:
  static constexpr int kMaxRank = kMaxTensorRank;

  Tensor() = default;
  // Uninitialised storage from the device's allocator (Allocator::kAlignment aligned).
  static Tensor empty(std::initializer_list<int64_t> shape, Device device = Device::kCpu);
  static Tensor empty(const std::vector<int64_t>& shape, Device device = Device::kCpu,
                      DataType dtype = DataType::kF32);
  // fp32 zeros on the CPU.
  static Tensor zeros(std::initializer_list<int64_t> shape);
  // Memory kept alive by `owner` (may be empty when the caller guarantees lifetime).
  static Tensor wrap(void* data, const std::vector<int64_t>& shape, DataType dtype, Device device,
                     std::shared_ptr<const void> owner);

  const TensorView& view() const { return view_; }
  operator const TensorView&() const { return view_; }  // NOLINT: a tensor is usable as a view

  float* data() const { return view_.data(); }
  float* row(int64_t i) const { return view_.row(i); }
  template <typename T>
  T* data_as() const {
    return view_.data_as<T>();
  }
  DataType dtype() const { return view_.dtype(); }
  Device device() const { return view_.device(); }
  int rank() const { return view_.rank(); }
  int64_t dim(int i) const { return view_.dim(i); }
  std::vector<int64_t> shape() const { return view_.shape(); }
  int64_t numel() const { return view_.numel(); }
  int64_t row_size() const { return view_.row_size(); }
  int64_t bytes() const { return view_.bytes(); }
  bool defined() const { return view_.defined(); }
  TensorView rows(int64_t begin, int64_t count) const { return view_.rows(begin, count); }
  // Same storage, first dimension limited to `rows` (rows <= dim(0)).
  Tensor first_rows(int64_t rows) const;

 private:
  std::shared_ptr<const void> owner_;
  TensorView view_;
};

std::string shape_string(const std::vector<int64_t>& shape);

}  // namespace seqpipe::engine
