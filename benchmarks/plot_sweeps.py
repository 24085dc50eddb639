"""WER versus latency of several models' preset sweeps in one plot, from ``susurrus bench --json`` files.

    susurrus bench ../shared/data/dev --language en --sweep --json /tmp/tiny.json
    susurrus bench ../shared/data/dev --model base --language en --sweep --json /tmp/base.json
    python benchmarks/plot_sweeps.py tiny.en=/tmp/tiny.json base=/tmp/base.json -o docs/streaming_wer_latency.png
"""

from __future__ import annotations

import argparse
import json


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", metavar="LABEL=FILE", help="a label and a bench --json file")
    ap.add_argument("-o", "--output", required=True, help="image to write (png)")
    args = ap.parse_args()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for spec in args.runs:
        label, _, path = spec.partition("=")
        runs = json.load(open(path))
        xs, ys = [r["latency_mean"] for r in runs], [r["wer"] for r in runs]
        line, = ax.plot(xs, ys, "o-", label=f"{label} streaming")
        ax.axhline(runs[0]["offline_wer"], color=line.get_color(), ls="--", lw=1, label=f"{label} offline")
        for r, x, y in zip(runs, xs, ys):
            c = r["config"]
            lookahead = "auto" if c["lookahead_ms"] is None else c["lookahead_ms"]  # auto: set by the language
            ax.annotate(f"{c['chunk_ms']}/{lookahead}/{c['commit_margin_ms']}", (x, y),
                        textcoords="offset points", xytext=(4, 4), fontsize=7)
    ax.set_xlabel("mean word latency (s, audio time)")
    ax.set_ylabel("WER (%)")
    ax.set_title("WER versus latency, presets low / medium / high (chunk / look-ahead / margin ms)", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(args.output, dpi=120)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
