"""An HTTP job's call: open its secrets, build the request, send it, report what happened."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from zilean.crypto.contexts import secret_context
from zilean.crypto.secretbox import SecretBox, SecretUnreadable
from zilean.execution.payload import AttemptArgs, Trigger
from zilean.execution.recording import LoadedJob, StoredVariable
from zilean.execution.webhook_context import template_variables
from zilean.jobkinds.caller import Caller, CallResult
from zilean.jobkinds.definitions import kinds_run_by
from zilean.jobkinds.errors import CallError, PermanentCallError
from zilean.jobkinds.http.call import (
    NO_REQUEST,
    effective_timeout_ms,
    perform,
    request_fields,
    status_error,
)
from zilean.jobkinds.http.request import (
    REQUEST_COLUMNS,
    HttpRequestSpec,
    build_request,
    open_auth_secret,
)
from zilean.jobkinds.http.template import references
from zilean.registry.kinds import JobType

if TYPE_CHECKING:
    import aiohttp

OPENED_SECRETS_KEPT = 4096  # decrypted secret variables a caller keeps, at most
BUILT_REQUESTS_KEPT = 2048  # built requests a caller keeps (the least recently used go)


class HttpCaller:
    """Sends HTTP attempts on one worker's session, opening secrets with the master key."""

    no_call: Mapping[str, Any] = NO_REQUEST

    def __init__(self, client: aiohttp.ClientSession, box: SecretBox) -> None:
        self._client = client
        self._box = box
        self._opened: dict[tuple[uuid.UUID, bytes], str] = {}
        self._built: dict[tuple[object, ...], HttpRequestSpec] = {}

    def timeout_ms(self, row: Mapping[str, Any]) -> int:
        return effective_timeout_ms(row["exec_timeout_ms"])

    async def call(self, loaded: LoadedJob, args: AttemptArgs) -> CallResult:
        row = loaded.row
        spec: HttpRequestSpec | None = None
        started = time.monotonic()
        try:
            auth_secret = open_auth_secret(row, self._box)
            variables, secret_values = self._open_variables(row, loaded.variables, auth_secret)
            spec = self._request(row, args, variables, secret_values, auth_secret)
            outcome = await perform(self._client, spec, timeout_ms=int(row["exec_timeout_ms"]))
        except CallError as exc:
            if spec is None:
                return CallResult(exc, None, NO_REQUEST)
            elapsed = round((time.monotonic() - started) * 1000)
            return CallResult(exc, elapsed, request_fields(spec, exc), status_code=exc.status_code)
        error = status_error(spec, outcome)
        return CallResult(
            error,
            outcome.duration_ms,
            request_fields(spec, outcome),
            loop_signal=outcome.body,
            status_code=outcome.status_code,
        )

    def _request(
        self,
        row: Mapping[str, Any],
        args: AttemptArgs,
        variables: dict[str, str],
        secret_values: list[str],
        auth_secret: str | None,
    ) -> HttpRequestSpec:
        """The attempt's request, built once per distinct input and then kept.

        A job sends the same request attempt after attempt, and building it (substituting,
        checking and merging the URL, headers and auth) is a tenth of an attempt's CPU in
        the worker. The key holds every input `build_request` reads, so an edited row, a
        changed variable or a new pool member builds anew. A webhook run's values are
        its own: such requests are built every time and never kept.
        """
        hops = args.webhook_hops if args.trigger == Trigger.WEBHOOK else None
        webhook = template_variables(args)
        if webhook:
            # A webhook's values win over a global variable that happens to share a name.
            variables = variables | webhook
            return self._build(row, args.pool_index, hops, variables, secret_values, auth_secret)
        key = (
            json.dumps([row.get(column) for column in REQUEST_COLUMNS], default=str),
            args.pool_index,
            hops,
            tuple(variables.items()),
            tuple(secret_values),
            auth_secret,
        )
        spec = self._built.pop(key, None)
        if spec is None:
            spec = self._build(row, args.pool_index, hops, variables, secret_values, auth_secret)
            if len(self._built) >= BUILT_REQUESTS_KEPT:
                del self._built[next(iter(self._built))]  # the least recently used
        self._built[key] = spec  # (re)inserted last: the most recently used
        return spec

    @staticmethod
    def _build(
        row: Mapping[str, Any],
        pool_index: int,
        hops: int | None,
        variables: Mapping[str, str],
        secret_values: list[str],
        auth_secret: str | None,
    ) -> HttpRequestSpec:
        return build_request(
            row,
            variables=variables,
            secret_values=secret_values,
            auth_secret=auth_secret,
            pool_index=pool_index,
            webhook_hops=hops,
        )

    def _open_variables(
        self,
        row: Mapping[str, Any],
        loaded: Sequence[StoredVariable],
        auth_secret: str | None,
    ) -> tuple[dict[str, str], list[str]]:
        """Return the plaintext of every variable the job references, and of every secret.

        Every secret is opened, referenced or not, since each is redacted from what the
        attempt records. Raise `PermanentCallError` for a referenced secret the current
        key cannot open; one that is not referenced and cannot be opened cannot be sent
        either, and is left out.
        """
        if not loaded:  # the read loads only the variables a job may need
            return {}, []
        texts = [
            row["url"] or "",
            row["body"] or "",
            json.dumps(row["query_params"]),
            json.dumps(row["headers"]),
            json.dumps(row["auth_config"]),
            auth_secret or "",
        ]
        wanted = set().union(*(references(text) for text in texts))
        variables: dict[str, str] = {}
        secret_values: list[str] = []
        for variable in loaded:
            value = variable.value
            if variable.is_secret:
                opened = self._open_secret(variable)
                if opened is None:
                    if variable.name in wanted:
                        raise PermanentCallError(
                            f"the secret global variable {variable.name} cannot be decrypted "
                            "with the current key; enter it again"
                        )
                    continue
                value = opened
                secret_values.append(value)
            if variable.name in wanted:
                variables[variable.name] = value
        return variables, secret_values

    def _open_secret(self, variable: StoredVariable) -> str | None:
        """Return a secret variable's plaintext ("" when empty), None when unreadable.

        Opened secrets are kept by ciphertext: every attempt loads every secret, and a
        changed value has a new ciphertext (a fresh nonce), so nothing stale is served.
        """
        if variable.sealed is None:
            return ""  # an empty secret is stored as no ciphertext
        key = (variable.id, variable.sealed)
        cached = self._opened.get(key)
        if cached is not None:
            return cached
        try:
            value = self._box.open(variable.sealed, secret_context(variable.id))
        except SecretUnreadable:
            return None
        if len(self._opened) >= OPENED_SECRETS_KEPT:
            self._opened.clear()
        self._opened[key] = value
        return value


def http_callers(client: aiohttp.ClientSession, box: SecretBox) -> dict[JobType, Caller]:
    """The HTTP worker's callers: every kind it runs (one, today) on one session."""
    return {kind.job_type: HttpCaller(client, box) for kind in kinds_run_by(None)}
