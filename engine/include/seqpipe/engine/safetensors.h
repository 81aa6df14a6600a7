#pragma once
// Reading and writing the safetensors format: an 8-byte little-endian header length, a JSON
// header {name: {dtype, shape, data_offsets}}, then raw little-endian data.
// The reader memory-maps the file; an F32 tensor is returned as a view of the mapping (no copy),
// F16/BF16 tensors are converted to fp32 by load(), or a BF16 one kept as it is by load_bf16().
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "seqpipe/engine/tensor.h"

namespace seqpipe::engine {

enum class StorageType { kF32, kF16, kBF16 };

struct TensorInfo {
  StorageType dtype;
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // byte offsets into the data section
  uint64_t end = 0;
};

class SafeTensorsFile {
 public:
  // Throws EngineError naming the file (and tensor) when it is missing, truncated or malformed.
  explicit SafeTensorsFile(const std::string& path);

  const std::string& path() const { return path_; }
  bool contains(const std::string& name) const { return tensors_.count(name) != 0; }
  const std::map<std::string, TensorInfo>& tensors() const { return tensors_; }
  // The tensor as fp32; throws EngineError when missing or when its shape is not `expected`.
  Tensor load(const std::string& name, const std::vector<int64_t>& expected) const;
  // A BF16-stored tensor as bf16: a view of the mapping (a copy only if the file misaligns it).
  // EngineError when missing, of another shape, or stored in another type.
  Tensor load_bf16(const std::string& name, const std::vector<int64_t>& expected) const;
  // Whether `t` is a view of this file's mapping (not a copy).
  bool maps(const TensorView& t) const;
  // Bytes of the mapping that load() returned as views rather than copies.
  uint64_t mapped_bytes() const { return size_; }

 private:
  std::string path_;
  std::shared_ptr<const void> mapping_;  // munmap on last release
  const uint8_t* data_ = nullptr;        // start of the data section
  uint64_t size_ = 0;
  std::map<std::string, TensorInfo> tensors_;

  const TensorInfo& info(const std::string& name, const std::vector<int64_t>& expected) const;
};

// One tensor to write: fp32 values stored as `dtype` (rounded to nearest even for F16/BF16).
struct TensorToWrite {
  std::string name;
  std::vector<int64_t> shape;
  const float* values = nullptr;
  StorageType dtype = StorageType::kF32;
};
void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors);

float bf16_to_float(uint16_t v);
float f16_to_float(uint16_t v);
uint16_t float_to_bf16(float v);
uint16_t float_to_f16(float v);

}  // namespace seqpipe::engine
