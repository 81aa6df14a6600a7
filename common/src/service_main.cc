#include "seqpipe/common/service_main.h"

#include <filesystem>
#include <iostream>
#include <optional>
#include <string>
#include <system_error>
#include <utility>

#include "seqpipe/common/metrics.h"

namespace seqpipe::service {
namespace {

[[noreturn]] void usage_error(const std::string& message) {
  throw config::ConfigError(message);
}

std::string usage_line(std::string_view program) {
  return "usage: " + std::string(program) + " [--config FILE] [--set key=value ...] [--help]";
}

void print_help(const std::string& program, std::string_view summary) {
  std::cout << usage_line(program) << "\n\n"
            << summary << "\n\n"
            << "  --config FILE     the pipeline config (default: " << config::kDefaultConfigPath
            << " in the working\n"
            << "                    directory if it exists, else the built-in defaults)\n"
            << "  --set key=value   override one key after the file is read; repeatable, applied\n"
            << "                    in order, e.g. --set batcher.max_batch_size=16\n"
            << "                    --set batcher.preferred_batch_sizes=[4,8]\n"
            << "  --help            this text\n\n"
            << "Every key is documented in docs/CONFIG.md and " << config::kDefaultConfigPath
            << ".\n"
            << "Exit status: 0 success, 1 failure while running, 2 bad usage or config.\n"
            << std::flush;
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

ServiceArgs parse_service_args(int argc, char** argv) {
  ServiceArgs args;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    // The value of a flag given as "--flag value" or "--flag=value".
    auto value_of = [&](std::string_view flag) -> std::optional<std::string> {
      if (arg == flag) {
        if (i + 1 >= argc) usage_error(std::string(flag) + " needs a value");
        return std::string(argv[++i]);
      }
      if (arg.starts_with(std::string(flag) + "=")) return arg.substr(flag.size() + 1);
      return std::nullopt;
    };
    if (arg == "--help" || arg == "-h") {
      args.help = true;
      return args;  // --help wins over anything else on the line
    }
    if (std::optional<std::string> path = value_of("--config")) {
      if (!args.config_path.empty()) usage_error("--config given twice");
      if (path->empty()) usage_error("--config needs a file name");
      args.config_path = *path;
    } else if (std::optional<std::string> assignment = value_of("--set")) {
      const size_t eq = assignment->find('=');
      if (eq == std::string::npos || eq == 0)
        usage_error("--set needs key=value, got '" + *assignment + "'");
      args.overrides.push_back(*assignment);
    } else {
      usage_error("unknown argument '" + arg + "'");
    }
  }
  return args;
}

int run_service_main(int argc, char** argv, std::string_view service_name, std::string_view summary,
                     const std::function<int(const config::PipelineConfig&)>& run) {
  const std::string program = "seqpipe-" + std::string(service_name);
  ServiceArgs args;
  try {
    args = parse_service_args(argc, argv);
  } catch (const config::ConfigError& e) {
    std::cerr << program << ": " << e.what() << "\n" << usage_line(program) << "\n";
    return 2;
  }
  if (args.help) {
    print_help(program, summary);
    return 0;
  }
  config::PipelineConfig pipeline;
  try {
    config::LoadedConfig loaded = config::load_pipeline_config(args.config_path, args.overrides);
    if (loaded.path.empty()) {
      std::cerr << program << ": no " << config::kDefaultConfigPath
                << " in the working directory and no --config: using the built-in defaults\n";
    }
    pipeline = std::move(loaded.config);
    make_runtime_dir(pipeline.runtime_dir);
  } catch (const config::ConfigError& e) {
    std::cerr << program << ": " << e.what() << "\n";
    return 2;
  }
  try {
    metrics::set_latency_buckets(
        pipeline.metrics.latency_buckets_us);  // before any metric is built
    return run(pipeline);
  } catch (const config::ConfigError& e) {
    std::cerr << program << ": " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << program << ": error: " << e.what() << "\n";
    return 1;
  }
}

}  // namespace seqpipe::service
