"""The ``durable_jobs`` pytest fixture, registered as a pytest plugin by the package.

It imports nothing of Django until a test asks for the fixture, so installing the
package never disturbs a test run that does not use it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from .testing import InlineJobs


@pytest.fixture
def durable_jobs(db: None) -> Iterator[InlineJobs]:
    """Run jobs inline against the test database on a fake clock (``InlineJobs``).

    >>> def test_flow(durable_jobs):  # doctest: +SKIP
    ...     run = durable_jobs.run(onboarding, customer_id=42)
    ...     assert run.status == "succeeded"
    """
    from .testing import InlineJobs

    with InlineJobs() as jobs:
        yield jobs
