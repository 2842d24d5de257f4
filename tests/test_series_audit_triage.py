"""``series audit --triage``: each grows-while-held site gets a call (worth fixing or not) and a
reason: a hand-read call on the exact target first, then one on its method, then the first
rule that fits the site's own facts, else "measure"."""

from tools.series import audit_triage
from tools.series.audit import Site

FUSED = "sglang/kernels/ops/speculative/fused_kv_materialize.py"
DSV4 = "sglang/srt/layers/attention/deepseek_v4_backend.py"


def _site(file="sglang/srt/x.py", qualname="W.grow", target="self.buf", **facts):
    values = {"allocator": "torch.empty", "grows_with": ("tokens",), "dtype": "torch.bfloat16"}
    values.update(facts)
    return Site(
        file,
        qualname,
        1,
        target,
        values["allocator"],
        "grows-while-held",
        values["grows_with"],
        "",
        values["dtype"],
    )


def test_a_hand_read_site_gets_its_call():
    call, source = audit_triage.triage(
        _site(FUSED, "FusedKVMaterializeHelper._ensure_workspace", "self._k_workspace")
    )
    assert (call.worth, source) == ("yes", "read") and "9 units" in call.reason


def test_a_call_on_the_target_wins_over_one_on_its_method():
    method = "DeepseekV4AttnBackend._prepare_q8kv8_q_and_sink"
    assert audit_triage.triage(_site(DSV4, method, "self._q8kv8_qpad_buf"))[0].worth == "next"
    assert audit_triage.triage(_site(DSV4, method, "self._q8kv8_attn_sink_pad"))[0].worth == "no"


def test_rules_read_the_sites_own_facts_in_order():
    cases = {
        _site("sglang/test/unit/t.py", dtype="torch.int32"): "test code",
        _site(qualname="B.init_cuda_graph_state", dtype="torch.int32"): "graph set-up",
        _site(dtype="torch.int32"): "index metadata",
        _site(allocator="torch.arange", dtype=""): "index metadata",
        _site(grows_with=()): "no request dimension",
        _site(qualname="P._create_buffers"): "set-up by name",
    }
    for site, rule in cases.items():
        call, source = audit_triage.triage(site)
        assert (call.worth, source) == ("no", rule), site


def test_a_float_buffer_sized_by_requests_and_not_read_is_to_measure():
    call, source = audit_triage.triage(_site(grows_with=("batch", "capacity")))
    assert (call.worth, source) == ("measure", "unread")
    assert "batch, capacity" in call.reason


def test_render_lists_grows_while_held_only_worth_first_with_counts():
    sites = [
        _site(dtype="torch.int32"),
        _site(FUSED, "FusedKVMaterializeHelper._ensure_workspace", "self._k_workspace"),
        Site("sglang/srt/y.py", "W.__init__", 1, "self.b", "torch.empty", "init-only", (), ""),
    ]
    text = audit_triage.render(sites)
    assert text.startswith("2 grows-while-held sites: 1 yes, 0 next, 0 measure, 1 no.")
    rows = [
        line for line in text.splitlines() if line.startswith("| yes") or line.startswith("| no")
    ]
    assert [r.split(" | ")[0] for r in rows] == ["| yes", "| no"]
    assert "W.__init__" not in text
