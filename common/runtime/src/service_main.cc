#include "seqpipe/runtime/service_main.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "seqpipe/cli/cli.h"
#include "seqpipe/config/config.h"
#include "seqpipe/observability/metrics.h"
#include "seqpipe/transport/transport.h"

namespace seqpipe::service {
namespace {

// Bad usage, like a bad config, is a ConfigError: one catch, exit status 2.
[[noreturn]] void usage_error(const std::string& message) {
  throw config::ConfigError(message);
}

// The directory of the ipc:// sockets, created if missing. Throws ConfigError.
void make_runtime_dir(const std::string& dir) {
  std::error_code ec;
  if (std::filesystem::create_directories(dir, ec)) {
    // Our sockets: other users have no business connecting to them.
    std::filesystem::permissions(dir, std::filesystem::perms::owner_all, ec);
  }
  if (ec) throw config::ConfigError("runtime_dir: cannot create '" + dir + "': " + ec.message());
}

}  // namespace

void add_service_flags(CLI::App& app, ServiceFlags& flags, bool print_config) {
  // option_text: CLI11 would show "FILE ..." for the vector that catches a second --config.
  cli::add_repeated(app, "--config", flags.config_paths)
      ->type_name("FILE")
      ->option_text("FILE")
      ->description("the pipeline config (default: " + std::string(config::kDefaultConfigPath) +
                    " in the working directory if it exists, else the built-in defaults)");
  cli::add_repeated(app, "--set", flags.args.overrides)
      ->type_name("KEY=VALUE")
      ->option_text("KEY=VALUE")
      ->description(
          "override one config key after the file is read, e.g. --set "
          "batcher.max_batch_size=16 or --set batcher.preferred_batch_sizes=[4,8]; repeatable, "
          "applied in order");
  if (print_config) {
    app.add_flag("--print-config", flags.args.print_config)
        ->description("print the config in force (every key, limits included) as YAML and exit");
  }
}

ServiceArgs checked_service_args(ServiceFlags flags) {
  if (flags.config_paths.size() > 1) usage_error("--config given twice");
  if (!flags.config_paths.empty()) {
    if (flags.config_paths.front().empty()) usage_error("--config needs a file name");
    flags.args.config_path = flags.config_paths.front();
  }
  for (const std::string& assignment : flags.args.overrides) {
    const size_t eq = assignment.find('=');
    if (eq == std::string::npos || eq == 0) {
      usage_error("--set needs key=value, got '" + assignment + "'");
    }
  }
  return std::move(flags.args);
}

ServiceArgs parse_service_args(int argc, char** argv, std::string_view program,
                               std::string_view summary) {
  ServiceFlags flags;
  CLI::App app{std::string(summary), std::string(program)};
  cli::set_up(app);
  app.set_help_flag("-h,--help", "print this help and exit");
  add_service_flags(app, flags, true);
  app.footer("Every config key is documented in docs/CONFIG.md and " +
             std::string(config::kDefaultConfigPath) +
             ".\nExit status: 0 success, 1 failure while running, 2 bad usage or config.");
  std::vector<std::string> unknown;
  try {
    unknown = cli::parse(app, argc, argv);
  } catch (const CLI::CallForHelp&) {
    flags.args.help = app.help();  // wins over anything else on the line
    return std::move(flags.args);
  } catch (const cli::UsageError& e) {
    usage_error(e.what());
  }
  if (!unknown.empty()) usage_error("unknown argument '" + unknown.front() + "'");
  return checked_service_args(std::move(flags));
}

namespace {

// Writes `why` (one line, at most 1000 bytes: a pipe takes that without blocking) to
// kExitReasonFdVariable's descriptor when the variable is set; returns `status`.
int exit_with_reason(int status, std::string_view why) {
  const char* fd_text = std::getenv(kExitReasonFdVariable);
  if (fd_text == nullptr) return status;
  char* end = nullptr;
  const long fd = std::strtol(fd_text, &end, 10);
  if (end == fd_text || *end != '\0' || fd < 0) return status;
  std::string line(why.substr(0, 1000));
  std::replace(line.begin(), line.end(), '\n', ' ');
  line += '\n';
  [[maybe_unused]] const ssize_t written = ::write(static_cast<int>(fd), line.data(), line.size());
  return status;
}

}  // namespace

int run_service_main(int argc, char** argv, std::string_view service_name, std::string_view summary,
                     const std::function<int(const config::PipelineConfig&)>& run) {
  return run_service_main_layers(
      argc, argv, service_name, summary,
      [&run](const config::LoadedConfig& loaded) { return run(loaded.config); });
}

int run_service_main_layers(int argc, char** argv, std::string_view service_name,
                            std::string_view summary,
                            const std::function<int(const config::LoadedConfig&)>& run) {
  const std::string program = "seqpipe-" + std::string(service_name);
  ServiceArgs args;
  try {
    args = parse_service_args(argc, argv, program, summary);
  } catch (const config::ConfigError& e) {
    std::cerr << program << ": " << e.what() << " (see " << program << " --help)\n";
    return exit_with_reason(2, e.what());
  }
  if (!args.help.empty()) {
    std::cout << args.help << std::flush;
    return 0;
  }
  config::LoadedConfig loaded;
  const config::PipelineConfig& pipeline = loaded.config;
  try {
    loaded = config::load_pipeline_config(args.config_path, args.overrides);
    if (loaded.path.empty()) {
      std::cerr << program << ": no " << config::kDefaultConfigPath
                << " in the working directory and no --config: using the built-in defaults\n";
    }
    if (args.print_config) {
      std::cout << config::to_yaml(pipeline) << std::flush;
      return 0;
    }
    make_runtime_dir(pipeline.runtime_dir);
  } catch (const config::ConfigError& e) {
    std::cerr << program << ": " << e.what() << "\n";
    return exit_with_reason(2, e.what());
  }
  try {
    metrics::set_latency_buckets(
        pipeline.metrics.latency_buckets_us);  // before any metric is built
    return run(loaded);
  } catch (const config::ConfigError& e) {
    std::cerr << program << ": " << e.what() << "\n";
    return exit_with_reason(2, e.what());
  } catch (const transport::EndpointError& e) {  // as a bad config: a restart would not help
    std::cerr << program << ": " << e.what() << "\n";
    return exit_with_reason(2, e.what());
  } catch (const std::exception& e) {
    std::cerr << program << ": error: " << e.what() << "\n";
    return exit_with_reason(1, e.what());
  }
}

void leave_idle_start() {
  if (!std::getenv(kStartedIdleVariable)) return;
  const sched_param normal{};
  // Every thread: the ones made while idle (ZeroMQ's, the stage's, OpenMP's) are idle too.
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    const pid_t tid = std::stoi(task.path().filename().string());
    if (::sched_setscheduler(tid, SCHED_OTHER, &normal) != 0 && errno != ESRCH)
      throw std::system_error(errno, std::generic_category(), "leaving SCHED_IDLE");
  }
}

bool can_leave_idle() {
  bool can = false;
  std::thread([&] {
    const sched_param param{};
    can = ::sched_setscheduler(0, SCHED_IDLE, &param) == 0 &&
          ::sched_setscheduler(0, SCHED_OTHER, &param) == 0;
  }).join();
  return can;
}

}  // namespace seqpipe::service
