#include "seqpipe/engine/tensor.h"

#include <cstdlib>
#include <cstring>
#include <new>
#include <sstream>

#include "seqpipe/engine/error.h"

namespace seqpipe::engine {

namespace {
std::shared_ptr<void> allocate(int64_t numel, Device device, DataType dtype) {
  if (device != Device::kCpu)
    throw EngineError("Tensor: device " + std::string(device_name(device)) + " is not built in");
  size_t bytes = static_cast<size_t>(numel) * element_size(dtype);
  bytes = (bytes + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, bytes == 0 ? 64 : bytes);
  if (p == nullptr) throw std::bad_alloc();
  return {p, [](void* q) { std::free(q); }};
}
}  // namespace

std::string_view data_type_name(DataType t) {
  return t == DataType::kF32 ? "f32" : t == DataType::kBF16 ? "bf16" : "i8";
}

Tensor Tensor::empty(const std::vector<int64_t>& shape, Device device, DataType dtype) {
  if (shape.size() > kMaxRank)
    throw EngineError("Tensor: rank " + std::to_string(shape.size()) + " > 4");
  Tensor t;
  t.rank_ = static_cast<int>(shape.size());
  for (size_t i = 0; i < shape.size(); ++i) t.shape_[i] = shape[i];
  auto storage = allocate(t.numel(), device, dtype);
  t.data_ = storage.get();
  t.owner_ = std::move(storage);
  t.device_ = device;
  t.dtype_ = dtype;
  return t;
}

Tensor Tensor::empty(std::initializer_list<int64_t> shape, Device device) {
  return empty(std::vector<int64_t>(shape), device);
}

Tensor Tensor::zeros(std::initializer_list<int64_t> shape, Device device) {
  Tensor t = empty(shape, device);
  std::memset(t.data(), 0, static_cast<size_t>(t.numel()) * sizeof(float));
  return t;
}

Tensor Tensor::view(float* data, const std::vector<int64_t>& shape, Device device,
                    std::shared_ptr<const void> owner) {
  if (shape.size() > kMaxRank)
    throw EngineError("Tensor: rank " + std::to_string(shape.size()) + " > 4");
  Tensor t;
  t.rank_ = static_cast<int>(shape.size());
  for (size_t i = 0; i < shape.size(); ++i) t.shape_[i] = shape[i];
  t.data_ = data;
  t.owner_ = std::move(owner);
  t.device_ = device;
  return t;
}

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int i = 0; i < rank_; ++i) n *= shape_[static_cast<size_t>(i)];
  return n;
}

Tensor Tensor::first_rows(int64_t rows) const {
  Tensor t = *this;
  t.shape_[0] = rows;
  return t;
}

std::string shape_string(const std::vector<int64_t>& shape) {
  std::ostringstream out;
  out << '[';
  for (size_t i = 0; i < shape.size(); ++i) out << (i ? ", " : "") << shape[i];
  out << ']';
  return out.str();
}

}  // namespace seqpipe::engine
