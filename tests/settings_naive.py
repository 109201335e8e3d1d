"""The test settings of a project that keeps Django's ``USE_TZ = False``, in a time
zone that is not UTC (tests/integration/test_naive_time.py starts workers with it)."""

from tests.settings import *  # noqa: F403

USE_TZ = False
TIME_ZONE = "Europe/Paris"
