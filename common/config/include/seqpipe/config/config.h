#pragma once
// The pipeline's configuration: one YAML file (config/pipeline.yaml) holds every stage's
// settings. Every service loads the whole file, applies its `--set key=value` overrides,
// validates once, and passes the resulting immutable PipelineConfig down explicitly. Nothing
// below main() reads the environment. docs/CONFIG.md is the user-facing reference.
//
// Where it lives: the key table (src/config_schema.h), reading YAML and --set (config_load.cc),
// the checks (config_check.cc), the runtime directory and endpoints (config_runtime.cc); a
// service's command line is seqpipe/runtime/service_main.h.
//
// Endpoints: an empty endpoint means `ipc://{runtime_dir}/<name>.sock`, and an endpoint may
// use the `{runtime_dir}` placeholder; resolve_endpoints() makes them concrete (services and tools
// do it through load_pipeline_config before they use the config).
#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "seqpipe/protocol/protocol.h"

namespace seqpipe::config {

// A config that cannot be used. The message names the source (file[:line] or the `--set`
// argument) and the key path, e.g.
//   "config/pipeline.yaml:41: batcher.max_batch_size must be an integer in [1, 1024], got 0".
struct ConfigError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The value of a worker stage's `replicas` or an engine stage's `threads` that asks for them to be
// sized from the machine (size_for_cores).
inline constexpr int kAuto = 0;

struct ModelConfig {
  // The HuggingFace-layout model directory (config.json, model.safetensors, spiece.model),
  // relative to the service's working directory. Read by the tokenizer, encoder, decoder and
  // postprocessor.
  std::string dir = "models/speller-t5";
  // Longest input in tokens (eos included); a longer text is an error reply. Sizes the
  // decoder's cross-attention cache (KvCacheOptions.max_source_len).
  int max_input_tokens = 128;
  // The engine's compute type for the encoder's and decoder's linear layers: float32, bfloat16,
  // int8, int8_bfloat16 or auto (the fastest this CPU runs; docs/PERFORMANCE.md). encoder. and
  // decoder.compute_type override it per stage.
  std::string compute_type = "float32";
  // Where the encoders and decoders run the model: cpu, cuda (the first GPU) or cuda:N. Several
  // replicas may share a GPU. A GPU this build or machine lacks stops the stage at start.
  std::string device = "cpu";
  // On a GPU, 1: each decoder step's ops are recorded once per batch size as a CUDA graph and
  // replayed; 0: every op is issued as it comes (slower; for comparison and diagnosis).
  int cuda_graphs = 1;
  // 1: the model knows lower-case words only (models/speller-t5): the tokenizer gives it the
  // text's plain words lower-cased and the postprocessor puts its correction back into the text,
  // case, digits, punctuation and whitespace kept (services/text/text_frame.h). 0: the text as
  // it is.
  int lower_case_words = 0;
  // The name and version the model is served as: a request naming another is `not_found`, and a
  // replica announces "name/version" to its hub. Empty name: model.dir's last component.
  std::string name;
  int version = 1;
  // A model repository (<repository>/<name>/<version>/, seqpipe/config/model_repository.h):
  // `seqpipe up` starts replicas for its model versions (each with model.dir, model.name
  // and model.version set) and the gateway serves every name in it. Empty: model.dir alone.
  std::string repository;
  // With a repository, how often `seqpipe up` rescans it (ms), as Triton's poll model-control
  // mode: a new newest version of a name is loaded (a reload), a removed version unloaded. 0:
  // only explicit control (`seqpipe models`, POST /v2/repository/...).
  int repository_poll_ms = 0;
  // With a repository, how many of each name's newest versions `seqpipe up` loads at start (as
  // Triton's version_policy latest: N); the others load on request (`seqpipe models load`).
  // 0: every version.
  int repository_versions = 1;

  bool operator==(const ModelConfig&) const = default;
};

// Heartbeats between each hub (gateway, batcher) and its workers, as the ZeroMQ guide's
// Paranoid Pirate: both sides send one every interval; a peer silent for liveness intervals is
// dead. The hub then gives the dead worker's work to another replica (once) and the worker
// reconnects with backoff and announces its capacity again.
struct LivenessConfig {
  // Milliseconds between heartbeats.
  int heartbeat_interval_ms = 1000;
  // Missed heartbeats after which a peer is declared dead.
  int heartbeat_liveness = 3;
  // Longest pause between a worker's reconnection attempts (the first waits one interval,
  // each next one twice as long, up to this).
  int reconnect_max_ms = 8000;

  bool operator==(const LivenessConfig&) const = default;
};

// The /metrics HTTP servers of every process.
struct MetricsConfig {
  // IPv4 address the /metrics servers listen on: 127.0.0.1 (this machine only) or 0.0.0.0
  // (every interface: a Prometheus in another container or on another machine). The ports are
  // each stage's metrics_port.
  std::string address = "127.0.0.1";
  // Upper bounds (microseconds, strictly ascending) of every latency histogram's buckets:
  // 100 us .. 5 s by default.
  std::vector<int> latency_buckets_us = {100,    250,    500,     1000,    2500,
                                         5000,   10000,  25000,   50000,   100000,
                                         250000, 500000, 1000000, 2500000, 5000000};

  bool operator==(const MetricsConfig&) const = default;
};

// Where a request's deadline comes from, as errors about it name it.
inline constexpr std::string_view kDeadlineSources =
    "gateway.default_timeout_ms; timeout_ms or HTTP's X-Request-Timeout per request";

struct GatewayConfig {
  // Where clients connect (bound by the gateway). Default: loopback only.
  std::string client_endpoint = "tcp://127.0.0.1:5555";
  // Bound by the gateway; tokenizers connect. Empty: ipc://{runtime_dir}/tokenizer.sock.
  std::string tokenizer_endpoint;
  // Bound by the gateway; postprocessors connect and send results. Empty:
  // ipc://{runtime_dir}/results.sock.
  std::string results_endpoint;
  // Deadline of a request that names none, in milliseconds: long enough for a request to wait
  // its turn behind a queue the server measured it can serve (admission is by deadline), short
  // enough that a client without a pipeline behind the gateway hears within seconds.
  uint32_t default_timeout_ms = 10000;
  // Largest deadline a request may ask for, in milliseconds; a request asking for more is
  // refused with an error reply.
  // The client-message limits default to the protocol's own (protocol::Limits), defined there
  // once.
  uint32_t max_timeout_ms = protocol::Limits{}.max_timeout_ms;
  // Largest client message in bytes; a larger one is answered with an error and not parsed.
  size_t max_message_bytes = protocol::Limits{}.max_message_bytes;
  // Most texts in one request.
  size_t max_texts = protocol::Limits{}.max_texts;
  // Longest text in bytes (UTF-8).
  size_t max_text_bytes = protocol::Limits{}.max_text_bytes;
  // Prometheus /metrics HTTP port; 0 = any free port (logged).
  int metrics_port = 9100;
  // Response cache budget in bytes (LRU over successful results, keyed by model, params and
  // text as sent); 0 = no cache.
  size_t cache_bytes = 0;
  // A text of more words than this goes through the model in pieces of at most this many words
  // (whole sentences where they fit), joined back in the reply; 0 = whole texts.
  size_t split_words = 0;
  // The batchers this gateway submits to, by their ingress endpoints: empty = the one
  // batcher.ingress_endpoint. With several, requests go round-robin to the live ones; gateway
  // and batchers exchange heartbeats (over the ingress and the results sockets), and the work of
  // a batcher that falls silent is submitted once to another (else answered `unavailable`).
  std::vector<std::string> batcher_endpoints;
  // Gateways `seqpipe up` starts (1..16). Replica k binds each of these endpoints k after the
  // configured one (replica_endpoint), and metrics_port + k and the HTTP and gRPC ports + k
  // when not 0; the tokenizers serve them all and clients are given every client endpoint.
  int replicas = 1;
  // HTTP/JSON and KServe v2 on this IPV4:PORT (port 0: any free port, logged); empty: no HTTP.
  // Default: loopback only. docs/PROTOCOL.md, "HTTP".
  std::string http_endpoint = "127.0.0.1:8000";
  // The model repository API (POST /v2/repository/...: index, load, unload) on HTTP beyond
  // loopback. false: served only when http_endpoint is a loopback address (anyone who reaches
  // it could load and unload models); true: served wherever HTTP is.
  bool repository_api_public = false;
  // A file holding the bearer token every repository API call must carry
  // (`Authorization: Bearer <token>`; the file's first line, at least 16 characters), read once
  // at start. Empty: no token asked.
  std::string repository_token_file;
  // KServe v2 over gRPC on this IPV4:PORT (port 0: any free port, logged); empty: no gRPC.
  // Default: off (127.0.0.1:8001 is Triton's and the usual choice). docs/PROTOCOL.md, "gRPC".
  std::string grpc_endpoint;

  bool operator==(const GatewayConfig&) const = default;
};

// What every replicated worker stage shares.
struct WorkerConfig {
  // Processes of this stage that `seqpipe up` starts; 0 = auto: sized from the machine's cores
  // (size_for_cores), resolved by load_pipeline_config.
  int replicas = kAuto;
  // Work items one replica may hold at once (credit-based flow control): more hides the
  // network round trip, fewer spreads work more evenly across replicas.
  int credits = 4;
  // Prometheus /metrics HTTP port of the first replica; replica i uses metrics_port + i.
  // 0 = any free port (logged).
  int metrics_port = 0;
  // The hubs a replica serves (each binds the endpoint): empty = the one hub of the pipeline
  // (gateway.tokenizer_endpoint for tokenizers, batcher.<stage>_endpoint for the others). With
  // several, the replica connects to each, splits its credits between them and returns each
  // result to the hub that sent the work (several gateways, or several batchers).
  std::vector<std::string> hub_endpoints;

  bool operator==(const WorkerConfig&) const = default;
};

// Default metrics ports: tokenizers 9110.., encoders 9120.., decoders 9130.., postprocessors
// 9140.. (deploy/prometheus/prometheus.yml scrapes these).
struct TokenizerConfig : WorkerConfig {
  TokenizerConfig() { metrics_port = 9110; }
  bool operator==(const TokenizerConfig&) const = default;
};

struct BatcherConfig {
  // Batchers `seqpipe up` starts (1..16). Replica k binds each of these endpoints k after the
  // configured one (replica_endpoint) and metrics_port + k when not 0; the gateways submit to
  // them all (gateway.batcher_endpoints) and the encoders, decoders and postprocessors serve
  // them all (hub_endpoints), unless those lists are given.
  int replicas = 1;
  // Bound by the batcher; tokenizers connect. Empty: ipc://{runtime_dir}/batcher-in.sock.
  std::string ingress_endpoint;
  // Bound by the batcher; encoders connect. Empty: ipc://{runtime_dir}/encoder.sock.
  std::string encoder_endpoint;
  // Bound by the batcher; decoders connect. Empty: ipc://{runtime_dir}/decoder.sock.
  std::string decoder_endpoint;
  // Bound by the batcher; postprocessors connect. Empty: ipc://{runtime_dir}/postprocessor.sock.
  std::string postprocessor_endpoint;
  // Most sequences in one encoder batch.
  int max_batch_size = 32;
  // Batch sizes sent as soon as they can be formed (ascending, each <= max_batch_size);
  // empty = only full batches or max_queue_delay_us trigger a send.
  std::vector<int> preferred_batch_sizes = {8, 16, 32};
  // Longest the oldest queued sequence waits for company while a batch is being encoded, in
  // microseconds (with none being encoded, what is queued goes at once): more = fuller batches
  // under load (throughput), less = lower latency.
  uint32_t max_queue_delay_us = 2000;
  // Most padded tokens in one batch (batch size x longest sequence).
  int max_batch_tokens = 4096;
  // Most sequences queued (a memory bound); beyond it requests are refused as overloaded. Within
  // it admission is by deadline (BatcherHub): what could not be served in time is refused.
  int max_queue_size = 1024;
  // Priority levels (as Triton's dynamic batcher): a request's params.priority is 1 (highest)
  // .. priority_levels; each level is its own queue and a batch takes from the highest level
  // first. 1 = no priorities (every request is level 1). max_queue_size bounds all levels together.
  int priority_levels = 1;
  // The level of a request that gives no priority; 1..priority_levels.
  int default_priority_level = 1;
  // Prometheus /metrics HTTP port; 0 = any free port (logged).
  int metrics_port = 9101;

  bool operator==(const BatcherConfig&) const = default;
};

struct EncoderConfig : WorkerConfig {
  EncoderConfig() { metrics_port = 9120; }
  // Threads per replica for the BLAS and the engine kernels (ModelOptions.threads); 0 = auto:
  // sized from the machine's cores (size_for_cores), resolved by load_pipeline_config.
  int threads = kAuto;
  // Sequences in the warm-up batch run before the replica announces itself (0 = none), so the
  // first real request does not pay for cold caches and first-touch allocations.
  int warmup_batch_size = 8;
  // This stage's engine compute type; empty = model.compute_type.
  std::string compute_type;

  bool operator==(const EncoderConfig&) const = default;
};

struct DecoderConfig : WorkerConfig {
  DecoderConfig() { metrics_port = 9130; }
  // Threads per replica (ModelOptions.threads); 0 = auto, as encoder.threads.
  int threads = kAuto;
  // KV cache slots per replica: sequences (beams) decoded at once (KvCacheOptions.num_slots).
  int num_slots = 32;
  // Largest num_beams a request may use (KvCacheOptions.max_beams).
  int max_beams = 8;
  // Largest max_new_tokens a request may use; sizes the cache
  // (KvCacheOptions.max_target_len = max_new_tokens + 1).
  int max_new_tokens = 64;
  // Sequences decoded (a few steps each) before the replica announces itself (0 = none).
  int warmup_batch_size = 8;

  // This stage's engine compute type; empty = model.compute_type.
  std::string compute_type;

  bool operator==(const DecoderConfig&) const = default;
};

struct PostprocessorConfig : WorkerConfig {
  PostprocessorConfig() { metrics_port = 9140; }
  // Word lists (one word a line; paths separated by ':'): an input word found there is never
  // changed by the model (postprocessor/known_words.h). Empty: off, the model's text as it is.
  std::string known_words;
  // With known_words and num_beams > 1: a known input word that at least this many of the beam
  // search's hypotheses change is changed (the model is sure of it). 0: never.
  int known_word_votes = 0;
  // With known_words and num_beams > 1: a known input word is changed when the output's score
  // (HF sequences_score) is at least this many hundredths above that of every hypothesis that
  // keeps it (one must). 0: never.
  int known_word_margin = 0;
  // With model.lower_case_words: the user's word lists (one word a line, compared lower-cased;
  // paths separated by ':'), words the speller keeps as typed whatever the model makes of them
  // (product names, jargon: "nginx"; services/text/text_frame.h). Empty: none.
  std::string user_words;
  // An Aspell dictionary (e.g. /usr/lib/aspell/en_US.multi): for input words Aspell does not
  // know, the model's word stands when Aspell suggests it too, else Aspell's first suggestion
  // (postprocessor/spell_suggester.h). Empty: off.
  std::string aspell_dictionary;
  // 1: Aspell also corrects the unknown input words the model left unchanged. 0: they stay.
  int aspell_left_words = 0;
  // The noisy channel (postprocessor/noisy_channel.h), both or neither, with aspell_dictionary:
  // "word<TAB>count" lines (the prior) and "kind<TAB>letters<TAB>count" edit counts (the error
  // model). Set: each unknown input word's correction is weighed among Aspell's suggestions, the
  // beam hypotheses' words and itself (postprocessor/spell_suggester.h). Empty: off.
  std::string word_counts;
  std::string edit_counts;
  // Real-word errors by context (postprocessor/confusion_sets.h): confusion sets and their
  // members' neighbour counts. Set: a word of a set in the output becomes the member whose
  // context score beats it by confusion_margin hundredths (nats). Empty: off.
  std::string confusion_counts;
  int confusion_margin = 500;
  bool operator==(const PostprocessorConfig&) const = default;
};

// CurveZMQ between the processes (docs/DEPLOY.md, "Keys"): with server_key set, every socket a
// hub binds is a CurveZMQ server that admits only the clients in allowed_clients, and every socket
// that connects to a hub is a CurveZMQ client. Key files are `seqpipe keygen`'s: NAME (the public
// key) and NAME_secret (both keys, mode 0600).
struct SecurityConfig {
  // The hubs' certificate NAME: the gateway and batcher read their key pair from NAME_secret;
  // workers and clients read the hubs' public key from NAME (all they need). Empty: plain text.
  std::string server_key;
  // This process's certificate NAME as a client of the hubs (workers, the gateway towards its
  // batchers, the batcher towards the gateways' results, seqpipe send and status): its key pair
  // is read from NAME_secret. Required with server_key.
  std::string client_key;
  // A directory of the client certificates (public files; NAME_secret files are skipped) the
  // hubs admit; any other client is refused, logged and counted. Required with server_key.
  std::string allowed_clients;
  // false: a hub refuses to start when it binds a tcp:// endpoint beyond loopback without
  // server_key, or serves HTTP (never encrypted) beyond loopback. true: allowed, in the clear.
  bool allow_plaintext = false;

  bool operator==(const SecurityConfig&) const = default;
};

struct PipelineConfig {
  // Directory of the ipc:// endpoints (an absolute path). Empty: $XDG_RUNTIME_DIR/seqpipe, or
  // /tmp/seqpipe-$UID without XDG_RUNTIME_DIR (chosen by load_pipeline_config, nowhere else).
  std::string runtime_dir;
  ModelConfig model;
  LivenessConfig liveness;
  MetricsConfig metrics;
  GatewayConfig gateway;
  TokenizerConfig tokenizer;
  BatcherConfig batcher;
  EncoderConfig encoder;
  DecoderConfig decoder;
  PostprocessorConfig postprocessor;
  SecurityConfig security;

  bool operator==(const PipelineConfig&) const = default;
};

// Where services look for the config when no --config is given (relative to the cwd).
inline constexpr std::string_view kDefaultConfigPath = "config/pipeline.yaml";

// Reads, overrides and validates a config file. `overrides` are "a.b=value" (as after --set):
// value is a YAML scalar or flow sequence ("[4, 8]"); for string keys the text is taken as
// written. Unknown keys are errors; missing keys keep their defaults. Throws ConfigError.
PipelineConfig load_config(const std::string& path, const std::vector<std::string>& overrides = {});
// The same from YAML text; `source_name` stands for the file name in messages.
PipelineConfig load_config_text(const std::string& yaml, const std::string& source_name,
                                const std::vector<std::string>& overrides = {});
// Throws ConfigError naming the first key at fault. load_config* call it; a config built in
// code (tests, tools) may call it too.
void validate(const PipelineConfig& config);

// Every key, "section.name" (and "runtime_dir"), in file order.
std::vector<std::string> config_keys();
// The keys a model directory's seqpipe.yaml may set (model_overrides), in file order.
std::vector<std::string> model_config_keys();
// The config as YAML, every key, sections in file order (for debugging and tests).
// load_config_text(to_yaml(c), ...) == c.
std::string to_yaml(const PipelineConfig& config);

// The runtime directory to use: `configured` when not empty, else $XDG_RUNTIME_DIR/seqpipe
// (`xdg_runtime_dir` may be null or empty), else /tmp/seqpipe-<uid>.
std::string choose_runtime_dir(const std::string& configured, const char* xdg_runtime_dir,
                               unsigned uid);
// Sets runtime_dir and makes every endpoint concrete: empty -> ipc://<runtime_dir>/<name>.sock,
// "{runtime_dir}" replaced. Throws ConfigError for an ipc path too long for a Unix socket or
// two endpoints that became equal.
PipelineConfig resolve_endpoints(PipelineConfig config, const std::string& runtime_dir);

// gateway.http_endpoint's and grpc_endpoint's parts: an IPv4 address and a port (0: any free
// port); nullopt for text that is not IPV4:PORT (an empty endpoint, off, included).
struct HttpAddress {
  std::string host;
  int port = 0;
};
std::optional<HttpAddress> parse_http_address(std::string_view endpoint);
// A host or interface name that is loopback (an IPv4 literal 127.x, localhost, [::1], the
// interface lo): only this machine reaches it.
bool loopback_host(std::string_view host);

// Replica k's endpoint of a hub endpoint: k = 0 the endpoint itself, else tcp://HOST:PORT + k
// or ipc://DIR/NAME-<k+1>.sock (ipc://x/gateway.sock, ipc://x/gateway-2.sock, ...).
std::string replica_endpoint(const std::string& endpoint, int k);
// The --set overrides that make hub replica k (0-based) of a resolved config: its endpoints,
// metrics port and HTTP port moved by k. Empty for k = 0.
std::vector<std::string> gateway_replica_overrides(const PipelineConfig& config, int k);
std::vector<std::string> batcher_replica_overrides(const PipelineConfig& config, int k);
// What a client is given: every gateway replica's client endpoint, comma-separated.
std::string client_endpoints(const PipelineConfig& config);
// Where `seqpipe up` answers the model control requests (`seqpipe models`, the gateway's KServe
// repository API): ipc://<runtime_dir>/control.sock, beside the pipeline's lock, so only this
// machine's user can reach it.
std::string control_endpoint(const PipelineConfig& config);

// The processes and threads that fit a machine of `cores` cores and a model whose decoder step
// reads `step_params` weights (decoder_step_params; 0 = unknown) (docs/CONFIG.md, "Sizing"). The
// decoder does most of the work and batches every sequence in flight itself, so one decoder
// takes the cores (a second one on two cores only competes with the first for them); one more
// per 8 cores, each with its share. The encoder runs between decoder steps and uses the same
// cores (its threads sleep when it has no batch); the tokenizer and the postprocessor cost a few
// percent of a request and need a replica per 4 cores. Every process beyond these costs
// wake-ups on cores that are all busy under load. A model whose step reads fewer than
// kThreadedStepParams weights is the exception: its step is too short for threads to pay for
// their wake-ups, so it gets one single-threaded encoder and decoder per core.
struct Sizing {
  int tokenizer_replicas = 1;
  int encoder_replicas = 1;
  int encoder_threads = 1;
  int decoder_replicas = 1;
  int decoder_threads = 1;
  int postprocessor_replicas = 1;
};
inline constexpr int64_t kThreadedStepParams = 8'000'000;
Sizing size_for_cores(int cores, int64_t step_params = 0);
// The weights (parameters) one decoder step of the model in `model_dir` reads, from its
// config.json: per decoder layer self-attention (4 d_model^2), cross-attention's query and
// output (2 d_model^2) and the feed-forward (2 d_model d_ff), plus the lm_head (vocab d_model).
// 0 when there is no readable config.json (sizing then assumes a large model).
int64_t decoder_step_params(const std::string& model_dir);
// Replaces every auto (kAuto) replicas of `config` by size_for_cores(cores, step_params)'s, and
// every auto threads by the stage's share of the cores (cores / its replicas, sized or set; at
// least 1).
void apply_sizing(PipelineConfig& config, int cores, int64_t step_params = 0);
// The cores this process may run on (its CPU affinity mask; at least 1).
int available_cores();
// Whether the engine stages' threads (encoders' and decoders', replicas x threads) outnumber
// `cores`: their idle OpenMP threads should then spin only briefly before they sleep
// (kOversubscribedOpenMpWait), not for libgomp's default milliseconds, which take the cores from
// the other stages and from the threads they wait for. `seqpipe up` sets it for its children then.
bool engine_threads_oversubscribe(const PipelineConfig& config, int cores);

// An environment variable and its value.
struct EnvironmentSetting {
  const char* name;
  const char* value;
};
// The OpenMP wait of engine threads that oversubscribe the cores: an idle thread spins 3000
// rounds (~55 us on a Zen 4) and then sleeps. Sleeping at once (OMP_WAIT_POLICY=passive) pays
// a wake-up for every parallel region and doubled a lone request's decode on 2 cores; libgomp's
// default spin holds a core for milliseconds (docs/CONFIG.md, "Sizing").
inline constexpr EnvironmentSetting kOversubscribedOpenMpWait{"GOMP_SPINCOUNT", "3000"};
// The variables with which a user chooses the OpenMP wait; set, they are kept as they are.
inline constexpr const char* kOpenMpWaitVariables[] = {"OMP_WAIT_POLICY", "GOMP_SPINCOUNT"};
// Whether this process's environment sets any of kOpenMpWaitVariables.
bool openmp_wait_chosen();

// The file in a model directory that holds the model's own settings (model_overrides).
inline constexpr std::string_view kModelConfigName = "seqpipe.yaml";

// The settings a model directory carries for itself, so that every way of serving it serves it
// alike: <model_dir>/seqpipe.yaml as `--set` assignments ("gateway.split_words=8"), in file
// order. A relative path in it (a word list, a counts file) is relative to the model directory
// and comes back joined to model_dir. Only the per-model keys may appear there (text handling,
// beams and token caps, the postprocessor's word lists: docs/CONFIG.md, "The model's settings").
// Empty when the directory has no such file. Throws ConfigError naming the file.
std::vector<std::string> model_overrides(const std::string& model_dir);

// What services and tools start from, in layers, each over the one before: the built-in
// defaults < the model directory's seqpipe.yaml (model_overrides of the model.dir the file and
// the overrides name) < the config file (`config_path`; empty: kDefaultConfigPath if it exists in
// the working directory, else none) < the overrides (--set). Then validated, the runtime
// directory chosen (choose_runtime_dir over $XDG_RUNTIME_DIR and the uid: the only place the
// environment is read), the auto replicas and threads sized for available_cores() and the
// model's decoder_step_params (apply_sizing)
// and the endpoints resolved in the runtime directory. Creates nothing. Throws ConfigError.
struct LoadedConfig {
  PipelineConfig config;
  std::string path;                    // the file read; empty: the built-in defaults
  std::string model_path;              // the model's seqpipe.yaml applied; empty: none
  std::vector<std::string> overrides;  // the --set assignments applied, in order
};
LoadedConfig load_pipeline_config(const std::string& config_path,
                                  const std::vector<std::string>& overrides);

}  // namespace seqpipe::config
