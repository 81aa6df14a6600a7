#pragma once
// Limits on the files of a model directory, the one definition that the engine and the config
// (which does not link the engine) both refer to. Header-only and without dependencies.
namespace seqpipe::generation {

// Largest config.json read (real ones are a few KB): a larger one is refused before it is read
// or parsed, so that a file in a model directory cannot make a process spend seconds and
// gigabytes parsing it.
inline constexpr unsigned long long kMaxModelConfigBytes = 1ull << 20;
// Largest seqpipe.yaml (the model's settings) read: smaller, as YAML parses ~100x slower than
// JSON (a 1 MB YAML document took ~10 s); the bundled speller's is 2.2 KB, mostly comments.
inline constexpr unsigned long long kMaxModelSettingsBytes = 64ull << 10;

// Largest safetensors header (the JSON after the 8-byte length; t5-11b's is ~100 KB): a longer
// one is refused before it is read or parsed.
inline constexpr unsigned long long kMaxSafetensorsHeaderBytes = 16ull << 20;

}  // namespace seqpipe::generation
