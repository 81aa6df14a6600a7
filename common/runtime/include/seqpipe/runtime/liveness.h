#pragma once
// Heartbeats as the ZeroMQ guide's Paranoid Pirate, both sides of it, socket-free (time is
// passed in). A hub keeps a HubLiveness for its workers: any message from a worker counts as a
// sign of life, the hub sends every known worker a heartbeat each interval, and a worker silent
// for `liveness` intervals is dead. A worker keeps a PeerLiveness for its hub: silence for
// `liveness` intervals means reconnect, after a pause that doubles each failed attempt.
#include <chrono>
#include <string>
#include <string_view>
#include <vector>

#include "seqpipe/messages/clock.h"

namespace seqpipe::common {

class HubLiveness {
 public:
  HubLiveness(std::chrono::milliseconds interval, int liveness);

  void seen(std::string_view worker, SteadyClock::time_point now);
  void forget(std::string_view worker);
  // The workers silent for liveness intervals, removed from the table.
  std::vector<std::string> take_dead(SteadyClock::time_point now);
  // True at most once per interval: time to send every known worker a heartbeat.
  bool heartbeat_due(SteadyClock::time_point now);
  // Workers that sent nothing in the last interval: counted at each heartbeat, their sum is the
  // heartbeats missed (until a worker is declared dead and leaves the table).
  int silent(SteadyClock::time_point now) const;
  const std::vector<std::string>& workers() const { return ids_; }
  std::chrono::milliseconds interval() const { return interval_; }

 private:
  std::chrono::milliseconds interval_;
  SteadyClock::duration timeout_;
  std::vector<std::string> ids_;  // parallel vectors: a handful of workers per hub
  std::vector<SteadyClock::time_point> last_seen_;
  SteadyClock::time_point next_heartbeat_{};
};

class PeerLiveness {
 public:
  PeerLiveness(std::chrono::milliseconds interval, int liveness,
               std::chrono::milliseconds reconnect_max, SteadyClock::time_point now);

  // A message from the hub arrived.
  void seen(SteadyClock::time_point now);
  // True at most once per interval: send the hub a heartbeat.
  bool heartbeat_due(SteadyClock::time_point now);
  // True when the hub has been silent for liveness intervals: reconnect now, after
  // reconnect_pause() (which doubles for the next time, up to reconnect_max, until seen()).
  bool hub_dead(SteadyClock::time_point now) const { return now - last_seen_ > timeout_; }
  std::chrono::milliseconds reconnect_pause();
  // A new connection was made: it gets a full liveness period before it is judged.
  void reconnected(SteadyClock::time_point now) { last_seen_ = now; }
  // How long the loop may wait before a heartbeat is due.
  std::chrono::milliseconds until_heartbeat(SteadyClock::time_point now) const;

 private:
  std::chrono::milliseconds interval_, reconnect_max_, pause_;
  SteadyClock::duration timeout_;
  SteadyClock::time_point last_seen_, next_heartbeat_;
};

}  // namespace seqpipe::common
