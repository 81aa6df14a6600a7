// libFuzzer target: the gateway's HTTP bodies. Any bytes as a /v1/generate, KServe v2 infer,
// OpenAI (completion or chat) or TGI body must become a request the protocol decoder takes (or
// refuses) or an error answer, and any bytes as a gateway reply must become an HTTP answer, without
// crashing.
#include <cstdint>
#include <cstdlib>
#include <span>
#include <string_view>
#include <variant>

#include "gateway/http_json.h"
#include "gateway/http_openai.h"
#include "gateway/http_tgi.h"
#include "gateway/json_request.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace seqpipe;
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  for (auto translated :
       {gateway::generate_request(bytes, "http-1"), gateway::kserve_infer_request(bytes, "http-2"),
        gateway::openai_request(bytes, "http-3", false, 0),
        gateway::openai_request(bytes, "http-4", true, 0),
        gateway::tgi_request(bytes, "http-5", true)}) {
    if (auto* request = std::get_if<gateway::HttpRequest>(&translated)) {
      (void)gateway::typed_request(*request, *gateway::SharedCatalog::only("model"));
    } else if (std::get<gateway::HttpAnswer>(translated).status < 400) {
      std::abort();  // an answer without a request is an error answer
    }
  }
  (void)gateway::generate_reply(bytes, "id");
  (void)gateway::kserve_infer_reply(bytes, "id", "model");
  gateway::HttpRequest chat;
  chat.chat = true;
  (void)gateway::openai_reply(bytes, chat, "model");
  (void)gateway::openai_events(bytes, gateway::HttpRequest{}, "model");
  // With usage asked for: the usage chunk and TGI's details read the reply's usage.
  gateway::HttpRequest counted;
  counted.include_usage = true;
  counted.details = true;
  (void)gateway::openai_events(bytes, counted, "model");
  (void)gateway::tgi_reply(bytes, counted);
  (void)gateway::tgi_event(bytes, 0, counted);
  return 0;
}
