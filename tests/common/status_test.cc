// The status reply `seqpipe status` reads from the hubs: round trip, and garbage is refused.
#include "seqpipe/common/status.h"

#include <gtest/gtest.h>

namespace seqpipe::status {
namespace {

TEST(Status, RoundTrips) {
  const std::vector<StageStatus> stages{{"gateway", 1, 3, 2, 0}, {"decoder", 2, 40, 5, 24}};
  EXPECT_EQ(decode(encode(stages)), stages);
  EXPECT_EQ(decode(encode({})), std::vector<StageStatus>{});
}

TEST(Status, RefusesWhatIsNotAStatusReply) {
  EXPECT_FALSE(decode(kProbe).has_value());
  EXPECT_FALSE(decode("").has_value());
  EXPECT_FALSE(
      decode("\x91\x81\xa5stage\x01").has_value());  // [{"stage": 1}]: wrong type, fields missing
  // A few bytes claiming a 3.7-billion-element array (found by the fuzzer): refused, not allocated.
  EXPECT_FALSE(decode(std::string("\xdd\xdd\xdd\xdd\xdd", 5)).has_value());
  std::string truncated = encode({{"encoder", 2, 1, 0, 7}});
  truncated.pop_back();
  EXPECT_FALSE(decode(truncated).has_value());
}

}  // namespace
}  // namespace seqpipe::status
