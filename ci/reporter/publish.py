"""The only part of the bot that talks to GitHub (github3.py): the PR-body slot, the sticky
comment, statuses, check runs, and the reads the decisions rest on (a PR, its reviews and
comments, permissions, file and tree SHAs, a run's artifact).

Every call goes through ``RetryPolicy``. Writes are idempotent, so a rerun edits what an earlier
run wrote. The sticky comment is found by its marker *and* its author, the bot's own login:
anyone can write a marker, so the marker alone never adopts a comment.
"""

import datetime
import random
import time
from dataclasses import dataclass, replace

import github3
import github3.exceptions as gh_errors

from ci.errors import EXIT_FAILED, CiError
from ci.reporter import gate, pr_states

# Who writes with the Actions GITHUB_TOKEN; that token cannot call GET /user to say so itself.
ACTIONS_BOT = "github-actions[bot]"
MAX_PAGES = 10  # of 100: a PR's reviews and comments beyond 1,000 are not read
# Permission reads per decision: anyone can review or comment on a PR. Read in the order of
# ``gate.candidates`` (most plausible writer first); past the bound the decision says how many
# were left unread.
MAX_APPROVERS = 25
MAX_WAIT_S = 300.0


class PublishFailed(CiError, RuntimeError):
    """GitHub refused, or kept failing in a retryable way (the last error chained): exit 1."""

    code = EXIT_FAILED


class TooLarge(ValueError):
    """A download went past its limit: refused, whatever the listing said its size was."""


@dataclass
class RetryPolicy:
    """Retries 5xx, 429, 403 secondary rate limits and dropped connections: waits Retry-After
    when GitHub sends it (or a primary limit's reset), backs off exponentially otherwise."""

    attempts: int = 5
    base_s: float = 1.0
    cap_s: float = 60.0
    sleep: object = None  # None: time.sleep, looked up at call time so tests can stub it

    def pause(self, seconds: float) -> None:
        (self.sleep or time.sleep)(seconds)

    def call(self, what: str, fn, *args, **kwargs):
        for attempt in range(1, self.attempts + 1):
            try:
                return fn(*args, **kwargs)
            except gh_errors.GitHubException as exc:
                wait = self._wait(exc, attempt)
                if wait is None:
                    raise
                if attempt == self.attempts:
                    raise PublishFailed(f"{what}: gave up after {attempt} attempts: {exc}") from exc
                self.pause(wait)

    def _wait(self, exc: gh_errors.GitHubException, attempt: int) -> float | None:
        """Seconds to wait before the next try, or None when the error is not worth retrying."""
        backoff = min(self.cap_s, self.base_s * 2 ** (attempt - 1)) * (1 + random.random() * 0.25)
        if isinstance(exc, gh_errors.ConnectionError):
            return backoff
        if not isinstance(exc, gh_errors.GitHubError):
            return None
        headers = getattr(exc.response, "headers", None) or {}
        limited = (
            "Retry-After" in headers
            or headers.get("X-RateLimit-Remaining") == "0"
            or "rate limit" in str(exc.msg or exc).lower()
        )
        if not (exc.code == 429 or 500 <= exc.code < 600 or (exc.code == 403 and limited)):
            return None
        try:
            if "Retry-After" in headers:
                return min(MAX_WAIT_S, max(0.0, float(headers["Retry-After"])))
            if headers.get("X-RateLimit-Remaining") == "0" and headers.get("X-RateLimit-Reset"):
                reset = float(headers["X-RateLimit-Reset"]) - time.time()
                return min(MAX_WAIT_S, max(0.0, reset))
        except ValueError:
            pass
        return max(backoff, 60.0) if exc.code == 403 else backoff


def connect(token: str, api_url: str | None = None):
    """A github3 client; ``api_url`` points it at GitHub Enterprise (or a test server)."""
    gh = github3.GitHubEnterprise(api_url, token=token) if api_url else github3.GitHub(token=token)
    if token.startswith("ghs_"):
        # github3 allows the Checks API only with installation auth, and that is what this token
        # (the Actions GITHUB_TOKEN is one) is. It lives at most 24 hours.
        expires = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=24)
        gh.session.app_installation_token_auth(
            {"token": token, "expires_at": expires.strftime("%Y-%m-%dT%H:%M:%SZ")}
        )
    return gh


@dataclass
class Publisher:
    """One repository and its PR ``number`` (None while a fork report looks for it). Reads go
    through github3's session (its auth, retried by ``policy``) and answer the API's JSON, None
    for a 404."""

    gh: object
    owner: str
    repo: str
    number: int | None
    policy: RetryPolicy
    log: object = print
    rounds: int = 5
    settle_s: float = 3.0
    replaced: str | None = None  # the slot text our last slot write replaced (None: no slot)
    written: str | None = None  # the slot text that write put there

    def _issue(self):
        return self.policy.call(
            f"read PR #{self.number}", self.gh.issue, self.owner, self.repo, self.number
        )

    def _repository(self):
        return self.policy.call("read repository", self.gh.repository, self.owner, self.repo)

    def update_slot(self, slot: str, label: str, texts: list[str]) -> str:
        """Put the first of ``texts`` that fits into our slot: read, merge, write, verify.

        GitHub has no compare-and-swap for bodies, so the body is read again just before the
        write (an author edit that landed since is merged, not overwritten) and again after it
        (a writer that saved a stale body over ours gets our slot re-applied onto theirs).
        """
        issue = self._issue()
        for _ in range(self.rounds):
            base = issue.body or ""
            bodies = [(pr_states.set_slot(base, slot, label, text), text) for text in texts]
            fits = [(new, text) for new, text in bodies if len(new) <= pr_states.BODY_LIMIT]
            if not fits:
                self.log(
                    f"PR body: left unchanged; the body plus our slot line would exceed "
                    f"{pr_states.BODY_LIMIT} characters and the author's text is not ours to cut"
                )
                return "too-long"
            new, text = fits[0]
            if new == base:
                return "unchanged"
            fresh = self._issue()
            if (fresh.body or "") != base:
                self.log("PR body: changed since we read it; merging our slot onto the new body")
                issue = fresh
                continue
            self.replaced, self.written = pr_states.get_slot(base, slot), text
            self.policy.call("write PR body", fresh.edit, body=new)
            issue = self._issue()
            if pr_states.get_slot(issue.body, slot) == text:
                # A writer that read before our write may still land its stale body; its
                # read-to-write gap is well under the settle time, so a second look catches it.
                self.policy.pause(self.settle_s)
                issue = self._issue()
                if pr_states.get_slot(issue.body, slot) == text:
                    return "updated"
            self.log("PR body: another writer replaced it after our write; re-applying our slot")
        raise RuntimeError(f"PR #{self.number}: body kept changing; gave up after {self.rounds}")

    def put_back_slot(self, slot: str, label: str) -> str:
        """Undo our last slot write, only while the slot still holds what it wrote (a newer run
        that wrote since keeps its text) and only if there was a slot before it."""
        if self.written is None or self.replaced is None:
            return "nothing to put back"
        issue = self._issue()
        if pr_states.get_slot(issue.body, slot) != self.written:
            return "left as a newer writer set it"
        body = pr_states.set_slot(issue.body, slot, label, self.replaced)
        self.policy.call("write PR body", issue.edit, body=body)
        return "put back"

    def identity(self, login: str | None = None) -> str:
        """The login our comments carry: ``login`` if given, else GET /user, else the Actions bot
        (an installation token, which the Actions GITHUB_TOKEN is, gets 403 from GET /user)."""
        if login:
            return login
        try:
            me = self.policy.call("read the token's user", self.gh.me)
        except gh_errors.GitHubError as exc:
            if exc.code in (401, 403, 404):
                return ACTIONS_BOT
            raise
        return getattr(me, "login", None) or ACTIONS_BOT

    def pr_head(self) -> str:
        """The PR's head commit as GitHub has it now."""
        return str(((self.pull() or {}).get("head") or {}).get("sha") or "")

    def create_check_run(self, create: dict, updates: list) -> int:
        """One check run from ``checks.bodies``; the updates append further annotations."""
        run = self.policy.call(
            f"check run {create['name']}", self._repository().create_check_run, **create
        )
        if run is None:
            raise RuntimeError("check run: GitHub answered without a check run")
        for output in updates:
            self.policy.call(f"check run {run.id} annotations", run.update, output=output)
        return run.id

    def upsert_comment(self, marker: str, body: str, author: str) -> str:
        """The one comment by ``author`` that starts with ``marker``: edited, or created."""
        if not author:
            raise ValueError("upsert_comment needs the bot's login; a marker alone proves nothing")

        def once():
            issue = self._issue()
            outcome, _ = upsert_sticky(
                issue.comments(),
                marker,
                author,
                create=lambda: issue.create_comment(body),
                unchanged=lambda keep: keep.body == body,
                edit=lambda keep: keep.edit(body),
                retire=lambda duplicate: duplicate.delete(),
            )
            return outcome

        # The whole find-then-write repeats on a retry, so a retried create cannot duplicate.
        return self.policy.call("sticky comment", once)

    def set_status(self, sha: str, context: str, state: str, description: str, target_url=None):
        create = self._repository().create_status  # (sha, state, target_url, description, context)
        self.policy.call(f"status {context}", create, sha, state, target_url, description, context)

    def _url(self, *parts) -> str:
        return self.gh.session.build_url("repos", self.owner, self.repo, *map(str, parts))

    def get(self, what: str, *parts, params=None):
        url = self._url(*parts)

        def fetch():
            response = self.gh.session.get(url, params=params)
            if response.status_code == 404:
                return None
            if response.status_code != 200:
                raise gh_errors.error_for(response)
            return response.json()

        return self.policy.call(what, fetch)

    def pages(self, what: str, *parts, params=None) -> list:
        """Up to ``MAX_PAGES`` pages of 100 of a list; ``params`` filter it on GitHub's side."""
        items = []
        for page in range(1, MAX_PAGES + 1):
            batch = self.get(what, *parts, params={**(params or {}), "per_page": 100, "page": page})
            items += batch if isinstance(batch, list) else []
            if not isinstance(batch, list) or len(batch) < 100:
                break
        return items

    def pull(self):
        return self.get(f"read PR #{self.number}", "pulls", self.number)

    def open_pulls(self, head_owner: str, branch: str) -> list:
        """Open PRs whose head is ``head_owner:branch`` (how GitHub filters by head)."""
        params = {"head": f"{head_owner}:{branch}", "state": "open", "per_page": 100}
        found = self.get(f"find the PR of {head_owner}:{branch}", "pulls", params=params)
        return found if isinstance(found, list) else []

    def can_write(self, login: str) -> bool:
        answer = self.get(f"permission of {login}", "collaborators", login, "permission")
        return isinstance(answer, dict) and answer.get("permission") in gate.WRITE

    def sha_of(self, path: str, ref: str):
        """The blob SHA of a file at ``ref``; None where ``path`` is not a file there."""
        found = self.get(f"read {path} at {ref[:12]}", "contents", path, params={"ref": ref})
        return found.get("sha") if isinstance(found, dict) else None

    def artifacts_named(self, run_id: int, name: str) -> list:
        """Every live artifact of the run called ``name``: none, one, or more (a process the
        tests left can upload with the job's runtime token)."""
        found = self.get(f"artifacts of run {run_id}", "actions", "runs", run_id, "artifacts",
                         params={"name": name, "per_page": 100})  # fmt: skip
        return [
            a
            for a in ((found or {}).get("artifacts") or [])
            if isinstance(a, dict) and a.get("name") == name and not a.get("expired")
        ]

    def pull_facts(self, trigger=None, before=None) -> gate.PullFacts:
        """What ``gate.decide`` needs about the PR, as GitHub has it now: head, fork or not, labels,
        and the approvals of people the API says may write (those naming the head only)."""
        number, pull = self.number, self.pull()
        if not isinstance(pull, dict):
            raise RuntimeError(f"PR #{number}: not found")
        labels = frozenset(item.get("name") for item in pull.get("labels") or [])
        facts = replace(gate.event_facts({"pull_request": pull}), pr=number, labels=labels)
        if not facts.fork:
            return facts
        reviews = self.pages(f"reviews of PR #{number}", "pulls", number, "reviews")
        comments = self.pages(f"comments of PR #{number}", "issues", number, "comments")
        found = gate.approvals(reviews, comments, trigger, before)
        logins = gate.candidates(found, facts.head)
        writer = next((login for login in logins[:MAX_APPROVERS] if self.can_write(login)), None)
        approved = tuple(a for a in found if a.login == writer)
        unchecked = 0 if writer else max(0, len(logins) - MAX_APPROVERS)
        return replace(facts, approvals=approved, unchecked=unchecked)

    def download(self, artifact_id: int, path: str, limit: int) -> None:
        """The artifact's zip into ``path``; TooLarge past ``limit`` bytes, whatever the
        listing said (the storage URL it redirects to gets no token: requests drops it)."""
        url = self._url("actions", "artifacts", artifact_id, "zip")

        def fetch():
            response = self.gh.session.get(url, stream=True)
            if response.status_code != 200:
                raise gh_errors.error_for(response)
            size = 0
            with open(path, "wb") as handle:
                for chunk in response.iter_content(1 << 16):
                    size += len(chunk)
                    if size > limit:
                        raise TooLarge(f"artifact {artifact_id}: more than {limit} bytes")
                    handle.write(chunk)

        self.policy.call(f"download artifact {artifact_id}", fetch)


def upsert_sticky(items, marker: str, author: str, create, unchanged, edit, retire) -> tuple:
    """(outcome, item) for the one item (comment or issue, oldest first) by ``author`` whose
    body starts with ``marker``: "created" by ``create()`` when there is none, else "unchanged"
    or "edited"; further ones, left by two runs racing, are ``retire``d. A marker alone proves
    nothing: anyone can write one, so the author must match too."""
    ours = [
        item
        for item in items
        if (item.body or "").startswith(marker) and getattr(item.user, "login", None) == author
    ]
    if not ours:
        return "created", create()
    keep, *extra = ours
    for duplicate in extra:
        retire(duplicate)
    if unchanged(keep):
        return "unchanged", keep
    edit(keep)
    return "edited", keep
