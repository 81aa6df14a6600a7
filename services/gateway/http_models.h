#pragma once
// The HTTP front door's answers about the models it serves, from the model catalog of the moment:
// KServe v2's model metadata and OpenAI's model list. Pure functions, like http_json.h.
#include <optional>
#include <string_view>

#include "gateway/http_json.h"
#include "seqpipe/config/model_repository.h"

namespace seqpipe::gateway {

// GET /v2/models/<name>[/versions/<v>] (the metadata of a version `catalog` routes to),
// /v1/models (every model it serves) and /v1/models/<name> (one of them); nullopt for any other
// path, or one naming a model or version not served (the door's unrouted answer says so).
std::optional<HttpAnswer> model_listing(const config::ModelCatalog& catalog, std::string_view path);

}  // namespace seqpipe::gateway
