"""One PNG per regression case: the allocator unmodified vs with the change, from the evidence.

For drawing only, at the edge of ``ci run``: it reads what the registered test measured (the
``DSV4_WORKSPACE_CASE`` records in results.json: the cap, the outcome, the peak where the device
measures one, the size an out-of-memory allocation asked for) and draws it with matplotlib's
Agg backend, the way ``benchmark/charts.py`` draws the benchmarks. Nothing is estimated: a value
the run did not measure is labelled as not measured. Without matplotlib it draws nothing.
"""

import os
import re

from ci.results import Results

FOLDER = "pictures"
_ASKED = re.compile(r"allocate (?:(\d+) bytes|([\d.]+) ([MG])iB)", re.IGNORECASE)


def asked_mib(detail) -> float | None:
    """The size an out-of-memory allocation asked for, as the allocator's message states it."""
    match = _ASKED.search(str(detail or ""))
    if not match:
        return None
    if match[1]:
        return int(match[1]) / float(1 << 20)
    return float(match[2]) * (1024 if match[3].upper() == "G" else 1)


def measured(outcome) -> dict:
    """Per mode: outcome word, cap, peak and asked-for MiB, None where not measured."""
    evidence = outcome.evidence or [{}]
    record = max(evidence, key=lambda e: e.get("budget_mib") or 0)
    oom = any(e.get("outcome") == "oom" for e in evidence)
    return {
        "word": "OOM" if oom else outcome.outcome,
        "cap": outcome.budget_mib,
        "peak": outcome.peak_mib,
        "asked": asked_mib(record.get("detail")) if oom else None,
    }


def file_name(case_id: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", case_id)[:120] + ".png"


def draw_all(results: Results, out_dir: str) -> dict:
    """Draw each regression case; returns case key -> path relative to ``out_dir``."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return {}
    drawn = {}
    for case in results.cases:
        if case.kind != "regression":
            continue
        rel = f"{FOLDER}/{file_name(case.case_id)}"
        os.makedirs(os.path.join(out_dir, FOLDER), exist_ok=True)
        try:
            _draw(plt, case, os.path.join(out_dir, rel))
        except Exception:  # names and numbers are PR code's output: mathtext, a lone surrogate
            plt.close("all")  # no picture for this case; its row in the report stays
            continue
        drawn[case.key] = rel
    return drawn


def _draw(plt, case, path) -> None:
    modes = [m for m in ("unmodified", "change") if m in case.modes]
    facts = {m: measured(case.modes[m]) for m in modes}
    fig, ax = plt.subplots(figsize=(5.5, 3), dpi=90)
    cap = max((f["cap"] or 0 for f in facts.values()), default=0)
    for x, mode in enumerate(modes):
        f = facts[mode]
        color = "#c44e52" if mode == "unmodified" else "#4c72b0"
        top = f["peak"] if f["peak"] is not None else f["cap"] or 0
        if f["peak"] is not None:
            ax.bar(x, f["peak"], 0.5, color=color)
            label = f"{f['word']}\npeak {f['peak']:.1f} MiB"
            if f["asked"] is not None:
                label += f", asking {f['asked']:.0f} MiB more"
        elif f["word"] == "OOM":
            ax.bar(x, top, 0.5, color="white", edgecolor=color, hatch="//")
            asked = f"\nasking {f['asked']:.0f} MiB more" if f["asked"] is not None else ""
            label = f"OOM at the cap{asked}"
        else:
            ax.bar(x, top, 0.5, color="white", edgecolor=color, linestyle="--")
            label = f"{f['word']} under the cap\n(peak not measured here)"
        ax.annotate(label, (x, top * 1.05 + 2), ha="center", va="bottom", fontsize=7)
    if cap:
        ax.axhline(cap, color="black", linestyle=":", linewidth=0.8)
        ax.text(-0.55, cap * 0.99, f"cap {cap:g} MiB", fontsize=7, va="top", ha="left")
    ax.set_xticks(range(len(modes)))
    ax.set_xticklabels(["unmodified main" if m == "unmodified" else "this change" for m in modes])
    ax.set_ylabel("MiB")
    ax.set_ylim(0, max(cap, *(f["peak"] or 0 for f in facts.values())) * 1.45 + 1)
    ax.set_xlim(-0.6, len(modes) - 0.4)
    ax.set_title(case.case_id.split(".")[-1].replace("_", " "), fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
