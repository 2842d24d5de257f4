"""REST calls to GitHub through github3.py's session, each retried, and what the bot reads and
writes with them. Writes are idempotent; a sticky comment is found by its marker *and* author."""

import random
import time
from dataclasses import dataclass

import github3
import github3.exceptions as gh_errors
import requests

from ci.errors import EXIT_FAILED, CiError
from ci.evidence.model import EvidenceError
from ci.reporter import gate, pr_states

ACTIONS_BOT = "github-actions[bot]"
MAX_PAGES = 10  # of 100: a PR's reviews and comments beyond 1,000 are not read
# Permission reads per decision (anyone can review or comment), most plausible writer first.
MAX_APPROVERS = 25
MAX_WAIT_S = 300.0
ATTEMPTS = 5  # of each request
ROUNDS = 5  # of a slot's read-merge-write-verify


class PublishFailed(CiError, RuntimeError):
    """GitHub refused, or kept failing in a retryable way (the last error chained): exit 1."""

    code, prefix = EXIT_FAILED, "error: GitHub: "


def _wait(exc: gh_errors.GitHubException, attempt: int) -> float | None:
    """How long to wait before retrying after ``exc`` (None: not retried): a 5xx, 429, 403 rate
    limit or dropped connection is, after Retry-After (or the limit's reset) when sent, else an
    exponential back-off."""
    backoff = min(60.0, 2.0 ** (attempt - 1)) * (1 + random.random() * 0.25)
    if isinstance(exc, gh_errors.ConnectionError):
        return backoff
    if not isinstance(exc, gh_errors.GitHubError):
        return None
    headers = getattr(exc.response, "headers", None) or {}
    exhausted = headers.get("X-RateLimit-Remaining") == "0"
    limited = "Retry-After" in headers or exhausted or "rate limit" in str(exc.msg).lower()
    if not (exc.code == 429 or 500 <= exc.code < 600 or (exc.code == 403 and limited)):
        return None
    try:
        if "Retry-After" in headers:
            return min(MAX_WAIT_S, max(0.0, float(headers["Retry-After"])))
        if exhausted and headers.get("X-RateLimit-Reset"):
            return min(MAX_WAIT_S, max(0.0, float(headers["X-RateLimit-Reset"]) - time.time()))
    except ValueError:
        pass
    return max(backoff, 60.0) if exc.code == 403 else backoff


def connect(token: str, api_url: str | None = None):
    """A github3 client; ``api_url`` points it at GitHub Enterprise (or a test server)."""
    return (
        github3.GitHubEnterprise(api_url, token=token) if api_url else github3.GitHub(token=token)
    )


@dataclass
class Publisher:
    """One repository and its PR ``number`` (None while a fork report looks for it)."""

    gh: object
    owner: str
    repo: str
    number: int | None
    sleep: object = None  # None: time.sleep, looked up at call time so tests can stub it
    settle_s: float = 3.0
    replaced: str | None = None  # the slot text our last slot write replaced (None: no slot)
    written: str | None = None  # the slot text that write put there

    def request(self, method: str, what: str, *parts, params=None, json=None):
        """The JSON answer (None for a GET's 404) to METHOD repos/OWNER/REPO/PARTS (or /user)."""

        def once():
            response = self._send(method, parts, params=params, json=json)
            return response.json() if response is not None and response.content else None

        return self.retried(what, once)

    def retried(self, what: str, fn):
        """``fn()``, retried up to ``ATTEMPTS`` times while ``_wait`` says to."""
        for attempt in range(1, ATTEMPTS + 1):
            try:
                return fn()
            except gh_errors.GitHubException as exc:
                wait = _wait(exc, attempt)
                if wait is None:
                    raise
                if attempt == ATTEMPTS:
                    raise PublishFailed(f"{what}: gave up after {attempt} attempts: {exc}") from exc
                (self.sleep or time.sleep)(wait)

    def _send(self, method: str, parts, **kwargs):
        root = ("repos", self.owner, self.repo) if parts[0] != "/user" else ()
        url = self.gh.session.build_url(*root, *(str(p).lstrip("/") for p in parts))
        try:
            response = self.gh.session.request(method, url, **kwargs)
        except requests.exceptions.ConnectionError as exc:
            raise gh_errors.ConnectionError(exc) from exc
        if method == "GET" and response.status_code == 404 and not kwargs.get("stream"):
            return None
        if not 200 <= response.status_code < 300:
            raise gh_errors.error_for(response)
        return response

    def pages(self, what: str, *parts, params=None) -> list:
        """Up to ``MAX_PAGES`` pages of 100 of a list."""
        items = []
        for page in range(1, MAX_PAGES + 1):
            query = {**(params or {}), "per_page": 100, "page": page}
            batch = self.request("GET", what, *parts, params=query) or []  # a list, or a 404
            items += [item for item in batch if isinstance(item, dict)]
            if len(batch) < 100:
                break
        return items

    def _body(self) -> str:
        issue = self.request("GET", f"read PR #{self.number}", "issues", self.number)
        if not isinstance(issue, dict):
            raise RuntimeError(f"PR #{self.number}: not found (404)")
        return issue.get("body") or ""

    def update_slot(self, slot: str, label: str, texts: list[str]) -> str:
        """The first of ``texts`` that fits into our slot. No compare-and-swap for bodies: read
        again just before the write (an edit since is merged) and after it (a stale body saved
        over ours gets our slot again)."""
        base, limit = self._body(), pr_states.BODY_LIMIT
        for _ in range(ROUNDS):
            bodies = [(pr_states.set_slot(base, slot, label, text), text) for text in texts]
            fits = [(new, text) for new, text in bodies if len(new) <= limit]
            if not fits:
                print(f"PR body: unchanged: with our slot over {limit} characters")
                return "too-long"
            new, text = fits[0]
            if new == base:
                return "unchanged"
            fresh = self._body()
            if fresh != base:
                print("PR body: changed since we read it; merging our slot onto the new body")
                base = fresh
                continue
            self.replaced, self.written = pr_states.get_slot(base, slot), text
            self.request("PATCH", "write PR body", "issues", self.number, json={"body": new})
            # A writer that read before our write lands its stale body within the settle time.
            (self.sleep or time.sleep)(self.settle_s)
            base = self._body()
            if pr_states.get_slot(base, slot) == text:
                return "updated"
            print("PR body: another writer replaced it after our write; re-applying our slot")
        raise RuntimeError(f"PR #{self.number}: body kept changing; gave up after {ROUNDS}")

    def put_back_slot(self, slot: str, label: str) -> str:
        """Undo our last slot write, while the slot still holds it and if one was there before."""
        if self.written is None or self.replaced is None:
            return "nothing to put back"
        body = self._body()
        if pr_states.get_slot(body, slot) != self.written:
            return "left as a newer writer set it"
        body = pr_states.set_slot(body, slot, label, self.replaced)
        self.request("PATCH", "write PR body", "issues", self.number, json={"body": body})
        return "put back"

    def identity(self, login: str | None = None) -> str:
        """The login our comments carry: ``login``, else GET /user, else the Actions bot (whose
        installation token gets 403 there)."""
        if login:
            return login
        try:
            me = self.request("GET", "read the token's user", "/user")
        except gh_errors.GitHubError as exc:
            if exc.code in (401, 403):
                return ACTIONS_BOT
            raise
        return (me or {}).get("login") or ACTIONS_BOT

    def pr_head(self) -> str:
        return str(((self.pull() or {}).get("head") or {}).get("sha") or "")

    def create_check_run(self, create: dict, updates: list) -> int:
        """One check run from ``render.check_run``; the updates append further annotations."""
        run = self.request("POST", f"check run {create['name']}", "check-runs", json=create)
        for output in updates:
            what = f"check run {run['id']} annotations"
            self.request("PATCH", what, "check-runs", run["id"], json={"output": output})
        return run["id"]

    def upsert_comment(self, body: str, author: str) -> str:
        """The one comment by ``author`` starting with ``body``'s marker line: edited, or created."""
        number, comment, marker = self.number, ("issues", "comments"), body.split("\n", 1)[0]

        def write(method, *parts):
            return self.request(method, f"sticky comment: {method}", *parts, json={"body": body})

        def once():
            return upsert_sticky(
                self.pages(f"comments of PR #{number}", "issues", number, "comments"),
                marker, author,
                create=lambda: write("POST", "issues", number, "comments"),
                unchanged=lambda keep: keep.get("body") == body,
                edit=lambda keep: write("PATCH", *comment, keep["id"]),
                retire=lambda extra: self.request("DELETE", "duplicate", *comment, extra["id"]),
            )[0]  # fmt: skip

        # The whole find-then-write repeats on a retry, so a retried create cannot duplicate.
        return self.retried("sticky comment", once)

    def set_status(self, sha: str, status: dict) -> None:
        self.request("POST", f"status {status['context']}", "statuses", sha, json=status)

    def pull(self):
        return self.request("GET", f"read PR #{self.number}", "pulls", self.number)

    def can_write(self, login: str) -> bool:
        answer = self.request("GET", f"permission of {login}", "collaborators", login, "permission")
        return isinstance(answer, dict) and answer.get("permission") in gate.WRITE

    def pull_facts(self, trigger=None, before=None) -> gate.PullFacts:
        """What ``gate.decide`` needs, as GitHub has it now: head, fork or not, labels, and the
        approvals of the first writer (``gate.candidates``) naming the head."""
        number, pull = self.number, self.pull()
        if not isinstance(pull, dict):
            raise RuntimeError(f"PR #{number}: not found (404)")
        labels = frozenset(item.get("name") for item in pull.get("labels") or [])
        facts = gate.event_facts({"pull_request": pull})._replace(pr=number, labels=labels)
        if not facts.fork:
            return facts
        reviews = self.pages(f"reviews of PR #{number}", "pulls", number, "reviews")
        comments = self.pages(f"comments of PR #{number}", "issues", number, "comments")
        # A trigger approves only with the label on, or it would hide a writer's approval.
        trigger = trigger if gate.RUN_LABEL in labels else None
        found = gate.approvals(reviews, comments, trigger, before)
        logins = gate.candidates(found, facts.head)
        writer = next((login for login in logins[:MAX_APPROVERS] if self.can_write(login)), None)
        approved = tuple(a for a in found if a.login == writer)
        unchecked = 0 if writer else max(0, len(logins) - MAX_APPROVERS)
        return facts._replace(approvals=approved, unchecked=unchecked)

    def download(self, artifact_id: int, limit: int) -> bytes:
        """The artifact's zip; EvidenceError past ``limit`` bytes (requests drops the token on the
        redirect to storage)."""

        def fetch():
            response = self._send("GET", ("actions", "artifacts", artifact_id, "zip"), stream=True)
            data = bytearray()
            for chunk in response.iter_content(1 << 16):
                data += chunk
                if len(data) > limit:
                    raise EvidenceError(f"artifact {artifact_id}: more than {limit} bytes")
            return bytes(data)

        return self.retried(f"download artifact {artifact_id}", fetch)


def upsert_sticky(items, marker: str, author: str, create, unchanged, edit, retire) -> tuple:
    """(outcome, item) for the one item (oldest first) by ``author`` starting with ``marker``:
    "created", "unchanged" or "edited"; further ones (two runs racing) are ``retire``d."""
    ours = [item for item in items if (item.get("body") or "").startswith(marker)
            and (item.get("user") or {}).get("login") == author]  # fmt: skip
    if not ours:
        return "created", create()
    keep, *extra = ours
    for duplicate in extra:
        retire(duplicate)
    if unchanged(keep):
        return "unchanged", keep
    edit(keep)
    return "edited", keep
