#include "seqpipe/engine/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "seqpipe/engine/error.h"
#include "seqpipe/generation/model_files.h"

namespace seqpipe::engine {

namespace {

size_t storage_size(StorageType t) {
  return t == StorageType::kF32 ? 4 : 2;
}

const char* storage_name(StorageType t) {
  switch (t) {
    case StorageType::kF32:
      return "F32";
    case StorageType::kF16:
      return "F16";
    case StorageType::kBF16:
      return "BF16";
  }
  return "?";
}

StorageType parse_dtype(const std::string& s, const std::string& where) {
  if (s == "F32") return StorageType::kF32;
  if (s == "F16") return StorageType::kF16;
  if (s == "BF16") return StorageType::kBF16;
  throw EngineError(where + ": unsupported dtype '" + s + "' (supported: F32, F16, BF16)");
}

}  // namespace

float bf16_to_float(uint16_t v) {
  return std::bit_cast<float>(static_cast<uint32_t>(v) << 16);
}

uint16_t float_to_bf16(float v) {
  uint32_t bits = std::bit_cast<uint32_t>(v);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);  // NaN
  bits += 0x7fffu + ((bits >> 16) & 1u);  // round to nearest even
  return static_cast<uint16_t>(bits >> 16);
}

float f16_to_float(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      int e = -1;
      do {
        ++e;
        mant <<= 1;
      } while ((mant & 0x400u) == 0);
      bits = sign | static_cast<uint32_t>(127 - 15 - e) << 23 | (mant & 0x3ffu) << 13;
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | mant << 13;
  } else {
    bits = sign | (exp + 127 - 15) << 23 | mant << 13;
  }
  return std::bit_cast<float>(bits);
}

uint16_t float_to_f16(float v) {
  uint32_t bits = std::bit_cast<uint32_t>(v);
  uint32_t sign = (bits >> 16) & 0x8000u;
  uint32_t abs = bits & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);   // NaN
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow -> inf
  if (abs < 0x38800000u) {                                               // subnormal or zero in f16
    float f = std::bit_cast<float>(abs);
    uint32_t m = static_cast<uint32_t>(std::nearbyint(f * 16777216.0f));  // f / 2^-24
    return static_cast<uint16_t>(sign | m);
  }
  uint32_t rounded = abs + 0xfffu + ((abs >> 13) & 1u);
  return static_cast<uint16_t>(sign | ((rounded - 0x38000000u) >> 13));
}

namespace {

// Reads `n` bytes at `offset` of `fd` into `dst`; a short read means the file shrank meanwhile.
void read_exactly(int fd, void* dst, uint64_t n, uint64_t offset, const std::string& path) {
  auto* out = static_cast<uint8_t*>(dst);
  while (n > 0) {
    const ssize_t got = ::pread(fd, out, n, static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) throw EngineError(path + ": read failed: " + std::strerror(errno));
    if (got == 0)
      throw EngineError(path + ": truncated while being read (the file changed during the load?)");
    out += got, n -= static_cast<uint64_t>(got), offset += static_cast<uint64_t>(got);
  }
}

// The element count of `shape`, or throws when a product overflows: a header must not make the
// loader size memory from a wrapped number.
uint64_t checked_numel(const nlohmann::json& shape, std::vector<int64_t>& dims,
                       const std::string& where) {
  uint64_t numel = 1;
  for (const auto& d : shape) {
    if (!d.is_number_unsigned())
      throw EngineError(where + ": shape must hold non-negative integers");
    const uint64_t dim = d.get<uint64_t>();
    if (dim > static_cast<uint64_t>(INT64_MAX) || __builtin_mul_overflow(numel, dim, &numel))
      throw EngineError(where + ": shape " + shape.dump() + " overflows 64 bits");
    dims.push_back(static_cast<int64_t>(dim));
  }
  return numel;
}

}  // namespace

SafeTensorsFile::SafeTensorsFile(const std::string& path) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw EngineError(path + ": cannot open: " + std::strerror(errno));
  fd_ = std::shared_ptr<const int>(new int(fd), [](const int* p) {
    ::close(*p);
    delete p;
  });
  struct stat st {};
  if (::fstat(fd, &st) != 0) throw EngineError(path + ": cannot stat: " + std::strerror(errno));
  const uint64_t file_size = static_cast<uint64_t>(st.st_size);
  if (file_size < 8) {
    throw EngineError(path + ": truncated safetensors file (" + std::to_string(file_size) +
                      " bytes, no header length)");
  }
  uint8_t length[8];
  read_exactly(fd, length, 8, 0, path);
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = header_len << 8 | length[i];
  // Both checked before the header is read or parsed: its length alone sizes no memory.
  if (header_len > generation::kMaxSafetensorsHeaderBytes || header_len > file_size - 8) {
    throw EngineError(path + ": truncated or corrupt safetensors file (header length " +
                      std::to_string(header_len) + ", file size " + std::to_string(file_size) +
                      ", at most " + std::to_string(generation::kMaxSafetensorsHeaderBytes) +
                      " bytes of header)");
  }
  data_offset_ = 8 + header_len;
  size_ = file_size - data_offset_;
  std::string text(header_len, '\0');
  read_exactly(fd, text.data(), header_len, 8, path);
  parse_header(text);
}

void SafeTensorsFile::parse_header(const std::string& text) {
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw EngineError(path_ + ": safetensors header is not valid JSON: " + e.what());
  }
  if (!header.is_object()) throw EngineError(path_ + ": safetensors header is not a JSON object");
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") continue;
    const std::string where = path_ + ": tensor '" + name + "'";
    if (!entry.is_object() || !entry.contains("dtype") || !entry.contains("shape") ||
        !entry.contains("data_offsets") || !entry["dtype"].is_string() ||
        !entry["shape"].is_array() || !entry["data_offsets"].is_array() ||
        entry["data_offsets"].size() != 2) {
      throw EngineError(where + ": malformed header entry (needs dtype, shape, data_offsets[2])");
    }
    TensorInfo info;
    info.dtype = parse_dtype(entry["dtype"].get<std::string>(), where);
    const uint64_t numel = checked_numel(entry["shape"], info.shape, where);
    for (const auto& o : entry["data_offsets"]) {
      if (!o.is_number_unsigned())
        throw EngineError(where + ": data_offsets must be non-negative integers");
    }
    info.begin = entry["data_offsets"][0].get<uint64_t>();
    info.end = entry["data_offsets"][1].get<uint64_t>();
    uint64_t bytes = 0;
    if (__builtin_mul_overflow(numel, storage_size(info.dtype), &bytes) || info.end < info.begin ||
        info.end - info.begin != bytes) {
      throw EngineError(where + ": data_offsets [" + std::to_string(info.begin) + ", " +
                        std::to_string(info.end) + ") do not match shape " +
                        shape_string(info.shape) + " of " + storage_name(info.dtype));
    }
    if (info.end > size_) {
      throw EngineError(where + ": data ends at byte " + std::to_string(info.end) +
                        " but the file's data section has " + std::to_string(size_) +
                        " bytes (truncated file?)");
    }
    data_end_ = std::max(data_end_, info.end);
    tensors_.emplace(name, std::move(info));
  }
}

const TensorInfo& SafeTensorsFile::info(const std::string& name,
                                        const std::vector<int64_t>& expected) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) throw EngineError(path_ + ": missing tensor '" + name + "'");
  if (it->second.shape != expected) {
    throw EngineError(path_ + ": tensor '" + name + "' has shape " +
                      shape_string(it->second.shape) + ", expected " + shape_string(expected));
  }
  return it->second;
}

void SafeTensorsFile::read(const TensorInfo& info, void* dst) const {
  read_exactly(*fd_, dst, info.end - info.begin, data_offset_ + info.begin, path_);
}

Tensor SafeTensorsFile::load_bf16(const std::string& name,
                                  const std::vector<int64_t>& expected) const {
  const TensorInfo& info = this->info(name, expected);
  if (info.dtype != StorageType::kBF16) {
    throw EngineError(path_ + ": tensor '" + name + "' is " + storage_name(info.dtype) +
                      ", not BF16");
  }
  Tensor out = Tensor::empty(info.shape, Device::kCpu, DataType::kBF16);
  read(info, out.data_as<void>());
  return out;
}

Tensor SafeTensorsFile::load(const std::string& name, const std::vector<int64_t>& expected) const {
  const TensorInfo& info = this->info(name, expected);
  Tensor out = Tensor::empty(info.shape);
  if (info.dtype == StorageType::kF32) {  // already the compute type: read in place
    read(info, out.data());
    return out;
  }
  const int64_t numel = out.numel();
  std::vector<uint16_t> half(static_cast<size_t>(numel));
  read(info, half.data());
  float* dst = out.data();
  for (int64_t i = 0; i < numel; ++i) {
    const uint16_t v = half[static_cast<size_t>(i)];
    dst[i] = info.dtype == StorageType::kBF16 ? bf16_to_float(v) : f16_to_float(v);
  }
  return out;
}

void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  uint64_t offset = 0;
  for (const auto& t : tensors) {
    uint64_t numel = 1;
    for (auto d : t.shape) numel *= static_cast<uint64_t>(d);
    const uint64_t bytes = numel * storage_size(t.dtype);
    header[t.name] = {{"dtype", storage_name(t.dtype)},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  while ((8 + text.size()) % 8 != 0) text.push_back(' ');  // keep the data 8-byte aligned
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw EngineError(path + ": cannot open for writing");
  uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) out.put(static_cast<char>((n >> (8 * i)) & 0xff));
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  for (const auto& t : tensors) {
    uint64_t numel = 1;
    for (auto d : t.shape) numel *= static_cast<uint64_t>(d);
    if (t.dtype == StorageType::kF32) {
      out.write(reinterpret_cast<const char*>(t.values), static_cast<std::streamsize>(numel * 4));
    } else {
      std::vector<uint16_t> half(numel);
      for (uint64_t i = 0; i < numel; ++i) {
        half[i] =
            t.dtype == StorageType::kBF16 ? float_to_bf16(t.values[i]) : float_to_f16(t.values[i]);
      }
      out.write(reinterpret_cast<const char*>(half.data()),
                static_cast<std::streamsize>(numel * 2));
    }
  }
  if (!out) throw EngineError(path + ": write failed");
}

}  // namespace seqpipe::engine
