"""The guide docs/how-to/changing-code.md, run: each block is deployed in turn as the
same module (a deploy replaces a module's code), under runs in flight driven by
``InlineJobs``; the reader's step functions are counters. What the guide says each
tool does is what happens. (That every block parses and names only what it defines is
tests/unit/test_docs_examples.py's, for every page.)"""

from __future__ import annotations

import types
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from django_durable_jobs.definitions import registry
from django_durable_jobs.models import JobRun, RunStatus
from django_durable_jobs.observe import versions
from django_durable_jobs.testing import InlineJobs
from tests.docs_pages import ROOT, blocks

pytestmark = pytest.mark.django_db

MODULE = "docs_changing_code"
GUIDE = ROOT / "docs" / "how-to" / "changing-code.md"


def guide_blocks() -> list[tuple[str, str]]:
    """(heading, code) of each python block of the guide, in order."""
    found = [(b.heading, b.code) for b in blocks(GUIDE) if b.lang == "python"]
    assert [heading for heading, _ in found] == [
        "Changing code while runs are in flight",  # the job before any change
        "Add a step",
        "Add a step",  # the patch, deprecated
        "Remove a step",
        "Change a step's meaning",
        "Change a step's meaning",
        "Change the arguments",
    ]
    return found


class Reader:
    """The reader's functions, counted: each call is recorded with its arguments."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...]]] = []

    def stubs(self) -> dict[str, Any]:
        def called(name: str, value: Any = None) -> Any:
            def function(*args: Any) -> Any:
                self.calls.append((name, args))
                return value(*args) if callable(value) else value

            return function

        return {
            "load_user": called(
                "load_user", lambda uid: {"email": f"u{uid}@x", "phone": f"+{uid}"}
            ),
            "send_welcome": called("send_welcome"),
            "send_sms": called("send_sms"),
            "send_tips": called("send_tips"),
            "charge_card": called("charge_card", 12.5),  # euros
            "charge_card_cents": called("charge_card_cents", 1250),
            "send_receipt": called("send_receipt"),
            "order_total": called("order_total", 99),
            "send_invoice": called("send_invoice"),
        }

    def count(self, name: str) -> Counter[tuple[Any, ...]]:
        return Counter(args for called, args in self.calls if called == name)


@pytest.fixture
def reader() -> Iterator[Reader]:
    before = registry.all_versions()
    yield Reader()
    for definition in registry.all_versions():
        if definition not in before:
            registry.unregister(definition.name, definition.version)


def deploy(index: int, reader: Reader, code: str | None = None) -> dict[str, Any]:
    """Block ``index`` of the guide becomes the code of module ``MODULE``."""
    namespace = types.ModuleType(MODULE).__dict__
    namespace.update(reader.stubs())
    exec(
        compile(code or guide_blocks()[index][1], f"changing-code.md block {index}", "exec"),
        namespace,
    )
    return namespace


def test_add_a_step_behind_a_patch_then_deprecate_it(
    durable_jobs: InlineJobs, reader: Reader
) -> None:
    deploy(0, reader)
    asleep = durable_jobs.enqueue("docs.onboarding", 1)
    durable_jobs.drain()
    assert durable_jobs.refresh(asleep).status == RunStatus.SLEEPING
    queued = durable_jobs.enqueue("docs.onboarding", 2)  # not started at the deploy

    deploy(1, reader)  # + send-sms behind ctx.patched("welcome-sms")
    fresh = durable_jobs.enqueue("docs.onboarding", 3)
    durable_jobs.drain()
    durable_jobs.advance("3d")
    for run in (asleep, queued, fresh):
        assert durable_jobs.refresh(run).status == RunStatus.SUCCEEDED
    assert reader.count("send_sms") == Counter({("+2",): 1, ("+3",): 1})  # not 3 days late
    assert reader.count("send_welcome")["u1@x",] == 1  # replayed on resume, sent once
    answer = {run.pk: durable_jobs.step(run, "patch:welcome-sms").output for run in (asleep, fresh)}
    assert answer == {asleep.pk: False, fresh.pk: True}

    parked = durable_jobs.enqueue("docs.onboarding", 4)  # recorded True, then sleeps
    durable_jobs.drain()
    deploy(2, reader)  # the old path deleted, the patch deprecated
    later = durable_jobs.enqueue("docs.onboarding", 5)
    durable_jobs.advance("3d")
    assert durable_jobs.refresh(parked).unreached_steps == []  # its answer counts as reached
    assert reader.count("send_sms") == Counter({("+2",): 1, ("+3",): 1, ("+4",): 1, ("+5",): 1})
    assert [s.name for s in durable_jobs.steps(later)] == [
        "load-user", "send-welcome", "send-sms", "sleep:3d", "send-tips"
    ]  # fmt: skip


def test_a_removed_step_is_reported_on_the_runs_it_had_run_for(
    durable_jobs: InlineJobs, reader: Reader
) -> None:
    deploy(0, reader)
    asleep = durable_jobs.enqueue("docs.onboarding", 1)
    durable_jobs.drain()
    deploy(3, reader)  # send-welcome removed
    fresh = durable_jobs.enqueue("docs.onboarding", 2)
    durable_jobs.advance("3d")
    assert durable_jobs.refresh(asleep).unreached_steps == ["send-welcome"]
    assert durable_jobs.refresh(fresh).unreached_steps == []
    assert reader.count("send_tips") == Counter({("u1@x",): 1, ("u2@x",): 1})


def test_a_new_meaning_under_a_new_name_keeps_old_outputs_read_the_old_way(
    durable_jobs: InlineJobs, reader: Reader
) -> None:
    deploy(4, reader)
    old = durable_jobs.enqueue("docs.checkout", 7)
    durable_jobs.drain()  # charged in euros, asleep for an hour
    deploy(5, reader)
    new = durable_jobs.enqueue("docs.checkout", 8)
    durable_jobs.advance("1h")
    assert durable_jobs.refresh(old).status == durable_jobs.refresh(new).status == "succeeded"
    assert reader.count("send_receipt") == Counter({(7, 1250.0): 1, (8, 1250): 1})
    assert reader.count("charge_card") == Counter({(7,): 1})  # replayed, not charged again
    assert reader.count("charge_card_cents") == Counter({(8,): 1})


def test_new_arguments_in_a_new_version_beside_the_old_one(
    durable_jobs: InlineJobs, reader: Reader
) -> None:
    code = guide_blocks()[6][1]
    version_one = code[: code.index('@job(name="docs.invoice", version=2)')]
    deploy(6, reader, version_one)  # before the deploy: version 1 alone
    old = durable_jobs.enqueue("docs.invoice", 7)
    namespace = deploy(6, reader)
    new = namespace["invoice"].enqueue(8, "USD")  # the old handle starts version 2
    assert (old.job_version, new.job_version) == (1, 2)
    pending = {(v.job_name, v.version): v.unfinished for v in versions.listing(durable_jobs.now)}
    assert pending[("docs.invoice", 1)] == pending[("docs.invoice", 2)] == 1
    durable_jobs.drain()
    assert reader.count("send_invoice") == Counter({(7, 99, "EUR"): 1, (8, 99, "USD"): 1})
    assert JobRun.objects.get(pk=old.pk).job_version == 1
    pending = {(v.job_name, v.version): v.unfinished for v in versions.listing(durable_jobs.now)}
    assert pending[("docs.invoice", 1)] == 0  # version 1 may leave the code now
