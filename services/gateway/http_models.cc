#include "gateway/http_models.h"

#include <string>

#include "gateway/http_openai.h"

namespace seqpipe::gateway {

std::optional<HttpAnswer> model_listing(const config::ModelCatalog& catalog,
                                        std::string_view path) {
  constexpr std::string_view kOpenAiModels = "/v1/models";
  if (path == kOpenAiModels) return HttpAnswer{.body = openai_models(catalog.names(), 0)};
  if (path.starts_with(kOpenAiModels) && path[kOpenAiModels.size()] == '/') {
    const std::string name(path.substr(kOpenAiModels.size() + 1));
    if (catalog.versions(name).empty()) return std::nullopt;
    return HttpAnswer{.body = openai_model(name, 0)};
  }
  const auto named = kserve_model_path(path, "");
  if (!named || !std::holds_alternative<std::string>(catalog.resolve(named->name, named->version)))
    return std::nullopt;
  return HttpAnswer{.body = kserve_model_metadata(catalog, named->name, named->version)};
}

}  // namespace seqpipe::gateway
