#!/usr/bin/env python3
"""The seed workload through HF transformers + PyTorch, for engine_bench's figures side by side.

    python3 bench/torch_t5.py --model DIR [--device cuda] [--dtypes float32,bfloat16] [--runs N]

DIR: a HuggingFace T5 directory (config.json + model.safetensors, e.g. `seqpipe-mkmodel --preset
t5-small --seed 0 --out DIR`). The workload is engine_bench's: 9 input tokens (eos included),
exactly 11 new tokens (min_new_tokens = max_new_tokens = 11), greedy, KV cache on; batch 1 and
64. Prints one JSON object: per dtype, the median and p99 wall time of a batch-1 generate() and
the sequences/s of a batch-64 one, after warm-up, synchronised with the device.
Exit status 0; 3 when torch or transformers is missing (nothing measured: the JSON says why).
"""
import argparse
import json
import statistics
import sys
import time

NEW_TOKENS = 11
INPUT_TOKENS = 9


def load(model_dir, dtype, device):
    from transformers import T5ForConditionalGeneration
    try:  # transformers 5 names it dtype; 4.x torch_dtype
        model = T5ForConditionalGeneration.from_pretrained(model_dir, dtype=dtype)
    except TypeError:
        model = T5ForConditionalGeneration.from_pretrained(model_dir, torch_dtype=dtype)
    return model.to(device).eval()


def timed_generate(torch, model, input_ids, runs, warmup):
    kwargs = dict(max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, num_beams=1,
                  do_sample=False, use_cache=True)
    attention_mask = torch.ones_like(input_ids)
    times = []
    with torch.inference_mode():
        for i in range(warmup + runs):
            if input_ids.is_cuda:
                torch.cuda.synchronize()
            start = time.perf_counter()
            out = model.generate(input_ids=input_ids, attention_mask=attention_mask, **kwargs)
            if input_ids.is_cuda:
                torch.cuda.synchronize()
            if i >= warmup:
                times.append((time.perf_counter() - start) * 1000.0)
    new = out.shape[1] - 1  # the decoder start token is the first column
    if new != NEW_TOKENS:
        raise RuntimeError(f"generate() made {new} new tokens, not {NEW_TOKENS}")
    times.sort()
    return {"median_ms": round(statistics.median(times), 3),
            "p99_ms": round(times[min(len(times) - 1, int(0.99 * len(times)))], 3),
            "runs": runs}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", required=True)
    p.add_argument("--device", default="cuda")
    p.add_argument("--dtypes", default="float32,bfloat16")
    p.add_argument("--runs", type=int, default=30, help="timed batch-1 runs (batch 64: a third)")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    try:
        import torch
        import transformers
    except ImportError as e:
        print(json.dumps({"skipped": f"{e}"}))
        return 3
    if a.device.startswith("cuda") and not torch.cuda.is_available():
        print(json.dumps({"skipped": "torch sees no CUDA device"}))
        return 3

    result = {"torch": torch.__version__, "transformers": transformers.__version__,
              "device": a.device, "input_tokens": INPUT_TOKENS, "new_tokens": NEW_TOKENS,
              "gpu": torch.cuda.get_device_name(0) if a.device.startswith("cuda") else None,
              "dtypes": {}}
    for name in a.dtypes.split(","):
        model = load(a.model, getattr(torch, name), a.device)
        vocab = model.config.vocab_size
        gen = torch.Generator().manual_seed(a.seed)

        def inputs(batch):
            # Random ids past the special ones (pad 0, eos 1, unk 2), eos last, as engine_bench's.
            ids = torch.randint(3, vocab, (batch, INPUT_TOKENS), generator=gen)
            ids[:, -1] = 1
            return ids.to(a.device)

        b1 = timed_generate(torch, model, inputs(1), a.runs, a.warmup)
        b64 = timed_generate(torch, model, inputs(64), max(5, a.runs // 3), max(2, a.warmup // 2))
        b64["sequences_per_s"] = round(64 / (b64["median_ms"] / 1000.0), 1)
        result["dtypes"][name] = {"batch1": b1, "batch64": b64}
        del model
        if a.device.startswith("cuda"):
            torch.cuda.empty_cache()
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
