#pragma once
// What the request and the reply codecs share: error values, the one-object unpacking under
// limits, the texts array.
#include <cstddef>
#include <msgpack.hpp>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "seqpipe/protocol/msgpack_io.h"
#include "seqpipe/protocol/protocol.h"

namespace seqpipe::protocol::codec {

// A v1 request nests two levels (the map, then params or texts). The margin lets an unknown field
// holding a small structure be reported by its name rather than as "nested too deep".
inline constexpr size_t kMaxNesting = 8;

Error invalid(std::string message);
Error too_long(std::string message);

// Unpacks exactly one msgpack object filling all of `bytes`, its strings pointing into `bytes`.
// Never throws msgpack's exceptions.
std::optional<Error> unpack_one(std::span<const uint8_t> bytes, const msgpack::unpack_limit& limit,
                                msgpack::object_handle& out);

void write_texts(msgpack_io::Writer& out, const std::vector<std::string>& texts);

}  // namespace seqpipe::protocol::codec
