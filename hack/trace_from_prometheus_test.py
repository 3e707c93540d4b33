#!/usr/bin/env python3
"""Tests of hack/trace-from-prometheus.py's conversion (no Prometheus needed)."""
import importlib.util
import pathlib
import unittest

spec = importlib.util.spec_from_file_location(
    "tfp", pathlib.Path(__file__).with_name("trace-from-prometheus.py")
)
tfp = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tfp)


def answer(points):
    return {"status": "success", "data": {"resultType": "matrix", "result": [{"metric": {}, "values": points}]}}


class Convert(unittest.TestCase):
    def test_joins_both_series_on_time(self):
        cpu = answer([[1793577600, "12.5"], [1793577900, "40"], [1793578200, "3"]])
        memory = answer([[1793577600, "51539607552"], [1793577900, "171798691840"], [1793578200, "1e9"]])
        csv = tfp.to_csv(cpu, memory).splitlines()
        self.assertEqual(csv[1], "time,cpu,memory")
        self.assertEqual(csv[2], "2026-11-02T00:00:00Z,12500m,51539607552")
        self.assertEqual(csv[4], "2026-11-02T00:10:00Z,3000m,1000000000")

    def test_refuses_an_error_or_several_series(self):
        with self.assertRaises(SystemExit):
            tfp.values({"status": "error", "error": "bad query"})
        two = answer([[1, "1"]])
        two["data"]["result"].append(two["data"]["result"][0])
        with self.assertRaises(SystemExit):
            tfp.values(two)

    def test_query_selects_the_node_pools_and_leaves_daemonsets_out(self):
        q = tfp.query("cpu", ["vm-first", "warm-metal"])
        self.assertIn('label_karpenter_sh_nodepool=~"vm-first|warm-metal"', q)
        self.assertIn('owner_kind="DaemonSet"', q)
        self.assertIn('resource="cpu"', q)


if __name__ == "__main__":
    unittest.main()
