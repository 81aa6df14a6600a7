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

using msgpack_io::unpack_one;

void write_texts(msgpack_io::Writer& out, const std::vector<std::string>& texts);

}  // namespace seqpipe::protocol::codec
