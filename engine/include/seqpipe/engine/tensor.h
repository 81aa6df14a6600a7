#pragma once
// A dense, row-major fp32 tensor: a pointer, a shape (rank <= 4) and a device. It either owns
// its storage (Tensor::empty) or views memory owned elsewhere (a memory-mapped checkpoint).
// Copies share the storage, as with a shared_ptr.
#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "seqpipe/engine/device.h"

namespace seqpipe::engine {

class Tensor {
 public:
  static constexpr int kMaxRank = 4;

  Tensor() = default;
  // Uninitialised storage, 64-byte aligned.
  static Tensor empty(std::initializer_list<int64_t> shape, Device device = Device::kCpu);
  static Tensor empty(const std::vector<int64_t>& shape, Device device = Device::kCpu);
  static Tensor zeros(std::initializer_list<int64_t> shape, Device device = Device::kCpu);
  // A view of memory kept alive by `owner` (may be empty when the caller guarantees lifetime).
  static Tensor view(float* data, const std::vector<int64_t>& shape, Device device,
                     std::shared_ptr<const void> owner);

  float* data() { return data_; }
  const float* data() const { return data_; }
  float* row(int64_t i) { return data_ + i * row_size(); }
  const float* row(int64_t i) const { return data_ + i * row_size(); }
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
  float* data_ = nullptr;
  std::array<int64_t, kMaxRank> shape_{};
  int rank_ = 0;
  Device device_ = Device::kCpu;
};

std::string shape_string(const std::vector<int64_t>& shape);

}  // namespace seqpipe::engine
