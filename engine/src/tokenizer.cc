#include "seqpipe/engine/tokenizer.h"

#include <sentencepiece_processor.h>

#include "seqpipe/engine/error.h"

namespace seqpipe::engine {

Tokenizer::Tokenizer(const std::string& spiece_model_path)
    : sp_(std::make_unique<sentencepiece::SentencePieceProcessor>()) {
  const auto status = sp_->Load(spiece_model_path);
  if (!status.ok()) {
    throw EngineError(spiece_model_path +
                      ": cannot load SentencePiece model: " + status.ToString());
  }
  // T5 ends every input with </s>; a model without one cannot produce T5 inputs.
  if (sp_->eos_id() < 0) {
    throw EngineError(spiece_model_path + ": SentencePiece model has no eos piece (T5 needs </s>)");
  }
}

Tokenizer::~Tokenizer() = default;

std::vector<int> Tokenizer::encode(std::string_view text) const {
  std::vector<int> ids;
  const auto status = sp_->Encode(text, &ids);
  if (!status.ok()) throw EngineError("Tokenizer::encode: " + status.ToString());
  ids.push_back(sp_->eos_id());
  return ids;
}

std::string Tokenizer::decode(std::span<const int> ids) const {
  const int pieces = sp_->GetPieceSize();
  std::vector<int> kept;
  kept.reserve(ids.size());
  for (int id : ids) {
    // Ids past spiece.model are the model's <extra_id_N> sentinels (or padding of the
    // embedding matrix): special tokens, skipped as HF's skip_special_tokens does.
    if (id < 0 || id >= pieces) continue;
    if (id == sp_->pad_id() || id == sp_->eos_id() || sp_->IsUnknown(id) || sp_->IsControl(id)) {
      continue;
    }
    kept.push_back(id);
  }
  std::string text;
  const auto status = sp_->Decode(kept, &text);
  if (!status.ok()) throw EngineError("Tokenizer::decode: " + status.ToString());
  return text;
}

int Tokenizer::vocab_size() const {
  return sp_->GetPieceSize();
}
int Tokenizer::eos_id() const {
  return sp_->eos_id();
}
int Tokenizer::pad_id() const {
  return sp_->pad_id();
}

}  // namespace seqpipe::engine
