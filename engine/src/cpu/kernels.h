#pragma once
// CPU kernels behind the ops (src/ops.h). Plain loops written for the compiler to vectorise.
#include <cstdint>

#include "ops.h"

namespace seqpipe::engine::cpu {

void rms_norm(const float* x, int64_t m, int64_t d, const float* w, float eps, float scale, float* y);
void embedding(const int* ids, int64_t n, const float* table, int64_t d, float* out);
void relu(float* x, int64_t n);
void gated_gelu(float* a, const float* b, int64_t n);
void attention(const ops::AttentionArgs& args);

}  // namespace seqpipe::engine::cpu
