#pragma once
// A long text goes through the model in pieces: a model trained on short spans corrects a piece
// of a few words better than a long input, and no input is cut at the model's token limit. The
// pieces are whole sentences (a word ending in . ! ? or an ellipsis, a line break), packed
// together while they fit; a sentence longer than a piece is split at whitespace into parts of
// equal length. Everything between pieces (the whitespace) stays in the text, and join_pieces puts
// the pieces' outputs back in their places: join_pieces(t, split_text(t, n), the pieces' own
// bytes) == t for every text.
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace seqpipe::text {

struct Piece {
  size_t begin = 0, end = 0;  // the piece's bytes in the text

  bool operator==(const Piece&) const = default;
};

// The pieces of `text` of at most `max_words` words (runs of non-whitespace) each. A text of at
// most max_words words, or max_words == 0, is one piece: the whole text, whitespace included.
std::vector<Piece> split_text(std::string_view text, size_t max_words);

// `text` with outputs[k] in place of pieces[k] (as many outputs as pieces).
std::string join_pieces(std::string_view text, const std::vector<Piece>& pieces,
                        const std::vector<std::string>& outputs);

// What a stream of the joined text can send while only the first `done` pieces are finished:
// join_pieces up to piece `done`, whose output so far is outputs[done] (a prefix of its final
// output). With every piece done, join_pieces itself. So it is always a prefix of the joined
// text when each outputs[k] is a prefix of piece k's final output.
std::string joined_so_far(std::string_view text, const std::vector<Piece>& pieces,
                          const std::vector<std::string>& outputs, size_t done);

}  // namespace seqpipe::text
