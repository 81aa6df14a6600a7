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
//
// Each section's struct lives in its own header (gateway_config.h, postprocessor_config.h, ...),
// so a consumer of one section includes only that header and reads the section from a
// PipelineConfig it sees declared through pipeline_config_fwd.h's accessors (gateway_of(c), ...).
// Only the config library, the control plane (tools/seqpipe, common/control), which reads every
// section or a version's whole config, and the services' command-line front (service_main.cc),
// which loads the config, include this header (and tests and benches that build a config).
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "seqpipe/config/batcher_config.h"
#include "seqpipe/config/config_error.h"
#include "seqpipe/config/decoder_config.h"
#include "seqpipe/config/encoder_config.h"
#include "seqpipe/config/gateway_config.h"
#include "seqpipe/config/liveness_config.h"
#include "seqpipe/config/metrics_config.h"
#include "seqpipe/config/model_config.h"
#include "seqpipe/config/postprocessor_config.h"
#include "seqpipe/config/security_config.h"
#include "seqpipe/config/tokenizer_config.h"
#include "seqpipe/config/worker_config.h"

namespace seqpipe::config {

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

// Replica k's endpoint of a hub endpoint: k = 0 the endpoint itself, else tcp://HOST:PORT + k
// or ipc://DIR/NAME-<k+1>.sock (ipc://x/gateway.sock, ipc://x/gateway-2.sock, ...).
std::string replica_endpoint(const std::string& endpoint, int k);
// The --set overrides that make hub replica k (0-based) of a resolved config: its endpoints,
// metrics port and HTTP port moved by k. Empty for k = 0.
std::vector<std::string> gateway_replica_overrides(const PipelineConfig& config, int k);
std::vector<std::string> batcher_replica_overrides(const PipelineConfig& config, int k);
// What a client is given: every gateway replica's client endpoint, comma-separated.
std::string client_endpoints(const PipelineConfig& config);

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
