"""The A/B CI bot: run the registered proof with and without the change, report it on the PR.

The pipeline flows one way: ``collect`` (which registered files) -> ``runner`` (fresh processes,
both modes) -> ``case_result`` (one line per test on its result channel) -> ``results`` (the
model, results.json, JUnit) -> ``render`` and ``pr_body`` (pure text) -> ``publish`` (the
only module that talks to GitHub). Nothing here patches sglang; ``sglang_overlay`` does that.
"""
