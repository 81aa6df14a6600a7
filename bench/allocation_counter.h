#pragma once
// Counts the heap allocations of the whole process, to show that a decode loop makes none:
// linking allocation_counter.cc (an object library) replaces the global operator new and delete.
// Used by engine_bench and by the engine's no-allocation test.
#include <cstdint>

namespace seqpipe::bench {

// Allocations through operator new so far, all threads together.
uint64_t allocations();

}  // namespace seqpipe::bench
