#include "seqpipe/runtime/service.h"

#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <csignal>
#include <string>

namespace seqpipe::service {

namespace {
volatile std::sig_atomic_t g_stop = 0;
extern "C" void on_stop_signal(int) {
  g_stop = 1;
}  // a flag only: nothing else is signal-safe
}  // namespace

void init_logging(std::string_view service) {
  auto logger = spdlog::stderr_logger_mt("seqpipe-" + std::string(service));
  logger->set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%n " + std::to_string(::getpid()) + "] [%l] %v");
  logger->flush_on(spdlog::level::info);
  spdlog::set_default_logger(logger);
}

void install_stop_handlers() {
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
  std::signal(SIGPIPE, SIG_IGN);
}

bool stop_requested() {
  return g_stop != 0;
}
void request_stop() {
  g_stop = 1;
}

}  // namespace seqpipe::service
