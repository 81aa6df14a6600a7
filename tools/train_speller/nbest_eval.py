"""What beam search's n-best list plus a word-list pick would give on real misspellings: for each
misspelled word, PyTorch beam search (no cache; HF-like beams, finished hypotheses ranked by their
sum of log-probs / length) returns K hypotheses; the pick is the first whose words the word lists
all know (else the best). The pipeline does the same when postprocessor.known_words is set and a
request asks for num_beams > 1 (models/speller-t5/seqpipe.yaml, scripts/run.sh): this measures it on the model
alone, without running a pipeline.

    /usr/bin/python3 tools/train_speller/nbest_eval.py --model models/speller-t5 \\
        --tsv ../shared/spelling/dev_words.tsv --beams 8 \\
        --known /usr/share/dict/american-english-large:/usr/share/dict/british-english-large
"""
import argparse
import os
import sys

import sentencepiece as spm
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from eval import read_tsv, report  # noqa: E402
from model import load_dir  # noqa: E402
from train import MAX_LEN  # noqa: E402


@torch.no_grad()
def nbest(model, sp, texts, beams, max_new=24):
    """Each text's `beams` hypotheses, best first (a simplified beam search: every beam runs to eos
    or max_new; finished beams carry on with pad at no cost)."""
    src = [sp.encode(t)[:MAX_LEN - 1] + [1] for t in texts]
    width = max(map(len, src))
    ids = torch.tensor([s + [0] * (width - len(s)) for s in src])
    mask = torch.tensor([[1] * len(s) + [0] * (width - len(s)) for s in src], dtype=torch.bool)
    n = len(texts)
    enc = model.encode(ids, mask).repeat_interleave(beams, 0)
    mask = mask.repeat_interleave(beams, 0)
    seqs = torch.zeros((n * beams, 1), dtype=torch.long)
    scores = torch.full((n, beams), -1e9)
    scores[:, 0] = 0
    done = torch.zeros(n * beams, dtype=torch.bool)
    for _ in range(max_new):
        logp = torch.log_softmax(model.decode(seqs, enc, mask)[:, -1].float(), -1)
        vocab = logp.shape[1]
        logp[done] = -1e9
        logp[done, 0] = 0
        top, idx = (scores.view(-1, 1) + logp).view(n, beams * vocab).topk(beams, -1)
        parent = (torch.arange(n)[:, None] * beams + idx // vocab).view(-1)
        seqs = torch.cat([seqs[parent], (idx % vocab).view(-1, 1)], 1)
        done = done[parent] | ((idx % vocab).view(-1) == 1)
        scores = top
        if done.all():
            break
    lengths = ((seqs[:, 1:] != 0).sum(1)).clamp(min=1).view(n, beams).float()
    ranked = (scores / lengths).argsort(-1, descending=True)
    out = []
    for b in range(n):
        hyps = []
        for k in ranked[b].tolist():
            row = seqs[b * beams + k, 1:].tolist()
            row = row[:row.index(1)] if 1 in row else row
            hyps.append(sp.decode([t for t in row if t > 2]))
        out.append(hyps)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--tsv", required=True, help="misspelled<TAB>correct")
    ap.add_argument("--known", required=True, help="word lists, paths separated by ':'")
    ap.add_argument("--beams", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", help="write the figures here")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    model, _ = load_dir(args.model)
    model.eval()
    sp = spm.SentencePieceProcessor(model_file=os.path.join(args.model, "spiece.model"))
    known = set()
    for path in args.known.split(":"):
        with open(path, encoding="utf-8", errors="ignore") as f:
            known |= {line.strip().lower() for line in f if line.strip()}
    pairs = read_tsv(args.tsv)
    hyps = []
    for i in range(0, len(pairs), 256):
        hyps += nbest(model, sp, [m for m, _ in pairs[i:i + 256]], args.beams)

    def pick(h):
        return next((x for x in h if x and all(w in known for w in x.split())), h[0])

    figures = {"model": args.model, "tsv_pairs": len(pairs), "beams": args.beams,
               "top1_best_hypothesis": sum(h[0] == c for h, (_, c) in zip(hyps, pairs)) / len(pairs),
               "correct_in_nbest": sum(c in h for h, (_, c) in zip(hyps, pairs)) / len(pairs),
               "top1_known_words_pick": sum(pick(h) == c for h, (_, c) in zip(hyps, pairs)) / len(pairs)}
    report(figures, args.json)


if __name__ == "__main__":
    main()
