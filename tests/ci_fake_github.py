"""A strict fake of GitHub's REST API on loopback, with faults and a request log."""

import io
import json
import re
import threading
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs

LIMIT = 65536
TS = "2026-01-01T00:00:00Z"
_CHECK_CONCLUSIONS = "action_required cancelled failure neutral success skipped stale timed_out"


class FakeGitHub:
    def __init__(
        self, token="test-token", owner="sgl", repo="sglang", bot="ci-bot", read_only=False
    ):
        self.token, self.owner, self.repo = token, owner, repo
        self.bot, self.read_only = bot, read_only
        self.lock = threading.RLock()
        self.bodies: dict[int, str | None] = {}  # issue or PR number -> body
        self.heads: dict[int, str] = {}  # PR -> head sha
        self.pr_meta: dict[int, dict] = {}  # PR -> {head_repo, branch, labels}
        self.issue_meta: dict[int, dict] = {}  # plain issues (not PRs): title, login, state
        self.comments: dict[int, dict] = {}
        self.reviews: dict[int, list] = {}  # PR -> [{login, commit_id, state, at}]
        self.permissions: dict[str, str] = {}  # login -> admin | write | read (default none)
        self.associations: dict[str, str] = {}  # login -> author_association (default NONE)
        self.statuses: list[dict] = []
        self.check_runs: dict[int, dict] = {}
        self.artifacts: dict[int, list] = {}  # run id -> [{id, name, size_in_bytes, expired}]
        self.blobs: dict[int, bytes] = {}  # artifact id -> its zip
        self.blob_auth: list = []  # the Authorization header each storage download carried
        self.requests: list[tuple[str, str]] = []
        self.bodies_sent: list[tuple[str, str, dict]] = []  # (method, path, JSON) of every write
        self.faults: list[tuple[str, str, int, dict, dict]] = []
        self.hooks: list = []  # (method, path regex, fn(fake)) run once, after that request
        self._next_id = 1000
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.server.daemon_threads = True
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def start(self):
        self.thread.start()
        return self

    def stop(self):
        self.server.shutdown()
        self.server.server_close()

    __enter__ = start

    def __exit__(self, *exc):
        self.stop()

    def add_pr(self, number: int, body: str | None, head_sha: str = "a" * 40, fork=None):
        """A PR; ``fork`` (OWNER/NAME) makes its head a fork's, else a branch of this repo."""
        self.bodies[number], self.heads[number] = body, head_sha
        head_repo = fork or f"{self.owner}/{self.repo}"
        self.pr_meta[number] = {"head_repo": head_repo, "branch": f"branch-{number}", "labels": []}

    def add_issue(self, title, body, login=None, state="open") -> int:
        with self.lock:
            number = max([0, *self.bodies]) + 1
            self.bodies[number] = body
            self.issue_meta[number] = {"title": title, "login": login or self.bot, "state": state}
            return number

    def add_review(self, number, login, commit_id, state="APPROVED", at=TS):
        review = {"login": login, "commit_id": commit_id, "state": state, "at": at}
        self.reviews.setdefault(number, []).append(review)

    def add_comment(self, number, body, login=None, at=TS) -> int:
        with self.lock:
            self._next_id += 1
            comment = {"id": self._next_id, "issue": number, "body": body, "at": at}
            self.comments[self._next_id] = {**comment, "login": login or self.bot}
            return self._next_id

    def serve_artifact(self, run_id, name, data: bytes, size=None):
        """Run ``run_id``'s artifact ``name``: the zip ``data``, listed as ``size`` bytes."""
        with self.lock:
            self._next_id += 1
            listed = len(data) if size is None else size
            entry = {"id": self._next_id, "name": name, "size_in_bytes": listed, "expired": False}
            self.artifacts.setdefault(run_id, []).append(entry)
            self.blobs[self._next_id] = data

    def fail_next(self, method, path_regex, status, body=None, headers=None):
        body = body or {"message": "fault"}
        self.faults.append((method, path_regex, status, body, headers or {}))

    def after(self, method, path_regex, fn):
        self.hooks.append((method, path_regex, fn))

    def count(self, method, path_regex=".*") -> int:
        return sum(1 for m, p in self.requests if m == method and re.search(path_regex, p))

    def handle(self, method, path, headers, payload):
        """(status, JSON body or bytes or None, extra headers)."""
        with self.lock:
            self.requests.append((method, path))
            match = re.fullmatch(r"/storage/(\d+)\.zip", path)
            if match and method == "GET":  # on another host name: the token must not follow
                self.blob_auth.append(headers.get("Authorization"))
                return 200, self.blobs.get(int(match[1]), b""), {}
            for fault in list(self.faults):
                if fault[0] == method and re.search(fault[1], path):
                    self.faults.remove(fault)
                    return fault[2:]
        if headers.get("Authorization", "") not in (f"token {self.token}", f"Bearer {self.token}"):
            return 401, {"message": "Bad credentials"}, {}
        if method != "GET":
            with self.lock:
                self.bodies_sent.append((method, path, payload))
            if self.read_only:
                return 403, {"message": "Resource not accessible by integration"}, {}
        path, _, query = path.partition("?")
        if path == "/api/v3/user" and method == "GET":
            if self.token.startswith("ghs_"):
                return 403, {"message": "Resource not accessible by integration"}, {}
            return 200, _user(self.bot), {}
        prefix = f"/api/v3/repos/{self.owner}/{self.repo}"
        if not path.startswith(prefix):
            return 404, {"message": "Not Found"}, {}
        with self.lock:
            query = {k: v[0] for k, v in parse_qs(query).items()}
            for verb, pattern, route in ROUTES:
                match = re.fullmatch(pattern, path[len(prefix) :])
                if verb == method and match:
                    try:
                        result = route(self, payload, query, *match.groups())
                    except _Refused as refused:
                        result = refused.args[0], {"message": refused.args[1]}
                    result = result if isinstance(result, tuple) else (200, result)
                    result = (*result, {}) if len(result) == 2 else result
                    break
            else:
                result = 404, {"message": f"no fake route for {method} {path}"}, {}
        for hook in list(self.hooks):
            if hook[0] == method and re.search(hook[1], path):
                self.hooks.remove(hook)
                hook[2](self)
        return result

    def _issue(self, number):
        if number not in self.bodies:
            raise _Refused(404, "Not Found")
        meta = self.issue_meta.get(number) or {"title": f"PR {number}", "state": "open"}
        user = _user(meta.get("login", "author"))
        data = {"number": number, "body": self.bodies[number], "user": user, **meta}
        return data if number in self.issue_meta else {**data, "pull_request": {}}

    def _comment(self, c):
        return {"id": c["id"], "body": c["body"], "user": _user(c["login"]), "created_at": c["at"],
                "updated_at": c["at"], "author_association": self._association(c["login"])}  # fmt: skip

    def _association(self, login):
        return self.associations.get(login, "NONE")

    def _pull(self, number):
        if number not in self.heads:
            raise _Refused(404, "Not Found")
        meta = self.pr_meta[number]
        head_repo = {"full_name": meta["head_repo"]} if meta["head_repo"] else None
        return {
            "number": number,
            "head": {"sha": self.heads[number], "ref": meta["branch"], "repo": head_repo},
            "base": {"ref": "main", "repo": {"full_name": f"{self.owner}/{self.repo}"}},
            "labels": [{"name": name} for name in meta["labels"]],
        }

    def list_issues(self, payload, query):
        """As GitHub: PRs included, open unless ``state``, newest first, ``creator`` filters."""
        state, creator = query.get("state", "open"), query.get("creator")
        numbers = sorted(self.bodies, reverse=query.get("direction") != "asc")
        items = [i for i in map(self._issue, numbers) if state in ("all", i["state"])]
        return _page([i for i in items if creator in (None, i["user"]["login"])], query)

    def create_issue(self, payload, query):
        if not payload.get("title"):
            raise _Refused(422, "Validation Failed: title")
        return 201, self._issue(self.add_issue(payload["title"], _body(payload)))

    def get_issue(self, payload, query, number):
        return self._issue(int(number))

    def edit_issue(self, payload, query, number):
        number, body = int(number), _body(payload, self._issue(int(number))["body"])
        if payload.get("state", "open") not in ("open", "closed"):
            raise _Refused(422, f"state {payload['state']!r} invalid")
        self.bodies[number] = body
        if number in self.issue_meta:
            self.issue_meta[number].update(
                {k: payload[k] for k in ("title", "state") if k in payload}
            )
        return self._issue(number)

    def list_comments(self, payload, query, number):
        self._issue(int(number))
        found = [c for _, c in sorted(self.comments.items()) if c["issue"] == int(number)]
        return _page([self._comment(c) for c in found], query)

    def create_comment(self, payload, query, number):
        self._issue(int(number))
        return 201, self._comment(self.comments[self.add_comment(int(number), _body(payload))])

    def edit_comment(self, payload, query, cid):
        comment = self._comment_of(cid)
        comment["body"] = _body(payload)
        return self._comment(comment)

    def delete_comment(self, payload, query, cid):
        del self.comments[self._comment_of(cid)["id"]]
        return 204, None

    def _comment_of(self, cid):
        if int(cid) not in self.comments:
            raise _Refused(404, "Not Found")
        return self.comments[int(cid)]

    def get_pull(self, payload, query, number):
        return self._pull(int(number))

    def list_pulls(self, payload, query):
        def head(meta):
            return f"{(meta['head_repo'] or '').split('/')[0]}:{meta['branch']}"

        return [
            self._pull(n)
            for n, meta in sorted(self.pr_meta.items())
            if head(meta) == query.get("head")
        ]

    def list_reviews(self, payload, query, number):
        self._pull(int(number))
        reviews = [
            {"id": i + 1, "commit_id": r["commit_id"], "state": r["state"], "submitted_at": r["at"],
             "user": _user(r["login"]), "author_association": self._association(r["login"])}
            for i, r in enumerate(self.reviews.get(int(number), []))
        ]  # fmt: skip
        return _page(reviews, query)

    def permission(self, payload, query, login):
        return {"permission": self.permissions.get(login, "none"), "user": _user(login)}

    def list_artifacts(self, payload, query, run_id):
        found = [
            a for a in self.artifacts.get(int(run_id), []) if query.get("name") in (None, a["name"])
        ]
        return {"total_count": len(found), "artifacts": found}

    def artifact_zip(self, payload, query, artifact_id):
        where = self.url.replace("127.0.0.1", "localhost")
        return 302, None, {"Location": f"{where}/storage/{artifact_id}.zip"}

    def create_status(self, payload, query, sha):
        state, description = payload.get("state"), payload.get("description") or ""
        if state not in ("error", "failure", "pending", "success"):
            raise _Refused(422, f"state {state!r} invalid")
        if len(description) > 140:
            raise _Refused(422, "description is too long (maximum is 140 characters)")
        fields = {k: payload.get(k) for k in ("context", "target_url")}
        self.statuses.append({"sha": sha, "state": state, "description": description, **fields})
        return 201, {**self.statuses[-1], "id": len(self.statuses)}

    def create_check_run(self, payload, query):
        _refuse(_check_run_errors(payload, create=True))
        self._next_id += 1
        notes = list((payload.get("output") or {}).get("annotations") or [])
        self.check_runs[self._next_id] = {**payload, "id": self._next_id, "annotations": notes}
        return 201, {"id": self._next_id, "name": payload["name"]}

    def update_check_run(self, payload, query, run_id):
        run = self.check_runs.get(int(run_id))
        if run is None:
            raise _Refused(404, "Not Found")
        _refuse(_check_run_errors(payload, create=False))
        kept = ("status", "conclusion", "completed_at", "details_url")
        run.update({k: payload[k] for k in kept if k in payload})
        if "output" in payload:
            run["annotations"] = run["annotations"] + (payload["output"].get("annotations") or [])
            run["output"] = {**payload["output"], "annotations": run["annotations"]}
        return {"id": run["id"]}


ROUTES = [
    ("GET", r"/issues", FakeGitHub.list_issues),
    ("POST", r"/issues", FakeGitHub.create_issue),
    ("GET", r"/issues/(\d+)", FakeGitHub.get_issue),
    ("PATCH", r"/issues/(\d+)", FakeGitHub.edit_issue),
    ("GET", r"/issues/(\d+)/comments", FakeGitHub.list_comments),
    ("POST", r"/issues/(\d+)/comments", FakeGitHub.create_comment),
    ("PATCH", r"/issues/comments/(\d+)", FakeGitHub.edit_comment),
    ("DELETE", r"/issues/comments/(\d+)", FakeGitHub.delete_comment),
    ("GET", r"/pulls", FakeGitHub.list_pulls),
    ("GET", r"/pulls/(\d+)", FakeGitHub.get_pull),
    ("GET", r"/pulls/(\d+)/reviews", FakeGitHub.list_reviews),
    ("GET", r"/collaborators/([^/]+)/permission", FakeGitHub.permission),
    ("GET", r"/actions/runs/(\d+)/artifacts", FakeGitHub.list_artifacts),
    ("GET", r"/actions/artifacts/(\d+)/zip", FakeGitHub.artifact_zip),
    ("POST", r"/statuses/([0-9a-f]{7,40})", FakeGitHub.create_status),
    ("POST", r"/check-runs", FakeGitHub.create_check_run),
    ("PATCH", r"/check-runs/(\d+)", FakeGitHub.update_check_run),
]


def zipped(files: dict) -> bytes:
    """A zip of ``files`` (name -> text or bytes), as upload-artifact stores a folder."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    return buffer.getvalue()


def _user(login: str) -> dict:
    return {"login": login, "type": "Bot" if login.endswith("[bot]") else "User"}


def _page(items, query):
    size, page = int(query.get("per_page", 30)), int(query.get("page", 1))
    return items[(page - 1) * size : page * size]


class _Refused(Exception):
    """(status, message): what GitHub answers a request it refuses."""


def _refuse(error):
    if error:
        raise _Refused(422, error)


def _body(payload, default=None):
    body = payload.get("body", default)
    if len(body or "") > LIMIT:
        raise _Refused(422, "Validation Failed: body is too long")
    return body


def _check_run_errors(payload, create):
    """The Checks API's rules the bot could break, as GitHub's 422 message, or None."""
    if create and not (
        payload.get("name") and re.fullmatch(r"[0-9a-f]{40}", payload.get("head_sha") or "")
    ):
        return "name and a 40-hex head_sha are required"
    if payload.get("status", "queued") not in ("queued", "in_progress", "completed"):
        return f"status {payload.get('status')!r} invalid"
    conclusion = payload.get("conclusion")
    if conclusion is not None and conclusion not in _CHECK_CONCLUSIONS.split():
        return f"conclusion {conclusion!r} invalid"
    if payload.get("status") == "completed" and conclusion is None:
        return "conclusion is required when status is completed"
    output = payload.get("output")
    if output is None:
        return None
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
        if note["annotation_level"] not in ("notice", "warning", "failure"):
            return f"annotation_level {note['annotation_level']!r} invalid"
    return None


def _handler(fake):
    class Handler(BaseHTTPRequestHandler):
        def _serve(self):
            length = int(self.headers.get("Content-Length") or 0)
            try:
                payload = json.loads(self.rfile.read(length)) if length else {}
            except json.JSONDecodeError:
                payload = {}
            status, body, headers = fake.handle(self.command, self.path, self.headers, payload)
            if not isinstance(body, bytes):
                body = b"" if body is None else json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            for key, value in headers.items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = do_PATCH = do_DELETE = _serve

        def log_message(self, *args):
            pass

    return Handler
