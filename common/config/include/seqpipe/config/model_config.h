#pragma once
// The model: `model.*` keys (which model, how it is served and computed).
// One section of PipelineConfig (seqpipe/config/config.h composes them and loads them);
// a consumer that reads only this section includes only this header.

#include <string>

namespace seqpipe::config {

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

}  // namespace seqpipe::config
