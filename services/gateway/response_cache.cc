#include "gateway/response_cache.h"

#include <cstdio>

namespace seqpipe::gateway {

std::string cache_key(std::string_view model_id, const protocol::GenerateParams& p,
                      std::string_view text) {
  char params[256];
  std::snprintf(
      params, sizeof params, "%d|%d|%d|%.9g|%d|%d|%.9g|%d|%d|%.9g|%d|%.9g|%llu", p.max_new_tokens,
      p.num_beams, p.min_new_tokens, static_cast<double>(p.length_penalty), p.return_scores ? 1 : 0,
      p.num_return_sequences, static_cast<double>(p.repetition_penalty), p.no_repeat_ngram_size,
      p.do_sample ? 1 : 0, static_cast<double>(p.temperature), p.top_k,
      static_cast<double>(p.top_p), static_cast<unsigned long long>(p.seed.value_or(0)));
  std::string key(model_id);
  key += '\0';
  key += params;
  for (const std::string& s : p.stop) {  // each with its length: no two lists join the same
    key += '|' + std::to_string(s.size()) + ':';
    key += s;
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
