"""A small client for the Prometheus HTTP API (Prometheus, Thanos, Mimir, VictoriaMetrics).

Credentials come from the environment or from files, never from the command line (where
`ps` and shell history would show them): a bearer token (KVDIAG_PROMETHEUS_TOKEN or a
token file) or basic auth (KVDIAG_PROMETHEUS_USER / KVDIAG_PROMETHEUS_PASSWORD, or a file
holding `user:password`). A URL with credentials in it is refused for the same reason.
"""

from __future__ import annotations

import base64
import json
import os
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvdiag.analyzer.ingest.metrics.api_pairs import split_pairs
from kvdiag.analyzer.live.secrets_env import PASSWORD_ENV, TENANT_ENV, TOKEN_ENV, USER_ENV
from kvdiag.domain.errors import LiveSourceError, LiveUsageError


@dataclass(frozen=True, slots=True)
class Auth:
    bearer: str | None = None
    basic: tuple[str, str] | None = None
    tenant: str | None = None

    def headers(self) -> dict[str, str]:
        out = {}
        if self.bearer:
            out["Authorization"] = f"Bearer {self.bearer}"
        elif self.basic:
            pair = f"{self.basic[0]}:{self.basic[1]}".encode()
            out["Authorization"] = "Basic " + base64.b64encode(pair).decode("ascii")
        if self.tenant:
            out["X-Scope-OrgID"] = self.tenant
        return out

    @property
    def kind(self) -> str:
        return "bearer token" if self.bearer else "basic auth" if self.basic else "none"


def auth_from(
    token_file: Path | None, basic_file: Path | None, env: Mapping[str, str] = os.environ
) -> Auth:
    """Credentials from the files given, else from the environment."""
    token = token_file.read_text(encoding="utf-8").strip() if token_file else env.get(TOKEN_ENV)
    basic: tuple[str, str] | None = None
    if basic_file is not None:
        user, sep, password = basic_file.read_text(encoding="utf-8").strip().partition(":")
        if not sep:
            raise LiveUsageError(f"{basic_file}: expected one line user:password")
        basic = (user, password)
    elif env.get(USER_ENV):
        basic = (env[USER_ENV], env.get(PASSWORD_ENV, ""))
    return Auth(token or None, basic, env.get(TENANT_ENV) or None)


def check_url(url: str) -> str:
    """The base URL without a trailing slash; credentials in it are refused."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise LiveUsageError(f"{url!r}: expected http(s)://HOST:PORT[/prefix]")
    if parts.username or parts.password:
        raise LiveUsageError(
            f"credentials in the URL are refused (the command line is visible to others); "
            f"use {TOKEN_ENV}, {USER_ENV}/{PASSWORD_ENV} or a credentials file"
        )
    return url.rstrip("/")


class PromClient:
    """GET requests against /api/v1; every failure becomes a LiveSourceError."""

    def __init__(self, url: str, auth: Auth, timeout_s: float = 120.0) -> None:
        self.url = check_url(url)
        self._auth = auth
        self._timeout = timeout_s
        self.requests = 0

    def get(self, path: str, params: Mapping[str, Any]) -> Any:
        """The `data` of a successful API response."""
        return self._success(path, self._parse(path, self._body(path, params), json.loads))

    def _body(self, path: str, params: Mapping[str, Any]) -> bytes:
        query = urllib.parse.urlencode(params, doseq=True)
        request = urllib.request.Request(f"{self.url}{path}?{query}", headers=self._auth.headers())
        self.requests += 1
        try:
            with urllib.request.urlopen(request, timeout=self._timeout) as response:
                return bytes(response.read())
        except urllib.error.HTTPError as exc:
            body = bytes(exc.read())
            if not body.lstrip().startswith(b"{"):
                raise LiveSourceError(f"{self.url}{path}: HTTP {exc.code} {exc.reason}") from None
            return body  # the API's own error document, said by _success
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise LiveSourceError(f"{self.url}: cannot connect ({reason})") from None

    def _parse(self, path: str, payload: bytes | str, parse: Callable[[Any], Any]) -> Any:
        try:
            return parse(payload)
        except (ValueError, RecursionError):  # JSON errors, and bytes that are not UTF-8
            raise LiveSourceError(f"{self.url}{path}: the answer is not JSON") from None

    def _success(self, path: str, doc: Any) -> Any:
        if not isinstance(doc, dict) or doc.get("status") != "success":
            error = doc.get("error", doc) if isinstance(doc, dict) else doc
            raise LiveSourceError(f"{self.url}{path}: {error}")
        return doc.get("data")

    def label_names(self, match: str, start: float, end: float) -> list[str]:
        """Metric names with series matching `match` in the window."""
        data = self.get(
            "/api/v1/label/__name__/values", {"match[]": match, "start": start, "end": end}
        )
        return [str(n) for n in data or []]

    def query_range(self, query: str, start: float, end: float, step: float) -> Matrix:
        """The matrix answer, its sample pairs left as text where they are plain."""
        path = "/api/v1/query_range"
        body = self._body(path, {"query": query, "start": start, "end": end, "step": step})
        text = self._parse(path, body, lambda b: b.decode("utf-8"))
        doc, _ = self._parse(path, text, split_pairs)
        data = self._success(path, doc)
        if not isinstance(data, dict) or data.get("resultType") != "matrix":
            raise LiveSourceError(f"{self.url}: query_range answered no matrix for {query}")
        result = data.get("result")
        return Matrix(result if isinstance(result, list) else [], text)


@dataclass(frozen=True, slots=True)
class Matrix:
    """A query_range result: its series, whose `values` may be PairArrays into `text`."""

    result: list[Any]
    text: str
