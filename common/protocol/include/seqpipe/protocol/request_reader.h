#pragma once
// The request validator under decode_request, after the bytes are unpacked: every field of
// `root` checked as decode_request checks it, with the same messages. The gateway's JSON and
// gRPC doors give it their request as a msgpack-c object built in memory (no bytes encoded or
// decoded), so one validator answers every door.
#include <msgpack.hpp>
#include <variant>

#include "seqpipe/protocol/protocol.h"

namespace seqpipe::protocol {

std::variant<Request, RejectedRequest> read_request(const msgpack::object& root,
                                                    const Limits& limits);

}  // namespace seqpipe::protocol
