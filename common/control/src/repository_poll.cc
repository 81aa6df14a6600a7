#include "seqpipe/control/repository_poll.h"

#include <cstdio>
#include <filesystem>
#include <optional>
#include <set>
#include <utility>

namespace seqpipe::control {
namespace {

namespace fs = std::filesystem;
using model_control::State;

// A directory's files as they are now: each regular file's name, size and modification time. A
// copy in progress or a replaced file changes it; "" for a path that is not a directory.
std::string fingerprint(const std::string& dir) {
  std::error_code ec;
  std::set<std::string> files;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    std::error_code fec;
    if (!entry.is_regular_file(fec)) continue;
    const auto size = entry.file_size(fec);
    const auto mtime = entry.last_write_time(fec).time_since_epoch().count();
    files.insert(entry.path().filename().string() + ":" + std::to_string(size) + ":" +
                 std::to_string(mtime));
  }
  std::string print;
  for (const std::string& f : files) print += f + ";";
  return print;
}

// A bad entry as logged: it is logged again when this changes.
std::string as_reported(const config::BadEntry& entry) {
  return entry.reason + "|" + fingerprint(entry.path);
}

bool served(State s) {
  return s == State::kReady || s == State::kLoading;
}

std::optional<State> state_of(const model_control::ControlReply& index, const std::string& key) {
  for (const auto& m : index.models)
    if (m.version > 0 && config::model_key(m.name, m.version) == key) return m.state;
  return std::nullopt;
}

model_control::ControlRequest request(model_control::Op op, const config::ModelVersion& m) {
  return model_control::ControlRequest{op, m.name, m.version};
}

void log(const std::string& line) {
  std::printf("seqpipe up: repository poll: %s\n", line.c_str());
  std::fflush(stdout);
}

}  // namespace

RepositoryPoll::RepositoryPoll(std::string repository, std::chrono::milliseconds interval)
    : repository_(std::move(repository)), interval_(interval) {}

void RepositoryPoll::started(const config::ModelRepository& repository, Clock::time_point now) {
  for (const auto& m : repository.models) {
    const std::string key = config::model_key(m.name, m.version);
    seen_[key] = fingerprint(m.dir);
    acted_[key] = Acted{m, seen_[key]};
  }
  for (const auto& entry : repository.bad)  // `seqpipe up` printed them
    reported_[entry.path] = as_reported(entry);
  last_ = now;
}

bool RepositoryPoll::due(Clock::time_point now) const {
  return interval_.count() > 0 && now - last_ >= interval_;
}

std::vector<model_control::ControlRequest> RepositoryPoll::poll(
    Clock::time_point now, const model_control::ControlReply& index) {
  last_ = now;
  const config::ModelRepository repo = config::scan_repository(repository_);
  report_bad(repo.bad);
  // A repository that cannot be read (unmounted, renamed) is not a repository emptied: every
  // version stays as it is until it can be read again.
  if (repo.bad.size() == 1 && repo.bad[0].path == repository_) return {};
  Round round{index, {}, {}, {}, {}};
  for (const auto& m : repo.models) {
    const std::string key = config::model_key(m.name, m.version);
    round.files[key] = fingerprint(m.dir);
    const auto seen = seen_.find(key);
    if (seen != seen_.end() && seen->second == round.files[key]) round.newest[m.name] = &m;
  }
  load_changed(round);
  drop_removed(round);
  seen_ = std::move(round.files);
  return std::move(round.requests);
}

void RepositoryPoll::load_changed(Round& round) {
  for (const auto& [name, m] : round.newest) {
    const std::string key = config::model_key(name, m->version);
    const auto acted = acted_.find(key);
    if (acted != acted_.end() && acted->second.files == round.files[key]) continue;
    const std::optional<State> state = state_of(round.index, key);
    if (state == State::kUnloading) continue;  // a load is refused until it is done: next round
    acted_[key] = Acted{*m, round.files[key]};
    if (state && served(*state)) {
      log(key +
          ": its files changed while it is served; not reloaded in place (copy the new "
          "files in as a new version)");
      continue;
    }
    log("loading " + key + " from " + m->dir);
    round.requests.push_back(request(model_control::Op::kLoad, *m));
    round.loading.insert(name);
  }
}

void RepositoryPoll::drop_removed(Round& round) {
  for (auto it = acted_.begin(); it != acted_.end();) {
    const auto& [key, acted] = *it;
    const std::optional<State> state = state_of(round.index, key);
    if (round.files.count(key) || !state || !served(*state) ||
        round.loading.count(acted.model.name)) {
      it = round.files.count(key) ? std::next(it) : acted_.erase(it);
      continue;
    }
    // The name's newest version left on disk, when it is not served: reload to it.
    const auto other = round.newest.find(acted.model.name);
    const std::string other_key =
        other == round.newest.end() ? "" : config::model_key(other->first, other->second->version);
    const std::optional<State> other_state = state_of(round.index, other_key);
    if (!other_key.empty() && !(other_state && served(*other_state))) {
      log(key + " was removed: reloading " + other_key);
      round.requests.push_back(request(model_control::Op::kLoad, *other->second));
      acted_[other_key] = Acted{*other->second, round.files[other_key]};
      round.loading.insert(acted.model.name);
    } else {
      log(key + " was removed: unloading it");
      round.requests.push_back(request(model_control::Op::kUnload, acted.model));
    }
    it = acted_.erase(it);
  }
}

void RepositoryPoll::report_bad(const std::vector<config::BadEntry>& bad) {
  std::map<std::string, std::string> now;
  for (const auto& entry : bad) {
    const std::string print = as_reported(entry);
    now[entry.path] = print;
    const auto it = reported_.find(entry.path);
    if (it == reported_.end() || it->second != print)
      log(entry.path + ": " + entry.reason + " (not served)");
  }
  reported_ = std::move(now);
}

}  // namespace seqpipe::control
