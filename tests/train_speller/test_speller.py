"""Tests of tools/train_speller and of the shipped models/speller-t5 (Debian python3-torch,
python3-sentencepiece, python3-numpy; run with /usr/bin/python3):

    /usr/bin/python3 -m unittest discover -s tests/train_speller -v

The parity test needs the engine CLI; it is found at $SEQPIPE_GENERATE or
build/release/tools/seqpipe-generate, and the test is skipped when neither exists.
"""
import json
import os
import random
import subprocess
import sys
import tempfile
import unittest

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOOLS = os.path.join(ROOT, "tools", "train_speller")
sys.path.insert(0, TOOLS)
import confusion_data  # noqa: E402
import data  # noqa: E402
import noise  # noqa: E402
import safetensors_writer  # noqa: E402
from model import T5, relative_position_bucket  # noqa: E402

MODEL = os.path.join(ROOT, "models", "speller-t5")
TINY = dict(d_model=16, d_kv=4, num_heads=2, d_ff=24, num_layers=2, num_decoder_layers=1, vocab_size=30,
            relative_attention_num_buckets=32, relative_attention_max_distance=128)


def engine_path():
    path = os.environ.get("SEQPIPE_GENERATE") or os.path.join(ROOT, "build", "release", "tools", "seqpipe-generate")
    return path if os.path.exists(path) else None


class SafetensorsTest(unittest.TestCase):
    def test_round_trip_and_layout(self):
        tensors = {"b.weight": torch.randn(3, 5), "a": torch.arange(7, dtype=torch.float32)}
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "m.safetensors")
            safetensors_writer.write(path, tensors)
            with open(path, "rb") as f:
                raw = f.read()
            n = int.from_bytes(raw[:8], "little")
            header = json.loads(raw[8:8 + n])
            self.assertEqual((8 + n) % 8, 0)
            self.assertEqual(header["a"], {"dtype": "F32", "shape": [7], "data_offsets": [0, 28]})
            self.assertEqual(len(raw), 8 + n + 4 * (7 + 15))
            back = safetensors_writer.read(path)
            for name, t in tensors.items():
                self.assertTrue(torch.equal(back[name], t))


class ModelTest(unittest.TestCase):
    def test_hf_names(self):
        names = set(T5(TINY).hf_state())
        for name in ("shared.weight", "lm_head.weight", "encoder.final_layer_norm.weight",
                     "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight",
                     "encoder.block.1.layer.1.DenseReluDense.wi_0.weight",
                     "decoder.block.0.layer.1.EncDecAttention.k.weight",
                     "decoder.block.0.layer.2.DenseReluDense.wo.weight", "decoder.final_layer_norm.weight"):
            self.assertIn(name, names)
        self.assertNotIn("encoder.block.1.layer.0.SelfAttention.relative_attention_bias.weight", names)

    def test_buckets_match_hf_examples(self):
        rel = torch.tensor([-200, -20, -8, -1, 0, 1, 7, 8, 20, 200])
        # HF T5Attention._relative_position_bucket(rel, True/False, 32, 128), worked by hand, e.g.
        # causal rel -20: 16 + int(log(20 / 16) / log(128 / 16) * 16) = 17.
        self.assertEqual(relative_position_bucket(rel, True, 32, 128).tolist(),
                         [15, 10, 8, 1, 0, 17, 23, 24, 26, 31])
        self.assertEqual(relative_position_bucket(rel, False, 32, 128).tolist(),
                         [31, 17, 8, 1, 0, 0, 0, 0, 0, 0])

    def test_greedy_matches_step_by_step_argmax(self):
        torch.manual_seed(0)
        m = T5(TINY).eval()
        ids = torch.tensor([[5, 6, 7, 1], [8, 9, 1, 0]])
        mask = (ids != 0).long()
        mask[0, :] = 1
        out = m.greedy(ids, mask, 6)
        for b in range(2):
            seq = [0]
            for _ in range(out.shape[1] - 1):
                with torch.no_grad():
                    logits = m(ids[b:b + 1, :int(mask[b].sum())], mask[b:b + 1, :int(mask[b].sum())],
                               torch.tensor([seq]))
                seq.append(int(logits[0, -1].argmax()))
                if seq[-1] == 1:
                    break
            self.assertEqual(out[b, :len(seq)].tolist(), seq)


class NoiseTest(unittest.TestCase):
    def test_seeded_and_changes_words(self):
        words = "i can't believe the weather today".split()
        a = [noise.corrupt(words, random.Random(s), clean_share=0.0) for s in range(50)]
        b = [noise.corrupt(words, random.Random(s), clean_share=0.0) for s in range(50)]
        self.assertEqual(a, b)
        self.assertTrue(all(x != " ".join(words) for x in a))
        self.assertEqual(noise.corrupt(words, random.Random(1), clean_share=1.0), " ".join(words))

    def test_real_misspellings_replace_words_people_misspelled(self):
        with tempfile.NamedTemporaryFile("w", suffix=".tsv", delete=False) as f:
            f.write("misspelled\tcorrect\tsource\nBeleive\tbelieve\tx\nbeleeve\tbelieve\tx\n"
                    "a\tabove\tx\nwether\tweather\tx\nsame\tsame\tx\n")
        try:
            real = noise.RealMisspellings(f.name)
        finally:
            os.unlink(f.name)
        # lower-cased; a pair too far apart in length, or not a misspelling at all, is left out
        self.assertEqual(real.by_word, {"believe": ["beleive", "beleeve"], "weather": ["wether"]})
        words = "i believe the weather".split()
        outs = {noise.corrupt(words, random.Random(s), clean_share=0.0, word_rate=1.0, real=real, real_rate=1.0)
                for s in range(40)}
        self.assertTrue(all(o.split()[1] in ("beleive", "beleeve") and o.split()[3] == "wether" for o in outs
                            if len(o.split()) == 4))
        self.assertEqual({o.split()[1] for o in outs if len(o.split()) == 4}, {"beleive", "beleeve"})

    def test_a_real_pairs_line_without_a_tab_names_its_file_and_line(self):
        with tempfile.NamedTemporaryFile("w", suffix=".tsv", delete=False) as f:
            f.write("misspelled\tcorrect\nteh\tthe\nbroken line\n")
        try:
            with self.assertRaisesRegex(ValueError, r"\.tsv:3: want misspelled<TAB>correct"):
                noise.RealMisspellings(f.name)
        finally:
            os.unlink(f.name)


@unittest.skipUnless(os.path.exists(os.path.join(MODEL, "model.safetensors")), "models/speller-t5 is not there")
class RealWordErrorsTest(unittest.TestCase):
    def test_one_word_swapped_for_a_confusable_one(self):
        import eval as speller_eval

        class Corpus:
            heldout_sentences = [["i", "know", "their", "house", "is", "there", "by", "the", "road"],
                                 ["no", "confusable", "word", "here"]]
        errors = speller_eval.real_word_errors(Corpus(), random.Random(1), 50)
        self.assertEqual(len(errors), 50)
        groups = {w: g for g in speller_eval.REAL_WORD_CONFUSIONS for w in g}
        for clean, noisy, i in errors:
            self.assertTrue(3 <= len(clean) <= 8)
            self.assertEqual([k for k, (a, b) in enumerate(zip(clean, noisy)) if a != b], [i])
            self.assertIn(noisy[i], groups[clean[i]])
        self.assertEqual(errors, speller_eval.real_word_errors(Corpus(), random.Random(1), 50))  # seeded


class ChannelDataTest(unittest.TestCase):
    def test_edit_path_names_each_edit_from_word_to_typed(self):
        import channel_data
        self.assertEqual(channel_data.edits("spelling", "spelling"), (0, []))
        self.assertEqual(channel_data.edits("spelling", "speling"), (1, [("d", "l")]))
        self.assertEqual(channel_data.edits("believe", "beleive"), (1, [("t", "ie")]))
        self.assertEqual(channel_data.edits("separate", "seperate"), (1, [("s", "ae")]))
        self.assertEqual(channel_data.edits("the", "thee"), (1, [("i", "e")]))

    def test_tuners_mirror_of_the_noisy_channel_reads_the_shipped_counts(self):
        import rerank_tune
        channel = rerank_tune.Channel(MODEL)
        self.assertGreater(channel.log_count("the"), channel.log_count("thee"))
        self.assertEqual(channel.log_count("qzxv"), 0.0)
        self.assertEqual(channel.edit_cost("spelling", "spelling"), 0.0)
        # A common edit (a doubled letter typed once) costs less than a rare one.
        self.assertLess(channel.edit_cost("spelling", "speling"), channel.edit_cost("spelling", "spelqing"))


class ConfusionDataTest(unittest.TestCase):
    def test_sets_hold_the_evals_groups_and_the_context_picks_the_member(self):
        members = confusion_data.confusion_sets()
        for group in data.REAL_WORD_CONFUSIONS:
            for w in group:
                self.assertTrue(set(group) <= members[w], w)
        sentences = [["he", "is", "taller", "than", "me"]] * 3 + [["and", "then", "we", "left"]] * 5
        counts = confusion_data.count(sentences, members)
        self.assertEqual(counts["than"]["*"], 3)
        self.assertEqual(counts["than"]["PN:taller|me"], 3)
        self.assertNotIn("P:<s>", counts["then"])  # no context past the sentence
        scorer = confusion_data.Scorer(counts, members)
        self.assertEqual(scorer.correct(["taller", "then", "me"], 1.0), ["taller", "than", "me"])
        self.assertEqual(scorer.correct(["and", "than", "we"], 1.0), ["and", "then", "we"])
        self.assertEqual(scorer.correct(["taller", "then", "me"], 50.0), ["taller", "then", "me"])

    def test_shipped_counts_hold_every_set_and_only_contexts_seen_twice(self):
        with open(os.path.join(MODEL, "confusion_counts.tsv"), encoding="utf-8") as f:
            rows = [line.rstrip("\n").split("\t") for line in f]
        self.assertTrue(all(len(r) == 3 and r[2].isdigit() for r in rows))
        sets = {r[2] for r in rows if r[1] == "set"}
        self.assertEqual(len(sets), len(confusion_data.EVAL_CONFUSIONS + confusion_data.MORE_CONFUSIONS))
        self.assertTrue(all(int(r[2]) >= 2 for r in rows if r[1] not in ("set", "*")))


class ShippedModelTest(unittest.TestCase):
    def test_config_is_t5_v1_1(self):
        with open(os.path.join(MODEL, "config.json")) as f:
            c = json.load(f)
        self.assertEqual(c["model_type"], "t5")
        self.assertEqual(c["feed_forward_proj"], "gated-gelu")
        self.assertFalse(c["tie_word_embeddings"])
        self.assertEqual((c["pad_token_id"], c["eos_token_id"], c["decoder_start_token_id"]), (0, 1, 0))
        size = sum(os.path.getsize(os.path.join(MODEL, n)) for n in os.listdir(MODEL))
        self.assertLessEqual(size, 40 * 1024 * 1024)

    @unittest.skipUnless(engine_path(), "seqpipe-generate is not built")
    def test_engine_equals_pytorch_greedy_on_200_inputs(self):
        res = subprocess.run([sys.executable, os.path.join(TOOLS, "check_engine.py"), "--model", MODEL,
                              "--engine", engine_path(), "-n", "200"], capture_output=True, text=True)
        self.assertEqual(res.returncode, 0, res.stdout[-2000:] + res.stderr[-2000:])
        self.assertEqual(json.loads(res.stdout)["equal"], 200)


if __name__ == "__main__":
    unittest.main()
