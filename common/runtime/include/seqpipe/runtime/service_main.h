#pragma once
// The front of every service main(): the command line, the config, the metrics buckets, then the
// service's own run function (docs/CONFIG.md).
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "seqpipe/config/pipeline_config_fwd.h"

namespace CLI {
class App;
}

namespace seqpipe::service {

// A service's command line: [--config FILE] [--set key=value ...] [--print-config] [--help].
struct ServiceArgs {
  std::string config_path;  // empty: config::kDefaultConfigPath if it exists, else the defaults
  std::vector<std::string> overrides;
  bool print_config = false;  // print the config in force (every key, limits included) and exit
  // With -h/--help (which wins over anything else on the line): CLI11's help, generated from
  // the flags' descriptions, under `program` and `summary`. Empty otherwise.
  std::string help;
};
// Throws config::ConfigError for bad usage (unknown flag, missing value, --set without '=').
ServiceArgs parse_service_args(int argc, char** argv, std::string_view program = "seqpipe-service",
                               std::string_view summary = {});

// The same flags on a program's own command line (`seqpipe up`, `seqpipe status`): --config,
// --set and, with `print_config`, --print-config, collected into `flags`; checked_service_args
// then applies parse_service_args' rules (one --config, --set key=value; ConfigError).
struct ServiceFlags {
  std::vector<std::string> config_paths;  // every --config given, to refuse a second one
  ServiceArgs args;
};
void add_service_flags(CLI::App& app, ServiceFlags& flags, bool print_config);
ServiceArgs checked_service_args(ServiceFlags flags);

// The environment variable naming the file descriptor where a service writes why it exits with an
// error (the message it prints on stderr, one line), before it exits: `seqpipe up` gives each
// child the write end of a pipe, so that a replica it gives up is reported with its reason
// (`seqpipe models list`, the KServe repository index), not only its exit status.
inline constexpr const char* kExitReasonFdVariable = "SEQPIPE_EXIT_REASON_FD";

// Set ("1") by `seqpipe up` for a replica it starts beside serving ones (a model version's load)
// at SCHED_IDLE: its start-up (the dynamic loader, the model's pages, the warm-up) then runs only
// on what the serving processes leave of the cores. The replica serves at SCHED_OTHER:
// leave_idle_start() puts it back once warm.
inline constexpr const char* kStartedIdleVariable = "SEQPIPE_STARTED_IDLE";
// When kStartedIdleVariable is set: every thread of this process to SCHED_OTHER (the nice value
// kept). Throws std::system_error when not permitted (`seqpipe up` checks can_leave_idle() first).
void leave_idle_start();
// Whether this process may put a thread back to SCHED_OTHER from SCHED_IDLE (CAP_SYS_NICE, or an
// RLIMIT_NICE that allows its nice value), tried on a thread of its own.
bool can_leave_idle();

// The whole front of a service main(): parses the arguments, prints --help, loads the config
// (config::load_pipeline_config), creates the runtime directory if missing (mode 0700), sets the
// latency histogram buckets, then returns run(config). --print-config prints the config in force
// as YAML (config::to_yaml) instead of running. Exit codes: 0 for --help and --print-config; 2 with
// "seqpipe-<service>: <message>" on stderr for bad usage (and a pointer to --help) or a bad
// config; 1 when run throws; else what run returns. The message of an exit 1 or 2 goes to
// kExitReasonFdVariable's descriptor too, when it is set.
int run_service_main(int argc, char** argv, std::string_view service_name, std::string_view summary,
                     const std::function<int(const config::PipelineConfig&)>& run);
// The same for a service that needs the layers its config came from (its file and --set: the
// gateway loads each model version's config over them, config::load_model_version_config).
int run_service_main_layers(int argc, char** argv, std::string_view service_name,
                            std::string_view summary,
                            const std::function<int(const config::LoadedConfig&)>& run);

}  // namespace seqpipe::service
