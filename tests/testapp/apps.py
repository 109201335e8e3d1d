from django.apps import AppConfig


class TestappConfig(AppConfig):
    """Models and jobs used only by the test suite."""

    name = "tests.testapp"
    label = "testapp"
    default_auto_field = "django.db.models.BigAutoField"
