#pragma once
// The model catalog as the front doors' threads read it, with the limits each version's requests
// are checked under (RequestLimits). The gateway's loop replaces them when the supervisor sends a
// new catalog (Gateway::set_models), right after the gateway's own, so on the loop's thread they
// are always the ones the gateway routes by; a door's thread takes those of the moment, and keeps
// them for as long as it looks.
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "seqpipe/config/model_repository.h"
#include "seqpipe/protocol/protocol.h"

namespace seqpipe::gateway {

// What a request is checked under before its model is known (the gateway's limits with the
// largest token and beam caps of the versions), and the versions whose own caps are smaller, by
// key: their requests are checked again under their own (ModelSettingsTable::decode_limits).
struct RequestLimits {
  protocol::Limits loosest;
  std::map<std::string, protocol::Limits> own;
};

class SharedCatalog {
 public:
  explicit SharedCatalog(config::ModelCatalog catalog, RequestLimits limits = {})
      : catalog_(std::make_shared<const config::ModelCatalog>(std::move(catalog))),
        limits_(std::make_shared<const RequestLimits>(std::move(limits))) {}
  // One model, `name` version 1, as a pipeline without a repository serves it (key "").
  static std::unique_ptr<SharedCatalog> only(const std::string& name) {
    return std::make_unique<SharedCatalog>(
        config::ModelCatalog({{name, 1, ""}}, name, /*single=*/true));
  }
  void set(config::ModelCatalog catalog) {
    auto next = std::make_shared<const config::ModelCatalog>(std::move(catalog));
    std::lock_guard lock(mutex_);
    catalog_ = std::move(next);
  }
  void set(config::ModelCatalog catalog, RequestLimits limits) {
    auto next = std::make_shared<const RequestLimits>(std::move(limits));
    set(std::move(catalog));
    std::lock_guard lock(mutex_);
    limits_ = std::move(next);
  }
  std::shared_ptr<const config::ModelCatalog> get() const {
    std::lock_guard lock(mutex_);
    return catalog_;
  }
  std::shared_ptr<const RequestLimits> limits() const {
    std::lock_guard lock(mutex_);
    return limits_;
  }

 private:
  mutable std::mutex mutex_;
  std::shared_ptr<const config::ModelCatalog> catalog_;
  std::shared_ptr<const RequestLimits> limits_;
};

}  // namespace seqpipe::gateway
