#include "seqpipe/engine/tensor.h"

#include <cstring>
#include <sstream>

#include "seqpipe/engine/error.h"

namespace seqpipe::engine {

std::string_view data_type_name(DataType t) {
  switch (t) {
    case DataType::kF32:
      return "f32";
    case DataType::kBF16:
      return "bf16";
    case DataType::kF16:
      return "f16";
    case DataType::kI8:
      return "i8";
    case DataType::kI32:
      return "i32";
  }
  return "?";
}

TensorView::TensorView(void* data, const std::vector<int64_t>& shape, DataType dtype, Device device)
    : data_(data), dtype_(dtype), device_(device) {
  if (shape.size() > kMaxTensorRank)
    throw EngineError("Tensor: rank " + std::to_string(shape.size()) + " > 4");
  rank_ = static_cast<int>(shape.size());
  for (size_t i = 0; i < shape.size(); ++i) shape_[i] = shape[i];
}

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int i = 0; i < rank_; ++i) n *= shape_[static_cast<size_t>(i)];
  return n;
}

bool TensorView::same_shape(const TensorView& other) const {
  if (rank_ != other.rank_) return false;
  for (int i = 0; i < rank_; ++i) {
    if (shape_[static_cast<size_t>(i)] != other.shape_[static_cast<size_t>(i)]) return false;
  }
  return true;
}

TensorView TensorView::rows(int64_t begin, int64_t count) const {
  if (rank_ == 0 || begin < 0 || count < 0 || begin + count > shape_[0]) {
    throw EngineError("Tensor: rows [" + std::to_string(begin) + ", " +
                      std::to_string(begin + count) + ") of " + shape_string(shape()));
  }
  TensorView v = *this;
  v.data_ =
      static_cast<char*>(data_) + begin * row_size() * static_cast<int64_t>(element_size(dtype_));
  v.shape_[0] = count;
  return v;
}

Tensor Tensor::empty(const std::vector<int64_t>& shape, Device device, DataType dtype) {
  Tensor t;
  t.view_ = TensorView(nullptr, shape, dtype, device);
  Allocator& allocator = allocator_for(device);
  const size_t bytes = static_cast<size_t>(t.view_.numel()) * element_size(dtype);
  void* p = allocator.allocate(bytes == 0 ? 1 : bytes);
  t.owner_ = std::shared_ptr<void>(p, [&allocator](void* q) { allocator.deallocate(q); });
  t.view_.data_ = p;
  return t;
}

Tensor Tensor::empty(std::initializer_list<int64_t> shape, Device device) {
  return empty(std::vector<int64_t>(shape), device);
}

Tensor Tensor::zeros(std::initializer_list<int64_t> shape) {
  Tensor t = empty(shape);
  std::memset(t.data(), 0, static_cast<size_t>(t.bytes()));
  return t;
}

Tensor Tensor::wrap(void* data, const std::vector<int64_t>& shape, DataType dtype, Device device,
                    std::shared_ptr<const void> owner) {
  Tensor t;
  t.view_ = TensorView(data, shape, dtype, device);
  t.owner_ = std::move(owner);
  return t;
}

Tensor Tensor::first_rows(int64_t rows) const {
  Tensor t = *this;
  t.view_.shape_[0] = rows;
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
