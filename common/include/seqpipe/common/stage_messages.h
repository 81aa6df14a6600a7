#pragma once
// Messages between the pipeline's stages (internal protocol, version 1). One work item shape
// travels the whole DAG, each stage filling in its part (text -> ids -> encoder rows -> output
// ids -> text), so there is one schema to validate, not one per hop. Internal messages are
// decoded under the same discipline as client ones: size limits before parsing, msgpack unpack
// limits, every field type-checked; a malformed message is an Error value (logged, counted and
// dropped by the stage), never a crash.
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "seqpipe/common/protocol.h"

namespace seqpipe::stage {

constexpr int kVersion = 1;

enum class MessageKind {
  kReady,        // worker -> hub: my capacity is `credits` (on connect and reconnect)
  kCredit,       // worker -> hub: `credits` more are free (sent with or without results)
  kTokenize,     // gateway -> tokenizer: items with text
  kSequence,     // tokenizer -> batcher: items with ids
  kEncode,       // batcher -> encoder: one batch of items with ids
  kEncoded,      // encoder -> batcher: items with encoder rows
  kDecode,       // batcher -> decoder: items with encoder rows
  kDecoded,      // decoder -> batcher: items with output ids (and score)
  kPostprocess,  // batcher -> postprocessor: items with output ids
  kResult,       // postprocessor or any stage -> gateway: items with text or an error
  kCancel,       // gateway -> stages: drop the work of these requests
  kHeartbeat,    // both ways between a hub and each worker, every heartbeat interval (Paranoid
                 // Pirate); and between gateways and batchers (an item names the sender: gateway or
                 // batcher)
};
std::string_view kind_name(MessageKind kind);

// Microseconds each stage spent on an item, added up along the way (the reply's timings_us).
struct StageTimings {
  uint64_t queue_us = 0, tokenize_us = 0, batch_wait_us = 0, encode_us = 0, decode_us = 0,
           postprocess_us = 0;
  bool operator==(const StageTimings&) const = default;
};

struct WorkItem {
  uint64_t request = 0;  // the gateway's internal request id
  uint32_t index = 0;    // which text of the request
  std::string gateway;   // the owning gateway's identity: results go back to it
  // The batcher's ingress endpoint the gateway chose: tokenizers send the sequence there (empty:
  // the configured batcher.ingress_endpoint). In batcher heartbeats: the batcher's own.
  std::string batcher;
  int64_t deadline_unix_us = 0;  // wall clock, comparable across processes and machines
  protocol::GenerateParams params;
  std::string text;          // tokenizer input; postprocessor output
  std::vector<int32_t> ids;  // tokenizer output (input ids); decoder output (output ids)
  // Decoder output, beam search with postprocessor.known_words: the next best hypotheses' ids,
  // best first (at most 15), for the postprocessor to choose among.
  std::vector<std::vector<int32_t>> alternatives;
  int64_t rows = 0;    // encoder output: rows x d_model float32 values in `hidden`
  std::string hidden;  // little-endian float32 bytes
  float score = 0.0f;
  std::optional<protocol::Error>
      error;  // a stage failed this item; it goes straight to the gateway
  StageTimings timings;

  bool operator==(const WorkItem&) const = default;
};

struct StageMessage {
  MessageKind kind = MessageKind::kCredit;
  int32_t credits = 0;
  std::vector<WorkItem> items;

  bool operator==(const StageMessage&) const = default;
};

struct Limits {
  size_t max_message_bytes = 64 << 20;
  size_t max_items = 4096;
  size_t max_ids = 8192;  // per item
  size_t max_text_bytes = 1 << 20;
  size_t max_hidden_bytes = 32 << 20;  // per item
};

std::string encode(const StageMessage& message);
std::variant<StageMessage, protocol::Error> decode(std::span<const uint8_t> bytes,
                                                   const Limits& limits = {});
inline std::variant<StageMessage, protocol::Error> decode(std::string_view bytes,
                                                          const Limits& limits = {}) {
  return decode(
      std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()),
      limits);
}

}  // namespace seqpipe::stage
