"""The A/B runner: it runs PR code and holds no token. It selects registered test files
(``collect``), prepares the two sides (``sides``), runs each file once per side (``launch``,
``child``), and hands what they reported to ``ci.evidence.judge`` (``run``). Arguments that
cannot describe a run are a ``CiError`` (exit 2) naming the argument."""
