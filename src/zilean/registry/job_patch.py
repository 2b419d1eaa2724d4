"""`PATCH /api/jobs/{id}`: a JSON merge patch (RFC 7386) applied to the job as it stands.

The patched job goes through exactly the validation `PUT` uses, so a script can change
one field without resending, or knowing, the others. Fields the patch leaves out keep
their stored values; a member set to `null` is removed, so the field takes its default.
`body` is the exception to merging: it is the request's own JSON, replaced whole.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError, create_model

from zilean.errors import InvalidInput
from zilean.input_models import validation_message
from zilean.registry.fields import JobInput, JobWrite


def _patch_annotation(annotation: Any) -> Any:
    # An object member may be set to null inside (`{"headers": {"X-Old": null}}`): the
    # merged job, not the patch, is checked against the field's own type.
    if getattr(annotation, "__origin__", None) is dict:
        return dict[str, Any] | None
    return annotation | None


# Every `JobWrite` field, optional and nullable; other unknown fields are refused.
JobPatch = create_model(  # type: ignore[call-overload]
    "JobPatch",
    __base__=JobInput,
    __doc__="A JSON merge patch of a job: only the fields to change; `null` restores a default.",
    **{
        name: (_patch_annotation(info.annotation), None)
        for name, info in JobWrite.model_fields.items()
    },
)


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge member by member, `null` removes, anything else replaces."""
    if not isinstance(patch, Mapping):
        return patch
    merged = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = merge_patch(merged.get(key), value)
    return merged


def patched_job(current: Mapping[str, Any], patch: Mapping[str, Any]) -> JobWrite:
    """The job `current` (as the API shows it) would become under `patch`, validated."""
    fields = {name: current[name] for name in JobWrite.model_fields if name in current}
    # Left out, the stored volume declaration is kept (as `PUT` does), even an unreadable one.
    fields.pop("capabilities", None)
    if "body" in patch:
        # The body is one raw JSON value, sent as written: a patch replaces it whole.
        fields.pop("body", None)
    merged = merge_patch(fields, patch)
    try:
        return JobWrite.model_validate(merged)
    except ValidationError as exc:
        raise InvalidInput(validation_message(exc.errors())) from None
