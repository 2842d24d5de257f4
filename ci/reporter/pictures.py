"""One PNG per regression case measured on both sides: each side's peak memory, drawn with
matplotlib's Agg backend (without matplotlib, none)."""

import os
import re

from ci.evidence.model import MODES, Results

FOLDER = "pictures"
MAX_PICTURES = 30  # a results.json may list thousands of regressions; each costs ~0.1 s


def draw_all(results: Results, out_dir: str) -> dict:
    """Draw each regression case measured on both sides; case key -> path under ``out_dir``."""
    cases = [c for c in results.cases if c.kind == "regression" and None not in
             [getattr(c.modes.get(m), "peak_mib", None) for m in MODES]][:MAX_PICTURES]  # fmt: skip
    if not cases:
        return {}
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except (ImportError, OSError):  # not installed, or a font cache it cannot write here
        return {}
    drawn = {}
    os.makedirs(os.path.join(out_dir, FOLDER), exist_ok=True)
    for case in cases:
        rel = f"{FOLDER}/{re.sub(r'[^A-Za-z0-9_.-]+', '_', case.test)[:120]}.png"
        try:
            _draw(plt, results, case, os.path.join(out_dir, rel))
        except (ValueError, TypeError):  # PR code's name: bad mathtext, a lone surrogate
            plt.close("all")
            continue
        drawn[case.key] = rel
    return drawn


def _draw(plt, results, case, path) -> None:
    peaks = [case.modes[m].peak_mib for m in MODES]
    fig, ax = plt.subplots(figsize=(5.5, 3), dpi=90)
    for x, (mode, peak) in enumerate(zip(MODES, peaks, strict=True)):
        ax.bar(x, peak, 0.5, color="#c44e52" if mode == "unmodified" else "#4c72b0")
        word = case.modes[mode].outcome.value
        ax.annotate(f"{word}, peak {peak:.1f} MiB", (x, peak), ha="center", va="bottom", fontsize=7)
    ax.set_xticks(range(len(MODES)))
    ax.set_xticklabels([results.label(m).replace("$", "") for m in MODES], fontsize=7)
    memory = "CUDA memory allocated" if results.backend == "cuda" else "live CPU memory"
    ax.set_ylabel(f"{memory} at the peak (MiB)", fontsize=7)
    ax.set_ylim(0, max(peaks) * 1.3 + 1)
    ax.set_title(case.test.split(".")[-1][:80].replace("_", " ").replace("$", ""), fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
