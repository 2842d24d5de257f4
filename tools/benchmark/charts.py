"""Pictures for BENCHMARKS.md, drawn from a results dict with matplotlib's Agg backend.

``timeline_points`` turns a PyTorch memory snapshot into (milliseconds, allocated MiB) steps,
so the results JSON keeps the curve and the pictures can be redrawn without a GPU.
"""

import pickle

MIB = float(1 << 20)


def timeline_points(snapshot_path: str) -> list:
    """Allocated bytes after each alloc / free event of a ``_dump_snapshot`` pickle (GPU 0)."""
    with open(snapshot_path, "rb") as handle:
        snapshot = pickle.load(handle)
    events = (snapshot.get("device_traces") or [[]])[0]
    allocated, points, start = 0, [], None
    for i, event in enumerate(events):
        action = event.get("action")
        if action == "alloc":
            allocated += event["size"]
        elif action == "free_completed":
            allocated -= event["size"]
        else:
            continue
        stamp = event.get("time_us")
        t = i if stamp is None else stamp / 1000.0
        start = t if start is None else start
        points.append([round(t - start, 3), round(allocated / MIB, 3)])
    return points


def timeline(row: dict) -> dict:
    """The snapshots of a peaks row (taken out of it) as the report's ``timeline``."""
    curves = {"new_mib": row["new_mib"]}
    for mode in ("unmodified", "change"):
        snapshot = row[mode].pop("snapshot", None)
        try:
            curves[mode] = timeline_points(snapshot) if snapshot else []
        except Exception as exc:  # the picture is optional, the peaks are not
            curves[f"{mode}_error"] = f"{type(exc).__name__}: {exc}"[:300]
    return curves


def draw(report: dict, name: str, results_dir) -> None:
    """The report's pictures, into ``results_dir``; their file names go into ``charts``."""
    drawn = report.setdefault("charts", {})
    if "peaks" in report:
        drawn["peaks"] = f"{name}-peaks.png"
        title = f"replacement peak / new size ({name})"
        peak_figure(report["peaks"], title).savefig(results_dir / drawn["peaks"])
    if report.get("timeline"):
        drawn["timeline"] = f"{name}-timeline.png"
        title = f"64 -> 96 MiB bf16 replacement ({name})"
        timeline_figure(report["timeline"], title).savefig(results_dir / drawn["timeline"])


def peak_figure(peaks: dict, title: str):
    from matplotlib.figure import Figure  # optional: without it the run records charts as failed

    names = list(peaks["transitions"])
    rows = [peaks["transitions"][n] for n in names]
    series = [
        ("unmodified", [r["unmodified"]["ratio"]["median"] for r in rows], "#c44e52"),
        ("change", [r["change"]["ratio"]["median"] for r in rows], "#4c72b0"),
        ("limit: max(old, new) / new", [r["limit_ratio"] for r in rows], "#999999"),
    ]
    fig = Figure(figsize=(8, 3.4), dpi=90)
    ax = fig.subplots()
    width = 0.27
    for i, (label, values, color) in enumerate(series):
        xs = [x + (i - 1) * width for x in range(len(names))]
        ax.bar(xs, values, width, label=label, color=color)
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels([n.replace("_", " ") for n in names], fontsize=7, rotation=12, ha="right")
    ax.set_ylabel("peak / new size")
    ax.axhline(1.0, color="black", linewidth=0.6, label="1.0: peak = the new buffer alone")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7, loc="upper right")
    fig.tight_layout()
    return fig


def timeline_figure(timeline: dict, title: str):
    from matplotlib.figure import Figure

    modes = [m for m in ("unmodified", "change") if timeline.get(m)]
    cap, new = timeline.get("cap_mib", 128), timeline["new_mib"]
    fig = Figure(figsize=(8, 3), dpi=90)
    axes = fig.subplots(1, len(modes), sharey=True, squeeze=False)
    for ax, mode in zip(axes[0], modes, strict=True):
        ts = [p[0] for p in timeline[mode]]
        mib = [p[1] for p in timeline[mode]]
        color = "#c44e52" if mode == "unmodified" else "#4c72b0"
        ax.step(ts, mib, where="post", color=color, label=f"{mode}: allocated")
        for y, color, style, label in (
            (new, "#999999", "--", f"target: {new:g} MiB, the new buffer alone"),
            (cap, "black", ":", f"cap: {cap:g} MiB, the test's budget"),
        ):
            ax.axhline(y, color=color, linestyle=style, linewidth=0.8, label=label)
        ax.set_title(f"{mode}: peak {max(mib, default=0):.0f} MiB", fontsize=9)
        ax.set_xlabel("ms since first allocation", fontsize=8)
        ax.set_ylim(0, max(cap, *mib) * 1.5)  # room above the lines for the legend
        ax.legend(fontsize=6, loc="upper left")
    axes[0][0].set_ylabel("allocated MiB")
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    return fig
