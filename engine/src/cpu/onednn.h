#pragma once
// bf16 and int8 linear layers on oneDNN's matmul (Debian libdnnl-dev), which runs them on
// AVX512_BF16 and VNNI. Weights are reordered once, at load, into the layout oneDNN's kernels
// read (its "packed" format): with weights left row-major oneDNN repacks them on every call,
// 5-10x slower at decoder batch sizes (measured on t5-small's shapes).
#include <cstdint>
#include <memory>
#include <oneapi/dnnl/dnnl.hpp>
#include <vector>

#include "seqpipe/engine/model.h"
#include "seqpipe/engine/tensor.h"

namespace seqpipe::engine::cpu {

struct OneDnnWeight : PackedWeight {
  int64_t bytes() const override { return static_cast<int64_t>(desc.get_size()); }

  DataType dtype = DataType::kF32;  // kBF16 or kI8
  int64_t out = 0, in = 0;
  dnnl::memory::desc desc;  // the packed layout of the logical [in, out] matrix
  dnnl::memory memory;
  const void* data = nullptr;  // memory's buffer
  // > 0 when the layout is the one packed_gemm.h reads (its column blocks' stride): then int8
  // calls (on AMX, of up to kPackedGemmMaxRows rows) and bf16 calls of up to kPackedGemmMaxRows
  // rows run there, not through oneDNN's execute.
  int64_t block_stride = 0;
  // int8: sum over k of row j's quantized weights. Activations go to oneDNN as u8 (q + 128),
  // so their products carry 128 x this sum too, taken off after the GEMM.
  std::vector<int32_t> sums;
};

// Whether oneDNN runs this type fast on this CPU (bf16: AVX512_BF16; int8: VNNI).
bool onednn_runs(DataType dtype);

// bf16: w is the fp32 or bf16 [out, in] weight (converted and packed). int8: w is the quantized
// [out, in] weight (row-major int8, see quantize_rows).
std::shared_ptr<const OneDnnWeight> pack_weight(const Tensor& w, DataType dtype);

// y[m, out] = x[m, in] W^T + beta * y. int8: scales[out] per output channel.
void linear_packed(const float* x, int64_t m, const OneDnnWeight& w, const float* scales,
                   float beta, float* y);

}  // namespace seqpipe::engine::cpu
