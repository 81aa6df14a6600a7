// seqpipe: run the pipeline on this machine and talk to it. One CLI11 subcommand per command
// (up, send, status, models, keygen); `seqpipe [COMMAND] --help` is CLI11's help from the flags
// registered here, send's generation options from the option table.
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "seqpipe/cli/cli.h"
#include "seqpipe/config/config.h"
#include "seqpipe/models_command.h"
#include "seqpipe/runtime/service_main.h"
#include "seqpipe/security/security.h"
#include "seqpipe/send_command.h"
#include "seqpipe/status_command.h"
#include "seqpipe/up_command.h"

namespace {

namespace cli = seqpipe::cli;
namespace config = seqpipe::config;
namespace fs = std::filesystem;

constexpr const char* kStatusFooter =
    R"(Asks the two hubs (gateway, batcher) of the running pipeline what they serve and see: the
models they serve and their bound ports (HTTP, gRPC, /metrics), the compute type and device the
engine stages run with (as the batcher was configured: the same config and --set as they); for
each stage its live replicas (announced, so warmed up), the work its replicas hold (in flight),
the work waiting in the hub (queued) and the free credits ("-" for the hubs, which grant credits
and hold none); then each hub's uptime, the gateway's requests, its server errors (and their
rate) apart from its clients' (invalid_argument, too_long, not_found, cancelled), the replicas
each stage lost (a restart is one), and "ready: yes" when every stage has a live replica. For a
hub that does not answer, it prints what the local config would start instead, said as such.
--wait N asks again until ready, up to N seconds (`seqpipe up &` then `seqpipe status --wait
120`). With security.server_key in the config, it is a CurveZMQ client.
Exit status: 0 ready, 1 not ready or a hub did not answer within 1 s (reported as down), 2 bad
usage or config.)";

constexpr const char* kKeygenFooter =
    R"(Writes a CurveZMQ key pair per NAME into DIR: DIR/NAME, the public key (give it to the hubs'
allow lists, or to the clients of a hub), and DIR/NAME_secret, both keys, mode 0600 (czmq's
certificate format; docs/DEPLOY.md). It never overwrites a file.
Exit status: 0 written, 1 a file could not be written, 2 bad usage.)";

}  // namespace

int keygen(const std::string& dir, const std::vector<std::string>& names) {
  if (names.empty()) throw cli::UsageError("give the name of each key pair to write");
  std::error_code ec;
  fs::create_directories(dir, ec);  // "cannot write DIR/NAME_secret" would not say why
  if (ec) throw std::runtime_error(dir + ": cannot create the directory: " + ec.message());
  for (const std::string& name : names) {
    if (name.empty() || name.find('/') != std::string::npos)
      throw cli::UsageError("a key name is a file name, got '" + name + "'");
    const std::string path = (fs::path(dir) / name).string();
    seqpipe::security::write_key_files(path, seqpipe::security::generate_key_pair());
    std::printf("%s (public), %s_secret (secret, mode 0600)\n", path.c_str(), path.c_str());
  }
  return 0;
}

// Every command's arguments, filled by parse.
struct Commands {
  seqpipe::supervisor::UpArgs up;
  seqpipe::service::ServiceFlags status;
  int status_wait_s = 0;  // seqpipe status --wait
  seqpipe::supervisor::SendArgs send;
  seqpipe::supervisor::ModelsArgs models;
  std::string keygen_dir = ".";
  std::vector<std::string> keygen_names;
};

// The command line: one CLI11 subcommand per command, each with its flags' help and a footer.
void add_commands(CLI::App& app, Commands& c) {
  cli::set_up(app);  // seqpipe's wording and TakeLast, which the subcommands inherit
  app.set_help_flag("-h,--help", "print this help and exit");
  app.require_subcommand(0, 1);
  seqpipe::supervisor::add_up_command(app, c.up);
  seqpipe::supervisor::add_send_command(app, c.send);
  CLI::App* status = app.add_subcommand("status", "ask the hubs how the pipeline is doing");
  seqpipe::service::add_service_flags(*status, c.status, false);
  cli::add_number(*status, "--wait", c.status_wait_s)
      ->description("ask again until the pipeline is ready, for up to N seconds (default 0: once)");
  status->footer(kStatusFooter);
  seqpipe::supervisor::add_models_command(app, c.models);
  CLI::App* keygen = app.add_subcommand("keygen", "write CurveZMQ key pairs");
  keygen->add_option("--dir", c.keygen_dir, "where to write them (made if missing)")
      ->type_name("DIR")
      ->capture_default_str();
  keygen->add_option("NAME", c.keygen_names, "the name of each key pair");
  keygen->footer(kKeygenFooter);
  app.footer(
      "seqpipe COMMAND --help says more. Exit status: 0 ok, 1 the command failed, 2 bad usage or "
      "config.");
}

// The chosen command, run; 2 (with the help on stderr) when none was named.
int run(CLI::App& app, Commands& c, const std::vector<std::string>& rest) {
  const auto chosen = app.get_subcommands();
  if (chosen.empty()) {
    if (!rest.empty()) throw cli::UsageError("unknown command '" + rest.front() + "'");
    std::cerr << app.help();
    return 2;
  }
  if (!rest.empty()) throw cli::UsageError("unknown argument '" + rest.front() + "'");
  const std::string name = chosen.front()->get_name();
  if (name == "up") return seqpipe::supervisor::up_command(std::move(c.up));
  if (name == "send") return seqpipe::supervisor::send_command(std::move(c.send));
  if (name == "models") return seqpipe::supervisor::models_command(std::move(c.models));
  if (name == "status")
    return seqpipe::supervisor::status_command(
        seqpipe::service::checked_service_args(std::move(c.status)), c.status_wait_s);
  return keygen(c.keygen_dir, c.keygen_names);
}

int main(int argc, char** argv) {
  CLI::App app("seqpipe: run the pipeline on this machine and talk to it", "seqpipe");
  Commands commands;
  add_commands(app, commands);
  try {
    std::vector<std::string> rest;
    try {
      rest = cli::parse(app, argc, argv);
    } catch (const CLI::CallForHelp&) {
      std::cout << app.help();  // the chosen command's, when one was named
      return 0;
    }
    return run(app, commands, rest);
  } catch (const cli::UsageError& e) {
    std::fprintf(stderr, "seqpipe: %s (see seqpipe --help)\n", e.what());
    return 2;
  } catch (const config::ConfigError& e) {
    std::fprintf(stderr, "seqpipe: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "seqpipe: %s\n", e.what());
    return 1;
  }
}
