"""The README's "Testing your jobs" sample runs as written against the example project
(a database); the README's other samples are checked without one
(tests/unit/test_readme_examples.py)."""

import pytest

from django_durable_jobs.testing import InlineJobs
from tests.unit.test_readme_examples import block_of, run_block


@pytest.mark.django_db
def test_the_testing_helpers_sample_passes_on_the_example_project() -> None:
    namespace = run_block(block_of("Testing your jobs"), "readme_testing")
    tests = [fn for name, fn in namespace.items() if name.startswith("test_")]
    assert len(tests) == 2
    for test in tests:
        with InlineJobs() as durable_jobs:
            test(durable_jobs)
