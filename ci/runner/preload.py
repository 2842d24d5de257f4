"""One side's preloading parent under ``ci run --preload``: it imports the expensive modules once
(never initialising CUDA), then forks one child per test file on request, and each child runs
the file exactly as ``ci/runner/file_process.py`` does in a fresh interpreter (its own session,
output pipe, result channel and record), so a file pays the import once per side, not once per
file. Like file_process it is the PR's process: it imports nothing of this project but its
sibling file_process.

``python ci/runner/preload.py --socket PATH --ready-fd N MODULE...`` imports MODULEs, writes one
JSON line on fd N (``{"preloaded": [...]}``, or ``{"error": ...}`` and exits: the runner then
starts each file in a fresh interpreter), and serves PATH: a request is one JSON object
(``{"path": FILE, "args": [...]}``) with three file descriptors (output, result channel, record)
passed alongside; the answer is ``{"pid": N}`` once the child leads its own session, then
``{"exit": CODE}`` (negative: the signal) after the child ended and its session was killed.
"""

import atexit
import json
import os
import selectors
import signal
import socket
import sys
import traceback

import file_process  # the sibling, found on sys.path[0] (this file's folder)

REQUEST_BYTES = 64 * 1024


def preload(modules) -> str | None:
    """Import ``modules``; why forking from this process is unsafe or useless, or None."""
    for name in modules:
        try:
            __import__(name)
        except BaseException as exc:  # a module that exits or raises: run fresh instead
            return f"preloading {name}: {type(exc).__name__}: {exc}"
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        return "CUDA was initialised while preloading: a forked child cannot use it"
    return None


def child(request: dict, fds, modules) -> None:
    """In the forked child: become ``python file_process.py ... FILE ARGS`` and never return."""
    code = 1
    try:
        output, channel, record = fds
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.dup2(output, 1)
        os.dup2(output, 2)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.set_wakeup_fd(-1)
        described = file_process.describe_process
        file_process.describe_process = lambda: {
            **described(),
            "preloaded": ",".join(modules),
        }
        argv = ["--results-fd", str(channel), "--environment-fd", str(record)]
        file_process.main([*argv, request["path"], *request["args"]])
        code = 0
    except SystemExit as exc:
        code = _exit_code(exc.code)
    except BaseException:
        traceback.print_exc()
    finally:
        # As the interpreter's own exit would: the file's atexit functions, flushed output.
        try:
            atexit._run_exitfuncs()
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code & 0xFF)


def _exit_code(code) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr, flush=True)
    return 1


def listen(path: str) -> socket.socket:
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(64)
    return server


def serve(server: socket.socket, modules) -> None:
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # a handler, so the wakeup fd hears it
    selector = selectors.DefaultSelector()
    selector.register(server, selectors.EVENT_READ, "accept")
    selector.register(wake_read, selectors.EVENT_READ, "child")
    answers = {}  # child pid -> the connection its exit goes to
    while True:
        for key, _ in selector.select():
            if key.data == "accept":
                connection, _ = server.accept()
                pid = fork_one(
                    connection, modules, [server, wake_read, wake_write, *answers.values()]
                )
                if pid is not None:
                    answers[pid] = connection
            else:
                os.read(wake_read, 4096)
            reap(answers)


def fork_one(connection, modules, others) -> int | None:
    """Fork a child for the request on ``connection``; its pid once it leads its session.
    ``others``: what the child must not hold (the socket, other files' connections)."""
    fds = []
    try:
        data, fds, _, _ = socket.recv_fds(connection, REQUEST_BYTES, 3)
        request = json.loads(data)
        if len(fds) != 3 or not isinstance(request.get("path"), str):
            raise ValueError("a request is {path, args} with three descriptors")
    except (OSError, ValueError, AttributeError) as exc:
        for fd in fds:
            os.close(fd)
        _answer(connection, {"error": str(exc)})
        connection.close()
        return None
    ready_read, ready_write = os.pipe()
    pid = os.fork()
    if pid == 0:
        for other in (connection, *others):
            if isinstance(other, int):
                os.close(other)
            else:
                other.close()
        os.close(ready_read)
        os.setsid()
        os.write(ready_write, b"!")  # the session exists: its group can be killed from now on
        os.close(ready_write)
        child(request, fds, modules)
    os.close(ready_write)
    os.read(ready_read, 1)
    os.close(ready_read)
    for fd in fds:
        os.close(fd)
    _answer(connection, {"pid": pid})
    return pid


def reap(answers: dict) -> None:
    """Every child that ended: kill what it left in its session, reap it, send its exit."""
    for pid in list(answers):
        try:
            ended = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            ended = None
        if ended is None:
            continue
        try:
            os.killpg(pid, signal.SIGKILL)  # the zombie keeps its id: the group is still its
        except ProcessLookupError:
            pass
        _, status = os.waitpid(pid, 0)
        connection = answers.pop(pid)
        _answer(connection, {"exit": os.waitstatus_to_exitcode(status)})
        connection.close()


def _answer(connection, message: dict) -> None:
    try:
        connection.sendall((json.dumps(message) + "\n").encode())
    except OSError:
        pass  # the runner stopped waiting (its timeout or Ctrl-C): it kills the group itself


def main(argv) -> None:
    if len(argv) < 4 or argv[0] != "--socket" or argv[2] != "--ready-fd":
        print("usage: preload.py --socket PATH --ready-fd N MODULE...", file=sys.stderr)
        sys.exit(2)
    path, ready, modules = argv[1], int(argv[3]), argv[4:]
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the runner ends this process's group
    why = preload(modules)
    # Listening before it says ready: the runner connects as soon as it reads the line.
    server = listen(path) if why is None else None
    with open(ready, "w") as channel:
        channel.write(json.dumps({"error": why} if why else {"preloaded": modules}) + "\n")
    if server is not None:
        serve(server, modules)


if __name__ == "__main__":
    main(sys.argv[1:])
