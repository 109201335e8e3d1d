"""The testing guide's samples (docs/how-to/testing.md) pass as written against the
example project (a database); the docs' other samples are checked without one
(tests/unit/test_docs_examples.py)."""

import types

import pytest

from django_durable_jobs.testing import InlineJobs
from tests.docs_pages import block_under

PAGE = "docs/how-to/testing.md"


@pytest.mark.django_db
def test_the_testing_guide_s_pytest_sample_passes_on_the_example_project() -> None:
    """The sample tests the example project's shop, imported as the test settings
    install it (``example_project.shop``)."""
    code = block_under(PAGE, "Testing your jobs", 0)
    code = code.replace("from shop.", "from example_project.shop.")
    namespace = types.ModuleType("docs_testing").__dict__
    exec(compile(code, PAGE, "exec"), namespace)
    tests = [fn for name, fn in namespace.items() if name.startswith("test_")]
    assert len(tests) == 2
    for test in tests:
        with InlineJobs() as durable_jobs:
            test(durable_jobs)


@pytest.mark.django_db
def test_the_testing_guide_s_unittest_sample_starts_and_stops_its_jobs() -> None:
    code = block_under(PAGE, "Testing your jobs", 1)
    namespace = types.ModuleType("docs_testing_unittest").__dict__
    exec(compile(code, PAGE, "exec"), namespace)
    case = namespace["OnboardingTests"]("setUp")
    case.setUp()
    assert isinstance(case.jobs, InlineJobs) and case.jobs.clock is not None
    case.doCleanups()
