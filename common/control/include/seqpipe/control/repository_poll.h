#pragma once
// `seqpipe up`'s poll mode (model.repository_poll_ms), as Triton's --model-control-mode=poll: the
// repository is rescanned every interval and what changed on disk becomes requests to the
// lifecycle (model_lifecycle.h), the same loads and unloads `seqpipe models` sends. It acts on
// changes only: a version directory that appears or whose files change, once its files have
// stayed the same for one interval and the scan finds its weights whole (a copy in progress, or
// stalled half-way, is not loaded half-written: config::scan_repository); a
// version that failed to load is tried again only when its files change, and a version unloaded
// by hand stays unloaded until its files change.
//   - A name's newest version that is new or changed and not served: load it (a reload: the
//     name's other versions are unloaded once it is ready).
//   - A served version whose directory is gone: reload to the name's newest remaining version
//     when that one is not served, else unload it.
//   - An entry that cannot be served (missing files, a bad version directory): logged with its
//     path and reason when it appears or changes; the repository index lists it too.
#include <chrono>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "seqpipe/config/model_repository.h"
#include "seqpipe/control/model_control.h"
#include "seqpipe/control/model_lifecycle.h"

namespace seqpipe::control {

class RepositoryPoll {
 public:
  // `interval` 0: off (due() is never true).
  RepositoryPoll(std::string repository, std::chrono::milliseconds interval);

  // What `seqpipe up` started with: served as it is, not loaded again.
  void started(const config::ModelRepository& repository, Clock::time_point now);
  // Whether a scan is due at `now` (one interval since the last).
  bool due(Clock::time_point now) const;
  // Scans the repository: the requests its changes call for, given what the lifecycle serves
  // (its index). Logs what it does and the entries that cannot be served.
  std::vector<model_control::ControlRequest> poll(Clock::time_point now,
                                                  const model_control::ControlReply& index);

 private:
  using Fingerprints = std::map<std::string, std::string>;  // by model key
  struct Acted {
    config::ModelVersion model;
    std::string files;  // its fingerprint then
  };
  // One scan's findings and requests.
  struct Round {
    const model_control::ControlReply& index;
    Fingerprints files;                                         // every good version's, now
    std::map<std::string, const config::ModelVersion*> newest;  // by name: highest unchanged
    std::set<std::string> loading;  // names loaded this round (their other versions go with it)
    std::vector<model_control::ControlRequest> requests;
  };
  void load_changed(Round& round);
  void drop_removed(Round& round);
  void report_bad(const std::vector<config::BadEntry>& bad);

  std::string repository_;
  std::chrono::milliseconds interval_;
  Clock::time_point last_{};
  Fingerprints seen_;                   // every good version's files at the last scan
  std::map<std::string, Acted> acted_;  // by key: served at start or loaded here, files then
  std::map<std::string, std::string> reported_;  // bad entries logged: path -> reason and files
};

}  // namespace seqpipe::control
