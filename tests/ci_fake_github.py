"""A small fake of the GitHub REST API on loopback, strict where the bot could go wrong.

Serves just what ``ci.reporter.publish`` uses, under ``/api/v3`` so the real github3.py client reaches it
through ``GitHubEnterprise``. It enforces the token header, the commit-status state enum and
140-character description, 404 for an unknown PR and 422 for bodies over 65,536 characters.
Like GitHub, an installation token (``ghs_...``, the Actions GITHUB_TOKEN) gets 403 from
GET /user, a ``read_only`` token (a fork PR's) gets 403 on every write, and check runs are
validated against the Checks API's rules (enums, 50 annotations per request, sizes).
For the decisions it serves what the gate and the fork report read: a PR's head, head
repository and labels, its reviews (with ``commit_id``) and comments, a login's permission, file
and folder SHAs per ref, a run's artifacts and their zip (a redirect to storage on another host
name that, like GitHub's, wants no token). Tests inject faults (``fail_next``), hooks that run
between requests (``after``), and can read the request log. Threaded, so two publishers can
really race.
"""

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs

LIMIT = 65536
TS = "2026-01-01T00:00:00Z"


def user_json(login: str, base: str) -> dict:
    url = f"{base}/users/{login}"
    return {
        "login": login,
        "id": abs(hash(login)) % 10**6,
        "type": "Bot" if login.endswith("[bot]") else "User",
        "avatar_url": url,
        "gravatar_id": "",
        **{
            key: url
            for key in (
                "url html_url events_url followers_url following_url gists_url "
                "organizations_url received_events_url repos_url starred_url subscriptions_url"
            ).split()
        },
    }


class FakeGitHub:
    def __init__(
        self, token="test-token", owner="sgl", repo="sglang", bot="ci-bot", read_only=False
    ):
        self.token = token
        self.read_only = read_only
        self.heads: dict[int, str] = {}  # PR number -> head sha (GET /pulls/N)
        self.check_runs: dict[int, dict] = {}
        self.bodies_sent: list[tuple[str, str, dict]] = []  # (method, path, JSON) of every write
        self.owner, self.repo, self.bot = owner, repo, bot
        self.lock = threading.RLock()
        self.bodies: dict[int, str | None] = {}
        self.issue_meta: dict[int, dict] = {}  # plain issues (not PRs): title, login, state
        self._query: dict[str, list[str]] = {}  # of the request being routed
        self.comments: dict[int, dict] = {}
        self.statuses: list[dict] = []
        self.requests: list[tuple[str, str]] = []
        self.faults: list[tuple[str, str, int, dict, dict]] = []
        self.hooks: list = []  # (method, path regex, fn(fake)) run once, after that request
        self.pr_meta: dict[int, dict] = {}  # PR -> {head_repo, branch, labels}
        self.reviews: dict[int, list] = {}  # PR -> [{login, commit_id, state, at}]
        self.permissions: dict[str, str] = {}  # login -> admin | write | read (default none)
        self.associations: dict[str, str] = {}  # login -> author_association (default NONE)
        self.contents: dict[tuple, object] = {}  # (ref, path) -> blob sha, or [(name, type, sha)]
        self.artifacts: dict[int, list] = {}  # run id -> [{id, name, size_in_bytes, expired}]
        self.blobs: dict[int, bytes] = {}  # artifact id -> its zip
        self.blob_auth: list = []  # the Authorization header each storage download carried
        self._next_id = 1000
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    # -- test controls ------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def start(self):
        self.thread.start()
        return self

    def stop(self):
        self.server.shutdown()
        self.server.server_close()

    def add_pr(self, number: int, body: str | None, head_sha: str = "a" * 40, fork=None):
        """A PR; ``fork`` (OWNER/NAME) makes its head a fork's, else a branch of this repo."""
        self.bodies[number] = body
        self.heads[number] = head_sha
        self.pr_meta[number] = {
            "head_repo": fork or f"{self.owner}/{self.repo}",
            "branch": f"branch-{number}",
            "labels": [],
        }

    def add_review(self, number, login, commit_id, state="APPROVED", at=TS):
        self.reviews.setdefault(number, []).append(
            {"login": login, "commit_id": commit_id, "state": state, "at": at}
        )

    def fail_next(self, method, path_regex, status, body=None, headers=None):
        self.faults.append(
            (method, path_regex, status, body or {"message": "fault"}, headers or {})
        )

    def after(self, method, path_regex, fn):
        self.hooks.append((method, path_regex, fn))

    def count(self, method, path_regex=".*") -> int:
        return sum(1 for m, p in self.requests if m == method and re.search(path_regex, p))

    def add_comment(self, number, body, login=None, at=TS) -> int:
        with self.lock:
            self._next_id += 1
            cid = self._next_id
            self.comments[cid] = {
                "id": cid,
                "issue": number,
                "body": body,
                "login": login or self.bot,
                "at": at,
            }
            return cid

    # -- JSON shapes github3 reads ------------------------------------------------------

    def _base(self):
        return f"{self.url}/api/v3"

    def _issue_json(self, number):
        base = f"{self._base()}/repos/{self.owner}/{self.repo}"
        url = f"{base}/issues/{number}"
        body = self.bodies[number]
        return {
            "url": url,
            "id": number,
            "number": number,
            "title": f"PR {number}",
            "body": body,
            "body_html": body,
            "body_text": body,
            "state": "open",
            "locked": False,
            "assignee": None,
            "assignees": [],
            "milestone": None,
            "labels": [],
            "comments": sum(1 for c in self.comments.values() if c["issue"] == number),
            "comments_url": f"{url}/comments",
            "events_url": f"{url}/events",
            "labels_url": f"{url}/labels{{/name}}",
            "html_url": f"{self.url}/{self.owner}/{self.repo}/pull/{number}",
            "pull_request": {"url": f"{base}/pulls/{number}"},
            "created_at": TS,
            "updated_at": TS,
            "closed_at": None,
            "closed_by": None,
            "user": user_json("author", self._base()),
        }

    def _comment_json(self, comment):
        base = f"{self._base()}/repos/{self.owner}/{self.repo}"
        return {
            "url": f"{base}/issues/comments/{comment['id']}",
            "id": comment["id"],
            "body": comment["body"],
            "body_html": comment["body"],
            "body_text": comment["body"],
            "author_association": self.associations.get(comment["login"], "NONE"),
            "created_at": comment.get("at", TS),
            "updated_at": comment.get("at", TS),
            "html_url": f"{self.url}/c/{comment['id']}",
            "issue_url": f"{base}/issues/{comment['issue']}",
            "user": user_json(comment["login"], self._base()),
        }

    def _repo_json(self):
        base = f"{self._base()}/repos/{self.owner}/{self.repo}"
        url_keys = (
            "archive assignees blobs branches collaborators comments commits compare contents "
            "contributors deployments downloads events forks git_commits git_refs git_tags hooks "
            "issue_comment issue_events issues keys labels languages merges milestones "
            "notifications pulls releases stargazers statuses subscribers subscription tags "
            "teams trees"
        ).split()
        data = {f"{key}_url": f"{base}/{key}" for key in url_keys}
        data.update(
            url=base,
            html_url=f"{self.url}/{self.owner}/{self.repo}",
            id=1,
            name=self.repo,
            full_name=f"{self.owner}/{self.repo}",
            owner=user_json(self.owner, self._base()),
            private=False,
            fork=False,
            description="",
            archived=False,
            clone_url="",
            git_url="",
            ssh_url="",
            svn_url="",
            mirror_url=None,
            homepage=None,
            language="Python",
            default_branch="main",
            created_at=TS,
            updated_at=TS,
            pushed_at=TS,
            size=1,
            forks_count=0,
            network_count=0,
            open_issues_count=0,
            stargazers_count=0,
            subscribers_count=0,
            watchers_count=0,
            has_downloads=True,
            has_issues=True,
            has_pages=False,
            has_projects=False,
            has_wiki=False,
        )
        return data

    # -- request handling ---------------------------------------------------------------

    def handle(self, method, path, headers, payload):
        """Returns (status, json body or None, extra headers)."""
        with self.lock:
            self.requests.append((method, path))
            match = re.fullmatch(r"/storage/(\d+)\.zip", path)
            if match and method == "GET":  # on another host name: the token must not follow
                self.blob_auth.append(headers.get("Authorization"))
                return 200, self.blobs.get(int(match[1]), b""), {}
            for fault in list(self.faults):
                if fault[0] == method and re.search(fault[1], path):
                    self.faults.remove(fault)
                    return fault[2], fault[3], fault[4]
        auth = headers.get("Authorization", "")
        if auth not in (f"token {self.token}", f"Bearer {self.token}"):
            return 401, {"message": "Bad credentials"}, {}
        if method != "GET":
            with self.lock:
                self.bodies_sent.append((method, path, payload))
            if self.read_only:
                return 403, {"message": "Resource not accessible by integration"}, {}
        if path == "/api/v3/user" and method == "GET":
            if self.token.startswith("ghs_"):
                return 403, {"message": "Resource not accessible by integration"}, {}
            return 200, {**user_json(self.bot, self._base()), **_USER_EXTRA}, {}
        prefix = f"/api/v3/repos/{self.owner}/{self.repo}"
        if not path.startswith(prefix):
            return 404, {"message": "Not Found"}, {}
        rest = path[len(prefix) :].split("?")[0]
        with self.lock:
            self._query = parse_qs(path.partition("?")[2])
            result = self._route(method, rest, payload)
        self._run_hooks(method, path)
        return result

    def _run_hooks(self, method, path):
        for hook in list(self.hooks):
            if hook[0] == method and re.search(hook[1], path):
                self.hooks.remove(hook)
                hook[2](self)

    def _too_long(self, text):
        if text is not None and len(text) > LIMIT:
            return 422, {"message": "Validation Failed", "errors": [{"code": "too_long"}]}, {}
        return None

    def _route(self, method, rest, payload):
        if rest == "" and method == "GET":
            return 200, self._repo_json(), {}
        routed = self._route_issues(method, rest, payload)
        if routed is not None:
            return routed
        match = re.fullmatch(r"/issues/(\d+)(/comments)?", rest)
        if match:
            number = int(match[1])
            if number not in self.bodies:
                return 404, {"message": "Not Found"}, {}
            if match[2] is None and method == "GET":
                return 200, self._issue_json(number), {}
            if match[2] is None and method == "PATCH":
                if "body" in payload:
                    error = self._too_long(payload["body"])
                    if error:
                        return error
                    self.bodies[number] = payload["body"]
                return 200, self._issue_json(number), {}
            if match[2] and method == "GET":
                found = [c for c in self.comments.values() if c["issue"] == number]
                return (
                    200,
                    [self._comment_json(c) for c in sorted(found, key=lambda c: c["id"])],
                    {},
                )
            if match[2] and method == "POST":
                error = self._too_long(payload.get("body"))
                if error:
                    return error
                cid = self.add_comment(number, payload["body"])
                return 201, self._comment_json(self.comments[cid]), {}
        match = re.fullmatch(r"/issues/comments/(\d+)", rest)
        if match:
            comment = self.comments.get(int(match[1]))
            if comment is None:
                return 404, {"message": "Not Found"}, {}
            if method == "PATCH":
                error = self._too_long(payload.get("body"))
                if error:
                    return error
                comment["body"] = payload["body"]
                return 200, self._comment_json(comment), {}
            if method == "DELETE":
                del self.comments[comment["id"]]
                return 204, None, {}
        routed = self._route_reads(method, rest)
        if routed is not None:
            return routed
        if rest == "/check-runs" and method == "POST":
            return self._create_check_run(payload)
        match = re.fullmatch(r"/check-runs/(\d+)", rest)
        if match and method == "PATCH":
            run = self.check_runs.get(int(match[1]))
            if run is None:
                return 404, {"message": "Not Found"}, {}
            error = _check_run_errors(payload, create=False)
            if error:
                return 422, {"message": error}, {}
            for key in ("status", "conclusion", "completed_at", "details_url"):
                if key in payload:
                    run[key] = payload[key]
            if "output" in payload:
                notes = payload["output"].get("annotations") or []
                run["output"] = {**payload["output"], "annotations": run["annotations"] + notes}
                run["annotations"] = run["output"]["annotations"]
            return 200, self._check_run_json(run), {}
        match = re.fullmatch(r"/statuses/([0-9a-f]{7,40})", rest)
        if match and method == "POST":
            state = payload.get("state")
            description = payload.get("description") or ""
            if state not in ("error", "failure", "pending", "success"):
                return 422, {"message": f"state {state!r} invalid"}, {}
            if len(description) > 140:
                return 422, {"message": "description is too long (maximum is 140 characters)"}, {}
            status = {
                "sha": match[1],
                "state": state,
                "description": description,
                "context": payload.get("context") or "default",
                "target_url": payload.get("target_url"),
            }
            self.statuses.append(status)
            base = f"{self._base()}/repos/{self.owner}/{self.repo}"
            return (
                201,
                {
                    **status,
                    "url": f"{base}/statuses/{match[1]}",
                    "id": len(self.statuses),
                    "created_at": TS,
                    "updated_at": TS,
                    "creator": user_json(self.bot, self._base()),
                },
                {},
            )
        return 404, {"message": f"no fake route for {method} {rest}"}, {}

    # -- what the gate and the fork report read ----------------------------------------------

    def _pull_json(self, number):
        meta = self.pr_meta.get(number) or {"head_repo": f"{self.owner}/{self.repo}"}
        return {
            "number": number,
            "state": "open",
            "user": user_json("author", self._base()),
            "head": {
                "sha": self.heads[number],
                "ref": meta.get("branch", "main"),
                "repo": {"full_name": meta["head_repo"]} if meta["head_repo"] else None,
            },
            "base": {"ref": "main", "repo": {"full_name": f"{self.owner}/{self.repo}"}},
            "labels": [{"name": name} for name in meta.get("labels", [])],
        }

    def _page(self, items):
        size = int((self._query.get("per_page") or ["30"])[0])
        page = int((self._query.get("page") or ["1"])[0])
        return items[(page - 1) * size : page * size]

    def _route_reads(self, method, rest):
        if method != "GET":
            return None
        match = re.fullmatch(r"/pulls/(\d+)(/reviews)?", rest)
        if match:
            number = int(match[1])
            if number not in self.heads:
                return 404, {"message": "Not Found"}, {}
            if match[2] is None:
                return 200, self._pull_json(number), {}
            reviews = [
                {
                    "id": i + 1,
                    "user": user_json(r["login"], self._base()),
                    "commit_id": r["commit_id"],
                    "state": r["state"],
                    "submitted_at": r["at"],
                    "body": "",
                    "author_association": self.associations.get(r["login"], "NONE"),
                }
                for i, r in enumerate(self.reviews.get(number, []))
            ]
            return 200, self._page(reviews), {}
        if rest == "/pulls":
            head = (self._query.get("head") or [""])[0]
            found = [
                self._pull_json(n)
                for n, meta in sorted(self.pr_meta.items())
                if f"{(meta['head_repo'] or '').split('/')[0]}:{meta['branch']}" == head
            ]
            return 200, found, {}
        match = re.fullmatch(r"/collaborators/([^/]+)/permission", rest)
        if match:
            permission = self.permissions.get(match[1], "none")
            return 200, {"permission": permission, "user": user_json(match[1], self._base())}, {}
        match = re.fullmatch(r"/contents/(.+)", rest)
        if match:
            ref = (self._query.get("ref") or ["main"])[0]
            found = self.contents.get((ref, match[1]))
            if found is None:
                return 404, {"message": "Not Found"}, {}
            if isinstance(found, str):
                return 200, {"type": "file", "path": match[1], "sha": found}, {}
            return 200, [{"name": n, "type": t, "sha": sha} for n, t, sha in found], {}
        match = re.fullmatch(r"/actions/runs/(\d+)/artifacts", rest)
        if match:
            name = (self._query.get("name") or [None])[0]
            found = [a for a in self.artifacts.get(int(match[1]), []) if name in (None, a["name"])]
            return 200, {"total_count": len(found), "artifacts": found}, {}
        match = re.fullmatch(r"/actions/artifacts/(\d+)/zip", rest)
        if match:
            where = self.url.replace("127.0.0.1", "localhost")
            return 302, None, {"Location": f"{where}/storage/{match[1]}.zip"}
        return None

    # -- plain issues (the release watch's tracking issue) ---------------------------------

    def add_issue(self, title, body, login=None, state="open") -> int:
        with self.lock:
            number = max([0, *self.bodies]) + 1
            self.bodies[number] = body
            self.issue_meta[number] = {"title": title, "login": login or self.bot, "state": state}
            return number

    def _plain_issue_json(self, number):
        meta = self.issue_meta[number]
        data = self._issue_json(number)
        data.pop("pull_request")
        data.update(
            title=meta["title"],
            state=meta["state"],
            user=user_json(meta["login"], self._base()),
            html_url=f"{self.url}/{self.owner}/{self.repo}/issues/{number}",
        )
        return data

    def _route_issues(self, method, rest, payload):
        """The issue list (pull requests included, newest first unless ``direction=asc``,
        ``state`` open by default, ``creator`` filtering, 30 a page unless ``per_page``, as
        GitHub does), creating an issue, and reading or editing a plain issue."""
        if rest == "/issues" and method == "GET":
            state = (self._query.get("state") or ["open"])[0]
            creator = (self._query.get("creator") or [None])[0]
            oldest_first = (self._query.get("direction") or ["desc"])[0] == "asc"
            items = [
                self._plain_issue_json(n) if n in self.issue_meta else self._issue_json(n)
                for n in sorted(self.bodies, reverse=not oldest_first)
            ]
            items = [i for i in items if state == "all" or i["state"] == state]
            items = [i for i in items if creator in (None, i["user"]["login"])]
            return 200, self._page(items), {}
        if rest == "/issues" and method == "POST":
            if not payload.get("title"):
                errors = [{"field": "title", "code": "missing_field"}]
                return 422, {"message": "Validation Failed", "errors": errors}, {}
            error = self._too_long(payload.get("body"))
            if error:
                return error
            number = self.add_issue(payload["title"], payload.get("body"))
            return 201, self._plain_issue_json(number), {}
        match = re.fullmatch(r"/issues/(\d+)", rest)
        if not match or int(match[1]) not in self.issue_meta:
            return None
        number = int(match[1])
        if method == "PATCH":
            error = self._too_long(payload.get("body"))
            if error:
                return error
            if payload.get("state", "open") not in ("open", "closed"):
                return 422, {"message": f"state {payload['state']!r} invalid"}, {}
            if "body" in payload:
                self.bodies[number] = payload["body"]
            meta = self.issue_meta[number]
            meta.update({k: payload[k] for k in ("title", "state") if k in payload})
        if method in ("GET", "PATCH"):
            return 200, self._plain_issue_json(number), {}
        return None

    def _create_check_run(self, payload):
        error = _check_run_errors(payload, create=True)
        if error:
            return 422, {"message": error}, {}
        self._next_id += 1
        output = payload.get("output") or {}
        run = {
            **payload,
            "id": self._next_id,
            "annotations": list(output.get("annotations") or []),
        }
        self.check_runs[run["id"]] = run
        return 201, self._check_run_json(run), {}

    def _check_run_json(self, run):
        base = f"{self._base()}/repos/{self.owner}/{self.repo}"
        output = run.get("output") or {}
        return {
            "url": f"{base}/check-runs/{run['id']}",
            "html_url": f"{self.url}/runs/{run['id']}",
            "id": run["id"],
            "name": run["name"],
            "head_sha": run["head_sha"],
            "external_id": run.get("external_id"),
            "status": run.get("status", "queued"),
            "conclusion": run.get("conclusion"),
            "started_at": TS,
            "completed_at": run.get("completed_at"),
            "pull_requests": [],
            "check_suite": {"id": 1},
            "app": {
                "id": 15368,
                "name": "GitHub Actions",
                "description": "",
                "external_url": "https://help.github.com/en/actions",
                "html_url": "https://github.com/apps/github-actions",
                "owner": user_json("github", self._base()),
            },
            "output": {
                "title": output.get("title"),
                "summary": output.get("summary"),
                "text": output.get("text"),
                "annotations_count": len(run["annotations"]),
                "annotations_url": f"{base}/check-runs/{run['id']}/annotations",
            },
        }

    def _handler(self):
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def _serve(self):
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    payload = json.loads(raw) if raw else {}
                except json.JSONDecodeError:
                    payload = {}
                status, body, headers = fake.handle(self.command, self.path, self.headers, payload)
                if isinstance(body, bytes):
                    data = body
                else:
                    data = b"" if body is None else json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for key, value in headers.items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PATCH = do_DELETE = _serve

            def log_message(self, *args):
                pass

        return Handler


_USER_EXTRA = {key: None for key in "bio blog company email hireable location name".split()} | {
    "followers": 0,
    "following": 0,
    "public_gists": 0,
    "public_repos": 0,
    "created_at": TS,
    "updated_at": TS,
}
_CHECK_STATUS = ("queued", "in_progress", "completed")
_CHECK_CONCLUSIONS = (
    "action_required cancelled failure neutral success skipped stale timed_out".split()
)
_LEVELS = ("notice", "warning", "failure")


def _check_run_errors(payload, create):
    """The Checks API's rules the bot could break, as GitHub's 422 message, or None."""
    if create:
        if not payload.get("name") or not re.fullmatch(
            r"[0-9a-f]{40}", payload.get("head_sha") or ""
        ):
            return "name and a 40-hex head_sha are required"
    if payload.get("status", "queued") not in _CHECK_STATUS:
        return f"status {payload.get('status')!r} invalid"
    conclusion = payload.get("conclusion")
    if conclusion is not None and conclusion not in _CHECK_CONCLUSIONS:
        return f"conclusion {conclusion!r} invalid"
    if payload.get("status") == "completed" and conclusion is None:
        return "conclusion is required when status is completed"
    output = payload.get("output")
    if output is not None:
        if not output.get("title") or output.get("summary") is None:
            return "output needs title and summary"
        if len(output["summary"]) > 65535 or len(output.get("text") or "") > 65535:
            return "output summary/text is too long (maximum is 65535 characters)"
        notes = output.get("annotations") or []
        if len(notes) > 50:
            return "at most 50 annotations per request"
        for note in notes:
            missing = {"path", "start_line", "end_line", "annotation_level", "message"} - set(note)
            if missing:
                return f"annotation lacks {sorted(missing)}"
            if note["annotation_level"] not in _LEVELS:
                return f"annotation_level {note['annotation_level']!r} invalid"
    return None
