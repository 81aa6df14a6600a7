#pragma once
// The model catalog as the front doors' threads read it. The gateway's loop replaces it when the
// supervisor sends a new one (Gateway::set_models), right after the gateway's own, so on the
// loop's thread it is always the catalog the gateway routes by; a door's thread takes the one of
// the moment, and keeps it for as long as it looks.
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "seqpipe/config/model_repository.h"

namespace seqpipe::gateway {

class SharedCatalog {
 public:
  explicit SharedCatalog(config::ModelCatalog catalog)
      : catalog_(std::make_shared<const config::ModelCatalog>(std::move(catalog))) {}
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
  std::shared_ptr<const config::ModelCatalog> get() const {
    std::lock_guard lock(mutex_);
    return catalog_;
  }

 private:
  mutable std::mutex mutex_;
  std::shared_ptr<const config::ModelCatalog> catalog_;
};

}  // namespace seqpipe::gateway
