"""How the overlay reads ``SGLANG_OVERLAY_DISABLE``, ``_STRICT`` and ``SGLANG_PLUGINS``."""

import pytest

from sglang_overlay import PATCH_IDS, config

DSV4, FUSED_KV = PATCH_IDS[:2]


@pytest.mark.parametrize(
    "value, off",
    [
        (None, set()),
        ("0", set()),
        (" False ", set()),
        ("1", set(PATCH_IDS)),
        (" ALL ", set(PATCH_IDS)),
        (DSV4.upper(), {DSV4}),
        ("0001", {DSV4}),
        ("0001-dsv4", {DSV4}),
        (" 0001 ,0001-dsv4-sparse-prefill", {DSV4}),
        ("0003-fused-kv", {FUSED_KV}),
        ("0001,0003", {DSV4, FUSED_KV}),
    ],
)
def test_accepted_disable_values_turn_off_what_they_name_quietly(value, off):
    assert config.disabled_patches(value) == (frozenset(off), None)


@pytest.mark.parametrize(
    "value",
    ["banana", "2", "disable", "9999-other", f"{DSV4},typo", ",", " , ,", "none", "0001-dsv"],
)
def test_an_unrecognised_disable_value_turns_every_patch_off_and_is_named(value, monkeypatch):
    off, problem = config.disabled_patches(value)
    assert off == frozenset(PATCH_IDS) and repr(value) in problem
    monkeypatch.setenv(config.DISABLE_ENV, value)
    (named,) = config.problems()
    assert "every patch is off" in named and "accepted:" in named and DSV4 in named
    assert config.disabled_reason(FUSED_KV).endswith("every patch is off (fail safe)")


@pytest.mark.parametrize(
    "value, strict, problem",
    [(None, False, False), ("0", False, False), ("1", True, False), (" yes ", True, False),
     ("maybe", True, True)],
)  # fmt: skip
def test_strict_values_and_an_unrecognised_one_means_strict(value, strict, problem):
    on, why = config.strict_setting(value)
    assert (on, why is not None) == (strict, problem)


@pytest.mark.parametrize(
    "plugins, disabled",
    [("other_plugin", True), (" other , sglang_overlay ", False), ("", False)],
)
def test_the_overlay_honours_sglangs_plugin_allow_list(plugins, disabled, monkeypatch):
    monkeypatch.delenv(config.DISABLE_ENV, raising=False)
    monkeypatch.setenv(config.PLUGINS_ENV, plugins)
    reason = config.disabled_reason(DSV4)
    assert (reason is not None) == disabled
    assert not disabled or "SGLANG_PLUGINS='other_plugin' does not name sglang_overlay" in reason
