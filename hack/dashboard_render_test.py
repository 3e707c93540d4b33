#!/usr/bin/env python3
"""Tests of hack/dashboard-render.py's parts that need neither Prometheus nor
matplotlib: variable substitution, Grafana's interval variables, units,
legends, reductions. `python3 hack/dashboard_render_test.py`."""

import importlib.util
import json
import os
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("dr", os.path.join(HERE, "dashboard-render.py"))
dr = importlib.util.module_from_spec(spec)
spec.loader.exec_module(dr)


class FakeProm:
    def __init__(self, labels):
        self.labels = labels
        self.asked = []

    def get(self, path, params=None):
        self.asked.append((path, params))
        return self.labels


class Render(unittest.TestCase):
    def test_substitute_every_form_and_leaves_unknown_names(self):
        v = {"window": "6h", "__rate_interval": "8s", "pool": ".*"}
        self.assertEqual(
            dr.substitute('rate(x{p=~"$pool"}[$__rate_interval]) + y[${window}] + z[[[window]]] $other', v),
            'rate(x{p=~".*"}[8s]) + y[6h] + z[6h] $other',
        )
        self.assertEqual(dr.substitute("${window:text}", v), "6h")

    def test_rate_interval_is_four_scrapes_or_step_plus_one(self):
        dash = {"templating": {"list": []}}
        v = dr.resolve_variables(dash, FakeProm([]), {}, 0, 600, 2, 2)
        self.assertEqual(v["__rate_interval"], "8s")
        self.assertEqual(v["__range"], "600s")
        v = dr.resolve_variables(dash, FakeProm([]), {}, 0, 6000, 12, 2)
        self.assertEqual(v["__rate_interval"], "14s")

    def test_variables_custom_all_and_label_values(self):
        with open(os.path.join(HERE, "testdata", "dashboard-fixture.json")) as f:
            dash = json.load(f)
        dash["templating"]["list"].append(
            {"name": "zone", "type": "query", "query": "label_values(karpenter_nodes_allocatable, zone)"})
        prom = FakeProm(["fr-par-2", "nl-ams-1"])
        v = dr.resolve_variables(dash, prom, {}, 100, 200, 2, 2)
        self.assertEqual(v["window"], "1h")
        self.assertEqual(v["nodepool"], ".*")  # includeAll: its allValue
        self.assertEqual(v["zone"], "fr-par-2")
        self.assertEqual(prom.asked[0][0], "/api/v1/label/zone/values")
        self.assertEqual(prom.asked[0][1]["match[]"], "karpenter_nodes_allocatable")
        self.assertNotIn("datasource", v)
        v = dr.resolve_variables(dash, prom, {"window": "15m"}, 100, 200, 2, 2)
        self.assertEqual(v["window"], "15m")

    def test_units(self):
        self.assertEqual(dr.fmt(0.025, "s"), "25 ms")
        self.assertEqual(dr.fmt(123, "s"), "2.05 min")
        self.assertEqual(dr.fmt(750 * 2**20, "bytes"), "750 MiB")
        self.assertEqual(dr.fmt(0.5, "percentunit"), "50%")
        self.assertEqual(dr.fmt(0.091, "currencyEUR"), "€0.091")
        self.assertEqual(dr.fmt(1.5, "reqps"), "1.5 req/s")
        self.assertEqual(dr.fmt(12345, "short"), "12.3 K")
        self.assertEqual(dr.fmt(None, "s"), "–")

    def test_legend(self):
        m = {"__name__": "x", "api": "iam", "result": "ok"}
        self.assertEqual(dr.legend_of("{{api}} {{ result }}", m), "iam ok")
        self.assertEqual(dr.legend_of(None, m), 'x{api="iam", result="ok"}')
        self.assertEqual(dr.legend_of("__auto", {}), "value")

    def test_reduce_skips_nan(self):
        nan = float("nan")
        self.assertEqual(dr.reduce([1.0, 3.0, nan], "lastNotNull"), 3.0)
        self.assertEqual(dr.reduce([1.0, 3.0, 2.0], "max"), 3.0)
        self.assertIsNone(dr.reduce([nan], "lastNotNull"))

    def test_thresholds_default_green(self):
        theme = dr.THEMES["dark"]
        self.assertEqual(dr.threshold_color(1, {}, theme), dr.GRAFANA_COLORS["green"])
        steps = {"thresholds": {"steps": [{"color": "green", "value": None}, {"color": "red", "value": 80}]}}
        self.assertEqual(dr.threshold_color(90, steps, theme), dr.GRAFANA_COLORS["red"])


if __name__ == "__main__":
    unittest.main()
