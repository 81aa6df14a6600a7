#pragma once
// The gateway's response cache: successful results per (model, text, params), least
// recently used evicted first, bounded by a byte budget (keys and values counted). A search
// team's traffic repeats itself (the same misspelled queries again and again), so a hit skips
// the whole pipeline.
#include <cstddef>
#include <list>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "seqpipe/protocol/protocol.h"

namespace seqpipe::gateway {

struct CachedResult {
  std::string text;
  float score = 0.0f;
  protocol::Usage usage{};  // the same request computed again would take the same tokens
};

// Whether a reply to these params may be cached: it is the same every time (no unseeded
// sampling) and holds one text per input (no num_return_sequences).
inline bool cacheable(const protocol::GenerateParams& params) {
  return protocol::deterministic(params) && params.num_return_sequences == 1;
}
// The cache key: model id, every generation parameter, and the text exactly as sent (the
// speller keeps the input's whitespace and case, so texts differing only there differ in reply).
std::string cache_key(std::string_view model_id, const protocol::GenerateParams& params,
                      std::string_view text);

class ResponseCache {
 public:
  explicit ResponseCache(size_t budget_bytes) : budget_(budget_bytes) {}
  bool enabled() const { return budget_ > 0; }

  std::optional<CachedResult> get(const std::string& key);  // a hit becomes the most recent
  // Stores (or refreshes) an entry, evicting the least recent ones until the budget holds. An
  // entry larger than the whole budget is not stored.
  void put(const std::string& key, CachedResult value);

  size_t bytes() const { return bytes_; }
  size_t size() const { return index_.size(); }

 private:
  struct Entry {
    std::string key;
    CachedResult value;
  };
  static size_t cost(const std::string& key, const CachedResult& value) {
    return 2 * key.size() + value.text.size() + sizeof(Entry) + 64;  // key twice: list and index
  }
  size_t budget_;
  size_t bytes_ = 0;
  std::list<Entry> lru_;  // front: most recent
  std::unordered_map<std::string, std::list<Entry>::iterator> index_;
};

}  // namespace seqpipe::gateway
