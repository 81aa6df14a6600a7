#pragma once
// Reading and writing the safetensors format: an 8-byte little-endian header length, a JSON
// header {name: {dtype, shape, data_offsets}}, then raw little-endian data.
// The reader checks the header (its length against the file and a cap, every tensor's shape
// product, overflow-checked, against its byte range) before it sizes any memory, then reads each
// tensor it is asked for into memory of its own: an F32 tensor as stored, F16/BF16 converted to
// fp32 by load(), or a BF16 one kept as it is by load_bf16(). Nothing stays mapped, so a file
// overwritten or truncated after the load changes nothing that was loaded (a mapping would
// show the new bytes, or SIGBUS on pages past the new end).
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
  // A BF16-stored tensor as bf16, as stored.
  // EngineError when missing, of another shape, or stored in another type.
  Tensor load_bf16(const std::string& name, const std::vector<int64_t>& expected) const;
  // Bytes of the data section (after the header), and where its last tensor ends: the two are
  // equal in a complete file (the format leaves no gap at the end).
  uint64_t data_bytes() const { return size_; }
  uint64_t tensor_data_end() const { return data_end_; }

 private:
  std::string path_;
  std::shared_ptr<const int> fd_;  // closed on last release
  uint64_t data_offset_ = 0;       // where the data section starts in the file
  uint64_t size_ = 0;
  uint64_t data_end_ = 0;
  std::map<std::string, TensorInfo> tensors_;

  void parse_header(const std::string& text);
  const TensorInfo& info(const std::string& name, const std::vector<int64_t>& expected) const;
  // The tensor's bytes as stored, into `dst`.
  void read(const TensorInfo& info, void* dst) const;
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
