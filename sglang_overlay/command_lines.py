"""Which command lines are sglang processes, read as the Python interpreter reads its options
(README.md, "Running processes"). Pure functions of ``argv``; nothing here looks at a process.
"""

import os

# Interpreter options that take a value, attached (-Wignore) or as the next word (-W ignore).
_VALUED = frozenset("WX")
_VALUED_LONG = frozenset({"--check-hash-based-pycs"})


def runs_sglang(argv: "list[str]") -> bool:
    """Whether a command line is an sglang process: a console script (``sglang serve``),
    ``python [options] -m sglang...``, ``python [options] path/to/sglang*``, or a process sglang
    renamed (``sglang::scheduler_TP0``)."""
    if not argv:
        return False
    if _sglang_name(os.path.basename(argv[0])):
        return True
    if not os.path.basename(argv[0]).startswith("python"):
        return False
    kind, target = python_target(argv[1:])
    if kind == "module":
        return target.split(".")[0] == "sglang"
    return kind == "script" and _sglang_name(os.path.basename(target))


def python_target(words: "list[str]") -> "tuple[str, str]":
    """What ``python WORDS`` runs: ("module", name), ("script", path) or ("other", "") (a
    ``-c`` program, stdin, nothing). Flags may be combined (``-SW ignore``, ``-OOm mod``)."""
    i = 0
    while i < len(words):
        word = words[i]
        following = words[i + 1] if i + 1 < len(words) else ""
        if word == "--":  # the end of the options: a script follows
            return ("script", following) if following else ("other", "")
        if word.startswith("--"):
            i += 2 if word in _VALUED_LONG else 1
            continue
        if word == "-" or not word.startswith("-"):
            return ("other", "") if word == "-" else ("script", word)
        for position, flag in enumerate(word[1:], 2):
            attached = word[position:]
            if flag == "m":
                return "module", attached or following
            if flag == "c":
                return "other", ""
            if flag in _VALUED:
                i += 0 if attached else 1
                break
        i += 1
    return "other", ""


def _sglang_name(name: str) -> bool:
    return name.startswith("sglang") and not name.startswith(("sglang-overlay", "sglang_overlay"))
