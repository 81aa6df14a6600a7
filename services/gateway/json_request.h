#pragma once
// A front door's request as the typed protocol::Request the gateway takes (Gateway::submit): the
// request's fields, as every JSON and gRPC door builds them (HttpRequest::fields: the msgpack
// request's fields as JSON), checked by the protocol's one validator (protocol::read_request,
// decode_request's own) under the limits the gateway publishes (SharedCatalog): the loosest
// first, then the named model version's own where its caps are smaller, as the gateway checks
// a msgpack client's. Every message is the msgpack door's, word for word.
#include <variant>

#include "gateway/http_json.h"
#include "gateway/shared_catalog.h"
#include "seqpipe/protocol/protocol.h"

namespace seqpipe::gateway {

std::variant<protocol::Request, protocol::RejectedRequest> typed_request(
    const HttpRequest& request, const config::ModelCatalog& catalog, const RequestLimits& limits);
// With the catalog and limits of the moment.
std::variant<protocol::Request, protocol::RejectedRequest> typed_request(
    const HttpRequest& request, const SharedCatalog& shared);

}  // namespace seqpipe::gateway
