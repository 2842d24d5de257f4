"""The only part of the bot that talks to GitHub: PR-body slot, sticky comment, statuses, checks.

For side effects only; every text it sends comes from ``render`` and ``pr_body``. Each call goes
through ``retry.RetryPolicy``. Writes are idempotent, so a rerun edits what an earlier run
wrote instead of adding to it. The token is handed in by the caller (which reads it from
GITHUB_TOKEN) and is never logged. The sticky comment is found by its marker *and* its author:
the bot's own identity, never the marker alone, so a comment anyone can write is never adopted.
"""

import datetime
from dataclasses import dataclass

import github3
import github3.exceptions as gh_errors

from ci import pr_body
from ci.retry import RetryPolicy

STATUS_STATES = ("error", "failure", "pending", "success")
# Who writes with the Actions GITHUB_TOKEN; that token cannot call GET /user to say so itself.
ACTIONS_BOT = "github-actions[bot]"
# GitHub App installation tokens (the Actions GITHUB_TOKEN is one) start with this.
INSTALLATION_PREFIX = "ghs_"


class ConflictError(RuntimeError):
    """Other writers kept changing the PR body under us."""


def connect(token: str, api_url: str | None = None):
    """A github3 client; ``api_url`` points it at GitHub Enterprise (or a test server)."""
    gh = github3.GitHubEnterprise(api_url, token=token) if api_url else github3.GitHub(token=token)
    if token.startswith(INSTALLATION_PREFIX):
        # github3 allows the Checks API only with installation auth, and that is what this token
        # is. It lives at most 24 hours (the Actions one ends with its job before that).
        expires = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=24)
        gh.session.app_installation_token_auth(
            {"token": token, "expires_at": expires.strftime("%Y-%m-%dT%H:%M:%SZ")}
        )
    return gh


@dataclass
class Publisher:
    gh: object
    owner: str
    repo: str
    number: int
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

    def update_slot(self, slot: str, label: str, texts: list[str]) -> str:
        """Put the first of ``texts`` that fits into our slot: read, merge, write, verify.

        GitHub has no compare-and-swap for bodies, so the body is read again just before the
        write (an author edit that landed since is merged, not overwritten) and again after it
        (a writer that saved a stale body over ours gets our slot re-applied onto theirs).
        """
        issue = self._issue()
        for _ in range(self.rounds):
            base = issue.body or ""
            new, text = _first_fit(base, slot, label, texts)
            if new is None:
                self.log(
                    f"PR body: left unchanged; the body plus our slot line would exceed "
                    f"{pr_body.BODY_LIMIT} characters and the author's text is not ours to cut"
                )
                return "too-long"
            if new == base:
                return "unchanged"
            fresh = self._issue()
            if (fresh.body or "") != base:
                self.log("PR body: changed since we read it; merging our slot onto the new body")
                issue = fresh
                continue
            self.replaced, self.written = pr_body.get_slot(base, slot), text
            self.policy.call("write PR body", fresh.edit, body=new)
            issue = self._issue()
            if pr_body.get_slot(issue.body, slot) == text:
                # A writer that read before our write may still land its stale body; its
                # read-to-write gap is well under the settle time, so a second look catches it.
                self.policy.pause(self.settle_s)
                issue = self._issue()
                if pr_body.get_slot(issue.body, slot) == text:
                    return "updated"
            self.log("PR body: another writer replaced it after our write; re-applying our slot")
        raise ConflictError(f"PR #{self.number}: body kept changing; gave up after {self.rounds}")

    def put_back_slot(self, slot: str, label: str) -> str:
        """Undo our last slot write, only while the slot still holds what it wrote (a newer run
        that wrote since keeps its text) and only if there was a slot before it."""
        if self.written is None or self.replaced is None:
            return "nothing to put back"
        issue = self._issue()
        if pr_body.get_slot(issue.body, slot) != self.written:
            return "left as a newer writer set it"
        body = pr_body.set_slot(issue.body, slot, label, self.replaced)
        self.policy.call("write PR body", issue.edit, body=body)
        return "put back"

    def identity(self, login: str | None = None) -> str:
        """The login our comments carry: ``login`` if given, else GET /user, else the Actions bot.

        An installation token (the Actions GITHUB_TOKEN) gets 403 from GET /user; it writes as
        ``github-actions[bot]``.
        """
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
        gh = self.gh
        url = gh._build_url("repos", self.owner, self.repo, "pulls", str(self.number))

        def read():
            return gh._json(gh._get(url), 200)

        data = self.policy.call(f"read PR #{self.number} head", read) or {}
        return str((data.get("head") or {}).get("sha") or "")

    def create_check_run(self, create: dict, updates: list) -> int:
        """One check run from ``checks.requests``; the updates append further annotations."""
        repository = self.policy.call("read repository", self.gh.repository, self.owner, self.repo)
        body = dict(create)
        run = self.policy.call(
            f"check run {body['name']}",
            repository.create_check_run,
            body.pop("name"),
            body.pop("head_sha"),
            **body,
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
        if len(body) > pr_body.BODY_LIMIT:
            raise ValueError(f"comment is {len(body)} characters; render must shrink it first")

        def once():
            issue = self._issue()
            ours = [
                c
                for c in issue.comments()
                if (c.body or "").startswith(marker) and getattr(c.user, "login", None) == author
            ]
            if not ours:
                issue.create_comment(body)
                return "created"
            keep, extra = ours[0], ours[1:]
            # Two runs racing can both create one; the next run folds them back to one.
            for duplicate in extra:
                duplicate.delete()
            if keep.body == body:
                return "unchanged"
            keep.edit(body)
            return "edited"

        # The whole find-then-write repeats on a retry, so a retried create cannot duplicate.
        return self.policy.call("sticky comment", once)

    def set_status(self, sha: str, context: str, state: str, description: str, target_url=None):
        if state not in STATUS_STATES:
            raise ValueError(f"status state {state!r} is not one of {STATUS_STATES}")
        if len(description) > 140:
            raise ValueError(f"status description is {len(description)} > 140 characters")
        repository = self.policy.call("read repository", self.gh.repository, self.owner, self.repo)
        self.policy.call(
            f"status {context}",
            repository.create_status,
            sha,
            state,
            target_url=target_url,
            description=description,
            context=context,
        )


def _first_fit(base: str, slot: str, label: str, texts: list[str]):
    for text in texts:
        new = pr_body.set_slot(base, slot, label, text)
        if len(new) <= pr_body.BODY_LIMIT:
            return new, text
    return None, None
