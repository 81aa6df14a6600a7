#pragma once
// The sockets of the model control messages (control/model_control.h): the supervisor's catalog
// to a gateway, and a client's request to the supervisor's control socket.
#include <chrono>
#include <optional>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "seqpipe/control/model_control.h"
#include "seqpipe/transport/transport.h"

namespace seqpipe::model_control {

// Sends the catalog to the gateway whose tokenizer endpoint is `endpoint`; nullopt when it did not
// answer within `wait`.
std::optional<InFlight> send_catalog(zmq::context_t& context, const std::string& endpoint,
                                     const std::vector<CatalogEntry>& catalog,
                                     std::chrono::milliseconds wait,
                                     const transport::CurveKeys& curve);

// Asks the supervisor on `endpoint`; an error (kUnavailable) when it did not answer in `wait`.
ControlReply ask_supervisor(zmq::context_t& context, const std::string& endpoint,
                            const ControlRequest& request, std::chrono::milliseconds wait);

}  // namespace seqpipe::model_control
