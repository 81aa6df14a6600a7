// A decoder step allocates nothing, in every compute type and with either CPU kernel choice: the
// engine's buffers are sized when a Generator is made, and the bf16 / int8 linear layers run a
// decoder step's rows outside oneDNN's execute, which allocates per call (src/cpu/packed_gemm.h).
// Its own executable: it links bench/allocation_counter.cc, which replaces the global operator
// new to count heap allocations.
#include <gtest/gtest.h>

#include <string>

#include "allocation_counter.h"
#include "seqpipe/engine/decoding.h"
#include "seqpipe/engine/encoder.h"
#include "test_util.h"

namespace seqpipe::engine {
namespace {

class DecodeAllocationTest : public ::testing::TestWithParam<std::tuple<ComputeType, CpuKernels>> {
};

// Heap allocations over the steps of a second run (the first grows what grows once), but the
// last step of each, which builds the results.
void expect_steps_allocate_nothing(const ModelOptions& model_options) {
  auto model = T5Model::load(test::data_dir() + "/t5v11-tiny-random", model_options);
  Encoder encoder(model);
  const EncoderOutput encoded =
      encoder.encode({{467, 413, 398, 67, 58, 36, 434, 17, 1}, {387, 191, 1}, {12, 99, 250, 7, 1}});
  Generator generator(model, {.cache = {.num_slots = 8, .max_target_len = 16}});
  const DecodingOptions options{.max_new_tokens = 10, .min_new_tokens = 10};
  std::vector<Generator::Finished> finished;
  finished.reserve(8);
  // The first run grows what grows once (per-thread buffers, oneDNN's compiled kernels).
  uint64_t counted_steps = 0, allocations = 0;
  for (int run = 0; run < 2; ++run) {
    generator.add(encoded, std::vector<DecodingOptions>(encoded.size(), options));
    for (int step = 0; step < options.max_new_tokens; ++step) {
      const bool last = step + 1 == options.max_new_tokens;  // builds the results: allocates
      const uint64_t before = bench::allocations();
      generator.step(finished);
      if (run == 1 && !last) {
        allocations += bench::allocations() - before;
        ++counted_steps;
      }
    }
    ASSERT_EQ(generator.active(), 0);
    finished.clear();
  }
  EXPECT_EQ(counted_steps, 9u);
  EXPECT_EQ(allocations, 0u) << "over " << counted_steps << " steps of 3 sequences";
}

TEST_P(DecodeAllocationTest, DecoderStepsAllocateNothing) {
  const auto [type, kernels] = GetParam();
  expect_steps_allocate_nothing({.threads = 2, .compute_type = type, .cpu_kernels = kernels});
}

// Many threads, as on a many-core host: the model's threads reach oneDNN as OpenMP's when it packs
// the weights (through OpenBLAS's openblas_set_num_threads; the engine's own kernels stay within
// this machine's cores), and left to choose it would pack them in column blocks the decoder
// step's loops do not read (src/cpu/onednn.cc): the steps would run in its execute.
TEST(DecodeAllocation, DecoderStepsAllocateNothingWithManyThreads) {
  for (ComputeType type : {ComputeType::kBFloat16, ComputeType::kInt8}) {
    SCOPED_TRACE(compute_type_name(type));
    expect_steps_allocate_nothing({.threads = 64, .compute_type = type});
  }
}

// On a GPU: the staging of tokens, the attention jobs' uploads and the ids' download reuse
// buffers sized once, and cuBLASLt's plans are made by the first run.
TEST(GpuDecodeAllocation, DecoderStepsAllocateNothing) {
  SEQPIPE_SKIP_WITHOUT(Device::kCuda);
  for (ComputeType type : {ComputeType::kFloat32, ComputeType::kBFloat16}) {
    expect_steps_allocate_nothing({.device = Device::kCuda, .compute_type = type});
  }
}

INSTANTIATE_TEST_SUITE_P(
    ComputeTypes, DecodeAllocationTest,
    ::testing::Combine(::testing::Values(ComputeType::kFloat32, ComputeType::kBFloat16,
                                         ComputeType::kInt8),
                       ::testing::Values(CpuKernels::kBest, CpuKernels::kPortable)),
    [](const auto& info) {
      return std::string(compute_type_name(std::get<0>(info.param))) +
             (std::get<1>(info.param) == CpuKernels::kBest ? "_best" : "_portable");
    });

}  // namespace
}  // namespace seqpipe::engine
