#include "codec.h"

namespace seqpipe::protocol::codec {
namespace {

// The decoded strings point into the caller's buffer, which outlives the decoding: no copies.
bool reference_input(msgpack::type::object_type, size_t, void*) {
  return true;
}

}  // namespace

Error invalid(std::string message) {
  return {ErrorCode::kInvalidArgument, std::move(message)};
}
Error too_long(std::string message) {
  return {ErrorCode::kTooLong, std::move(message)};
}

std::optional<Error> unpack_one(std::span<const uint8_t> bytes, const msgpack::unpack_limit& limit,
                                msgpack::object_handle& out) {
  size_t offset = 0;
  try {
    out = msgpack::unpack(reinterpret_cast<const char*>(bytes.data()), bytes.size(), offset,
                          reference_input, nullptr, limit);
  } catch (const msgpack::depth_size_overflow&) {
    return invalid("message nests arrays or maps deeper than " + std::to_string(limit.depth()) +
                   " levels");
  } catch (const msgpack::array_size_overflow&) {
    return too_long("message holds an array of more than " + std::to_string(limit.array()) +
                    " elements");
  } catch (const msgpack::map_size_overflow&) {
    return invalid("message holds a map of more than " + std::to_string(limit.map()) + " entries");
  } catch (const msgpack::size_overflow&) {
    // A string, binary or ext longer than the whole frame: the frame is cut short.
    return invalid("message is truncated msgpack (a value is longer than the message)");
  } catch (const msgpack::insufficient_bytes&) {
    return invalid("message is truncated msgpack");
  } catch (const msgpack::unpack_error&) {
    return invalid("message is not valid msgpack");
  }
  if (offset != bytes.size()) {
    return invalid("message has " + std::to_string(bytes.size() - offset) +
                   " bytes after its first msgpack value");
  }
  return std::nullopt;
}

void write_texts(msgpack_io::Writer& out, const std::vector<std::string>& texts) {
  out.array(texts.size());
  for (const std::string& text : texts) out.str(text);
}

}  // namespace seqpipe::protocol::codec
