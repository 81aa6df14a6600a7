#include "seqpipe/send_command.h"

#include <chrono>
#include <cstdio>
#include <string>
#include <variant>
#include <zmq.hpp>

#include "seqpipe/cli/generate_flags.h"
#include "seqpipe/client.h"
#include "seqpipe/config/config.h"
#include "seqpipe/security/security.h"
#include "seqpipe/status_command.h"

namespace seqpipe::supervisor {
namespace {

// How long `send` waits for a connection to the gateway before it says none listens.
constexpr int64_t kConnectWaitMs = 1000;

// What `send` does, beyond its flags (CLI11 lists those, with their help): the footer of
// `seqpipe send --help`.
constexpr const char* kSendFooter =
    R"(Sends one request to the gateway (every gateway replica's client endpoint of the config, or
--endpoint: one or several, comma-separated; the request goes again, with its id, to the next
gateway when one dies or does not answer within 5 s; with no reply a second past the request's
deadline, --timeout-ms or gateway.default_timeout_ms, it says to start `seqpipe up`) and prints
the text(s), the score(s) with --scores, the per-stage timings, and each text's tokens and why
it ended (`tokens: prompt 5, completion 3 (length)`). --model and --version pick one of a model
repository's models (`not_found` when it serves no such model or version). The generation
options are HF generate()'s, the request's params (docs/PROTOCOL.md, "Generation options"; the
server checks their ranges); with --num-return-sequences N it prints N hypotheses per text, best
first, each with its score.
With security.server_key in the config, it is a CurveZMQ client with security.client_key's key
pair (docs/DEPLOY.md, "Keys").
Exit status: 0 ok, 1 the pipeline answered an error or did not answer, 2 bad usage or config.)";

// A reply as `seqpipe send` prints it: the texts (unless they went out streamed), scores,
// hypotheses, then the per-stage timings and each text's usage. 1 for an error reply.
int print_reply(const protocol::Reply& reply, bool streamed) {
  if (!reply.ok) {
    std::fprintf(stderr, "seqpipe send: error %s: %s\n",
                 std::string(protocol::wire_name(reply.error->code)).c_str(),
                 reply.error->message.c_str());
    return 1;
  }
  for (size_t i = 0; i < reply.texts.size(); ++i) {
    if (!streamed) std::printf("%s", reply.texts[i].c_str());
    if (reply.scores && i < reply.scores->size()) std::printf("\t(score %.4f)", (*reply.scores)[i]);
    std::printf("\n");
    if (!reply.sequences || i >= reply.sequences->size()) continue;
    for (size_t k = 0; k < (*reply.sequences)[i].size(); ++k) {
      const auto& h = (*reply.sequences)[i][k];
      std::printf("  %zu: %s\t(score %.4f)\n", k + 1, h.text.c_str(), h.score);
    }
  }
  const auto& t = reply.timings;
  std::printf(
      "timings (us): queue %llu, tokenize %llu, batch_wait %llu, encode %llu, decode %llu, "
      "postprocess %llu, total %llu\n",
      (unsigned long long)t.queue_us, (unsigned long long)t.tokenize_us,
      (unsigned long long)t.batch_wait_us, (unsigned long long)t.encode_us,
      (unsigned long long)t.decode_us, (unsigned long long)t.postprocess_us,
      (unsigned long long)t.total_us);
  for (const auto& u : reply.usage) {
    std::printf("tokens: prompt %u, completion %u (%s)\n", u.prompt_tokens, u.completion_tokens,
                std::string(protocol::wire_name(u.finish_reason)).c_str());
  }
  return 0;
}

using Result = std::variant<protocol::Reply, protocol::Error>;

// The pipeline ready within `wait_s` seconds (as `seqpipe status --wait` asks); false, said on
// stderr, when it is not.
bool ready_within(const config::PipelineConfig& c, int wait_s) {
  zmq::context_t context(1);
  const auto status = ask_until_ready(context, c, wait_s);
  if (status.ready()) return true;
  std::fprintf(stderr, "seqpipe send: the pipeline is not ready after %d s: no live %s\n", wait_s,
               missing_text(status).c_str());
  return false;
}

// Sends `request` and waits up to `wait` for its reply: streamed (the text printed as it comes;
// `streamed` true once some went out), cancelled when nothing came within `cancel_after_ms`, or
// one call.
Result exchange(client::Client& client, const protocol::Request& request,
                std::optional<uint32_t> cancel_after_ms, std::chrono::milliseconds wait,
                bool& streamed) {
  const Result not_sent =
      protocol::Error{protocol::ErrorCode::kUnavailable, "could not send the request"};
  if (request.stream) {
    const auto id = client.submit(request);
    Result result = not_sent;
    while (id) {
      result = client.receive(*id, wait);
      const auto* partial = std::get_if<protocol::Reply>(&result);
      if (!partial || !partial->partial) break;
      std::fputs(partial->texts.at(0).c_str(), stdout);
      std::fflush(stdout);
      streamed = true;
    }
    return result;
  }
  if (!cancel_after_ms) return client.call(request, wait);
  const auto id = client.submit(request);
  if (!id) return not_sent;
  Result result = client.receive(*id, std::chrono::milliseconds(*cancel_after_ms));
  if (auto* e = std::get_if<protocol::Error>(&result);
      e && e->code == protocol::ErrorCode::kUnavailable) {
    client.cancel(*id);  // no reply yet
    result = client.receive(*id, wait);
  }
  return result;
}

}  // namespace

CLI::App* add_send_command(CLI::App& app, SendArgs& a) {
  CLI::App* send = app.add_subcommand("send", "send one request to the gateway, print the reply");
  service::add_service_flags(*send, a.flags, false);
  send->add_option("--endpoint", a.endpoint,
                   "the gateway's client endpoint(s), comma-separated (default: the config's)")
      ->type_name("EP");
  cli::add_number(*send, "--wait", a.wait_s)
      ->description(
          "first wait up to N seconds for the pipeline to be ready (as `seqpipe status` asks: "
          "after `seqpipe up &`); not ready by then: exit status 1");
  cli::add_number(*send, "--timeout-ms", a.request.timeout_ms)
      ->description("the request's deadline (default: gateway.default_timeout_ms)");
  cli::add_number(*send, "--cancel-after-ms", a.cancel_after_ms)
      ->description(
          "cancel the request if no reply came within N ms, and print the reply that follows: "
          "`error cancelled`, or the result when it finished first");
  send->add_option_function<std::string>(
          "--model", [&a](const std::string& name) { a.request.model = name; },
          "the model to run, by its name in the server's repository (default: the server's "
          "default model)")
      ->type_name("NAME");
  cli::add_number(*send, "--version", a.request.version)
      ->description("the model's version to run (default: its highest)");
  send->add_flag("--stream", a.request.stream,
                 "print the text as it is decoded, word by word (one TEXT, greedy search; "
                 "docs/PROTOCOL.md, \"Streaming\")");
  cli::add_generate_options(*send, a.request.params);
  send->add_option("TEXT", a.request.texts, "the text(s) to send; several make a texts[] request");
  send->footer(kSendFooter);
  return send;
}

int send_command(SendArgs a) {
  protocol::Request& request = a.request;
  const service::ServiceArgs args = service::checked_service_args(a.flags);
  if (request.texts.empty()) throw cli::UsageError("give the text to send");
  if (request.stream && a.cancel_after_ms)
    throw cli::UsageError("--stream and --cancel-after-ms do not go together");
  request.batch_form = request.texts.size() > 1;
  const config::PipelineConfig c =
      config::load_pipeline_config(args.config_path, args.overrides).config;
  const std::string endpoint = a.endpoint.empty() ? config::client_endpoints(c) : a.endpoint;
  if (a.wait_s > 0 && !ready_within(c, a.wait_s)) return 1;

  client::Client client(endpoint, {.curve = security::client_keys(c.security)});
  // The gateway answers every request by its deadline (deadline_exceeded at worst), so a second
  // past it with nothing back means no gateway is there: say so then, not after a long wait.
  const uint32_t deadline_ms = request.timeout_ms.value_or(c.gateway.default_timeout_ms);
  const auto wait = std::chrono::milliseconds(deadline_ms + 1000);
  // Nothing listening is said at once, not after the whole deadline (10 s by default).
  const auto connect_wait = std::min(wait, std::chrono::milliseconds(kConnectWaitMs));
  if (!client.connected(connect_wait)) {
    std::fprintf(stderr,
                 "seqpipe send: no connection to %s within %lld ms: is the pipeline running? "
                 "Start it with `seqpipe up` (with the same --config and --set), or give its "
                 "gateway with --endpoint\n",
                 endpoint.c_str(), static_cast<long long>(connect_wait.count()));
    return 1;
  }
  bool streamed = false;  // the text went out in pieces as it came
  const Result result = exchange(client, request, a.cancel_after_ms, wait, streamed);
  if (const auto* e = std::get_if<protocol::Error>(&result)) {
    if (e->code == protocol::ErrorCode::kUnavailable) {
      std::fprintf(stderr,
                   "seqpipe send: no reply from %s within %lld ms: is the pipeline running? Start "
                   "it with `seqpipe up` (with the same --config and --set), or give its gateway "
                   "with --endpoint\n",
                   endpoint.c_str(), static_cast<long long>(wait.count()));
    } else {
      std::fprintf(stderr, "seqpipe send: %s (%s)\n", e->message.c_str(), endpoint.c_str());
    }
    return 1;
  }
  return print_reply(std::get<protocol::Reply>(result), streamed);
}

}  // namespace seqpipe::supervisor
