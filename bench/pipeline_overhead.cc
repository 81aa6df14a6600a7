// What the pipeline costs on top of the model: the same batch-1 requests answered by the engine
// in-process and by the full pipeline (`seqpipe up`, one replica per stage, real processes and
// sockets), on ipc:// and on tcp://127.0.0.1; overhead = pipeline - engine at p50 and p99. For
// scale, a bare ZeroMQ relay chain with the same number of hops as a request's path (10) is
// measured in the same run, and the overhead is reported as a ratio to it. On tcp:// the same
// requests also go as HTTP/JSON (POST /v1/generate on a kept-alive connection), alternating with
// the msgpack ones, and the HTTP cost is the difference of the two; so do KServe v2 gRPC
// ModelInfer calls (one channel kept open, from a client process of its own: kserve_grpc_timer).
//
// With --batch N: throughput instead, the engine in-process and the pipeline alternating round by
// round on batches of N texts (engine_bench's generate). Options: kUsage below, or --help.
#include <arpa/inet.h>
#include <httplib.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iterator>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "decoder/decoder_stage.h"
#include "seqpipe/cli/cli.h"
#include "seqpipe/client.h"
#include "seqpipe/config/config.h"
#include "seqpipe/engine/decoding.h"
#include "seqpipe/engine/tokenizer.h"
#include "seqpipe/security/security.h"
#include "seqpipe/transport/transport.h"

namespace {

using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;
constexpr int kHops = 10;  // client>gw>tok>batcher>enc>batcher>dec>batcher>post>gw>client

double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

std::string endpoint(bool tcp, const std::string& dir, const std::string& name) {
  return tcp ? "tcp://127.0.0.1:" + std::to_string(free_port())
             : "ipc://" + dir + "/" + name + ".sock";
}

void stop(pid_t pid) {
  ::kill(pid, SIGTERM);
  ::waitpid(pid, nullptr, 0);
}

// Round trips of a 20 KB message through kHops - 1 relay processes (PULL -> PUSH), in ms.
std::vector<double> relay_chain(bool tcp, const std::string& dir, int messages) {
  std::vector<std::string> endpoints;
  for (int i = 0; i < kHops; ++i)
    endpoints.push_back(endpoint(tcp, dir, "relay" + std::to_string(i)));
  std::vector<pid_t> relays;
  for (int i = 0; i + 1 < kHops; ++i) {
    const pid_t pid = ::fork();
    if (pid == 0) {  // a relay: its own context, created after the fork
      zmq::context_t context(1);
      seqpipe::transport::Socket in(context, zmq::socket_type::pull),
          out(context, zmq::socket_type::push);
      in.bind(endpoints[static_cast<size_t>(i)]);
      out.connect(endpoints[static_cast<size_t>(i) + 1]);
      for (;;) {
        if (auto frames = in.recv(std::chrono::milliseconds(1000))) out.send(*frames);
        if (::getppid() == 1) std::_Exit(0);
      }
    }
    relays.push_back(pid);
  }
  std::vector<double> ms;
  {
    zmq::context_t context(1);
    seqpipe::transport::Socket out(context, zmq::socket_type::push),
        back(context, zmq::socket_type::pull);
    back.bind(endpoints.back());
    out.connect(endpoints.front());
    const std::string payload(20 * 1024, 'x');
    for (int i = 0; i < messages + 50; ++i) {  // the first 50 warm the connections up
      const auto start = Clock::now();
      out.send({std::string_view(payload)});
      if (!back.recv(std::chrono::milliseconds(5000))) break;
      if (i >= 50)
        ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
    }
  }
  for (pid_t pid : relays) stop(pid);
  return ms;
}

struct PipelineSamples {
  std::vector<double> msgpack_ms;
  std::vector<double> http_ms;    // tcp:// only
  std::vector<double> openai_ms;  // tcp:// only: POST /v1/completions
  std::vector<double> grpc_ms;    // tcp:// only: KServe v2 gRPC ModelInfer
};

// One POST's time in ms, or nullopt when it failed or its text is not `text`: /v1/generate's
// reply, or with `openai` a completion's first choice.
std::optional<double> timed_post(httplib::Client& http, const char* path, const std::string& body,
                                 const std::string& text, bool openai) {
  const auto start = Clock::now();
  const auto res = http.Post(path, body, "application/json");
  const double ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  if (!res || res->status != 200) return std::nullopt;
  const auto reply = nlohmann::json::parse(res->body);
  if ((openai ? reply["choices"][0]["text"] : reply["text"]) != text) return std::nullopt;
  return ms;
}

// The KServe v2 gRPC client (kserve_grpc_timer) as a process of its own: each time() makes one
// ModelInfer call there and reads back its time.
class GrpcTimer {
 public:
  GrpcTimer(int port, const std::string& model, const seqpipe::protocol::Request& request) {
    int in[2], out[2];
    if (::pipe(in) != 0 || ::pipe(out) != 0) return;
    const std::string name = std::filesystem::path(model).lexically_normal().filename();
    const std::string port_text = std::to_string(port);
    const std::string tokens = std::to_string(request.params.max_new_tokens);
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(in[0], 0);
      ::dup2(out[1], 1);
      for (const int fd : {in[0], in[1], out[0], out[1]}) ::close(fd);  // stdin ends with ours
      ::execl(KSERVE_GRPC_TIMER, KSERVE_GRPC_TIMER, port_text.c_str(), name.c_str(),
              request.texts[0].c_str(), tokens.c_str(), static_cast<char*>(nullptr));
      std::_Exit(127);
    }
    ::close(in[0]);
    ::close(out[1]);
    to_ = ::fdopen(in[1], "w");
    from_ = ::fdopen(out[0], "r");
  }
  ~GrpcTimer() {
    if (to_) std::fclose(to_);  // the client's stdin ends: it exits
    if (from_) std::fclose(from_);
    if (pid_ > 0) ::waitpid(pid_, nullptr, 0);
  }
  GrpcTimer(const GrpcTimer&) = delete;
  GrpcTimer& operator=(const GrpcTimer&) = delete;

  // One call's time in ms, or nullopt when it failed or its text is not `text`.
  std::optional<double> time(const std::string& text) {
    if (!to_ || !from_ || std::fputs("\n", to_) < 0 || std::fflush(to_) != 0) return std::nullopt;
    char line[4096];
    if (!std::fgets(line, sizeof line, from_)) return std::nullopt;
    std::string answer(line);
    if (!answer.empty() && answer.back() == '\n') answer.pop_back();
    const size_t tab = answer.find('\t');
    if (tab == std::string::npos || answer.substr(0, tab) == "error" ||
        answer.substr(tab + 1) != text)
      return std::nullopt;
    return std::stod(answer.substr(0, tab));
  }

 private:
  pid_t pid_ = -1;
  FILE* to_ = nullptr;
  FILE* from_ = nullptr;
};

// Runs `args` (`seqpipe up ...`) with its output in `log`.
pid_t start(const std::vector<std::string>& args, const std::string& log) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    std::freopen(log.c_str(), "w", stdout);
    std::freopen(log.c_str(), "a", stderr);
    std::vector<char*> argv;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    std::_Exit(127);
  }
  return pid;
}

// Sends `request` until it goes all the way through (true), `seqpipe up` (`up`) has exited or
// 100 tries have failed (false, said on stderr with the log to read).
bool wait_until_serving(seqpipe::client::Client& c, const seqpipe::protocol::Request& request,
                        pid_t up, std::chrono::milliseconds per_try, const std::string& log) {
  for (int tries = 0; tries < 100; ++tries) {
    auto r = c.call(request, per_try);
    if (auto* reply = std::get_if<seqpipe::protocol::Reply>(&r); reply && reply->ok) return true;
    if (::waitpid(up, nullptr, WNOHANG) == up) {
      std::fprintf(stderr, "pipeline_overhead: seqpipe up exited; see %s\n", log.c_str());
      return false;
    }
  }
  std::fprintf(stderr, "pipeline_overhead: the pipeline never answered; see %s\n", log.c_str());
  return false;
}

// `seqpipe up`'s --set list: one replica a stage, the gateway's client endpoint `client`, and
// on tcp:// every internal endpoint on 127.0.0.1; then `extra_sets`.
std::vector<std::string> pipeline_sets(bool tcp, const std::string& model, const std::string& dir,
                                       const std::string& client, int http_port, int grpc_port,
                                       const std::vector<std::string>& extra_sets) {
  std::vector<std::string> sets{"model.dir=" + model,
                                "runtime_dir=" + dir,
                                "gateway.client_endpoint=" + client,
                                "gateway.metrics_port=0",
                                "batcher.metrics_port=0",
                                "gateway.http_endpoint=127.0.0.1:" + std::to_string(http_port),
                                "gateway.grpc_endpoint=127.0.0.1:" + std::to_string(grpc_port),
                                "tokenizer.replicas=1",
                                "encoder.replicas=1",
                                "decoder.replicas=1",
                                "postprocessor.replicas=1",
                                "gateway.default_timeout_ms=10000"};
  if (tcp) {
    for (const char* key : {"gateway.tokenizer_endpoint", "gateway.results_endpoint",
                            "batcher.ingress_endpoint", "batcher.encoder_endpoint",
                            "batcher.decoder_endpoint", "batcher.postprocessor_endpoint"}) {
      sets.push_back(std::string(key) + "=" + endpoint(true, dir, key));
    }
  }
  sets.insert(sets.end(), extra_sets.begin(), extra_sets.end());
  return sets;
}

PipelineSamples through_pipeline(bool tcp, const std::string& seqpipe, const std::string& model,
                                 const std::string& dir, const std::vector<std::string>& extra_sets,
                                 const seqpipe::protocol::Request& request, int n,
                                 std::string& text) {
  const std::string client = endpoint(tcp, dir, "gateway");
  const int http_port = free_port(), grpc_port = free_port();
  const auto sets = pipeline_sets(tcp, model, dir, client, http_port, grpc_port, extra_sets);
  std::vector<std::string> args{seqpipe, "up"};
  for (const auto& s : sets) args.insert(args.end(), {"--set", s});
  const std::string log = dir + (tcp ? "/up-tcp.log" : "/up-ipc.log");
  const pid_t up = start(args, log);
  PipelineSamples samples;
  {
    // The config's client keys, as `seqpipe send`: with --set security.* the run measures
    // CurveZMQ.
    seqpipe::client::ClientOptions client_options;
    client_options.curve = seqpipe::security::client_keys(
        seqpipe::config::load_pipeline_config("", sets).config.security);
    seqpipe::client::Client c(client, client_options);
    if (!wait_until_serving(c, request, up, std::chrono::milliseconds(500), log)) {
      stop(up);
      return samples;
    }
    httplib::Client http("127.0.0.1", http_port);
    http.set_keep_alive(true);
    http.set_tcp_nodelay(true);
    const std::string body =
        nlohmann::json{{"text", request.texts[0]},
                       {"params", {{"max_new_tokens", request.params.max_new_tokens}}}}
            .dump();
    const std::string completion = nlohmann::json{{"model", "t5"},
                                                  {"prompt", request.texts[0]},
                                                  {"max_tokens", request.params.max_new_tokens}}
                                       .dump();
    GrpcTimer grpc(grpc_port, model, request);
    for (int i = 0; i < n + 20; ++i) {
      auto start = Clock::now();
      auto r = c.call(request, std::chrono::milliseconds(10000));
      const double elapsed =
          std::chrono::duration<double, std::milli>(Clock::now() - start).count();
      auto* reply = std::get_if<seqpipe::protocol::Reply>(&r);
      if (!reply || !reply->ok) {
        std::fprintf(stderr, "pipeline_overhead: a request failed; see %s\n", log.c_str());
        break;
      }
      text = reply->texts[0];
      if (i >= 20) samples.msgpack_ms.push_back(elapsed);
      if (!tcp) continue;
      const auto http_ms = timed_post(http, "/v1/generate", body, text, false);
      const auto openai_ms = timed_post(http, "/v1/completions", completion, text, true);
      const auto grpc_ms = grpc.time(text);
      if (!http_ms || !openai_ms || !grpc_ms) {
        std::fprintf(stderr,
                     "pipeline_overhead: an HTTP or gRPC request failed or differed; see %s\n",
                     log.c_str());
        break;
      }
      if (i >= 20) {
        samples.http_ms.push_back(*http_ms);
        samples.openai_ms.push_back(*openai_ms);
        samples.grpc_ms.push_back(*grpc_ms);
      }
    }
  }
  stop(up);
  return samples;
}

// A text of at most `tokens` tokens (eos included) and as close to it as whole words get,
// starting at word `k` of a fixed list: each text of a batch is a different one.
std::string text_of(const seqpipe::engine::Tokenizer& tokenizer, size_t tokens, size_t k) {
  static constexpr const char* kWords[] = {"the",  "quick", "brown",   "fox", "jumps",
                                           "over", "lazy",  "dog",     "teh", "speling",
                                           "is",   "bad",   "weather", "and", "more"};
  std::string text;
  for (size_t w = k;; ++w) {
    std::string next = (text.empty() ? "" : text + " ") + kWords[w % std::size(kWords)];
    if (tokenizer.encode(next).size() > tokens) return text;
    text = std::move(next);
  }
}

// Throughput at batch `batch`: the engine in-process generates the batch (as engine_bench does,
// `threads` threads) and the pipeline on ipc:// answers one request of the same `batch` texts,
// round after round, alternating, so both see the same machine. Every sequence runs exactly
// max_new_tokens steps (min = max), so both do the same work.
int batch_throughput(const std::string& seqpipe, const std::string& model, const std::string& dir,
                     const std::vector<std::string>& extra_sets, int batch, int input_tokens,
                     int max_new_tokens, int rounds, int threads) {
  auto loaded = seqpipe::engine::T5Model::load(
      model, {.threads = threads, .device = seqpipe::engine::Device::kCpu});
  seqpipe::engine::Tokenizer tokenizer(model + "/spiece.model");
  seqpipe::protocol::Request request;
  std::vector<std::vector<int>> ids;
  for (int k = 0; k < batch; ++k) {
    request.texts.push_back(text_of(tokenizer, static_cast<size_t>(input_tokens), k));
    ids.push_back(tokenizer.encode(request.texts.back()));
  }
  request.batch_form = true;
  request.params.max_new_tokens = request.params.min_new_tokens = max_new_tokens;
  const auto options = seqpipe::decoder::decoding_options(request.params, false);

  const std::string client = endpoint(false, dir, "gateway");
  std::vector<std::string> args{seqpipe, "up"};
  for (const auto& s :
       pipeline_sets(false, model, dir, client, free_port(), free_port(), extra_sets))
    args.insert(args.end(), {"--set", s});
  const std::string log = dir + "/up-batch.log";
  const pid_t up = start(args, log);
  std::vector<double> engine_ms, pipeline_ms;
  size_t differ = 0;
  {
    seqpipe::client::Client c(client, {});
    if (!wait_until_serving(c, request, up, std::chrono::milliseconds(5000), log)) {
      stop(up);
      return 1;
    }
    for (int i = 0; i < rounds + 1; ++i) {  // the first round of each warms up
      auto start = Clock::now();
      const auto results = seqpipe::engine::generate(loaded, ids, options);
      const double engine = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
      start = Clock::now();
      auto r = c.call(request, std::chrono::milliseconds(60000));
      const double pipeline =
          std::chrono::duration<double, std::milli>(Clock::now() - start).count();
      auto* reply = std::get_if<seqpipe::protocol::Reply>(&r);
      if (!reply || !reply->ok || reply->texts.size() != results.size()) {
        std::fprintf(stderr, "pipeline_overhead: a batch request failed (%s); see %s\n",
                     reply && reply->error ? reply->error->message.c_str()
                     : reply               ? "wrong number of texts"
                                           : std::get<seqpipe::protocol::Error>(r).message.c_str(),
                     log.c_str());
        stop(up);
        return 1;
      }
      for (size_t k = 0; k < results.size(); ++k)
        differ += tokenizer.decode(results[k].ids) != reply->texts[k] ? 1 : 0;
      if (i == 0) continue;
      engine_ms.push_back(engine);
      pipeline_ms.push_back(pipeline);
    }
  }
  stop(up);
  size_t shortest = ids[0].size(), longest = 0;
  for (const auto& v : ids)
    shortest = std::min(shortest, v.size()), longest = std::max(longest, v.size());
  std::printf(
      "pipeline_overhead --batch %d: model %s, %zu-%zu input tokens, exactly %d new tokens, %d "
      "rounds, engine threads %d (OMP_WAIT_POLICY=%s), %u cores\n",
      batch, model.c_str(), shortest, longest, max_new_tokens, rounds, threads,
      std::getenv("OMP_WAIT_POLICY"), std::thread::hardware_concurrency());
  for (const auto& s : extra_sets) std::printf("  pipeline --set %s\n", s.c_str());
  const double engine_rate = batch * 1000.0 / percentile(engine_ms, 0.5);
  const double pipeline_rate = batch * 1000.0 / percentile(pipeline_ms, 0.5);
  std::printf("engine in-process, batch %d          %8.1f sequences/s (median round %.1f ms)\n",
              batch, engine_rate, percentile(engine_ms, 0.5));
  std::printf("pipeline, ipc://, a request of %d texts %8.1f sequences/s (median round %.1f ms)\n",
              batch, pipeline_rate, percentile(pipeline_ms, 0.5));
  std::printf("pipeline / engine: %.1f%%; texts that differ from the engine's: %zu of %zu\n",
              100.0 * pipeline_rate / engine_rate, differ,
              static_cast<size_t>(batch) * static_cast<size_t>(rounds + 1));
  return 0;
}

void row(const char* what, const std::vector<double>& ms) {
  if (ms.empty()) {
    std::printf("%-34s  no samples\n", what);
    return;
  }
  std::printf("%-34s  p50 %8.3f ms  p99 %8.3f ms  (%zu samples)\n", what, percentile(ms, 0.5),
              percentile(ms, 0.99), ms.size());
}

// Each path's cost over the engine (against the bare relay chain's), and each HTTP and gRPC
// API's over msgpack.
void print_overheads(const PipelineSamples& ipc, const PipelineSamples& tcp,
                     const std::vector<double>& engine_ms, const std::vector<double>& relay_ipc,
                     const std::vector<double>& relay_tcp) {
  for (const auto& [name, samples, relay] : {std::tuple{"ipc://", &ipc.msgpack_ms, &relay_ipc},
                                             std::tuple{"tcp://", &tcp.msgpack_ms, &relay_tcp}}) {
    if (samples->empty() || relay->empty()) continue;
    const double o50 = percentile(*samples, 0.5) - percentile(engine_ms, 0.5);
    const double o99 = percentile(*samples, 0.99) - percentile(engine_ms, 0.99);
    std::printf("overhead %-7s p50 %.3f ms (%.2fx the relay chain), p99 %.3f ms (%.2fx)\n", name,
                o50, o50 / percentile(*relay, 0.5), o99, o99 / percentile(*relay, 0.99));
  }
  for (const auto& [name, samples] :
       {std::pair{"HTTP/JSON", &tcp.http_ms}, std::pair{"OpenAI HTTP", &tcp.openai_ms},
        std::pair{"KServe v2 gRPC", &tcp.grpc_ms}}) {
    if (samples->empty() || tcp.msgpack_ms.empty()) continue;
    std::printf("%s over msgpack on tcp://: p50 +%.3f ms, p99 +%.3f ms\n", name,
                percentile(*samples, 0.5) - percentile(tcp.msgpack_ms, 0.5),
                percentile(*samples, 0.99) - percentile(tcp.msgpack_ms, 0.99));
  }
}

// The command line.
struct OverheadArgs {
  std::string model, text = "teh speling is bad", seqpipe = SEQPIPE_BIN;
  int requests = 300, max_new_tokens = 12, batch = 1, input_tokens = 64, rounds = 10, threads = 2;
  std::vector<std::string> sets;
};

constexpr const char* kUsage =
    "usage: pipeline_overhead [--model DIR] [--requests N] [--max-new-tokens N] [--text T]\n"
    "                         [--seqpipe PATH] [--set k=v ...]\n"
    "       pipeline_overhead --batch N [--input-tokens T] [--rounds R] [--threads N]\n"
    "                         [--model DIR] [--max-new-tokens N] [--seqpipe PATH] [--set k=v "
    "...]\n\n"
    "The same batch-1 requests answered by the engine in-process and by the pipeline (`seqpipe\n"
    "up`) on ipc:// and tcp://127.0.0.1, next to a bare ZeroMQ relay chain: p50, p99 and the\n"
    "overhead. Defaults: --requests 300, --max-new-tokens 12, --text \"teh speling is bad\";\n"
    "without --model a tiny random checkpoint is written with seqpipe-mkmodel. --set passes\n"
    "config overrides to the pipeline (repeatable); --seqpipe runs another build's `seqpipe`.\n\n"
    "With --batch N (> 1): throughput instead. The engine in-process generates N texts of\n"
    "about T tokens (default 64) with --threads threads (default 2) and short OpenMP waits\n"
    "(as `seqpipe up` sets them on a busy machine), and the pipeline (ipc://) answers one\n"
    "request of the same N texts, alternating for R rounds (default 10); every sequence runs\n"
    "exactly --max-new-tokens steps. Prints sequences/s of each and their ratio.\n";

// The command line into `args`: nothing to go on, else the exit status (0 after --help, 2 for a
// wrong one).
std::optional<int> parse_args(int argc, char** argv, OverheadArgs& args) {
  bool help = false;
  CLI::App app;
  seqpipe::cli::set_up(app);
  app.add_flag("-h,--help", help);
  app.add_option("--model", args.model);
  seqpipe::cli::add_number(app, "--requests", args.requests);
  seqpipe::cli::add_number(app, "--max-new-tokens", args.max_new_tokens);
  seqpipe::cli::add_number(app, "--batch", args.batch);
  seqpipe::cli::add_number(app, "--input-tokens", args.input_tokens);
  seqpipe::cli::add_number(app, "--rounds", args.rounds);
  seqpipe::cli::add_number(app, "--threads", args.threads);
  app.add_option("--text", args.text);
  app.add_option("--seqpipe", args.seqpipe);
  seqpipe::cli::add_repeated(app, "--set", args.sets);
  try {
    const std::vector<std::string> unknown = seqpipe::cli::parse(app, argc, argv);
    if (help) {
      std::printf("%s", kUsage);
      return 0;
    }
    if (!unknown.empty()) {
      throw seqpipe::cli::UsageError("unknown argument '" + unknown.front() + "'");
    }
    if (args.requests < 1) throw seqpipe::cli::UsageError("--requests must be >= 1");
    if (args.batch < 1 || args.input_tokens < 2 || args.rounds < 1 || args.threads < 1)
      throw seqpipe::cli::UsageError(
          "--batch, --rounds and --threads must be >= 1, --input-tokens >= 2");
  } catch (const seqpipe::cli::UsageError& e) {
    std::fprintf(stderr, "pipeline_overhead: %s (see --help)\n", e.what());
    return 2;
  }
  return std::nullopt;
}

// The engine in-process, as the services run it (one thread): `requests` timed generates of
// `request` after 20 untimed ones, in ms; the text it answers in `engine_text`.
std::vector<double> engine_latencies(const std::string& model,
                                     const seqpipe::protocol::Request& request, int requests,
                                     std::string& engine_text) {
  auto loaded = seqpipe::engine::T5Model::load(
      model, {.threads = 1, .device = seqpipe::engine::Device::kCpu});
  seqpipe::engine::Tokenizer tokenizer(model + "/spiece.model");
  // The decoding options the decoder makes of the request.
  const seqpipe::engine::DecodingOptions options =
      seqpipe::decoder::decoding_options(request.params, false);
  std::vector<double> engine_ms;
  for (int i = 0; i < requests + 20; ++i) {
    const auto start = Clock::now();
    const auto ids = tokenizer.encode(request.texts[0]);
    const auto results = seqpipe::engine::generate(loaded, {ids}, options);
    engine_text = tokenizer.decode(results[0].ids);
    if (i >= 20)
      engine_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
  }
  return engine_ms;
}

// The batch-1 latency mode: the same requests through the engine, the bare relay chains and the
// pipeline on ipc:// and tcp://, one table.
int batch1_latency(const OverheadArgs& args, const std::string& dir) {
  // Relays first: they fork without exec, before this process has threads of its own.
  const auto relay_ipc = relay_chain(false, dir, args.requests * 3);
  const auto relay_tcp = relay_chain(true, dir, args.requests * 3);
  // The request the pipeline gets.
  seqpipe::protocol::Request request;
  request.texts = {args.text};
  request.params.max_new_tokens = args.max_new_tokens;
  std::string engine_text;
  const std::vector<double> engine_ms =
      engine_latencies(args.model, request, args.requests, engine_text);

  std::string ipc_text, tcp_text;
  const auto ipc = through_pipeline(false, args.seqpipe, args.model, dir + "/ipc", args.sets,
                                    request, args.requests, ipc_text);
  const auto tcp = through_pipeline(true, args.seqpipe, args.model, dir + "/tcp", args.sets,
                                    request, args.requests, tcp_text);

  std::printf(
      "pipeline_overhead: model %s, text \"%s\", max_new_tokens %d, %d requests one at a time, %u "
      "cores\n",
      args.model.c_str(), args.text.c_str(), args.max_new_tokens, args.requests,
      std::thread::hardware_concurrency());
  for (const auto& s : args.sets) std::printf("  pipeline --set %s\n", s.c_str());
  row("engine in-process", engine_ms);
  row("pipeline, ipc://", ipc.msgpack_ms);
  row("pipeline, tcp://127.0.0.1", tcp.msgpack_ms);
  row("pipeline, HTTP/JSON on 127.0.0.1", tcp.http_ms);
  row("pipeline, OpenAI /v1/completions on 127.0.0.1", tcp.openai_ms);
  row("pipeline, KServe v2 gRPC on 127.0.0.1", tcp.grpc_ms);
  row("bare relay chain (10 hops), ipc://", relay_ipc);
  row("bare relay chain (10 hops), tcp://", relay_tcp);
  if (ipc_text != engine_text || tcp_text != engine_text) {
    std::printf("MISMATCH: engine \"%s\", ipc \"%s\", tcp \"%s\"\n", engine_text.c_str(),
                ipc_text.c_str(), tcp_text.c_str());
    return 1;
  }
  print_overheads(ipc, tcp, engine_ms, relay_ipc, relay_tcp);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  OverheadArgs args;
  if (const std::optional<int> status = parse_args(argc, argv, args)) return *status;
  const auto wait = seqpipe::config::kOversubscribedOpenMpWait;
  if (args.batch > 1 && !seqpipe::config::openmp_wait_chosen()) {
    // OpenMP reads it as it loads, so this process starts again with it: the engine alone waits
    // as the pipeline's processes do, which `seqpipe up` starts with this setting here.
    ::setenv(wait.name, wait.value, 1);
    ::execv("/proc/self/exe", argv);
  }
  char dir_template[] = "/tmp/seqpipe-overhead.XXXXXX";
  const std::string dir = ::mkdtemp(dir_template);
  if (args.model.empty()) {
    args.model = dir + "/model";
    const std::string cmd = std::string(SEQPIPE_MKMODEL) +
                            " --preset tiny --gated --untied --spiece --seed 3 --out " +
                            args.model + " > /dev/null";
    if (std::system(cmd.c_str()) != 0) return 1;
  }
  const int status =
      args.batch > 1
          ? batch_throughput(args.seqpipe, args.model, dir, args.sets, args.batch,
                             args.input_tokens, args.max_new_tokens, args.rounds, args.threads)
          : batch1_latency(args, dir);
  if (status == 0) std::filesystem::remove_all(dir);
  return status;
}
