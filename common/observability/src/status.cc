#include "seqpipe/observability/status.h"

#include <msgpack.hpp>
#include <type_traits>
#include <utility>

#include "seqpipe/protocol/msgpack_io.h"

namespace seqpipe::status {

std::vector<StageStatus> with_uptime(std::vector<StageStatus> stages,
                                     std::chrono::steady_clock::time_point started) {
  if (!stages.empty()) {
    stages.front().uptime_s =
        std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now() - started)
            .count();
  }
  return stages;
}

std::string encode(const std::vector<StageStatus>& stages) {
  std::string bytes;
  msgpack_io::Writer out(bytes);
  out.array(stages.size());
  for (const auto& s : stages) {
    const std::pair<std::string_view, int64_t> numbers[] = {
        {"replicas", s.replicas},         {"in_flight", s.in_flight}, {"queued", s.queued},
        {"free_credits", s.free_credits}, {"lost", s.lost},           {"uptime_s", s.uptime_s},
        {"requests", s.requests},         {"errors", s.errors}};
    out.map(1 + std::size(numbers));
    out.str("stage"), out.str(s.stage);
    for (const auto& [name, value] : numbers) out.str(name), out.i64(value);
  }
  return bytes;
}

std::optional<std::vector<StageStatus>> decode(std::string_view bytes) {
  // Limits before parsing: a few bytes claiming a huge array must not make msgpack allocate
  // for it (found by tests/fuzz). A hub reports a handful of stages of five fields each.
  if (bytes.size() > 64 * 1024) return std::nullopt;
  const msgpack::unpack_limit limits(/*array=*/64, /*map=*/16, /*str=*/256, /*bin=*/0, /*ext=*/0,
                                     /*depth=*/3);
  try {
    const msgpack::object_handle handle =
        msgpack::unpack(bytes.data(), bytes.size(), nullptr, nullptr, limits);
    std::vector<StageStatus> stages;
    for (const auto& entry :
         handle.get().as<std::vector<std::map<std::string, msgpack::object>>>()) {
      StageStatus s;
      s.stage = entry.at("stage").as<std::string>();
      s.replicas = entry.at("replicas").as<int>();
      s.in_flight = entry.at("in_flight").as<int>();
      s.queued = entry.at("queued").as<int>();
      s.free_credits = entry.at("free_credits").as<int>();
      // Absent from a hub of an older build: 0.
      auto optional = [&](const char* key, auto& field) {
        if (const auto it = entry.find(key); it != entry.end())
          field = it->second.as<std::remove_reference_t<decltype(field)>>();
      };
      optional("lost", s.lost);
      optional("uptime_s", s.uptime_s);
      optional("requests", s.requests);
      optional("errors", s.errors);
      stages.push_back(std::move(s));
    }
    return stages;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

}  // namespace seqpipe::status
