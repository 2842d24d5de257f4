"""The maintainer tools: the patch series, the release watch and the benchmarks. They may use
``ci``; ``ci`` never imports them."""


class ToolError(Exception):
    """Bad input or a missing prerequisite: the message is the one line a user sees; each
    command's ``__main__`` prints it and exits 2, never with a traceback."""
