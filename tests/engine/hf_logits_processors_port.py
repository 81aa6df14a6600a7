"""The expected rows of tests/engine/logits_processors_test.cc: a port of HF transformers'
processors (generation/logits_process.py: RepetitionPenaltyLogitsProcessor,
NoRepeatNGramLogitsProcessor, TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper) to
torch, run on the same rows. Run with Debian's python3 and torch:
/usr/bin/python3 tests/engine/hf_logits_processors_port.py
"""
import torch, math
def rep(input_ids, scores, penalty):
    score = torch.gather(scores, 1, input_ids)
    score = torch.where(score < 0, score * penalty, score / penalty)
    return scores.scatter(1, input_ids, score)
def ngrams(n, prev, cur_len):
    gen = prev.tolist(); d = {}
    for ng in zip(*[gen[i:] for i in range(n)]):
        d.setdefault(tuple(ng[:-1]), []).append(ng[-1])
    return d
def norepeat(input_ids, scores, n):
    cur_len = input_ids.shape[-1]
    scores = scores.clone()
    if cur_len + 1 < n: return scores
    for b in range(input_ids.shape[0]):
        d = ngrams(n, input_ids[b], cur_len)
        key = tuple(input_ids[b][cur_len + 1 - n:cur_len].tolist())
        for t in d.get(key, []): scores[b, t] = -float("inf")
    return scores
def topk(scores, k, keep=1):
    k = min(max(k, keep), scores.size(-1))
    rm = scores < torch.topk(scores, k)[0][..., -1, None]
    return scores.masked_fill(rm, -float("inf"))
def topp(scores, p, keep=1):
    sl, si = torch.sort(scores, descending=False)
    cp = sl.softmax(dim=-1).cumsum(dim=-1)
    rm = cp <= (1 - p)
    rm[..., -keep:] = 0
    rm = rm.scatter(1, si, rm)
    return scores.masked_fill(rm, -float("inf"))
s = torch.tensor([[2.0, -1.0, 0.5, 3.0, -2.0, 1.0, 0.0, -0.5]])
ids = torch.tensor([[0, 3, 1, 3, 5]])
print("rep1.5", rep(ids, s, 1.5).tolist())
h = torch.tensor([[0, 3, 1, 3, 5, 3, 1]])
print("norepeat2", norepeat(h, s, 2).tolist())
print("norepeat3", norepeat(h, s, 3).tolist())
print("norepeat1", norepeat(h, s, 1).tolist())
print("temp0.5", (s / 0.5).tolist())
print("topk3", topk(s, 3).tolist())
print("topk3keep5", topk(s, 3, 5).tolist())
print("topp0.8", topp(s, 0.8).tolist())
print("topp0.5", topp(s, 0.5).tolist())
print("topp0.01keep2", topp(s, 0.01, 2).tolist())
t = torch.tensor([[1.0, 1.0, 1.0, 0.5]])
print("topk2ties", topk(t, 2).tolist())
print("softmax", s.softmax(-1).tolist())
# order: rep -> norepeat -> temperature -> topk -> topp
x = rep(ids, s, 1.3); x = norepeat(ids, x, 2); x = x / 0.7; x = topk(x, 4); x = topp(x, 0.9)
print("chain", x.tolist())
print("chainprobs", x.softmax(-1).tolist())
