#include "seqpipe/client.h"

#include <algorithm>
#include <deque>
#include <stdexcept>
#include <unordered_map>

#include "seqpipe/transport/transport.h"

namespace seqpipe::client {

using Clock = std::chrono::steady_clock;
using Answer = std::variant<protocol::Reply, protocol::Error>;

std::vector<std::string> split_endpoints(const std::string& endpoints) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= endpoints.size()) {
    const size_t comma = std::min(endpoints.find(',', start), endpoints.size());
    if (comma > start) out.push_back(endpoints.substr(start, comma - start));
    start = comma + 1;
  }
  return out;
}

struct Client::Impl {
  // A request sent and not answered yet: what a retry needs.
  struct Pending {
    std::string payload;  // sent again as is: the same id
    size_t gateway = 0;   // where it went last
    int attempts = 1;
    std::optional<Clock::time_point> deadline;  // from its timeout_ms: no retry past it
    // A partial came since its retry timer was set: its gateway is at work on it, and sent again
    // elsewhere a stream would start over, so the timer is set again instead.
    bool heard = false;
  };
  // When a pending request is due for a retry. retry_after is one constant, so these are in
  // send order and a FIFO is a timer queue; an entry of an answered request is skipped.
  struct RetryTimer {
    Clock::time_point at;
    std::string id;
    int attempt = 0;
  };

  ClientOptions options;
  zmq::context_t context{1};
  std::vector<std::unique_ptr<transport::Socket>> gateways;
  // Per gateway, its connection's up and down events (destroyed before the gateways' sockets).
  std::vector<std::unique_ptr<transport::ConnectionWatch>> watches;
  std::vector<bool> connected;
  transport::Poller poller;  // gateways 0..n-1, then their connection watches n..2n-1
  size_t current = 0;        // the gateway new requests go to
  std::unordered_map<std::string, Pending> pending;
  std::deque<RetryTimer> retries;
  uint64_t next_id = 1;

  std::string fresh_id() {
    std::string id = std::to_string(next_id++);
    id.insert(id.begin(), 'c');  // (not "c" + ...: GCC 12 warns -Wrestrict on it, wrongly)
    return id;
  }

  // A DEALER sends an empty delimiter first, as REQ does, so the gateway sees one envelope shape.
  // Never blocks: a gateway that refused this client's CurveZMQ key leaves the socket without a
  // connection, where a blocking send would wait forever.
  bool send_to(size_t gateway, const std::string& payload) {
    return gateways[gateway]->send({std::string_view(), std::string_view(payload)}, true);
  }
  bool send_tracked(const std::string& id, std::string payload,
                    std::optional<std::chrono::milliseconds> timeout) {
    if (!send_to(current, payload)) return false;
    const auto now = Clock::now();
    Pending p{std::move(payload), current, 1, std::nullopt};
    if (timeout) p.deadline = now + *timeout;
    pending.insert_or_assign(id, std::move(p));
    if (options.retry_after.count() > 0) retries.push_back({now + options.retry_after, id, 1});
    return true;
  }
  // The gateway after `g` to move to: the next connected one, else simply the next.
  size_t next_gateway(size_t g) const {
    const size_t n = gateways.size();
    for (size_t k = 1; k <= n; ++k) {
      if (connected[(g + k) % n]) return (g + k) % n;
    }
    return (g + 1) % n;
  }
  // Sends `id` again to the gateway after `p.gateway` (which then takes new requests too), unless
  // it has had its attempts or its deadline passed.
  void resend(const std::string& id, Pending& p, Clock::time_point now) {
    if (p.attempts >= options.max_attempts || (p.deadline && now >= *p.deadline)) return;
    if (p.gateway == current) current = next_gateway(current);
    p.gateway = current;
    ++p.attempts;
    send_to(p.gateway, p.payload);  // a failed send is retried at the next timer
    if (options.retry_after.count() > 0)
      retries.push_back({now + options.retry_after, id, p.attempts});
  }
  // A connection event of gateway `g`: a dropped connection sends what it held elsewhere at once.
  void on_connection_event(size_t g, transport::ConnectionWatch::Event event) {
    connected[g] = event == transport::ConnectionWatch::Event::kConnected;
    if (connected[g]) return;
    const auto now = Clock::now();
    for (auto& [id, p] : pending) {
      if (p.gateway == g) resend(id, p, now);
    }
    if (current == g) current = next_gateway(g);
  }
  // Sends every request due for a retry to the next gateway.
  void retry_due(Clock::time_point now) {
    while (!retries.empty() && retries.front().at <= now) {
      const RetryTimer timer = std::move(retries.front());
      retries.pop_front();
      const auto it = pending.find(timer.id);
      // Answered, or sent again since (by a dropped connection): not due.
      if (it == pending.end() || it->second.attempts != timer.attempt) continue;
      if (it->second.heard) {  // now + retry_after: the FIFO stays in order
        it->second.heard = false;
        retries.push_back({now + options.retry_after, timer.id, timer.attempt});
        continue;
      }
      resend(timer.id, it->second, now);
    }
  }
  // The next reply from any gateway within `until`, retrying what is due meanwhile. A reply to
  // an id not in flight (a second answer, or a late one to a call() given up) is dropped unless
  // `any_id` (call_raw: whatever comes back).
  std::optional<Answer> next_answer(Clock::time_point until, bool any_id) {
    while (true) {
      const auto now = Clock::now();
      retry_due(now);
      auto wake = until;
      if (!retries.empty()) wake = std::min(wake, retries.front().at);
      const auto wait = std::max(std::chrono::milliseconds(0),
                                 std::chrono::ceil<std::chrono::milliseconds>(wake - now));
      if (poller.poll(wait) <= 0) {
        if (Clock::now() >= until) return std::nullopt;
        continue;
      }
      for (size_t g = 0; g < gateways.size(); ++g) {
        if (!poller.readable(gateways.size() + g)) continue;
        while (auto event = watches[g]->next()) on_connection_event(g, *event);
      }
      for (size_t g = 0; g < gateways.size(); ++g) {
        if (!poller.readable(g)) continue;
        auto frames = gateways[g]->try_recv();
        if (!frames || frames->empty()) continue;
        const std::string& body = frames->back();
        Answer answer = protocol::decode_reply(
            std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(body.data()), body.size()));
        if (const auto* r = std::get_if<protocol::Reply>(&answer); r && !r->id.empty()) {
          // A streamed request's partial leaves it pending: its final reply is still to come.
          const auto it = pending.find(r->id);
          if (it == pending.end()) {
            if (!any_id) continue;  // answered already
          } else if (r->partial) {
            it->second.heard = true;
          } else {
            pending.erase(it);
          }
        }
        return answer;
      }
    }
  }
  Answer await(const std::string* want_id, std::chrono::milliseconds wait) {
    const auto until = Clock::now() + wait;
    while (auto answer = next_answer(until, want_id == nullptr)) {
      if (want_id != nullptr) {
        const auto* r = std::get_if<protocol::Reply>(&*answer);
        if (r == nullptr || r->id != *want_id) continue;  // another request's: not ours
      }
      return std::move(*answer);
    }
    return protocol::Error{protocol::ErrorCode::kUnavailable, "no reply from the gateway in time"};
  }
};

Client::Client(const std::string& endpoints, ClientOptions options)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.options = options;
  const std::vector<std::string> list = split_endpoints(endpoints);
  if (list.empty()) throw std::invalid_argument("no gateway endpoint given");
  for (size_t g = 0; g < list.size(); ++g) {
    transport::SocketOptions gateway_options;
    gateway_options.curve = options.curve;
    m.gateways.push_back(
        std::make_unique<transport::Socket>(m.context, zmq::socket_type::dealer, gateway_options));
    m.watches.push_back(std::make_unique<transport::ConnectionWatch>(m.context, *m.gateways[g]));
    m.gateways[g]->connect(list[g]);
    m.connected.push_back(false);
  }
  for (auto& gateway : m.gateways) m.poller.add(*gateway);
  for (auto& watch : m.watches) m.poller.add(watch->events());
}

Client::~Client() = default;

bool Client::connected(std::chrono::milliseconds wait) {
  Impl& m = *impl_;
  const auto until = Clock::now() + wait;
  for (;;) {
    for (size_t g = 0; g < m.gateways.size(); ++g) {
      while (auto event = m.watches[g]->next()) m.on_connection_event(g, *event);
    }
    if (std::find(m.connected.begin(), m.connected.end(), true) != m.connected.end()) return true;
    const auto now = Clock::now();
    if (now >= until) return false;
    // Short rounds: a reply already waiting would make every poll return at once.
    m.poller.poll(std::min(std::chrono::ceil<std::chrono::milliseconds>(until - now),
                           std::chrono::milliseconds(10)));
  }
}

Answer Client::call(const protocol::Request& request, std::chrono::milliseconds wait) {
  // Every request carries an id, so that a late reply to an earlier (timed-out) call is skipped.
  protocol::Request r = request;
  if (!r.id) r.id = impl_->fresh_id();
  const std::string id = *r.id;
  if (!submit(r))
    return protocol::Error{protocol::ErrorCode::kUnavailable, "could not send the request"};
  Answer answer = impl_->await(&id, wait);
  impl_->pending.erase(id);  // given up: a reply after this is dropped
  return answer;
}

std::optional<std::string> Client::submit(const protocol::Request& request) {
  std::optional<std::chrono::milliseconds> timeout;
  if (request.timeout_ms) timeout = std::chrono::milliseconds(*request.timeout_ms);
  if (request.id) {  // no copy: the load generator reuses one request
    if (!impl_->send_tracked(*request.id, protocol::encode_request(request), timeout))
      return std::nullopt;
    return *request.id;
  }
  protocol::Request r = request;
  r.id = impl_->fresh_id();
  if (!impl_->send_tracked(*r.id, protocol::encode_request(r), timeout)) return std::nullopt;
  return *r.id;
}

bool Client::cancel(const std::string& id) {
  protocol::Request cancel;
  cancel.op = protocol::Op::kCancel;
  cancel.id = id;
  const std::string payload = protocol::encode_request(cancel);
  // Every gateway it may have reached: a retried request can be in flight at several.
  const auto it = impl_->pending.find(id);
  const int sent_to = it == impl_->pending.end() ? 1 : it->second.attempts;
  const size_t last = it == impl_->pending.end() ? impl_->current : it->second.gateway;
  const size_t n = impl_->gateways.size();
  bool ok = true;
  for (int k = 0; k < std::min<int>(sent_to, static_cast<int>(n)); ++k)
    ok = impl_->send_to((last + n - static_cast<size_t>(k)) % n, payload) && ok;
  return ok;
}

Answer Client::receive(const std::string& id, std::chrono::milliseconds wait) {
  return impl_->await(&id, wait);
}

Answer Client::call_raw(const std::string& payload, std::chrono::milliseconds wait) {
  if (!impl_->send_to(impl_->current, payload))
    return protocol::Error{protocol::ErrorCode::kUnavailable, "could not send the request"};
  return impl_->await(nullptr, wait);
}

std::optional<Answer> Client::receive(std::chrono::milliseconds wait) {
  return impl_->next_answer(Clock::now() + wait, false);
}

}  // namespace seqpipe::client
