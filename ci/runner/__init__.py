"""The A/B runner: it runs PR code and holds no token. It selects registered test files,
prepares the two sides (overlay off and on, or two source trees), runs each file in its own
process per side, and hands what they reported to ``ci.evidence.judge``."""


class RequestError(ValueError):
    """Arguments that cannot describe a run (``ci run`` exits 2); the message names the argument."""
