// The official OpenAI and Hugging Face clients, unmodified, against a seqpipe gateway's HTTP
// port (argv[2]); prints one JSON object of what each call got, for openai_test.py to check.
import OpenAI from "openai";
import { InferenceClient } from "@huggingface/inference";

const base = `http://127.0.0.1:${process.argv[2]}`;
const prompt = process.argv[3];
const openai = new OpenAI({ baseURL: `${base}/v1`, apiKey: "unused", maxRetries: 0 });
const out = {};

async function failure(call) {
  try {
    await call();
    return null;
  } catch (e) {
    return { status: e.status, type: e.type, param: e.param, code: e.code, message: e.message };
  }
}

out.models = (await openai.models.list()).data.map((m) => m.id);
out.model = (await openai.models.retrieve(out.models[0])).id;
const completion = await openai.completions.create({ model: "t5", prompt, max_tokens: 10 });
out.completion = completion.choices[0].text;
out.completion_object = completion.object;
out.completion_finish = completion.choices[0].finish_reason;
out.completion_usage = completion.usage;
// min_tokens up to max_tokens: the model cannot end the text itself, so max_tokens does.
const cut = await openai.completions.create({ model: "t5", prompt, max_tokens: 3, min_tokens: 3 });
out.cut_finish = cut.choices[0].finish_reason;
out.cut_usage = cut.usage;
out.listed = (
  await openai.completions.create({ model: "t5", prompt: [prompt, "hello"], max_tokens: 10 })
).choices.map((c) => c.text);
out.streamed = "";
out.chunks = 0;
for await (const chunk of await openai.completions.create({
  model: "t5",
  prompt,
  max_tokens: 10,
  stream: true,
})) {
  out.streamed += chunk.choices[0].text;
  out.chunks += 1;
  out.stream_finish = chunk.choices[0].finish_reason;
  out.stream_usage_key = "usage" in chunk;
}
// stream_options.include_usage: every chunk's usage is null but the last's, which has no choices.
out.usage_chunks = [];
for await (const chunk of await openai.chat.completions.create({
  model: "t5",
  messages: [{ role: "user", content: prompt }],
  max_tokens: 3,
  min_tokens: 3,
  stream: true,
  stream_options: { include_usage: true },
})) {
  out.usage_chunks.push({
    choices: chunk.choices.length,
    finish: chunk.choices[0]?.finish_reason ?? null,
    usage: chunk.usage,
  });
}
const messages = [
  { role: "system", content: "You correct spelling." },
  { role: "user", content: prompt },
];
const chat = await openai.chat.completions.create({ model: "t5", messages, max_tokens: 10 });
out.chat = chat.choices[0].message.content;
out.chat_usage = chat.usage;
out.chat_finish = chat.choices[0].finish_reason;
out.chat_streamed = "";
for await (const chunk of await openai.chat.completions.create({
  model: "t5",
  messages,
  max_tokens: 10,
  stream: true,
})) {
  out.chat_streamed += chunk.choices[0].delta.content ?? "";
}
out.sampled = [1, 2].map(() => null);
for (const i of [0, 1]) {
  const r = await openai.completions.create({
    model: "t5",
    prompt,
    max_tokens: 10,
    temperature: 0.9,
    top_p: 0.9,
    seed: 7,
  });
  out.sampled[i] = r.choices[0].text;
}
out.n_error = await failure(() =>
  openai.completions.create({ model: "t5", prompt, max_tokens: 10, n: 2 }),
);
out.too_long_error = await failure(() =>
  openai.completions.create({ model: "t5", prompt: "x".repeat(100), max_tokens: 10 }),
);
out.stream_error = await failure(async () => {
  const stream = await openai.completions.create({
    model: "t5",
    prompt,
    max_tokens: 5000,
    stream: true,
  });
  for await (const chunk of stream) void chunk;
});
// Leaving a stream early (the SDK aborts its request): the server cancels the generation.
const leaving = await openai.completions.create({
  model: "t5",
  prompt: "leaving early",
  max_tokens: 4096,
  min_tokens: 4096, // vLLM's extension: the stream runs its whole length unless cancelled
  stream: true,
});
for await (const chunk of leaving) {
  out.left_after = chunk.choices[0].text;
  break;
}
// Hugging Face's client on an endpoint URL posts OpenAI's /v1/completions, the URL as the model.
const hf = new InferenceClient().endpoint(base);
out.hf = (await hf.textGeneration({ inputs: prompt, parameters: { max_new_tokens: 10 } }))
  .generated_text;
console.log(JSON.stringify(out));
