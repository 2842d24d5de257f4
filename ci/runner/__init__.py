"""The A/B runner: it runs PR code and holds no token. It selects registered test files
(``collect``), prepares the two sides (``sides``), runs each file once per side (``launch``,
``child``), and hands what they reported to ``ci.evidence.judge`` (``run``)."""

from ci.errors import CiError


class RequestError(CiError):
    """Arguments that cannot describe a run (``ci run`` exits 2); the message names the argument."""
