from django.apps import AppConfig


class TestappConfig(AppConfig):
    """Models and jobs used only by the test suite."""

    name = "tests.testapp"
    label = "testapp"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from .clocks import install_from_environment

        install_from_environment()  # worker processes of tests/processes/verbs/test_schedules.py
