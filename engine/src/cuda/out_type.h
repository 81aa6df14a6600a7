#pragma once
// The kernels' OutType (src/cuda/half_math.h) for an activation's element type, shared by the
// backend (src/cuda/backend.cu) and the kernels' host twins (src/cuda/reference.cc).
#include "cuda/half_math.h"
#include "seqpipe/engine/tensor.h"

namespace seqpipe::engine::cuda {

// bf16 and fp16 as themselves; every other type the ops let through is f32.
inline math::OutType out_type(DataType t) {
  return t == DataType::kBF16  ? math::OutType::kBF16
         : t == DataType::kF16 ? math::OutType::kF16
                               : math::OutType::kF32;
}

}  // namespace seqpipe::engine::cuda
