#include "seqpipe/observability/status.h"

#include <msgpack.hpp>
#include <type_traits>

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
  msgpack::sbuffer buffer;
  msgpack::packer<msgpack::sbuffer> p(buffer);
  p.pack_array(static_cast<uint32_t>(stages.size()));
  for (const auto& s : stages) {
    p.pack_map(9);
    p.pack("stage");
    p.pack(s.stage);
    p.pack("replicas");
    p.pack(s.replicas);
    p.pack("in_flight");
    p.pack(s.in_flight);
    p.pack("queued");
    p.pack(s.queued);
    p.pack("free_credits");
    p.pack(s.free_credits);
    p.pack("lost");
    p.pack(s.lost);
    p.pack("uptime_s");
    p.pack(s.uptime_s);
    p.pack("requests");
    p.pack(s.requests);
    p.pack("errors");
    p.pack(s.errors);
  }
  return {buffer.data(), buffer.size()};
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
