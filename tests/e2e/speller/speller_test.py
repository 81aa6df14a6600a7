"""End to end on the bundled model: `seqpipe up` serves models/speller-t5 with the model's own
settings (models/speller-t5/seqpipe.yaml: text handling, word lists, noisy channel, split_words),
and requests through the gateway socket come back corrected.

QuickstartTest is a newcomer's first `seqpipe up` in the checkout (config/pipeline.yaml as it is,
only sockets and ports moved) with requests as `seqpipe send` makes them (greedy): "teh speling"
comes back "the spelling", case, digits, e-mail addresses and emoji are kept, and a request of
several texts, one a 60-word paragraph, is answered whole.

SpellerPipelineTest turns the noisy channel, the confusion sets and split_words off to check the
model and its known-words guard alone: texts as users type them come back with only their
misspellings changed (capitals, digits, punctuation, URLs, code, non-Latin scripts, emoji and
whitespace kept: model.lower_case_words), names and terms it does not know kept (NDA, Kowalski,
and nginx from postprocessor.user_words), a stream whose changed words come at its end;
known misspellings are corrected ("teh speling" -> "the spelling"); replies equal seqpipe-generate's greedy output where the guard has nothing to do, and
keep the known input word where the model changed one ("wether", a word, stays), unless all 8 beam
hypotheses change it (postprocessor.known_word_votes); a burst of concurrent requests from several
clients is answered completely, each with its own correction. ServedSpellerTest serves the speller
as scripts/run.sh does (config/demo.yaml: int8, the model's settings as they are, 2 beams): the
same texts come back the same, and a real-word error whose context decides is fixed; with
gateway.split_words, a 300-word text comes back with its misspellings at the start, middle and end
corrected and every other byte kept, and a text near gateway.max_text_bytes is no too_long.

Environment: SEQPIPE_BIN (seqpipe), SEQPIPE_GENERATE, SEQPIPE_MKMODEL; PYTHONPATH has clients/python.
"""
import json
import os
import subprocess
import sys
import threading
import unittest

from seqpipe_client import Client, SeqpipeError

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from harness import PipelineTestCase  # noqa: E402

import yaml  # noqa: E402  (python3-yaml)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
MODEL = os.path.join(ROOT, "models", "speller-t5")
with open(os.path.join(MODEL, "seqpipe.yaml")) as f:
    MODEL_SETTINGS = yaml.safe_load(f)
KNOWN_WORDS = MODEL_SETTINGS["postprocessor"]["known_words"]
GENERATE = os.environ["SEQPIPE_GENERATE"]
MAX_NEW = 64
# Inputs whose correction the shipped model gets right (a change of model that breaks these is
# worth a look); the MODEL_CARD has the figures on thousands of inputs.
CORRECTED = {"teh speling": "the spelling", "recieve the pakage tomorow": "receive the package tomorrow",
             "i cant beleive it": "i can't believe it", "the quick brown fox": "the quick brown fox"}

# Text handling as served (8 beams, as scripts/run.sh sends): (input, reply). The model sees the
# plain words lower-cased; everything else is carried around it and put back.
TEXTS = [
    ("Teh Speling", "The Spelling"),
    ("recieve teh pakage at 5pm", "receive the package at 5pm"),
    ("TEH SPELING", "THE SPELLING"),
    ("I cant beleive it", "I can't believe it"),
    ("Definately seperate", "Definitely separate"),
    ("My iPhone is borken", "My iPhone is broken"),
    ("Call me at 555-1234 tomorow", "Call me at 555-1234 tomorrow"),
    ("The meeting is at 10:30 tomorow", "The meeting is at 10:30 tomorrow"),
    ("Visit https://example.com/teh-page for detials", "Visit https://example.com/teh-page for details"),
    ("Mail bob@example.com about teh plan", "Mail bob@example.com about the plan"),
    ("Run `git comit` in teh shell", "Run `git comit` in the shell"),
    ("The file config.yaml is mising", "The file config.yaml is missing"),
    ("Use std::vector in teh code", "Use std::vector in the code"),
    ("héllo wörld 😀", "héllo wörld 😀"),
    ("Привет мир", "Привет мир"),
    ("日本語のテキスト", "日本語のテキスト"),
    ("I ❤️ teh speling", "I ❤️ the spelling"),
    ("Teh price is $5.99 (incl. tax)", "The price is $5.99 (incl. tax)"),
    ("Wow!!! Teh speling is good!!!", "Wow!!! The spelling is good!!!"),
    ("\"Teh speling,\" she said.", "\"The spelling,\" she said."),
    ("Teh  speling   is   diferent", "The  spelling   is   different"),
    ("Teh\tspeling", "The\tspelling"),
    ("teh", "the"),
    ("Teh.", "The."),
    ("THE QUICK BROWN FOX", "THE QUICK BROWN FOX"),
    ("The quick brown fox", "The quick brown fox"),
    ("NASA sent a rocket", "NASA sent a rocket"),
    ("I live in Paris", "I live in Paris"),
    ("McDonald's is clsoed", "McDonald's is closed"),
    ("Dont come at 3 o'clock", "Don't come at 3 o'clock"),
    ("Teh 2nd time", "The 2nd time"),
    ("v1.2.3 is teh latest", "v1.2.3 is the latest"),
    ("#hashtag teh speling", "#hashtag the spelling"),
    ("@mention teh speling", "@mention the spelling"),
    ("Teh speling; teh grammer.", "The spelling; the grammar."),
    ("Wait... teh speling?", "Wait... the spelling?"),
    ("(teh speling)", "(the spelling)"),
    ("[teh] {speling}", "[the] {spelling}"),
    ("teh-speling", "teh-speling"),
    ("C++ is a langauge", "C++ is a language"),
    ("100% of teh time", "100% of the time"),
    ("Teh café is clsoed", "The café is closed"),
    ("naïve teh speling", "naïve the spelling"),
    ("Recieve teh pakage", "Receive the package"),
    ("Seperate teh files", "Separate the files"),
    ("Acommodation is expensive", "Accommodation is expensive"),
    # Names and terms the model does not know are kept: all-caps words, capitalised words inside
    # a sentence (the first word of one is corrected like any other).
    ("Sign teh NDA today", "Sign the NDA today"),
    ("Teh JSON file is mising", "The JSON file is missing"),
    ("Use teh SDK and teh CLI", "Use the SDK and the CLI"),
    ("I met Kowalski and Siobhan", "I met Kowalski and Siobhan"),
    ("Ask Kowalski. Teh plan is clear", "Ask Kowalski. The plan is clear"),
]
# postprocessor.user_words: the user's terms, kept in any case (SpellerPipelineTest sets it).
USER_WORDS = os.path.join(HERE, "user_words.txt")

# 301 words in 8 lines, with a double space and a tab between sentences; misspelled near the start
# ("recieve"), two thirds in ("diferent") and in the last sentence ("beleive").
LONG_TEXT = (
    'Last week we decided to recieve the new furniture at home instead of at the office.  The '
    'delivery company said the truck would arrive early in the morning, so we woke up before '
    'sunrise and made coffee.\n'
    'The driver called to say he was running late because of heavy traffic on the bridge. We '
    'waited in the kitchen and talked about the plans for the garden, the fence that needs '
    'painting, and the old shed that nobody uses anymore.\n'
    'When the truck finally arrived, two men carried a large table, six chairs and a tall '
    'bookshelf into the living room. They were polite and careful, and they did not scratch '
    'the walls or the floor.\tAfter they left, we noticed that one chair had a small crack in '
    'its leg.\n'
    'We wrote an email to the store and attached a photo of the damage. The store answered '
    'within an hour and promised to send a replacement chair next week at no extra cost.\n'
    'In the afternoon we moved the books from the boxes to the new shelf. It took much longer '
    'than we expected, because every book reminded someone of a story, a trip or a friend.\n'
    'By the evening the room looked completely diferent, warm and bright, with the table by '
    'the window and the chairs around it.\n'
    'We invited our neighbours for dinner on Saturday to celebrate the new room. They brought '
    'a bottle of wine and a cake, and we talked until midnight about travel, music and the '
    'weather.\n'
    'Everyone agreed that the table was the best part of the room, although the bookshelf was '
    'a close second. The next morning the replacement chair arrived, and the room was finally '
    'complete. I hope the new chair will last as long as the others, and I beleive it will.\n'
)
LONG_TEXT_CORRECTED = (LONG_TEXT.replace("recieve", "receive").replace("diferent", "different")
                       .replace("beleive", "believe"))


def generate_text(text):
    out = subprocess.run([GENERATE, "--model", MODEL, "--text", text, "--max-new-tokens", str(MAX_NEW),
                          "--threads", "1", "--json"], check=True, capture_output=True, text=True, timeout=60)
    return json.loads(out.stdout)["text"]


class SpellerPipelineTest(PipelineTestCase):
    PREFIX = "seqpipe-e2e-speller-"
    MODEL_DIR = MODEL
    CLIENT_TIMEOUT_MS = 30000

    @classmethod
    def settings(cls):
        # The model's seqpipe.yaml gives lower_case_words, the word lists and Aspell; the rest off.
        return ["gateway.metrics_port=0", "batcher.metrics_port=0", "gateway.default_timeout_ms=30000",
                "postprocessor.known_word_votes=8", "gateway.split_words=0",
                "postprocessor.word_counts=", "postprocessor.edit_counts=",
                "postprocessor.confusion_counts=", f"postprocessor.user_words={USER_WORDS}"]

    def test_texts_keep_everything_but_their_misspellings(self):
        self.assertGreaterEqual(len(TEXTS), 40)
        for text, want in TEXTS:
            self.assertEqual(self.client.generate(text, max_new_tokens=MAX_NEW, num_beams=8)["text"], want, text)

    def test_a_stream_of_changed_words_only_sends_them_at_its_end(self):
        # Both words changed and nothing the model repeats after them: neither is final before
        # the end (tests/e2e/stream_examples streams word by word).
        parts = list(self.client.stream("Teh speling", max_new_tokens=MAX_NEW))
        self.assertEqual([p["status"] for p in parts], ["partial", "ok"])
        self.assertEqual(parts[0]["text"], "The spelling")
        self.assertEqual(parts[1]["text"], "The spelling")

    def test_the_users_words_are_kept_in_any_case(self):
        for text in ["restart nginx now", "Nginx is up"]:
            self.assertEqual(self.client.generate(text, max_new_tokens=MAX_NEW, num_beams=8)["text"], text)

    def test_a_text_over_the_token_limit_is_answered_with_its_tail_as_it_was(self):
        # 200 words, over model.max_input_tokens (128): the model sees the words that fit, the
        # rest comes back as it was; no too_long.
        text = " ".join(f"Teh speling {i} is wierd." for i in range(50))
        reply = self.client.generate(text, max_new_tokens=MAX_NEW, num_beams=8)["text"]
        self.assertEqual(len(reply.split()), len(text.split()))
        self.assertEqual(reply.split()[-40:], text.split()[-40:])
        self.assertEqual([w for w in reply.split() if w.isdigit()], [str(i) for i in range(50)])

    def test_corrects_known_misspellings(self):
        for text, want in CORRECTED.items():
            self.assertEqual(self.client.generate(text, max_new_tokens=MAX_NEW)["text"], want, text)

    def test_replies_equal_the_engine_unless_a_known_word_was_changed(self):
        for text in ["definately seperate", "acommodation", "a", "i cant beleive"]:
            self.assertEqual(self.client.generate(text, max_new_tokens=MAX_NEW)["text"], generate_text(text), text)
        # The model turns "wether" (a word) into "weather"; the guard keeps it.
        self.assertEqual(generate_text("teh wether"), "the weather")
        self.assertEqual(self.client.generate("teh wether", max_new_tokens=MAX_NEW)["text"], "the wether")

    def test_a_known_word_all_beams_change_is_changed(self):
        # "wether" is a word: greedy keeps it; all 8 beam hypotheses change it here.
        self.assertEqual(self.client.generate("I don't know wether to go", max_new_tokens=MAX_NEW)["text"],
                         "I don't know wether to go")
        reply = self.client.generate("I don't know wether to go", max_new_tokens=MAX_NEW, num_beams=8)
        self.assertEqual(reply["text"], "I don't know whether to go")

    def test_beam_search_takes_the_best_hypothesis_made_of_known_words(self):
        # Greedy (and the best beam) keep "admissable", no word; a later beam hypothesis is a
        # word, and the postprocessor takes it.
        self.assertEqual(generate_text("admissable"), "admissable")
        reply = self.client.generate("admissable", max_new_tokens=MAX_NEW, num_beams=8)
        self.assertEqual(reply["text"], "admissible")

    def test_concurrent_clients_each_get_their_correction(self):
        items = list(CORRECTED.items()) * 10
        got, errors = [None] * len(items), []

        def run(worker):
            client = Client(self.pipeline.endpoint, timeout_ms=30000)
            try:
                for i in range(worker, len(items), 4):
                    got[i] = client.generate(items[i][0], max_new_tokens=MAX_NEW)["text"]
            except SeqpipeError as e:
                errors.append(str(e))
            finally:
                client.close()

        threads = [threading.Thread(target=run, args=(w,)) for w in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        self.assertEqual(errors, [])
        self.assertEqual(got, [want for _, want in items])


class ServedSpellerTest(PipelineTestCase):
    """The speller as scripts/run.sh serves it: config/demo.yaml (int8) and the model's settings
    (its seqpipe.yaml) as they are, with 2 beams as run.sh sends."""
    PREFIX = "seqpipe-e2e-served-speller-"
    MODEL_DIR = MODEL
    CONFIG = os.path.join(ROOT, "config", "demo.yaml")
    CLIENT_TIMEOUT_MS = 30000

    @classmethod
    def settings(cls):
        return ["gateway.metrics_port=0", "batcher.metrics_port=0", "gateway.default_timeout_ms=30000"]

    def correct(self, text, beams=2):
        return self.client.generate(text, max_new_tokens=MAX_NEW, num_beams=beams)["text"]

    def test_texts_keep_everything_but_their_misspellings(self):
        for text, want in TEXTS + list(CORRECTED.items()):
            self.assertEqual(self.correct(text), want, text)

    def test_a_real_word_error_its_context_decides_is_fixed(self):
        # "then" and "lose" are words the lists know; the confusion sets' context counts say "than"
        # after "taller", "lose" before "weight", greedy or not. "its tail" stays.
        for beams in (1, 2):
            self.assertEqual(self.correct("He is taller then me", beams), "He is taller than me")
            self.assertEqual(self.correct("We need to loose weight", beams), "We need to lose weight")
            self.assertEqual(self.correct("Its a nice day and its tail is long", beams),
                             "It's a nice day and its tail is long")

    def test_the_noisy_channel_picks_a_commoner_word_than_aspells_first(self):
        # Aspell's first suggestion for "persue" is "peruse"; the model keeps "persue".
        self.assertEqual(self.correct("I will persue it"), "I will pursue it")

    def test_a_long_text_is_corrected_in_pieces_and_joined_byte_for_byte(self):
        self.assertGreaterEqual(len(LONG_TEXT.split()), 300)
        self.assertEqual(self.correct(LONG_TEXT), LONG_TEXT_CORRECTED)

    def test_a_text_near_the_gateways_size_limit_is_not_too_long(self):
        # ~3,500 bytes (gateway.max_text_bytes is 4096), ~600 words in ~80 pieces: one text, one
        # reply, as a batch of two with a short text.
        text = LONG_TEXT + "\n" + LONG_TEXT
        self.assertLess(len(text.encode()), 4096)
        reply = self.client.generate([text, "teh speling"], max_new_tokens=MAX_NEW, num_beams=2)
        self.assertEqual(reply["texts"], [LONG_TEXT_CORRECTED + "\n" + LONG_TEXT_CORRECTED, "the spelling"])


# A paragraph of 60 words, over the 8-word pieces the speller was trained on and (whole) over
# model.max_input_tokens.
PARAGRAPH = " ".join(LONG_TEXT.split()[:60])


class QuickstartTest(PipelineTestCase):
    """Plain `seqpipe up` in the checkout, as the README's quickstart runs it: config/pipeline.yaml
    and models/speller-t5 with its seqpipe.yaml; only the sockets and ports are moved so the test
    does not collide with a pipeline already running here."""
    PREFIX = "seqpipe-e2e-quickstart-"
    CHECKOUT = ROOT
    CLIENT_TIMEOUT_MS = 30000

    @classmethod
    def settings(cls):
        return [f"{stage}.metrics_port=0" for stage in
                ("gateway", "batcher", "tokenizer", "encoder", "decoder", "postprocessor")]

    def test_the_default_request_corrects_and_keeps_the_rest(self):
        for text, want in [("teh speling", "the spelling"), ("Teh Speling", "The Spelling"),
                           ("recieve teh pakage at 5pm", "receive the package at 5pm"),
                           ("Mail bob@example.com about teh plan", "Mail bob@example.com about the plan"),
                           ("I ❤️ teh speling", "I ❤️ the spelling")]:
            self.assertEqual(self.client.generate(text)["text"], want, text)

    def test_a_paragraph_is_answered_with_the_other_texts(self):
        self.assertEqual(len(PARAGRAPH.split()), 60)
        reply = self.client.generate([PARAGRAPH, "teh speling"])
        self.assertEqual(reply["texts"], [PARAGRAPH.replace("recieve", "receive"), "the spelling"])


if __name__ == "__main__":
    unittest.main()
