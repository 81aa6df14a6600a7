#include "seqpipe/observability/status.h"

#include <cstdint>
#include <limits>
#include <msgpack.hpp>
#include <span>
#include <type_traits>
#include <utility>

#include "seqpipe/protocol/msgpack_io.h"

namespace seqpipe::status {

std::vector<StageStatus> with_uptime(std::vector<StageStatus> stages,
                                     std::chrono::steady_clock::time_point started,
                                     std::string_view about) {
  if (!stages.empty()) {
    stages.front().uptime_s =
        std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now() - started)
            .count();
    // Within what decode() takes of a string (a repository of many versions is a long line).
    constexpr size_t kMaxAbout = 2048;
    stages.front().about = about.size() <= kMaxAbout
                               ? std::string(about)
                               : std::string(about.substr(0, kMaxAbout - 3)) + "...";
  }
  return stages;
}

std::string encode(const std::vector<StageStatus>& stages) {
  std::string bytes;
  msgpack_io::Writer out(bytes);
  out.array(stages.size());
  for (const auto& s : stages) {
    const std::pair<std::string_view, int64_t> numbers[] = {{"replicas", s.replicas},
                                                            {"in_flight", s.in_flight},
                                                            {"queued", s.queued},
                                                            {"free_credits", s.free_credits},
                                                            {"lost", s.lost},
                                                            {"uptime_s", s.uptime_s},
                                                            {"requests", s.requests},
                                                            {"errors", s.errors},
                                                            {"client_errors", s.client_errors}};
    out.map(1 + std::size(numbers) + (s.about.empty() ? 0 : 1));
    out.str("stage"), out.str(s.stage);
    for (const auto& [name, value] : numbers) out.str(name), out.i64(value);
    if (!s.about.empty()) out.str("about"), out.str(s.about);
  }
  return bytes;
}

namespace {

// One stage's row, each number range-checked as an int32 or a non-negative int64; the fields
// after free_credits are absent from a hub of an older build (0), and fields of a newer one
// are ignored.
bool read_row(const msgpack::object& row, StageStatus& s) {
  if (row.type != msgpack::type::MAP) return false;
  const msgpack::object *stage = nullptr, *replicas = nullptr, *in_flight = nullptr,
                        *queued = nullptr, *free_credits = nullptr, *lost = nullptr,
                        *uptime_s = nullptr, *requests = nullptr, *errors = nullptr,
                        *client_errors = nullptr, *about = nullptr;
  const msgpack_io::NamedSlot fields[] = {{"stage", &stage},
                                          {"replicas", &replicas},
                                          {"in_flight", &in_flight},
                                          {"queued", &queued},
                                          {"free_credits", &free_credits},
                                          {"lost", &lost},
                                          {"uptime_s", &uptime_s},
                                          {"requests", &requests},
                                          {"errors", &errors},
                                          {"client_errors", &client_errors},
                                          {"about", &about}};
  std::optional<std::string> newer_field;
  if (msgpack_io::collect_fields(row.via.map, "", fields, newer_field)) return false;
  std::string_view name;
  if (!stage || msgpack_io::read_str(*stage, "status.stage", name)) return false;
  s.stage = std::string(name);
  std::string_view about_text;
  if (about && msgpack_io::read_str(*about, "status.about", about_text)) return false;
  s.about = std::string(about_text);
  constexpr int64_t kMin32 = std::numeric_limits<int32_t>::min();
  constexpr int64_t kMax32 = std::numeric_limits<int32_t>::max();
  constexpr int64_t kMax64 = std::numeric_limits<int64_t>::max();
  auto number = [](const msgpack::object* value, int64_t lo, int64_t hi, auto& field) {
    if (!value) return true;  // absent: the default
    int64_t n = 0;
    if (msgpack_io::read_int(*value, "status", lo, hi, n)) return false;
    field = static_cast<std::remove_reference_t<decltype(field)>>(n);
    return true;
  };
  return replicas && in_flight && queued && free_credits &&
         number(replicas, kMin32, kMax32, s.replicas) &&
         number(in_flight, kMin32, kMax32, s.in_flight) &&
         number(queued, kMin32, kMax32, s.queued) &&
         number(free_credits, kMin32, kMax32, s.free_credits) &&
         number(lost, kMin32, kMax32, s.lost) && number(uptime_s, 0, kMax64, s.uptime_s) &&
         number(requests, 0, kMax64, s.requests) && number(errors, 0, kMax64, s.errors) &&
         number(client_errors, 0, kMax64, s.client_errors);
}

}  // namespace

std::optional<std::vector<StageStatus>> decode(std::string_view bytes) {
  // A hub reports a handful of stages of eleven fields each, one a line of text.
  if (bytes.size() > 64 * 1024) return std::nullopt;
  const msgpack::unpack_limit limits(/*array=*/64, /*map=*/16, /*str=*/4096, /*bin=*/0, /*ext=*/0,
                                     /*depth=*/3);
  msgpack::object_handle handle;
  const std::span<const uint8_t> data(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  if (msgpack_io::unpack_one(data, limits, handle)) return std::nullopt;
  const msgpack::object& root = handle.get();
  if (root.type != msgpack::type::ARRAY) return std::nullopt;
  std::vector<StageStatus> stages(root.via.array.size);
  for (uint32_t i = 0; i < root.via.array.size; ++i) {
    if (!read_row(root.via.array.ptr[i], stages[i])) return std::nullopt;
  }
  return stages;
}

}  // namespace seqpipe::status
