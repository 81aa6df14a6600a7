#pragma once
// The model an encoder or decoder replica serves: model.dir, in the stage's compute type (its
// <stage>.compute_type, else model.compute_type), on model.device; and the tokenizer a tokenizer
// or postprocessor replica serves. A compute type the engine does not know, a device this build or
// machine cannot run, or a model directory that does not load (a file missing, a config.json that
// does not parse, a tensor of the wrong shape) is a config error naming the key (exit status 2, so
// `seqpipe up` gives the replica up at once: starting it again would fail the same way), and the
// type in use (auto resolved) is exported as seqpipe_engine_info.
#include <memory>
#include <string>

#include "seqpipe/config/config_error.h"
#include "seqpipe/config/model_config.h"
#include "seqpipe/engine/compute_type.h"
#include "seqpipe/engine/error.h"
#include "seqpipe/engine/model.h"
#include "seqpipe/engine/tokenizer.h"
#include "seqpipe/observability/metrics.h"

namespace seqpipe::services {

inline std::shared_ptr<const engine::T5Model> load_stage_model(
    const config::ModelConfig& served, const std::string& stage,
    const std::string& stage_compute_type, int threads, metrics::StageMetrics& metrics) {
  const bool own = !stage_compute_type.empty();
  const std::string& name = own ? stage_compute_type : served.compute_type;
  engine::ComputeType type;
  try {
    type = engine::parse_compute_type(name);
  } catch (const engine::EngineError& e) {
    throw config::ConfigError((own ? stage : std::string("model")) + ".compute_type: " + e.what());
  }
  engine::ModelOptions options;
  options.threads = threads;
  options.compute_type = type;
  options.cuda_graphs = served.cuda_graphs == 1;
  try {
    const engine::DeviceSpec device = engine::parse_device(served.device);
    options.device = device.device;
    options.device_index = device.index;
    engine::open_device(device);
  } catch (const engine::EngineError& e) {
    throw config::ConfigError("model.device: " + std::string(e.what()));
  }
  std::shared_ptr<const engine::T5Model> model;
  try {
    model = engine::T5Model::load(served.dir, options);
  } catch (const engine::EngineError& e) {
    throw config::ConfigError("model.dir " + served.dir + " does not load: " + e.what());
  }
  metrics.engine_info(engine::compute_type_name(model->compute_type()));
  return model;
}

inline std::shared_ptr<const engine::Tokenizer> load_stage_tokenizer(
    const config::ModelConfig& served) {
  try {
    return std::make_shared<const engine::Tokenizer>(served.dir + "/spiece.model");
  } catch (const engine::EngineError& e) {
    throw config::ConfigError("model.dir " + served.dir + " does not load: " + e.what());
  }
}

}  // namespace seqpipe::services
