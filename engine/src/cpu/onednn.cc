#include "cpu/onednn.h"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <unordered_map>

#include "cpu/kernels.h"
#include "cpu/packed_gemm.h"
#include "seqpipe/engine/error.h"

namespace seqpipe::engine::cpu {

namespace {

using dnnl::memory;
using tag = memory::format_tag;
using dt = memory::data_type;

const dnnl::engine& cpu_engine() {
  static const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

dt src_type(DataType dtype) {
  return dtype == DataType::kBF16 ? dt::bf16 : dt::u8;
}
dt weight_type(DataType dtype) {
  return dtype == DataType::kBF16 ? dt::bf16 : dt::s8;
}
dt dst_type(DataType dtype) {
  return dtype == DataType::kBF16 ? dt::f32 : dt::s32;
}

// A matmul is compiled for one row count (~50 KB of generated code, 0.1-2 ms to make). Row
// counts above 8 are rounded up to a multiple of 8 (the padding rows computed and dropped), and
// inputs above kChunkRows run in chunks: a thread holds at most 39 matmuls per weight shape
// however the batch sizes vary. packed_gemm compiles nothing, so its inputs run whole (an
// encoder batch's 288 rows as one pass over the weights, not 256 and then 32).
constexpr int64_t kChunkRows = 256;

// Passes over inputs or outputs of at least this many elements (an encoder batch's hundreds of
// rows) run on every thread; a decoder step's few rows are not worth waking them for.
constexpr int64_t kThreadedPass = int64_t{1} << 16;
int64_t row_bucket(int64_t m) {
  return m <= 8 ? m : (m + 7) / 8 * 8;
}

dnnl::matmul::primitive_desc matmul_desc(DataType dtype, int64_t m, int64_t n, int64_t k,
                                         const memory::desc& weights) {
  const memory::desc src({m, k}, src_type(dtype), tag::ab);
  const memory::desc dst({m, n}, dst_type(dtype), tag::ab);
  return dnnl::matmul::primitive_desc(dnnl::matmul::desc(src, weights, dst), cpu_engine());
}

// One thread's compiled matmuls, the memory objects bound to them, and its scratch buffers.
// Entries are made on first use of a shape and kept, so after warm-up this code allocates
// nothing per call; oneDNN's execute itself does (packed_gemm.h), which is why a decoder step's
// row counts do not go through it.
struct Matmul {
  dnnl::matmul primitive;
  memory src, dst;
};

struct Key {
  DataType dtype;
  int64_t m, n, k;
  bool operator==(const Key&) const = default;
};
struct KeyHash {
  size_t operator()(const Key& key) const {
    return std::hash<int64_t>()(((key.m * 131 + key.n) * 131 + key.k) * 2 +
                                static_cast<int64_t>(key.dtype));
  }
};

struct ThreadState {
  dnnl::stream stream{cpu_engine()};
  std::unordered_map<Key, Matmul, KeyHash> matmuls;
  std::vector<uint16_t> x_bf16;
  std::vector<uint8_t> x_u8;
  std::vector<float> x_scales;
  std::vector<float> y_f32;    // bf16's products
  std::vector<int32_t> y_s32;  // int8's integer sums
};

ThreadState& thread_state() {
  thread_local ThreadState state;
  return state;
}

template <typename T>
T* grown(std::vector<T>& v, int64_t n) {
  if (v.size() < static_cast<size_t>(n)) v.resize(static_cast<size_t>(n));
  return v.data();
}

Matmul& matmul_for(ThreadState& ts, const OneDnnWeight& w, int64_t m) {
  const Key key{w.dtype, m, w.out, w.in};
  auto it = ts.matmuls.find(key);
  if (it != ts.matmuls.end()) return it->second;
  const auto pd = matmul_desc(w.dtype, m, w.out, w.in, w.desc);
  Matmul mm{dnnl::matmul(pd), memory(pd.src_desc(), cpu_engine(), DNNL_MEMORY_NONE),
            memory(pd.dst_desc(), cpu_engine(), DNNL_MEMORY_NONE)};
  return ts.matmuls.emplace(key, std::move(mm)).first->second;
}

void run(ThreadState& ts, Matmul& mm, const OneDnnWeight& w, void* src, void* dst) {
  mm.src.set_data_handle(src);
  mm.dst.set_data_handle(dst);
  // The C call takes the arguments as an array: the C++ one builds a hash map per call.
  const dnnl_exec_arg_t args[] = {{DNNL_ARG_SRC, mm.src.get()},
                                  {DNNL_ARG_WEIGHTS, w.memory.get()},
                                  {DNNL_ARG_DST, mm.dst.get()}};
  const dnnl_status_t status = dnnl_primitive_execute(mm.primitive.get(), ts.stream.get(), 3, args);
  if (status != dnnl_success)
    throw EngineError("oneDNN matmul failed (status " + std::to_string(status) + ")");
}

// The column blocks' stride when `desc` is the layout packed_gemm.h reads, else 0.
int64_t packed_gemm_block_stride(const memory::desc& desc, DataType dtype, int64_t k) {
  const dnnl_memory_desc_t& d = desc.data;
  const int64_t vnni = dtype == DataType::kI8 ? 4 : 2;
  const auto& b = d.format_desc.blocking;
  const bool plain_blocks = d.format_kind == dnnl_blocked && d.extra.flags == 0 &&
                            b.inner_nblks == 3 && b.inner_blks[0] == 16 && b.inner_idxs[0] == 0 &&
                            b.inner_blks[1] == 64 && b.inner_idxs[1] == 1 &&
                            b.inner_blks[2] == vnni && b.inner_idxs[2] == 0 &&
                            b.strides[0] == 16 * 64 * vnni;
  return plain_blocks && k % vnni == 0 ? b.strides[1] : 0;
}

bool is_reference(const dnnl::matmul::primitive_desc& pd) {
  return std::string(pd.impl_info_str()).rfind("ref", 0) == 0;
}

// The weights' layout, the same for every row count (checked at use: a primitive for another row
// count is created with it or fails loudly): packed_gemm.h's 64-column blocks wherever oneDNN has
// a non-reference matmul over them. Left to choose, oneDNN 2.6 picks by the CPU and by the OpenMP
// threads at load (src/cpu/x64/matmul/brgemm_matmul_utils.cpp): with few rows and more threads
// than column blocks its AVX-512 kernels, and on AMX its bf16 ones whenever the work is small,
// narrow the blocks to 32 or 48 columns, which packed_gemm does not read, and then every decoder
// step would run in oneDNN's execute, which allocates. Given this layout, it computes over it at
// every row count (tested on AVX-512; on AMX its source skips the narrowing for a given layout).
// Where it has no such matmul: its own choice, as before, and every call runs in oneDNN.
memory::desc weight_layout(DataType dtype, int64_t n, int64_t k) {
  const memory::desc ours({k, n}, weight_type(dtype),
                          dtype == DataType::kI8 ? tag::BA16a64b4a : tag::BA16a64b2a);
  try {
    if (!is_reference(matmul_desc(dtype, 16, n, k, ours))) return ours;
  } catch (const dnnl::error&) {
    // No matmul for this layout on this CPU: oneDNN's own choice, below.
  }
  const auto pd = matmul_desc(dtype, 16, n, k, memory::desc({k, n}, weight_type(dtype), tag::any));
  if (is_reference(pd))
    throw EngineError("oneDNN has only its reference matmul for this type on this CPU");
  return pd.weights_desc();
}

}  // namespace

bool onednn_runs(DataType dtype) {
  if (dtype == DataType::kBF16) return __builtin_cpu_supports("avx512bf16");
  // Without VNNI oneDNN's int8 kernels sum u8 x s8 pairs in saturating int16.
  if (dtype == DataType::kI8) return __builtin_cpu_supports("avx512vnni");
  return false;
}

std::shared_ptr<const OneDnnWeight> pack_weight(const Tensor& w, DataType dtype) {
  auto packed = std::make_shared<OneDnnWeight>();
  packed->dtype = dtype;
  packed->out = w.dim(0);
  packed->in = w.dim(1);
  const int64_t n = packed->out, k = packed->in;
  packed->desc = weight_layout(dtype, n, k);
  packed->memory = memory(packed->desc, cpu_engine());
  // HF's [out, in] row-major is oneDNN's [in, out] with tag ba.
  const dt source_type = w.dtype() == DataType::kF32    ? dt::f32
                         : w.dtype() == DataType::kBF16 ? dt::bf16
                                                        : dt::s8;
  const memory::desc plain({k, n}, source_type, tag::ba);
  memory source(plain, cpu_engine(), const_cast<void*>(w.data_as<void>()));
  dnnl::stream stream(cpu_engine());
  dnnl::reorder(source, packed->memory).execute(stream, source, packed->memory);
  stream.wait();
  packed->data = packed->memory.get_data_handle();
  packed->block_stride = packed_gemm_block_stride(packed->desc, dtype, k);
  if (dtype == DataType::kI8) {
    packed->sums.resize(static_cast<size_t>(n));
    for (int64_t j = 0; j < n; ++j) {
      const int8_t* row = w.data_as<int8_t>() + j * k;
      int32_t sum = 0;
      for (int64_t i = 0; i < k; ++i) sum += row[i];
      packed->sums[static_cast<size_t>(j)] = sum;
    }
  }
  return packed;
}

void linear_packed(const float* x, int64_t m, const OneDnnWeight& w, const float* scales,
                   float beta, float* y) {
  const int64_t n = w.out, k = w.in;
  // A decoder step's row counts run in packed_gemm (no allocation); int8's larger ones too (the
  // encoder's: 10-15% faster than oneDNN's execute at 128 and 288 rows on an AVX-512 VNNI Xeon),
  // unless oneDNN has AMX's tiles for them; bf16's larger ones through oneDNN.
  static const bool amx = dnnl::get_effective_cpu_isa() == dnnl::cpu_isa::avx512_core_amx;
  const bool own =
      w.block_stride > 0 && (m <= kPackedGemmMaxRows || (w.dtype == DataType::kI8 && !amx));
  if (!own && m > kChunkRows) {
    for (int64_t r = 0; r < m; r += kChunkRows) {
      linear_packed(x + r * k, std::min(kChunkRows, m - r), w, scales, beta, y + r * n);
    }
    return;
  }
  ThreadState& ts = thread_state();
  // oneDNN runs on the calling thread's OpenMP pool: give it the engine's thread count.
  if (omp_get_max_threads() != num_threads()) omp_set_num_threads(num_threads());
  const int64_t rows = own ? m : row_bucket(m);
  Matmul* mm = own ? nullptr : &matmul_for(ts, w, rows);
  if (w.dtype == DataType::kBF16) {
    uint16_t* xb = grown(ts.x_bf16, rows * k);
    to_bf16(x, m * k, xb);
    if (own) {
      packed_gemm_bf16(xb, m, k, static_cast<const uint16_t*>(w.data), w.block_stride, n, beta, y);
      return;
    }
    std::memset(xb + m * k, 0, static_cast<size_t>((rows - m) * k) * sizeof(uint16_t));
    float* acc = grown(ts.y_f32, rows * n);
    run(ts, *mm, w, xb, acc);
#pragma omp parallel for num_threads(num_threads()) schedule(static) if (m * n >= kThreadedPass)
    for (int64_t i = 0; i < m; ++i) {
      const float* a = acc + i * n;
      float* out = y + i * n;
#pragma omp simd
      for (int64_t j = 0; j < n; ++j) out[j] = beta == 0.0f ? a[j] : a[j] + beta * out[j];
    }
    return;
  }
  uint8_t* q = grown(ts.x_u8, rows * k);
  float* x_scales = grown(ts.x_scales, m);
#pragma omp parallel for num_threads(num_threads()) schedule(static) if (m * k >= kThreadedPass)
  for (int64_t i = 0; i < m; ++i) {
    uint8_t* qi = q + i * k;
    quantize_rows(x + i * k, 1, k, reinterpret_cast<int8_t*>(qi), x_scales + i);
    // s8 -> u8 by adding 128 (flipping the sign bit): VNNI multiplies u8 by s8.
#pragma omp simd
    for (int64_t j = 0; j < k; ++j) qi[j] = static_cast<uint8_t>(qi[j] ^ 0x80u);
  }
  const U8S8Output output{w.sums.data(), scales, x_scales, beta};
  if (own) {
    packed_gemm_u8s8(q, m, k, static_cast<const int8_t*>(w.data), w.block_stride, n, output, y);
    return;
  }
  std::memset(q + m * k, 0, static_cast<size_t>((rows - m) * k));
  int32_t* acc = grown(ts.y_s32, rows * n);
  run(ts, *mm, w, q, acc);
  // U8S8Output's formula, as packed_gemm_u8s8 applies it in its registers.
#pragma omp parallel for num_threads(num_threads()) schedule(static) if (m * n >= kThreadedPass)
  for (int64_t i = 0; i < m; ++i) {
    const int32_t* a = acc + i * n;
    float* out = y + i * n;
    const float sx = x_scales[i];
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) {
      const float v = static_cast<float>(a[j] - 128 * output.sums[j]) * sx * scales[j];
      out[j] = beta == 0.0f ? v : v + beta * out[j];
    }
  }
}

}  // namespace seqpipe::engine::cpu
