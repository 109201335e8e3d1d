"""``ctx.patched`` and ``ctx.deprecate_patch``: one job function that serves the runs
old code started and the runs new code starts. No Django here.

A patch's answer is decided the first time a run reaches it and recorded as a step
(``patch:<change_id>``, kind ``patch``): ``True`` when the run has no recorded step
left to replay at that point (a new run, or one that had not got this far when the
code changed), ``False`` when its history already goes past it (the old code recorded
steps beyond it). Every later replay returns the recorded answer, so a run never
switches branches halfway.

The answer is written no later than the next record of the run (``StepCore._save``
writes pending answers first): a retry that finds steps recorded after the patch
finds its answer too. A sync job writes it at once; an async job's ``patched`` is not
awaited, so its answer waits for the next step's write or the job's return.
"""

from __future__ import annotations

from ..exceptions import InvalidName, StepUsageError
from .core import MAX_STEP_NAME, StepCore
from .records import RecordedStep
from .serialization import unstorable
from .vocabulary import StepKind, StepStatus

#: The step name of a patch's answer is this and its change id.
PREFIX = "patch:"


def step_name(steps: StepCore, change_id: str) -> str:
    """``patch:<change_id>``; a change id is a non-empty string the name can hold."""
    longest = MAX_STEP_NAME - len(PREFIX)
    if not isinstance(change_id, str) or not change_id or len(change_id) > longest:
        raise InvalidName(
            f"job {steps.job_name!r}: a patch's change id is a non-empty string of at most "
            f"{longest} characters, got {change_id!r}"
        )
    if (why := unstorable(change_id)) is not None:
        raise InvalidName(
            f"job {steps.job_name!r}: change id {change_id!r} cannot be stored: {why}"
        )
    return PREFIX + change_id


def answer(steps: StepCore, change_id: str) -> tuple[bool, RecordedStep | None]:
    """The run's answer to the patch ``change_id``, and the record to write (None when
    it is recorded already). The run's records must be read (``StepCore._loaded``)."""
    name = step_name(steps, change_id)
    known = steps._records.get(name)
    if known is not None and known.kind is not StepKind.PATCH:
        raise StepUsageError(
            f"job {steps.job_name!r} run {steps.run_id}: ctx.patched({change_id!r}) records "
            f"its answer as step {name!r}, which a step of the job's already uses"
        )
    if name in steps._used and known is not None:  # asked twice in one attempt
        return bool(known.output), None
    steps._used.append(name)
    if known is not None and known.status is StepStatus.COMPLETED:
        steps._replayed.append(name)
        return bool(known.output), None
    # Steps recorded by earlier attempts and not reached yet by this one: the code that
    # recorded them went past this point without the patch.
    ahead = any(recorded not in steps._used for recorded in steps._records)
    now = steps._clock.now()
    record = RecordedStep(
        run_id=steps.run_id,
        name=name,
        kind=StepKind.PATCH,
        status=StepStatus.COMPLETED,
        started_at=now,
        completed_at=now,
        attempts=1,
        output=not ahead,
    )
    steps._records[name] = record
    return not ahead, record


def deprecate(steps: StepCore, change_id: str) -> None:
    """The patch's old branch is gone: a recorded answer, either one, is accepted (it
    counts as reached, as a replayed step does); nothing is recorded for other runs."""
    name = step_name(steps, change_id)
    known = steps._records.get(name)
    if known is not None and known.kind is StepKind.PATCH and name not in steps._used:
        steps._used.append(name)
        steps._replayed.append(name)


def unreached(steps: StepCore) -> list[str]:
    """The completed steps of the run this attempt never reached (renamed or removed by
    a deploy), in the order they first ran. A patch's answer counts as reached when
    the code still asks ``patched`` or says ``deprecate_patch``: one whose call is gone
    while runs that recorded it were unfinished is reported like any step. The run's
    records must be read."""
    used = set(steps._used)
    return [
        record.name
        for record in steps._records.values()
        if record.name not in used and record.status is StepStatus.COMPLETED
    ]
