#pragma once
// For the HTTP front door's tests: a stand-in for the gateway's client ROUTER.
#include <atomic>
#include <cctype>
#include <span>
#include <string>
#include <thread>
#include <zmq.hpp>

#include "seqpipe/protocol/protocol.h"
#include "seqpipe/transport/transport.h"

namespace seqpipe::gateway {

// A test gateway: a ROUTER on inproc that upper-cases each text, or answers `overloaded` for the
// text "busy", on its own thread.
class TestGateway {
 public:
  explicit TestGateway(zmq::context_t& context)
      : socket_(context, zmq::socket_type::router), thread_([this] { serve(); }) {}
  ~TestGateway() {
    stop_ = true;
    thread_.join();
  }
  static constexpr const char* kEndpoint = "inproc://test-gateway";

 private:
  void serve() {
    while (!stop_) {
      auto frames = socket_.recv(std::chrono::milliseconds(20));
      if (!frames) continue;
      const std::string& body = frames->back();
      auto decoded = protocol::decode_request(
          std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(body.data()), body.size()),
          protocol::Limits{});
      protocol::Reply reply;
      if (auto* rejected = std::get_if<protocol::RejectedRequest>(&decoded)) {
        reply = protocol::error_reply(*rejected);
      } else {
        const auto& request = std::get<protocol::Request>(decoded);
        reply.id = request.id.value_or("");
        reply.batch_form = request.batch_form;
        for (std::string t : request.texts) {
          for (char& c : t) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
          reply.texts.push_back(t);
        }
        if (request.texts.front() == "timeout?")  // what deadline came: for the header's test
          reply.texts = {std::to_string(request.timeout_ms.value_or(0))};
        if (request.texts.front() == "busy")
          reply = protocol::error_reply(reply.id, {protocol::ErrorCode::kOverloaded, "full"});
      }
      // The whole envelope back, as the gateway does: the front door routes by it.
      frames->back() = protocol::encode_reply(reply);
      socket_.send(*frames);
    }
  }
  transport::Socket socket_;
  std::atomic<bool> bound_{(socket_.bind(kEndpoint), true)};
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace seqpipe::gateway
