"""DSV4 sparse-prefill workspace: replacing the scratch must not need old + new memory.

Each capped case runs in its own process under an isolated allocator budget, so the
cap cannot leak into other tests or a resident server. This process imports the workspace
module once and forks one child per case. A CPU child caps its address space with
``RLIMIT_AS`` at its current size plus the budget, with one thread. A CUDA child creates
its own CUDA context and caps the caching allocator with
``torch.cuda.set_per_process_memory_fraction``; that needs a parent without a CUDA context,
so where importing sglang created one, every CUDA case is a fresh interpreter instead.
The cases use the workspace class exactly as this process imports it, so the file runs
unchanged in an upstream checkout and against an installed sglang.

Run: ``python test/registered/unit/layers/test_dsv4_sparse_prefill_workspace.py -v``
"""

import importlib
import json
import os
import select
import signal
import subprocess
import sys
import time
import types
import unittest
from concurrent.futures import Future, ThreadPoolExecutor

from sglang.test.ci.ci_register import register_cpu_ci, register_cuda_ci

register_cuda_ci(est_time=60, stage="base-b", runner_config="1-gpu-small")
register_cpu_ci(est_time=5, stage="base-a", runner_config="cpu")

WORKSPACE_MODULE = "sglang.srt.layers.attention.dsv4.sparse_prefill_utils"
WORKSPACE_CLASSES = ("SparsePrefillKVBuffer", "SparsePrefillWorkspace")
MIB = 1 << 20
ALLOCATOR_CAP_MIB = 128
PEAK_LIMIT_MIB = 100
CHILD_TIMEOUT_S = 300
RESULT_PREFIX = "DSV4_WORKSPACE_CASE "

# Rows are (num_tokens, 1, 512): 1 KiB per token in bf16, 512 B in fp8.
ROWS_64_MIB_BF16 = 65536
ROWS_96_MIB_BF16 = 98304
ROWS_16_MIB_BF16 = 16384

# Each case is a tuple of (num_tokens, dtype name) requests made in order. Read-only:
# another sequence is run by passing its steps to run_case.
TRANSITIONS = types.MappingProxyType(
    {
        "grow_bf16_64_to_96_mib": (
            (ROWS_64_MIB_BF16, "bfloat16"),
            (ROWS_96_MIB_BF16, "bfloat16"),
        ),
        "replace_fp8_48_with_bf16_96_mib": (
            (ROWS_96_MIB_BF16, "float8_e4m3fn"),
            (ROWS_96_MIB_BF16, "bfloat16"),
        ),
        "shrink_by_dtype_bf16_96_to_fp8_48_mib": (
            (ROWS_96_MIB_BF16, "bfloat16"),
            (ROWS_96_MIB_BF16, "float8_e4m3fn"),
        ),
    }
)
CHECKS = (
    "retained_view_keeps_values",
    "smaller_request_reuses_storage",
    "failed_replacement_keeps_head_consistent",
)
HEAD_KEY = ("k_cache", 0x1000, "indices", 0x2000)


# ------------------------------------------------------------------------------------
# Child side: one case in this process, under the allocator cap; one JSON result line.
# ------------------------------------------------------------------------------------


def workspace_class(module):
    for name in WORKSPACE_CLASSES:
        cls = getattr(module, name, None)
        if isinstance(cls, type):
            return cls
    raise unittest.SkipTest(f"{WORKSPACE_MODULE} has none of {WORKSPACE_CLASSES}")


def takes_dtype(cls) -> bool:
    import inspect

    return "dtype" in inspect.signature(cls.get).parameters


def _request(workspace, num_tokens, dtype):
    if dtype is None:
        return workspace.get(num_tokens)
    return workspace.get(num_tokens, dtype)


def _address_space_bytes() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmSize in /proc/self/status")


def _cap_allocator(torch, device: str, budget_mib: int) -> None:
    if device == "cuda":
        torch.cuda.init()
        total = torch.cuda.get_device_properties(0).total_memory
        torch.cuda.empty_cache()
        torch.cuda.set_per_process_memory_fraction(budget_mib * MIB / total, 0)
        torch.cuda.reset_peak_memory_stats()
        return
    import resource

    torch.set_num_threads(1)
    torch.empty(1).add_(1)  # let torch map whatever it maps on first use before the cap
    limit = _address_space_bytes() + budget_mib * MIB
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def _is_out_of_memory(exc: BaseException) -> bool:
    text = str(exc)
    return (
        isinstance(exc, MemoryError)
        or type(exc).__name__ == "OutOfMemoryError"
        or ("can't allocate memory" in text or "out of memory" in text)
    )


def run_case(case: str, device: str, budget_mib: int, steps=None) -> dict:
    """Run one case in this process under the allocator cap; return its result.

    ``steps`` runs that request sequence as a transition named ``case`` instead of a
    case of this file (for callers that measure other sequences)."""
    import torch

    if steps is None:
        steps = TRANSITIONS.get(case)

    module = importlib.import_module(WORKSPACE_MODULE)
    cls = workspace_class(module)
    with_dtype = takes_dtype(cls)
    _cap_allocator(torch, device, budget_mib)
    result = {
        "case": case,
        "device": device,
        "budget_mib": budget_mib,
        "class": cls.__name__,
    }
    workspace = cls(torch.device(device))
    try:
        if steps is not None:
            if not with_dtype and any(d != "bfloat16" for _, d in steps):
                result.update(
                    outcome="skip", detail=f"{cls.__name__}.get has no dtype parameter"
                )
                return result
            for num_tokens, dtype_name in steps:
                dtype = getattr(torch, dtype_name) if with_dtype else None
                rows = _request(workspace, num_tokens, dtype)
                expected = getattr(torch, dtype_name)
                assert (
                    rows.shape == (num_tokens, 1, rows.shape[2])
                    and rows.dtype == expected
                ), f"got {tuple(rows.shape)} {rows.dtype}"
                del rows
        elif case == "retained_view_keeps_values":
            view = _request(
                workspace, ROWS_16_MIB_BF16, torch.bfloat16 if with_dtype else None
            )
            rows = torch.arange(view.shape[0], device=device, dtype=torch.float32) % 251
            view.copy_(rows.reshape(-1, 1, 1).expand_as(view))
            expected = view.clone()
            grown = _request(
                workspace, 2 * ROWS_16_MIB_BF16, torch.bfloat16 if with_dtype else None
            )
            grown.fill_(-1)
            result["views_alias"] = grown.data_ptr() == view.data_ptr()
            result["view_unchanged"] = bool(torch.equal(view, expected))
        elif case == "smaller_request_reuses_storage":
            bf16 = torch.bfloat16 if with_dtype else None
            big = _request(workspace, ROWS_96_MIB_BF16, bf16)
            big_ptr = big.data_ptr()
            del big
            small = _request(workspace, ROWS_64_MIB_BF16, bf16)
            result["same_storage"] = small.data_ptr() == big_ptr
            result["small_shape"] = list(small.shape)
        elif case == "failed_replacement_keeps_head_consistent":
            if not hasattr(cls, "get_with_head"):
                result.update(
                    outcome="skip", detail=f"{cls.__name__} does not track a head"
                )
                return result
            rows, _ = workspace.get_with_head(ROWS_64_MIB_BF16, HEAD_KEY)
            before_ptr = rows.data_ptr()
            del rows
            try:
                # 192 MiB never fits the cap.
                workspace.get_with_head(2 * ROWS_96_MIB_BF16, HEAD_KEY)
                result["replacement_raised"] = False
            except Exception as exc:
                if not _is_out_of_memory(exc):
                    raise
                result["replacement_raised"] = True
            result["buffer_released"] = workspace._buffer is None
            rows, filled = workspace.get_with_head(ROWS_16_MIB_BF16, HEAD_KEY)
            result["head_filled_after"] = filled
            result["same_storage_after"] = rows.data_ptr() == before_ptr
        else:
            raise ValueError(f"unknown case {case!r}")
        result["outcome"] = "pass"
    except Exception as exc:
        if not _is_out_of_memory(exc):
            raise
        result["outcome"] = "oom"
        result["detail"] = f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
    if device == "cuda":
        result["peak_allocated_mib"] = torch.cuda.max_memory_allocated() / MIB
    return result


# ------------------------------------------------------------------------------------
# Parent side: one fresh, isolated process per case.
# ------------------------------------------------------------------------------------


def isolated_env(env=None) -> dict:
    """``env`` (default: this one) for a capped child: one thread, one malloc arena."""
    child_env = dict(os.environ if env is None else env)
    # Threads and malloc arenas would otherwise eat the CPU address-space budget.
    child_env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", MALLOC_ARENA_MAX="1")
    return child_env


def parse_result(stdout: str):
    """The result a capped child printed on ``stdout`` (a dict), or None."""
    for line in stdout.splitlines():
        if line.startswith(RESULT_PREFIX):
            return json.loads(line[len(RESULT_PREFIX) :])
    return None


def launch_case(
    case: str, device: str, budget_mib: int = ALLOCATOR_CAP_MIB, env=None
) -> dict:
    """Run one case in a fresh interpreter under the allocator cap; return its result.

    It pays the whole import of the workspace module, so it is for CUDA cases of a process
    that holds a CUDA context (a forked child could not create its own) and for callers
    that need another environment."""
    command = [
        sys.executable,
        os.path.abspath(__file__),
        "--case",
        case,
        "--device",
        device,
        "--budget-mib",
        str(budget_mib),
    ]
    proc = subprocess.run(
        command,
        env=isolated_env(env),
        capture_output=True,
        text=True,
        timeout=CHILD_TIMEOUT_S,
    )
    result = parse_result(proc.stdout)
    if result is not None:
        return result
    raise AssertionError(
        f"case {case} on {device} exited {proc.returncode} without a result\n"
        f"{proc.stderr[-4000:]}"
    )


def preload_for_fork() -> None:
    """Import torch and the workspace module once, in the process that forks the cases,
    so no case pays the import; one intra-op thread, so the children have none.
    """
    import torch

    importlib.import_module(WORKSPACE_MODULE)
    torch.set_num_threads(1)


def cuda_forks_cleanly() -> bool:
    """Whether a child forked from this preloaded process can create a CUDA context.

    Not when this process holds one (importing sglang 0.5.23 creates it), nor when fork
    was poisoned by asking the CUDA runtime for devices, as ``torch.cuda.is_available()``
    does unless ``PYTORCH_NVML_BASED_CUDA_CHECK=1``: torch marks such a child, so a child
    that exits at once tells."""
    import torch

    preload_for_fork()
    if torch.cuda.is_initialized():
        return False
    pid = os.fork()
    if pid == 0:
        bad_fork = True  # if torch cannot say, the cases start fresh interpreters
        try:
            bad_fork = torch.cuda._is_in_bad_fork()
        finally:
            os._exit(1 if bad_fork else 0)  # never run this process's tests twice
    _, status = os.waitpid(pid, 0)
    return os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0


def fork_capped_case(case: str, device: str, budget_mib: int = ALLOCATOR_CAP_MIB):
    """Fork this preloaded process; the child caps its own allocator (and on CUDA creates
    its own context), runs one case and writes its result to a pipe. Returns (pid, the
    pipe's read end)."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid:
        os.close(write_end)
        return pid, read_end
    status = 0
    try:
        os.close(read_end)
        try:
            payload = run_case(case, device, budget_mib)
        except BaseException:
            import traceback

            payload, status = {"error": traceback.format_exc()[-4000:]}, 1
        data = json.dumps(payload).encode()
        while data:
            data = data[os.write(write_end, data) :]
    finally:
        os._exit(status)  # never run the parent's atexit handlers or flush its buffers


def collect_forked_case(
    case: str, device: str, pid: int, read_end: int, deadline: float
) -> dict:
    """Wait for one forked case's result; kill it past ``deadline`` (time.monotonic)."""
    chunks = []
    with os.fdopen(read_end, "rb", buffering=0) as pipe:
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([pipe], [], [], left)[0]:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                raise AssertionError(
                    f"case {case} on {device} ran past {CHILD_TIMEOUT_S}s"
                )
            chunk = pipe.read(65536)
            if not chunk:
                break
            chunks.append(chunk)
    _, status = os.waitpid(pid, 0)
    try:
        result = json.loads(b"".join(chunks))
    except ValueError:
        raise AssertionError(
            f"case {case} on {device} ended without a result (wait status {status})"
        ) from None
    if "error" in result:
        raise AssertionError(f"case {case} on {device} raised\n{result['error']}")
    return result


def run_forked_cases(budgets, device: str) -> dict:
    """Every (case, budget) in its own forked child, all at once; {key: result}."""
    preload_for_fork()
    deadline = time.monotonic() + CHILD_TIMEOUT_S
    children = {
        (case, budget): fork_capped_case(case, device, budget)
        for case, budget in budgets
    }
    return {
        key: collect_forked_case(key[0], device, pid, read_end, deadline)
        for key, (pid, read_end) in children.items()
    }


def case_budgets(device: str):
    """Every (case, budget) the tests below read. On CPU the address-space cap is the
    peak measurement, so the grow also runs under the tighter budget."""
    budgets = [(case, ALLOCATOR_CAP_MIB) for case in (*TRANSITIONS, *CHECKS)]
    if device == "cpu":
        budgets.append(("grow_bf16_64_to_96_mib", PEAK_LIMIT_MIB))
    return budgets


class _WorkspaceReleaseFirstCases:
    """The cases for one device; subclasses set DEVICE and call start_cases()."""

    DEVICE = "cpu"

    @classmethod
    def start_cases(cls):
        # Each case is its own isolated process, forked from this one after one import.
        # A CUDA child cannot create a context once this process holds one, so then every
        # CUDA case is a fresh interpreter, as many at once as there are cores, and a test
        # waits for its own.
        budgets = case_budgets(cls.DEVICE)
        if cls.DEVICE == "cpu" or cuda_forks_cleanly():
            cls._results = run_forked_cases(budgets, cls.DEVICE)
            return
        cls._pool = ThreadPoolExecutor(
            max_workers=max(1, min(len(budgets), os.cpu_count() or 1))
        )
        cls._results = {
            key: cls._pool.submit(launch_case, key[0], cls.DEVICE, key[1])
            for key in budgets
        }

    @classmethod
    def tearDownClass(cls):
        if getattr(cls, "_pool", None) is not None:
            cls._pool.shutdown(wait=True, cancel_futures=True)

    def _run(self, case, budget_mib=ALLOCATOR_CAP_MIB):
        result = self._results[(case, budget_mib)]
        if isinstance(result, Future):
            result = result.result()
        self.case_evidence = [result]  # what this test read, for the result channel
        print(
            RESULT_PREFIX + json.dumps(result), file=sys.stderr
        )  # the evidence, in this test's log
        if result["outcome"] == "skip":
            self.skipTest(result["detail"])
        return result

    def _assert_fits(self, case, budget_mib=ALLOCATOR_CAP_MIB):
        result = self._run(case, budget_mib)
        self.assertEqual(
            result["outcome"],
            "pass",
            f"{case} under an isolated {budget_mib} MiB {self.DEVICE} allocator cap: "
            f"{result.get('detail')}",
        )
        return result

    def test_grow_64_to_96_mib_bf16_fits_128_mib_cap(self):
        self._assert_fits("grow_bf16_64_to_96_mib")

    def test_replace_48_mib_fp8_with_96_mib_bf16_fits_128_mib_cap(self):
        self._assert_fits("replace_fp8_48_with_bf16_96_mib")

    def test_shrink_by_dtype_96_mib_bf16_to_48_mib_fp8_fits_128_mib_cap(self):
        self._assert_fits("shrink_by_dtype_bf16_96_to_fp8_48_mib")

    def test_replacement_peak_stays_below_100_mib(self):
        if self.DEVICE == "cuda":
            result = self._assert_fits("grow_bf16_64_to_96_mib")
            self.assertLess(result["peak_allocated_mib"], PEAK_LIMIT_MIB)
        else:
            # The address-space cap is the measurement: the grow must fit 100 MiB.
            self._assert_fits("grow_bf16_64_to_96_mib", budget_mib=PEAK_LIMIT_MIB)

    def test_retained_view_keeps_its_storage_and_values(self):
        result = self._assert_fits("retained_view_keeps_values")
        self.assertFalse(
            result["views_alias"], "replacement reused storage a caller still holds"
        )
        self.assertTrue(result["view_unchanged"], "a retained view's values changed")

    def test_smaller_request_reuses_storage(self):
        result = self._assert_fits("smaller_request_reuses_storage")
        self.assertTrue(
            result["same_storage"], "a request that fits was given new storage"
        )
        self.assertEqual(result["small_shape"][0], ROWS_64_MIB_BF16)

    def test_failed_replacement_never_reports_rows_it_no_longer_holds(self):
        result = self._assert_fits("failed_replacement_keeps_head_consistent")
        self.assertTrue(
            result["replacement_raised"], "a 192 MiB request fitted a 128 MiB cap"
        )
        if result["head_filled_after"]:
            self.assertTrue(
                result["same_storage_after"],
                "head reported filled in storage that replaced it",
            )


class TestSparsePrefillWorkspaceCPU(_WorkspaceReleaseFirstCases, unittest.TestCase):
    DEVICE = "cpu"

    @classmethod
    def setUpClass(cls):
        if not sys.platform.startswith("linux"):
            raise unittest.SkipTest(
                "the CPU cap reads /proc and sets RLIMIT_AS (Linux only)"
            )
        cls.start_cases()


class TestSparsePrefillWorkspaceCUDA(_WorkspaceReleaseFirstCases, unittest.TestCase):
    DEVICE = "cuda"

    @classmethod
    def setUpClass(cls):
        import torch

        # device_count() asks NVML first: unlike is_available(), it leaves fork usable.
        if torch.cuda.device_count() == 0:
            raise unittest.SkipTest(
                "no CUDA device: the CUDA allocator-cap cases need a GPU"
            )
        cls.start_cases()


def _child_main(argv) -> None:
    import argparse

    parser = argparse.ArgumentParser(
        description="run one capped case (used by the tests)"
    )
    parser.add_argument("--case", required=True, choices=[*TRANSITIONS, *CHECKS])
    parser.add_argument("--device", required=True, choices=["cpu", "cuda"])
    parser.add_argument("--budget-mib", type=int, default=ALLOCATOR_CAP_MIB)
    args = parser.parse_args(argv)
    result = run_case(args.case, args.device, args.budget_mib)
    print(RESULT_PREFIX + json.dumps(result), flush=True)


# ------------------------------------------------------------------------------------
# Result channel: one JSON line per finished test on the file descriptor given as
# ``--result-fd N``, so a runner never reads unittest's text. Without the flag the file
# runs exactly as ``python FILE -v``.
# ------------------------------------------------------------------------------------

RESULT_FD_FLAG = "--result-fd"


def unittest_case_id(test) -> str:
    """``Class.test_name``; ``Class.setUpClass`` for a class fixture that skipped or failed."""
    method = getattr(test, "_testMethodName", None)
    if method is not None:
        return f"{type(test).__name__}.{method}"
    fixture, _, where = str(test).partition(" (")
    return f"{where.rstrip(')').split('.')[-1]}.{fixture}"


class _ChannelResult(unittest.TextTestResult):
    fd = None  # set before the run

    def startTest(self, test):
        self._started = time.monotonic()
        super().startTest(test)

    def _send(self, test, outcome, detail=None):
        started = getattr(self, "_started", None)
        timed = started is not None and hasattr(test, "_testMethodName")
        record = {
            "test": unittest_case_id(test),
            "outcome": outcome,
            "duration_s": round(time.monotonic() - started, 3) if timed else None,
            "detail": detail,
            "evidence": getattr(test, "case_evidence", []),
        }
        data = (json.dumps(record) + "\n").encode()
        while data:
            data = data[os.write(self.fd, data) :]

    def addSuccess(self, test):
        super().addSuccess(test)
        self._send(test, "pass")

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._send(test, "fail", self.failures[-1][1])

    def addError(self, test, err):
        super().addError(test, err)
        self._send(test, "error", self.errors[-1][1])

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self._send(test, "skip", reason)

    def addExpectedFailure(self, test, err):
        super().addExpectedFailure(test, err)
        self._send(test, "pass")

    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test)
        self._send(test, "fail", "unexpected success")


class _ChannelRunner(unittest.TextTestRunner):
    resultclass = _ChannelResult


def main(argv) -> None:
    if "--case" in argv:
        _child_main(argv[1:])
        return
    if RESULT_FD_FLAG not in argv:
        unittest.main(argv=argv)
        return
    at = argv.index(RESULT_FD_FLAG)
    _ChannelResult.fd = int(argv[at + 1])
    unittest.main(argv=argv[:at] + argv[at + 2 :], testRunner=_ChannelRunner)


if __name__ == "__main__":
    main(sys.argv)
