#!/usr/bin/env python3
"""Draws a Grafana dashboard's panels from a real Prometheus, into one PNG.

Grafana itself is not used (its licence keeps it out of this project). This
reads the dashboard JSON as Grafana would (rows and panels placed by
`gridPos` on the 24-column grid, `targets[].expr` with `legendFormat`,
`fieldConfig.defaults.unit`, the dashboard's template variables), asks
Prometheus' HTTP API (`/api/v1/query_range`, `/api/v1/query`) the panels'
own PromQL for the given time range, and draws each panel with matplotlib:
timeseries as lines, stat and gauge as the reduced value (with a sparkline
for stat), bargauge as bars, table as the instant query's rows. A panel
type it does not know is drawn as a box saying so, never faked.

Prometheus is either running (`--prometheus URL`) or started here on a
kept TSDB (`--data DIR --prometheus-bin BIN`: the directory an e2e stack
leaves in `.work/<scenario>/prometheus/data` when KPS_PROMETHEUS_BIN is
set); `--run` reads that stack's `run.json` for the time range.

Variables: `$datasource` is ignored; `$__rate_interval`, `$__interval`,
`$__range` are computed as Grafana does from the step and the scrape
interval; a `custom` or `interval` variable takes its current value (or
`--var name=value`); a `query` variable with `includeAll` or `multi` takes
its all value (`allValue`, else `.*`), otherwise the first answer of its
`label_values(...)`.

matplotlib is needed: when it is missing the script makes a venv under
~/.cache/karpenter-provider-scaleway/ (pip, matplotlib pinned below) and
runs itself again there.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from datetime import datetime, timezone

MATPLOTLIB = "matplotlib==3.11.2"


def ensure_matplotlib() -> None:
    try:
        import matplotlib  # noqa: F401

        return
    except ImportError:
        pass
    if os.environ.get("KPS_RENDER_VENV_TRIED"):
        sys.exit("dashboard-render: matplotlib still missing inside the venv")
    cache = os.environ.get(
        "KPS_CACHE_DIR", os.path.expanduser("~/.cache/karpenter-provider-scaleway")
    )
    tag = f"py{sys.version_info.major}{sys.version_info.minor}-{MATPLOTLIB.replace('==', '-')}"
    venv = os.path.join(cache, f"venv-dashboard-render-{tag}")
    py = os.path.join(venv, "bin", "python")
    if not os.path.exists(os.path.join(venv, ".complete")):
        print(f"dashboard-render: installing {MATPLOTLIB} into {venv}", file=sys.stderr)
        shutil.rmtree(venv, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", venv], check=True)
        subprocess.run(
            [py, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", MATPLOTLIB],
            check=True,
        )
        open(os.path.join(venv, ".complete"), "w").close()
    env = dict(os.environ, KPS_RENDER_VENV_TRIED="1")
    os.execve(py, [py, os.path.abspath(__file__), *sys.argv[1:]], env)


# ---------------------------------------------------------------- Prometheus


class Prom:
    def __init__(self, url: str):
        self.url = url.rstrip("/")

    def get(self, path: str, params: dict | None = None):
        q = ("?" + urllib.parse.urlencode(params, doseq=True)) if params else ""
        with urllib.request.urlopen(self.url + path + q, timeout=60) as r:
            body = json.load(r)
        if body.get("status") != "success":
            raise RuntimeError(f"{path}: {body.get('errorType')}: {body.get('error')}")
        return body["data"]

    def query_range(self, expr: str, start: float, end: float, step: float):
        try:
            return self.get(
                "/api/v1/query_range",
                {"query": expr, "start": start, "end": end, "step": step},
            )["result"], None
        except urllib.error.HTTPError as e:
            try:
                msg = json.load(e).get("error", str(e))
            except Exception:  # noqa: BLE001
                msg = str(e)
            return [], msg
        except RuntimeError as e:
            return [], str(e)

    def query(self, expr: str, at: float):
        try:
            return self.get("/api/v1/query", {"query": expr, "time": at})["result"], None
        except urllib.error.HTTPError as e:
            try:
                msg = json.load(e).get("error", str(e))
            except Exception:  # noqa: BLE001
                msg = str(e)
            return [], msg
        except RuntimeError as e:
            return [], str(e)


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class LocalPrometheus:
    """A Prometheus on a kept TSDB, scraping nothing, for the queries only."""

    def __init__(self, binary: str, data: str):
        self.tmp = tempfile.mkdtemp(prefix="kps-render-prom-")
        cfg = os.path.join(self.tmp, "prometheus.yml")
        with open(cfg, "w") as f:
            f.write("global:\n  scrape_interval: 1m\nscrape_configs: []\n")
        self.port = free_port()
        self.log = open(os.path.join(self.tmp, "prometheus.log"), "w")
        self.proc = subprocess.Popen(
            [
                binary,
                f"--config.file={cfg}",
                f"--storage.tsdb.path={data}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                # Nothing of the run may be dropped for its age.
                "--storage.tsdb.retention.time=100y",
                "--log.level=warn",
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        self.url = f"http://127.0.0.1:{self.port}"
        deadline = time.time() + 120
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"prometheus exited: {self.tail()}")
            try:
                with urllib.request.urlopen(self.url + "/-/ready", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.3)
        self.stop()
        raise RuntimeError(f"prometheus not ready after 120 s: {self.tail()}")

    def tail(self) -> str:
        self.log.flush()
        with open(self.log.name) as f:
            return "".join(f.readlines()[-20:])

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        shutil.rmtree(self.tmp, ignore_errors=True)


# ----------------------------------------------------------------- variables


def dur(seconds: float) -> str:
    """A PromQL duration of whole seconds (Grafana rounds the same way)."""
    return f"{max(1, int(round(seconds)))}s"


def parse_dur(text: str) -> float:
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w|y)", text.strip())
    if not m:
        raise ValueError(f"not a duration: {text}")
    mult = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}
    return float(m.group(1)) * mult[m.group(2)]


def substitute(expr: str, values: dict[str, str]) -> str:
    def repl(m: re.Match) -> str:
        name = m.group(1) or m.group(2) or m.group(4)
        return values.get(name, m.group(0))

    # ${name}, ${name:format}, $name, [[name]]
    return re.sub(
        r"\$\{(\w+)(?::\w+)?\}|\$(\w+)|(\[\[(\w+)\]\])",
        lambda m: repl(m) if (m.group(1) or m.group(2) or m.group(4)) in values else m.group(0),
        expr,
    )


def resolve_variables(dash: dict, prom: Prom, fixed: dict[str, str], start: float, end: float,
                      step: float, scrape: float) -> dict[str, str]:
    rng = end - start
    values = {
        "__rate_interval": dur(max(step + scrape, 4 * scrape)),
        "__interval": dur(step),
        "__interval_ms": str(int(step * 1000)),
        "__range": dur(rng),
        "__range_s": str(int(rng)),
        "__range_ms": str(int(rng * 1000)),
    }
    for v in dash.get("templating", {}).get("list", []):
        name, kind = v.get("name"), v.get("type")
        if not name or kind == "datasource":
            continue
        if name in fixed:
            values[name] = fixed[name]
            continue
        cur = (v.get("current") or {}).get("value")
        if isinstance(cur, list):
            cur = cur[0] if len(cur) == 1 else None
        if kind in ("custom", "interval", "constant", "textbox"):
            if cur in (None, "", "$__all"):
                opts = [o.strip() for o in str(v.get("query", "")).split(",") if o.strip()]
                cur = opts[0] if opts else ""
            values[name] = str(cur)
        elif kind == "query":
            if v.get("includeAll") or v.get("multi"):
                values[name] = v.get("allValue") or ".*"
                continue
            q = v.get("query")
            q = q.get("query") if isinstance(q, dict) else q
            m = re.fullmatch(r"\s*label_values\((?:(.*),)?\s*(\w+)\s*\)\s*", q or "")
            answer = []
            if m:
                params = {"start": start, "end": end}
                if m.group(1):
                    params["match[]"] = m.group(1).strip()
                try:
                    answer = prom.get(f"/api/v1/label/{m.group(2)}/values", params)
                except Exception:  # noqa: BLE001
                    answer = []
            values[name] = answer[0] if answer else ".*"
        else:
            values[name] = str(cur or ".*")
    return values


# ------------------------------------------------------------------- format

GRAFANA_COLORS = {
    "green": "#73BF69", "semi-dark-green": "#56A64B", "dark-green": "#37872D",
    "red": "#F2495C", "semi-dark-red": "#E02F44", "dark-red": "#C4162A",
    "yellow": "#FADE2A", "semi-dark-yellow": "#F2CC0C", "dark-yellow": "#E0B400",
    "orange": "#FF9830", "semi-dark-orange": "#FF780A", "dark-orange": "#FA6400",
    "blue": "#5794F2", "semi-dark-blue": "#3274D9", "dark-blue": "#1F60C4",
    "purple": "#B877D9", "semi-dark-purple": "#A352CC", "dark-purple": "#8F3BB8",
    "super-light-blue": "#C0D8FF", "light-blue": "#8AB8FF", "transparent": "#00000000",
}
# Grafana's classic palette, in its order.
PALETTE = ["#73BF69", "#F2CC0C", "#8AB8FF", "#FF780A", "#F2495C", "#5794F2", "#B877D9",
           "#705DA0", "#37872D", "#FADE2A", "#447EBC", "#C15C17", "#890F02", "#0A437C",
           "#6D1F62", "#584477"]

THEMES = {
    "dark": {"bg": "#111217", "panel": "#181b1f", "border": "#2c3235", "text": "#ccccdc",
             "muted": "#8e8e9e", "grid": "#2c3235", "row": "#d8d9da"},
    "light": {"bg": "#f4f5f5", "panel": "#ffffff", "border": "#dcdee1", "text": "#24292e",
              "muted": "#6e7074", "grid": "#e4e6e8", "row": "#24292e"},
}


def color_of(name: str | None, theme: dict) -> str:
    if not name or name == "text":
        return theme["text"]
    return GRAFANA_COLORS.get(name, name)


def si(v: float, suffix: str = "", base: float = 1000.0, units=("", "K", "M", "G", "T", "P")) -> str:
    if v == 0 or not math.isfinite(v):
        return f"{v:g}{suffix}"
    i = 0
    a = abs(v)
    while a >= base and i < len(units) - 1:
        a /= base
        v /= base
        i += 1
    return f"{trim(v)}{' ' if suffix or units[i] else ''}{units[i]}{suffix}".replace("  ", " ")


def trim(v: float) -> str:
    a = abs(v)
    if a >= 100 or a == round(a):
        s = f"{v:.0f}"
    elif a >= 10:
        s = f"{v:.1f}"
    elif a >= 1:
        s = f"{v:.2f}"
    else:
        s = f"{v:.3g}"
    if "." in s:
        s = s.rstrip("0").rstrip(".")
    return s


def fmt(v: float | None, unit: str | None, decimals=None) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    unit = unit or "short"
    if decimals is not None and unit in ("short", "none", ""):
        return f"{v:.{decimals}f}"
    if unit in ("s", "ms"):
        s = v / 1000 if unit == "ms" else v
        a = abs(s)
        if a == 0:
            return "0 s"
        if a < 1:
            return f"{trim(s * 1000)} ms"
        if a < 60:
            return f"{trim(s)} s"
        if a < 3600:
            return f"{trim(s / 60)} min"
        if a < 86400:
            return f"{trim(s / 3600)} hour"
        return f"{trim(s / 86400)} day"
    if unit in ("bytes", "decbytes"):
        base = 1024.0 if unit == "bytes" else 1000.0
        units = ("B", "KiB", "MiB", "GiB", "TiB") if unit == "bytes" else ("B", "kB", "MB", "GB", "TB")
        i = 0
        while abs(v) >= base and i < len(units) - 1:
            v /= base
            i += 1
        return f"{trim(v)} {units[i]}"
    if unit == "percentunit":
        return f"{trim(v * 100)}%"
    if unit == "percent":
        return f"{trim(v)}%"
    if unit.startswith("currency"):
        sym = {"currencyEUR": "€", "currencyUSD": "$", "currencyGBP": "£"}.get(unit, "")
        return f"{sym}{trim(v)}" if abs(v) < 1000 else f"{sym}{si(v)}"
    if unit in ("reqps", "rps"):
        return si(v, " req/s").replace("  ", " ")
    if unit == "ops":
        return si(v, " ops/s")
    if unit == "cps":
        return si(v, " c/s")
    if unit.startswith("suffix:"):
        return f"{trim(v)}{unit[7:]}"
    if unit.startswith("prefix:"):
        return f"{unit[7:]}{trim(v)}"
    if unit == "none":
        return trim(v)
    return si(v)


def legend_of(fmt_str: str | None, metric: dict) -> str:
    if fmt_str and fmt_str != "__auto":
        return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: metric.get(m.group(1), ""), fmt_str).strip()
    name = metric.get("__name__", "")
    labels = ", ".join(f'{k}="{v}"' for k, v in sorted(metric.items()) if k != "__name__")
    return f"{name}{{{labels}}}" if labels else (name or "value")


def reduce(values: list[float], calc: str) -> float | None:
    vals = [v for v in values if v is not None and math.isfinite(v)]
    if not vals:
        return None
    return {
        "lastNotNull": vals[-1], "last": vals[-1], "firstNotNull": vals[0], "first": vals[0],
        "max": max(vals), "min": min(vals), "mean": sum(vals) / len(vals), "sum": sum(vals),
        "count": float(len(vals)), "range": max(vals) - min(vals),
        "delta": vals[-1] - vals[0], "diff": vals[-1] - vals[0],
    }.get(calc, vals[-1])


def threshold_color(v: float | None, defaults: dict, theme: dict) -> str:
    # Grafana's default thresholds: green from the start.
    steps = ((defaults.get("thresholds") or {}).get("steps")) or [{"color": "green", "value": None}]
    color = theme["text"]
    if v is None:
        return theme["muted"]
    for s in steps:
        if s.get("value") is None or v >= s["value"]:
            color = color_of(s.get("color"), theme)
    return color


# -------------------------------------------------------------------- panels


def flatten_panels(panels: list[dict]) -> list[dict]:
    out = []
    for p in panels:
        out.append(p)
        if p.get("type") == "row" and p.get("collapsed"):
            out.extend(p.get("panels", []))
    return out


def series_of(prom: Prom, panel: dict, values: dict, start, end, step):
    """(label, timestamps, values) per series of the panel's visible targets."""
    out, errors = [], []
    for t in panel.get("targets", []):
        if t.get("hide") or not t.get("expr"):
            continue
        expr = substitute(t["expr"], values)
        res, err = prom.query_range(expr, start, end, step)
        if err:
            errors.append(err)
        for s in res:
            ts = [float(x[0]) for x in s["values"]]
            vs = [float(x[1]) for x in s["values"]]
            label = legend_of(substitute(t.get("legendFormat") or "", values) or None, s["metric"])
            out.append((label, ts, vs, s["metric"]))
    return out, errors


def draw_dashboard(dash: dict, prom: Prom, values: dict, start, end, step, out: str,
                   theme_name: str, width_px: int, footer: str) -> dict:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.dates as mdates
    import matplotlib.pyplot as plt
    import numpy as np
    from matplotlib.patches import FancyBboxPatch

    theme = THEMES[theme_name]
    plt.rcParams.update({
        "font.family": "DejaVu Sans", "font.size": 8, "text.color": theme["text"],
        "axes.labelcolor": theme["text"], "xtick.color": theme["muted"],
        "ytick.color": theme["muted"], "axes.edgecolor": theme["border"],
    })
    panels = [p for p in flatten_panels(dash.get("panels", [])) if p.get("gridPos")]
    col = width_px / 24.0
    unit_h = 30.0  # Grafana's grid row: 30 px
    gap = 6.0
    header = 44.0
    foot = 40.0
    grid_h = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in panels) * unit_h
    height_px = header + grid_h + foot
    dpi = 100
    fig = plt.figure(figsize=(width_px / dpi, height_px / dpi), dpi=dpi, facecolor=theme["bg"])

    def frac(x, y, w, h):
        """Pixel box (top-left origin) -> figure fractions (bottom-left origin)."""
        return [x / width_px, 1 - (y + h) / height_px, w / width_px, h / height_px]

    fig.text(12 / width_px, 1 - 26 / height_px, dash.get("title", "dashboard"),
             fontsize=15, color=theme["text"], weight="bold", va="center")
    fig.text(1 - 12 / width_px, 1 - 26 / height_px,
             f"{datetime.fromtimestamp(start, timezone.utc):%Y-%m-%d %H:%M:%S} to "
             f"{datetime.fromtimestamp(end, timezone.utc):%H:%M:%S} UTC",
             fontsize=9, color=theme["muted"], ha="right", va="center")
    fig.text(12 / width_px, 10 / height_px, footer, fontsize=8, color=theme["muted"], va="bottom")

    report = {"panels": 0, "with_data": 0, "empty": [], "errors": {}, "skipped": []}
    locator = mdates.AutoDateLocator(minticks=3, maxticks=6)
    for p in panels:
        g = p["gridPos"]
        x, y = g["x"] * col + gap / 2, header + g["y"] * unit_h + gap / 2
        w, h = g["w"] * col - gap, g["h"] * unit_h - gap
        kind = p.get("type")
        title = substitute(p.get("title") or "", values)
        if kind == "row":
            fig.text((x + 2) / width_px, 1 - (y + h / 2 + 2) / height_px, title,
                     fontsize=11, weight="bold", color=theme["row"], va="center")
            continue
        report["panels"] += 1
        box = fig.add_axes(frac(x, y, w, h))
        box.set_axis_off()
        box.add_patch(FancyBboxPatch((0, 0), 1, 1, boxstyle="round,pad=0,rounding_size=0.01",
                                     transform=box.transAxes, facecolor=theme["panel"],
                                     edgecolor=theme["border"], linewidth=0.8))
        box.text(8 / w, 1 - 13 / h, title, transform=box.transAxes, fontsize=10, weight="bold",
                 color=theme["text"], va="center", ha="left", clip_on=True)
        defaults = (p.get("fieldConfig") or {}).get("defaults") or {}
        unit = defaults.get("unit")
        decimals = defaults.get("decimals")
        inner = (x + 6, y + 26, w - 12, h - 32)  # below the title

        def no_data(msg="No data"):
            box.text(0.5, 0.45, msg, transform=box.transAxes, ha="center", va="center",
                     fontsize=10 if msg == "No data" else 7, color=theme["muted"], wrap=True)

        if kind in ("timeseries", "graph", "stat", "gauge", "bargauge", "heatmap", "barchart"):
            series, errors = series_of(prom, p, values, start, end, step)
        elif kind == "table":
            series, errors = [], []
        elif kind == "text":
            content = ((p.get("options") or {}).get("content") or p.get("content") or "").strip()
            content = re.sub(r"[#*`>_]", "", content)
            box.text(8 / w, 1 - 30 / h, content[:600], transform=box.transAxes, fontsize=7.5,
                     color=theme["text"], va="top", ha="left", wrap=True)
            continue
        else:
            report["skipped"].append(f"{title} ({kind})")
            no_data(f"panel type '{kind}' is not drawn by this renderer")
            continue
        if errors:
            report["errors"][title] = errors

        if kind in ("timeseries", "graph", "heatmap", "barchart"):
            if kind != "timeseries" and kind != "graph":
                report["skipped"].append(f"{title} ({kind} drawn as lines)")
            # Grafana hides series with no point at all in range.
            series = [s for s in series if any(math.isfinite(v) for v in s[2])]
            if not series:
                report["empty"].append(title)
                no_data()
                continue
            report["with_data"] += 1
            shown = sorted(series, key=lambda s: -max(abs(v) for v in s[2] if math.isfinite(v)))
            hidden = max(0, len(shown) - 12)
            shown = shown[:12]
            shown.sort(key=lambda s: s[0])
            ncol = max(1, int(inner[2] // 170))
            labels = [s[0] or "value" for s in shown] + ([f"+{hidden} more series"] if hidden else [])
            rows = min(math.ceil(len(labels) / ncol), max(1, int(inner[3] * 0.38 // 13)))
            legend_h = rows * 13 + 4
            ax_box = (inner[0] + 52, inner[1] + 2, inner[2] - 58, inner[3] - legend_h - 18)
            ax = fig.add_axes(frac(*ax_box))
            ax.set_facecolor(theme["panel"])
            custom = defaults.get("custom") or {}
            fill = float(custom.get("fillOpacity", 10)) / 100.0
            stacked = (custom.get("stacking") or {}).get("mode") == "normal"
            bars = custom.get("drawStyle") == "bars"
            span = bool(custom.get("spanNulls"))
            # query_range answers on the grid start + k*step; a step with no
            # sample is a gap (NaN), which Grafana leaves open unless
            # spanNulls is set, and an isolated sample is drawn as a point.
            n = int(round((end - start) / step)) + 1
            grid = np.array([start + k * step for k in range(n)])
            when = mdates.date2num([datetime.fromtimestamp(t, timezone.utc) for t in grid])
            base = np.zeros(n)
            for i, (label, ts, vs, _m) in enumerate(shown):
                c = PALETTE[i % len(PALETTE)]
                y = np.full(n, np.nan)
                for t, v in zip(ts, vs):
                    k = int(round((t - start) / step))
                    if 0 <= k < n:
                        y[k] = v
                ok = np.isfinite(y)
                if stacked:
                    y = np.where(ok, base + np.nan_to_num(y), np.nan)
                    lo = base.copy()
                    base = np.where(ok, y, base)
                else:
                    lo = np.zeros(n)
                if bars:
                    ax.bar(when[ok], (y - lo)[ok], bottom=lo[ok], width=step / 86400 * 0.8,
                           color=c, alpha=max(fill, 0.5), linewidth=0)
                    continue
                if span and ok.sum() > 1:
                    ax.plot(when[ok], y[ok], color=c, linewidth=1.3)
                else:
                    ax.plot(when, y, color=c, linewidth=1.3)
                    prev = np.concatenate(([False], ok[:-1]))
                    nxt = np.concatenate((ok[1:], [False]))
                    lone = ok & ~prev & ~nxt
                    if lone.any():
                        ax.plot(when[lone], y[lone], "o", color=c, markersize=2.5)
                if fill > 0 or stacked:
                    ax.fill_between(when, lo, y, where=ok, color=c,
                                    alpha=max(fill, 0.3) if stacked else fill * 0.6,
                                    linewidth=0, interpolate=False)
            ax.set_xlim(datetime.fromtimestamp(start, timezone.utc),
                        datetime.fromtimestamp(end, timezone.utc))
            lo_y, hi_y = ax.get_ylim()
            finite = [v for s in shown for v in s[2] if math.isfinite(v)]
            if max(finite) == min(finite) == 0:
                hi_y = 1  # Grafana's axis for a flat zero
            if custom.get("axisSoftMin") is not None or defaults.get("min") is not None:
                lo_y = defaults.get("min", custom.get("axisSoftMin"))
            elif lo_y > 0 or all(v >= 0 for s in shown for v in s[2] if math.isfinite(v)):
                lo_y = 0
            if defaults.get("max") is not None:
                hi_y = defaults["max"]
            if hi_y <= lo_y:
                hi_y = lo_y + 1
            ax.set_ylim(lo_y, hi_y)
            ax.xaxis.set_major_locator(locator)
            ax.xaxis.set_major_formatter(mdates.DateFormatter(
                "%H:%M:%S" if end - start < 600 else "%H:%M", tz=timezone.utc))
            integral = all(float(v).is_integer() for v in finite) and unit in (None, "short", "none")
            ax.yaxis.set_major_locator(matplotlib.ticker.MaxNLocator(nbins=4, integer=integral))
            ax.yaxis.set_major_formatter(
                matplotlib.ticker.FuncFormatter(lambda v, _p, u=unit: fmt(v, u, decimals)))
            ax.tick_params(labelsize=8, length=0, pad=2)
            ax.grid(True, color=theme["grid"], linewidth=0.6)
            for sp in ax.spines.values():
                sp.set_visible(False)
            # Legend below, Grafana's list mode.
            lx0, ly0 = inner[0] + 4, inner[1] + inner[3] - legend_h + 2
            cw = inner[2] / ncol
            for i, label in enumerate(labels[: rows * ncol]):
                r, cidx = divmod(i, ncol)
                px, py = lx0 + cidx * cw, ly0 + r * 13 + 6
                is_more = hidden and i == len(labels) - 1
                if not is_more:
                    fig.patches.append(matplotlib.patches.Rectangle(
                        (px / width_px, 1 - (py + 1.5) / height_px), 10 / width_px, 3 / height_px,
                        transform=fig.transFigure, color=PALETTE[i % len(PALETTE)]))
                maxc = int((cw - 18) / 5.8)
                text = label if len(label) <= maxc else label[: maxc - 1] + "…"
                fig.text((px + (0 if is_more else 14)) / width_px, 1 - py / height_px, text,
                         fontsize=8, color=theme["muted"] if is_more else theme["text"],
                         va="center")
            continue

        if kind in ("stat", "gauge", "bargauge"):
            opts = p.get("options") or {}
            calc = ((opts.get("reduceOptions") or {}).get("calcs") or ["lastNotNull"])[0]
            items = [(s[0], reduce(s[2], calc), s) for s in series]
            if not items:
                report["empty"].append(title)
                no_data()
                continue
            report["with_data"] += 1
            if kind == "bargauge":
                fit = max(1, int((inner[3] - 4) // 13))
                more = 0
                if len(items) > fit:
                    items.sort(key=lambda it: -(it[1] or 0))
                    more = len(items) - (fit - 1)
                    items = items[: fit - 1]
                items.sort(key=lambda it: it[0])
                n = len(items) + (1 if more else 0)
                vmax = defaults.get("max") or max((abs(v) for _, v, _ in items if v is not None),
                                                  default=1) or 1
                bh = min(22.0, (inner[3] - 4) / max(n, 1))
                if more:
                    fig.text((inner[0] + 4) / width_px, 1 - (inner[1] + 4 + (n - 0.5) * bh) / height_px,
                             f"+{more} more (the smallest)", fontsize=7, color=theme["muted"],
                             va="center")
                for i, (label, v, _s) in enumerate(items):
                    py = inner[1] + 4 + i * bh
                    fig.text((inner[0] + 4) / width_px, 1 - (py + bh / 2) / height_px,
                             label[:40], fontsize=7, color=theme["text"], va="center")
                    bx = inner[0] + inner[2] * 0.38
                    bw = inner[2] * 0.45
                    frac_v = 0 if v is None else max(0.0, min(1.0, v / vmax))
                    c = threshold_color(v, defaults, theme)
                    fig.patches.append(matplotlib.patches.Rectangle(
                        (bx / width_px, 1 - (py + bh * 0.8) / height_px), bw / width_px,
                        bh * 0.6 / height_px, transform=fig.transFigure, color=theme["grid"]))
                    fig.patches.append(matplotlib.patches.Rectangle(
                        (bx / width_px, 1 - (py + bh * 0.8) / height_px), bw * frac_v / width_px,
                        bh * 0.6 / height_px, transform=fig.transFigure, color=c))
                    fig.text((bx + bw + 6) / width_px, 1 - (py + bh / 2) / height_px,
                             fmt(v, unit, decimals), fontsize=8, color=c, va="center")
                continue
            n = len(items)
            cw = inner[2] / n
            for i, (label, v, s) in enumerate(items):
                c = threshold_color(v, defaults, theme)
                cx = inner[0] + cw * i
                if kind == "stat" and opts.get("graphMode", "area") == "area":
                    spark = fig.add_axes(frac(cx + 2, inner[1] + inner[3] * 0.55, cw - 4,
                                              inner[3] * 0.45))
                    spark.set_axis_off()
                    finite = [(t, val) for t, val in zip(s[1], s[2]) if math.isfinite(val)]
                    if len(finite) > 1:
                        ts_, vs_ = zip(*finite)
                        spark.fill_between(ts_, vs_, min(min(vs_), 0), color=c, alpha=0.18,
                                           linewidth=0)
                        spark.plot(ts_, vs_, color=c, linewidth=1)
                        spark.set_xlim(start, end)
                size = min(26, max(11, cw / 6.5), inner[3] * 0.45)
                fig.text((cx + cw / 2) / width_px, 1 - (inner[1] + inner[3] * 0.38) / height_px,
                         fmt(v, unit, decimals), fontsize=size, weight="bold", color=c,
                         ha="center", va="center")
                if n > 1 or (label and label != "value" and not label.startswith("{")):
                    if n > 1:
                        fig.text((cx + cw / 2) / width_px, 1 - (inner[1] + 6) / height_px,
                                 label[:30], fontsize=7, color=theme["muted"], ha="center",
                                 va="center")
            continue

        if kind == "table":
            rows_out, cols = [], []
            for t in p.get("targets", []):
                if t.get("hide") or not t.get("expr"):
                    continue
                res, err = prom.query(substitute(t["expr"], values), end)
                if err:
                    report["errors"].setdefault(title, []).append(err)
                for s in res:
                    m = {k: v for k, v in s["metric"].items() if k != "__name__"}
                    for k in m:
                        if k not in cols:
                            cols.append(k)
                    rows_out.append((m, float(s["value"][1])))
            if not rows_out:
                report["empty"].append(title)
                no_data()
                continue
            report["with_data"] += 1
            header_cols = cols + ["Value"]
            cwid = inner[2] / len(header_cols)
            hmax = max(3, int((cwid - 6) / 7.2))
            for j, c in enumerate(header_cols):
                c = c if len(c) <= hmax else c[: hmax - 1] + "…"
                fig.text((inner[0] + 4 + j * cwid) / width_px, 1 - (inner[1] + 6) / height_px,
                         c, fontsize=8, weight="bold", color=theme["text"], va="center")
            max_rows = int((inner[3] - 14) // 13)
            for i, (m, v) in enumerate(rows_out[:max_rows]):
                py = inner[1] + 20 + i * 13
                cells = [m.get(c, "") for c in cols] + [fmt(v, unit, decimals)]
                maxc = max(3, int((cwid - 6) / 5.2))
                for j, cell in enumerate(cells):
                    cell = str(cell)
                    cell = cell if len(cell) <= maxc else cell[: maxc - 1] + "…"
                    fig.text((inner[0] + 4 + j * cwid) / width_px, 1 - py / height_px,
                             cell, fontsize=7, color=theme["text"], va="center")
            if len(rows_out) > max_rows:
                fig.text((inner[0] + inner[2] - 4) / width_px, 1 - (inner[1] + 6) / height_px,
                         f"{len(rows_out)} rows, {max_rows} shown", fontsize=7,
                         color=theme["muted"], ha="right", va="center")
            continue

    fig.savefig(out, dpi=dpi, facecolor=theme["bg"])
    plt.close(fig)
    return report


# ---------------------------------------------------------------------- main


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dashboard", required=True, help="Grafana dashboard JSON")
    ap.add_argument("--out", required=True, help="PNG to write")
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--prometheus", help="URL of a running Prometheus")
    src.add_argument("--data", help="a kept TSDB directory to open with --prometheus-bin")
    ap.add_argument("--prometheus-bin", default=os.environ.get("KPS_PROMETHEUS_BIN"))
    ap.add_argument("--run", help="run.json of an e2e stack's Prometheus (time range)")
    ap.add_argument("--start", type=float, help="unix seconds (else from --run)")
    ap.add_argument("--end", type=float, help="unix seconds (else from --run)")
    ap.add_argument("--scrape-interval", default=None, help="default: --run's, else 15s")
    ap.add_argument("--var", action="append", default=[], help="name=value, over the dashboard's")
    ap.add_argument("--theme", choices=sorted(THEMES), default="dark")
    ap.add_argument("--width", type=int, default=1280, help="image width in pixels")
    ap.add_argument("--footer", default=None, help="text at the picture's foot (default: how it was made)")
    ap.add_argument("--source", default="", help="what produced the data, said in the default footer")
    ap.add_argument("--report", help="write what was drawn (panels with data, empty, errors) here")
    args = ap.parse_args()

    run = {}
    if args.run:
        with open(args.run) as f:
            run = json.load(f)
    start = args.start if args.start is not None else run.get("start")
    end = args.end if args.end is not None else run.get("end")
    if start is None or end is None:
        ap.error("the time range is unknown: give --run (of a stopped stack) or --start/--end")
    scrape = parse_dur(args.scrape_interval or run.get("scrape_interval") or "15s")
    # Grafana's step: the range over the panel's width in pixels (about
    # 500 here), never below the scrape interval.
    step = max(scrape, math.ceil((end - start) / 500))
    fixed = {}
    for kv in args.var:
        k, _, v = kv.partition("=")
        fixed[k] = v

    with open(args.dashboard, "rb") as f:
        raw = f.read()
    dash = json.loads(raw)
    digest = hashlib.sha256(raw).hexdigest()

    local = None
    try:
        if args.data:
            if not args.prometheus_bin:
                ap.error("--data needs --prometheus-bin (or KPS_PROMETHEUS_BIN)")
            local = LocalPrometheus(args.prometheus_bin, args.data)
            prom = Prom(local.url)
        else:
            prom = Prom(args.prometheus)
        build = prom.get("/api/v1/status/buildinfo")
        values = resolve_variables(dash, prom, fixed, start, end, step, scrape)
        version = build.get("version", "?")
        m = re.fullmatch(r"0\.([1-9])(\d\d)\.(\d+)", version)
        if m:  # built from the Go module, which tags Prometheus 3.MM.P as v0.3MM.P
            version = f"{m.group(1)}.{int(m.group(2))}.{m.group(3)} (Go module v{version})"
        elif re.fullmatch(r"v0\.\d+\.\d+", build.get("branch", "")):  # hack/prometheus.sh's
            version = f"{version} (Go module {build['branch']})"
        footer = args.footer or (
            f"Drawn by hack/dashboard-render.py (not Grafana) from Prometheus {version}"
            f" answering the queries of {os.path.basename(args.dashboard)} (sha256 {digest[:12]});"
            f" step {int(step)} s, "
            f"$__rate_interval {values['__rate_interval']}"
            + (f"\ndata: {args.source}" if args.source else "")
        )
        report = draw_dashboard(dash, prom, values, start, end, step, args.out, args.theme,
                                args.width, footer)
    finally:
        if local:
            local.stop()
    report["prometheus_version"] = build.get("version")
    report["dashboard"] = {"path": args.dashboard, "sha256": digest}
    report["variables"] = {k: v for k, v in values.items()}
    report["start"], report["end"], report["step"] = start, end, step
    text = json.dumps(report, indent=2)
    if args.report:
        with open(args.report, "w") as f:
            f.write(text + "\n")
    print(f"dashboard-render: {args.out}: {report['panels']} panels, {report['with_data']} with "
          f"data, {len(report['empty'])} empty, {len(report['errors'])} with query errors",
          file=sys.stderr)
    for title, errs in report["errors"].items():
        print(f"dashboard-render: query error in '{title}': {errs[0]}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    ensure_matplotlib()
    sys.exit(main())
