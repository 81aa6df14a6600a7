"""deploy/grafana/seqpipe.json: a Grafana dashboard model that imports (uid, title,
schemaVersion, panels with datasource, targets and a grid position that fits), whose PromQL
names only metrics the project exports: every metric name in an expression must be a series of
a family declared in common/observability/include/seqpipe/observability/metrics.h (histograms as _bucket, _sum or
_count, as common/observability/src/metrics.cc builds them), so renaming a metric breaks this test. With
Debian's promtool, every expression must also parse as PromQL.
"""
import json
import os
import re
import shutil
import subprocess
import tempfile
import unittest

SOURCE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DASHBOARD = os.path.join(SOURCE, "deploy/grafana/seqpipe.json")
DATASOURCE = {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}
# PromQL functions and aggregations the dashboard may call, and keywords that are not names.
FUNCTIONS = {"sum", "avg", "max", "min", "count", "rate", "irate", "increase", "histogram_quantile",
             "clamp_min", "topk"}
KEYWORDS = {"and", "or", "unless", "bool", "offset"}
# Series Prometheus itself adds to every target.
PROMETHEUS_SERIES = {"up"}


def read(path):
    with open(path) as f:
        return f.read()


def project_series():
    """Every series name the project's processes expose, from the one metric names module."""
    header = read(os.path.join(SOURCE, "common/observability/include/seqpipe/observability/metrics.h"))
    names = dict(re.findall(r'inline constexpr std::string_view (k\w+) = "(seqpipe_\w+)";', header))
    source = read(os.path.join(SOURCE, "common/observability/src/metrics.cc"))
    kinds = {const: kind for kind, const in
             re.findall(r"Build(Counter|Gauge|Histogram)\(\)\s*\.Name\(std::string\((k\w+)\)\)", source)}
    # A stage's plain counters are built by one helper, stage_counter(registry, kName, ...).
    kinds.update({const: "Counter" for const in re.findall(r"stage_counter\(\s*\w+,\s*(k\w+)", source)})
    series = {}
    for const, name in names.items():
        kind = kinds.get(const)
        if kind == "Histogram":
            for suffix in ("_bucket", "_sum", "_count"):
                series[name + suffix] = name
        elif kind in ("Counter", "Gauge"):
            series[name] = name  # counters are declared with their _total
    return series, {n for c, n in names.items() if kinds.get(c) == "Histogram"}


def expressions(dashboard):
    return [t["expr"] for p in dashboard["panels"] for t in p["targets"]]


def metric_names(expr):
    """The metric names an expression selects (functions, labels, strings, ranges left out)."""
    e = expr.replace("$__rate_interval", "1m")
    e = re.sub(r'"(?:[^"\\]|\\.)*"', '""', e)
    e = re.sub(r"\{[^}]*\}", "", e)
    e = re.sub(r"\[[^\]]*\]", "", e)
    e = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", e)
    names, calls = [], []
    for m in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", e):
        word = m.group(0)
        if e[m.end():].lstrip().startswith("("):
            calls.append(word)
        elif word not in KEYWORDS:
            names.append(word)
    return names, calls


class MetricNamesTest(unittest.TestCase):
    def test_the_extractor_sees_names_and_only_names(self):
        names, calls = metric_names(
            'histogram_quantile(0.99, sum by (stage, le) (rate(seqpipe_x_bucket{status="ok", a=~"b|c"}[$__rate_interval])))'
            ' / sum(seqpipe_y_total) and on (stage) up')
        self.assertEqual(names, ["seqpipe_x_bucket", "seqpipe_y_total", "up"])
        self.assertEqual(calls, ["histogram_quantile", "sum", "rate", "sum"])

    def test_the_names_module_parses(self):
        series, histograms = project_series()
        self.assertIn("seqpipe_stage_errors_total", series)
        self.assertIn("seqpipe_gateway_request_seconds_bucket", series)
        self.assertNotIn("seqpipe_gateway_request_seconds", series)  # a histogram has no bare series
        self.assertIn("seqpipe_stage_batch_size", histograms)
        self.assertGreaterEqual(len(set(series.values())), 17)


class DashboardTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dashboard = json.loads(read(DASHBOARD))

    def test_dashboard_model(self):
        d = self.dashboard
        self.assertEqual(d["uid"], "seqpipe")
        self.assertTrue(d["title"])
        self.assertIsInstance(d["schemaVersion"], int)
        self.assertGreaterEqual(d["schemaVersion"], 30)
        self.assertNotIn("id", d, "an id would clash on import; Grafana assigns one")
        (variable,) = [v for v in d["templating"]["list"] if v["type"] == "datasource"]
        self.assertEqual((variable["name"], variable["query"]), ("DS_PROMETHEUS", "prometheus"))

    def test_panels(self):
        panels = self.dashboard["panels"]
        self.assertGreaterEqual(len(panels), 10)
        self.assertEqual(len({p["id"] for p in panels}), len(panels), "panel ids must be unique")
        cells = set()
        for p in panels:
            with self.subTest(panel=p["title"]):
                self.assertIn(p["type"], {"timeseries", "stat"})
                self.assertEqual(p["datasource"], DATASOURCE)
                self.assertTrue(p["targets"])
                self.assertEqual([t["refId"] for t in p["targets"]],
                                 [chr(ord("A") + i) for i in range(len(p["targets"]))])
                for t in p["targets"]:
                    self.assertEqual(t["datasource"], DATASOURCE)
                    self.assertTrue(t["expr"].strip())
                g = p["gridPos"]
                self.assertTrue(all(isinstance(g[k], int) for k in "hwxy"))
                self.assertTrue(g["w"] > 0 and g["h"] > 0 and g["x"] >= 0 and g["x"] + g["w"] <= 24)
                mine = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
                self.assertFalse(cells & mine, "panels overlap")
                cells |= mine

    def test_every_metric_name_is_exported_by_the_project(self):
        series, _ = project_series()
        unknown, calls = set(), set()
        for expr in expressions(self.dashboard):
            names, fns = metric_names(expr)
            self.assertTrue(names, expr)
            unknown |= {n for n in names if n not in series and n not in PROMETHEUS_SERIES}
            calls |= set(fns)
        self.assertEqual(unknown, set(), "not in common/observability/include/seqpipe/observability/metrics.h")
        self.assertEqual(calls - FUNCTIONS, set())

    def test_quantiles_for_every_histogram_and_what_operators_watch(self):
        series, histograms = project_series()
        exprs = expressions(self.dashboard)
        for h in histograms:
            self.assertTrue(any(re.search(rf"histogram_quantile\(0\.99, .*\b{h}_bucket\b", e) for e in exprs),
                            f"no p99 of {h}")
        used = {series[n] for e in exprs for n in metric_names(e)[0] if n in series}
        for family in ["seqpipe_stage_requests_total", "seqpipe_stage_errors_total", "seqpipe_stage_queue_depth",
                       "seqpipe_stage_in_flight", "seqpipe_gateway_cache_lookups_total"]:
            self.assertIn(family, used)
        self.assertTrue(any("by (stage, code)" in e for e in exprs), "errors by reason")

    @unittest.skipIf(shutil.which("promtool") is None, "promtool is not installed (Debian package `prometheus`)")
    def test_every_expression_parses(self):
        rules = {"groups": [{"name": "dashboard", "rules": [
            {"record": f"dashboard:expr_{i}", "expr": e.replace("$__rate_interval", "1m")}
            for i, e in enumerate(expressions(self.dashboard))]}]}
        with tempfile.NamedTemporaryFile("w", suffix=".yml") as f:
            json.dump(rules, f)  # JSON is YAML
            f.flush()
            r = subprocess.run(["promtool", "check", "rules", f.name], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
