"""The triage of every grows-while-held site of sglang 0.5.23 in docs/."""

import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[1] / "docs/grow-while-held-audit-0.5.23.md"
WORTH = ("yes", "next", "measure", "no")
FUSED = "sglang/kernels/ops/speculative/fused_kv_materialize.py"
DSV4 = "sglang/srt/layers/attention/deepseek_v4_backend.py"
DSA = "sglang/srt/layers/attention/dsa_backend.py"


def _rows() -> list:
    """(worth, file, qualname, target, source, reason) of each row of the triage table."""
    rows = []
    for line in DOC.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        if line.startswith("| ") and cells[0] in WORTH:
            worth, where, qualname, target, _grows, _dtype, source, reason = cells
            rows.append((worth, where.rsplit(":", 1)[0], qualname.strip("`"), target.strip("`"),
                         source, reason))  # fmt: skip
    return rows


def test_the_counts_line_matches_the_rows_and_worth_fixing_comes_first():
    rows = _rows()
    said = re.search(r"^(\d+) grows-while-held sites: (.+)\.$", DOC.read_text(), re.M)
    counts = dict(reversed(part.split(" ")) for part in said.group(2).split(", "))
    assert int(said.group(1)) == len(rows) == sum(int(n) for n in counts.values())
    assert {w: sum(r[0] == w for r in rows) for w in WORTH} == {w: int(counts[w]) for w in WORTH}
    order = [WORTH.index(r[0]) for r in rows]
    assert order == sorted(order)


def test_a_hand_read_site_gets_its_call_and_a_call_on_the_target_wins_over_its_method():
    calls = {(r[1], r[2], r[3]): r for r in _rows()}
    fused = calls[(FUSED, "FusedKVMaterializeHelper._ensure_workspace", "self._k_workspace")]
    assert (fused[0], fused[4]) == ("yes", "read") and "9 units" in fused[5]
    method = "DeepseekV4AttnBackend._prepare_q8kv8_q_and_sink"
    assert calls[(DSV4, method, "self._q8kv8_qpad_buf")][0] == "yes"
    assert calls[(DSV4, method, "self._q8kv8_attn_sink_pad")][0] == "no"
    # fix 0011: the born-fp8 q buffer and its sentinel, two methods of one patch
    for method, target in (
        ("q8kv8_acquire_born_q_buffer", "self._q8kv8_born_q_buf"),
        ("q8kv8_born_q_sentinel", "self._q8kv8_born_q_sentinel"),
    ):
        row = calls[(DSA, f"DeepseekSparseAttnBackend.{method}", target)]
        assert row[0] == "yes" and "patches/0011" in row[5]


def test_every_call_says_where_it_comes_from_and_why():
    rules = {"read", "test code", "graph set-up", "index metadata", "no request dimension",
             "set-up by name", "unread"}  # fmt: skip
    for worth, where, qualname, target, source, reason in _rows():
        assert source in rules and reason, (where, qualname, target)
        assert worth != "measure" or source in ("read", "unread"), (where, qualname)
