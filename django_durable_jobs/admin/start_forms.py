"""The start pages' forms (``start.py``): text in, Python values out. Only the syntax
is judged here; what a value may be is the verb's to say (``enqueue_job``,
``publish_event``), and its refusal is shown on the form as the API words it."""

from __future__ import annotations

import json
from typing import Any

from django import forms

from ..definitions.registry import JobOptions, all_jobs, get_job
from ..engine.serialization import error_line


def refusal(exc: BaseException) -> str:
    """The API's error on one line, as the CLI and the run page show errors: our code
    (``X_PAYLOAD_INVALID: ...``) or the exception's type (a key function's
    ``KeyError: 'region'``) and its message."""
    return error_line(type(exc).__name__, str(exc), code=getattr(exc, "code", ""))


def _json_field(label: str, initial: str, help_text: str) -> forms.CharField:
    return forms.CharField(
        label=label,
        required=False,
        initial=initial,
        strip=False,
        help_text=help_text,
        widget=forms.Textarea(attrs={"rows": 3, "class": "djdj-json-input", "spellcheck": "false"}),
    )


def _one_key_once(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: set[str] = set()
    for key, _ in pairs:
        if key in seen:  # json.loads would keep the last value without a word
            raise ValueError(f"the key {key!r} appears twice in one object")
        seen.add(key)
    return dict(pairs)


def parse_json(text: str, what: str, empty: Any) -> Any:
    """The value typed as JSON text (``empty`` when blank). Only the syntax is checked
    here: what the value may be (no NaN, no NUL, the size limit) is the verb's to say."""
    if not text.strip():
        return empty
    try:
        return json.loads(text, object_pairs_hook=_one_key_once)
    except ValueError as exc:  # JSONDecodeError, or a key twice
        raise forms.ValidationError(f"{what} is not valid JSON: {exc}") from None


class EnqueueForm(forms.Form):
    job = forms.CharField(label="Job", widget=forms.Select)
    args = _json_field("Args", "[]", "The positional arguments after ctx, as a JSON list.")
    kwargs = _json_field("Kwargs", "{}", "The keyword arguments, as a JSON object.")
    queue = forms.CharField(label="Queue", required=False, help_text="Blank: the job's queue.")
    priority = forms.IntegerField(
        label="Priority", required=False, help_text="Blank: the job's priority."
    )
    run_after = forms.CharField(
        label="Delay",
        required=False,
        help_text='Blank: now. A duration such as "30s", "5m" or "2h".',
    )
    idempotency_key = forms.CharField(
        label="Idempotency key",
        required=False,
        strip=False,
        help_text="Blank: none. With a key this job already used, its run is shown instead.",
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        choices = [("", "---------")] + [(name, name) for name in sorted(all_jobs())]
        self.fields["job"].widget.choices = choices

    def clean_job(self) -> str:
        name = self.cleaned_data["job"]
        try:
            get_job(name)  # a job removed since the page was drawn: the API's error
        except Exception as exc:
            raise forms.ValidationError(refusal(exc)) from None
        return str(name)

    def clean_args(self) -> Any:
        value = parse_json(self.cleaned_data["args"], "args", [])
        if not isinstance(value, list):
            raise forms.ValidationError(f"a JSON list of positional arguments, got {value!r}")
        return value

    def clean_kwargs(self) -> Any:
        value = parse_json(self.cleaned_data["kwargs"], "kwargs", {})
        if not isinstance(value, dict):
            raise forms.ValidationError(f"a JSON object of keyword arguments, got {value!r}")
        return value

    def options(self) -> JobOptions:
        """How this enqueue differs from the job's defaults; raises what ``using()`` raises."""
        data = self.cleaned_data
        return JobOptions(
            queue=data["queue"] or None,
            priority=data["priority"],
            run_after=data["run_after"] or None,
            idempotency_key=data["idempotency_key"] or None,
        )


class PublishForm(forms.Form):
    name = forms.CharField(label="Event name")
    key = forms.CharField(
        label="Key",
        required=False,
        help_text="Blank: no key. Waits that match a key wake for an event with that key.",
    )
    payload = _json_field("Payload", "", "JSON; blank: null. What the waiting steps return.")

    def clean_payload(self) -> Any:
        return parse_json(self.cleaned_data["payload"], "payload", None)
