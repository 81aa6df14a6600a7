#include "gateway/json_request.h"

#include <msgpack.hpp>
#include <nlohmann/json.hpp>

#include "seqpipe/protocol/request_reader.h"

namespace seqpipe::gateway {

using nlohmann::json;

namespace {

// `value` as the validator's value, built in `zone` (strings point into `value`, which outlives
// it): the object an unpacked msgpack frame of the same fields would be, with no bytes between.
msgpack::object to_object(const json& value, msgpack::zone& zone) {
  msgpack::object o;
  switch (value.type()) {
    case json::value_t::boolean:
      o.type = msgpack::type::BOOLEAN, o.via.boolean = value.get<bool>();
      break;
    case json::value_t::number_unsigned:
      o.type = msgpack::type::POSITIVE_INTEGER, o.via.u64 = value.get<uint64_t>();
      break;
    case json::value_t::number_integer: {
      const auto n = value.get<int64_t>();
      if (n >= 0) {
        o.type = msgpack::type::POSITIVE_INTEGER, o.via.u64 = static_cast<uint64_t>(n);
      } else {
        o.type = msgpack::type::NEGATIVE_INTEGER, o.via.i64 = n;
      }
      break;
    }
    case json::value_t::number_float:
      o.type = msgpack::type::FLOAT64, o.via.f64 = value.get<double>();
      break;
    case json::value_t::string: {
      const auto& s = value.get_ref<const std::string&>();
      o.type = msgpack::type::STR, o.via.str.ptr = s.data();
      o.via.str.size = static_cast<uint32_t>(s.size());
      break;
    }
    case json::value_t::array: {
      o.type = msgpack::type::ARRAY, o.via.array.size = static_cast<uint32_t>(value.size());
      auto* items = static_cast<msgpack::object*>(
          zone.allocate_align(sizeof(msgpack::object) * value.size(), alignof(msgpack::object)));
      size_t i = 0;
      for (const json& item : value) items[i++] = to_object(item, zone);
      o.via.array.ptr = items;
      break;
    }
    case json::value_t::object: {
      o.type = msgpack::type::MAP, o.via.map.size = static_cast<uint32_t>(value.size());
      auto* entries = static_cast<msgpack::object_kv*>(zone.allocate_align(
          sizeof(msgpack::object_kv) * value.size(), alignof(msgpack::object_kv)));
      size_t i = 0;
      for (const auto& [key, item] : value.items()) {
        msgpack::object& k = entries[i].key;
        k.type = msgpack::type::STR, k.via.str.ptr = key.data();
        k.via.str.size = static_cast<uint32_t>(key.size());
        entries[i++].val = to_object(item, zone);
      }
      o.via.map.ptr = entries;
      break;
    }
    case json::value_t::binary: {
      const auto& b = value.get_binary();
      o.type = msgpack::type::BIN, o.via.bin.ptr = reinterpret_cast<const char*>(b.data());
      o.via.bin.size = static_cast<uint32_t>(b.size());
      break;
    }
    default:  // null, discarded
      o.type = msgpack::type::NIL;
      break;
  }
  return o;
}

}  // namespace

std::variant<protocol::Request, protocol::RejectedRequest> typed_request(
    const HttpRequest& request, const config::ModelCatalog& catalog, const RequestLimits& limits) {
  // The size first, as decode_request's: the door's message (its body) stands for the frame.
  if (request.message_bytes > limits.loosest.max_message_bytes) {
    protocol::RejectedRequest too_long;
    too_long.error.code = protocol::ErrorCode::kTooLong;
    too_long.error.message = "message is " + std::to_string(request.message_bytes) +
                             " bytes, at most " + std::to_string(limits.loosest.max_message_bytes);
    too_long.id = request.internal_id;
    return too_long;
  }
  msgpack::zone zone;
  const msgpack::object root = to_object(request.fields, zone);
  auto typed = protocol::read_request(root, limits.loosest);
  const auto* r = std::get_if<protocol::Request>(&typed);
  if (r == nullptr || r->op == protocol::Op::kCancel || limits.own.empty()) return typed;
  // Its version's token and beam caps are below the loosest: its own rules, its own messages.
  const auto key = catalog.resolve(r->model, r->version);
  if (const auto* found = std::get_if<std::string>(&key)) {
    if (auto own = limits.own.find(*found); own != limits.own.end())
      return protocol::read_request(root, own->second);
  }
  return typed;  // a model not served: the gateway answers not_found
}

std::variant<protocol::Request, protocol::RejectedRequest> typed_request(
    const HttpRequest& request, const SharedCatalog& shared) {
  return typed_request(request, *shared.get(), *shared.limits());
}

}  // namespace seqpipe::gateway
