#pragma once
// The four worker stages driven directly (no sockets) against the engine itself, on a random
// tiny checkpoint with a SentencePiece model made by seqpipe-mkmodel: the fixture of
// worker_stages*_test.cc (one class for the one test suite, so not file-local).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <tuple>

#include "decoder/decoder_stage.h"
#include "encoder/encoder_stage.h"
#include "postprocessor/postprocessor_stage.h"
#include "seqpipe/config/config.h"
#include "seqpipe/engine/decoding.h"
#include "seqpipe/engine/model.h"
#include "tokenizer/tokenizer_stage.h"

namespace seqpipe {

class WorkerStages : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(std::filesystem::temp_directory_path() /
                           ("seqpipe-stages-" + std::to_string(::getpid())));
    const std::string cmd = std::string(SEQPIPE_MKMODEL) +
                            " --preset tiny --gated --untied --spiece --seed 3 --out " + *dir_ +
                            " > /dev/null 2>&1";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    model_ = new std::shared_ptr<const engine::T5Model>(
        engine::T5Model::load(*dir_, {.threads = 1, .device = engine::Device::kCpu}));
    tokenizer_ = new std::shared_ptr<const engine::Tokenizer>(
        std::make_shared<engine::Tokenizer>(*dir_ + "/spiece.model"));
  }
  static void TearDownTestSuite() {
    std::filesystem::remove_all(*dir_);
    delete model_;
    delete tokenizer_;
    delete dir_;
  }
  WorkerStages() : registry_(metrics::make_registry()), metrics_(*registry_, "test") {
    config_.model.max_input_tokens = 32;
    config_.decoder.num_slots = 8;
    config_.decoder.max_new_tokens = 12;
  }
  static stage::WorkHeader header(uint64_t request, uint32_t index = 0) {
    stage::WorkHeader w;
    w.request = request;
    w.index = index;
    w.gateway = "ipc:///tmp/gw" + std::to_string(request % 2) + ".sock";
    w.deadline = Deadline::after(Now::read(), std::chrono::seconds(60));
    w.params.max_new_tokens = 12;
    return w;
  }
  static stage::TextItem item(uint64_t request, std::string text = "", uint32_t index = 0) {
    auto w = stage::next_hop<stage::TextItem>(header(request, index));
    w.text = std::move(text);
    return w;
  }
  // The text's ids (none without a text).
  static stage::SequenceItem sequence(uint64_t request, const std::string& text = "") {
    auto w = stage::next_hop<stage::SequenceItem>(header(request));
    if (text.empty()) return w;
    const auto ids = (*tokenizer_)->encode(text);
    w.ids.assign(ids.begin(), ids.end());
    return w;
  }
  static stage::DecodedItem decoded(uint64_t request) {
    return stage::next_hop<stage::DecodedItem>(header(request));
  }
  static stage::RequestRef ref(uint64_t request) {
    const stage::WorkHeader h = header(request);
    return {h.request, h.gateway, h.deadline};
  }
  stage::EncodedItem encoded(uint64_t request, const std::string& text, int beams = 1) {
    auto w = stage::next_hop<stage::EncodedItem>(header(request));
    w.params.num_beams = beams;
    const auto ids = (*tokenizer_)->encode(text);
    engine::Encoder encoder(*model_);
    const auto out = encoder.encode({ids});
    w.hidden.rows = out.length(0);
    w.hidden.values = stage::TensorFrame::floats(static_cast<size_t>(out.hidden.numel()),
                                                 [&](float* rows) { out.copy_sequence(0, rows); });
    return w;
  }
  template <class M>
  static const M& as(const stage::StageMessage& m) {
    return std::get<M>(m);
  }
  static std::vector<int> reference(const std::string& text, int beams) {
    engine::DecodingOptions o;
    o.max_new_tokens = 12;
    o.num_beams = beams;
    return engine::generate(*model_, {(*tokenizer_)->encode(text)}, o)[0].ids;
  }

  static inline std::string* dir_ = nullptr;
  static inline std::shared_ptr<const engine::T5Model>* model_ = nullptr;
  static inline std::shared_ptr<const engine::Tokenizer>* tokenizer_ = nullptr;
  config::PipelineConfig config_;
  std::shared_ptr<prometheus::Registry> registry_;
  metrics::StageMetrics metrics_;
};

}  // namespace seqpipe
