#include "codec.h"

namespace seqpipe::protocol::codec {
Error invalid(std::string message) {
  return {ErrorCode::kInvalidArgument, std::move(message)};
}
Error too_long(std::string message) {
  return {ErrorCode::kTooLong, std::move(message)};
}

void write_texts(msgpack_io::Writer& out, const std::vector<std::string>& texts) {
  out.array(texts.size());
  for (const std::string& text : texts) out.str(text);
}

}  // namespace seqpipe::protocol::codec
