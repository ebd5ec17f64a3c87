"""Plot a results file of bench/driver.py: latency against sessions, both servers.

    python bench/plot.py [bench/results/latest.json] [-o bench/results/latency.png]

One panel per fan-out rate measured at several numbers of sessions (1, 10, 100
changes a second): delivery latency p50
(dashed) and p99 (solid) against the number of sessions on the shared view, for
pushengine and nchan; a last panel shows the memory per held long-poll.
Where the results hold streaming runs (SSE and WebSocket), a second figure
(``-streaming`` beside the first, or ``--streaming-out``) has one panel per
rate with the p99 of each server over each streaming transport (Socket.IO:
WebSocket only), and the memory per held stream.
Needs matplotlib (an optional bench dependency: pip install matplotlib).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from collections import defaultdict

HERE = os.path.dirname(os.path.abspath(__file__))
COLORS = {"pushengine": "#c0392b", "nchan": "#2471a3", "socketio": "#27ae60"}
STYLES = {"ws": ("-", "o", "WebSocket"), "sse": ("--", "s", "SSE"),
          "longpoll": (":", "^", "long-poll")}


def series(runs: list[dict], transport: str = "longpoll"):
    """{rate: {target: [(sessions, p50, p99, lost)]}} and {target: [(sessions, KB)]}
    of the runs over one transport."""
    fan: dict = defaultdict(lambda: defaultdict(list))
    held: dict = defaultdict(list)
    for r in runs:
        if "error" in r or r.get("transport", "longpoll") != transport:
            continue
        lg = r.get("loadgen", {})
        if r["group"] == "fanout":
            lat = lg.get("latency", {})
            if lat.get("p50") is not None:
                fan[r["rate"]][r["target"]].append(
                    (r["sessions"], lat["p50"], lat["p99"], lg.get("lost", 0)))
        elif r["group"] == "held" and r.get("bytes_per_session") is not None:
            held[r["target"]].append((r["sessions"], r["bytes_per_session"] / 1024))
    for rate in fan.values():
        for pts in rate.values():
            pts.sort()
    for pts in held.values():
        pts.sort()
    return fan, held


def plot(doc: dict, out: str) -> str:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fan, held = series(doc["runs"])
    # a rate measured at one number of sessions only makes no line: table only
    rates = sorted(r for r in fan if any(len(pts) > 1 for pts in fan[r].values()))
    panels = len(rates) + (1 if held else 0)
    if panels == 0:
        raise SystemExit("no fan-out or held runs in this results file")
    cols = 2 if panels > 1 else 1
    rows = (panels + cols - 1) // cols
    fig, grid = plt.subplots(rows, cols, figsize=(5.6 * cols, 4.3 * rows), squeeze=False)
    axes = [ax for row in grid for ax in row]
    for ax in axes[panels:]:
        ax.set_visible(False)
    for ax, rate in zip(axes, rates):
        for target, pts in sorted(fan[rate].items()):
            xs = [p[0] for p in pts]
            c = COLORS.get(target, "gray")
            ax.plot(xs, [p[2] for p in pts], "-o", color=c, label=f"{target} p99")
            ax.plot(xs, [p[1] for p in pts], "--s", color=c, alpha=0.7,
                    label=f"{target} p50")
            for x, _, p99, lost in pts:
                if lost:
                    ax.annotate(f"lost {lost:,}", (x, p99), textcoords="offset points",
                                xytext=(-70, 4), fontsize=7, color=c)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_title(f"fan-out, {rate:g} change{'s' if rate != 1 else ''}/s")
        ax.set_xlabel("sessions on one view")
        ax.set_ylabel("publish to receipt latency (s)")
        ax.axhline(1.0, color="gray", lw=0.6, ls=":")
        ax.grid(True, which="both", alpha=0.25)
        ax.legend(fontsize=7, loc="upper left")
    if held:
        ax = axes[len(rates)]
        for target, pts in sorted(held.items()):
            ax.plot([p[0] for p in pts], [p[1] for p in pts], "-o",
                    color=COLORS.get(target, "gray"), label=target)
        ax.axhline(40, color="gray", lw=0.6, ls=":", label="target 40 KB")
        ax.set_xscale("log")
        ax.set_ylim(bottom=0)
        ax.set_title("memory per held long-poll")
        ax.set_xlabel("idle long-polls held")
        ax.set_ylabel("KB of server RSS per session")
        ax.grid(True, which="both", alpha=0.25)
        ax.legend(fontsize=7)
    m = doc.get("machine", {})
    fig.suptitle(f"pushengine vs nginx+nchan, one process each — {m.get('cores', '?')} cores, "
                 f"Python {m.get('python', '?')}, Twisted {m.get('twisted', '?')}, "
                 f"nchan {m.get('nchan', '?')}", fontsize=10)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def plot_streaming(doc: dict, out: str) -> str | None:
    """p99 against sessions per rate, each server over SSE and WebSocket (the
    long-poll line beside them for reference), and memory per held stream."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by = {tr: series(doc["runs"], tr) for tr in ("ws", "sse", "longpoll")}
    rates = sorted({rate for tr in ("ws", "sse") for rate, per in by[tr][0].items()
                    if any(len(pts) > 1 for pts in per.values())})
    held = any(by[tr][1] for tr in ("ws", "sse"))
    panels = len(rates) + (1 if held else 0)
    if panels == 0:
        return None
    cols = 2 if panels > 1 else 1
    rows = (panels + cols - 1) // cols
    fig, grid = plt.subplots(rows, cols, figsize=(5.6 * cols, 4.3 * rows), squeeze=False)
    axes = [ax for row in grid for ax in row]
    for ax in axes[panels:]:
        ax.set_visible(False)
    for ax, rate in zip(axes, rates):
        for tr in ("ws", "sse", "longpoll"):
            ls, marker, label = STYLES[tr]
            for target, pts in sorted(by[tr][0].get(rate, {}).items()):
                if len(pts) < 2:
                    continue
                c = COLORS.get(target, "gray")
                ax.plot([p[0] for p in pts], [p[2] for p in pts], ls, marker=marker, color=c,
                        alpha=0.45 if tr == "longpoll" else 1.0,
                        label=f"{target} {label} p99")
                for x, _, p99, lost in pts:
                    if lost:
                        ax.annotate(f"lost {lost:,}", (x, p99), textcoords="offset points",
                                    xytext=(-70, 4), fontsize=7, color=c)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_title(f"fan-out to streams, {rate:g} change{'s' if rate != 1 else ''}/s")
        ax.set_xlabel("sessions on one view")
        ax.set_ylabel("p99 publish to receipt latency (s)")
        ax.axhline(0.5, color="gray", lw=0.6, ls=":")
        ax.grid(True, which="both", alpha=0.25)
        ax.legend(fontsize=6, loc="upper left")
    if held:
        ax = axes[len(rates)]
        for tr in ("ws", "sse", "longpoll"):
            ls, marker, label = STYLES[tr]
            for target, pts in sorted(by[tr][1].items()):
                ax.plot([p[0] for p in pts], [p[1] for p in pts], ls, marker=marker,
                        color=COLORS.get(target, "gray"),
                        alpha=0.45 if tr == "longpoll" else 1.0, label=f"{target} {label}")
        ax.axhline(20, color="gray", lw=0.6, ls=":", label="target 20 KB (streams)")
        ax.set_xscale("log")
        ax.set_ylim(bottom=0)
        ax.set_title("memory per held stream (long-poll for reference)")
        ax.set_xlabel("idle streams held")
        ax.set_ylabel("KB of server RSS per session")
        ax.grid(True, which="both", alpha=0.25)
        ax.legend(fontsize=6)
    m = doc.get("machine", {})
    peers = "nginx+nchan" + (", Socket.IO" if any(r.get("target") == "socketio"
                                                   for r in doc["runs"]) else "")
    fig.suptitle(f"SSE and WebSocket: pushengine vs {peers}, one process each — "
                 f"{m.get('cores', '?')} cores, Python {m.get('python', '?')}, "
                 f"nchan {m.get('nchan', '?')}"
                 + (f", socket.io {m['socketio']}" if m.get("socketio") else ""), fontsize=10)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("results", nargs="?", default=os.path.join(HERE, "results", "latest.json"))
    p.add_argument("-o", "--out", default=os.path.join(HERE, "results", "latency.png"))
    p.add_argument("--streaming-out", default="",
                   help="the SSE/WebSocket figure (default: OUT with -streaming)")
    a = p.parse_args(argv)
    with open(a.results) as f:
        doc = json.load(f)
    root, ext = os.path.splitext(a.out)
    streaming = plot_streaming(doc, a.streaming_out or f"{root}-streaming{ext}")
    try:
        print(plot(doc, a.out), file=sys.stderr)
    except SystemExit:
        if not streaming:
            raise
        print("(no long-poll runs to draw)", file=sys.stderr)
    if streaming:
        print(streaming, file=sys.stderr)


if __name__ == "__main__":
    main()
