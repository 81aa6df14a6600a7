"""seqpipe-bench against a real pipeline (`seqpipe up`, tiny random model, ipc:// in a temp dir):
closed loop, concurrency sweep, open loop, phases and a file of inputs; the JSON and CSV reports
must add up (every request counted once, windows summing to the run, percentiles ordered, stage
times within the latency) with no errors. Bad arguments exit 2 naming the problem; no gateway
exits 1. `plot` writes a PNG; `sweep` starts its own pipelines over a two-value grid, two rounds.

Environment: SEQPIPE_BENCH, SEQPIPE_BIN, SEQPIPE_MKMODEL.
"""
import csv
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "e2e"))
from harness import Pipeline  # noqa: E402

BENCH = os.environ["SEQPIPE_BENCH"]
PERCENTILES = ["p50", "p90", "p95", "p99", "p99.9", "max"]


def bench(*args, timeout=120):
    return subprocess.run([BENCH, *args], capture_output=True, text=True, timeout=timeout)


class SeqpipeBenchTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.pipeline = Pipeline("seqpipe-bench-", [
            "gateway.metrics_port=0", "batcher.metrics_port=0", "tokenizer.metrics_port=0",
            "encoder.metrics_port=0", "decoder.metrics_port=0", "postprocessor.metrics_port=0",
            "tokenizer.replicas=1", "encoder.replicas=1", "decoder.replicas=1", "postprocessor.replicas=1",
            "batcher.max_queue_delay_us=1000"])
        cls.out = tempfile.mkdtemp(prefix="seqpipe-bench-out-")
        deadline = time.monotonic() + 60
        while True:  # ready when a one-request run goes through (the bench's own probe)
            r = bench("--endpoint", cls.pipeline.endpoint, "--concurrency", "1", "--requests", "1",
                      "--timeout-ms", "2000")
            if r.returncode == 0:
                break
            if time.monotonic() > deadline or not cls.pipeline.alive():
                cls.tearDownClass()
                raise RuntimeError("pipeline did not come up: " + r.stderr)

    @classmethod
    def tearDownClass(cls):
        cls.pipeline.close()
        shutil.rmtree(cls.out, ignore_errors=True)

    def run_bench(self, name, *args):
        json_path, csv_path = os.path.join(self.out, name + ".json"), os.path.join(self.out, name + ".csv")
        r = bench("--endpoint", self.pipeline.endpoint, "--max-new-tokens", "8", "--json", json_path,
                  "--csv", csv_path, *args)
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(json_path) as f:
            report = json.load(f)
        with open(csv_path) as f:
            rows = list(csv.DictReader(f))
        self.check_report(report, rows)
        return report, rows, r.stdout

    def check_summary(self, s):
        self.assertEqual(s["ok"] + s["errors"], s["requests"])
        self.assertEqual(sum(s["errors_by_code"].values()), s["errors"])
        lat = s["latency_us"]
        self.assertEqual(lat["count"], s["ok"])
        if s["ok"] == 0:
            return
        values = [lat[p] for p in PERCENTILES]
        self.assertEqual(values, sorted(values), lat)
        self.assertGreater(lat["p50"], 0)
        self.assertLessEqual(lat["mean"], lat["max"])
        st = s["stages_mean_us"]
        stages = sum(st[k] for k in ("queue", "tokenize", "batch_wait", "encode", "decode", "postprocess"))
        self.assertGreater(st["decode"], 0)
        self.assertLessEqual(stages, st["server_total"] + 1)  # the replies' stages fit in their total
        self.assertLessEqual(st["server_total"], lat["mean"])  # which fits in the client's latency
        self.assertAlmostEqual(stages + st["client_send"] + st["overhead"], lat["mean"], delta=1)

    def check_report(self, report, rows):
        for s in report["steps"] + report["windows"] + [report["overall"]]:
            self.check_summary(s)
        overall = report["overall"]
        self.assertEqual(sum(s["requests"] for s in report["steps"]), overall["requests"])
        if report["windows"]:
            self.assertEqual(sum(w["requests"] for w in report["windows"]), overall["requests"])
        self.assertEqual(len(rows), len(report["steps"]))
        for row, step in zip(rows, report["steps"]):
            self.assertEqual(int(row["Requests"]), step["requests"])
            self.assertEqual(int(row["Errors"]), step["errors"])
            self.assertAlmostEqual(float(row["Inferences/Second"]), step["throughput_per_s"], delta=0.01)
            lat = [float(row[c]) for c in ("p50 latency", "p90 latency", "p95 latency", "p99 latency", "p99.9 latency")]
            self.assertEqual(lat, sorted(lat))
            self.assertAlmostEqual(float(row["p99 latency"]), step["latency_us"]["p99"], delta=1)

    def test_closed_loop(self):
        report, rows, stdout = self.run_bench("closed", "--concurrency", "4", "--requests", "300", "--window-s", "0.5")
        overall = report["overall"]
        self.assertEqual(overall["requests"], 300)
        self.assertEqual(overall["errors"], 0, overall["errors_by_code"])
        self.assertEqual(rows[0]["Concurrency"], "4")
        self.assertGreater(overall["throughput_per_s"], 0)
        self.assertIn("concurrency 4", stdout)
        self.assertIn("p99.9 ms", stdout)

    def test_concurrency_sweep_doubles(self):
        report, rows, _ = self.run_bench("range", "--concurrency-range", "1:4", "--requests", "60", "--min-gain", "0",
                                         "--slo-p99-ms", "10000")
        levels = [s["concurrency"] for s in report["steps"]]
        self.assertEqual(levels, [1, 2, 4][:len(levels)])
        self.assertEqual(report["overall"]["errors"], 0)
        self.assertEqual(report["overall"]["requests"], 60 * len(levels))
        best = report["slo"]["best_step"]  # a 10 s SLO: every level meets it, the fastest wins
        self.assertEqual(report["steps"][best]["throughput_per_s"], max(s["throughput_per_s"] for s in report["steps"]))

    def test_open_loop_holds_the_rate(self):
        report, rows, _ = self.run_bench("open", "--request-rate", "50", "--distribution", "poisson",
                                         "--duration", "2", "--seed", "7")
        step = report["steps"][0]
        self.assertEqual(step["request_rate_per_s"], 50)
        self.assertEqual(step["errors"], 0, step["errors_by_code"])
        self.assertTrue(60 <= step["requests"] <= 140, step["requests"])  # 100 expected
        self.assertEqual(rows[0]["Concurrency"], "0")
        self.assertEqual(float(rows[0]["Request Rate"]), 50)

    def test_phases_and_input_file(self):
        inputs = os.path.join(self.out, "inputs.txt")
        with open(inputs, "w") as f:
            f.write("teh speling\n\nhello world\ni cant beleive it\n")
        report, _, _ = self.run_bench("phases", "--input", inputs,
                                      "--phases", "users=2,requests=40;users=4,spawn=20,requests=40;rate=40,requests=20")
        self.assertEqual([s["requests"] for s in report["steps"]], [40, 40, 20])
        self.assertEqual(report["overall"]["errors"], 0)
        self.assertEqual(report["settings"]["input"], inputs)

    def test_interrupt_still_reports(self):
        json_path = os.path.join(self.out, "interrupted.json")
        proc = subprocess.Popen([BENCH, "--endpoint", self.pipeline.endpoint, "--concurrency", "2", "--duration", "60",
                                 "--max-new-tokens", "8", "--json", json_path],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(1.5)
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=30)
        self.assertEqual(proc.returncode, 130, stderr)
        self.assertIn("interrupted", stderr)
        with open(json_path) as f:
            report = json.load(f)
        self.check_summary(report["overall"])
        self.assertGreater(report["overall"]["ok"], 0)
        self.assertEqual(report["overall"]["errors"], 0)  # replies in flight were awaited

    def test_bad_arguments(self):
        cases = [
            ([], "give the load"),
            (["--concurrency", "0"], "--concurrency must be >= 1"),
            (["--concurrency", "two"], "--concurrency needs an integer"),
            (["--concurrency", "2", "--request-rate", "5"], "only one of"),
            (["--concurrency-range", "8:2"], "--concurrency-range needs 1 <= FROM <= TO"),
            (["--request-rate", "10", "--distribution", "uniform"], "--distribution must be constant or poisson"),
            (["--phases", "users=2,spawn=1"], "phase 1: give duration=S or requests=N"),
            (["--phases", "users=2,duration=1;speed=3,duration=1"], "phase 2: unknown key 'speed'"),
            (["--concurrency", "2", "--frobnicate"], "unknown option '--frobnicate'"),
            (["--concurrency", "2", "--input", "/nonexistent/inputs.txt"], "no such file"),
            (["plot", "only.csv"], "plot needs"),
            (["sweep", "--concurrency-range", "1:2"], "sweep needs --model"),
            (["sweep", "--model", "/nonexistent"], "no config.json"),
        ]
        for args, message in cases:
            r = bench(*args)
            self.assertEqual(r.returncode, 2, (args, r.stderr))
            self.assertIn(message, r.stderr, args)
        r = bench("--endpoint", "ipc://" + os.path.join(self.out, "nobody.sock"), "--concurrency", "1",
                  "--timeout-ms", "200")
        self.assertEqual(r.returncode, 1)
        self.assertIn("no answer from the gateway", r.stderr)
        r = bench("--help")
        self.assertEqual(r.returncode, 0)
        for flag in ("--concurrency-range", "--request-rate", "--phases", "--slo-p99-ms", "--csv", "sweep", "plot"):
            self.assertIn(flag, r.stdout)

    def test_plot_writes_a_png(self):
        if shutil.which("gnuplot") is None:
            self.skipTest("gnuplot is not installed (Debian package gnuplot-nox, scripts/install-deps.sh)")
        _, _, _ = self.run_bench("forplot", "--concurrency-range", "1:2", "--requests", "40", "--min-gain", "0")
        png = os.path.join(self.out, "plot.png")
        r = bench("plot", os.path.join(self.out, "forplot.csv"), png)
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(png, "rb") as f:
            self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")

    def test_sweep_ranks_configurations(self):
        csv_path, best_path = os.path.join(self.out, "sweep.csv"), os.path.join(self.out, "best.yaml")
        base_path = os.path.join(self.out, "base.yaml")
        with open(base_path, "w") as f:
            f.write("batcher:\n  max_queue_size: 512\ndecoder:\n  num_slots: 16\n")
        r = bench("sweep", "--model", self.pipeline.model, "--grid", "batcher.max_batch_size=1,4",
                  "--config", base_path, "--set", "decoder.num_slots=24",
                  "--set", "tokenizer.replicas=1", "--set", "encoder.replicas=1", "--set", "decoder.replicas=1",
                  "--set", "postprocessor.replicas=1", "--concurrency-range", "1:2", "--requests", "30",
                  "--max-new-tokens", "8", "--slo-p99-ms", "10000", "--rounds", "2", "--csv", csv_path,
                  "--write-config", best_path, timeout=240)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("best configuration under the SLO: --set batcher.max_batch_size=", r.stdout)
        best = r.stdout.split("best configuration under the SLO: --set batcher.max_batch_size=")[1].split()[0]
        self.assertIn("wrote the best configuration to " + best_path, r.stdout)
        self.check_written_config(best_path, best)
        # Each configuration's table once: the pipelines' children must not replay our stdout.
        self.assertEqual(r.stdout.splitlines().count("batcher.max_batch_size=1 (round 1)"), 1, r.stdout)
        self.assertIn("medians of 2 rounds", r.stdout)
        self.assertEqual(r.stdout.count("best configuration under the SLO"), 1, r.stdout)
        with open(csv_path) as f:
            rows = list(csv.DictReader(f))
        self.assertEqual(sorted({(row["batcher.max_batch_size"], row["Round"]) for row in rows}),
                         [("1", "1"), ("1", "2"), ("4", "1"), ("4", "2")])
        self.assertTrue(all(row["Errors"] == "0" for row in rows), rows)

    def check_written_config(self, path, max_batch_size):
        """The file holds the base file's keys, the --set values over them and the best grid value,
        and `seqpipe up --config` serves it."""
        with open(path) as f:
            text = f.read()
        self.assertTrue(text.startswith("# The best configuration of a seqpipe-bench sweep: "), text)
        self.assertIn("requests/s at p99", text)
        for line in ["max_queue_size: 512", "num_slots: 24", f"max_batch_size: {max_batch_size}",
                     f"dir: {os.path.abspath(self.pipeline.model)}", "replicas: 1"]:
            self.assertIn(line, text)
        self.assertNotIn("runtime_dir", text, "the sweep's private settings stay out")
        served = Pipeline("seqpipe-bench-best-", [
            "gateway.metrics_port=0", "batcher.metrics_port=0", "tokenizer.metrics_port=0",
            "encoder.metrics_port=0", "decoder.metrics_port=0", "postprocessor.metrics_port=0"],
            model_dir=self.pipeline.model, config=path)
        report_path = os.path.join(self.out, "served.json")
        try:
            deadline = time.monotonic() + 60
            while True:  # served once every request of a run is answered ok
                r = bench("--endpoint", served.endpoint, "--concurrency", "1", "--requests", "3",
                          "--timeout-ms", "2000", "--json", report_path)
                if r.returncode == 0:
                    with open(report_path) as f:
                        if json.load(f)["overall"]["ok"] == 3:
                            break
                self.assertTrue(time.monotonic() < deadline and served.alive(), r.stdout + r.stderr)
                time.sleep(0.2)
            with open(served.log.name) as f:
                self.assertIn(f"< {path} <", f.read(), "seqpipe up names the file in force")
        finally:
            served.close()


if __name__ == "__main__":
    unittest.main(verbosity=2)
