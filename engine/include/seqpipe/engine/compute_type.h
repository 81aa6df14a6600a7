#pragma once
// The number type the linear layers compute in, named as CTranslate2 names them. Everything else
// (norms, attention, activations, the KV cache) stays fp32.
//   float32        fp32 weights, OpenBLAS and the engine's fp32 kernel
//   bfloat16       bf16 weights (converted once at load; a bf16 checkpoint's used as stored),
//                  bf16 x bf16 products summed in fp32
//   int8           int8 weights, one fp32 scale per output channel (quantized once at load);
//                  activations quantized per row at run time; int32 sums, rescaled to fp32
//   int8_bfloat16  the same as int8 here: CTranslate2 also runs the non-GEMM ops in bf16 with it,
//                  and this engine runs those in fp32 whatever the type
//   auto           the best this CPU runs fast: int8 with VNNI, else bfloat16 with AVX512_BF16,
//                  else float32 (detected at run time)
//   float16        refused: T5 v1.1 / flan-T5 overflow fp16 in the FFN, and the CPU has no fp16
//                  kernels for the rest
#include <string_view>

namespace seqpipe::engine {

enum class ComputeType { kAuto, kFloat32, kFloat16, kBFloat16, kInt8, kInt8BFloat16 };

std::string_view compute_type_name(ComputeType type);
// "float32", "bfloat16", "int8", "int8_bfloat16", "auto" or "float16"; EngineError listing the
// names otherwise.
ComputeType parse_compute_type(std::string_view name);

}  // namespace seqpipe::engine
