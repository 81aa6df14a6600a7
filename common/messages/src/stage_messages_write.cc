// Writing stage messages: one msgpack map per message, the kind's fields only.
#include <msgpack.hpp>

#include "seqpipe/messages/stage_messages.h"
#include "seqpipe/protocol/msgpack_io.h"

namespace seqpipe::stage {
namespace {

using msgpack_io::Writer;

void write_ids(Writer& out, const std::vector<int32_t>& ids) {
  out.array(ids.size());
  for (int32_t id : ids) out.i64(id);
}

void write_timings(Writer& out, const StageTimings& t) {
  out.array(6);
  for (uint64_t us :
       {t.queue_us, t.tokenize_us, t.batch_wait_us, t.encode_us, t.decode_us, t.postprocess_us}) {
    out.u64(us);
  }
}

// The header's 6 fields; `extra` more follow.
void write_header(Writer& out, const WorkHeader& h, size_t extra) {
  out.map(6 + (h.stream ? 1 : 0) + (h.stop_ids.empty() ? 0 : 1) + (h.prompt_tokens ? 1 : 0) +
          (h.model.empty() ? 0 : 1) + extra);
  out.str("r"), out.u64(h.request);
  out.str("i"), out.u64(h.index);
  out.str("g"), out.str(h.gateway);
  out.str("dl"), out.i64(h.deadline.unix_us());
  out.str("p"), out.params(h.params);
  out.str("tm"), write_timings(out, h.timings);
  if (h.stream) out.str("st"), out.boolean(true);
  if (!h.stop_ids.empty()) {
    out.str("sid"), out.array(h.stop_ids.size());
    for (const auto& ids : h.stop_ids) write_ids(out, ids);
  }
  if (h.prompt_tokens) out.str("pn"), out.u64(h.prompt_tokens);
  if (!h.model.empty()) out.str("m"), out.str(h.model);
}

void write_item(Writer& out, const TextItem& w) {
  write_header(out, w, 1 + (w.batcher.empty() ? 0 : 1));
  out.str("t"), out.str(w.text);
  if (!w.batcher.empty()) out.str("b"), out.str(w.batcher);
}

void write_item(Writer& out, const SequenceItem& w) {
  write_header(out, w, 1 + (w.text.empty() ? 0 : 1));
  out.str("ids"), write_ids(out, w.ids);
  if (!w.text.empty()) out.str("t"), out.str(w.text);
}

// The hidden rows' bytes go in a tensor frame of their own (append_frames), never through here.
void write_item(Writer& out, const EncodedItem& w) {
  write_header(out, w, 1 + (w.text.empty() ? 0 : 1));
  out.str("rows"), out.i64(w.hidden.rows);
  if (!w.text.empty()) out.str("t"), out.str(w.text);
}

void write_item(Writer& out, const DecodedItem& w) {
  write_header(out, w,
               3 + (w.alternatives.empty() ? 0 : 1) + (w.alternative_scores.empty() ? 0 : 1) +
                   (w.text.empty() ? 0 : 1) + (w.partial ? 1 : 0));
  out.str("ids"), write_ids(out, w.ids);
  out.str("s"), out.f32(w.score);
  out.str("fr"), out.str(protocol::wire_name(w.finish_reason));
  if (!w.alternatives.empty()) {
    out.str("alt"), out.array(w.alternatives.size());
    for (const auto& alt : w.alternatives) write_ids(out, alt);
  }
  if (!w.alternative_scores.empty()) {
    out.str("alt_s"), out.array(w.alternative_scores.size());
    for (float s : w.alternative_scores) out.f32(s);
  }
  if (!w.text.empty()) out.str("t"), out.str(w.text);
  if (w.partial) out.str("pt"), out.boolean(true);
}

void write_item(Writer& out, const ResultItem& w) {
  out.map(8 + (w.error ? 1 : 0) + (w.alternatives.empty() ? 0 : 2) + (w.partial ? 1 : 0));
  out.str("r"), out.u64(w.request);
  out.str("i"), out.u64(w.index);
  out.str("t"), out.str(w.text);
  out.str("s"), out.f32(w.score);
  out.str("pn"), out.u64(w.prompt_tokens);
  out.str("cn"), out.u64(w.completion_tokens);
  out.str("fr"), out.str(protocol::wire_name(w.finish_reason));
  out.str("tm"), write_timings(out, w.timings);
  if (w.error) {
    out.str("e"), out.map(2);
    out.str("c"), out.str(protocol::wire_name(w.error->code));
    out.str("m"), out.str(w.error->message);
  }
  if (!w.alternatives.empty()) {
    out.str("alt"), out.array(w.alternatives.size());
    for (const auto& text : w.alternatives) out.str(text);
    out.str("alt_s"), out.array(w.alternative_scores.size());
    for (float s : w.alternative_scores) out.f32(s);
  }
  if (w.partial) out.str("pt"), out.boolean(true);
}

void write_item(Writer& out, const RequestRef& w) {
  out.map(3);
  out.str("r"), out.u64(w.request);
  out.str("g"), out.str(w.gateway);
  out.str("dl"), out.i64(w.deadline.unix_us());
}

template <class Item>
void write_items(Writer& out, const std::vector<Item>& items) {
  out.str("items"), out.array(items.size());
  for (const Item& item : items) write_item(out, item);
}

// The fields after v and kind, per message type.
size_t body_fields(const Ready& m) {
  return m.model.empty() ? 1 : 2;
}
size_t body_fields(const Credit&) {
  return 1;
}
size_t body_fields(const Encoded&) {
  return 2;
}
size_t body_fields(const Decoded&) {
  return 2;
}
size_t body_fields(const Heartbeat& m) {
  return (m.from.empty() ? 0 : 1) + (m.incarnation == 0 ? 0 : 1);
}
template <class M>
size_t body_fields(const M&) {
  return 1;
}

void write_body(Writer& out, const Ready& m) {
  out.str("credits"), out.i64(m.credits);
  if (!m.model.empty()) out.str("model"), out.str(m.model);
}
void write_body(Writer& out, const Credit& m) {
  out.str("credits"), out.i64(m.credits);
}
void write_body(Writer& out, const Encoded& m) {
  out.str("credits"), out.i64(m.credits);
  write_items(out, m.items);
}
void write_body(Writer& out, const Decoded& m) {
  out.str("credits"), out.i64(m.credits);
  write_items(out, m.items);
}
void write_body(Writer& out, const Cancel& m) {
  write_items(out, m.requests);
}
void write_body(Writer& out, const Heartbeat& m) {
  if (!m.from.empty()) out.str("from"), out.str(m.from);
  if (m.incarnation != 0) out.str("incarnation"), out.u64(m.incarnation);
}
template <class M>
void write_body(Writer& out, const M& m) {
  write_items(out, m.items);
}

}  // namespace

std::string encode(const StageMessage& message) {
  std::string bytes;
  Writer out(bytes);
  std::visit(
      [&](const auto& m) {
        out.map(2 + body_fields(m));
        out.str("v"), out.i64(kVersion);
        out.str("kind"), out.str(kind_name(message));
        write_body(out, m);
      },
      message);
  return bytes;
}

void append_frames(const StageMessage& message, std::vector<TensorFrame>& frames) {
  auto append = [&](const std::vector<EncodedItem>& items) {
    for (const EncodedItem& item : items) frames.push_back(item.hidden.values);
  };
  if (const auto* encoded = std::get_if<Encoded>(&message)) append(encoded->items);
  if (const auto* decode = std::get_if<Decode>(&message)) append(decode->items);
}

}  // namespace seqpipe::stage
