#pragma once
// For the HTTP front door's tests: a stand-in for the gateway's loop, taking the door's typed
// requests from a Submissions queue and answering each through its sink.
#include <poll.h>

#include <atomic>
#include <cctype>
#include <string>
#include <thread>

#include "gateway/submissions.h"
#include "seqpipe/protocol/protocol.h"

namespace seqpipe::gateway {

// A test gateway on its own thread: upper-cases each text, or answers `overloaded` for the text
// "busy"; a request the door's validator refused is answered with its error.
class TestGateway {
 public:
  TestGateway() : thread_([this] { serve(); }) {}
  ~TestGateway() {
    stop_ = true;
    thread_.join();
  }
  Submissions& submissions() { return submissions_; }

 private:
  void serve() {
    while (!stop_) {
      pollfd fd{submissions_.wake_fd(), POLLIN, 0};
      if (::poll(&fd, 1, 20) <= 0) continue;
      for (Submission& s : submissions_.take()) s.sink(answer(s));
    }
  }
  static protocol::Reply answer(const Submission& s) {
    if (const auto* rejected = std::get_if<protocol::RejectedRequest>(&s.request))
      return protocol::error_reply(*rejected);
    const auto& request = std::get<protocol::Request>(s.request);
    protocol::Reply reply;
    reply.id = request.id.value_or("");
    if (request.op == protocol::Op::kCancel) return reply;  // no sink listens for it
    reply.batch_form = request.batch_form;
    for (std::string t : request.texts) {
      for (char& c : t) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
      reply.texts.push_back(t);
    }
    if (request.texts.front() == "timeout?")  // what deadline came: for the header's test
      reply.texts = {std::to_string(request.timeout_ms.value_or(0))};
    if (request.texts.front() == "busy")
      reply = protocol::error_reply(reply.id, {protocol::ErrorCode::kOverloaded, "full"});
    return reply;
  }
  Submissions submissions_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace seqpipe::gateway
