// Credit accounting of the hubs' load-aware dispatch.
#include "seqpipe/runtime/credit_queue.h"

#include <gtest/gtest.h>

#include <map>

namespace seqpipe::common {
namespace {

TEST(CreditQueue, NoWorkerNoCreditNoDispatch) {
  CreditQueue q;
  EXPECT_FALSE(q.take().has_value());
  q.announce("a", 0);
  EXPECT_FALSE(q.take().has_value());
}

TEST(CreditQueue, NeverSendsMoreThanAWorkerAnnounced) {
  CreditQueue q;
  q.announce("a", 2);
  EXPECT_EQ(q.take(), "a");
  EXPECT_EQ(q.take(), "a");
  EXPECT_FALSE(q.take().has_value());
  q.release("a", 1);
  EXPECT_EQ(q.take(), "a");
  q.release("a", 5);  // more than it held: capped at capacity
  EXPECT_EQ(q.free_credits("a"), 2);
}

TEST(CreditQueue, ASlowWorkerStopsGettingWorkWhileOthersTakeIt) {
  CreditQueue q;
  q.announce("slow", 2);
  q.announce("fast", 2);
  std::map<std::string, int> sent;
  // 20 pieces of work; only "fast" ever returns its credit.
  for (int i = 0; i < 20; ++i) {
    auto w = q.take();
    ASSERT_TRUE(w.has_value()) << "piece " << i;
    ++sent[*w];
    if (*w == "fast") q.release("fast", 1);
  }
  EXPECT_GE(sent["slow"], 1);
  EXPECT_LE(sent["slow"], 2) << "the slow worker holds at most what it announced";
  EXPECT_EQ(sent["slow"] + sent["fast"], 20);
}

TEST(CreditQueue, PrefersTheLeastLoadedThenTheLongestIdle) {
  CreditQueue q;
  q.announce("a", 4);
  q.announce("b", 4);
  EXPECT_EQ(q.take(), "a");
  EXPECT_EQ(q.take(), "b");  // b has more free credit now
  EXPECT_EQ(q.take(), "a");  // equal again: a waited longer
  EXPECT_EQ(q.total_free(), 5);
}

TEST(CreditQueue, CostTakesSeveralCreditsFromOneWorker) {
  CreditQueue q;  // a decoder's credits are KV-cache slots; a 4-beam search needs 4 on one worker
  q.announce("d1", 3);
  q.announce("d2", 5);
  EXPECT_EQ(q.largest_free(), 5);
  EXPECT_EQ(q.take(4), "d2");
  EXPECT_FALSE(q.take(4).has_value()) << "7 free in total, but no single worker has 4";
  EXPECT_EQ(q.take(3), "d1");
}

TEST(CreditQueue, ReannounceResetsAndRemoveForgets) {
  CreditQueue q;
  q.announce(std::string("\0id", 3), 2);  // routing ids are bytes
  EXPECT_EQ(q.take(), std::string("\0id", 3));
  q.announce(std::string("\0id", 3), 3);  // reconnected: full capacity again
  EXPECT_EQ(q.free_credits(std::string("\0id", 3)), 3);
  EXPECT_TRUE(q.remove(std::string("\0id", 3)));
  EXPECT_FALSE(q.remove(std::string("\0id", 3)));
  EXPECT_EQ(q.free_credits(std::string("\0id", 3)), -1);
  EXPECT_EQ(q.size(), 0u);
}

}  // namespace
}  // namespace seqpipe::common
