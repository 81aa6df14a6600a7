#include "gateway/response_cache.h"

#include "seqpipe/protocol/generate_options.h"

namespace seqpipe::gateway {

std::string cache_key(std::string_view model_id, const protocol::GenerateParams& p,
                      std::string_view text) {
  std::string key(model_id);
  key += '\0';
  // Every option that changes the output, by name: no two params read alike (a string option
  // carries each string's length).
  for (const protocol::GenerateOption& option : protocol::generate_options()) {
    if (!option.changes_output) continue;
    key += option.name;
    key += '=';
    key += protocol::value_text(option, p);
    key += '|';
  }
  key += '\0';
  key += text;
  return key;
}

std::optional<CachedResult> ResponseCache::get(const std::string& key) {
  auto it = index_.find(key);
  if (it == index_.end()) return std::nullopt;
  lru_.splice(lru_.begin(), lru_, it->second);
  return it->second->value;
}

void ResponseCache::put(const std::string& key, CachedResult value) {
  if (!enabled()) return;
  if (auto it = index_.find(key); it != index_.end()) {
    bytes_ -= cost(key, it->second->value);
    lru_.erase(it->second);
    index_.erase(it);
  }
  const size_t c = cost(key, value);
  if (c > budget_) return;
  while (bytes_ + c > budget_ && !lru_.empty()) {
    const Entry& last = lru_.back();
    bytes_ -= cost(last.key, last.value);
    index_.erase(last.key);
    lru_.pop_back();
  }
  lru_.push_front({key, std::move(value)});
  index_.emplace(key, lru_.begin());
  bytes_ += c;
}

}  // namespace seqpipe::gateway
