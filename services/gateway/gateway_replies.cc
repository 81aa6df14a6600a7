// The replies a request's results make: the final one, its pieces joined, and a stream's
// partials.
#include <span>

#include "gateway/gateway.h"

namespace seqpipe::gateway {

namespace {
// A text split into pieces: their tokens summed; it ended by length when any piece did (the
// text is cut short there), else by a stop sequence when any did, else by eos.
protocol::Usage joined_usage(std::span<const protocol::Usage> pieces) {
  using protocol::FinishReason;
  auto rank = [](FinishReason f) {
    return f == FinishReason::kLength ? 2 : f == FinishReason::kStop ? 1 : 0;
  };
  protocol::Usage joined;
  for (const protocol::Usage& u : pieces) {
    joined.prompt_tokens += u.prompt_tokens;
    joined.completion_tokens += u.completion_tokens;
    if (rank(u.finish_reason) > rank(joined.finish_reason)) joined.finish_reason = u.finish_reason;
  }
  return joined;
}
}  // namespace

protocol::Reply Gateway::ok_reply(Request& r) {
  protocol::Reply ok;
  ok.id = r.client_id;
  ok.batch_form = r.batch_form;
  if (r.return_scores) ok.scores.emplace();
  if (r.sequences) ok.sequences.emplace();
  for (const auto& c : r.client_texts) {
    const size_t first = c.first_item;
    if (c.pieces.empty()) {
      ok.texts.push_back(std::move(r.texts[first]));
      if (r.return_scores) ok.scores->push_back(r.scores[first]);
      if (r.sequences) ok.sequences->push_back(std::move((*r.sequences)[first]));
      ok.usage.push_back(r.usage[first]);
      continue;
    }
    ok.usage.push_back(joined_usage(std::span(r.usage).subspan(first, c.items)));
    // Joined: the pieces' outputs in the text; the score, their mean; hypothesis k, each piece's
    // k-th (or its last when it has fewer).
    const auto begin = r.texts.begin() + static_cast<std::ptrdiff_t>(first);
    ok.texts.push_back(text::join_pieces(
        c.whole, c.pieces,
        std::vector<std::string>(begin, begin + static_cast<std::ptrdiff_t>(c.items))));
    float sum = 0;
    for (size_t k = first; k < first + c.items; ++k) sum += r.scores[k];
    if (r.return_scores) ok.scores->push_back(sum / static_cast<float>(c.items));
    if (!r.sequences) continue;
    size_t hypotheses = 0;
    for (size_t k = first; k < first + c.items; ++k)
      hypotheses = std::max(hypotheses, (*r.sequences)[k].size());
    auto& joined = ok.sequences->emplace_back();
    for (size_t h = 0; h < hypotheses; ++h) {
      std::vector<std::string> outputs;
      float hypothesis_sum = 0;
      for (size_t k = first; k < first + c.items; ++k) {
        const auto& piece = (*r.sequences)[k];
        const protocol::Sequence& s = piece[std::min(h, piece.size() - 1)];
        outputs.push_back(s.text);
        hypothesis_sum += s.score;
      }
      joined.push_back({text::join_pieces(c.whole, c.pieces, outputs),
                        hypothesis_sum / static_cast<float>(c.items)});
    }
  }
  return ok;
}

std::string Gateway::streamed_so_far(const Request& r) {
  const ClientText& c = r.client_texts.front();  // a stream has one text
  if (c.pieces.empty()) return r.texts[c.first_item];
  size_t done = 0;
  while (done < c.items && r.done[c.first_item + done]) ++done;
  const auto begin = r.texts.begin() + static_cast<std::ptrdiff_t>(c.first_item);
  return text::joined_so_far(
      c.whole, c.pieces,
      std::vector<std::string>(begin, begin + static_cast<std::ptrdiff_t>(c.items)), done);
}

void Gateway::stream_partial(Request& r, std::string_view text, Outbox& out) {
  if (text.size() <= r.streamed.size() || !text.starts_with(r.streamed)) return;
  protocol::Reply partial;
  partial.id = r.client_id;
  partial.partial = true;
  partial.texts.emplace_back(text.substr(r.streamed.size()));
  send(r.caller, std::move(partial), false, out);
  r.streamed = text;
}

}  // namespace seqpipe::gateway
