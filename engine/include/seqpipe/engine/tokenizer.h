#pragma once
// T5's tokenizer: SentencePiece over spiece.model, as HuggingFace's T5Tokenizer uses it.
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace seqpipe::engine {

class Tokenizer {
 public:
  // Throws EngineError naming the file when it is missing or not a SentencePiece model.
  explicit Tokenizer(const std::string& spiece_model_path);
  ~Tokenizer();

  // SentencePiece ids of the text followed by </s> (eos), as T5Tokenizer's encode does.
  std::vector<int> encode(std::string_view text) const;
  // Text of the ids, skipping special tokens (pad, eos, unk, and ids past the SentencePiece
  // vocabulary such as <extra_id_N>), as decode(skip_special_tokens=True) does.
  std::string decode(std::span<const int> ids) const;

  int vocab_size() const;  // pieces in spiece.model
  int eos_id() const;
  int pad_id() const;

 private:
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
};

}  // namespace seqpipe::engine
