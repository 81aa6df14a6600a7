#pragma once
// A dense, row-major tensor: a pointer, a shape (rank <= 4), an element type and a device. It
// either owns its storage (Tensor::empty) or views memory owned elsewhere (a memory-mapped
// checkpoint). Copies share the storage, as with a shared_ptr. Activations are fp32; weights may
// be bf16 or int8 (the model's compute type, see compute_type.h).
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

enum class DataType { kF32, kBF16, kI8 };

constexpr size_t element_size(DataType t) {
  return t == DataType::kF32 ? 4 : t == DataType::kBF16 ? 2 : 1;
}
std::string_view data_type_name(DataType t);

class Tensor {
 public:
  static constexpr int kMaxRank = 4;

  Tensor() = default;
  // Uninitialised storage, 64-byte aligned.
  static Tensor empty(std::initializer_list<int64_t> shape, Device device = Device::kCpu);
  static Tensor empty(const std::vector<int64_t>& shape, Device device = Device::kCpu,
                      DataType dtype = DataType::kF32);
  static Tensor zeros(std::initializer_list<int64_t> shape, Device device = Device::kCpu);
  // A view of memory kept alive by `owner` (may be empty when the caller guarantees lifetime).
  static Tensor view(float* data, const std::vector<int64_t>& shape, Device device,
                     std::shared_ptr<const void> owner);

  // fp32 tensors: the elements (an EngineError for another type would cost a branch per call;
  // the ops check types once, where they dispatch).
  float* data() { return static_cast<float*>(data_); }
  const float* data() const { return static_cast<const float*>(data_); }
  float* row(int64_t i) { return data() + i * row_size(); }
  const float* row(int64_t i) const { return data() + i * row_size(); }
  // Any type: the elements as T (uint16_t for bf16, int8_t for i8).
  template <typename T>
  T* data_as() {
    return static_cast<T*>(data_);
  }
  template <typename T>
  const T* data_as() const {
    return static_cast<const T*>(data_);
  }
  DataType dtype() const { return dtype_; }
  int64_t bytes() const {
    return defined() ? numel() * static_cast<int64_t>(element_size(dtype_)) : 0;
  }
  int rank() const { return rank_; }
  int64_t dim(int i) const { return shape_[static_cast<size_t>(i < 0 ? rank_ + i : i)]; }
  std::vector<int64_t> shape() const { return {shape_.begin(), shape_.begin() + rank_}; }
  int64_t numel() const;
  int64_t row_size() const { return rank_ == 0 ? 1 : numel() / shape_[0]; }
  Device device() const { return device_; }
  bool defined() const { return data_ != nullptr; }
  // Same storage, first dimension limited to `rows` (rows <= dim(0)).
  Tensor first_rows(int64_t rows) const;

 private:
  std::shared_ptr<const void> owner_;
  void* data_ = nullptr;
  std::array<int64_t, kMaxRank> shape_{};
  int rank_ = 0;
  Device device_ = Device::kCpu;
  DataType dtype_ = DataType::kF32;
};

std::string shape_string(const std::vector<int64_t>& shape);

}  // namespace seqpipe::engine
